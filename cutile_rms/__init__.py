"""cutile-rms: RMSNorm GPU kernels in NVIDIA cuTile, for PyTorch, CuPy and any DLPack array.

    from cutile_rms import rms_norm, rms_norm_backward, RMSNorm, patch_model
    import cutile_rms.cupy                     # CuPy arrays (no torch needed)

The torch API is imported on first use, so ``import cutile_rms.cupy`` works without torch.
"""

import importlib
import os

from cutile_rms._launch import ExperimentalKernelWarning, experimental_kernel

__version__ = "0.1.0"

# Installed, the top-level experimental/ folder is the subpackage cutile_rms.experimental
# (pyproject's package-dir). Run from a source checkout without installing (PYTHONPATH=.,
# `python -m bench` in the repo root), nothing maps it: let this package's search path include
# the checkout so that cutile_rms.experimental is found in experimental/ there too.
_checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isfile(os.path.join(_checkout, "experimental", "__init__.py")) and os.path.isfile(
    os.path.join(_checkout, "pyproject.toml")
):
    __path__.append(_checkout)

# Public names that need torch, and the module each one lives in (imported on first access).
_TORCH_API = {
    "RMSNorm": "cutile_rms.rmsnorm.module",
    "patch_model": "cutile_rms.patching",
    "rms_norm": "cutile_rms.rmsnorm.functional",
    "rms_norm_backward": "cutile_rms.rmsnorm.functional",
    "rms_norm_forward": "cutile_rms.rmsnorm.functional",
}

__all__ = ["ExperimentalKernelWarning", "experimental_kernel", *sorted(_TORCH_API)]


def __getattr__(name):
    module = _TORCH_API.get(name)
    if module is None:
        raise AttributeError(f"module 'cutile_rms' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ImportError as e:
        raise ImportError(f"cutile_rms.{name} needs PyTorch: pip install 'cutile-rms[torch]' ({e})") from e
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_TORCH_API))
