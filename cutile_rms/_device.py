"""Device queries without a tensor framework (cuda.core), cached per device id."""

import functools
from dataclasses import dataclass

__all__ = ["DeviceInfo", "device_info", "dlpack_device_id"]

_DLPACK_CUDA = 2  # DLDeviceType kDLCUDA
_DLPACK_CUDA_MANAGED = 13  # kDLCUDAManaged


@dataclass(frozen=True)
class DeviceInfo:
    device_id: int
    num_sms: int
    compute_capability: tuple[int, int]


@functools.lru_cache(maxsize=64)  # one entry per GPU of the machine
def device_info(device_id: int) -> DeviceInfo:
    from cuda.core import Device  # imported lazily: importing cutile_rms needs no driver

    dev = Device(device_id)
    cc = dev.compute_capability
    return DeviceInfo(device_id, int(dev.properties.multiprocessor_count), (int(cc.major), int(cc.minor)))


def dlpack_device_id(array) -> int:
    """The CUDA device ordinal of a DLPack-capable array; ValueError if it is not on a GPU."""
    try:
        dev_type, dev_id = array.__dlpack_device__()
    except AttributeError:
        raise TypeError(f"expected a DLPack-capable array, got {type(array).__name__}") from None
    if int(dev_type) not in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
        raise ValueError(f"expected an array on a CUDA device, got DLPack device type {int(dev_type)}")
    return int(dev_id)
