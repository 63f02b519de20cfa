"""Small kernels that pin down the interpreter's emulated semantics (tests/test_interpret.py).
They are real cuTile kernels: test_interpret.py also compiles some of them with tileiras to
check that cuTile agrees with the interpreter on what is an error."""

import cuda.tile as ct

from cutile_rms._tile import tile_kernel

ZERO = ct.PaddingMode.ZERO
UNDETERMINED = ct.PaddingMode.UNDETERMINED


@tile_kernel
def load_zero(src, dst, TI: ct.Constant[int], TJ: ct.Constant[int]):
    ct.store(dst, (0, 0), ct.load(src, (TI, TJ), (4, 8), padding_mode=ZERO))


@tile_kernel
def load_undetermined(src, dst):
    ct.store(dst, (0, 0), ct.load(src, (0, 0), (4, 8), padding_mode=UNDETERMINED))


@tile_kernel
def load_non_pow2(src, dst):
    ct.store(dst, (0, 0), ct.load(src, (0, 0), (3, 8), padding_mode=ZERO))


@tile_kernel
def store_partial(src, dst):
    ct.store(dst, (0, 0), ct.load(src, (0, 0), (4, 8)))


@tile_kernel
def add_literal(x, out):
    ct.store(out, (0,), ct.load(x, (0,), (8,)) + 1.5)  # a literal takes the tile's dtype


@tile_kernel
def add_runtime_float(x, out, s):
    ct.store(out, (0,), ct.load(x, (0,), (8,)) + s)  # a runtime float is fp32: bf16 + fp32 -> fp32


@tile_kernel
def add_runtime_float_cast(x, out, s):
    ct.store(out, (0,), ct.astype(ct.load(x, (0,), (8,)) + s, out.dtype))


@tile_kernel
def sum_in_dtype(x, out):
    ct.store(out, (0,), ct.reshape(ct.sum(ct.load(x, (0,), (2,))), (1,)))


@tile_kernel
def cast_to(x, out):
    ct.store(out, (0,), ct.astype(ct.load(x, (0,), (4,)), out.dtype))


@tile_kernel
def gather_scatter(src, dst, N: ct.Constant[int]):
    idx = ct.arange(N, dtype=ct.int32) * 2 - 1  # -1, 1, 3, ...: the first and the last lanes fall outside
    keep = ct.arange(N, dtype=ct.int32) != 2
    v = ct.gather(src, idx, mask=keep, padding_value=-7.0)
    ct.scatter(dst, idx + 1, v)


@tile_kernel
def block_ids(out):
    ct.store(
        out, (ct.bid(0), ct.bid(1)), ct.full((1, 1), ct.bid(0) * 10 + ct.bid(1) + ct.num_blocks(1) * 100, ct.int32)
    )


@tile_kernel
def uses_matmul(a, b, c):
    ct.store(c, (0, 0), ct.matmul(ct.load(a, (0, 0), (16, 16)), ct.load(b, (0, 0), (16, 16))))


@tile_kernel
def copy_unchecked(src, dst):
    """check_bounds=False on both sides: the caller promises (4, 8) tiles inside both arrays."""
    ct.store(dst, (0, 0), ct.load(src, (0, 0), (4, 8), check_bounds=False), check_bounds=False)
