"""The CuPy API (``cutile_rms.cupy``): against the float64 reference, bitwise against the torch
API on the same data, on CuPy's current stream, zero-copy with torch, and usable without torch.

The CPU tier runs the same module on NumPy arrays through the interpreter; the GPU tier needs
CuPy (``pip install cutile-rms[cupy]``).
"""

import contextlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

import cutile_rms.cupy as crms
from cutile_rms import interpret, rms_norm_backward, rms_norm_forward
from tests.reference import check_all, dw_term_scale, make_inputs, rms_norm_ref, rms_norm_ref_grads, tolerances

DTYPES = [torch.float32, torch.float16]  # NumPy and CuPy have no native bfloat16 arithmetic


@pytest.fixture(params=[pytest.param("cupy", marks=pytest.mark.gpu), "numpy"])
def xp(request):
    """The array module: CuPy on the GPU, or NumPy with the kernels interpreted on the CPU."""
    if request.param == "numpy":
        with interpret.interpreting():
            yield np
    else:
        yield pytest.importorskip("cupy")


def _to(xp, t):
    """A torch tensor's data as an array of xp (a copy)."""
    return np.ascontiguousarray(t.cpu().numpy()) if xp is np else xp.asarray(t.cpu().numpy())


def _torch(xp, a):
    return torch.from_numpy(np.asarray(a)) if xp is np else torch.from_dlpack(a).cpu()


@pytest.mark.parametrize("has_weight,offset", [(True, 0.0), (True, 1.0), (False, 0.0)], ids=["w", "w+1", "no-w"])
@pytest.mark.parametrize("shape", [(3, 7, 200), (5, 9000), (3, 7, 64), (2, 3, 24577), (1, 4096), (2, 2048)],
                         ids=["tile", "chunked", "short", "flat", "one-row", "few-rows"])  # fmt: skip
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cupy_matches_reference_and_torch(xp, dtype, shape, has_weight, offset, gen):
    if shape[-1] == 24577:  # the flat rows kernels' shape: their rules take it (the backward's for 16-bit rows)
        from cutile_rms.rows import plan as rows_plan

        assert rows_plan.flat_fit(24577, 2, num_sms=132) and rows_plan.flat_fit(24577, 4, num_sms=132)
        assert rows_plan.flat_fit(24577, 2, "backward", num_sms=132)
        assert not rows_plan.flat_fit(24577, 4, "backward", num_sms=132)
    x, dy, w = make_inputs(shape, dtype, "cpu", has_weight=has_weight, offset=offset, generator=gen)
    xa, dya = _to(xp, x), _to(xp, dy)
    wa = None if w is None else _to(xp, w)
    snapshot = [a.copy() for a in (xa, dya)]
    y, rstd = crms.rms_norm(xa, wa, 1e-6, offset=offset, return_rstd=True)
    dx, dw = crms.rms_norm_backward(xa, dya, wa, rstd, offset=offset)
    assert crms.rms_norm(xa, wa, 1e-6, offset=offset).shape == x.shape
    out = {"y": _torch(xp, y), "rstd": _torch(xp, rstd), "dx": _torch(xp, dx)}
    ry, rr, rdx, rdw = rms_norm_ref_grads(x, dy, w, 1e-6, offset)
    refs = {"y": ry, "rstd": rr, "dx": rdx}
    if w is not None:
        out["dw"], refs["dw"] = _torch(xp, dw), rdw
    else:
        assert dw is None
    check_all(out, refs, tolerances(dtype, dtype, "llama"), {"dw": dw_term_scale(x, dy, 1e-6)})
    assert all((a == b).all() for a, b in zip((xa, dya), snapshot, strict=True))  # inputs untouched

    # The torch API on the same data gives the same bits (same launchers, same kernels).
    device = "cpu" if xp is np else "cuda"
    ctx = interpret.interpreting() if xp is np else torch.cuda.device(0)
    with ctx:
        xt, dyt = x.to(device), dy.to(device)
        wt = None if w is None else w.to(device)
        yt, rt = rms_norm_forward(xt, wt, offset=offset)
        dxt, dwt = rms_norm_backward(xt, dyt, wt, rt, offset=offset)
    assert torch.equal(out["y"], yt.cpu()) and torch.equal(out["dx"], dxt.cpu())
    assert w is None or torch.equal(out["dw"], dwt.cpu())


def test_padded_rows_and_other_layouts(xp, gen):
    base, _, w = make_inputs((64, 512), torch.float32, "cpu", generator=gen)
    ba, wa = _to(xp, base), _to(xp, w[:256])
    for view in (ba[:, :256], ba[:, ::2]):  # padded row stride (read in place), column step (copied)
        y = crms.rms_norm(view, wa)
        ref = rms_norm_ref(_torch(xp, view.copy()), w[:256])[0]
        check_all({"y": _torch(xp, y)}, {"y": ref}, tolerances(torch.float32, torch.float32, "llama"))
        assert y.flags.c_contiguous


def test_validation(xp):
    x = xp.ones((4, 64), dtype=np.float32)
    with pytest.raises(TypeError, match="CuPy array"):
        crms.rms_norm([[1.0, 2.0]])
    with pytest.raises(TypeError, match="non-floating"):
        crms.rms_norm(xp.ones((4, 64), dtype=np.int32))
    with pytest.raises(ValueError, match="shape"):
        crms.rms_norm(x, xp.ones(32, dtype=np.float32))
    with pytest.raises(ValueError, match="empty last dimension"):
        crms.rms_norm(xp.ones((4, 0), dtype=np.float32))
    with pytest.raises(ValueError, match="offset"):
        crms.rms_norm(x, None, offset=1.0)
    with pytest.raises(ValueError, match="casting_mode"):
        crms.rms_norm(x, casting_mode="fp8")
    _, rstd = crms.rms_norm(x, return_rstd=True)
    with pytest.raises(ValueError, match="dy must have"):
        crms.rms_norm_backward(x, xp.ones((4, 32), dtype=np.float32), None, rstd)
    with pytest.raises(TypeError, match="dy must have x's dtype"):
        crms.rms_norm_backward(x, xp.ones((4, 64), dtype=np.float16), None, rstd)
    with pytest.raises(ValueError, match="rstd must have shape"):
        crms.rms_norm_backward(x, x, None, rstd[:2])


def test_numpy_refused_outside_interpret_mode():
    with pytest.raises(ValueError, match="interpret mode"):
        crms.rms_norm(np.ones((2, 8), dtype=np.float32))


def test_cupy_module_needs_no_torch():
    """``import cutile_rms.cupy`` and a call (NumPy, interpreted) with torch made unimportable."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import numpy as np, cutile_rms, cutile_rms.cupy as crms\n"
        "from cutile_rms import interpret\n"
        "x = np.random.default_rng(0).standard_normal((6, 40)).astype(np.float32)\n"
        "with interpret.interpreting():\n"
        "    y = crms.rms_norm(x)\n"
        "ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6)\n"
        "assert np.allclose(y, ref, rtol=1e-5, atol=1e-6)\n"
        "try:\n"
        "    cutile_rms.rms_norm\n"
        "except ImportError:\n"
        "    print('torch API needs torch: ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "torch API needs torch: ok" in out.stdout


@pytest.mark.gpu
def test_cupy_current_stream_and_zero_copy(gen):
    """The launch goes to CuPy's current stream (work queued before it there is seen), and
    arrays cross to and from torch without a copy."""
    cupy = pytest.importorskip("cupy")
    x_new, _, w = make_inputs((512, 4096), torch.float16, "cuda", generator=gen)
    xa = cupy.full(x_new.shape, cupy.nan, dtype=np.float16)
    wa = cupy.from_dlpack(w)  # zero-copy from torch
    assert wa.data.ptr == w.data_ptr()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        with torch.cuda.stream(torch.cuda.ExternalStream(stream.ptr)):
            torch.cuda._sleep(20_000_000)  # ~10 ms on CuPy's stream
        xa[...] = cupy.from_dlpack(x_new)
        y = crms.rms_norm(xa, wa)
    stream.synchronize()
    yt = torch.from_dlpack(y)  # zero-copy to torch
    assert yt.data_ptr() == y.data.ptr and yt.device == x_new.device
    ref = rms_norm_ref(x_new, w)[0]
    check_all({"y": yt}, {"y": ref}, tolerances(torch.float16, torch.float16, "llama"))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_word_views_for_the_packed_backward(dtype):
    """_as_words views a 16-bit array as int32 pairs in place, and declines (None) where a
    word view cannot exist: an odd start, an odd row length, a non-16-bit dtype."""
    a = np.arange(24, dtype=np.float32).astype(dtype).reshape(3, 8)
    w = crms._as_words(a)
    assert w.dtype == np.int32 and w.shape == (3, 4) and np.shares_memory(w, a)
    assert np.array_equal(w.view(dtype), a)
    assert crms._as_words(a[:, 1:7]) is None  # starts one element into a word
    assert crms._as_words(a[:, :7]) is None  # odd row length
    assert crms._as_words(a.astype(np.float32)) is None


@pytest.mark.filterwarnings("ignore::cutile_rms.ExperimentalKernelWarning")
@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_cupy_fp8_matches_torch_bitwise(xp, fmt, static, gen):
    """rms_norm_fp8 for CuPy: the FP8 bits (as int8) and the scales or amax are the torch
    API's on the same data (one kernel); inputs untouched; bad arguments raise."""
    from cutile_rms.experimental import rms_norm_fp8

    x, _, w = make_inputs((37, 1000), torch.float16, "cpu", generator=gen)
    s = torch.tensor([0.02], dtype=torch.float32) if static else None
    xa, wa = _to(xp, x), _to(xp, w)
    before = xa.copy()
    y, stat = crms.rms_norm_fp8(xa, wa, 1e-6, scale=None if s is None else _to(xp, s), fmt=fmt)
    assert y.dtype == np.int8 and y.shape == x.shape
    dtype = torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2
    with interpret.interpreting() if xp is np else contextlib.nullcontext():
        ref = rms_norm_fp8(x if xp is np else x.cuda(), w if xp is np else w.cuda(), 1e-6,
                           scale=None if s is None else (s if xp is np else s.cuda()), out_dtype=dtype)  # fmt: skip
    assert torch.equal(_torch(xp, y), ref.y.cpu().view(torch.int8))
    assert torch.equal(_torch(xp, stat), (ref.amax if static else ref.scale).cpu())
    assert (xa == before).all()
    with pytest.raises(ValueError, match="fmt"):
        crms.rms_norm_fp8(xa, wa, fmt="e3m4")
    with pytest.raises(TypeError, match="scale"):
        crms.rms_norm_fp8(xa, wa, scale=xa)
