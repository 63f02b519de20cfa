"""CPU tier: the interpreter's emulated cuTile semantics (padding, bounds, promotion, rounding,
reductions, gather/scatter, grids, unsupported operations)."""

import math

import cuda.tile as ct
import ml_dtypes
import numpy as np
import pytest

from cutile_rms.interpret import InterpreterError, InterpreterUnsupportedError, launch, promote
from tests import interp_kernels as K

BF16 = ml_dtypes.bfloat16


def test_load_pads_with_zero_and_counts_tiles():
    src = np.arange(1, 3 * 13 + 1, dtype=np.float32).reshape(3, 13)
    dst = np.full((4, 8), np.nan, np.float32)
    launch((1,), K.load_zero, (src, dst, 0, 1))  # tile (0, 1): columns 8..15 of which 8..12 exist
    expected = np.zeros((4, 8), np.float32)
    expected[:3, :5] = src[:, 8:13]
    np.testing.assert_array_equal(dst, expected)


def test_undetermined_padding_is_nan():
    src = np.ones((3, 5), np.float32)
    dst = np.zeros((4, 8), np.float32)
    launch((1,), K.load_undetermined, (src, dst))
    assert np.isnan(dst[3]).all() and np.isnan(dst[:, 5:]).all() and (dst[:3, :5] == 1).all()


def test_wholly_out_of_bounds_tile_raises():
    src = np.ones((3, 5), np.float32)
    with pytest.raises(InterpreterError, match="entirely outside"):
        launch((1,), K.load_zero, (src, np.zeros((4, 8), np.float32), 1, 0))


def test_tile_dims_must_be_powers_of_two():
    with pytest.raises(InterpreterError, match="powers of two"):
        launch((1,), K.load_non_pow2, (np.ones((4, 8), np.float32), np.zeros((4, 8), np.float32)))


def test_out_of_bounds_store_lanes_are_dropped():
    src = np.arange(32, dtype=np.float32).reshape(4, 8)
    dst = np.full((3, 5), -1.0, np.float32)
    launch((1,), K.store_partial, (src, dst))
    np.testing.assert_array_equal(dst, src[:3, :5])


def test_literal_takes_the_tile_dtype():
    x = np.array([1.0] * 8, BF16)
    out = np.zeros(8, BF16)
    launch((1,), K.add_literal, (x, out))  # stays bf16: storing into bf16 is allowed
    np.testing.assert_array_equal(out.astype(np.float32), np.full(8, 2.5, np.float32))


def test_runtime_float_is_fp32_and_store_does_not_narrow():
    x = np.array([1.0] * 8, BF16)
    with pytest.raises(InterpreterError, match="only when widening"):
        launch((1,), K.add_runtime_float, (x, np.zeros(8, BF16), 0.25))
    out32 = np.zeros(8, np.float32)
    launch((1,), K.add_runtime_float, (x, out32, 2.0**-12))  # fp32 math: the tiny addend survives
    assert (out32 == np.float32(1.0 + 2.0**-12)).all()
    out16 = np.zeros(8, BF16)
    launch((1,), K.add_runtime_float_cast, (x, out16, 2.0**-12))  # explicit cast rounds it away
    assert (out16.astype(np.float32) == 1.0).all()


DTYPES = [ct.float16, ct.bfloat16, ct.float32, ct.float64, ct.int32, ct.int64, ct.bool_]


@pytest.mark.parametrize("a", DTYPES, ids=str)
@pytest.mark.parametrize("b", DTYPES, ids=str)
def test_promotion_matches_cutile(a, b):
    from cuda.tile._datatype import promote_dtypes  # cuTile's own rule

    try:
        expected = promote_dtypes(a, b)
    except Exception:
        expected = None
    try:
        got = promote(a, b)
    except InterpreterError:
        got = None
    assert got == expected


def test_sum_accumulates_in_the_tile_dtype():
    out = np.zeros(1, BF16)
    launch((1,), K.sum_in_dtype, (np.array([256.0, 1.0], BF16), out))
    assert float(out[0]) == 256.0  # 257 is not a bf16 number: the bf16 sum rounds it away
    out32 = np.zeros(1, np.float32)
    launch((1,), K.sum_in_dtype, (np.array([256.0, 1.0], np.float32), out32))
    assert out32[0] == 257.0


def test_astype_rounds_to_nearest_even():
    x = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, -(1 + 2.0**-8), 3.0e38], np.float32)
    out = np.zeros(4, BF16)
    launch((1,), K.cast_to, (x, out))
    got = out.astype(np.float32)
    assert got[0] == 1.0 and got[1] == 1 + 2.0**-6 and got[2] == -1.0  # ties go to the even mantissa
    assert math.isfinite(got[3])


def test_gather_and_scatter_bounds_and_masks():
    src = np.arange(10, dtype=np.float32) * 10
    dst = np.full(17, -1.0, np.float32)
    launch((1,), K.gather_scatter, (src, dst, 8))
    # lanes read src[-1, 1, 3, 5, 7, 9, 11, 13]: lane 0 and lanes 6, 7 are out of bounds, lane 2 masked
    expected_v = [-7.0, 10.0, -7.0, 50.0, 70.0, 90.0, -7.0, -7.0]
    expected = np.full(17, -1.0, np.float32)
    for lane, v in enumerate(expected_v):
        expected[2 * lane] = v  # written at idx + 1 = 2 * lane
    np.testing.assert_array_equal(dst, expected)


def test_grid_block_ids():
    out = np.full((3, 2), -1, np.int32)
    launch((3, 2), K.block_ids, (out,))
    np.testing.assert_array_equal(out, np.array([[200, 201], [210, 211], [220, 221]], np.int32))


def test_unsupported_operation_is_named():
    a = np.ones((16, 16), np.float32)
    with pytest.raises(InterpreterUnsupportedError, match="ct.matmul is not supported"):
        launch((1,), K.uses_matmul, (a, a, np.zeros((16, 16), np.float32)))


def test_wrong_argument_count():
    with pytest.raises(TypeError, match="takes 2 arguments"):
        launch((1,), K.store_partial, (np.ones((4, 8), np.float32),))


@pytest.mark.compile
def test_cutile_agrees_on_what_is_an_error():
    """The kernels the interpreter accepts compile with tileiras; the narrowing store it
    rejects is rejected by cuTile's compiler too."""
    from cuda.tile.compilation import CallingConvention, KernelSignature, export_kernel

    from tests.aot import F32, arr

    def compile_(kernel, params):
        sig = KernelSignature(params, calling_convention=CallingConvention.cutile_python_v1())
        import io

        export_kernel(kernel, [sig], io.BytesIO(), gpu_code="sm_90", output_format="cubin")

    compile_(K.add_literal, [arr("bfloat16", 1), arr("bfloat16", 1)])
    compile_(K.add_runtime_float, [arr("bfloat16", 1), arr("float32", 1), F32])
    with pytest.raises(Exception, match="(?i)cast|convert|dtype|type"):
        compile_(K.add_runtime_float, [arr("bfloat16", 1), arr("bfloat16", 1), F32])


def test_check_bounds_false_holds_the_kernel_to_its_promise():
    """cuTile skips the bounds check when told to (undefined behaviour past the edge); the
    interpreter copies whole tiles and raises on a tile that sticks out."""
    src = np.arange(32, dtype=np.float32).reshape(4, 8)
    dst = np.zeros((4, 8), np.float32)
    launch((1,), K.copy_unchecked, (src, dst))
    np.testing.assert_array_equal(dst, src)
    with pytest.raises(InterpreterError, match="check_bounds=False"):
        launch((1,), K.copy_unchecked, (src[:3], dst))
    with pytest.raises(InterpreterError, match="check_bounds=False"):
        launch((1,), K.copy_unchecked, (src, np.zeros((4, 7), np.float32)))
