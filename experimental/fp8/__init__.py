"""RMSNorm with FP8 output (experimental): kernels, launchers and the torch API."""
