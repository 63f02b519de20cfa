"""Experimental tier: the fused residual-add RMSNorm against a float64 reference.

    residual_out = x + residual (fp32 sum, rounded once to residual_dtype)
    y            = rms_norm(residual_out) * (offset + weight), in x's dtype

Every output is checked: y, residual_out, and the gradients of x, residual and weight, with
outputs NaN-poisoned where the API lets us (the in-place variant) and fresh random inputs.
Runs on the GPU (``gpu``) and through the interpreter on the CPU (CI).
"""

import warnings

import pytest
import torch

from cutile_rms import ExperimentalKernelWarning, _launch, interpret, rms_norm
from cutile_rms._tile import python_function
from cutile_rms.experimental import fused_add_rms_norm, fused_add_rms_norm_
from tests.reference import FP32_ARITH_RTOL, UNIT_ROUNDOFF, Y_ROUNDINGS, Tol, check_all, dw_term_scale

pytestmark = pytest.mark.experimental

EPS = 1e-6

# (x dtype, residual dtype, residual_dtype argument)
DTYPE_CASES = [
    (torch.bfloat16, torch.bfloat16, None),
    (torch.float16, torch.float16, None),
    (torch.float32, torch.float32, None),
    (torch.bfloat16, torch.float32, None),  # fp32 residual stream beside bf16 activations
    (torch.bfloat16, torch.bfloat16, torch.float32),  # the sum kept in fp32
]
DTYPE_IDS = ["bf16", "fp16", "fp32", "bf16+fp32stream", "bf16->fp32sum"]


def fused_tolerances(x_dtype, r_dtype, s_dtype, w_dtype, casting):
    """Tolerances in the style of tests/reference.py. residual_out: one rounding of an fp32 sum
    (the reference rounds the exact sum: at most one ulp apart). y: the rms_norm roundings of
    residual_out's dtype, then, when y's dtype is narrower, one more rounding to it. Gradients:
    fp32 math, one rounding to each output dtype; dw also sees xhat rounded to s's dtype
    (llama/none casting) in every term."""
    us, ux, ur = UNIT_ROUNDOFF[s_dtype], UNIT_ROUNDOFF[x_dtype], UNIT_ROUNDOFF[r_dtype]
    uw = UNIT_ROUNDOFF[w_dtype] if w_dtype is not None else 0.0
    if s_dtype == torch.float32:
        casting = "gemma"
    y_rounds = Y_ROUNDINGS[casting] * us + (ux if ux > us else 0.0)
    return {
        "y": Tol(y_rounds + FP32_ARITH_RTOL),
        "residual_out": Tol(us + FP32_ARITH_RTOL),
        "dx": Tol(2 * ux + FP32_ARITH_RTOL),
        "dresidual": Tol(2 * ur + FP32_ARITH_RTOL),
        "dw": Tol(2 * uw + (2 * us if casting != "gemma" else 0.0) + FP32_ARITH_RTOL),
    }


def reference(x, r, w, dy, ds, s_dtype, offset):
    """float64: residual_out is the exact sum rounded to s_dtype (what the kernel stores); the
    norm and all gradients are computed from it in float64; the sum's gradient passes to both
    inputs unchanged."""
    s = (x.double() + r.double()).to(s_dtype)
    sd = s.double().requires_grad_()
    wd = None if w is None else w.detach().double().requires_grad_()
    y = sd * torch.rsqrt(sd.pow(2).mean(-1, keepdim=True) + EPS)
    if wd is not None:
        y = y * (offset + wd)
    outputs, grads_out = [y], [dy.double()]
    if ds is not None:
        outputs.append(sd)
        grads_out.append(ds.double())
    grads = torch.autograd.grad(outputs, [sd] + ([wd] if wd is not None else []), grads_out)
    return y.detach(), s, grads[0], (grads[1] if wd is not None else None)


def make(shape, x_dtype, r_dtype, dev, gen, has_weight=True, offset=0.0):
    def rnd(shp, scale=1.0):
        return (scale * torch.randn(shp, generator=gen)).to(dev)

    x = rnd(shape).to(x_dtype)
    r = rnd(shape, 2.0).to(r_dtype)
    w = None
    if has_weight:
        w = (rnd(shape[-1:], 0.1) + (1.0 - offset)).to(x_dtype)
    return x, r, w


@pytest.mark.parametrize("shape", [(1, 123), (37, 760), (2003, 1024), (128, 2048), (5, 20000)], ids=str)
@pytest.mark.parametrize("x_dtype,r_dtype,s_arg", DTYPE_CASES, ids=DTYPE_IDS)
def test_forward_and_backward(dev, shape, x_dtype, r_dtype, s_arg, gen):
    """Odd M, non-power-of-two N, a large-N (two-pass) path; y, residual_out and all three
    gradients, with both outputs receiving gradients."""
    x, r, w = make(shape, x_dtype, r_dtype, dev, gen)
    s_dtype = s_arg or r_dtype
    x0, r0 = x.clone(), r.clone()
    xg, rg, wg = (t.clone().requires_grad_() for t in (x, r, w))
    y, s = fused_add_rms_norm(xg, rg, wg, EPS, residual_dtype=s_arg)
    assert y.dtype == x_dtype and s.dtype == s_dtype and y.is_contiguous() and s.is_contiguous()
    dy = torch.randn(shape, generator=gen).to(dev, x_dtype)
    ds = torch.randn(shape, generator=gen).to(dev, s_dtype)
    torch.autograd.backward([y, s], [dy, ds])
    ry, rs, rds, rdw = reference(x, r, w, dy, ds, s_dtype, 0.0)
    tols = fused_tolerances(x_dtype, r_dtype, s_dtype, w.dtype, "llama")
    check_all(
        {"y": y, "residual_out": s, "dx": xg.grad, "dresidual": rg.grad, "dw": wg.grad},
        {"y": ry, "residual_out": rs, "dx": rds, "dresidual": rds, "dw": rdw},
        tols,
        {"dw": dw_term_scale(rs, dy, EPS)},
    )
    assert xg.grad.dtype == x_dtype and rg.grad.dtype == r_dtype
    assert torch.equal(x, x0) and torch.equal(r, r0)  # inputs untouched


@pytest.mark.parametrize(
    "casting,offset,has_weight", [("gemma", 1.0, True), ("none", 0.0, True), ("llama", 0.0, False)], ids=str
)
@pytest.mark.parametrize("shape", [(33, 4096), (3, 17000)], ids=str)
def test_variants(dev, casting, offset, has_weight, shape, gen):
    x, r, w = make(shape, torch.bfloat16, torch.bfloat16, dev, gen, has_weight=has_weight, offset=offset)
    xg, rg = x.clone().requires_grad_(), r.clone().requires_grad_()
    wg = None if w is None else w.clone().requires_grad_()
    y, s = fused_add_rms_norm(xg, rg, wg, EPS, offset=offset, casting_mode=casting)
    dy = torch.randn(shape, generator=gen).to(dev, x.dtype)
    y.backward(dy)  # residual_out's gradient absent (the last layer)
    ry, rs, rds, rdw = reference(x, r, w, dy, None, torch.bfloat16, offset)
    tols = fused_tolerances(x.dtype, r.dtype, torch.bfloat16, None if w is None else w.dtype, casting)
    out = {"y": y, "residual_out": s, "dx": xg.grad, "dresidual": rg.grad}
    ref = {"y": ry, "residual_out": rs, "dx": rds, "dresidual": rds}
    if w is not None:
        out["dw"], ref["dw"] = wg.grad, rdw
    check_all(out, ref, tols, {"dw": dw_term_scale(rs, dy, EPS)})


def test_y_is_rms_norm_of_residual_out(dev, gen):
    """residual_out is exactly x + residual rounded once, and y is rms_norm(residual_out): the
    same helper math as the core kernel (within twice the tolerance, not bitwise: the two
    compiled kernels may order fp32 sums differently)."""
    x, r, w = make((64, 2048), torch.bfloat16, torch.bfloat16, dev, gen)
    tol = {"y": Tol(2 * fused_tolerances(*(torch.bfloat16,) * 4, "llama")["y"].rtol)}
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            xg = x.clone().requires_grad_(grad)
            y, s = fused_add_rms_norm(xg, r, w, EPS)
            assert torch.equal(s, x + r)
            check_all({"y": y}, {"y": rms_norm(s.detach(), w, EPS).double()}, tol)


@pytest.mark.parametrize("shape", [(37, 760), (5, 20000)], ids=["tile", "chunked"])
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32], ids=str)
def test_in_place_variant(dev, shape, x_dtype, gen):
    """residual becomes the sum, x the normalized output; nothing else is written."""
    x, r, w = make(shape, x_dtype, x_dtype, dev, gen)
    ref_y, ref_s = fused_add_rms_norm(x, r, w, EPS)  # out of place
    xi, ri = x.clone(), r.clone()
    assert fused_add_rms_norm_(xi, ri, w, EPS) is None
    assert torch.equal(ri, ref_s)  # the sum is one correctly rounded addition in both
    exact_y, exact_s, _, _ = reference(x, r, w, torch.zeros_like(x), None, x_dtype, 0.0)
    tols = fused_tolerances(x_dtype, x_dtype, x_dtype, x_dtype, "llama")
    check_all({"y": xi, "residual_out": ri}, {"y": exact_y, "residual_out": exact_s}, tols)
    # y against the out-of-place kernel: another compiled kernel may order its fp32 sums
    # differently (seen on the H200: fp32, two-pass path, last-bit differences), so within
    # twice the tolerance rather than bitwise; each side is within tol of the exact result.
    check_all({"y": xi}, {"y": ref_y.double()}, {"y": Tol(2 * tols["y"].rtol)})


def test_in_place_on_padded_rows_writes_only_the_rows(dev, gen):
    """Views into wider buffers: the padding columns keep their (NaN) contents."""
    n = 640
    xb = torch.full((40, n + 64), float("nan"), device=dev, dtype=torch.float16)
    rb = torch.full((40, n + 64), float("nan"), device=dev, dtype=torch.float16)
    x, r, w = make((40, n), torch.float16, torch.float16, dev, gen)
    xb[:, :n], rb[:, :n] = x, r
    fused_add_rms_norm_(xb[:, :n], rb[:, :n], w, EPS)
    exact_y, exact_s, _, _ = reference(x, r, w, torch.zeros_like(x), None, torch.float16, 0.0)
    tols = fused_tolerances(*(torch.float16,) * 4, "llama")
    check_all({"y": xb[:, :n], "residual_out": rb[:, :n]}, {"y": exact_y, "residual_out": exact_s}, tols)
    assert torch.isnan(xb[:, n:]).all() and torch.isnan(rb[:, n:]).all()


def test_in_place_refuses_unsafe_arguments(dev, gen):
    x, r, w = make((16, 256), torch.bfloat16, torch.bfloat16, dev, gen)
    buf = torch.randn(16, 384, generator=gen).to(dev, torch.bfloat16)
    with pytest.raises(ValueError, match="overlap"):
        fused_add_rms_norm_(buf[:, :256], buf[:, 128:], w)  # x and residual share columns
    with pytest.raises(ValueError, match="overlap"):
        fused_add_rms_norm_(x, x, w)
    with pytest.raises(ValueError, match="weight overlaps"):
        fused_add_rms_norm_(x, r, x[0])
    with pytest.raises(ValueError, match="unit stride"):
        fused_add_rms_norm_(x.t().contiguous().t(), r, w)
    with pytest.raises(RuntimeError, match="inference"):
        fused_add_rms_norm_(x.clone().requires_grad_(), r, w)
    snapshot = buf.clone()
    assert torch.equal(buf, snapshot)


def test_validation(dev):
    x = torch.randn(4, 64, device=dev)
    with pytest.raises(ValueError, match="residual must have x's shape"):
        fused_add_rms_norm(x, torch.randn(4, 32, device=dev))
    with pytest.raises(TypeError, match="residual must be"):
        fused_add_rms_norm(x, torch.ones(4, 64, device=dev, dtype=torch.int32))
    with pytest.raises(TypeError, match="residual_dtype"):
        fused_add_rms_norm(x, x, residual_dtype=torch.float64)
    with pytest.raises(ValueError, match="weight must have shape"):
        fused_add_rms_norm(x, x, torch.ones(32, device=dev))


def test_each_kernel_warns_once(dev, gen):
    """The first launch of each experimental kernel warns, later launches do not (a row the
    row-tile rules leave to the fused kernels: 16-bit, not a multiple of 16 long, but a multiple
    of 16 bytes; rows that are not run on the row tiles, rows.plan.unaligned)."""
    x, r, w = make((8, 248), torch.float16, torch.float16, dev, gen)
    names = [n for n in list(_launch._warned) if ".fused_add." in n]
    for name in names:  # as in a fresh process
        _launch._warned.discard(name)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for _ in range(2):
            fused_add_rms_norm(x, r, w)
    hits = [str(m.message) for m in rec if issubclass(m.category, ExperimentalKernelWarning)]
    assert len(hits) == 1 and "fused_add_fwd_tile_infer" in hits[0]


def test_output_grads_may_be_absent(dev, gen):
    """Only residual_out used downstream: the gradient of y is absent, the sum's passes on."""
    x, r, w = make((20, 300), torch.float32, torch.float32, dev, gen)
    xg, rg = x.clone().requires_grad_(), r.clone().requires_grad_()
    _, s = fused_add_rms_norm(xg, rg, w)
    g = torch.randn(s.shape, generator=gen).to(dev)
    s.backward(g)
    assert torch.equal(xg.grad, g) and torch.equal(rg.grad, g)


@pytest.mark.parametrize("shape", [(37, 1000), (5, 20000), (37, 1024)], ids=["tile", "chunked", "rows"])
@pytest.mark.parametrize("r_dtype,s_arg", [(torch.bfloat16, None), (torch.bfloat16, torch.float32)], ids=str)
def test_post_norm_does_not_write_the_sum(dev, shape, r_dtype, s_arg, gen):
    """store_residual=False (post-norm): y is bitwise the y of the storing forward and
    residual_out is None; with grad the backward still works and matches the storing one."""
    x, r, w = make(shape, torch.bfloat16, r_dtype, dev, gen)
    y_ref, s_ref = fused_add_rms_norm(x, r, w, EPS, residual_dtype=s_arg)
    r0 = r.clone()
    y, s = fused_add_rms_norm(x, r, w, EPS, residual_dtype=s_arg, store_residual=False)
    assert s is None and torch.equal(y, y_ref)
    assert torch.equal(r, r0)  # the sum went nowhere (the residual only names its dtype)
    xg, rg, wg = (t.clone().requires_grad_() for t in (x, r, w))
    y2, s2 = fused_add_rms_norm(xg, rg, wg, EPS, residual_dtype=s_arg, store_residual=False)
    assert s2 is None and torch.equal(y2.detach(), y_ref)
    dy = torch.randn(shape, generator=gen).to(dev, x.dtype)
    grads = torch.autograd.grad(y2, [xg, rg, wg], dy)
    xh, rh, wh = (t.clone().requires_grad_() for t in (x, r, w))
    ref = torch.autograd.grad(fused_add_rms_norm(xh, rh, wh, EPS, residual_dtype=s_arg)[0], [xh, rh, wh], dy)
    assert all(torch.equal(a, b) for a, b in zip(grads, ref, strict=True))


def test_forward_runs_on_row_tiles_where_they_plan_the_row(monkeypatch, gen):
    """Every forward flavour but in place runs on the row-tile forward where its rules plan the
    row for each element size (stream, residual, sum), with results within the reference's
    tolerances; a forced core mode, in place, and a row they leave run the fused kernels."""
    from cutile_rms.experimental.fused_add import launch as FL
    from cutile_rms.rows import launch as RL

    calls = []
    real = RL.run_forward
    monkeypatch.setattr(RL, "run_forward", lambda *a, **k: calls.append("rows") or real(*a, **k))
    with interpret.interpreting():
        for s_arg in (None, torch.float32):
            x, r, w = make((37, 1024), torch.bfloat16, torch.bfloat16, "cpu", gen)
            xg, rg = x.clone().requires_grad_(), r.clone().requires_grad_()
            y, s = fused_add_rms_norm(xg, rg, w, EPS, residual_dtype=s_arg)  # training: stores rstd
            with torch.no_grad():
                y2, s2 = fused_add_rms_norm(x, r, w, EPS, residual_dtype=s_arg)  # inference
                y3, _ = fused_add_rms_norm(x, r, w, EPS, residual_dtype=s_arg, store_residual=False)  # post-norm
            assert calls == ["rows"] * 3
            calls.clear()
            sr = (x.double() + r.double()).to(s_arg or torch.bfloat16)
            assert torch.equal(s.detach(), sr) and torch.equal(s2, sr)
            sd = sr.double()
            yr = sd * torch.rsqrt(sd.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
            for out in (y, y2, y3):
                rel = ((out.detach().double() - yr).norm() / yr.norm()).item()
                assert rel < 2 * UNIT_ROUNDOFF[torch.bfloat16], rel  # y's one rounding to bf16, and xhat's
        x, r, w = make((37, 1024), torch.bfloat16, torch.bfloat16, "cpu", gen)
        fused_add_rms_norm_(x.clone(), r.clone(), w, EPS)  # in place: the fused kernels
        x2, r2, w2 = make((37, 1000), torch.bfloat16, torch.bfloat16, "cpu", gen)
        with torch.no_grad():
            fused_add_rms_norm(x2, r2, w2, EPS)  # 1000: not a multiple of 16
    assert calls == []
    assert FL._rows_plan(x.view(37, 1024), r, x, "persistent", None) is None


def test_signatures_are_the_kernels():
    """The launcher's one spelling of each fused kernel's parameters is the kernel's own."""
    import inspect

    import cuda.tile as ct

    from cutile_rms.experimental.fused_add import kernels as FK
    from cutile_rms.experimental.fused_add import launch as FL

    kernels = {name: obj for name, obj in vars(FK).items() if isinstance(obj, ct.kernel)}
    assert set(kernels) == set(FL.PARAMS)
    for name, kernel in kernels.items():
        assert tuple(inspect.signature(python_function(kernel)).parameters) == FL.PARAMS[name], name
