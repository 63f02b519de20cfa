"""PyTorch layer for RMSNorm: validation, allocation with torch's allocator, launches on the
tensor's device and current stream, and the autograd Function.

    y = x / sqrt(mean(x^2, last dim) + eps) * (offset + weight)
"""

import torch

from cutile_rms import interpret
from cutile_rms._device import device_info
from cutile_rms.rmsnorm.config import plan_backward, plan_forward
from cutile_rms.rmsnorm.launch import casting_code, launch_backward, launch_forward

__all__ = ["rms_norm", "rms_norm_backward", "rms_norm_forward"]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_INT32_MAX = 2**31 - 1


def _check_tensor(name: str, t) -> None:
    """Type and dtype. The device is checked last (_check_device), so that every other
    mistake is reported the same way with or without a GPU."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        kind = "floating-point" if t.dtype.is_floating_point else "non-floating"
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {kind} dtype {t.dtype}")


def _check_device(x: torch.Tensor, **others) -> None:
    if interpret.is_enabled():
        if x.device.type != "cpu":
            raise ValueError(f"interpret mode (CUTILE_RMS_INTERPRET) runs on CPU tensors; x is on {x.device}")
    elif x.device.type != "cuda":
        hint = " (or enable interpret mode: CUTILE_RMS_INTERPRET=1)" if x.device.type == "cpu" else ""
        raise ValueError(f"x must be on a CUDA device, got {x.device}{hint}")
    for name, t in others.items():
        if t is not None and t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but x is on {x.device}; put them on one device")


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """(M, N) view of t with unit stride along N; copies only when no such view exists."""
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(1) == 1 else t2.contiguous()


def _validate_x_weight(x, weight, eps, offset, casting_mode) -> int:
    _check_tensor("x", x)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (the normalized one)")
    n = x.shape[-1]
    if n == 0:
        raise ValueError("x has an empty last dimension: the RMS of zero elements is undefined")
    if n > _INT32_MAX:
        raise ValueError(f"the last dimension of x ({n}) exceeds 2**31 - 1")
    if weight is not None:
        _check_tensor("weight", weight)
        if tuple(weight.shape) != (n,):
            raise ValueError(f"weight must have shape ({n},) to match x's last dimension, got {tuple(weight.shape)}")
    elif offset != 0.0:
        raise ValueError("offset applies to the weight; it has no meaning with weight=None")
    if not isinstance(eps, int | float) or not eps >= 0.0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    return casting_code(casting_mode, x.dtype == torch.float32)


class _Launch:
    """Device, stream and SM count for launching on x's device (in interpret mode: no stream,
    and the interpreter's small SM count)."""

    __slots__ = ("_guard", "device", "num_sms", "stream")

    def __init__(self, x: torch.Tensor):
        self.device = x.device
        if x.device.type == "cpu":  # interpret mode (checked by _check_device)
            self.stream = None
            self.num_sms = interpret.INTERPRET_NUM_SMS
        else:
            self.stream = torch.cuda.current_stream(x.device)
            self.num_sms = device_info(x.device.index).num_sms

    def __enter__(self):
        # Launches go to the current CUDA context: make x's device current if it is not.
        self._guard = None
        if self.device.type == "cuda" and self.device.index != torch.cuda.current_device():
            self._guard = torch.cuda.device(self.device)
            self._guard.__enter__()
        return self

    def __exit__(self, *exc):
        if self._guard is not None:
            self._guard.__exit__(*exc)


def _forward(x, weight, eps, offset, casting, mode, store_rstd):
    n = x.shape[-1]
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device) if store_rstd else None
    if x.numel() == 0:
        return y, rstd
    x2 = _rows(x.detach(), n)
    m = x2.shape[0]
    with _Launch(x) as ln:
        plan = plan_forward(m, n, ln.num_sms, mode)
        w = None if weight is None else weight.detach()
        r = None if rstd is None else rstd.view(m)
        launch_forward(plan, x2, w, y.view(m, n), r, eps, offset, casting, ln.stream)
    return y, rstd


def _backward(x, dy, weight, rstd, offset, casting):
    n = x.shape[-1]
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dw = None if weight is None else torch.empty_like(weight)
    if x.numel() == 0:
        if dw is not None:
            dw.zero_()
        return dx, dw
    x2 = _rows(x.detach(), n)
    dy2 = _rows(dy.detach(), n)
    m = x2.shape[0]
    with _Launch(x) as ln:
        plan = plan_backward(m, n, ln.num_sms)
        dw_partial = None
        if weight is not None:
            dw_partial = torch.empty((plan.partial_rows, n), dtype=torch.float32, device=x.device)
        row_dot = torch.empty((m,), dtype=torch.float32, device=x.device) if plan.needs_row_dot else None
        w = None if weight is None else weight.detach()
        launch_backward(
            plan, x2, dy2, w, rstd.detach().reshape(m), dx.view(m, n), dw, dw_partial, row_dot,
            offset, casting, ln.stream,
        )  # fmt: skip
    return dx, dw


class RMSNormFunction(torch.autograd.Function):
    """Autograd Function: forward stores rstd (fp32, one per row); backward runs the fused
    persistent backward (dx and the partial-buffer dW reduction)."""

    @staticmethod
    def forward(ctx, x, weight, eps, offset, casting, mode):
        y, rstd = _forward(x, weight, eps, offset, casting, mode, store_rstd=True)
        ctx.save_for_backward(x, weight, rstd)
        ctx.offset = offset
        ctx.casting = casting
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = _backward(x, dy, weight, rstd, ctx.offset, ctx.casting)
        return (
            dx if ctx.needs_input_grad[0] else None,
            dw if ctx.needs_input_grad[1] else None,
            None,
            None,
            None,
            None,
        )


def rms_norm(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", mode=None):
    """``y = x / sqrt(mean(x**2, dim=-1) + eps) * (offset + weight)``, differentiable in x and weight.

    Args:
        x: CUDA tensor of shape (..., N), float32, float16 or bfloat16. Any leading dims.
        weight: (N,) tensor on x's device (any of the three dtypes), or None for no affine
            (then ``y = xhat`` and ``offset`` must be 0).
        eps: added to the mean of squares; a runtime value (no recompile per value).
        offset: 0 for Llama-style weights, 1 for Gemma (weights stored as ``w - 1``).
        casting_mode: where rounding to the input dtype happens, as in Liger-Kernel.
            "llama": statistics in fp32, ``xhat`` rounded to x's dtype before the weight multiply;
            "gemma": everything in fp32, y rounded once; "none": mean of squares in fp32, the
            rest in x's dtype. With float32 input the three are identical.
        mode: None (automatic), "persistent" or "gather" to force a forward kernel.

    Returns:
        y, contiguous, with x's shape and dtype. When no input requires grad (or grad mode is
        off) the forward skips the rstd store entirely.
    """
    casting = _validate_x_weight(x, weight, eps, offset, casting_mode)
    _check_device(x, weight=weight)
    needs_grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad))
    if not needs_grad:
        return _forward(x, weight, eps, offset, casting, mode, store_rstd=False)[0]
    return RMSNormFunction.apply(x, weight, eps, offset, casting, mode)


def rms_norm_forward(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", mode=None, store_rstd=True):
    """The forward of :func:`rms_norm` without autograd: returns ``(y, rstd)``.

    ``rstd = 1 / sqrt(mean(x**2, dim=-1) + eps)`` in float32 with shape ``x.shape[:-1]``
    (None when ``store_rstd=False``). Feed it to :func:`rms_norm_backward`.
    """
    casting = _validate_x_weight(x, weight, eps, offset, casting_mode)
    _check_device(x, weight=weight)
    return _forward(x, weight, eps, offset, casting, mode, store_rstd)


def rms_norm_backward(x, dy, weight, rstd, *, offset=0.0, casting_mode="llama"):
    """Gradients of ``y = xhat * (offset + weight)``: returns ``(dx, dw)``.

    ``dx = rstd * (wdy - xhat * mean(wdy * xhat))`` with ``wdy = (offset + weight) * dy`` and
    ``dw = sum over rows of dy * xhat`` (None when weight is None). All math is fp32; with
    casting_mode "llama" or "none" dw uses xhat rounded to x's dtype, as the forward did.
    dw is reduced from per-block fp32 partials in a fixed order: the same inputs give
    bitwise-identical dx and dw on every run.

    Args:
        x: the forward's input, (..., N). dy: the gradient of y, x's shape and dtype.
        weight: (N,) or None. rstd: float32 of shape x.shape[:-1] (from :func:`rms_norm_forward`).
    """
    casting = _validate_x_weight(x, weight, 0.0, offset, casting_mode)
    _check_tensor("dy", dy)
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
    _check_device(x, weight=weight, dy=dy, rstd=rstd)
    return _backward(x, dy, weight, rstd, offset, casting)
