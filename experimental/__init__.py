"""Experimental kernels: importable as ``cutile_rms.experimental``.

New kernel families start here, each kernel marked ``@experimental_kernel`` (its first launch
warns once), and are tested in the experimental tier (``pytest -m experimental``) until they
meet the promotion bar in CONTRIBUTING.md and move into ``cutile_rms/``.

- ``fused_add_rms_norm(x, residual, weight, ...) -> (y, residual_out)`` and the in-place
  inference variant ``fused_add_rms_norm_`` (package ``fused_add``).
- ``rms_norm_fp8(x, weight, eps, *, scale=None, out_dtype=torch.float8_e4m3fn, ...)`` -> (y, scale,
  amax, rstd): RMSNorm that writes FP8, with a static or per-row dynamic scale (package ``fp8``).
"""

import importlib

_API = {
    "FusedAddRMSNormFunction": "cutile_rms.experimental.fused_add.functional",
    "fused_add_rms_norm": "cutile_rms.experimental.fused_add.functional",
    "fused_add_rms_norm_": "cutile_rms.experimental.fused_add.functional",
    "FP8Activation": "cutile_rms.experimental.fp8.functional",
    "RMSNormFP8Output": "cutile_rms.experimental.fp8.functional",
    "rms_norm_fp8": "cutile_rms.experimental.fp8.functional",
}

__all__ = sorted(_API)


def __getattr__(name):  # the torch API is imported on first use, as in cutile_rms
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'cutile_rms.experimental' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
