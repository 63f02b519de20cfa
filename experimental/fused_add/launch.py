"""Framework-free launchers for the fused residual-add RMSNorm kernels: DLPack arrays plus a
stream. The forward runs on the row-tile forward (cutile_rms.rows, its RESIDUAL flag) wherever
the row-tile rules plan the row for each element size involved (stream, residual, sum), on the
plan of 4-byte elements (_rows_plan); elsewhere, and in place, on the fused tile / chunked
kernels planned with the core RMSNorm tables (cutile_rms.rmsnorm.config). Absent optional
arrays are replaced by placeholders that the kernels' compile-time flags never touch."""

from cutile_rms._launch import launch
from cutile_rms.experimental.fused_add import kernels as K
from cutile_rms.rmsnorm import kernels as RK
from cutile_rms.rmsnorm import signatures as S
from cutile_rms.rmsnorm.config import ONLY_ARRAYS
from cutile_rms.rmsnorm.launch import HintVariants, backward_kernel, backward_plan, forward_plan
from cutile_rms.rows import launch as RL

__all__ = ["run_fused_backward", "run_fused_forward", "run_fused_forward_inplace"]

_FWD_TAIL = ("CASTING", "HAS_WEIGHT")
_MEMORY = ("TMA_STORE", "LATENCY")
_BWD = ("offset", "TILE_M", "TILE_N", "HAS_WEIGHT", "ROUND_XHAT", "ADD_DRES", "TWO_OUTPUTS") + _MEMORY
# Each kernel's host-side signature, spelled once (tests/test_fused_add.py checks them against
# the kernels; tests/aot.py builds its compile jobs from them).
PARAMS = {
    "fused_add_fwd_tile": ("x", "r", "w", "y", "s_out", "rstd_out", "eps", "offset", "TILE_M", "TILE_N", "TAIL")
    + _FWD_TAIL
    + ("CHECK_BOUNDS",)
    + _MEMORY,
    "fused_add_fwd_tile_infer": ("x", "r", "w", "y", "s_out", "eps", "offset", "TILE_M", "TILE_N", "TAIL")
    + _FWD_TAIL
    + ("RESIDUAL", "CHECK_BOUNDS")
    + _MEMORY,
    "fused_add_fwd_tile_inplace": ("x", "r", "w", "eps", "offset", "TILE_M", "TILE_N", "TAIL")
    + _FWD_TAIL
    + ("CHECK_BOUNDS",)
    + _MEMORY,
    "fused_add_fwd_chunked": ("x", "r", "w", "y", "s_out", "rstd_out", "eps", "offset", "TILE_M", "TILE_N")
    + _FWD_TAIL
    + _MEMORY,
    "fused_add_fwd_chunked_infer": ("x", "r", "w", "y", "s_out", "eps", "offset", "TILE_M", "TILE_N")
    + _FWD_TAIL
    + ("RESIDUAL",)
    + _MEMORY,
    "fused_add_fwd_chunked_inplace": ("x", "r", "w", "eps", "offset", "TILE_M", "TILE_N") + _FWD_TAIL + _MEMORY,
    "fused_add_bwd_tile": ("s", "dy", "dres", "w", "rstd_in", "dx", "dr", "dw_partial") + _BWD,
    "fused_add_bwd_chunked": ("s", "dy", "dres", "w", "rstd_in", "c_in", "dx", "dr", "dw_partial") + _BWD,
}
_VARIANTS = {name: HintVariants(getattr(K, name)) for name in PARAMS}
FLAVOURS = ("train", "infer", "inplace")


def forward_kernel_name(kind: str, flavour: str) -> str:
    """The fused forward kernel of a kind ("tile" or "chunked") and flavour."""
    return f"fused_add_fwd_{kind}" + ("" if flavour == "train" else f"_{flavour}")


def arguments(name: str, values: dict) -> tuple:
    return tuple(values[k] for k in PARAMS[name])


def _forward(flavour, values, eps, offset, casting, mode, device, stream, residual=RK.RESIDUAL_ADD):
    x = values["x"]
    m, n = x.shape
    plan = forward_plan(x, mode, device, ONLY_ARRAYS)  # no split kernels here
    has_weight = values["w"] is not None
    values = dict(values, w=values["w"] if has_weight else x, eps=float(eps), offset=float(offset),
                  TILE_M=plan.tile_m, TILE_N=plan.tile_n, TAIL=plan.tail, CASTING=casting, HAS_WEIGHT=has_weight,
                  RESIDUAL=residual, TMA_STORE=plan.memory[0], LATENCY=plan.memory[1],
                  # No-mask fast path (tile): rows fill the tile exactly and row tiles divide M, so
                  # every load and store is in bounds and the kernel may skip the checks.
                  CHECK_BOUNDS=not (n == plan.tile_n and m % plan.tile_m == 0))  # fmt: skip
    name = forward_kernel_name("tile" if plan.kernel == "tile" else "chunked", flavour)
    launch(stream, (plan.grid,), _VARIANTS[name][plan.hints], arguments(name, values))


def _rows_plan(x, r, s_like, mode, device):
    """The row-tile forward's plan for the fused forward of (m, n) arrays x and r whose sum has
    s_like's dtype, or None (mode forces a core kernel, or the rules leave the row to the core
    kernels for one of the element sizes). The tile is planned on the 4-byte register line
    whatever the dtypes, as its threads hold x's and r's loads and the sum: with the plan of the
    larger element size, bf16 tiles with a residual spilled (SASS, sm_90, tileiras 13.4: 128 as
    64 x 128, 40 bytes a thread; 3584 as 4 x 4096, 16); on the 4-byte line 128, 1536, 3584, 4096
    and 18432 compile clean and 5376 spills 8 bytes (bench/NOTES.md, session 14)."""
    if mode not in (None, "rows"):
        return None
    m, n = x.shape
    sizes = {x.itemsize, r.itemsize, s_like.itemsize, 4}
    plans = {
        es: RL.plan(
            "forward", m, 1, n, es, device.num_sms, lanes=False, long=False, static=False, prefetch=False, fill=False
        )
        for es in sizes
    }
    if any(p is None or p.kind != "tile" for p in plans.values()):  # the long-row kernels have no residual add
        return None
    return plans[4]


def run_fused_forward(x, r, weight, y, s, rstd, eps, offset, casting, mode, device, stream, s_dtype_like=None):
    """s = x + r (in s's dtype) and y = rms_norm(s) * (offset + weight) for (m, n) arrays
    (m > 0); rstd (m,) fp32 is stored unless it is None. s None (post-norm inference, rstd
    None too): s is not stored, and s_dtype_like, any array of the sum's dtype, names it."""
    if s is None and rstd is not None:
        raise ValueError("a forward that stores rstd stores s too (the backward reads it)")
    if s is None and s_dtype_like is None:
        raise ValueError("a forward that does not store s needs s_dtype_like, an array of the sum's dtype")
    p = _rows_plan(x, r, s if s is not None else s_dtype_like, mode, device)
    if p is not None:
        m, n = x.shape
        v3 = lambda a: a.reshape(m, 1, n)  # noqa: E731  (torch and CuPy arrays alike)
        like = None if s is not None else s_dtype_like[:1, :1].reshape(1, 1, 1)  # a view: only its dtype is read
        RL.run_forward(p, v3(x), weight, v3(y), None if rstd is None else rstd.reshape(m, 1), eps, offset, casting,
                       device, stream, residual=v3(r), s=None if s is None else v3(s), s_dtype_like=like)  # fmt: skip
        return
    if s is None:
        values = dict(x=x, r=r, w=weight, y=y, s_out=s_dtype_like)
        _forward("infer", values, eps, offset, casting, mode, device, stream, RK.RESIDUAL_ADD_UNSTORED)
    elif rstd is None:
        _forward("infer", dict(x=x, r=r, w=weight, y=y, s_out=s), eps, offset, casting, mode, device, stream)
    else:
        values = dict(x=x, r=r, w=weight, y=y, s_out=s, rstd_out=rstd)
        _forward("train", values, eps, offset, casting, mode, device, stream)


def run_fused_forward_inplace(x, r, weight, eps, offset, casting, mode, device, stream):
    """In place: r <- x + r, x <- rms_norm(r) * (offset + weight); no rstd."""
    _forward("inplace", dict(x=x, r=r, w=weight), eps, offset, casting, mode, device, stream)


def run_fused_backward(s, dy, dres, weight, rstd, dx, dr, dw, offset, casting, empty_f32, device, stream):
    """dx = d(rms_norm(s))/ds + dres (dres may be None), also stored to dr unless dr is None,
    and dw (unless weight is None) through fp32 per-block partials reduced in a fixed order.
    empty_f32(shape) allocates the fp32 workspaces on s's device."""
    m, n = s.shape
    plan = backward_plan(s, device, ONLY_ARRAYS)
    has_weight = weight is not None
    w = weight if has_weight else s
    partial = empty_f32((plan.partial_rows, n)) if has_weight else s
    round_xhat = has_weight and casting != RK.CAST_GEMMA
    flags = (has_weight, round_xhat, dres is not None, dr is not None, *plan.memory)
    dres = dy if dres is None else dres
    dr = dx if dr is None else dr
    values = dict(s=s, dy=dy, dres=dres, w=w, rstd_in=rstd, dx=dx, dr=dr, dw_partial=partial, offset=float(offset),
                  TILE_M=plan.tile_m, TILE_N=plan.tile_n, **dict(zip(_BWD[3:], flags, strict=True)))  # fmt: skip
    if plan.kernel == "tile":
        launch(stream, (plan.partial_rows,), _VARIANTS["fused_add_bwd_tile"][plan.hints],
               arguments("fused_add_bwd_tile", values))  # fmt: skip
    else:
        row_dot = empty_f32((m,))
        dot = dict(x=s, dy=dy, w=w, rstd_in=rstd, c_out=row_dot, offset=float(offset), TILE_M=plan.dot_tile_m,
                   TILE_N=plan.dot_tile_n, HAS_WEIGHT=has_weight)  # fmt: skip
        dot_kernel = backward_kernel("row_dot", plan.dot_hints)
        launch(stream, (plan.dot_grid,), dot_kernel, S.arguments("rms_bwd_row_dot", dot))
        launch(stream, (plan.partial_rows, plan.num_chunks), _VARIANTS["fused_add_bwd_chunked"][plan.hints],
               arguments("fused_add_bwd_chunked", dict(values, c_in=row_dot)))  # fmt: skip
    if has_weight:
        tile_g, tile_n = plan.reduce_tiles
        reduce = dict(dw_partial=partial, dw=dw, TILE_G=tile_g, TILE_N=tile_n)
        launch(stream, (plan.reduce_grid,), RK.dw_reduce, S.arguments("dw_reduce", reduce))
