"""Torch API for the fused residual-add RMSNorm (experimental).

residual_out = x + residual                      (in residual_dtype)
y            = rms_norm(residual_out) * (offset + weight)   (in x's dtype)
"""

import torch

from cutile_rms.experimental.fused_add.launch import (
    run_fused_backward,
    run_fused_forward,
    run_fused_forward_inplace,
)
from cutile_rms.rmsnorm.launch import casting_code
from cutile_rms.rmsnorm.torch_impl import (
    SUPPORTED_DTYPES,
    as_rows,
    check_device,
    check_tensor,
    check_x_weight,
    launch_on_device,
    rows_view,
    unit_stride,
)

__all__ = ["FusedAddRMSNormFunction", "fused_add_rms_norm", "fused_add_rms_norm_"]


def _validate(x, residual, weight, eps, offset, casting_mode, residual_dtype):
    """Checks the arguments; returns (casting code, dtype of residual_out)."""
    check_x_weight(x, weight, eps, offset)
    check_tensor("residual", residual)
    if residual.shape != x.shape:
        raise ValueError(f"residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    if residual_dtype is None:
        residual_dtype = residual.dtype
    elif residual_dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"residual_dtype must be float32, float16 or bfloat16, got {residual_dtype}")
    check_device(x, residual=residual, weight=weight)
    # The norm reads residual_out, so the casting mode applies to its dtype (all modes agree in fp32).
    return casting_code(casting_mode, residual_dtype == torch.float32), residual_dtype


def _forward(x, residual, weight, eps, offset, casting, s_dtype, store_rstd, store_sum=True):
    """(y, s or None, rstd or None); store_sum=False (no rstd then): s is normalized, not stored."""
    n = x.shape[-1]
    x2, r2 = rows_view(x, n), rows_view(residual, n)
    m = x2.shape[0]
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    s = torch.empty(x.shape, dtype=s_dtype, device=x.device) if store_sum else None
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device) if store_rstd else None
    if m:
        r = None if rstd is None else rstd.view(m)
        s2 = None if s is None else as_rows(s, m, n)
        # Without s, an array of its dtype names the sum's dtype (never read or written).
        like = r2 if s_dtype == residual.dtype else x2.new_empty((1, 1), dtype=s_dtype)
        launch_on_device(
            x, run_fused_forward, x2, r2, unit_stride(weight), as_rows(y, m, n), s2, r, eps, offset, casting, None,
            s_dtype_like=like,
        )  # fmt: skip
    return y, s, rstd


def _backward(s, dy, dres, weight, rstd, offset, casting, x_dtype, r_dtype):
    """(dx in x_dtype, dresidual in r_dtype, dw); dx and dresidual are one tensor when the
    dtypes agree (they are equal: the sum's gradient goes to both inputs unchanged)."""
    n = s.shape[-1]
    s2 = rows_view(s, n)
    m = s2.shape[0]
    dx = torch.empty(s.shape, dtype=x_dtype, device=s.device)
    dr = dx if r_dtype == x_dtype else torch.empty(s.shape, dtype=r_dtype, device=s.device)
    dw = None if weight is None else torch.empty_like(weight, memory_format=torch.contiguous_format)
    if m == 0:
        if dw is not None:
            dw.zero_()
        return dx, dr, dw

    def empty_f32(shape):
        return s2.new_empty(shape, dtype=torch.float32)

    launch_on_device(
        s, run_fused_backward, s2, rows_view(dy, n), None if dres is None else rows_view(dres, n),
        unit_stride(weight), rstd.reshape(m), as_rows(dx, m, n), None if dr is dx else as_rows(dr, m, n), dw,
        offset, casting, empty_f32,
    )  # fmt: skip
    return dx, dr, dw


class FusedAddRMSNormFunction(torch.autograd.Function):
    """Forward stores residual_out and rstd; backward takes the gradients of y and of
    residual_out (either may be absent) and returns those of x, residual and weight."""

    @staticmethod
    def forward(ctx, x, residual, weight, eps, offset, casting, s_dtype):
        y, s, rstd = _forward(x, residual, weight, eps, offset, casting, s_dtype, store_rstd=True)
        ctx.save_for_backward(s, weight, rstd)
        ctx.offset, ctx.casting = offset, casting
        ctx.dtypes = (x.dtype, residual.dtype)
        ctx.set_materialize_grads(False)
        return y, s

    @staticmethod
    def backward(ctx, dy, ds):
        if torch.is_grad_enabled():
            raise RuntimeError("fused_add_rms_norm does not support double backward (create_graph=True)")
        s, weight, rstd = ctx.saved_tensors
        x_dtype, r_dtype = ctx.dtypes
        if dy is None:
            if ds is None:
                return (None,) * 7
            dy = torch.zeros(s.shape, dtype=x_dtype, device=s.device)  # y unused: only the sum's gradient
        dx, dr, dw = _backward(s, dy, ds, weight, rstd, ctx.offset, ctx.casting, x_dtype, r_dtype)
        need = ctx.needs_input_grad
        return (dx if need[0] else None, dr if need[1] else None, dw if need[2] else None, None, None, None, None)


def fused_add_rms_norm(x, residual, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", residual_dtype=None,
                       store_residual=True):  # fmt: skip
    """``residual_out = x + residual``; ``y = rms_norm(residual_out) * (offset + weight)``.
    Returns ``(y, residual_out)``. Experimental.

    One kernel reads x and residual once and writes y and residual_out once (a row that fits
    one tile never leaves the chip in between). Differentiable in x, residual and weight: the
    backward takes the gradients of both outputs.

    Args:
        x: (..., N) activations (e.g. an attention or MLP output), bf16 / fp16 / fp32.
        residual: the residual stream, x's shape, any of the three dtypes.
        weight, eps, offset, casting_mode: as :func:`cutile_rms.rms_norm`; the casting mode
            applies to residual_out's dtype (with an fp32 residual stream all modes are fp32 math).
        residual_dtype: dtype of residual_out (default: residual's), e.g. torch.float32 to keep
            an fp32 residual stream beside bf16 activations. The sum is computed in fp32 and
            rounded once to it.
        store_residual: False for a post-norm layer, whose sum is only normalized: residual_out
            is not written (returned as None), which saves its bytes. With grad, the sum is
            still stored, for the backward, but not returned.

    Returns:
        y in x's dtype, ``residual_out`` in residual_dtype (None with store_residual=False);
        both contiguous.
    """
    casting, s_dtype = _validate(x, residual, weight, eps, offset, casting_mode, residual_dtype)
    eps, offset = float(eps), float(offset)
    tensors = (x, residual, weight)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        y, s = FusedAddRMSNormFunction.apply(x, residual, weight, eps, offset, casting, s_dtype)
        return (y, s) if store_residual else (y, None)
    y, s, _ = _forward(x, residual, weight, eps, offset, casting, s_dtype, store_rstd=False, store_sum=store_residual)
    return y, s


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, last byte + 1) of the memory t can touch."""
    span = sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True)) + 1
    return t.data_ptr(), t.data_ptr() + span * t.element_size()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = _extent(a), _extent(b)
    return a0 < b1 and b0 < a1


def fused_add_rms_norm_(x, residual, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama"):
    """In place, for inference (the vLLM / FlashInfer convention): ``residual += x`` (summed in
    fp32, rounded to residual's dtype), then ``x = rms_norm(residual) * (offset + weight)``.
    Returns None. Experimental.

    x and residual must not overlap in memory, must each have unit stride along the last
    dim (padded rows are fine) and must not require grad; weight must not overlap either.
    """
    casting, _ = _validate(x, residual, weight, eps, offset, casting_mode, None)
    if torch.is_grad_enabled() and (x.requires_grad or residual.requires_grad):
        raise RuntimeError("fused_add_rms_norm_ is in place and for inference: x and residual must not require grad")
    if x.numel() and _overlap(x, residual):
        raise ValueError("x and residual overlap in memory; the in-place update would read what it wrote")
    if weight is not None and x.numel() and (_overlap(weight, x) or _overlap(weight, residual)):
        raise ValueError("weight overlaps x or residual in memory")
    n = x.shape[-1]
    x2, r2 = rows_view(x, n), rows_view(residual, n)
    for name, t, t2 in (("x", x, x2), ("residual", residual, r2)):
        if t.numel() and t2.untyped_storage().data_ptr() != t.untyped_storage().data_ptr():  # rows_view copied
            raise ValueError(f"{name} must be a view with unit stride along its last dim to be updated in place")
    if x2.shape[0]:
        launch_on_device(
            x, run_fused_forward_inplace, x2, r2, unit_stride(weight), float(eps), float(offset), casting, None
        )
