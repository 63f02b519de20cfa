"""Fused residual-add RMSNorm (experimental): ``residual_out = x + residual`` and
``y = rms_norm(residual_out)`` in one kernel, with its backward and an in-place inference
variant. See :mod:`cutile_rms.experimental.fused_add.functional`."""
