"""RMSNorm with FP8 output, for torch (experimental): ``rms_norm_fp8``.

Layers as in cutile_rms.rmsnorm: validation, an allocating implementation over the launcher
(experimental.fp8.launch), and a ``torch.library`` custom op with a fake implementation that
``torch.compile`` traces (outputs cannot be None in an op: an absent rstd is an empty tensor).
"""

from typing import NamedTuple

import torch

from cutile_rms.experimental.fp8 import kernels as K
from cutile_rms.experimental.fp8 import launch as FL
from cutile_rms.rmsnorm.launch import casting_code, check_casting
from cutile_rms.rmsnorm.torch_impl import (
    _target,
    check_device,
    check_tensor,
    launch_on_device,
    row_groups,
    rows3,
    unit_stride,
    validate_x_weight,
)

__all__ = ["FP8_FORMATS", "FP8Activation", "RMSNormFP8Output", "rms_norm_fp8"]

FP8_FORMATS = {torch.float8_e4m3fn: K.FMT_E4M3, torch.float8_e5m2: K.FMT_E5M2}
_DTYPE_OF = {code: dtype for dtype, code in FP8_FORMATS.items()}


class RMSNormFP8Output(NamedTuple):
    """y: FP8, x's shape, contiguous. scale: the dequantization scale (y * scale ~ the
    unquantized output): the given static scale, or the per-row scales (fp32, x.shape[:-1]).
    amax: static scale only, the 1-element fp32 max |rms_norm(x) * (offset + weight)| before
    scaling (for delayed-scaling recipes); None with dynamic scales. rstd: fp32,
    x.shape[:-1], when x or the weight requires grad (else None): with it,
    :func:`cutile_rms.rms_norm_backward` gives dx and dw for a gradient of the unquantized
    output (the TransformerEngine pattern: the next GEMM's backward hands back a bf16 dy).
    residual_out: with a residual, x + residual in the residual's dtype (the normalized
    input; pass it as x to rms_norm_backward), else None. y_t: with transpose=True, y's
    (N, M) transpose, contiguous, else None."""

    y: torch.Tensor
    scale: torch.Tensor
    amax: torch.Tensor | None
    rstd: torch.Tensor | None
    residual_out: torch.Tensor | None = None
    y_t: torch.Tensor | None = None


class FP8Activation(torch.Tensor):
    """rms_norm_fp8's y when a gradient is wanted: FP8 data with its dequantization scale,
    standing in autograd for the unquantized output (``dtype`` is x's, e.g. bf16).

    The gradient that reaches it is of that dtype (not rounded to FP8), and the backward of
    rms_norm_fp8 turns it into dx and dW (the TransformerEngine pattern: the next GEMM's
    backward hands back a bf16 gradient). An FP8 GEMM takes ``.fp8`` and ``.fp8_scale``
    directly; any other torch op sees the dequantized values (``.dequantize()``). Eager only:
    no ``torch.compile`` support for this subclass."""

    @staticmethod
    def __new__(cls, data, scale, dtype):
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, strides=data.stride(), dtype=dtype,
                                                   device=data.device, requires_grad=False)  # fmt: skip

    def __init__(self, data, scale, dtype):
        self.fp8 = data  # the FP8 values (y)
        self.fp8_scale = scale  # 1 element, or one per row (x.shape[:-1])

    def dequantize(self) -> torch.Tensor:
        s = self.fp8_scale.reshape(()) if self.fp8_scale.numel() == 1 else self.fp8_scale.unsqueeze(-1)
        return (self.fp8.float() * s).to(self.dtype)

    def __repr__(self):
        return f"FP8Activation({self.fp8.dtype} as {self.dtype}, shape={tuple(self.shape)})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func._schema.is_mutable:  # an in-place or out= op would write a dequantized copy
            raise RuntimeError(f"{func} would modify an FP8Activation; call .dequantize() for a tensor to modify")

        def plain(t):
            return t.dequantize() if isinstance(t, FP8Activation) else t

        return func(*torch.utils._pytree.tree_map(plain, args), **torch.utils._pytree.tree_map(plain, kwargs or {}))


class _RMSNormFP8Function(torch.autograd.Function):
    """Forward: the FP8 kernel with rstd stored; y comes back as an FP8Activation. Backward:
    the core RMSNorm backward on the normalized input (x, or residual_out with a residual)
    with the high-precision gradient of y; the sum's gradient goes to x and residual."""

    @staticmethod
    def forward(ctx, x, residual, weight, scale, eps, offset, casting, casting_mode, fmt):
        y, stat, rstd, s_out = fp8_forward(x, residual, weight, scale, eps, offset, casting, fmt, True)
        normed = x if residual is None else s_out
        ctx.save_for_backward(normed, weight, rstd)
        ctx.offset, ctx.casting_mode = offset, casting_mode
        ctx.dtypes = (x.dtype, None if residual is None else residual.dtype)
        ctx.set_materialize_grads(False)
        y_scale = stat if scale is None else scale
        outputs = (FP8Activation(y, y_scale, x.dtype), stat, rstd)
        ctx.mark_non_differentiable(stat, rstd)
        if residual is None:
            return (*outputs, x.new_empty((0,)))
        return (*outputs, s_out)

    @staticmethod
    def backward(ctx, dy, _dstat, _drstd, ds):
        from cutile_rms.rmsnorm.functional import rms_norm_backward

        normed, weight, rstd = ctx.saved_tensors
        x_dtype, r_dtype = ctx.dtypes
        dnorm = dw = None
        if dy is not None:
            dy = dy.dequantize() if isinstance(dy, FP8Activation) else dy
            dnorm, dw = rms_norm_backward(normed, dy.to(normed.dtype), weight, rstd, offset=ctx.offset,
                                          casting_mode=ctx.casting_mode)  # fmt: skip
        if r_dtype is None:
            return dnorm, None, dw, None, None, None, None, None, None
        total = dnorm if ds is None else (ds if dnorm is None else dnorm + ds)
        if total is None:
            return (None,) * 9
        return total.to(x_dtype), total.to(r_dtype), dw, None, None, None, None, None, None


def _output(y, stat, scale, rstd, residual_out) -> RMSNormFP8Output:
    """The named result: stat is the per-row scales (scale None) or the static amax."""
    if scale is None:
        return RMSNormFP8Output(y, stat, None, rstd, residual_out)
    return RMSNormFP8Output(y, scale, stat, rstd, residual_out)


def _check_scale(scale, x):
    if scale is None:
        return
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"scale must be a 1-element float32 tensor or None, got {type(scale).__name__}")
    if scale.dtype != torch.float32 or scale.numel() != 1:
        raise ValueError(f"scale must be a 1-element float32 tensor, got {tuple(scale.shape)} {scale.dtype}")


def _check_fp8_device(x):
    """FP8 conversion needs sm_89 or later."""
    if x.is_cuda:
        major, minor = torch.cuda.get_device_capability(x.device)
        if (major, minor) < (8, 9):
            raise RuntimeError(f"FP8 output needs a GPU of compute capability 8.9 or later, got {major}.{minor}")


def fp8_forward(x, residual, weight, scale, eps: float, offset: float, casting: int, fmt: int, store_rstd: bool):
    """(y, stat, rstd, residual_out): the allocating implementation. stat: the per-row scales
    (dynamic) or the 1-element fp32 amax (static); rstd an empty (0,) tensor when not stored,
    residual_out when there is no residual."""
    check_casting(casting)
    n = x.shape[-1]
    groups = row_groups(x)
    a, b = groups if groups else (x.numel() // max(1, n), 1)
    y = torch.empty(x.shape, dtype=_DTYPE_OF[fmt], device=x.device)
    rstd = x.new_empty(x.shape[:-1], dtype=torch.float32) if store_rstd else x.new_empty((0,), dtype=torch.float32)
    stat = x.new_empty(x.shape[:-1], dtype=torch.float32) if scale is None else x.new_zeros((1,), dtype=torch.float32)
    s_out = x.new_empty((0,)) if residual is None else torch.empty(x.shape, dtype=residual.dtype, device=x.device)
    if a * b == 0:
        return y, stat, rstd, s_out
    info = _target(x.get_device())[1]
    elem = x.element_size() if residual is None else residual.element_size()  # the normalized rows' dtype
    p = FL.fp8_plan(a, b, n, max(elem, x.element_size()), info.num_sms)
    args = (p, rows3(x, a, b), None if residual is None else rows3(residual, a, b), unit_stride(weight),
            y.view(a, b, n), None if residual is None else s_out.view(a, b, n), rstd.view(a, b) if store_rstd else None,
            None if scale is None else scale.detach().reshape(1), stat.view(a, b) if scale is None else
            stat.view(torch.int32), eps, offset, casting, fmt)  # fmt: skip
    launch_on_device(x, FL.run_forward, *args)
    return y, stat, rstd, s_out


def fp8_forward_t(x, weight, scale, eps: float, offset: float, casting: int, fmt: int, store_rstd: bool):
    """(y, y_t, amax, rstd) for a 2-D x and a static scale, one kernel (tiled_fwd_fp8_t)."""
    check_casting(casting)
    m, n = x.shape
    y = torch.empty((m, n), dtype=_DTYPE_OF[fmt], device=x.device)
    y_t = torch.empty((n, m), dtype=_DTYPE_OF[fmt], device=x.device)
    rstd = x.new_empty((m,) if store_rstd else (0,), dtype=torch.float32)
    amax = x.new_zeros((1,), dtype=torch.float32)
    if m * n == 0:
        return y, y_t, amax, rstd
    info = _target(x.get_device())[1]
    p = FL.fp8_plan(m, 1, n, x.element_size(), info.num_sms, transpose=True)
    x2 = x.detach() if x.stride(-1) == 1 else x.detach().contiguous()
    args = (p, x2, unit_stride(weight), y, y_t, rstd if store_rstd else None, scale.detach().reshape(1),
            amax.view(torch.int32), eps, offset, casting, fmt)  # fmt: skip
    launch_on_device(x, FL.run_transposed, *args)
    return y, y_t, amax, rstd


@torch.library.custom_op(
    "cutile_rms::rms_norm_fp8_t",
    mutates_args=(),
    schema="(Tensor x, Tensor? weight, Tensor scale, float eps, float offset, int casting, int fmt, "
    "bool store_rstd) -> (Tensor, Tensor, Tensor, Tensor)",
)
def rms_norm_fp8_t_op(x, weight, scale, eps, offset, casting, fmt, store_rstd):
    return fp8_forward_t(x, weight, scale, eps, offset, casting, fmt, store_rstd)


@rms_norm_fp8_t_op.register_fake
def _(x, weight, scale, eps, offset, casting, fmt, store_rstd):
    m, n = x.shape
    y = torch.empty((m, n), dtype=_DTYPE_OF[fmt], device=x.device)
    y_t = torch.empty((n, m), dtype=_DTYPE_OF[fmt], device=x.device)
    rstd = x.new_empty((m,) if store_rstd else (0,), dtype=torch.float32)
    return y, y_t, x.new_empty((1,), dtype=torch.float32), rstd


@torch.library.custom_op(
    "cutile_rms::rms_norm_fp8",
    mutates_args=(),
    schema="(Tensor x, Tensor? residual, Tensor? weight, Tensor? scale, float eps, float offset, int casting, "
    "int fmt, bool store_rstd) -> (Tensor, Tensor, Tensor, Tensor)",
)
def rms_norm_fp8_op(x, residual, weight, scale, eps, offset, casting, fmt, store_rstd):
    return fp8_forward(x, residual, weight, scale, eps, offset, casting, fmt, store_rstd)


@rms_norm_fp8_op.register_fake
def _(x, residual, weight, scale, eps, offset, casting, fmt, store_rstd):
    y = torch.empty(x.shape, dtype=_DTYPE_OF[fmt], device=x.device)
    stat = x.new_empty(x.shape[:-1], dtype=torch.float32) if scale is None else x.new_empty((1,), dtype=torch.float32)
    rstd = x.new_empty(x.shape[:-1] if store_rstd else (0,), dtype=torch.float32)
    s_out = x.new_empty((0,)) if residual is None else torch.empty(x.shape, dtype=residual.dtype, device=x.device)
    return y, stat, rstd, s_out


def rms_norm_fp8(x, weight=None, eps=1e-6, *, scale=None, out_dtype=torch.float8_e4m3fn, offset=0.0,
                 casting_mode="llama", residual=None, transpose=False) -> RMSNormFP8Output:  # fmt: skip
    """``y = saturate(rne(x / sqrt(mean(x**2, dim=-1) + eps) * (offset + weight) / s))`` in FP8.

    With a static ``scale`` (a 1-element float32 tensor on x's device, the dequantization scale)
    s is that scale and ``amax`` is returned; with ``scale=None`` each row gets its own
    ``s = max(max|row| / FP8_MAX, 2**-126)`` (per-token dynamic quantization), returned as
    ``scale``. Rounding is to nearest even, saturated to the format's finite range (+-448 for
    ``torch.float8_e4m3fn``, +-57344 for ``torch.float8_e5m2``); a NaN row stays NaN. The
    casting mode's rounding comes before the division (llama: xhat rounded to x's dtype), as in
    :func:`cutile_rms.rms_norm`. x, weight, eps, offset and casting_mode: as there.
    ``residual`` (x's shape, any float dtype): the norm is of ``x + residual`` (an fp32 add
    rounded once to the residual's dtype, in which the casting mode then rounds), returned as
    ``residual_out``: the fused residual add of a pre-norm block. ``transpose=True`` (a 2-D x
    and a static scale, no residual) also returns ``y_t``, y's (N, M) transpose, written by the
    same kernel (the operand layout the next GEMM's backward may need).

    Returns an :class:`RMSNormFP8Output` (y, scale, amax, rstd, residual_out, y_t). When x,
    the weight or the residual requires grad (eager, no transpose), y is an
    :class:`FP8Activation`: a gradient of the unquantized output's dtype given to it flows back
    through autograd to x, the weight and the residual. ``rstd`` is returned then too (for
    :func:`cutile_rms.rms_norm_backward` by hand, as under ``torch.compile``, where y is plain
    FP8 and has no gradient).
    """
    casting = validate_x_weight(x, weight, eps, offset, casting_mode)
    if out_dtype not in FP8_FORMATS:
        raise TypeError(f"out_dtype must be torch.float8_e4m3fn or torch.float8_e5m2, got {out_dtype}")
    _check_scale(scale, x)
    if residual is not None:
        check_tensor("residual", residual)
        if residual.shape != x.shape:
            raise ValueError(f"residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    check_device(x, weight=weight, scale=scale, residual=residual)
    if residual is not None:  # the rounding points are the normalized sum's dtype's
        casting = casting_code(casting_mode, residual.dtype == torch.float32)
    if transpose and (scale is None or x.dim() != 2 or residual is not None):
        raise ValueError("transpose=True needs a 2-D x and a static scale, and takes no residual; got "
                         f"x of {x.dim()} dims, scale={'None' if scale is None else 'a tensor'}, "
                         f"residual={'None' if residual is None else 'a tensor'}")  # fmt: skip
    _check_fp8_device(x)
    wants_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (x, weight, residual)
    )  # fmt: skip
    store_rstd = wants_grad
    eps, offset, fmt = float(eps), float(offset), FP8_FORMATS[out_dtype]
    if wants_grad and not transpose and not torch.compiler.is_compiling():
        y, stat, rstd, s_out = _RMSNormFP8Function.apply(x, residual, weight, scale, eps, offset, casting,
                                                         casting_mode, fmt)  # fmt: skip
        return _output(y, stat, scale, rstd, s_out if residual is not None else None)
    if transpose:
        args = (x, weight, scale, eps, offset, casting, fmt, store_rstd)
        if torch.compiler.is_compiling():
            y, y_t, amax, rstd = torch.ops.cutile_rms.rms_norm_fp8_t(*args)
        else:
            with torch.no_grad():
                y, y_t, amax, rstd = fp8_forward_t(*args)
        return RMSNormFP8Output(y, scale, amax, rstd if store_rstd else None, None, y_t)
    args = (x, residual, weight, scale, eps, offset, casting, fmt, store_rstd)
    if torch.compiler.is_compiling():
        y, stat, rstd, s_out = torch.ops.cutile_rms.rms_norm_fp8(*args)
    else:
        with torch.no_grad():
            y, stat, rstd, s_out = fp8_forward(*args)
    return _output(y, stat, scale, rstd if store_rstd else None, s_out if residual is not None else None)
