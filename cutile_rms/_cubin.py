"""Kernel specializations compiled ahead through cuTile's documented compile-ahead API
(``cuda.tile.compilation``), cached on disk, launched through the CUDA driver (issue 21).

ct.launch derives a specialization from each call's arrays, compiles it once and launches it;
its per-call work is most of our eager host time. This module does the same in three steps that
a launcher of our own can hold on to:

- ``array_constraint``: the promises one array keeps (dtype, rank, the base's 16-byte alignment,
  which strides divide by 16 bytes or are 1, which dims divide by 16 or are 1), as the
  ArrayConstraint of the ``cutile_python_v2`` convention. Derived from the array itself, and used
  as the specialization's key: a launch only ever runs a cubin whose promises its arrays keep.
- ``CubinCache.get``: the cubin of (kernel, signature, hints, GPU architecture), compiled by
  ``export_kernel`` on a miss and kept on disk under a digest of everything that changes the
  code: the package's source files, the constants and constraints, the hints, the architecture,
  and the cuda-tile and tileiras versions (tileiras 13.5 ran our tuned forward up to 1.3x slower
  than 13.4: a compiler change must not reuse a cubin).
- ``CubinKernel``: a cubin loaded with the CUDA driver, launched on a grid of tile blocks (block
  (1, 1, 1), as tile kernels are) with the parameter buffer of :mod:`cutile_rms._abi`.

Not yet a launch path of the package: ct.launch stays the default, and a GPU test compares the
two launches bitwise.
"""

import ctypes
import functools
import hashlib
import io
import os
import re
import shutil
import subprocess
import tempfile
import threading
from typing import NamedTuple

import cuda.tile as ct
from cuda.tile.compilation import (
    ArrayConstraint,
    CallingConvention,
    KernelSignature,
    ScalarConstraint,
    export_kernel,
)

from cutile_rms import _abi

__all__ = [
    "Array",
    "CubinCache",
    "CubinKernel",
    "array_constraint",
    "find_tool",
    "runtime_values",
    "signature",
    "tileiras_version",
]

_ALIGN = 16  # bytes: the base alignment and stride divisibility the JIT specializes on
_DIM_DIVISOR = 16  # the dim divisibility it specializes on


class Array(NamedTuple):
    """A device array as a launch sees it: data pointer, cuTile dtype, shape and strides in
    elements (what DLPack or __cuda_array_interface__ give)."""

    ptr: int
    dtype: object
    shape: tuple
    strides: tuple


def _itemsize(dtype) -> int:
    return dtype.bitwidth // 8


def array_constraint(a: Array, int64: bool = False) -> ArrayConstraint:
    """The promises array a keeps, as cutile_python_v2's ArrayConstraint: its base 16-byte
    aligned (else aligned to its element), each non-unit stride's divisibility by 16 bytes, unit
    strides and dims of 1 as constants, each dim's divisibility by 16, strides non-negative, no
    aliasing (the caller's promise, as ct.launch's)."""
    es = _itemsize(a.dtype)
    unit = _ALIGN // es if _ALIGN % es == 0 else 1
    return ArrayConstraint(
        a.dtype, len(a.shape), index_dtype=ct.int64 if int64 else ct.int32, stride_lower_bound_incl=0,
        alias_groups=[], may_alias_internally=False,
        stride_constant=[1 if s == 1 else None for s in a.strides],
        shape_constant=[1 if d == 1 else None for d in a.shape],
        stride_divisible_by=[unit if s != 1 and s % unit == 0 else 1 for s in a.strides],
        shape_divisible_by=[_DIM_DIVISOR if d % _DIM_DIVISOR == 0 else 1 for d in a.shape],
        base_addr_divisible_by=_ALIGN if a.ptr % _ALIGN == 0 else es,
    )  # fmt: skip


def _is_scalar(p) -> bool:
    return isinstance(p, tuple) and not isinstance(p, Array) and len(p) == 2 and isinstance(p[0], ScalarConstraint)


def signature(params) -> KernelSignature:
    """The cutile_python_v2 signature of a kernel's parameters, in order: each an Array (its
    constraint), a (ScalarConstraint, value) pair (a runtime scalar) or a plain value (a
    compile-time constant); the same list ``runtime_values`` takes."""
    parts = [array_constraint(p) if isinstance(p, Array) else p[0] if _is_scalar(p) else p for p in params]
    return KernelSignature(parts, calling_convention=CallingConvention.cutile_python_v2())


def runtime_values(params) -> list:
    """The values of the parameter buffer, one per _abi slot: an Array's pointer, shape and
    strides; a runtime scalar's value (given as (ScalarConstraint, value)); nothing for a constant."""
    out = []
    for p in params:
        if isinstance(p, Array):
            out += [p.ptr, *p.shape, *p.strides]
        elif _is_scalar(p):
            out.append(p[1])
    return out


def find_tool(name: str) -> str:
    """Path of a CUDA tool (tileiras, cuobjdump, nvdisasm): on PATH, or in pip's nvidia/cu13/bin,
    where cuda-tile[tileiras] puts tileiras and the test extras cuobjdump and nvdisasm."""
    cands = [shutil.which(name)]
    try:
        import nvidia

        cands += [os.path.join(d, "cu13", "bin", name) for d in nvidia.__path__]
    except ImportError:
        pass
    for cand in cands:
        if cand and os.path.exists(cand):
            return cand
    raise FileNotFoundError(f"{name} not found (pip install 'cuda-tile[tileiras]' nvidia-cuda-cuobjdump "
                            "nvidia-cuda-nvdisasm)")  # fmt: skip


@functools.cache
def tileiras_version() -> str:
    """tileiras' version (e.g. "13.4.92"), from ``tileiras --version``."""
    text = subprocess.run([find_tool("tileiras"), "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"V(\d+\.\d+\.\d+)", text)
    if not found:
        raise RuntimeError(f"no version in tileiras --version: {text!r}")
    return found.group(1)


@functools.cache
def _sources_digest() -> str:
    """sha256 of the package's Python sources, experimental kernels included: any edit to the
    package gives new cubins (conservative: a kernel's code can come from any of its modules)."""
    import cutile_rms

    roots = list(cutile_rms.__path__)
    try:
        import cutile_rms.experimental as experimental

        roots += list(experimental.__path__)
    except ImportError:
        pass
    h = hashlib.sha256()
    for root in roots:
        for d, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(f for f in files if f.endswith(".py")):
                with open(os.path.join(d, name), "rb") as f:
                    h.update(os.path.relpath(os.path.join(d, name), root).encode() + b"\0" + f.read())
    return h.hexdigest()


class CubinCache:
    """Cubins on disk under ``directory``, one file per digest of (kernel name, signature, hints,
    architecture, cuda-tile version, tileiras version, the package's sources); compiled by export_kernel
    on a miss, written atomically (a temporary file renamed), so processes can share it."""

    def __init__(self, directory: str, compiler_version: str | None = None):
        self.directory = directory
        self.compiler_version = compiler_version or tileiras_version()
        self.compiles = 0  # misses of this object, for tests and reports

    def digest(self, name: str, sig: KernelSignature, hints: dict, arch: str) -> str:
        key = repr((name, sig.parameters, sorted(hints.items()), arch, ct.__version__, self.compiler_version,
                    _sources_digest()))  # fmt: skip
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def get(self, name: str, kernel, sig: KernelSignature, hints: dict, arch: str) -> tuple[str, bytes]:
        """(symbol, cubin) of kernel (``name``: its stable name in our code) at sig with hints
        (kernel.replace_hints keywords) for arch (e.g. "sm_90")."""
        sig = sig.with_mangled_symbol(name.rsplit(".", 1)[-1])
        path = os.path.join(self.directory, f"{self.digest(name, sig, hints, arch)}.cubin")
        try:
            with open(path, "rb") as f:
                return sig.symbol, f.read()
        except FileNotFoundError:
            pass
        buf = io.BytesIO()
        export_kernel(kernel.replace_hints(**hints) if hints else kernel, [sig], buf, gpu_code=arch,
                      output_format="cubin")  # fmt: skip
        self.compiles += 1
        os.makedirs(self.directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(buf.getvalue())
        os.replace(tmp, path)
        return sig.symbol, buf.getvalue()


def _check(result):
    """The value of a cuda.bindings result (error, value) or (error,); raises on an error."""
    from cuda.bindings import driver

    err, *values = result
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {err}")
    return values[0] if values else None


class CubinKernel:
    """One cubin's kernel, loaded into the current CUDA context, with its parameter layout."""

    def __init__(self, cubin: bytes, symbol: str, sig: KernelSignature):
        from cuda.bindings import driver

        self._module = _check(driver.cuModuleLoadData(cubin))
        self._function = _check(driver.cuModuleGetFunction(self._module, symbol.encode()))
        self.layout = _abi.parameter_layout(sig.parameters)
        # one parameter buffer and its slot pointers, written per launch (cuLaunchKernel copies
        # the values before it returns); the lock keeps two threads' launches apart
        self._struct = _abi.packer(self.layout)
        self._buffer = ctypes.create_string_buffer(max(8, self._struct.size))
        base = ctypes.addressof(self._buffer)
        self._pointers = (ctypes.c_void_p * len(self.layout))(*[base + s.offset for s in self.layout])
        self._params = ctypes.addressof(self._pointers)
        self._lock = threading.Lock()

    def launch(self, stream: int, grid: tuple, values) -> None:
        """Launch on stream (a CUstream handle as an int) over grid (up to three dims) with the
        runtime values of ``runtime_values``: Python ints for pointers, index values and int
        scalars, floats for float scalars (packed as they are: a wrong type or count raises
        struct.error). Through cuda.bindings' cuLaunchKernel: about 6 us a call on the H200 host, where ctypes
        straight to libcuda cost about 8.5 (bench/NOTES.md, session 27)."""
        from cuda.bindings import driver

        gx, gy, gz = (*grid, 1, 1)[:3]
        with self._lock:
            self._struct.pack_into(self._buffer, 0, *values)
            _check(driver.cuLaunchKernel(self._function, gx, gy, gz, 1, 1, 1, 0, stream, self._params, 0))
