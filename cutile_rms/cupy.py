"""RMSNorm for CuPy arrays, on CuPy's current stream. Needs no torch.

    y = x / sqrt(mean(x**2, axis=-1) + eps) * (offset + weight)

    import cupy as cp
    import cutile_rms.cupy as crms

    y, rstd = crms.rms_norm(x, w, return_rstd=True)
    dx, dw = crms.rms_norm_backward(x, dy, w, rstd)

The same launchers serve torch and CuPy (arrays cross through DLPack), so the results are
bitwise those of :func:`cutile_rms.rms_norm` on the same data. Outputs are new C-contiguous
CuPy arrays; exchange with torch is zero-copy (``torch.from_dlpack(y)``, ``cupy.from_dlpack(t)``).
In interpret mode (:mod:`cutile_rms.interpret`) NumPy arrays are accepted and run on the CPU.
"""

import ml_dtypes
import numpy as np

from cutile_rms import interpret
from cutile_rms._device import INTERPRET_DEVICE, device_info
from cutile_rms.rmsnorm.launch import casting_code, check_arguments, forward_casting, run_backward, run_forward
from cutile_rms.rows import launch as RL
from cutile_rms.rows.plan import backward_by_default, few_rows, same_bits

__all__ = ["rms_norm", "rms_norm_backward", "rms_norm_fp8"]

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _namespace(name, a):
    """cupy for a CuPy array; numpy for a NumPy array in interpret mode; TypeError otherwise."""
    module = type(a).__module__
    if module.startswith("cupy"):
        import cupy

        return cupy
    if isinstance(a, np.ndarray):
        if not interpret.is_enabled():
            raise ValueError(f"{name} is a NumPy array; NumPy arrays run only in interpret mode (cutile_rms.interpret)")
        return np
    raise TypeError(f"{name} must be a CuPy array, got {type(a).__name__}")


def _check(name, a, xp, device_id):
    if _namespace(name, a) is not xp:
        raise TypeError(f"{name} must be a {xp.__name__} array like x, got {type(a).__name__}")
    if a.dtype not in SUPPORTED_DTYPES:
        kind = "floating-point" if np.issubdtype(a.dtype, np.floating) else "non-floating"
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {kind} dtype {a.dtype}")
    if xp is not np and a.device.id != device_id:
        raise ValueError(f"{name} is on device {a.device.id} but x is on device {device_id}; put them on one device")


def _validate(x, weight, eps, offset, casting_mode):
    xp = _namespace("x", x)
    device_id = None if xp is np else x.device.id
    _check("x", x, xp, device_id)
    if weight is not None:
        _check("weight", weight, xp, device_id)
    check_arguments(x.shape, None if weight is None else weight.shape, eps, offset)
    return xp, device_id, casting_code(casting_mode, x.dtype == np.float32)


def _rows(xp, a, n):
    """(M, N) view with unit stride along N (padded rows allowed); copies other layouts once."""
    a2 = a.reshape(-1, n)
    return a2 if a2.strides[1] == a2.itemsize else xp.ascontiguousarray(a2)


def _unit(xp, w):
    return None if w is None else (w if w.strides[0] == w.itemsize else xp.ascontiguousarray(w))


class _Target:
    """Stream, DeviceInfo and current device for a launch on x's device."""

    def __init__(self, xp, device_id):
        if xp is np:
            self.stream, self.info, self._device = None, INTERPRET_DEVICE, None
        else:
            self._device = xp.cuda.Device(device_id)
            with self._device:
                self.stream = xp.cuda.get_current_stream()
            self.info = device_info(device_id)

    def __enter__(self):
        if self._device is not None:
            self._device.__enter__()
        return self

    def __exit__(self, *exc):
        if self._device is not None:
            self._device.__exit__(*exc)


def rms_norm(x, weight=None, eps=1e-6, *, offset=0.0, casting_mode="llama", mode=None, return_rstd=False):
    """``y = x / sqrt(mean(x**2, axis=-1) + eps) * (offset + weight)`` for a CuPy array x.

    Arguments as :func:`cutile_rms.rms_norm`. Returns y (x's shape and dtype, C-contiguous),
    or ``(y, rstd)`` with ``return_rstd=True`` (fp32, shape ``x.shape[:-1]``), the input of
    :func:`rms_norm_backward`. Without ``return_rstd`` the kernel skips the rstd store.
    """
    xp, device_id, casting = _validate(x, weight, eps, offset, casting_mode)
    n = x.shape[-1]
    with _Target(xp, device_id) as target:
        x2 = _rows(xp, x, n)
        m = x2.shape[0]
        y = xp.empty((m, n), dtype=x.dtype)
        rstd = xp.empty((m,), dtype=np.float32) if return_rstd else None
        w_size = None if weight is None else weight.itemsize
        strides = [x2.strides[0] // x.itemsize] if m > 1 else []
        bits = x.itemsize == 4 and same_bits(x.itemsize, w_size, _address(x2), strides)
        rows = _rows_plan(mode, m, n, x.itemsize, target.info, x2.flags.c_contiguous, bits)
        if rows is not None:
            r2 = None if rstd is None else rstd.reshape(m, 1)
            code = forward_casting(casting, x, weight, y, offset)
            RL.run_forward(rows, x2.reshape(m, 1, n), _unit(xp, weight), y.reshape(m, 1, n), r2, float(eps),
                           float(offset), code, target.info, target.stream,
                           empty=lambda shape: xp.empty(shape, dtype=weight.dtype), int64=_int64(xp))  # fmt: skip
        elif m:
            run_forward(
                x2, _unit(xp, weight), y, rstd, float(eps), float(offset), casting, None if mode == "rows" else mode,
                target.info, target.stream, int64=_int64(xp),
            )  # fmt: skip
    y = y.reshape(x.shape)
    return (y, rstd.reshape(x.shape[:-1])) if return_rstd else y


def _rows_plan(mode, m, n, itemsize, info, contiguous, core_bits=False):
    """The row-tile forward's plan for m rows of n (mode None or "rows", as in the torch API),
    or None: the core plan runs; contiguous rows may take the flat rows kernel (plan.flat_fit);
    core_bits: plan's (plan.same_bits of the call's rows and weight)."""
    if m == 0 or mode not in (None, "rows"):
        return None
    flat = None if contiguous else False
    return RL.plan("forward", m, 1, n, itemsize, info.num_sms, flat=flat, core_bits=core_bits)


def _int64(xp):
    """The launchers' int64 workspace allocator, on the current device (see the torch front
    end's): zero-filled for the split slots."""
    return lambda shape, zeroed: (xp.zeros if zeroed else xp.empty)(shape, dtype=np.int64)


def _as_words(a):
    """int32 view of a 16-bit array with unit last stride, for the packed backward; None
    where an odd offset, row stride or row length allows no view."""
    if a.itemsize != 2 or a.shape[-1] % 2 or any(s % 4 for s in a.strides[:-1]) or _address(a) % 4:
        return None
    return a.view(np.int32)


def _address(a) -> int:
    """The address of a's first element (a NumPy array in interpret mode, else a CuPy one)."""
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def rms_norm_backward(x, dy, weight, rstd, *, offset=0.0, casting_mode="llama"):
    """``(dx, dw)`` for CuPy arrays, as :func:`cutile_rms.rms_norm_backward` (dw is None when
    weight is None). rstd comes from ``rms_norm(..., return_rstd=True)``."""
    xp, device_id, casting = _validate(x, weight, 0.0, offset, casting_mode)
    _check("dy", dy, xp, device_id)
    if dy.shape != x.shape:
        raise ValueError(f"dy must have x's shape {x.shape}, got {dy.shape}")
    if dy.dtype != x.dtype:
        raise TypeError(f"dy must have x's dtype {x.dtype}, got {dy.dtype}")
    if _namespace("rstd", rstd) is not xp or rstd.dtype != np.float32:
        raise TypeError(f"rstd must be a float32 {xp.__name__} array")
    if rstd.shape != x.shape[:-1]:
        raise ValueError(f"rstd must have shape {x.shape[:-1]} (x.shape[:-1]), got {rstd.shape}")
    if xp is not np and rstd.device.id != device_id:
        raise ValueError(f"rstd is on device {rstd.device.id} but x is on device {device_id}")
    n = x.shape[-1]
    with _Target(xp, device_id) as target:
        x2, dy2 = _rows(xp, x, n), _rows(xp, dy, n)
        m = x2.shape[0]
        dx = xp.empty((m, n), dtype=x.dtype)
        dw = None if weight is None else xp.empty(weight.shape, dtype=weight.dtype)
        if m:

            def empty_f32(shape):
                return xp.empty(shape, dtype=np.float32)

            r = xp.ascontiguousarray(rstd.reshape(m))
            p = None
            # as the torch API: contiguous rows may run the flat backward (plan.flat_fit)
            if backward_by_default(n, x.itemsize) or few_rows(m, n, target.info.num_sms):
                flat = x2.flags.c_contiguous and dy2.flags.c_contiguous
                p = RL.plan("backward", m, 1, n, x.itemsize, target.info.num_sms, flat=None if flat else False)
            if p is not None:  # as the torch API: the same kernel, the same bits
                RL.run_backward(p, x2.reshape(m, 1, n), dy2.reshape(m, 1, n), _unit(xp, weight), r.reshape(m, 1),
                                dx.reshape(m, 1, n), dw, float(offset), casting, empty_f32, target.info,
                                target.stream, empty=lambda shape: xp.empty(shape, dtype=weight.dtype))  # fmt: skip
            else:
                run_backward(
                    x2, dy2, _unit(xp, weight), r, dx, dw, float(offset), casting, empty_f32, target.info,
                    target.stream, int64=_int64(xp), as_words=_as_words,
                )  # fmt: skip
        elif dw is not None:
            dw[...] = 0  # the sum over no rows
    return dx.reshape(x.shape), dw


FP8_FORMATS = ("e4m3", "e5m2")  # float8_e4m3fn (max 448) and float8_e5m2 (max 57344)


def rms_norm_fp8(x, weight=None, eps=1e-6, *, scale=None, fmt="e4m3", offset=0.0, casting_mode="llama"):
    """``y = saturate(rne(x / sqrt(mean(x**2, axis=-1) + eps) * (offset + weight) / s))`` in FP8,
    for CuPy arrays (experimental; as :func:`cutile_rms.experimental.rms_norm_fp8`).

    CuPy has no FP8 dtype: y is an int8 array of x's shape holding the FP8 bits of format
    ``fmt`` ("e4m3": float8_e4m3fn, "e5m2": float8_e5m2). View it as FP8 with
    ``torch.from_dlpack(y).view(torch.float8_e4m3fn)``, or on the host with
    ``y.get().view(ml_dtypes.float8_e4m3fn)``. With a static ``scale`` (a 1-element float32
    array) returns ``(y, amax)``; with ``scale=None``, per-row scales: ``(y, scales)`` (float32,
    ``x.shape[:-1]``).
    """
    from cutile_rms.experimental.fp8 import kernels as F8K
    from cutile_rms.experimental.fp8 import launch as F8

    xp, device_id, casting = _validate(x, weight, eps, offset, casting_mode)
    if fmt not in FP8_FORMATS:
        raise ValueError(f"fmt must be one of {FP8_FORMATS}, got {fmt!r}")
    if scale is not None:
        if _namespace("scale", scale) is not xp or scale.dtype != np.float32 or scale.size != 1:
            raise TypeError(f"scale must be a 1-element float32 {xp.__name__} array or None")
        if xp is not np and scale.device.id != device_id:
            raise ValueError(f"scale is on device {scale.device.id} but x is on device {device_id}")
    code = F8K.FMT_E4M3 if fmt == "e4m3" else F8K.FMT_E5M2
    n = x.shape[-1]
    with _Target(xp, device_id) as target:
        x2 = _rows(xp, x, n)
        m = x2.shape[0]
        y = xp.empty((m, n), dtype=np.int8)
        stat = xp.empty((m,), dtype=np.float32) if scale is None else xp.zeros((1,), dtype=np.float32)
        if m:
            p = F8.fp8_plan(m, 1, n, x.itemsize, target.info.num_sms)
            s1 = None if scale is None else xp.ascontiguousarray(scale.reshape(1))
            st = stat.reshape(m, 1) if scale is None else stat.view(np.int32)
            F8.run_forward(p, x2.reshape(m, 1, n), None, _unit(xp, weight), y.reshape(m, 1, n), None, None, s1, st,
                           float(eps), float(offset), casting, code, target.info, target.stream)  # fmt: skip
    y = y.reshape(x.shape)
    return (y, stat.reshape(x.shape[:-1])) if scale is None else (y, stat)
