"""The "chunked" kernels: rows wider than one tile, walked in TILE_N-wide column chunks. The
forward reads each row twice (sum of squares, then normalize); the backward runs in two steps
(rms_bwd_row_dot: c per row, then rms_bwd_chunked on a 2-D grid of row groups x chunks)."""

import cuda.tile as ct

from cutile_rms._tile import tile_function, tile_kernel
from cutile_rms.rmsnorm.kernels.common import (
    RESIDUAL_ADD,
    RESIDUAL_NONE,
    ZERO,
    _add_residual,
    _dw_rows,
    _dx_out,
    _load_tile,
    _normalize,
    _row_wdy_x,
    _store_tile,
    _weight_row,
)


@tile_function
def _fwd_chunked_rows(
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
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    STORE_RSTD: ct.Constant[bool],
    ADD_RESIDUAL: ct.Constant[int],
    SUM_FROM_OUTPUT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Forward for rows of any length: each block takes TILE_M rows at a time and walks their
    columns in TILE_N chunks twice, once for the sum of squares and once to normalize.

    The second pass re-reads x, mostly from L2. With ADD_RESIDUAL it recomputes s = x + r from
    x and r (the same rounding gives the same s), or, with SUM_FROM_OUTPUT (in place, where the
    first pass overwrote r with s), reads s back from s_out. Recomputing avoids ordering the
    second pass's loads after the first pass's stores to the same array. Used by the gather
    mode (a block per row group) and by the persistent mode when a row does not fit one tile.
    """
    n = x.shape[1]
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    num_chunks = ct.cdiv(n, TILE_N)
    for i in range(ct.bid(0), num_row_tiles, ct.num_blocks(0)):
        sumsq = ct.zeros((TILE_M, 1), dtype=ct.float32)
        for j in range(num_chunks):
            xt = _load_tile(x, i, j, TILE_M, TILE_N, LATENCY)
            if ADD_RESIDUAL != RESIDUAL_NONE:
                xt = _add_residual(xt, r, s_out, i, j, TILE_M, TILE_N, True, TMA_STORE, LATENCY,
                                   ADD_RESIDUAL == RESIDUAL_ADD)  # fmt: skip
            xf = ct.astype(xt, ct.float32)
            sumsq += ct.sum(xf * xf, axis=1, keepdims=True)
        rstd = ct.rsqrt(sumsq / n + eps)
        for j in range(num_chunks):
            if SUM_FROM_OUTPUT:
                xt = _load_tile(s_out, i, j, TILE_M, TILE_N, LATENCY)
            else:
                xt = _load_tile(x, i, j, TILE_M, TILE_N, LATENCY)
                if ADD_RESIDUAL != RESIDUAL_NONE:
                    rt = _load_tile(r, i, j, TILE_M, TILE_N, LATENCY)
                    xt = ct.astype(ct.astype(xt, ct.float32) + ct.astype(rt, ct.float32), s_out.dtype)
            wp = _weight_row(w, j, offset, TILE_N, HAS_WEIGHT)
            yt = _normalize(xt, rstd, wp, CASTING, HAS_WEIGHT)
            _store_tile(y, i, j, ct.astype(yt, y.dtype), TMA_STORE, True)
        if STORE_RSTD:
            ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))


@tile_kernel
def rms_fwd_chunked(
    x,
    w,
    y,
    rstd_out,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Chunked forward that stores rstd (see _fwd_chunked_rows)."""
    _fwd_chunked_rows(x, x, w, y, y, rstd_out, eps, offset, TILE_M, TILE_N, CASTING, HAS_WEIGHT, True, RESIDUAL_NONE,
                      False, TMA_STORE, LATENCY)  # fmt: skip


@tile_kernel
def rms_fwd_chunked_infer(
    x,
    w,
    y,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Chunked forward without rstd (inference)."""
    _fwd_chunked_rows(x, x, w, y, y, y, eps, offset, TILE_M, TILE_N, CASTING, HAS_WEIGHT, False, RESIDUAL_NONE, False,
                      TMA_STORE, LATENCY)  # fmt: skip


@tile_kernel
def rms_bwd_row_dot(
    x,
    dy,
    w,
    rstd_in,
    c_out,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
):
    """First step of the chunked backward (rows longer than one tile): c = mean(wdy * xhat)
    per row, into c_out (M,) fp32. Blocks stride over row tiles and walk the columns."""
    n = x.shape[1]
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    for i in range(ct.bid(0), num_row_tiles, ct.num_blocks(0)):
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        acc = _row_wdy_x(x, dy, w, i, offset, TILE_M, TILE_N, HAS_WEIGHT, True)
        ct.store(c_out, (i,), ct.reshape(acc * rstd / n, (TILE_M,)))


@tile_function
def _bwd_chunk_cols(
    x,
    dy,
    dres,
    w,
    rstd_in,
    c_in,
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
    """Second step of the chunked backward, on a 2-D grid (row groups, column chunks).

    Block (g, j) owns column chunk j of the row tiles g, g + G, g + 2G, ... (G = grid rows):
    it writes dx there and its fp32 share of dW for chunk j to dw_partial[g, chunk j].
    (dres, dr: see _dx_out.)
    """
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    g = ct.bid(0)
    j = ct.bid(1)
    wp = _weight_row(w, j, offset, TILE_N, HAS_WEIGHT)
    dw_acc = ct.zeros((1, TILE_N), dtype=ct.float32)
    for i in range(g, num_row_tiles, ct.num_blocks(0)):
        xf = ct.astype(_load_tile(x, i, j, TILE_M, TILE_N, LATENCY), ct.float32)
        dyf = ct.astype(_load_tile(dy, i, j, TILE_M, TILE_N, LATENCY), ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        c = ct.reshape(ct.load(c_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xhat = xf * rstd
        dxf = (dyf * wp - xhat * c) * rstd
        _dx_out(dx, dr, dres, i, j, dxf, TILE_M, TILE_N, ADD_DRES, TWO_OUTPUTS, TMA_STORE, LATENCY)
        if HAS_WEIGHT:
            dw_acc += _dw_rows(dyf, xhat, x.dtype, ROUND_XHAT)
    if HAS_WEIGHT:
        ct.store(dw_partial, (g, j), dw_acc)


@tile_kernel
def rms_bwd_chunked(
    x,
    dy,
    w,
    rstd_in,
    c_in,
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
    """Chunked backward's second step (see _bwd_chunk_cols)."""
    _bwd_chunk_cols(x, dy, dy, w, rstd_in, c_in, dx, dx, dw_partial, offset, TILE_M, TILE_N, HAS_WEIGHT, ROUND_XHAT,
                    False, False, TMA_STORE, LATENCY)  # fmt: skip
