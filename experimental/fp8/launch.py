"""Framework-free launchers of the FP8-output RMSNorm kernels: DLPack arrays plus a stream.

x and y are 3-D (A, B, N) views (as for cutile_rms.rows; y is FP8); rstd and the dynamic
scales are (A, B) fp32; the static scale is a 1-element fp32 array and amax a 1-element int32
view of an fp32 zero (the kernels add the max with atomics). Rows the row-tile planner can hold
(rows.plan with any length) run on rows_fwd_fp8 with its plan, longer rows on chunked_fwd_fp8.
Each kernel's host-side signature is spelled once (PARAMS), as in cutile_rms.rows.launch.
"""

from dataclasses import dataclass

from cutile_rms._launch import launch
from cutile_rms.experimental.fp8 import kernels as K
from cutile_rms.rmsnorm.launch import HintVariants
from cutile_rms.rows.plan import RowsPlan, plan

__all__ = ["CHUNK", "PARAMS", "Fp8Plan", "arguments", "fp8_plan", "run_forward", "run_transposed"]

_COMMON = ("x", "r", "w", "y", "s_out", "rstd_out", "scale", "stat", "eps", "offset")
_FLAGS = ("CASTING", "HAS_WEIGHT", "STORE_RSTD", "DYNAMIC", "FMT", "ADD_RESIDUAL")
PARAMS = {
    "rows": _COMMON + ("TILE_A", "TILE_B", "W0", "W1", "W2") + _FLAGS + ("CHECK_A", "CHECK_N", "LOADS"),
    "chunked": _COMMON + ("TILE_N",) + _FLAGS,
    "transpose": (
        "x",
        "w",
        "y",
        "y_t",
        "rstd_out",
        "scale",
        "stat",
        "eps",
        "offset",
        "TILE_M",
        "TILE_N",
        "CASTING",
        "HAS_WEIGHT",
        "STORE_RSTD",
        "FMT",
    ),
}
KERNELS = {"rows": K.rows_fwd_fp8, "chunked": K.chunked_fwd_fp8, "transpose": K.tiled_fwd_fp8_t}
_ROWS = HintVariants(K.rows_fwd_fp8)
_TRANSPOSE = HintVariants(K.tiled_fwd_fp8_t)

# Long rows: 2048-element chunks (8 KB of fp32 math per chunk, 8 values a thread at 8 warps) and
# up to CHUNKED_BLOCKS_PER_SM blocks per SM, one row each at a time. Not yet timed: the chunked
# path serves rows past the row-tile planner's longest (rows.plan.MAX_ROW_ELEMS).
CHUNK = 2048
CHUNKED_BLOCKS_PER_SM = 4
# The transposed output: 32-row slabs (a y_t row gets 32 contiguous bytes per tile: one full
# sector) in 128-wide chunks (256 B of a bf16 row per load), 4 warps, 4 blocks per SM (the
# occupancy hint and the grid). Not yet timed. Without the hints tileiras 13.4 pipelined the
# chunk loop at 255 registers and spilled 1528 bytes per thread (sm_90, bf16); with them: 64
# registers, no spills.
TRANSPOSE_TILE = (32, 128)
TRANSPOSE_BLOCKS_PER_SM = 4
TRANSPOSE_HINTS = (TRANSPOSE_BLOCKS_PER_SM, 4)  # (occupancy, warps)


@dataclass(frozen=True)
class Fp8Plan:
    kernel: str  # "rows", "chunked" or "transpose"
    grid: int
    rows: RowsPlan | None  # the row-tile plan of a "rows" kernel


def fp8_plan(a: int, b: int, n: int, elem_size: int, num_sms: int, transpose: bool = False) -> Fp8Plan:
    """The plan for (a, b, n) rows of elem_size-byte elements (a * b > 0); transpose: also
    y_t (2-D x: b == 1)."""
    if transpose:
        slabs = -(-a // TRANSPOSE_TILE[0])
        return Fp8Plan("transpose", max(1, min(slabs, num_sms * TRANSPOSE_BLOCKS_PER_SM)), None)
    p = plan("forward", a, b, n, elem_size, num_sms, any_length=True, lanes=False, static=False, long=False,
             fill=False)  # fmt: skip
    if p is not None and p.kind == "tile":
        return Fp8Plan("rows", p.grid, p)
    return Fp8Plan("chunked", max(1, min(a * b, num_sms * CHUNKED_BLOCKS_PER_SM)), None)


def arguments(kernel: str, values: dict) -> tuple:
    return tuple(values[name] for name in PARAMS[kernel])


def constants(p: Fp8Plan, casting: int, has_weight: bool, store_rstd: bool, dynamic: bool, fmt: int,
              add_residual: bool = False) -> dict:  # fmt: skip
    """The compile-time constants of p's kernel."""
    values = dict(CASTING=casting, HAS_WEIGHT=has_weight, STORE_RSTD=store_rstd, DYNAMIC=dynamic, FMT=fmt,
                  ADD_RESIDUAL=add_residual)  # fmt: skip
    if p.kernel == "chunked":
        return dict(values, TILE_N=CHUNK)
    if p.kernel == "transpose":
        return dict(values, TILE_M=TRANSPOSE_TILE[0], TILE_N=TRANSPOSE_TILE[1])
    r = p.rows
    w0, w1, w2 = r.widths
    return dict(values, TILE_A=r.tile_a, TILE_B=r.tile_b, W0=w0, W1=w1, W2=w2, CHECK_A=r.check_a, CHECK_N=r.check_n,
                LOADS=r.loads)  # fmt: skip


def run_forward(p: Fp8Plan, x, residual, weight, y, residual_out, rstd, scale, stat, eps: float, offset: float,
                casting: int, fmt: int, device, stream) -> None:  # fmt: skip
    """y = quantize(rms_norm(s) * (offset + weight) / scale), s = x (residual None) or x +
    residual, stored to residual_out. scale None: dynamic per-row scales into stat ((A, B)
    fp32); else the static scale, and stat the int32 amax bits."""
    has_weight = weight is not None
    add = residual is not None
    values = constants(p, casting, has_weight, rstd is not None, scale is None, fmt, add)
    values.update(x=x, r=residual if add else x, w=weight if has_weight else x, y=y,
                  s_out=residual_out if add else x, rstd_out=y if rstd is None else rstd,
                  scale=stat if scale is None else scale, stat=stat, eps=float(eps), offset=float(offset))  # fmt: skip
    kernel = _ROWS[p.rows.hints] if p.kernel == "rows" else KERNELS["chunked"]
    launch(stream, (p.grid,), kernel, arguments(p.kernel, values))


def run_transposed(p: Fp8Plan, x, weight, y, y_t, rstd, scale, stat, eps: float, offset: float, casting: int,
                   fmt: int, device, stream) -> None:  # fmt: skip
    """y and y_t (its (N, M) transpose) of a 2-D x (M, N), static scale; stat: amax's bits."""
    has_weight = weight is not None
    values = constants(p, casting, has_weight, rstd is not None, False, fmt)
    values.update(x=x, w=weight if has_weight else x, y=y, y_t=y_t, rstd_out=y if rstd is None else rstd,
                  scale=scale, stat=stat, eps=float(eps), offset=float(offset))  # fmt: skip
    launch(stream, (p.grid,), _TRANSPOSE[TRANSPOSE_HINTS], arguments("transpose", values))
