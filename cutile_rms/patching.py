"""``patch_model``: swap the RMSNorm modules of a Hugging Face ``transformers`` model instance
for cutile-rms modules, in place.

Only the given instance changes: no class, function or module global of ``transformers`` is
touched, and other models in the process keep their own norms. The replacements share the
original ``weight`` Parameters (same objects), so optimizers, tied weights, ``state_dict`` and
``save_pretrained`` see exactly what they saw before. Modules are recognised by class name, so
this module never imports ``transformers``.
"""

from dataclasses import dataclass

import torch
from torch import nn

from cutile_rms.rmsnorm.module import RMSNorm

__all__ = ["HF_RMSNORM_CLASSES", "HFNormSpec", "patch_model"]


@dataclass(frozen=True)
class HFNormSpec:
    """How a transformers RMSNorm class computes, in cutile-rms terms.

    offset/casting_mode: see :func:`cutile_rms.rms_norm`. eps_attr: the attribute holding eps.
    promote_output: the class returns ``weight * xhat`` with torch's type promotion (Llama
    family), so the output dtype is ``promote_types(x.dtype, weight.dtype)``; otherwise x's dtype.
    """

    offset: float
    casting_mode: str
    eps_attr: str
    promote_output: bool


# Llama family: fp32 statistics, xhat rounded to the input dtype, then `weight * xhat`.
_LLAMA = HFNormSpec(offset=0.0, casting_mode="llama", eps_attr="variance_epsilon", promote_output=True)
# Gemma family: weights stored as w - 1, everything in fp32, `(xhat * (1 + w)).type_as(x)`.
_GEMMA = HFNormSpec(offset=1.0, casting_mode="gemma", eps_attr="eps", promote_output=False)

HF_RMSNORM_CLASSES = {
    "LlamaRMSNorm": _LLAMA,
    "MistralRMSNorm": _LLAMA,
    "Qwen2RMSNorm": _LLAMA,
    "Qwen3RMSNorm": _LLAMA,
    "Qwen3MoeRMSNorm": _LLAMA,
    "GemmaRMSNorm": _GEMMA,
    "Gemma2RMSNorm": _GEMMA,
    "Gemma3RMSNorm": _GEMMA,
}


class HFRMSNorm(RMSNorm):
    """An :class:`RMSNorm` that reproduces a transformers class's output dtype."""

    def __init__(self, hidden_size, eps, spec: HFNormSpec, weight: nn.Parameter):
        super().__init__(hidden_size, eps, device="meta", offset=spec.offset, casting_mode=spec.casting_mode)
        self.weight = weight  # the original Parameter object, not a copy
        self.promote_output = spec.promote_output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        if self.promote_output:
            # The Llama family returns weight * xhat in the promoted dtype. The kernel already
            # rounded to x's dtype, so with a wider weight this differs from transformers by
            # that one rounding (it is exact when the dtypes agree, the usual case).
            return y.to(torch.promote_types(x.dtype, self.weight.dtype))
        return y


def _replacement(module: nn.Module, spec: HFNormSpec) -> HFRMSNorm | None:
    weight = getattr(module, "weight", None)
    eps = getattr(module, spec.eps_attr, None)
    if not isinstance(weight, nn.Parameter) or weight.dim() != 1 or not isinstance(eps, int | float):
        return None  # not the layout we know: leave it alone
    return HFRMSNorm(weight.shape[0], float(eps), spec, weight)


def patch_model(model: nn.Module) -> dict[str, nn.Module]:
    """Replace every known RMSNorm module of a transformers model (Llama, Mistral, Qwen2,
    Qwen3, Gemma, Gemma2, Gemma3; see ``HF_RMSNORM_CLASSES``) with a cutile-rms module, in place.

    Returns ``{qualified name: original module}`` for what was replaced (empty when nothing
    matched). Swapping the originals back restores the model. Calling it twice is harmless: a
    patched module is not matched again.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"patch_model expects a torch.nn.Module, got {type(model).__name__}")
    replaced: dict[str, nn.Module] = {}
    for name, module in list(model.named_modules()):
        spec = HF_RMSNORM_CLASSES.get(type(module).__name__)
        if spec is None or not name:
            continue
        new = _replacement(module, spec)
        if new is None:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
        replaced[name] = module
    return replaced
