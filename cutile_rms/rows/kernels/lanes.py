"""The lanes kernels (plan kind "lanes"): rows_fwd_lanes and rows_bwd_lanes, short unaligned rows
padded to W, each held by W / L lanes of L elements (plan.lanes_plan)."""

import cuda.tile as ct

from cutile_rms._tile import tile_function
from cutile_rms.rmsnorm.kernels import (
    CAST_GEMMA,
    _normalize,
    _weight_factor,
)
from cutile_rms.rows.kernels.common import (
    C_BOOL,
    C_INT,
    RowArray,
    RowVector,
    _dw,
    _rstd_tile,
    _tile,
    row_kernel,
)

# Short rows that are not 16-byte aligned (plan.lanes_plan): the kernels gather a row tile as
# (TILE_A, TILE_B, L, K), column l * K + k, so that tileiras lays it out with K lanes of one warp
# a row and L elements a lane (an unaligned gather holds one element a lane along the last axis,
# spreads the lanes along K and then over rows, and keeps L within each thread). Summed over L
# first, a row's sum of squares takes log2(K) shuffles and no barrier. The (TILE_A, TILE_B, W)
# tile as rows_fwd gathers it spreads each row over the whole block, so every thread holds
# every row: SASS, bf16 32 x (128 + 64) of rows of 191, 44 instructions an element with 246
# shuffles and 56 barriers a tile, against 16 for (16, 16, 16) here. y leaves through one
# ct.store a loop iteration: tileiras 13.4 orders a ct.scatter (or a second store to y) after
# the previous iteration's stores with a barrier per store instruction (bench/NOTES.md,
# session 17). With L = 4 on static layouts (plan.vector_lanes, session 31) a thread holds one
# contiguous 4-element vector of each of its row pieces instead: a row spreads over K / 4
# threads, its gathers compile to 8-byte loads, and its sum takes log2(K / 4) shuffles; with L = 8
# (2 mod 4 rows forward, session 32) a thread holds 8 elements, gathered 4 bytes at a time.


@tile_function
def _lane_columns(L: C_INT, K: C_INT):
    """(1, 1, L, K) column indices l * K + k of a lanes tile."""
    return ct.reshape(ct.arange(L, dtype=ct.int32) * K, (1, 1, L, 1)) + ct.reshape(ct.arange(K, dtype=ct.int32),
                                                                                   (1, 1, 1, K))  # fmt: skip


@tile_function
def _lane_indices(ia, ib, c, TILE_A: C_INT, TILE_B: C_INT):
    """Gather indices of lanes tile (ia, ib) with columns c."""
    ra = ct.reshape(ct.arange(TILE_A, dtype=ct.int32) + ia * TILE_A, (TILE_A, 1, 1, 1))
    rb = ct.reshape(ct.arange(TILE_B, dtype=ct.int32) + ib * TILE_B, (1, TILE_B, 1, 1))
    return ra, rb, c


@tile_function
def _lane_weight(w, c, offset, L: C_INT, K: C_INT, HAS_WEIGHT: C_BOOL, CASTING: C_INT):
    """(1, 1, L, K) offset + w at columns c as _weight (0 + offset past N; fp32 1 without a weight)."""
    if HAS_WEIGHT:
        return _weight_factor(ct.gather(w, c, padding_value=0), offset, CASTING)
    else:
        return ct.full((1, 1, L, K), 1.0, dtype=ct.float32)


@tile_function
def _lane_sum(t):
    """(TILE_A, TILE_B, 1, 1) sums of a lanes tile's rows: over L within each lane, then over
    the K lanes (shuffles within the threads that hold the row)."""
    return ct.sum(ct.sum(t, axis=2, keepdims=True), axis=3, keepdims=True)


@tile_function
def _store_lanes(a, ia, ib, t):
    """Lanes tile t into row tile (ia, ib) of a, with one ct.store (see above); the columns past
    N and the rows past A are dropped."""
    s = t.shape
    ct.store(a, (ia, ib, 0), ct.reshape(t, (s[0], s[1], s[2] * s[3])), allow_tma=False)


@tile_function
def _lanes_y(y, xt, wp, eps, inv_n, CASTING: C_INT, HAS_WEIGHT: C_BOOL):
    """(y in y's dtype, rstd as (TILE_A, TILE_B, 1, 1)) of a gathered lanes tile xt."""
    f = ct.astype(xt, ct.float32)
    rstd = ct.rsqrt(_lane_sum(f * f) * inv_n + eps)
    return ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), y.dtype), rstd


@tile_function
def _lanes_forward_tile(x, y, rstd_out, t, tiles_b, c, wp, eps, inv_n, TILE_A: C_INT, TILE_B: C_INT,
                        CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, SCATTER: C_BOOL):  # fmt: skip
    """Lanes tile t of x gathered, normalized and written: y stored as a row tile, or scattered
    at the gather's indices (SCATTER); rstd too where STORE_RSTD."""
    ia, ib = _tile(t, tiles_b)
    idx = _lane_indices(ia, ib, c, TILE_A, TILE_B)
    yt, rstd = _lanes_y(y, ct.gather(x, idx, padding_value=0), wp, eps, inv_n, CASTING, HAS_WEIGHT)
    if SCATTER:
        ct.scatter(y, idx, yt)
    else:
        _store_lanes(y, ia, ib, yt)
    if STORE_RSTD:
        ct.store(rstd_out, (ia, ib), ct.reshape(rstd, (TILE_A, TILE_B)), allow_tma=False)


@row_kernel
def rows_fwd_lanes(x: RowArray, w: RowVector, y: RowArray, rstd_out, eps, offset, TILE_A: C_INT, TILE_B: C_INT,
                   L: C_INT, K: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL,
                   LOOP: C_BOOL):  # fmt: skip
    """rows_fwd for short unaligned rows, tiles gathered as (TILE_A, TILE_B, L, K) (see above);
    L * K >= N, the lanes past N load as 0 and their stores are dropped. LOOP: the blocks stride
    over the tiles; without it (a block a tile: plan.lanes_one_tile) the block's one tile leaves
    through ct.scatter at the gather's indices: no loop orders it after earlier stores, and
    tileiras then moves it without shared memory or barriers (CPU SASS, bench/NOTES.md, session
    54). (Session 54's PREFETCH, the next tile's gathers first, went with the only rule that
    used it, session 55.)"""
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    c = _lane_columns(L, K)
    wp = _lane_weight(w, c, offset, L, K, HAS_WEIGHT, CASTING)
    inv_n = 1.0 / x.shape[2]
    if LOOP:
        for t in range(ct.bid(0), ct.cdiv(x.shape[0], TILE_A) * tiles_b, ct.num_blocks(0)):
            _lanes_forward_tile(x, y, rstd_out, t, tiles_b, c, wp, eps, inv_n, TILE_A, TILE_B, CASTING, HAS_WEIGHT,
                                STORE_RSTD, False)  # fmt: skip
    else:
        _lanes_forward_tile(x, y, rstd_out, ct.bid(0), tiles_b, c, wp, eps, inv_n, TILE_A, TILE_B, CASTING,
                            HAS_WEIGHT, STORE_RSTD, True)  # fmt: skip


@tile_function
def _lanes_loads(x, dy, rstd_in, t, tiles_b, c, TILE_A: C_INT, TILE_B: C_INT):
    """(rstd as (TILE_A, TILE_B, 1, 1), x, dy) of lanes tile t, gathered (0 past N and A)."""
    ia, ib = _tile(t, tiles_b)
    idx = _lane_indices(ia, ib, c, TILE_A, TILE_B)
    r2 = _rstd_tile(rstd_in, ia, ib, TILE_A, TILE_B, True)
    return (
        ct.reshape(r2, (TILE_A, TILE_B, 1, 1)),
        ct.gather(x, idx, padding_value=0),
        ct.gather(dy, idx, padding_value=0),
    )


@tile_function
def _lanes_dx(dx, ia, ib, rstd, xt, dt, wp, inv_n):
    """dx of a loaded lanes tile, stored; returns (dy, xhat) in fp32."""
    xhat = ct.astype(xt, ct.float32) * rstd
    dyf = ct.astype(dt, ct.float32)
    wdy = dyf * wp
    cm = _lane_sum(wdy * xhat) * inv_n
    _store_lanes(dx, ia, ib, ct.astype((wdy - xhat * cm) * rstd, dx.dtype))
    return dyf, xhat


@row_kernel
def rows_bwd_lanes(x: RowArray, dy: RowArray, w: RowVector, rstd_in, dx: RowArray, dw_partial: RowVector, offset,
                   TILE_A: C_INT, TILE_B: C_INT, L: C_INT, K: C_INT, HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL,
                   PREFETCH: C_BOOL):  # fmt: skip
    """rows_bwd for short unaligned rows, x and dy gathered as rows_fwd_lanes gathers x; dx leaves
    through one ct.store an iteration, and this block's dW, summed in a lanes-shaped accumulator,
    goes into row bid of dw_partial ((grid, L * K) fp32: the columns past N sum to 0). PREFETCH:
    each iteration gathers the block's next tile (clamped to the last) before it works on this
    one, as rows_bwd's (plan.LANES_BWD_PREFETCH: on by default, session 27)."""
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    tiles = ct.cdiv(x.shape[0], TILE_A) * tiles_b
    c = _lane_columns(L, K)
    wp = _lane_weight(w, c, offset, L, K, HAS_WEIGHT, CAST_GEMMA)
    inv_n = 1.0 / x.shape[2]
    acc = ct.zeros((TILE_A, TILE_B, L, K), dtype=ct.float32)
    if PREFETCH:
        rstd, xt, dt = _lanes_loads(x, dy, rstd_in, ct.minimum(ct.bid(0), tiles - 1), tiles_b, c, TILE_A, TILE_B)
        for t in range(ct.bid(0), tiles, ct.num_blocks(0)):
            ia, ib = _tile(t, tiles_b)
            nt = ct.minimum(t + ct.num_blocks(0), tiles - 1)
            nrstd, nxt, ndt = _lanes_loads(x, dy, rstd_in, nt, tiles_b, c, TILE_A, TILE_B)
            dyf, xhat = _lanes_dx(dx, ia, ib, rstd, xt, dt, wp, inv_n)
            if HAS_WEIGHT:
                acc += _dw(dyf, xhat, x.dtype, ROUND_XHAT)
            rstd, xt, dt = nrstd, nxt, ndt
    else:
        for t in range(ct.bid(0), tiles, ct.num_blocks(0)):
            ia, ib = _tile(t, tiles_b)
            rstd, xt, dt = _lanes_loads(x, dy, rstd_in, t, tiles_b, c, TILE_A, TILE_B)
            dyf, xhat = _lanes_dx(dx, ia, ib, rstd, xt, dt, wp, inv_n)
            if HAS_WEIGHT:
                acc += _dw(dyf, xhat, x.dtype, ROUND_XHAT)
    if HAS_WEIGHT:
        total = ct.sum(ct.sum(acc, axis=0, keepdims=True), axis=1, keepdims=True)
        ct.store(dw_partial, (ct.bid(0), 0), ct.reshape(total, (1, L * K)), allow_tma=False)
