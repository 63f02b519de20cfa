"""Framework-free launchers of the row-tile kernels: DLPack arrays plus a stream.

x, y, dy, dx are 3-D (A, B, N) arrays with unit stride along N (the caller's views: a 2-D input
is (M, 1, N)); rstd is (A, B) fp32; weight and dw are (N,) or None. Absent optional arrays are
replaced by placeholders that the kernels' compile-time flags never touch.

Each kernel's host-side signature is spelled once, here (FORWARD_PARAMS, BACKWARD_PARAMS): the
launchers and the AOT compile check build their argument lists from it, and a test checks it
against the kernels' own parameters.

A plan's ``static`` picks the kernels compiled for its row layout (kernels.RowArray) or those of
runtime layouts; ``plan`` here keeps static plans (plan.static_fit, plan.odd_static,
plan.word_static, plan.vector_lanes, plan.long_static_chunk) to a process's first STATIC_LAYOUTS row
layouts (``static_layout``), so that a caller with ever new row lengths does not compile without
bound.
"""

import dataclasses
import threading

from cutile_rms import interpret
from cutile_rms._launch import launch
from cutile_rms.rmsnorm import kernels as CK
from cutile_rms.rmsnorm.config import next_pow2, reduce_plan
from cutile_rms.rmsnorm.launch import HintVariants, native_fits, split_values
from cutile_rms.rows import kernels as K
from cutile_rms.rows.plan import FLAT_MAX_ELEMS, RowsPlan
from cutile_rms.rows.plan import plan as rules_plan

__all__ = ["BACKWARD_PARAMS", "FLAT_PARAMS", "FORWARD_PARAMS", "LANES_PARAMS", "LONG_PARAMS", "arguments",
           "constants", "narrow_lookahead", "plan", "run_backward", "run_forward", "split_constants",
           "static_layout"]  # fmt: skip

FORWARD_PARAMS = ("x", "r", "w", "y", "s_out", "rstd_out", "eps", "offset", "TILE_A", "TILE_B", "W0", "W1", "W2",
                  "CASTING", "HAS_WEIGHT", "STORE_RSTD", "RESIDUAL", "CHECK_A", "CHECK_N", "LOADS",
                  "PREFETCH", "LOOP")  # fmt: skip
BACKWARD_PARAMS = ("x", "dy", "w", "rstd_in", "dx", "dw_partial", "offset", "TILE_A", "TILE_B", "W0", "W1", "W2",
                   "HAS_WEIGHT", "ROUND_XHAT", "CHECK_A", "CHECK_N", "LOADS", "PREFETCH")  # fmt: skip
# The long-row kernels (plan kind "long"), by op: forward, the backward's row dot, its chunks, and
# the one-pass backward (probes: plan.long_plan's onepass).
LONG_PARAMS = {
    "forward_long": ("x", "w", "y", "rstd_out", "eps", "offset", "chunks", "TILE_N", "CASTING", "HAS_WEIGHT",
                     "STORE_RSTD", "LOADS", "UNROLL", "PREFETCH"),
    "dot_long": ("x", "dy", "w", "rstd_in", "c_out", "offset", "chunks", "TILE_N", "HAS_WEIGHT", "LOADS"),
    "backward_long": ("x", "dy", "w", "rstd_in", "c_in", "dx", "dw_partial", "offset", "TILE_N", "HAS_WEIGHT",
                      "ROUND_XHAT", "LOADS"),
    "backward_long_onepass": ("x", "dy", "w", "rstd_in", "dx", "dw_partial", "offset", "chunks", "TILE_N",
                              "HAS_WEIGHT", "ROUND_XHAT", "LOADS"),
}  # fmt: skip
# The flat rows kernels (plan kind "flat"): the forward, the kernel that writes the shifted weights,
# and the backward's row dot and chunks.
FLAT_PARAMS = {
    "forward_flat": ("x", "w", "w_shift", "y", "rstd_out", "eps", "offset", "n", "N", "TILE_N", "V", "CASTING",
                     "HAS_WEIGHT", "STORE_RSTD", "PREFETCH"),
    "weight_shift": ("w", "w_shift", "first", "TILE_N"),
    "dot_flat": ("x", "dy", "w", "w_shift", "rstd_in", "c_out", "offset", "n", "TILE_N", "V", "HAS_WEIGHT"),
    "backward_flat": ("x", "dy", "w", "w_shift", "rstd_in", "c_in", "dx", "dw_partial", "offset", "n", "TILE_N", "V",
                      "HAS_WEIGHT", "ROUND_XHAT", "PREFETCH"),
    "forward_split": ("x", "w", "w_shift", "y", "rstd_out", "slots", "eps", "offset", "n", "TILE_N", "V", "SPLIT",
                      "SLOTS_W", "POLLS", "CASTING", "HAS_WEIGHT", "STORE_RSTD"),
}  # fmt: skip
# The short unaligned rows' kernels (plan kind "lanes"), by op.
LANES_PARAMS = {
    "forward_lanes": ("x", "w", "y", "rstd_out", "eps", "offset", "TILE_A", "TILE_B", "L", "K", "CASTING",
                      "HAS_WEIGHT", "STORE_RSTD", "LOOP"),
    "backward_lanes": ("x", "dy", "w", "rstd_in", "dx", "dw_partial", "offset", "TILE_A", "TILE_B", "L", "K",
                       "HAS_WEIGHT", "ROUND_XHAT", "PREFETCH"),
}  # fmt: skip
KERNELS = {"forward": (K.rows_fwd, FORWARD_PARAMS), "backward": (K.rows_bwd, BACKWARD_PARAMS),
           "forward_long": (K.rows_fwd_long, LONG_PARAMS["forward_long"]),
           "dot_long": (K.rows_dot_long, LONG_PARAMS["dot_long"]),
           "backward_long": (K.rows_bwd_long, LONG_PARAMS["backward_long"]),
           "backward_long_onepass": (K.rows_bwd_long_onepass, LONG_PARAMS["backward_long_onepass"]),
           "forward_flat": (K.rows_fwd_flat, FLAT_PARAMS["forward_flat"]),
           "weight_shift": (K.rows_weight_shift, FLAT_PARAMS["weight_shift"]),
           "dot_flat": (K.rows_dot_flat, FLAT_PARAMS["dot_flat"]),
           "backward_flat": (K.rows_bwd_flat, FLAT_PARAMS["backward_flat"]),
           "forward_split": (K.rows_fwd_flat_split, FLAT_PARAMS["forward_split"]),
           "forward_lanes": (K.rows_fwd_lanes, LANES_PARAMS["forward_lanes"]),
           "backward_lanes": (K.rows_bwd_lanes, LANES_PARAMS["backward_lanes"])}  # fmt: skip
# Kernel objects by (op, static) and hints: runtime layouts (the kernels' twins, K.DYNAMIC) and the
# static layouts of every row kernel that has them.
_VARIANTS = {(op, False): HintVariants(K.DYNAMIC.get(kernel, kernel)) for op, (kernel, _) in KERNELS.items()}
_VARIANTS.update({(op, True): HintVariants(kernel) for op, (kernel, _) in KERNELS.items() if kernel in K.DYNAMIC})
# Row layouts (B, N) a process runs on static kernels, each compiled for it on first use (about a
# second of tileiras a kernel): more than a model's norms use (hidden size, head dims, a fused
# QKV view), fewer than a sweep over row lengths would compile.
STATIC_LAYOUTS = 64
_static_layouts: set = set()
_static_lock = threading.Lock()


def static_layout(b: int, n: int) -> bool:
    """Whether (A, B, n) rows run on the static-layout kernels: the first STATIC_LAYOUTS (B, n) of
    the process do, later ones run on runtime layouts (no compile per layout); the interpreter
    compiles nothing and always plans static."""
    key = (b, n)
    if key in _static_layouts or interpret.is_enabled():
        return True
    with _static_lock:
        if len(_static_layouts) < STATIC_LAYOUTS:
            _static_layouts.add(key)
            return True
    return False


def plan(op: str, a: int, b: int, n: int, elem_size: int, num_sms: int, **overrides) -> RowsPlan | None:
    """rows.plan.plan (overrides: its keywords); a static plan only where ``static_layout``
    still allows one."""
    p = rules_plan(op, a, b, n, elem_size, num_sms, **overrides)
    if p is not None and p.static and "static" not in overrides and not static_layout(b, n):
        p = rules_plan(op, a, b, n, elem_size, num_sms, static=False, **overrides)
    return p


def constants(p: RowsPlan, casting: int, has_weight: bool, store_rstd: bool = True,
              residual: int = CK.RESIDUAL_NONE) -> dict:  # fmt: skip
    """Every compile-time constant of plan p's kernels for a call's flags: the tile (kind "tile"),
    chunk ("long") or lanes ("lanes") shape and the flags; ``arguments`` picks each kernel's own.
    The one spelling of them that the launchers, the AOT check (tests/aot.py) and the SASS probes
    (bench/probes/sass.py) share. dW rounds xhat to x's dtype except in gemma casting (fp32 rows
    run gemma: one computation in fp32)."""
    if p.kind == "long":
        shape = dict(TILE_N=p.widths[0], LOADS=p.loads, UNROLL=p.unroll, PREFETCH=p.prefetch)
    elif p.kind in ("flat", "split"):
        shape = dict(TILE_N=p.widths[0], V=p.lanes, PREFETCH=p.prefetch)
    elif p.kind == "lanes":
        shape = dict(TILE_A=p.tile_a, TILE_B=p.tile_b, L=p.widths[0] // p.lanes, K=p.lanes, PREFETCH=p.prefetch,
                     LOOP=p.loop)  # fmt: skip
    else:
        w0, w1, w2 = p.widths
        shape = dict(TILE_A=p.tile_a, TILE_B=p.tile_b, W0=w0, W1=w1, W2=w2, CHECK_A=p.check_a, CHECK_N=p.check_n,
                     LOADS=p.loads, RESIDUAL=residual, PREFETCH=p.prefetch, LOOP=p.loop)  # fmt: skip
    return dict(shape, CASTING=casting, HAS_WEIGHT=has_weight, STORE_RSTD=store_rstd,
                ROUND_XHAT=has_weight and casting != CK.CAST_GEMMA)  # fmt: skip


def split_constants(n: int, chunk: int, polls: int | None = None) -> dict:
    """The split flat forward's SPLIT, SLOTS_W and POLLS for rows of n elements in chunk-wide
    segments (the core split kernels' split_values; polls: its poll bound, None: theirs)."""
    splits = -(-n // chunk)
    return split_values(splits, (0, next_pow2(splits)), polls)


def arguments(op: str, values: dict) -> tuple:
    """The argument tuple of op's kernel from named values (arrays, scalars, constants)."""
    return tuple(values[name] for name in KERNELS[op][1])


def narrow_lookahead(p: RowsPlan, x, weight, y) -> RowsPlan:
    """p, without the long forward's lookahead where the weight or y is wider than x: the plan
    counts its registers by x's element size (plan.LONG_PREFETCH_*)."""
    if p.kind == "long" and p.prefetch and max(y.itemsize, 0 if weight is None else weight.itemsize) > x.itemsize:
        return dataclasses.replace(p, prefetch=False)
    return p


def run_forward(p: RowsPlan, x, weight, y, rstd, eps: float, offset: float, casting: int, device, stream,
                residual=None, s=None, s_dtype_like=None, empty=None, int64=None, polls=None) -> None:  # fmt: skip
    """y = rms_norm(x) * (offset + weight); rstd stored unless it is None. device: the
    _device.DeviceInfo the plan was made for (unused: the plan holds what it needs). With a
    residual: the norm is of s = x + residual (in s's dtype), stored into s; s None (post-norm):
    not stored, and s_dtype_like, any array of the sum's dtype, names it. A flat plan (kind
    "flat") needs x, y and rstd C-contiguous and, with a weight, empty(shape): an uninitialised
    array of the weight's dtype on x's device (its shifted copies); a split flat plan (kind
    "split") the same and int64(shape, zeroed): an int64 array on x's device, zero-filled where
    zeroed (the slots its blocks exchange their sums through, new for each launch); polls: how many
    times its blocks poll for their partners before they put a row aside (tests; None: the core's,
    rmsnorm.launch's split_values)."""
    has_weight = weight is not None
    if residual is not None and (p.kind != "tile" or p.prefetch):
        raise ValueError(f"the {p.kind} forward{' with prefetch' if p.prefetch else ''} has no residual add")
    if casting == CK.CAST_LLAMA_NATIVE and (residual is not None or not native_fits(x, weight, y, offset)):
        raise ValueError("CAST_LLAMA_NATIVE needs a weight of x's dtype, y of that dtype, offset 0 and no residual")
    p = narrow_lookahead(p, x, weight, y)
    if p.kind in ("flat", "split"):
        _run_forward_flat(p, x, weight, y, rstd, eps, offset, casting, stream, empty, int64, polls)
        return
    code = CK.RESIDUAL_NONE if residual is None else CK.RESIDUAL_ADD if s is not None else CK.RESIDUAL_ADD_UNSTORED
    values = constants(p, casting, has_weight, rstd is not None, code)
    values.update(x=x, r=x if residual is None else residual, w=weight if has_weight else x, y=y,
                  s_out=s if s is not None else (s_dtype_like if residual is not None else x),
                  rstd_out=y if rstd is None else rstd, eps=float(eps), offset=float(offset),
                  chunks=x.shape[2] // p.widths[0])  # fmt: skip
    if not p.loop and p.grid != -(-x.shape[0] // p.tile_a) * -(-x.shape[1] // p.tile_b):  # rows_fwd's tiles
        raise ValueError(f"a plan without a loop needs a block a tile: grid {p.grid} is not the tiles of {x.shape}")
    op = "forward" if p.kind == "tile" else "forward_" + p.kind
    launch(stream, (p.grid,), _VARIANTS[op, p.static][p.hints], arguments(op, values))


def _flat(a):
    """a's elements as one flat array, a view: a must be C-contiguous (torch or CuPy)."""
    contiguous = a.is_contiguous() if hasattr(a, "is_contiguous") else a.flags.c_contiguous
    if not contiguous:
        raise ValueError(f"a flat rows plan needs C-contiguous arrays, got one of shape {tuple(a.shape)}")
    return a.reshape(-1)


def _flat_step(n: int, v: int) -> int:
    """The rows of a flat plan's launch: at most plan.FLAT_MAX_ELEMS elements (cuda.tile's int32
    shapes), a multiple of v rows, so that every part starts at the alignment of the whole (16
    bytes where the array's base is) and its rows run as in one launch."""
    step = FLAT_MAX_ELEMS // n // v * v
    if step == 0:
        raise ValueError(f"the flat rows kernels take rows of at most {FLAT_MAX_ELEMS // v} elements, got {n}")
    return step


def _run_forward_flat(p: RowsPlan, x, weight, y, rstd, eps: float, offset: float, casting: int, stream,
                      empty, int64=None, polls=None) -> None:  # fmt: skip
    """run_forward of a flat or split flat plan: the weight's shifted copies (rows_weight_shift),
    then the flat forward (or the split one, with zeroed slots each launch) over the rows, in
    parts (_flat_step)."""
    a, b, n = x.shape
    rows, v, chunk = a * b, p.lanes, p.widths[0]
    split = p.kind == "split"
    if split and int64 is None:
        raise ValueError("a split flat rows plan needs int64(shape, zeroed) for its slots")
    xf, yf = _flat(x), _flat(y)
    rf = None if rstd is None else _flat(rstd)
    has_weight = weight is not None
    shifted = None
    if has_weight:
        shifted = _shift_weight(weight, empty, v, chunk, -(-n // chunk), 0, stream)
    op = "forward_split" if split else "forward_flat"
    kernel = _VARIANTS[op, False][p.hints]
    step = _flat_step(n, v)
    base = dict(constants(p, casting, has_weight, rf is not None), eps=float(eps), offset=float(offset), n=n,
                N=n if p.static else 0, w_shift=shifted if has_weight else y.reshape(rows, n))  # fmt: skip
    splits = -(-n // chunk) if split else 1  # blocks a row (a group: the split flat forward)
    if split:
        if p.grid < splits or p.grid % splits:
            raise ValueError(f"a split flat plan's grid is whole groups of {splits} blocks, got {p.grid}")
        base.update(split_constants(n, chunk, polls))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        xs = xf[r0 * n : r1 * n]
        values = dict(base, x=xs, w=weight if has_weight else xs, y=yf[r0 * n : r1 * n],
                      rstd_out=xs if rf is None else rf[r0:r1])  # fmt: skip
        if split:  # (new zeroed slots each launch)
            values["slots"] = int64((r1 - r0, base["SLOTS_W"]), True)
        launch(stream, (min(p.grid // splits, r1 - r0) * splits,), kernel, arguments(op, values))  # groups <= rows


def _shift_weight(weight, empty, v: int, chunk: int, chunks: int, first: int, stream):
    """The (v, chunks x chunk) shifted copies of the weight, copy k at w[i + k + first]
    (kernels.rows_weight_shift), in a new array from empty(shape) (the caller's: a flat plan with
    a weight needs it)."""
    if empty is None:
        raise ValueError("a flat rows plan with a weight needs empty(shape) for its shifted copies")
    shifted = empty((v, chunks * chunk))
    values = dict(w=weight, w_shift=shifted, first=first, TILE_N=chunk)
    launch(stream, (v, chunks), _VARIANTS["weight_shift", False].kernel, arguments("weight_shift", values))
    return shifted


def run_backward(p: RowsPlan, x, dy, weight, rstd, dx, dw, offset: float, casting: int, empty_f32, device,
                 stream, empty=None) -> None:  # fmt: skip
    """dx, and dw (weight's shape and dtype, contiguous) unless weight is None; empty_f32(shape)
    allocates the (grid, N) fp32 dW partials on x's device (a row-tile grid of one block writes
    dw itself instead, and no reduction runs). In llama and none casting dW uses xhat
    rounded to x's dtype, as the forward multiplied the weight by it. A flat plan (kind "flat")
    needs x, dy, dx and rstd C-contiguous and, with a weight, empty(shape): an uninitialised
    array of the weight's dtype on x's device (its shifted copies)."""
    has_weight = weight is not None
    n = x.shape[2]
    if p.kind == "long":
        _run_backward_long(p, x, dy, weight, rstd, dx, dw, offset, casting, empty_f32, device, stream)
        return
    if p.kind == "flat":
        _run_backward_flat(p, x, dy, weight, rstd, dx, dw, offset, casting, empty_f32, empty, device, stream)
        return
    lanes = p.kind == "lanes"
    # One block's dW terms are dW itself: it stores them into dw, rounded to dw's dtype, and no
    # reduction runs (a decode step's one row: bench/NOTES.md, session 39).
    direct = has_weight and not lanes and p.grid == 1
    partial = (dw.reshape(1, n) if direct else empty_f32((p.grid, p.widths[0] if lanes else n))) if has_weight else None
    op = "backward_lanes" if lanes else "backward"
    values = constants(p, casting, has_weight)
    values.update(x=x, dy=dy, w=weight if has_weight else x, rstd_in=rstd, dx=dx,
                  dw_partial=partial if has_weight else x, offset=float(offset))  # fmt: skip
    launch(stream, (p.grid,), _VARIANTS[op, p.static][p.hints], arguments(op, values))
    if has_weight and not direct:
        _reduce_dw(partial[:, :n] if lanes else partial, dw, device, stream)  # lanes: the first n of W columns


def _reduce_dw(partial, dw, device, stream) -> None:
    """dw = the sum of the (G, N) fp32 dW partials' rows (the core's dw_reduce)."""
    (tile_g, tile_n), grid = reduce_plan(partial.shape[1], partial.shape[0], device.num_sms)
    launch(stream, (grid,), CK.dw_reduce, (partial, dw, tile_g, tile_n))


def _run_backward_long(p: RowsPlan, x, dy, weight, rstd, dx, dw, offset: float, casting: int, empty_f32, device,
                       stream) -> None:  # fmt: skip
    """run_backward of a long-row plan: c per row into an (A, B) fp32 workspace, then the (row
    groups, chunks) grid, its dW partials ((groups, whole chunks) fp32) summed by dw_reduce; or
    (p.onepass) one kernel with the same partials."""
    has_weight = weight is not None
    a, b, n = x.shape
    chunk = p.widths[0]
    padded = -(-n // chunk)  # chunks, the last one past N included
    partial = empty_f32((p.grid, padded * chunk)) if has_weight else None
    c = None if p.onepass else empty_f32((a, b))
    values = dict(constants(p, casting, has_weight), x=x, dy=dy, w=weight if has_weight else x, rstd_in=rstd, c_out=c,
                  c_in=c, dx=dx, dw_partial=partial if has_weight else x, offset=float(offset),
                  chunks=n // chunk)  # fmt: skip
    if p.onepass:
        op = "backward_long_onepass"
        launch(stream, (p.grid,), _VARIANTS[op, p.static][p.hints], arguments(op, values))
    else:
        dot_grid = max(1, min(a * b, device.num_sms * p.occupancy))
        launch(stream, (dot_grid,), _VARIANTS["dot_long", p.static][p.hints], arguments("dot_long", values))
        launch(stream, (p.grid, padded), _VARIANTS["backward_long", p.static][p.hints],
               arguments("backward_long", values))  # fmt: skip
    if has_weight:
        _reduce_dw(partial[:, :n], dw, device, stream)  # its first n columns (rows 16-byte aligned)


def _run_backward_flat(p: RowsPlan, x, dy, weight, rstd, dx, dw, offset: float, casting: int, empty_f32, empty,
                       device, stream) -> None:  # fmt: skip
    """run_backward of a flat plan (x, dy, dx and rstd C-contiguous): the weight's shifted copies
    from V before each column, c per row (rows_dot_flat), then the (row groups, chunks) grid
    (rows_bwd_flat), in parts as _run_forward_flat's (each part's row groups writing dW partials
    of their own), all the parts' (groups, N) partials summed by one dw_reduce."""
    has_weight = weight is not None
    a, b, n = x.shape
    rows, v, chunk = a * b, p.lanes, p.widths[0]
    xf, dyf, dxf, rf = _flat(x), _flat(dy), _flat(dx), _flat(rstd)
    step = _flat_step(n, v)
    parts = -(-rows // step)
    c = empty_f32((rows,))
    partial = empty_f32((parts * p.grid, n)) if has_weight else None
    shifted = None
    if has_weight:  # copies as wide as V columns, a row's [lo, b) and either kernel's chunk past it
        wide = max(p.widths[:2])
        shifted = _shift_weight(weight, empty, v, wide, -(-(n + v) // wide) + 1, -v, stream).reshape(-1)
    base = dict(constants(p, casting, has_weight), w=weight if has_weight else xf, offset=float(offset), n=n,
                w_shift=shifted if has_weight else xf)  # fmt: skip
    dot, bwd = _VARIANTS["dot_flat", False][p.hints], _VARIANTS["backward_flat", False][p.hints]
    for k in range(parts):
        r0, r1 = k * step, min(rows, (k + 1) * step)
        xs = xf[r0 * n : r1 * n]
        values = dict(
            base,
            x=xs,
            dy=dyf[r0 * n : r1 * n],
            dx=dxf[r0 * n : r1 * n],
            rstd_in=rf[r0:r1],
            c_out=c[r0:r1],
            c_in=c[r0:r1],
            dw_partial=partial[k * p.grid : (k + 1) * p.grid].reshape(-1) if has_weight else xs,
        )
        launch(stream, (max(1, min(r1 - r0, device.num_sms * p.occupancy)),), dot,
               arguments("dot_flat", dict(values, TILE_N=p.widths[1])))  # fmt: skip
        launch(stream, (p.grid, -(-n // chunk)), bwd, arguments("backward_flat", values))
    if has_weight:
        _reduce_dw(partial, dw, device, stream)
