"""``RMSNorm``: a drop-in for ``torch.nn.RMSNorm`` (same constructor and state_dict)."""

import numbers

import torch
from torch import nn

from cutile_rms.rmsnorm.functional import rms_norm

__all__ = ["RMSNorm"]


class RMSNorm(nn.Module):
    """``y = x / sqrt(mean(x**2) + eps) * (offset + weight)`` over the last
    ``len(normalized_shape)`` dimensions, on cuTile kernels.

    Constructor and state_dict match ``torch.nn.RMSNorm``: ``eps=None`` means
    ``torch.finfo(x.dtype).eps``; ``elementwise_affine=False`` registers no weight. The extra
    keyword arguments are those of :func:`cutile_rms.rms_norm`. The weight starts at
    ``1 - offset`` so that a fresh module computes ``xhat`` (ones for Llama, zeros for Gemma's
    offset 1). The output has x's dtype.
    """

    __constants__ = ["normalized_shape", "eps", "elementwise_affine", "offset", "casting_mode", "mode"]

    def __init__(
        self,
        normalized_shape,
        eps=None,
        elementwise_affine=True,
        device=None,
        dtype=None,
        *,
        offset=0.0,
        casting_mode="llama",
        mode=None,
    ):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.offset = float(offset)
        self.casting_mode = casting_mode
        self.mode = mode
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.constant_(self.weight, 1.0 - self.offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = len(self.normalized_shape)
        if tuple(x.shape[x.dim() - k :]) != self.normalized_shape or x.dim() < k:
            raise ValueError(f"expected input with trailing shape {self.normalized_shape}, got {tuple(x.shape)}")
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        lead = x.shape[: x.dim() - k]
        n = 1
        for d in self.normalized_shape:
            n *= d
        weight = None if self.weight is None else self.weight.reshape(n)
        y = rms_norm(
            x.reshape(*lead, n), weight, eps, offset=self.offset, casting_mode=self.casting_mode, mode=self.mode
        )
        return y.view(x.shape)

    def extra_repr(self) -> str:
        s = f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        if self.offset:
            s += f", offset={self.offset}"
        if self.casting_mode != "llama":
            s += f", casting_mode={self.casting_mode!r}"
        return s
