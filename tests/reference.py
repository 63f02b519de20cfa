"""Float64 reference RMSNorm and the tolerances the kernels are held to.

One reference serves every variant: the casting modes differ only in where results are rounded
to 16 bits, and the tolerances below count those roundings. Gradients come from torch autograd
through the float64 reference, so the kernels' closed-form backward is checked against an
independent derivation.
"""

import math
from dataclasses import dataclass

import torch

# Unit roundoff u = 2^-(mantissa bits + 1): the largest relative error of one rounding.
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-24}

# fp32 arithmetic inside the kernels: sums of up to 262144 products (sum of squares, mean of
# wdy * xhat, dW over rows) in tree order have a relative error near log2(N) * 2^-24 ~ 1e-6;
# 1e-5 leaves a 10x margin and is still 3 orders below one bf16 rounding.
FP32_ARITH_RTOL = 1e-5

# How many times the forward rounds a value to the input dtype on the way to y, per casting
# mode: gemma rounds y once; llama rounds xhat, then y; none rounds rstd, xhat, offset + w and y.
Y_ROUNDINGS = {"gemma": 1, "llama": 2, "none": 4}


@dataclass(frozen=True)
class Tol:
    """|out - ref| <= rtol * (|ref| + rms(ref)) elementwise.

    The rms(ref) term is an absolute floor scaled to the tensor: dx and dW are differences and
    sums of signed terms, so single elements can be near zero while their rounding error is
    set by the size of the terms, which rms(ref) measures.
    """

    rtol: float


def tolerances(x_dtype, w_dtype, casting: str) -> dict:
    ux = UNIT_ROUNDOFF[x_dtype]
    uw = UNIT_ROUNDOFF[w_dtype] if w_dtype is not None else 0.0
    if x_dtype == torch.float32:
        casting = "gemma"  # all modes coincide in fp32
    round_xhat = casting != "gemma"
    return {
        "y": Tol(Y_ROUNDINGS[casting] * ux + FP32_ARITH_RTOL),
        # rstd is fp32, computed from inputs that are exact in fp32.
        "rstd": Tol(FP32_ARITH_RTOL),
        # dx: fp32 math, one rounding to x's dtype; 2u leaves a 2x margin.
        "dx": Tol(2 * ux + FP32_ARITH_RTOL),
        # dw: fp32 accumulation, one rounding to w's dtype, plus (llama/none) xhat rounded to
        # x's dtype in each term; 2x margin on both.
        "dw": Tol(2 * uw + (2 * ux if round_xhat else 0.0) + FP32_ARITH_RTOL),
    }


def assert_close(name: str, out: torch.Tensor, ref: torch.Tensor, tol: Tol, scale=0.0) -> None:
    """scale: a floor for rms(ref) where the result is a small difference or sum of larger terms,
    to which the rounding errors are relative: a number (dx of rows of one or two elements, where
    wdy and xhat * c nearly cancel: dx_term_scale) or a tensor of ref's shape (dW over a few rows,
    per column: dw_term_scale)."""
    assert out.shape == ref.shape, f"{name}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    o = out.detach().double().cpu()
    r = ref.detach().double().cpu()
    assert torch.isfinite(o).all(), f"{name}: {int((~torch.isfinite(o)).sum())} non-finite values (unwritten?)"
    rms = r.pow(2).mean().sqrt().item() if r.numel() else 0.0
    floor = scale.double().cpu().clamp(min=rms) if isinstance(scale, torch.Tensor) else max(rms, scale)
    err = (o - r).abs()
    bound = tol.rtol * (r.abs() + floor)
    bad = err > bound
    if bad.any():
        i = int(torch.argmax(err - bound))
        f = float(floor.flatten()[i] if isinstance(floor, torch.Tensor) else floor)
        raise AssertionError(
            f"{name}: {int(bad.sum())}/{o.numel()} elements off; worst at flat index {i}: "
            f"out={o.flatten()[i].item():.6g} ref={r.flatten()[i].item():.6g} "
            f"(rtol {tol.rtol:.3g}, floor {f:.3g})"
        )


def rms_norm_ref(x, weight=None, eps=1e-6, offset=0.0):
    """(y, rstd) in float64: y = x * rstd * (offset + weight), rstd = 1/sqrt(mean(x^2) + eps)."""
    xd = x.double()
    rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
    y = xd * rstd
    if weight is not None:
        y = y * (offset + weight.double())
    return y, rstd.squeeze(-1)


def rms_norm_ref_grads(x, dy, weight=None, eps=1e-6, offset=0.0):
    """(y, rstd, dx, dw) in float64, gradients by autograd through rms_norm_ref."""
    xd = x.detach().double().requires_grad_()
    wd = None if weight is None else weight.detach().double().requires_grad_()
    y, rstd = rms_norm_ref(xd, wd, eps, offset)
    inputs = (xd,) if wd is None else (xd, wd)
    grads = torch.autograd.grad(y, inputs, dy.detach().double())
    return y.detach(), rstd.detach(), grads[0], (None if wd is None else grads[1])


def dx_term_scale(x, dy, weight=None, eps=1e-6, offset=0.0) -> float:
    """rms of rstd * wdy over finite rows: the size of the two terms whose difference is dx
    (dx = rstd * (wdy - xhat * c))."""
    xd, dyd = x.detach().double(), dy.detach().double()
    rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
    wp = 1.0 if weight is None else offset + weight.detach().double()
    t = rstd * wp * dyd
    t = t[torch.isfinite(t)]
    return t.pow(2).mean().sqrt().item() if t.numel() else 0.0


def dw_term_scale(x, dy, eps=1e-6) -> torch.Tensor:
    """Per column, sqrt(sum over rows of (dy * xhat)^2): the size of the terms whose sum is dW.

    llama and none round xhat to x's dtype in every term, so dW's error is a sum of per-term
    errors of at most u * |dy * xhat|. Over many rows rms(dW) measures their size; over a few
    rows one large term (products of normals have heavy tails) can outweigh rms(dW), which is
    how (3, 262144) fp16 once failed by 1 element in 262144. With this floor the dw tolerance
    (2u for xhat) bounds the error outright for up to 4 rows (sum |t| <= sqrt(M) * this) and
    keeps its statistical margin above that."""
    xd, dyd = x.detach().double(), dy.detach().double()
    xhat = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
    t = (dyd * xhat).reshape(-1, x.shape[-1])
    t = torch.where(torch.isfinite(t), t, torch.zeros_like(t))
    return t.pow(2).sum(0).sqrt()


def closed_form_backward(x, dy, weight, rstd, offset=0.0):
    """The kernels' backward formulas, in float64 (checked against autograd on CPU)."""
    xd, dyd = x.double(), dy.double()
    r = rstd.double().unsqueeze(-1)
    wp = 1.0 if weight is None else offset + weight.double()
    xhat = xd * r
    wdy = wp * dyd
    c = (wdy * xhat).mean(-1, keepdim=True)
    dx = r * (wdy - xhat * c)
    dw = None if weight is None else (dyd * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


def make_inputs(shape, dtype, device, *, w_dtype=None, has_weight=True, offset=0.0, generator=None):
    """Fresh random x ~ N(0, 1), dy ~ N(0, 1) and weight ~ (1 - offset) + 0.1 N(0, 1)."""
    n = shape[-1]
    x = torch.randn(shape, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)
    dy = torch.randn(shape, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)
    w = None
    if has_weight:
        w = ((1.0 - offset) + 0.1 * torch.randn(n, generator=generator)).to(device=device, dtype=w_dtype or dtype)
    return x, dy, w


def check_all(outputs: dict, refs: dict, tols: dict, scales: dict | None = None) -> None:
    """scales: per-output floors for assert_close, e.g. {"dw": dw_term_scale(x, dy, eps)}."""
    for k, out in outputs.items():
        if out is None:
            assert refs.get(k) is None, f"{k}: missing output"
            continue
        assert_close(k, out, refs[k], tols[k], (scales or {}).get(k, 0.0))


def nan_like(t_shape, dtype, device):
    return torch.full(t_shape, math.nan, dtype=dtype, device=device)
