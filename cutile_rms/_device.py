"""Device queries without a tensor framework (cuda.core), cached per device id."""

import functools
import threading
from dataclasses import dataclass

__all__ = ["DeviceInfo", "INTERPRET_DEVICE", "device_info", "dlpack_device_id"]

_DLPACK_CUDA = 2  # DLDeviceType kDLCUDA
_DLPACK_CUDA_MANAGED = 13  # kDLCUDAManaged


@dataclass(frozen=True)
class DeviceInfo:
    device_id: int
    num_sms: int
    compute_capability: tuple[int, int]
    name: str = ""

    @functools.cached_property
    def arch(self) -> str:
        """'sm_90' for compute capability 9.0 (the name of its shipped tuning table)."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @functools.cached_property  # read on every launch (a plan-cache key): built once
    def key(self) -> str | None:
        """What tuning tables are keyed by ("sm_90:NVIDIA H200"); None for the interpreter,
        which plans with the architecture-neutral defaults."""
        return None if self.device_id < 0 else f"{self.arch}:{self.name}"


# What the planners see in interpret mode (cutile_rms.interpret): a small SM count, so that
# persistent grids stay short and each block really strides over several row tiles, as it does
# on a GPU with more rows; no tuning key, so the architecture-neutral defaults apply.
INTERPRET_DEVICE = DeviceInfo(-1, 4, (0, 0), "interpreter")


# cuda.core's first import is not safe from several threads at once: callers of the public API
# on 8 threads, each the process's first call, saw "ImportError: cannot import name 'Device' from
# 'cuda.core.cu13'" (H200, session 22, tests/test_hardening.py::test_concurrent_callers). The
# first query of each device runs under this lock; later ones are lru_cache hits.
_query_lock = threading.Lock()


@functools.lru_cache(maxsize=64)  # one entry per GPU of the machine
def device_info(device_id: int) -> DeviceInfo:
    with _query_lock:
        from cuda.core import Device  # imported lazily: importing cutile_rms needs no driver

        dev = Device(device_id)
        cc = dev.compute_capability
        sms = int(dev.properties.multiprocessor_count)
    return DeviceInfo(device_id, sms, (int(cc.major), int(cc.minor)), str(dev.name))


def dlpack_device_id(array) -> int:
    """The CUDA device ordinal of a DLPack-capable array; ValueError if it is not on a GPU."""
    try:
        dev_type, dev_id = array.__dlpack_device__()
    except AttributeError:
        raise TypeError(f"expected a DLPack-capable array, got {type(array).__name__}") from None
    if int(dev_type) not in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
        raise ValueError(f"expected an array on a CUDA device, got DLPack device type {int(dev_type)}")
    return int(dev_id)
