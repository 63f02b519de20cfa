"""Framework-free launchers of the row-tile kernels: DLPack arrays plus a stream.

x, y, dy, dx are 3-D (A, B, N) arrays with unit stride along N (the caller's views: a 2-D input
is (M, 1, N)); rstd is (A, B) fp32; weight and dw are (N,) or None. Absent optional arrays are
replaced by placeholders that the kernels' compile-time flags never touch.

Each kernel's host-side signature is spelled once, here (FORWARD_PARAMS, BACKWARD_PARAMS): the
launchers and the AOT compile check build their argument lists from it, and a test checks it
against the kernels' own parameters.
"""

import dataclasses

from cutile_rms._launch import launch
from cutile_rms.rmsnorm import kernels as CK
from cutile_rms.rmsnorm.config import REDUCE_BLOCKS_PER_SM, REDUCE_TILE_G, REDUCE_TILE_N
from cutile_rms.rmsnorm.launch import HintVariants
from cutile_rms.rows import kernels as K
from cutile_rms.rows.plan import RowsPlan, plan

__all__ = ["BACKWARD_PARAMS", "FORWARD_PARAMS", "PAIRS_PARAMS", "arguments", "backward_values", "forward_values",
           "pairs_plan", "plan", "run_backward", "run_backward_pairs", "run_forward", "run_forward_pairs"]  # fmt: skip

FORWARD_PARAMS = ("x", "r", "w", "y", "s_out", "rstd_out", "eps", "offset", "TILE_A", "TILE_B", "W0", "W1", "W2",
                  "CASTING", "HAS_WEIGHT", "STORE_RSTD", "RESIDUAL", "CHECK_A", "CHECK_N", "TMA")  # fmt: skip
BACKWARD_PARAMS = ("x", "dy", "w", "rstd_in", "dx", "dw_partial", "offset", "TILE_A", "TILE_B", "W0", "W1", "W2",
                   "HAS_WEIGHT", "ROUND_XHAT", "CHECK_A", "CHECK_N", "TMA")  # fmt: skip
PAIRS_PARAMS = ("x", "w", "y", "rstd_out", "eps", "offset", "TILE_A", "TILE_B", "W0", "W1", "W2", "HALF", "CASTING",
                "HAS_WEIGHT", "STORE_RSTD", "CHECK_A", "CHECK_N")  # fmt: skip
BACKWARD_PAIRS_PARAMS = ("x", "dy", "w", "rstd_in", "dx", "dw_partial", "offset", "TILE_A", "TILE_B", "W0", "W1",
                         "W2", "HALF", "HAS_WEIGHT", "ROUND_XHAT", "CHECK_A", "CHECK_N")  # fmt: skip
KERNELS = {"forward": (K.rows_fwd, FORWARD_PARAMS), "backward": (K.rows_bwd, BACKWARD_PARAMS),
           "forward_pairs": (K.rows_fwd_pairs, PAIRS_PARAMS),
           "backward_pairs": (K.rows_bwd_pairs, BACKWARD_PAIRS_PARAMS)}  # fmt: skip
_VARIANTS = {op: HintVariants(kernel) for op, (kernel, _) in KERNELS.items()}


def _tile_values(p: RowsPlan) -> dict:
    w0, w1, w2 = p.widths
    return dict(TILE_A=p.tile_a, TILE_B=p.tile_b, W0=w0, W1=w1, W2=w2, CHECK_A=p.check_a, CHECK_N=p.check_n, TMA=p.tma)


def forward_values(p: RowsPlan, casting: int, has_weight: bool, store_rstd: bool,
                   residual: int = CK.RESIDUAL_NONE) -> dict:  # fmt: skip
    """The forward kernel's compile-time constants for a plan."""
    return dict(_tile_values(p), CASTING=casting, HAS_WEIGHT=has_weight, STORE_RSTD=store_rstd, RESIDUAL=residual)


def backward_values(p: RowsPlan, has_weight: bool, round_xhat: bool) -> dict:
    """The backward kernel's compile-time constants for a plan."""
    return dict(_tile_values(p), HAS_WEIGHT=has_weight, ROUND_XHAT=round_xhat)


def arguments(op: str, values: dict) -> tuple:
    """The argument tuple of op's kernel from named values (arrays, scalars, constants)."""
    return tuple(values[name] for name in KERNELS[op][1])


def run_forward(p: RowsPlan, x, weight, y, rstd, eps: float, offset: float, casting: int, device, stream,
                residual=None, s=None, s_dtype_like=None) -> None:  # fmt: skip
    """y = rms_norm(x) * (offset + weight); rstd stored unless it is None. device: the
    _device.DeviceInfo the plan was made for (unused: the plan holds what it needs). With a
    residual: the norm is of s = x + residual (in s's dtype), stored into s; s None (post-norm):
    not stored, and s_dtype_like, any array of the sum's dtype, names it."""
    has_weight = weight is not None
    code = CK.RESIDUAL_NONE if residual is None else CK.RESIDUAL_ADD if s is not None else CK.RESIDUAL_ADD_UNSTORED
    values = forward_values(p, casting, has_weight, rstd is not None, code)
    values.update(x=x, r=x if residual is None else residual, w=weight if has_weight else x, y=y,
                  s_out=s if s is not None else (s_dtype_like if residual is not None else x),
                  rstd_out=y if rstd is None else rstd, eps=float(eps), offset=float(offset))  # fmt: skip
    launch(stream, (p.grid,), _VARIANTS["forward"][p.hints], arguments("forward", values))


def pairs_plan(a: int, b: int, n: int, num_sms: int, op: str = "forward") -> RowsPlan | None:
    """The plan of rows_fwd_pairs (experimental) for (a, b, n) 16-bit rows of even length n (None
    for odd n, or where there is none): a row of words holds its n values in registers as fp32,
    as an fp32 row of n does, so it takes that row's plan with every piece halved into words
    (on the plan of n / 2 fp32 elements, bf16 510 as 16 x 256 words, tileiras 13.4 spilled 56
    bytes a thread at its 128-register cap; as 8 x 256 it does not)."""
    if n % 2:
        return None
    p = plan(op, a, b, n, 4, num_sms)
    return None if p is None else dataclasses.replace(p, widths=tuple(w // 2 for w in p.widths))


def run_forward_pairs(p: RowsPlan, xw, ww, yw, rstd, eps: float, offset: float, casting: int, half: int, device,
                      stream) -> None:  # fmt: skip
    """run_forward on int32 word views (x, y: (A, B, N / 2); weight (N / 2,) or None) of 16-bit
    arrays of dtype half (rmsnorm.kernels.HALF_*), planned by pairs_plan (experimental)."""
    has_weight = ww is not None
    values = dict(_tile_values(p), HALF=half, CASTING=casting, HAS_WEIGHT=has_weight, STORE_RSTD=rstd is not None,
                  x=xw, w=ww if has_weight else xw, y=yw, rstd_out=yw if rstd is None else rstd, eps=float(eps),
                  offset=float(offset))  # fmt: skip
    values.pop("TMA")
    launch(stream, (p.grid,), _VARIANTS["forward_pairs"][p.hints], arguments("forward_pairs", values))


def run_backward_pairs(p: RowsPlan, xw, dyw, ww, rstd, dxw, dww, offset: float, casting: int, half: int, empty_f32,
                       device, stream) -> None:  # fmt: skip
    """run_backward on int32 word views (x, dy, dx: (A, B, N / 2); weight and dw (N / 2,), both
    of x's 16-bit dtype, or None) planned by pairs_plan(..., op="backward") (experimental); the
    (grid, 2, N / 2) fp32 dW partials are summed and packed by the core's dw_reduce_packed."""
    has_weight = ww is not None
    nw = xw.shape[2]
    partial = empty_f32((p.grid, 2, nw)) if has_weight else None
    values = dict(_tile_values(p), HALF=half, HAS_WEIGHT=has_weight,
                  ROUND_XHAT=has_weight and casting != CK.CAST_GEMMA, x=xw, dy=dyw, w=ww if has_weight else xw,
                  rstd_in=rstd, dx=dxw, dw_partial=partial if has_weight else xw, offset=float(offset))  # fmt: skip
    values.pop("TMA")
    launch(stream, (p.grid,), _VARIANTS["backward_pairs"][p.hints], arguments("backward_pairs", values))
    if has_weight:
        reduce_grid = max(1, min(-(-nw // (REDUCE_TILE_N // 2)), device.num_sms * REDUCE_BLOCKS_PER_SM))
        launch(stream, (reduce_grid,), CK.dw_reduce_packed, (partial, dww, REDUCE_TILE_G, REDUCE_TILE_N // 2, half))


def run_backward(p: RowsPlan, x, dy, weight, rstd, dx, dw, offset: float, casting: int, empty_f32, device,
                 stream) -> None:  # fmt: skip
    """dx, and dw (weight's shape and dtype) unless weight is None; empty_f32(shape) allocates
    the (grid, N) fp32 dW partials on x's device. In llama and none casting dW uses xhat
    rounded to x's dtype, as the forward multiplied the weight by it."""
    has_weight = weight is not None
    n = x.shape[2]
    partial = empty_f32((p.grid, n)) if has_weight else None
    values = backward_values(p, has_weight, has_weight and casting != CK.CAST_GEMMA)
    values.update(x=x, dy=dy, w=weight if has_weight else x, rstd_in=rstd, dx=dx,
                  dw_partial=partial if has_weight else x, offset=float(offset))  # fmt: skip
    launch(stream, (p.grid,), _VARIANTS["backward"][p.hints], arguments("backward", values))
    if has_weight:
        reduce_grid = max(1, min(-(-n // REDUCE_TILE_N), device.num_sms * REDUCE_BLOCKS_PER_SM))
        launch(stream, (reduce_grid,), CK.dw_reduce, (partial, dw, REDUCE_TILE_G, REDUCE_TILE_N))
