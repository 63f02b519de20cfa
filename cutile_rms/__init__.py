"""cutile-rms: RMSNorm GPU kernels in NVIDIA cuTile, for PyTorch (and any DLPack array).

from cutile_rms import rms_norm, rms_norm_backward, RMSNorm
"""

from cutile_rms._launch import ExperimentalKernelWarning, experimental_kernel
from cutile_rms.rmsnorm.functional import rms_norm, rms_norm_backward, rms_norm_forward
from cutile_rms.rmsnorm.module import RMSNorm

__version__ = "0.1.0"

__all__ = [
    "ExperimentalKernelWarning",
    "RMSNorm",
    "experimental_kernel",
    "rms_norm",
    "rms_norm_backward",
    "rms_norm_forward",
]
