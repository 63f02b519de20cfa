"""The "tile" kernels: a row fits one tile (TILE_N wide, or TILE_N + TAIL as two tiles), TILE_M
rows at a time, in a persistent grid. Forward (with and without the rstd store) and backward
(dW partials per block)."""

import cuda.tile as ct

from cutile_rms._tile import tile_function, tile_kernel
from cutile_rms.rmsnorm.kernels.common import (
    RESIDUAL_ADD,
    RESIDUAL_NONE,
    ZERO,
    _add_residual,
    _dw_rows,
    _dx_out,
    _load_rows,
    _load_tile,
    _normalize,
    _store_tile,
    _tail_weight,
    _weight_row,
)


@tile_function
def _fwd_row_tile(
    x,
    r,
    y,
    s_out,
    rstd_out,
    i,
    wp,
    wpt,
    n,
    eps,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    TAIL: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    STORE_RSTD: ct.Constant[bool],
    ADD_RESIDUAL: ct.Constant[int],
    CHECK_BOUNDS: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Forward of row tile i when a row fits one tile (N <= TILE_N) or, with TAIL > 0, two:
    columns [0, TILE_N) and [TILE_N, TILE_N + TAIL) (N = TILE_N + TAIL; module docstring).
    wp and wpt are the two tiles' offset + w. With ADD_RESIDUAL the row normalized is s = x + r,
    stored to s_out on the way (one pass: s stays on chip); otherwise r and s_out are unused.
    CHECK_BOUNDS=False (the caller has checked N == TILE_N and TILE_M divides M) skips the
    bounds checks."""
    xt = _load_rows(x, i, 0, TILE_M, TILE_N, CHECK_BOUNDS, LATENCY)
    if ADD_RESIDUAL != RESIDUAL_NONE:
        xt = _add_residual(xt, r, s_out, i, 0, TILE_M, TILE_N, CHECK_BOUNDS, TMA_STORE, LATENCY,
                           ADD_RESIDUAL == RESIDUAL_ADD)  # fmt: skip
    xf = ct.astype(xt, ct.float32)
    sum_sq = ct.sum(xf * xf, axis=1, keepdims=True)
    if TAIL > 0:
        jt = TILE_N // TAIL  # the tail's tile index
        xu = _load_rows(x, i, jt, TILE_M, TAIL, CHECK_BOUNDS, LATENCY)
        if ADD_RESIDUAL != RESIDUAL_NONE:
            xu = _add_residual(xu, r, s_out, i, jt, TILE_M, TAIL, CHECK_BOUNDS, TMA_STORE, LATENCY,
                               ADD_RESIDUAL == RESIDUAL_ADD)  # fmt: skip
        uf = ct.astype(xu, ct.float32)
        sum_sq = sum_sq + ct.sum(uf * uf, axis=1, keepdims=True)
    rstd = ct.rsqrt(sum_sq / n + eps)
    yt = _normalize(xt, rstd, wp, CASTING, HAS_WEIGHT)
    _store_tile(y, i, 0, ct.astype(yt, y.dtype), TMA_STORE, CHECK_BOUNDS)
    if TAIL > 0:
        _store_tile(y, i, jt, ct.astype(_normalize(xu, rstd, wpt, CASTING, HAS_WEIGHT), y.dtype), TMA_STORE,
                    CHECK_BOUNDS)  # fmt: skip
    if STORE_RSTD:
        ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)), check_bounds=CHECK_BOUNDS)


@tile_function
def _fwd_tile_rows(
    x,
    r,
    w,
    y,
    s_out,
    rstd_out,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    TAIL: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    STORE_RSTD: ct.Constant[bool],
    ADD_RESIDUAL: ct.Constant[int],
    CHECK_BOUNDS: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Static persistent forward (see _fwd_row_tile): each block loads the weight once and
    strides over the (TILE_M, TILE_N) row tiles bid, bid + grid, bid + 2 grid, ..."""
    n = x.shape[1]
    wp = _weight_row(w, 0, offset, TILE_N, HAS_WEIGHT)
    wpt = _tail_weight(w, wp, offset, TILE_N, TAIL, HAS_WEIGHT)
    for i in range(ct.bid(0), ct.cdiv(x.shape[0], TILE_M), ct.num_blocks(0)):
        _fwd_row_tile(x, r, y, s_out, rstd_out, i, wp, wpt, n, eps, TILE_M, TILE_N, TAIL, CASTING, HAS_WEIGHT,
                      STORE_RSTD, ADD_RESIDUAL, CHECK_BOUNDS, TMA_STORE, LATENCY)  # fmt: skip


# Each forward comes as two kernels: the training one stores rstd; the inference one has no
# rstd parameter at all. ct.launch spends host time on every array argument (about 0.5-1.4 us
# each on the H200 host, bench/NOTES.md), which is a large share of a decode-sized call.


@tile_kernel
def rms_fwd_tile(
    x,
    w,
    y,
    rstd_out,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    TAIL: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Single-tile forward that stores rstd (see _fwd_tile_rows)."""
    _fwd_tile_rows(x, x, w, y, y, rstd_out, eps, offset, TILE_M, TILE_N, TAIL, CASTING, HAS_WEIGHT, True, RESIDUAL_NONE,
                   True, TMA_STORE, LATENCY)  # fmt: skip


@tile_kernel
def rms_fwd_tile_infer(
    x,
    w,
    y,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    TAIL: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Single-tile forward without rstd (inference)."""
    _fwd_tile_rows(x, x, w, y, y, y, eps, offset, TILE_M, TILE_N, TAIL, CASTING, HAS_WEIGHT, False, RESIDUAL_NONE, True,
                   TMA_STORE, LATENCY)  # fmt: skip


@tile_function
def _bwd_tile_rows(
    x,
    dy,
    dres,
    w,
    rstd_in,
    dx,
    dr,
    dw_partial,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    ROUND_XHAT: ct.Constant[bool],
    ADD_DRES: ct.Constant[bool],
    TWO_OUTPUTS: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Persistent backward when a row fits one tile (N <= TILE_N).

    dx for each (TILE_M, TILE_N) row tile; the block's share of dW accumulates in an fp32
    (1, TILE_N) tile and is written once, to row bid of dw_partial (grid x N, fp32). The
    assignment of rows to blocks depends only on the grid, so results are deterministic.
    (dres, dr: see _dx_out; unused by the plain RMSNorm kernels.)
    """
    n = x.shape[1]
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, 0, offset, TILE_N, HAS_WEIGHT)
    dw_acc = ct.zeros((1, TILE_N), dtype=ct.float32)
    for i in range(ct.bid(0), num_row_tiles, ct.num_blocks(0)):
        xf = ct.astype(_load_tile(x, i, 0, TILE_M, TILE_N, LATENCY), ct.float32)
        dyf = ct.astype(_load_tile(dy, i, 0, TILE_M, TILE_N, LATENCY), ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xhat = xf * rstd
        wdy = dyf * wp
        c = ct.sum(wdy * xhat, axis=1, keepdims=True) / n
        _dx_out(dx, dr, dres, i, 0, (wdy - xhat * c) * rstd, TILE_M, TILE_N, ADD_DRES, TWO_OUTPUTS, TMA_STORE, LATENCY)
        if HAS_WEIGHT:
            dw_acc += _dw_rows(dyf, xhat, x.dtype, ROUND_XHAT)
    if HAS_WEIGHT:
        ct.store(dw_partial, (ct.bid(0), 0), dw_acc)


@tile_kernel
def rms_bwd_tile(
    x,
    dy,
    w,
    rstd_in,
    dx,
    dw_partial,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    ROUND_XHAT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Single-tile backward (see _bwd_tile_rows)."""
    _bwd_tile_rows(x, dy, dy, w, rstd_in, dx, dx, dw_partial, offset, TILE_M, TILE_N, HAS_WEIGHT, ROUND_XHAT, False,
                   False, TMA_STORE, LATENCY)  # fmt: skip
