"""Public torch functions and the autograd Function for RMSNorm.

    y = x / sqrt(mean(x^2, last dim) + eps) * (offset + weight)

Eager calls go straight to the torch layer (:mod:`cutile_rms.rmsnorm.torch_impl`); inside
``torch.compile`` the same work goes through the custom ops of :mod:`cutile_rms.rmsnorm.ops`,
which the compiler can trace. Both paths run the same kernels and give bitwise-equal results.
"""

import functools
import sys

import torch

from cutile_rms.rmsnorm import ops, torch_impl  # noqa: F401 (importing ops registers torch.ops.cutile_rms)
from cutile_rms.rmsnorm.torch_impl import check_device, check_tensor, validate_x_weight

__all__ = ["RMSNormFunction", "rms_norm", "rms_norm_backward", "rms_norm_forward"]


def _through_ops(x) -> bool:
    """Whether a call goes through the custom ops (torch.ops.cutile_rms.*) rather than the
    direct eager path: under torch.compile, and for DTensor inputs (tensor / sequence
    parallelism), whose sharding rules live on the ops (sharding.py)."""
    if torch.compiler.is_compiling():
        return True
    if type(x) is torch.Tensor:  # the eager hot path: one type check
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(x, DTensor)


def _python_refs(dy) -> int:
    """Python references to dy, counted at the same call depth in RMSNormFunction.backward and
    in the calibration probe below, so that the two counts compare."""
    return sys.getrefcount(dy)


class _GradientProbe(torch.autograd.Function):
    """Identity whose backward records how many references a fresh incoming gradient has: the
    autograd engine's own count differs between torch versions and device types (1 on the CPU
    with torch 2.13, 2 on CUDA with torch 2.11), so it is measured, not assumed."""

    counts = (0, 0)

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, dy):
        _GradientProbe.counts = (dy._use_count(), _python_refs(dy))
        return dy


@functools.lru_cache(maxsize=8)  # one entry per device type
def _fresh_gradient_counts(device_type: str) -> tuple[int, int]:
    """(tensor use count, Python reference count) of an incoming gradient that nothing else
    holds, on this device type. Runs one tiny forward/backward the first time."""
    x = torch.ones(2, device=device_type, requires_grad=True)
    with torch.enable_grad():
        (_GradientProbe.apply(x) * 2.0).sum().backward()
    return _GradientProbe.counts


def _check_overwritable(dy: torch.Tensor, python_refs: int) -> None:
    """in_place=True writes dx into dy's memory. That is safe only if nothing else can read dy
    afterwards; otherwise refuse rather than corrupt another gradient."""
    fresh_uses, fresh_refs = _fresh_gradient_counts(dy.device.type)
    why = None
    if dy.requires_grad:
        why = "dy requires grad (a higher-order gradient is being built)"
    elif dy._is_view():
        why = "dy is a view of another tensor (e.g. the expanded gradient of a sum, or a slice)"
    elif not dy.is_contiguous():
        why = "dy is not contiguous"
    elif dy._use_count() > fresh_uses:
        why = "another part of the autograd graph holds dy (e.g. a residual branch receives the same gradient)"
    elif python_refs > fresh_refs:
        why = "dy is referenced from Python (e.g. kept by a tensor hook)"
    if why is not None:
        raise RuntimeError(
            f"rms_norm(in_place=True) refuses to write dx into the incoming gradient: {why}. "
            "Use in_place=False here."
        )


class RMSNormFunction(torch.autograd.Function):
    """Forward stores rstd (fp32, one per row); backward runs the fused persistent backward
    (dx and the partial-buffer dW reduction; a one-block grid stores dW itself). With
    ``in_place`` the backward writes dx into dy's memory when dy is provably not used elsewhere,
    and raises otherwise."""

    @staticmethod
    def forward(ctx, x, weight, eps, offset, casting, mode, in_place):
        y, rstd = torch_impl.forward(x, weight, eps, offset, casting, mode, store_rstd=True)
        ctx.save_for_backward(x, weight, rstd)
        ctx.offset = offset
        ctx.casting = casting
        ctx.mode = mode
        ctx.in_place = in_place
        return y

    @staticmethod
    def backward(ctx, dy):
        refs = _python_refs(dy)
        if torch.is_grad_enabled():  # the engine enables grad mode only for create_graph=True
            raise RuntimeError(
                "cutile_rms.rms_norm does not support double backward (create_graph=True): "
                "its backward kernels are not differentiable"
            )
        x, weight, rstd = ctx.saved_tensors
        dx_out = None
        if ctx.in_place and ctx.needs_input_grad[0]:
            _check_overwritable(dy, refs)
            dx_out = dy
        dx, dw = torch_impl.backward(x, dy, weight, rstd, ctx.offset, ctx.casting, dx_out, ctx.mode)
        return (
            dx if ctx.needs_input_grad[0] else None,
            dw if ctx.needs_input_grad[1] else None,
            None,
            None,
            None,
            None,
            None,
        )


def rms_norm(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", mode=None, in_place=False):
    """``y = x / sqrt(mean(x**2, dim=-1) + eps) * (offset + weight)``, differentiable in x and weight.

    Args:
        x: CUDA tensor of shape (..., N), float32, float16 or bfloat16. Any leading dims and any
            layout: rows with unit stride along N and a padded row stride (a slice of a wider
            tensor) are read in place, other layouts are copied once.
        weight: (N,) tensor on x's device (any of the three dtypes), or None for no affine
            (then ``y = xhat`` and ``offset`` must be 0).
        eps: added to the mean of squares; a runtime value (no recompile per value).
        offset: 0 for Llama-style weights, 1 for Gemma (weights stored as ``w - 1``).
        casting_mode: where rounding to the input dtype happens, as in Liger-Kernel.
            "llama": statistics in fp32, ``xhat`` rounded to x's dtype before the weight multiply;
            "gemma": everything in fp32, y rounded once; "none": mean of squares in fp32, the
            rest in x's dtype. With float32 input the three are identical.
        mode: None (automatic: the row-tile forward of ``cutile_rms.rows`` where its rules plan
            the row, the row-tile backward on short power-of-two rows, the core kernels
            elsewhere), "persistent" or "gather" to force a core forward kernel; "rows" runs the
            backward on the row-tile kernels wherever their rules plan the row.
        in_place: the backward writes dx into the incoming gradient's memory (saves one
            activation-sized buffer). It raises RuntimeError instead when that gradient is
            needed elsewhere (a view, shared with a residual branch, kept by a hook). Ignored
            under ``torch.compile``, whose compiler plans buffers itself.

    Returns:
        y, contiguous, with x's shape and dtype (also under autocast, as ``torch.rms_norm``).
        When no input requires grad (or grad mode is off) the forward skips the rstd store.

    Works under ``torch.compile(fullgraph=True)`` (custom ops with fake implementations,
    dynamic shapes) and in CUDA graphs (no host synchronization; every buffer comes from
    torch's allocator). The first call of each kernel specialization JIT-compiles it: warm up
    before capturing a graph.
    """
    casting = validate_x_weight(x, weight, eps, offset, casting_mode)
    check_device(x, weight=weight)
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad))
    eps, offset = float(eps), float(offset)
    if _through_ops(x):
        if needs_grad:
            return torch.ops.cutile_rms.rms_norm_fwd(x, weight, eps, offset, casting, mode)[0]
        return torch.ops.cutile_rms.rms_norm_infer(x, weight, eps, offset, casting, mode)
    if not needs_grad:
        return torch_impl.forward(x, weight, eps, offset, casting, mode, store_rstd=False)[0]
    if in_place:
        _fresh_gradient_counts(x.device.type)  # calibrate now, outside the backward pass
    return RMSNormFunction.apply(x, weight, eps, offset, casting, mode, in_place)


def rms_norm_forward(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", mode=None, store_rstd=True):
    """The forward of :func:`rms_norm` without autograd: returns ``(y, rstd)``.

    ``rstd = 1 / sqrt(mean(x**2, dim=-1) + eps)`` in float32 with shape ``x.shape[:-1]``
    (None when ``store_rstd=False``). Feed it to :func:`rms_norm_backward`.
    """
    casting = validate_x_weight(x, weight, eps, offset, casting_mode)
    check_device(x, weight=weight)
    eps, offset = float(eps), float(offset)
    if _through_ops(x):
        if store_rstd:
            return torch.ops.cutile_rms.rms_norm_fwd(x, weight, eps, offset, casting, mode)
        return torch.ops.cutile_rms.rms_norm_infer(x, weight, eps, offset, casting, mode), None
    return torch_impl.forward(x, weight, eps, offset, casting, mode, store_rstd)


def rms_norm_backward(x, dy, weight, rstd, *, offset=0.0, casting_mode="llama", in_place=False):
    """Gradients of ``y = xhat * (offset + weight)``: returns ``(dx, dw)``.

    ``dx = rstd * (wdy - xhat * mean(wdy * xhat))`` with ``wdy = (offset + weight) * dy`` and
    ``dw = sum over rows of dy * xhat`` (None when weight is None). All math is fp32; with
    casting_mode "llama" or "none" dw uses xhat rounded to x's dtype, as the forward did.
    dw is reduced from per-block fp32 partials in a fixed order: the same inputs give
    bitwise-identical dx and dw on every run.

    Args:
        x: the forward's input, (..., N). dy: the gradient of y, x's shape and dtype.
        weight: (N,) or None. rstd: float32 of shape x.shape[:-1] (from :func:`rms_norm_forward`).
        in_place: write dx into dy (which must be contiguous) and return it as dx. dy's old
            contents are gone: the caller asserts nothing else needs them.
    """
    casting = validate_x_weight(x, weight, 0.0, offset, casting_mode)
    check_tensor("dy", dy)
    if dy.shape != x.shape:
        raise ValueError(f"dy must have x's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    if dy.dtype != x.dtype:
        raise TypeError(f"dy must have x's dtype {x.dtype}, got {dy.dtype}")
    if not isinstance(rstd, torch.Tensor):
        raise TypeError(f"rstd must be a torch.Tensor, got {type(rstd).__name__}")
    if rstd.dtype != torch.float32:
        raise TypeError(f"rstd must be float32, got {rstd.dtype}")
    if rstd.shape != x.shape[:-1]:
        raise ValueError(f"rstd must have shape {tuple(x.shape[:-1])} (x.shape[:-1]), got {tuple(rstd.shape)}")
    if in_place and not dy.is_contiguous():
        raise ValueError("in_place=True writes dx into dy, which must then be contiguous")
    check_device(x, weight=weight, dy=dy, rstd=rstd)
    offset = float(offset)
    if _through_ops(x):
        dx, dw = torch.ops.cutile_rms.rms_norm_bwd(x, dy, weight, rstd, offset, casting)
        if in_place:
            dy.copy_(dx)
            dx = dy
        return dx, (None if weight is None else dw)
    return torch_impl.backward(x, dy, weight, rstd, offset, casting, dy if in_place else None)
