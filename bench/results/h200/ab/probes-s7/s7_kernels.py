"""Session-7 probe kernels: rows of up to three power-of-two pieces (TILE_N + T1 + T2, each a
power of two, descending; T1/T2 = 0: absent), so that N = 5120 or 7168 needs no padding."""
import cuda.tile as ct
from cutile_rms.rmsnorm.kernels import (ZERO, _dw_rows, _half_dtype, _load_tile, _normalize, _pack, _store_tile,
                                        _unpack, _weight_row)


@ct.kernel
def fwd_pieces(x, w, y, rstd_out, eps, offset, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
               T1: ct.Constant[int], T2: ct.Constant[int], CASTING: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool],
               TMA_STORE: ct.Constant[bool]):
    n = x.shape[1]
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp0 = _weight_row(w, 0, offset, TILE_N, HAS_WEIGHT)
    if T1 > 0:
        wp1 = _weight_row(w, TILE_N // T1, offset, T1, HAS_WEIGHT)
    if T2 > 0:
        wp2 = _weight_row(w, (TILE_N + T1) // T2, offset, T2, HAS_WEIGHT)
    for i in range(ct.bid(0), num_row_tiles, ct.num_blocks(0)):
        x0 = _load_tile(x, i, 0, TILE_M, TILE_N, 0)
        f0 = ct.astype(x0, ct.float32)
        ss = ct.sum(f0 * f0, axis=1, keepdims=True)
        if T1 > 0:
            x1 = _load_tile(x, i, TILE_N // T1, TILE_M, T1, 0)
            f1 = ct.astype(x1, ct.float32)
            ss = ss + ct.sum(f1 * f1, axis=1, keepdims=True)
        if T2 > 0:
            x2 = _load_tile(x, i, (TILE_N + T1) // T2, TILE_M, T2, 0)
            f2 = ct.astype(x2, ct.float32)
            ss = ss + ct.sum(f2 * f2, axis=1, keepdims=True)
        rstd = ct.rsqrt(ss / n + eps)
        _store_tile(y, i, 0, ct.astype(_normalize(x0, rstd, wp0, CASTING, HAS_WEIGHT), y.dtype), TMA_STORE, True)
        if T1 > 0:
            _store_tile(y, i, TILE_N // T1, ct.astype(_normalize(x1, rstd, wp1, CASTING, HAS_WEIGHT), y.dtype),
                        TMA_STORE, True)
        if T2 > 0:
            _store_tile(y, i, (TILE_N + T1) // T2, ct.astype(_normalize(x2, rstd, wp2, CASTING, HAS_WEIGHT), y.dtype),
                        TMA_STORE, True)
        ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))


@ct.function
def _wpair(w, j, offset, W: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool], HALF: ct.Constant[int]):
    if HAS_WEIGHT:
        lo, hi = _unpack(ct.reshape(ct.load(w, (j,), (W,), padding_mode=ZERO), (1, W)), HALF)
        return lo + offset, hi + offset
    else:
        one = ct.full((1, W), 1.0, dtype=ct.float32)
        return one, one


@ct.function
def _bwd_piece(x, dy, i, j, rstd, w_lo, w_hi, TILE_M: ct.Constant[int], W: ct.Constant[int], HALF: ct.Constant[int]):
    """(dy_lo, dy_hi, xhat_lo, xhat_hi, wdy_lo, wdy_hi, partial c sum) of one word piece."""
    x_lo, x_hi = _unpack(_load_tile(x, i, j, TILE_M, W, 0), HALF)
    dy_lo, dy_hi = _unpack(_load_tile(dy, i, j, TILE_M, W, 0), HALF)
    xhat_lo = x_lo * rstd
    xhat_hi = x_hi * rstd
    wdy_lo = dy_lo * w_lo
    wdy_hi = dy_hi * w_hi
    part = ct.sum(wdy_lo * xhat_lo, axis=1, keepdims=True) + ct.sum(wdy_hi * xhat_hi, axis=1, keepdims=True)
    return dy_lo, dy_hi, xhat_lo, xhat_hi, wdy_lo, wdy_hi, part


@ct.kernel
def bwd_packed_pieces(x, dy, w, rstd_in, dx, dw_partial, offset, TILE_M: ct.Constant[int], TILE_W: ct.Constant[int],
                      T1: ct.Constant[int], T2: ct.Constant[int], HALF: ct.Constant[int],
                      HAS_WEIGHT: ct.Constant[bool], ROUND_XHAT: ct.Constant[bool], TMA_STORE: ct.Constant[bool]):
    n = x.shape[1] * 2
    hd = _half_dtype(HALF)
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    w0l, w0h = _wpair(w, 0, offset, TILE_W, HAS_WEIGHT, HALF)
    a0l = ct.zeros((1, TILE_W), dtype=ct.float32)
    a0h = ct.zeros((1, TILE_W), dtype=ct.float32)
    if T1 > 0:
        w1l, w1h = _wpair(w, TILE_W // T1, offset, T1, HAS_WEIGHT, HALF)
        a1l = ct.zeros((1, T1), dtype=ct.float32)
        a1h = ct.zeros((1, T1), dtype=ct.float32)
    if T2 > 0:
        w2l, w2h = _wpair(w, (TILE_W + T1) // T2, offset, T2, HAS_WEIGHT, HALF)
        a2l = ct.zeros((1, T2), dtype=ct.float32)
        a2h = ct.zeros((1, T2), dtype=ct.float32)
    for i in range(ct.bid(0), num_row_tiles, ct.num_blocks(0)):
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        d0l, d0h, h0l, h0h, g0l, g0h, c = _bwd_piece(x, dy, i, 0, rstd, w0l, w0h, TILE_M, TILE_W, HALF)
        if T1 > 0:
            d1l, d1h, h1l, h1h, g1l, g1h, c1 = _bwd_piece(x, dy, i, TILE_W // T1, rstd, w1l, w1h, TILE_M, T1, HALF)
            c = c + c1
        if T2 > 0:
            d2l, d2h, h2l, h2h, g2l, g2h, c2 = _bwd_piece(x, dy, i, (TILE_W + T1) // T2, rstd, w2l, w2h, TILE_M, T2,
                                                         HALF)
            c = c + c2
        c = c / n
        _store_tile(dx, i, 0, _pack((g0l - h0l * c) * rstd, (g0h - h0h * c) * rstd, HALF), TMA_STORE, True)
        if HAS_WEIGHT:
            a0l += _dw_rows(d0l, h0l, hd, ROUND_XHAT)
            a0h += _dw_rows(d0h, h0h, hd, ROUND_XHAT)
        if T1 > 0:
            _store_tile(dx, i, TILE_W // T1, _pack((g1l - h1l * c) * rstd, (g1h - h1h * c) * rstd, HALF), TMA_STORE,
                        True)
            if HAS_WEIGHT:
                a1l += _dw_rows(d1l, h1l, hd, ROUND_XHAT)
                a1h += _dw_rows(d1h, h1h, hd, ROUND_XHAT)
        if T2 > 0:
            _store_tile(dx, i, (TILE_W + T1) // T2, _pack((g2l - h2l * c) * rstd, (g2h - h2h * c) * rstd, HALF),
                        TMA_STORE, True)
            if HAS_WEIGHT:
                a2l += _dw_rows(d2l, h2l, hd, ROUND_XHAT)
                a2h += _dw_rows(d2h, h2h, hd, ROUND_XHAT)
    if HAS_WEIGHT:
        b = ct.bid(0)
        ct.store(dw_partial, (b, 0, 0), ct.reshape(a0l, (1, 1, TILE_W)))
        ct.store(dw_partial, (b, 1, 0), ct.reshape(a0h, (1, 1, TILE_W)))
        if T1 > 0:
            ct.store(dw_partial, (b, 0, TILE_W // T1), ct.reshape(a1l, (1, 1, T1)))
            ct.store(dw_partial, (b, 1, TILE_W // T1), ct.reshape(a1h, (1, 1, T1)))
        if T2 > 0:
            ct.store(dw_partial, (b, 0, (TILE_W + T1) // T2), ct.reshape(a2l, (1, 1, T2)))
            ct.store(dw_partial, (b, 1, (TILE_W + T1) // T2), ct.reshape(a2h, (1, 1, T2)))
