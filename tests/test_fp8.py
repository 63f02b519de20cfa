"""Experimental tier: RMSNorm with FP8 output against a float64 reference.

The reference computes v = rms_norm(x) * (offset + weight) in float64 with the casting mode's
roundings to x's dtype, divides by the scale and quantizes with torch's own FP8 cast. The
kernels work in fp32, so where v / s lies within a few fp32 ulps of an FP8 rounding boundary
(or x * rstd of a boundary of x's dtype) they may round the other way: y must equal the
reference bitwise except there, by at most one FP8 step, on at most 0.1% of the elements.
Those elements are found by perturbing rstd and v by the fp32 error bounds and quantizing again.
Runs on the GPU (``gpu``) and through the interpreter on the CPU (CI).
"""

import math
import warnings

import pytest
import torch

from cutile_rms import ExperimentalKernelWarning, rms_norm_backward
from cutile_rms.experimental import rms_norm_fp8
from tests.reference import FP32_ARITH_RTOL, Tol, assert_close, check_all, make_inputs, rms_norm_ref_grads, tolerances

pytestmark = [pytest.mark.experimental, pytest.mark.filterwarnings("ignore::cutile_rms.ExperimentalKernelWarning")]

EPS = 1e-6
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}
MIN_SCALE = 2.0**-126
# Relative perturbations that cover the kernels' fp32 arithmetic. rstd comes from an fp32 sum of
# up to 65536 squares: FP32_ARITH_RTOL (tests/reference.py). v (one or two fp32 products) and
# v / s (one division, and a dynamic s from the fp32 amax): 8 fp32 ulps.
FP32_SLACK = 2.0**-20
# The share of elements allowed to round the other way (the bound), rounded up to whole
# elements: fp16 "none" casting puts v on the fp16 grid, where FP8 midpoints lie, so a 448-element
# case can hold one (CI drew one: fp16 none e5m2 (7, 64)).
MAX_OFF_BOUNDARY_SHARE = 1e-3
# Scales and amax are fp32 results of the same values: a few ulps.
SCALE_TOL = Tol(4 * FP32_SLACK)


def values_ref(x, w, offset, casting, rstd_factor=1.0):
    """(v, rstd) in float64, v rounded where the casting mode rounds (kernels._normalize)."""
    xd = x.double()
    rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * rstd_factor
    wp = None if w is None else w.float() + offset  # the kernels' fp32 offset + w
    if x.dtype == torch.float32 or casting == "gemma":
        return xd * rstd * (1.0 if wp is None else wp.double()), rstd
    if casting == "llama":
        xhat = (xd * rstd).to(x.dtype).double()
        return xhat * (1.0 if wp is None else wp.double()), rstd
    xhat = (xd * rstd.to(x.dtype).double()).to(x.dtype).double()  # none: in x's dtype
    if wp is None:
        return xhat, rstd
    return (xhat * wp.to(x.dtype).double()).to(x.dtype).double(), rstd


def quantize_ref(v, s, out_dtype, q_factor=1.0):
    fmax = FP8_MAX[out_dtype]
    return (v / s * q_factor).clamp(-fmax, fmax).float().to(out_dtype)


def dynamic_scale_ref(v, out_dtype):
    amax = torch.nan_to_num(v.abs(), nan=0.0).amax(-1, keepdim=True)
    return (amax / FP8_MAX[out_dtype]).clamp(min=MIN_SCALE)


def reference(x, w, offset, casting, scale, out_dtype, rstd_factor=1.0, q_factor=1.0):
    """(y, scale or None, amax or None, rstd): scale: the per-row scales (dynamic) or None.
    rstd_factor, q_factor: perturbations of rstd and of v / s (check_fp8)."""
    v, rstd = values_ref(x, w, offset, casting, rstd_factor)
    if scale is None:
        s = dynamic_scale_ref(v, out_dtype)
        return quantize_ref(v, s, out_dtype, q_factor), s.squeeze(-1), None, rstd.squeeze(-1)
    amax = torch.nan_to_num(v.abs(), nan=0.0).max().reshape(1)
    return quantize_ref(v, scale.double().cpu().reshape(()), out_dtype, q_factor), None, amax, rstd.squeeze(-1)


def check_fp8(y, x, w, offset, casting, scale, out_dtype):
    """y against the reference: bitwise but near rounding boundaries (module docstring)."""
    xc, wc = x.cpu(), None if w is None else w.cpu()
    sc = None if scale is None else scale.cpu()
    exact = reference(xc, wc, offset, casting, sc, out_dtype)[0]
    out = y.cpu()
    nan = out.float().isnan()
    assert torch.equal(nan, exact.float().isnan()), "NaN where the reference has none, or none where it has"
    bits = out.view(torch.int8)
    ok = (bits == exact.view(torch.int8)) | nan
    near = torch.zeros_like(ok)
    for rf in (1 - FP32_ARITH_RTOL, 1.0, 1 + FP32_ARITH_RTOL):
        for qf in (1 - FP32_SLACK, 1.0, 1 + FP32_SLACK):
            near |= bits == reference(xc, wc, offset, casting, sc, out_dtype, rf, qf)[0].view(torch.int8)
    off = ~ok
    assert torch.all(near | ok), f"{int((~(near | ok)).sum())} elements differ from the reference away from a boundary"
    step = (bits.int() - exact.view(torch.int8).int()).abs()
    assert torch.all(step[off] <= 1), "an element is more than one FP8 step from the reference"
    allowed = math.ceil(MAX_OFF_BOUNDARY_SHARE * off.numel())  # the share, in whole elements (7 x 64: 1)
    assert int(off.sum()) <= allowed, f"{int(off.sum())} of {off.numel()} elements rounded the other way"


CASES = [  # (x dtype, casting, static scale?, out dtype): every value of each factor, pairwise
    (torch.bfloat16, "llama", False, E4M3),
    (torch.bfloat16, "gemma", True, E5M2),
    (torch.bfloat16, "none", True, E4M3),
    (torch.float16, "llama", True, E4M3),
    (torch.float16, "none", False, E5M2),
    (torch.float16, "gemma", False, E4M3),
    (torch.float32, "gemma", False, E4M3),
    (torch.float32, "llama", True, E5M2),
]
SHAPES = [(7, 64), (37, 1000), (4, 3, 768), (5, 5120), (3, 20000), (2, 65536)]  # odd M and N, 64 to 65536


def _scale_for(x, out_dtype, dev):
    """A static scale that puts the largest |v| at about half the format's range."""
    return torch.tensor([8.0 / FP8_MAX[out_dtype]], dtype=torch.float32, device=dev)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype,casting,static,out_dtype", CASES, ids=str)
def test_fp8_matches_reference(dev, dtype, casting, static, out_dtype, shape, gen):
    x, _, w = make_inputs(shape, dtype, dev, generator=gen)
    x0 = x.clone()
    scale = _scale_for(x, out_dtype, dev) if static else None
    out = rms_norm_fp8(x, w, EPS, scale=scale, out_dtype=out_dtype, casting_mode=casting)
    assert out.y.dtype == out_dtype and out.y.shape == x.shape and out.y.is_contiguous()
    assert out.rstd is None  # no grad wanted
    check_fp8(out.y, x, w, 0.0, casting, scale, out_dtype)
    _, s_ref, amax_ref, _ = reference(x.cpu(), w.cpu(), 0.0, casting, None if scale is None else scale.cpu(), out_dtype)
    if static:
        assert out.scale is scale and out.amax.shape == (1,) and out.amax.dtype == torch.float32
        assert_close("amax", out.amax, amax_ref, SCALE_TOL)
    else:
        assert out.amax is None and out.scale.shape == x.shape[:-1] and out.scale.dtype == torch.float32
        assert_close("scale", out.scale, s_ref, SCALE_TOL)
    assert torch.equal(x, x0)


@pytest.mark.parametrize("out_dtype", [E4M3, E5M2], ids=str)
def test_fp8_saturates_and_keeps_nan_rows(dev, out_dtype, gen):
    """A static scale far too small saturates to +-FP8_MAX (no NaN, no wrap); a NaN row and
    an inf row stay in their rows; amax ignores the NaN row; an all-zero row gets zeros."""
    x, _, w = make_inputs((9, 512), torch.bfloat16, dev, generator=gen)
    x[2] = float("nan")
    x[5, 7] = float("inf")
    x[6] = 0.0
    tiny = torch.tensor([1e-3 / FP8_MAX[out_dtype]], dtype=torch.float32, device=dev)
    out = rms_norm_fp8(x, w, EPS, scale=tiny, out_dtype=out_dtype)
    y = out.y.float().cpu()
    fmax = FP8_MAX[out_dtype]
    good = [r for r in range(9) if r not in (2, 5, 6)]
    assert torch.all(y[2].isnan())
    assert torch.all(y[6] == 0)
    assert torch.all(y[good].abs() <= fmax) and (y[good].abs() == fmax).float().mean() > 0.9
    check_fp8(out.y, x, w, 0.0, "llama", tiny, out_dtype)
    assert torch.isfinite(out.amax).all()
    dyn = rms_norm_fp8(x, w, EPS, out_dtype=out_dtype)
    assert torch.all(dyn.y.float().cpu()[2].isnan()) and torch.all(dyn.y.float().cpu()[6] == 0)
    assert dyn.scale[6].item() == MIN_SCALE
    yd = dyn.y.float().cpu()[good]
    assert torch.all(yd.abs().amax(-1) == fmax)  # each row's largest element maps to the format's max
    check_fp8(dyn.y, x, w, 0.0, "llama", None, out_dtype)


def test_fp8_backward_through_autograd(dev, gen):
    """With grad wanted, y is an FP8Activation: FP8 data and scale standing in for the
    unquantized bf16 output. A bf16 gradient given to it reaches x and the weight through
    autograd (the TransformerEngine pattern), equal to rms_norm_backward with the returned
    rstd and within the reference's tolerances; other ops see the dequantized values."""
    from cutile_rms.experimental import FP8Activation

    x, dy, w = make_inputs((33, 1024), torch.bfloat16, dev, generator=gen)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = rms_norm_fp8(xg, wg, EPS, scale=None)
    assert isinstance(out.y, FP8Activation) and out.y.dtype == torch.bfloat16 and out.y.requires_grad
    assert out.y.fp8.dtype == E4M3 and out.y.fp8_scale is out.scale
    check_fp8(out.y.fp8, x, w, 0.0, "llama", None, E4M3)
    yr, rstd_r, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS)
    assert_close("rstd", out.rstd, rstd_r, tolerances(x.dtype, w.dtype, "llama")["rstd"])
    dx, dw = torch.autograd.grad(out.y, [xg, wg], dy)
    check_all({"dx": dx, "dw": dw}, {"dx": dxr, "dw": dwr}, tolerances(x.dtype, w.dtype, "llama"))
    dx2, dw2 = rms_norm_backward(x, dy, w, out.rstd)
    assert torch.equal(dx, dx2) and torch.equal(dw, dw2)
    plain = out.y * 1.0  # any other op: the dequantized values, a plain tensor
    assert type(plain) is torch.Tensor and plain.dtype == torch.bfloat16
    assert torch.equal(plain, out.y.dequantize().detach())
    rel = ((plain.double() - yr).norm() / yr.norm()).item()
    assert rel < 2.0**-4  # one e4m3 rounding
    with pytest.raises(RuntimeError, match="would modify an FP8Activation"), torch.no_grad():
        out.y.mul_(2.0)
    static = rms_norm_fp8(xg, wg, EPS, scale=torch.full((1, 1), 0.02, device=dev))  # a (1, 1) scale
    assert (static.y * 1.0).shape == x.shape


def test_fp8_backward_through_autograd_with_residual(dev, gen):
    """residual= with grad: the gradient of y, and that of residual_out, reach x and the
    residual (the sum's gradient, in each one's dtype) and the weight."""
    x, dy, w = make_inputs((21, 768), torch.bfloat16, dev, generator=gen)
    r = (2.0 * torch.randn((21, 768), generator=gen)).to(dev, torch.float32)
    ds = torch.randn((21, 768), generator=gen).to(dev, torch.float32)
    xg, rg, wg = x.clone().requires_grad_(), r.clone().requires_grad_(), w.clone().requires_grad_()
    out = rms_norm_fp8(xg, wg, EPS, residual=rg, scale=_scale_for(x, E4M3, dev))
    gx, gr, gw = torch.autograd.grad([out.y, out.residual_out], [xg, rg, wg], [dy, ds])
    s = (x.float() + r.float()).to(torch.float32)
    _, _, dsr, dwr = rms_norm_ref_grads(s, dy.float(), w, EPS)
    tols = tolerances(torch.float32, w.dtype, "gemma")
    total = dsr.double().cpu() + ds.double().cpu()
    assert gx.dtype == torch.bfloat16 and gr.dtype == torch.float32
    assert_close("dresidual", gr, total, tols["dx"])
    assert_close("dx", gx, total, tolerances(torch.bfloat16, w.dtype, "gemma")["dx"])
    assert_close("dw", gw, dwr, tols["dw"])


def test_fp8_bad_input_raises_before_launch(dev):
    x = torch.randn(4, 256, device=dev, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="out_dtype"):
        rms_norm_fp8(x, out_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="1-element float32"):
        rms_norm_fp8(x, scale=torch.ones(2, device=dev))
    with pytest.raises(ValueError, match="1-element float32"):
        rms_norm_fp8(x, scale=torch.ones(1, device=dev, dtype=torch.float16))
    with pytest.raises(TypeError, match="scale"):
        rms_norm_fp8(x, scale=0.5)
    with pytest.raises(ValueError, match="scale is on"):
        rms_norm_fp8(x, scale=torch.ones(1, device="meta"))


@pytest.mark.parametrize("shape", [(37, 1000), (3, 20000)], ids=["rows", "chunked"])
@pytest.mark.parametrize("r_dtype,static", [(torch.bfloat16, True), (torch.float32, False)], ids=["bf16", "fp32"])
def test_fp8_residual(dev, shape, r_dtype, static, gen):
    """residual=: residual_out = x + residual (one rounding to the residual's dtype), bitwise;
    y is the FP8 norm of it (the casting mode rounds in residual_out's dtype); inputs untouched."""
    x, _, w = make_inputs(shape, torch.bfloat16, dev, generator=gen)
    r = (2.0 * torch.randn(shape, generator=gen)).to(dev, r_dtype)
    x0, r0 = x.clone(), r.clone()
    scale = _scale_for(x, E4M3, dev) if static else None
    out = rms_norm_fp8(x, w, EPS, scale=scale, residual=r)
    s_ref = (x.float() + r.float()).to(r_dtype)
    assert out.residual_out.dtype == r_dtype and torch.equal(out.residual_out, s_ref)
    check_fp8(out.y, s_ref, w, 0.0, "llama", scale, E4M3)
    assert torch.equal(x, x0) and torch.equal(r, r0)
    with pytest.raises(ValueError, match="residual must have"):
        rms_norm_fp8(x, w, EPS, residual=r[:1])


@pytest.mark.parametrize("shape", [(70, 300), (33, 129), (256, 1024)], ids=str)
@pytest.mark.parametrize("dtype,casting", [(torch.bfloat16, "llama"), (torch.float32, "gemma")], ids=str)
def test_fp8_transposed_output(dev, dtype, casting, shape, gen):
    """transpose=True: y as without it (the same reference), y_t equal to y.t() bitwise, amax;
    M and N that divide none of the 32 x 128 tiles."""
    x, _, w = make_inputs(shape, dtype, dev, generator=gen)
    scale = _scale_for(x, E4M3, dev)
    out = rms_norm_fp8(x, w, EPS, scale=scale, casting_mode=casting, transpose=True)
    assert out.y_t.shape == (shape[1], shape[0]) and out.y_t.is_contiguous() and out.y_t.dtype == E4M3
    check_fp8(out.y, x, w, 0.0, casting, scale, E4M3)
    assert torch.equal(out.y_t.view(torch.int8), out.y.t().contiguous().view(torch.int8))
    amax_ref = reference(x.cpu(), w.cpu(), 0.0, casting, scale.cpu(), E4M3)[2]
    assert_close("amax", out.amax, amax_ref, SCALE_TOL)
    with pytest.raises(ValueError, match="transpose=True needs"):
        rms_norm_fp8(x, w, EPS, transpose=True)


def test_fp8_op_traces(dev):
    """The custom op's fake implementation agrees with the real one (torch.library.opcheck),
    static and dynamic, with and without rstd."""
    x = torch.randn(6, 2, 512, device=dev, dtype=torch.bfloat16)
    w = torch.randn(512, device=dev, dtype=torch.bfloat16)
    s = torch.full((1,), 0.02, device=dev)
    for scale, store in ((None, False), (s, True)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalKernelWarning)
            for r in (None, torch.randn_like(x, dtype=torch.float32)):
                args = (x, r, w, scale, EPS, 0.0, 0, 0, store)
                torch.library.opcheck(torch.ops.cutile_rms.rms_norm_fp8.default, args,
                                      test_utils=("test_schema", "test_faketensor"))  # fmt: skip
            if scale is not None:
                args = (x[:, 0], w, scale, EPS, 0.0, 0, 0, store)
                torch.library.opcheck(torch.ops.cutile_rms.rms_norm_fp8_t.default, args,
                                      test_utils=("test_schema", "test_faketensor"))  # fmt: skip
