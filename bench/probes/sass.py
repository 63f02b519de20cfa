"""Compile a kernel specialization ahead of time (no GPU) and report what the SASS holds.

The constraints mirror what the JIT derives from real arrays at launch (the rule cuTile's own
JAX binding spells out): a 16-byte aligned base, leading strides divisible by 16 bytes where
they are, unit last stride, each dim's divisibility by 16 and size-1 dims. Reported: registers,
local memory (spills), shared memory, and counts of the memory instructions by width.

    python -m bench.probes.sass            # the built-in table of candidates
    python -m bench.probes.sass --loops CANDIDATES.json   # the innermost loop of each candidate plan

--loops compiles the row-tile, lanes, flat or long forward kernel of each forward candidate of a rows_probe list
(bench/probes/rows_candidates.plan_of) and reports registers, stack and its innermost loop: its
instructions, the rows one iteration covers (from the bytes its loads read, rounded up to a
power of two: on static layouts the loads of lanes past N are dropped) and the warp
instructions an element that gives on 32-lane warps (bench/NOTES.md, session 30), and how many of
the row's loads a one-tile block issues after it first reads a loaded value (``deferred_loads``,
session 56); of each backward row-tile or lanes candidate, its registers, stack and memory
instructions by width (session 53).
"""

import collections
import dataclasses
import io
import math
import os
import re
import subprocess
import tempfile

import cuda.tile as ct
from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, ScalarConstraint, export_kernel

from cutile_rms._cubin import Array, array_constraint, find_tool

ES = {
    ct.bfloat16: 2,
    ct.float16: 2,
    ct.float32: 4,
    ct.int64: 8,
    ct.int32: 4,
    ct.int8: 1,
    ct.float8_e4m3fn: 1,
    ct.float8_e5m2: 1,
}
F32 = ScalarConstraint(ct.float32)
I32 = ScalarConstraint(ct.int32)


def array(dtype, shape, strides=None):
    """The constraint the JIT would derive for a C-contiguous (or given-strides) array at a
    16-byte aligned base (cutile_rms._cubin.array_constraint, the rule it specializes on)."""
    if strides is None:
        strides, s = [], 1
        for d in reversed(shape):
            strides.insert(0, s)
            s *= d
    return array_constraint(Array(256, dtype, tuple(shape), tuple(strides)))


_tool = find_tool  # cuobjdump and nvdisasm, found where tileiras is


_MEM = re.compile(r"\b(LDG|STG|LDS|STS|LDL|STL|UTMALDG|UTMASTG|UBLKCP|REDG|ATOMG|LDGSTS)(\.[A-Z0-9_.]+)?")


def cuobjdump(cubin: bytes, flag: str) -> str:
    """cuobjdump's text for a cubin held in memory (flag: -sass, -res-usage, -elf, ...)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([_tool("cuobjdump"), flag, f.name], capture_output=True, text=True, check=True).stdout


def compile_cubin(kernel, params, arch="sm_90", **hints) -> bytes:
    """The cubin of kernel (hints: replace_hints keywords) for params."""
    k = kernel.replace_hints(**hints) if hints else kernel
    buf = io.BytesIO()
    sig = KernelSignature(params, calling_convention=CallingConvention.cutile_python_v2())
    export_kernel(k, [sig], buf, gpu_code=arch, output_format="cubin")
    return buf.getvalue()


def resources(cubin: bytes) -> dict:
    """Registers, stack, shared and local memory of a cubin's kernel (cuobjdump -res-usage)."""
    return {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", cuobjdump(cubin, "-res-usage"))}


def compile_report(kernel, params, arch="sm_90", **hints) -> dict:
    """Compile kernel (hints: replace_hints keywords) for params; return its resource report."""
    cubin = compile_cubin(kernel, params, arch, **hints)
    out, sass = resources(cubin), cuobjdump(cubin, "-sass")
    ops = collections.Counter()
    for line in sass.splitlines():
        m = _MEM.search(line)
        if m and "/*" in line:
            op = m.group(1) + (m.group(2) or "")
            ops[re.sub(r"\.(E|CONSTANT|STRONG|GPU|SYS|EF|EL|LU|ZFILL|LTC\d+B)\b", "", op)] += 1
    out["ops"] = dict(ops)
    out["instructions"] = sum(1 for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,}\*/", line))
    out.update(deferred_loads(sass))
    return out


_LDG_BYTES = {".U16": 2, ".64": 8, ".128": 16, None: 4}


def _ldg_bytes(text: str) -> int:
    """The bytes a thread's global load (LDG.E and its width) in ``text`` reads, 0 for any other."""
    g = re.search(r"\bLDG\.E(\.U16|\.64|\.128)?\b", text)
    return _LDG_BYTES[g.group(1)] if g else 0


def instructions(sass: str) -> list[tuple[int, str]]:
    """(address, text) of each instruction of a SASS listing."""
    return [(int(m.group(1), 16), m.group(2).strip()) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", sass)]


def _backward_branches(ins) -> list[tuple[int, int]]:
    """(target, address) of each branch of ``instructions`` to an earlier address: a loop's range."""
    return [
        (int(b.group(1), 16), a)
        for a, t in ins
        if (b := re.search(r"BRA (0x[0-9a-f]+)", t)) and int(b.group(1), 16) < a
    ]


def innermost_loop(sass: str) -> list[str]:
    """The instructions of the shortest loop (a backward branch's range) of a SASS listing."""
    ins = instructions(sass)
    loops = _backward_branches(ins)
    if not loops:
        return []
    lo, hi = min(loops, key=lambda ab: ab[1] - ab[0])
    return [t for a, t in ins if lo <= a <= hi]


def loop_report(p, dt, m, n, casting=None) -> dict:
    """Registers, stack, innermost loop (instructions, rows an iteration, warp instructions an
    element) and ``deferred_loads`` of the forward row-tile or lanes kernel of plan p on
    C-contiguous (m, n) rows."""
    kernel, params, hints = (lanes_params(p, dt, m, n, casting) if p.kind == "lanes" else
                             rows_params(p, dt, m, 1, n, casting=casting))  # fmt: skip
    cubin = compile_cubin(kernel, params, **hints)
    res = resources(cubin)
    sass = cuobjdump(cubin, "-sass")
    body = innermost_loop(sass)
    loaded = sum(_ldg_bytes(t) for t in body)
    rows = loaded * 32 * p.warps // ES[dt] / p.widths[0]
    rows = 1 << max(0, math.ceil(math.log2(rows))) if rows else 0
    per_element = len(body) * p.warps / (rows * n) if rows else float("nan")
    return dict(res, loop=len(body), rows=rows, per_element=per_element, **deferred_loads(sass))


# the instructions that widen a loaded 16-bit half to fp32 before it is squared (bf16: SHF.L / PRMT /
# IMAD.U32 / LOP3 on the packed word; fp16: HADD2.F32): their result counts as the load's value
_UNPACK = ("SHF.", "PRMT", "IMAD.U32", "LOP3", "HADD2.F32", "F2F.")
_NO_DEST = ("ST", "BRA", "BAR", "EXIT", "RED", "ATOM")


def _registers(operand: str) -> list[int]:
    return [int(r) for r in re.findall(r"(?<![A-Z])R(\d+)", operand)]


def deferred_loads(sass: str) -> dict:
    """How the path a block with one tile runs (the listing up to its first unpredicated EXIT, the
    loop's steady-state body left out) issues the row's loads (bench/NOTES.md, session 56): the x
    loads (LDGs whose registers feed a square, FMUL or FFMA Ra, Ra, directly or through the
    instructions that widen 16-bit halves, _UNPACK), the widest of them in bytes,
    and how many issue after the first instruction that reads an earlier x load's registers
    ("deferred": those wait a DRAM round trip for the first batch; fp32 8-warp one-row tiles of
    16-byte loads ran 131.5-133.9 us with none, 135.4-163.2 with any, at 64 Mi elements: sessions
    56-57)."""
    listing = instructions(sass)
    loops = [(lo, hi) for lo, hi in _backward_branches(listing) if hi - lo > 0x40]  # the loops' bodies
    ins = []
    for addr, text in listing:
        predicated = text.startswith("@")
        op, _, args = (text.split(None, 1)[1] if predicated else text).partition(" ")
        ins.append((addr, predicated, op, [a.strip() for a in args.split(",")]))
    path = []
    for i in ins:
        if not any(lo <= i[0] <= hi for lo, hi in loops):
            path.append(i)
            if i[2] == "EXIT" and not i[1]:
                break
    loads, owner = [], {}  # owner: register -> the load whose value it holds
    for k, (_, _, op, args) in enumerate(path):
        if _ldg_bytes(op):
            first = _registers(args[0])[0]
            load = dict(k=k, x=False, read=None, bytes=_ldg_bytes(op))
            loads.append(load)
            owner.update({r: load for r in range(first, first + max(1, load["bytes"] // 4))})
            continue
        stores = op.startswith(_NO_DEST)
        sources = args if stores else args[1:]
        for r in (r for a in sources for r in _registers(a)):
            if r in owner and owner[r]["read"] is None:
                owner[r]["read"] = k
        squares = op.startswith(("FMUL", "FFMA")) and len(sources) >= 2 and _registers(sources[0])
        if squares and _registers(sources[0]) == _registers(sources[1]):
            for r in _registers(sources[0]):
                if r in owner:
                    owner[r]["x"] = True
        held = next((owner[r] for a in sources for r in _registers(a) if r in owner), None)
        for r in [] if stores else _registers(args[0]):
            owner.pop(r, None)
        if held is not None and op.startswith(_UNPACK) and not stores:  # a 16-bit half widened to fp32
            owner.update({r: held for r in _registers(args[0])})
    x = [ld for ld in loads if ld["x"]]
    first_read = min((ld["read"] for ld in x if ld["read"] is not None), default=len(path))
    return dict(
        x_loads=len(x),
        x_bytes=max((ld["bytes"] for ld in x), default=0),
        deferred=sum(1 for ld in x if ld["k"] > first_read),
    )


def _loops(path: str) -> int:
    """--loops: loop_report of every forward row-tile or lanes candidate in a rows_probe list (a flat
    or long one: its whole kernel's resources and memory instructions)."""
    import json

    from bench.probes.rows_candidates import plan_of

    dts = {"bfloat16": ct.bfloat16, "float16": ct.float16, "float32": ct.float32}
    with open(path) as f:
        cands = json.load(f)
    for c in cands:
        p = plan_of(c, c.get("persistent"))
        backward = c["op"] == "backward" and p is not None and p.kind in ("tile", "lanes")
        if not backward and (
            c["op"] != "forward" or p is None or p.kind not in ("tile", "lanes", "flat", "long", "split")
        ):
            continue
        knobs = " ".join(f"{k}={v}" for k, v in c.items() if k not in ("op", "dtype", "m", "n", "persistent"))
        if backward or p.kind in ("flat", "long", "split"):  # the kernel's resources, memory ops
            if backward:  # (x, dy and w each loaded: no rows an iteration to read from the loads' bytes)
                kernel, params, hints = (lanes_params(p, dts[c["dtype"]], c["m"], c["n"]) if p.kind == "lanes" else
                                         rows_params(p, dts[c["dtype"]], c["m"], 1, c["n"]))  # fmt: skip
            elif p.kind in ("flat", "split"):
                kernel, params, hints = flat_params(p, dts[c["dtype"]], c["m"], c["n"], c.get("casting"))
            else:
                ((_, kernel, params, hints),) = long_params(p, dts[c["dtype"]], c["m"], c["n"], c.get("casting"))
            r = compile_report(kernel, params, **hints)
            ops = " ".join(f"{k} x{v}" for k, v in sorted(r["ops"].items()))
            shape = f"{p.tile_a}x{p.tile_b}x" + "+".join(str(w) for w in p.widths if w)
            print(
                f"{c['dtype']} {c['n']} {c['op']} [{knobs or 'rules'}] {p.kind} {shape} w{p.warps} o{p.occupancy} "
                f"{'static' if p.static else 'runtime'}: "
                f"registers {r['REG']}, stack {r.get('STACK', 0)}, {r['instructions']} instructions: {ops}",
                flush=True,
            )
            continue
        r = loop_report(p, dts[c["dtype"]], c["m"], c["n"], c.get("casting"))
        shape = f"{p.tile_a}x{p.tile_b}x{p.widths[0]}" + (
            f" ({p.widths[0] // p.lanes} x {p.lanes} lanes)" if p.lanes else ""
        )
        print(f"{c['dtype']} {c['n']} [{knobs or 'rules'}] {p.kind} {shape} {'static' if p.static else 'runtime'}: "
              f"registers {r.get('REG')}, stack {r.get('STACK', 0)}, loop {r['loop']} instructions, {r['rows']} rows, "
              f"{r['per_element']:.2f} warp instructions an element, x loads {r['x_loads']} of {r['x_bytes']} bytes, "
              f"{r['deferred']} deferred", flush=True)  # fmt: skip
    return 0


def _aot_array(dtype, shape):
    """The constraint tests/aot.py used up to session 10: no divisibility at all."""
    nd = len(shape)
    return ArrayConstraint(dtype, nd, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=[],
                           may_alias_internally=False, stride_constant=[None] * (nd - 1) + [1])  # fmt: skip


def static(c: ArrayConstraint, n: int, strides=None) -> ArrayConstraint:
    """c as the dispatcher passes an array to a parameter annotated cutile_rms.rows.kernels.RowArray
    (strides given: the last dim n and every stride constants) or RowVector (the last dim n): the
    annotation's constants only, not c's size-1 dims (the JIT specializes those for runtime layouts;
    the GPU's static kernels lack it, session 56: ncu's kernel names, and the registers at fp32 10000)."""
    shape = (*(None,) * (c.ndim - 1), n)
    c = dataclasses.replace(c, shape_constant=shape, shape_divisible_by=(*c.shape_divisible_by[:-1], 1))
    if strides is None:
        return c
    return dataclasses.replace(c, stride_constant=tuple(strides), stride_divisible_by=(1,) * c.ndim)


def _casting(dt, casting=None) -> int:
    """casting, or (None) the code the torch API gives a forward of dt with a weight of its dtype
    and offset 0 (rmsnorm.launch.forward_casting): native llama for 16-bit rows, gemma for fp32."""
    from cutile_rms.rmsnorm import kernels as K

    if casting is not None:
        return casting
    return K.CAST_GEMMA if dt == ct.float32 else K.CAST_LLAMA_NATIVE


def rows_params(p, dt, m, b, n, strides=None, casting=None):
    """(kernel object, constraint list, hints) of the row-tile kernel of plan p (cutile_rms.rows:
    the static-layout kernel or its runtime twin, as p.static says) for an (m, b, n) input with
    given or C-contiguous strides, training flags."""
    from cutile_rms.rows import launch as RL

    strides = strides or (b * n, n, 1)
    rows = array(dt, (m, b, n), strides)
    vector, partial = array(dt, (n,)), array(ct.float32, (p.grid, n))
    if p.static:
        rows, vector, partial = static(rows, n, strides), static(vector, n), static(partial, n)
    rstd = array(ct.float32, (m, b))
    values = dict(x=rows, r=rows, s_out=rows, y=rows, dy=rows, dx=rows, w=vector, rstd_out=rstd, rstd_in=rstd,
                  eps=F32, offset=F32, dw_partial=partial)  # fmt: skip
    values.update(RL.constants(p, _casting(dt, casting), True))
    _, names = RL.KERNELS[p.op]
    kernel = RL._VARIANTS[p.op, p.static].kernel
    return kernel, [values[k] for k in names], {"occupancy": p.occupancy, "num_worker_warps": p.warps}


def lanes_params(p, dt, m, n, casting=None):
    """(kernel object, constraint list, hints) of the lanes kernel of plan p (kind "lanes": static
    or runtime layouts, as p.static says) for C-contiguous (m, 1, n) rows of unaligned length,
    training flags."""
    from cutile_rms.rows import launch as RL

    rows = dataclasses.replace(array(dt, (m, 1, n)), stride_divisible_by=(1,) * 3, shape_divisible_by=(1,) * 3)
    vector = dataclasses.replace(array(dt, (n,)), shape_divisible_by=(1,))
    partial = array(ct.float32, (p.grid, p.widths[0]))
    if p.static:
        rows, vector, partial = static(rows, n, (n, n, 1)), static(vector, n), static(partial, p.widths[0])
    rstd = array(ct.float32, (m, 1))
    values = dict(RL.constants(p, _casting(dt, casting), True), x=rows, y=rows, dy=rows,
                  dx=rows, w=vector, rstd_out=rstd, rstd_in=rstd, eps=F32, offset=F32, dw_partial=partial)  # fmt: skip
    name = p.op + "_lanes"
    return RL._VARIANTS[name, p.static].kernel, [values[k] for k in RL.KERNELS[name][1]], {
        "occupancy": p.occupancy, "num_worker_warps": p.warps}  # fmt: skip


def long_params(p, dt, m, n, casting=None):
    """[(kernel name, kernel object, constraint list, hints)] of the long-row kernels of plan p
    (kind "long": the forward, or the backward's row dot and chunks, or its one-pass kernel) for
    C-contiguous (m, 1, n) rows, training flags; on runtime layouts aligned rows (16-byte
    multiples) as the JIT proves them, others with no divisibility at all; on static layouts
    (p.static) as rows_params."""
    from cutile_rms.rows import launch as RL

    def rows_array(shape):
        a = array(dt, shape)
        if p.static:
            return static(a, n, (n, n, 1) if len(shape) == 3 else None)
        if n * ES[dt] % 16:
            a = dataclasses.replace(a, stride_divisible_by=(1,) * len(shape), shape_divisible_by=(1,) * len(shape))
        return a

    x, rstd = rows_array((m, 1, n)), array(ct.float32, (m, 1))
    width = -(-n // p.widths[0]) * p.widths[0]
    partial = array(ct.float32, (p.grid, width))
    values = dict(RL.constants(p, _casting(dt, casting), True), x=x, dy=x, dx=x, y=x,
                  w=rows_array((n,)), rstd_out=rstd, rstd_in=rstd, c_out=rstd, c_in=rstd, chunks=I32, eps=F32,
                  offset=F32, dw_partial=static(partial, width) if p.static else partial)  # fmt: skip
    names = ("forward_long",) if p.op == "forward" else ("backward_long_onepass",) if p.onepass else (
        "dot_long", "backward_long")  # fmt: skip
    hints = {"occupancy": p.occupancy, "num_worker_warps": p.warps}
    return [(name, RL._VARIANTS[name, p.static].kernel, [values[k] for k in RL.KERNELS[name][1]], hints)
            for name in names]  # fmt: skip


def flat_params(p, dt, m, n, casting=None):
    """(kernel object, constraint list, hints) of the flat rows forward of plan p (kind "flat")
    for C-contiguous (m, n) rows as one flat array (a 16-byte aligned base, any length), a weight
    of any length and its shifted copies (rows 16-byte aligned), training flags."""
    from cutile_rms.rows import launch as RL

    def any_length(a):
        return dataclasses.replace(a, shape_divisible_by=(1,) * a.ndim)

    flat = any_length(array(dt, (m * n,)))
    weight = dataclasses.replace(any_length(array(dt, (n,))), base_addr_divisible_by=1)
    split = RL.split_constants(n, p.widths[0], 1)  # (POLLS: a constant of its own, any value will do)
    values = dict(RL.constants(p, _casting(dt, casting), True), x=flat, y=flat, w=weight, eps=F32, offset=F32, n=I32,
                  N=n if p.static else 0, w_shift=array(dt, (p.lanes, -(-n // p.widths[0]) * p.widths[0])),
                  rstd_out=any_length(array(ct.float32, (m,))), slots=array(ct.int64, (m, split["SLOTS_W"])),
                  **split)  # fmt: skip
    name = "forward_split" if p.kind == "split" else "forward_flat"
    return RL._VARIANTS[name, False].kernel, [values[k] for k in RL.KERNELS[name][1]], {
        "occupancy": p.occupancy, "num_worker_warps": p.warps}  # fmt: skip


def _rows_case(label, op, dt, m, n, b=1, strides=None, hints=None, **overrides):
    """(label, kernel, params, hints) of a row-tile kernel (cutile_rms.rows) for an
    (m, b, n) input, planned by its rules (overrides: plan keywords), training flags."""
    from cutile_rms.rows.plan import plan

    p = plan(op, m, b, n, ES[dt], 132, **overrides)
    if p is None or p.kind != "tile":  # the rules give these rows the long kernels or the core's: the row tile
        p = plan(op, m, b, n, ES[dt], 132, **{**overrides, "long": False, "any_length": True, "lanes": False})
        if p is None:
            raise ValueError(f"no row tile holds {op} rows of {n} (past MAX_ROW_ELEMS)")
        label = f"{label} (forced)"
    kernel, params, planned = rows_params(p, dt, m, b, n, strides)
    tile = f"{p.tile_a}x{p.tile_b}x{'+'.join(str(w) for w in p.widths if w)}"
    return (f"{label}: rows {op} {dt} {m}x{b}x{n}, tile {tile}, {p.warps} warps, occupancy {p.occupancy}", kernel,
            params, hints or planned)  # fmt: skip


def _put(params: list, **arrays) -> None:
    """Replace the row-tile forward's named parameters in params (its KERNELS order)."""
    from cutile_rms.rows import launch as RL

    names = RL.KERNELS["forward"][1]
    for name, value in arrays.items():
        params[names.index(name)] = value


def _cases():
    """(label, kernel, params, hints) of the table in bench/NOTES.md, session 11."""
    from cutile_rms.rmsnorm import kernels as K

    bf, f32 = ct.bfloat16, ct.float32
    out = []
    for how, a in (("aot", _aot_array), ("runtime", array)):
        x = a(bf, (16384, 4096))
        out.append((f"{how}: shipped rms_fwd_tile bf16 2x4096, occ 2, 4 warps", K.rms_fwd_tile,
                    [x, a(bf, (4096,)), x, array(f32, (16384,)), F32, F32, 2, 4096, 0, K.CAST_LLAMA, True, False, 0],
                    {"occupancy": 2, "num_worker_warps": 4}))  # fmt: skip
        out.append((f"{how}: shipped rms_bwd_tile bf16 2x4096, occ 2, 8 warps", K.rms_bwd_tile,
                    [x, x, a(bf, (4096,)), array(f32, (16384,)), x, array(f32, (264, 4096)), F32, 2, 4096, True, True,
                     False, 0], {"occupancy": 2, "num_worker_warps": 8}))  # fmt: skip
        x = a(bf, (16384, 1, 4096))
        label, kernel, params, hints = _rows_case(f"{how}", "forward", bf, 16384, 4096, tile_rows=1)
        _put(params, x=x, r=x, y=x, s_out=x, w=a(bf, (4096,)))
        out.append((label + " (plain checked loads)", kernel, params, hints))
    for n_div, what in ((16, "N % 16 == 0"), (8, "N % 8 == 0"), (1, "N unaligned")):
        x = ArrayConstraint(bf, 3, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=[],
                            may_alias_internally=False, stride_constant=[None, None, 1], shape_constant=[None, 1, None],
                            stride_divisible_by=[8, 8, 1], shape_divisible_by=[1, 1, n_div],
                            base_addr_divisible_by=16)  # fmt: skip
        label, kernel, params, hints = _rows_case(f"runtime-like but {what}", "forward", bf, 16384, 4096, tile_rows=1)
        _put(params, x=x, r=x, y=x, s_out=x)
        out.append((label, kernel, params, hints))
    for dt, m, n, kw in (
        (bf, 16384, 4096, {}), (bf, 16384, 4096, dict(tile_rows=1)), (bf, 16384, 4096, dict(occupancy=2)),
        (bf, 524288, 128, {}), (bf, 12483, 5376, {}), (bf, 8192, 6144, {}), (bf, 2048, 18432, {}),
        (bf, 2048, 18432, dict(occupancy=2)), (f32, 16384, 4096, {}), (f32, 2048, 16384, {}),
        (f32, 2048, 16384, dict(occupancy=2)),
    ):  # fmt: skip
        out.append(_rows_case("runtime", "forward", dt, m, n, **kw))
    out.append(_rows_case("runtime, QK head view", "forward", bf, 4096, 128, b=32, strides=(3 * 32 * 128, 128, 1)))
    for dt, m, n in ((bf, 524288, 128), (bf, 16384, 4096), (bf, 12483, 5376), (f32, 8192, 8192)):
        out.append(_rows_case("runtime", "backward", dt, m, n))
    return out


def main(argv=None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("CUDA_TILE_CACHE_DIR", "off")
    if argv[:1] == ["--loops"]:
        return _loops(argv[1])
    for label, kernel, params, hints in _cases():
        r = compile_report(kernel, params, **hints)
        ops = " ".join(f"{k} x{v}" for k, v in sorted(r["ops"].items()))
        print(f"{label}\n    registers {r['REG']}, stack {r.get('STACK', 0)}, shared {r['SHARED']}: {ops}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
