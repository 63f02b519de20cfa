"""Compile a kernel specialization ahead of time (no GPU) and report what the SASS holds.

The constraints mirror what the JIT derives from real arrays at launch (the rule cuTile's own
JAX binding spells out): a 16-byte aligned base, leading strides divisible by 16 bytes where
they are, unit last stride, each dim's divisibility by 16 and size-1 dims. Reported: registers,
local memory (spills), shared memory, and counts of the memory instructions by width.

    python -m bench.probes.sass            # the built-in table of candidates
"""

import collections
import io
import os
import re
import shutil
import subprocess
import tempfile

import cuda.tile as ct
from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, ScalarConstraint, export_kernel

ES = {ct.bfloat16: 2, ct.float16: 2, ct.float32: 4, ct.int64: 8, ct.int32: 4}
F32 = ScalarConstraint(ct.float32)
I32 = ScalarConstraint(ct.int32)


def array(dtype, shape, strides=None):
    """The constraint the JIT would derive for a C-contiguous (or given-strides) array."""
    if strides is None:
        strides, s = [], 1
        for d in reversed(shape):
            strides.insert(0, s)
            s *= d
    es = ES[dtype]
    unit = 16 // es if 16 % es == 0 else 1
    return ArrayConstraint(
        dtype, len(shape), index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=[],
        may_alias_internally=False,
        stride_constant=[1 if s == 1 else None for s in strides],
        shape_constant=[1 if d == 1 else None for d in shape],
        stride_divisible_by=[unit if s % unit == 0 and s != 1 else 1 for s in strides],
        shape_divisible_by=[16 if d % 16 == 0 else 1 for d in shape],
        base_addr_divisible_by=16,
    )  # fmt: skip


def _tool(name):
    for cand in (shutil.which(name), f"/tmp/tw/triton/backends/nvidia/bin/{name}"):
        if cand and os.path.exists(cand):
            return cand
    raise FileNotFoundError(f"{name} not found (pip's triton wheel carries one in triton/backends/nvidia/bin)")


_MEM = re.compile(r"\b(LDG|STG|LDS|STS|LDL|STL|UTMALDG|UTMASTG|UBLKCP|REDG|ATOMG|LDGSTS)(\.[A-Z0-9_.]+)?")


def compile_report(kernel, params, arch="sm_90", **hints) -> dict:
    """Compile kernel (hints: replace_hints keywords) for params; return its resource report."""
    k = kernel.replace_hints(**hints) if hints else kernel
    buf = io.BytesIO()
    sig = KernelSignature(params, calling_convention=CallingConvention.cutile_python_v2())
    export_kernel(k, [sig], buf, gpu_code=arch, output_format="cubin")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(buf.getvalue())
        f.flush()
        res = subprocess.run([_tool("cuobjdump"), "-res-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([_tool("cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
    out = {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", res)}
    ops = collections.Counter()
    for line in sass.splitlines():
        m = _MEM.search(line)
        if m and "/*" in line:
            op = m.group(1) + (m.group(2) or "")
            ops[re.sub(r"\.(E|CONSTANT|STRONG|GPU|SYS|EF|EL|LU|ZFILL|LTC\d+B)\b", "", op)] += 1
    out["ops"] = dict(ops)
    out["instructions"] = sum(1 for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", line))
    return out


def _aot_array(dtype, shape):
    """The constraint tests/aot.py used up to session 10: no divisibility at all."""
    nd = len(shape)
    return ArrayConstraint(dtype, nd, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=[],
                           may_alias_internally=False, stride_constant=[None] * (nd - 1) + [1])  # fmt: skip


def _cases():
    """(label, kernel, params, hints) of the table in bench/NOTES.md, session 11."""
    from bench.probes import rows_kernels as R
    from cutile_rms.rmsnorm import kernels as K

    bf, f32 = ct.bfloat16, ct.float32
    out = []
    for how, a in (("aot", _aot_array), ("runtime", array)):
        x = a(bf, (16384, 4096))
        out.append((f"{how}: one-row norm, plain checked loads, bf16 1x4096, 8 warps", R.fwd_rows,
                    [x, a(bf, (4096,)), x, array(f32, (16384,)), F32, F32, 1, 4096, 0, 0, True, True, True, True, False,
                     False], {"num_worker_warps": 8}))  # fmt: skip
        out.append((f"{how}: shipped rms_fwd_tile bf16 2x4096, occ 2, 4 warps", K.rms_fwd_tile,
                    [x, a(bf, (4096,)), x, array(f32, (16384,)), F32, F32, 2, 4096, 0, K.CAST_LLAMA, True, False, 0],
                    {"occupancy": 2, "num_worker_warps": 4}))  # fmt: skip
        out.append((f"{how}: shipped rms_bwd_tile bf16 2x4096, occ 2, 8 warps", K.rms_bwd_tile,
                    [x, x, a(bf, (4096,)), array(f32, (16384,)), x, array(f32, (264, 4096)), F32, 2, 4096, True, True,
                     False, 0], {"occupancy": 2, "num_worker_warps": 8}))  # fmt: skip
    for n_div, label in ((16, "N % 16 == 0"), (8, "N % 8 == 0"), (1, "N unaligned")):
        x = ArrayConstraint(bf, 2, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=[],
                            may_alias_internally=False, stride_constant=[None, 1], stride_divisible_by=[8, 1],
                            shape_divisible_by=[1, n_div], base_addr_divisible_by=16)  # fmt: skip
        out.append((f"runtime-like but {label}: one-row norm, plain checked loads", R.fwd_rows,
                    [x, array(bf, (4096,)), x, array(f32, (16384,)), F32, F32, 1, 4096, 0, 0, True, True, True, True,
                     False, False], {"num_worker_warps": 8}))  # fmt: skip
    for dt, (m, n), tm, pieces, warps, occ in (
        (bf, (16384, 4096), 1, (4096,), 8, None), (bf, (16384, 4096), 1, (4096,), 8, 4),
        (bf, (16384, 4096), 2, (4096,), 8, None), (bf, (16384, 4096), 2, (4096,), 8, 2),
        (bf, (16384, 4096), 2, (4096,), 8, 3), (bf, (524288, 128), 64, (128,), 4, None),
        (bf, (524288, 128), 64, (128,), 4, 8), (bf, (2048, 18432), 1, (16384, 2048), 8, None),
        (bf, (2048, 18432), 1, (16384, 2048), 8, 2), (bf, (12483, 5376), 1, (4096, 1024, 256), 8, None),
        (bf, (2048, 32768), 1, (32768,), 8, None), (f32, (2048, 16384), 1, (16384,), 8, None),
        (f32, (2048, 16384), 1, (16384,), 8, 2),
    ):  # fmt: skip
        w = list(pieces) + [0] * (3 - len(pieces))
        hints = {"num_worker_warps": warps, **({"occupancy": occ} if occ else {})}
        out.append((f"runtime: rows fwd {dt} {m}x{n} tile {tm}x{'+'.join(map(str, pieces))}, {warps} warps, occ {occ}",
                     R.fwd_rows, [array(dt, (m, n)), array(dt, (n,)), array(dt, (m, n)), array(f32, (m,)), F32, F32, tm,
                                  *w, dt != f32, True, True, m % tm != 0, sum(pieces) != n, False], hints))  # fmt: skip
    return out


def main() -> int:
    os.environ.setdefault("CUDA_TILE_CACHE_DIR", "off")
    for label, kernel, params, hints in _cases():
        r = compile_report(kernel, params, **hints)
        ops = " ".join(f"{k} x{v}" for k, v in sorted(r["ops"].items()))
        print(f"{label}\n    registers {r['REG']}, stack {r.get('STACK', 0)}, shared {r['SHARED']}: {ops}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
