"""The "packed" backward: the tile backward on int32 views of 16-bit arrays (two elements per
word), and its dW reduction."""

import cuda.tile as ct

from cutile_rms._tile import tile_function, tile_kernel
from cutile_rms.rmsnorm.kernels.common import ZERO, _dw_rows, _load_tile, _store_tile

# Packed 16-bit backward (kernel "packed"). x, dy, dx and the weight arrive as int32 views: a
# word holds elements 2k (low half) and 2k + 1 (high half) of a row. tileiras 13.4 moves a
# bf16 tile between shared memory and registers one 16-bit element per instruction; as words
# it moves two, and the H200 backward at N = 5120-8192 went from 58-78% to 69-88% of the copy
# ceiling (bench/NOTES.md, session 6). The even and odd columns are two (TILE_M, TILE_W) fp32
# tiles; nothing else changes. HALF names the 16-bit type of the words.
HALF_BF16 = 0
HALF_FP16 = 1
_HIGH_HALF = -65536  # 0xFFFF0000 as an int32


@tile_function
def _half_dtype(HALF: ct.Constant[int]):
    if HALF == HALF_BF16:
        return ct.bfloat16
    else:
        return ct.float16


@tile_function
def _unpack(t, HALF: ct.Constant[int]):
    """(even, odd) fp32 tiles of an int32 tile of 16-bit pairs. bf16 widens by a shift (its
    bits are an fp32's upper half); fp16 goes through int16 (arithmetic shifts keep each half's
    value in int16 range, so the narrowing is exact)."""
    if HALF == HALF_BF16:
        return ct.bitcast(t << 16, ct.float32), ct.bitcast(t & _HIGH_HALF, ct.float32)
    else:
        lo = ct.bitcast(ct.astype((t << 16) >> 16, ct.int16), ct.float16)
        hi = ct.bitcast(ct.astype(t >> 16, ct.int16), ct.float16)
        return ct.astype(lo, ct.float32), ct.astype(hi, ct.float32)


@tile_function
def _pack(lo, hi, HALF: ct.Constant[int]):
    """int32 words of (lo, hi) fp32 tiles, each rounded to the 16-bit type (round to nearest
    even, by astype)."""
    lo16 = ct.astype(ct.bitcast(ct.astype(lo, _half_dtype(HALF)), ct.int16), ct.int32)
    hi16 = ct.astype(ct.bitcast(ct.astype(hi, _half_dtype(HALF)), ct.int16), ct.int32)
    return (lo16 & 65535) | (hi16 << 16)


@tile_function
def _weight_pair(w, j, offset, TILE_W: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool], HALF: ct.Constant[int]):
    """(even, odd) (1, TILE_W) fp32 tiles of offset + w for word tile j (1 without a weight)."""
    if HAS_WEIGHT:
        lo, hi = _unpack(ct.reshape(ct.load(w, (j,), (TILE_W,), padding_mode=ZERO), (1, TILE_W)), HALF)
        return lo + offset, hi + offset
    else:
        one = ct.full((1, TILE_W), 1.0, dtype=ct.float32)
        return one, one


@tile_function
def _packed_terms(x, dy, i, j, rstd, w_lo, w_hi, TILE_M: ct.Constant[int], TILE_W: ct.Constant[int],
                  HALF: ct.Constant[int], LATENCY: ct.Constant[int]):  # fmt: skip
    """Word tile (i, j) of a row tile: (dy, xhat, wdy) as (even, odd) fp32 pairs, and its share
    of sum(wdy * xhat) per row."""
    x_lo, x_hi = _unpack(_load_tile(x, i, j, TILE_M, TILE_W, LATENCY), HALF)
    dy_lo, dy_hi = _unpack(_load_tile(dy, i, j, TILE_M, TILE_W, LATENCY), HALF)
    xhat_lo = x_lo * rstd
    xhat_hi = x_hi * rstd
    wdy_lo = dy_lo * w_lo
    wdy_hi = dy_hi * w_hi
    part = ct.sum(wdy_lo * xhat_lo, axis=1, keepdims=True) + ct.sum(wdy_hi * xhat_hi, axis=1, keepdims=True)
    return dy_lo, dy_hi, xhat_lo, xhat_hi, wdy_lo, wdy_hi, part


@tile_function
def _packed_dx(
    dx, i, j, xhat_lo, xhat_hi, wdy_lo, wdy_hi, c, rstd, HALF: ct.Constant[int], TMA_STORE: ct.Constant[bool]
):
    """Stores word tile (i, j) of dx = rstd * (wdy - xhat * c)."""
    _store_tile(dx, i, j, _pack((wdy_lo - xhat_lo * c) * rstd, (wdy_hi - xhat_hi * c) * rstd, HALF), TMA_STORE, True)


@tile_function
def _store_dw_pair(dw_partial, j, dw_lo, dw_hi, TILE_W: ct.Constant[int]):
    """This block's (even, odd) dW sums of word tile j, to dw_partial[bid, 0 / 1, tile j]."""
    ct.store(dw_partial, (ct.bid(0), 0, j), ct.reshape(dw_lo, (1, 1, TILE_W)))
    ct.store(dw_partial, (ct.bid(0), 1, j), ct.reshape(dw_hi, (1, 1, TILE_W)))


@tile_kernel
def rms_bwd_packed(
    x,
    dy,
    w,
    rstd_in,
    dx,
    dw_partial,
    offset,
    TILE_M: ct.Constant[int],
    TILE_W: ct.Constant[int],
    TAIL_W: ct.Constant[int],
    HALF: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    ROUND_XHAT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """_bwd_tile_rows on packed 16-bit words: x, dy, dx are (m, n/2) int32 views, w an (n/2,)
    one; a row fits one (TILE_M, TILE_W) word tile, or, with TAIL_W > 0, a TILE_W-wide and a
    TAIL_W-wide one (n/2 = TILE_W + TAIL_W; module docstring). dW partials: dw_partial is (grid,
    2, n/2) fp32, [b, 0] the even columns' sums and [b, 1] the odd ones' (dw_reduce_packed
    interleaves them)."""
    n = x.shape[1] * 2
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    hd = _half_dtype(HALF)
    w_lo, w_hi = _weight_pair(w, 0, offset, TILE_W, HAS_WEIGHT, HALF)
    dw_lo = ct.zeros((1, TILE_W), dtype=ct.float32)
    dw_hi = ct.zeros((1, TILE_W), dtype=ct.float32)
    if TAIL_W > 0:
        jt = TILE_W // TAIL_W  # the tail's tile index
        v_lo, v_hi = _weight_pair(w, jt, offset, TAIL_W, HAS_WEIGHT, HALF)
        dv_lo = ct.zeros((1, TAIL_W), dtype=ct.float32)
        dv_hi = ct.zeros((1, TAIL_W), dtype=ct.float32)
    for i in range(ct.bid(0), num_row_tiles, ct.num_blocks(0)):
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        dy_lo, dy_hi, xhat_lo, xhat_hi, wdy_lo, wdy_hi, c = _packed_terms(x, dy, i, 0, rstd, w_lo, w_hi, TILE_M, TILE_W,
                                                                          HALF, LATENCY)  # fmt: skip
        if TAIL_W > 0:
            du_lo, du_hi, uhat_lo, uhat_hi, vdu_lo, vdu_hi, cu = _packed_terms(x, dy, i, jt, rstd, v_lo, v_hi, TILE_M,
                                                                               TAIL_W, HALF, LATENCY)  # fmt: skip
            c = c + cu
        c = c / n
        _packed_dx(dx, i, 0, xhat_lo, xhat_hi, wdy_lo, wdy_hi, c, rstd, HALF, TMA_STORE)
        if HAS_WEIGHT:
            dw_lo += _dw_rows(dy_lo, xhat_lo, hd, ROUND_XHAT)
            dw_hi += _dw_rows(dy_hi, xhat_hi, hd, ROUND_XHAT)
        if TAIL_W > 0:
            _packed_dx(dx, i, jt, uhat_lo, uhat_hi, vdu_lo, vdu_hi, c, rstd, HALF, TMA_STORE)
            if HAS_WEIGHT:
                dv_lo += _dw_rows(du_lo, uhat_lo, hd, ROUND_XHAT)
                dv_hi += _dw_rows(du_hi, uhat_hi, hd, ROUND_XHAT)
    if HAS_WEIGHT:
        _store_dw_pair(dw_partial, 0, dw_lo, dw_hi, TILE_W)
        if TAIL_W > 0:
            _store_dw_pair(dw_partial, jt, dv_lo, dv_hi, TAIL_W)


@tile_kernel
def dw_reduce_packed(dw_partial, dw, TILE_G: ct.Constant[int], TILE_W: ct.Constant[int], HALF: ct.Constant[int]):
    """dw = the sum over g of dw_partial[g] ((G, 2, n/2) fp32, even and odd columns apart), in
    a fixed order, stored to dw as packed words ((n/2,) int32 view of a 16-bit dW)."""
    num_g_tiles = ct.cdiv(dw_partial.shape[0], TILE_G)
    num_chunks = ct.cdiv(dw_partial.shape[2], TILE_W)
    for j in range(ct.bid(0), num_chunks, ct.num_blocks(0)):
        lo = ct.zeros((1, 1, TILE_W), dtype=ct.float32)
        hi = ct.zeros((1, 1, TILE_W), dtype=ct.float32)
        for g in range(num_g_tiles):
            lo += ct.sum(ct.load(dw_partial, (g, 0, j), (TILE_G, 1, TILE_W), padding_mode=ZERO), axis=0, keepdims=True)
            hi += ct.sum(ct.load(dw_partial, (g, 1, j), (TILE_G, 1, TILE_W), padding_mode=ZERO), axis=0, keepdims=True)
        ct.store(dw, (j,), _pack(ct.reshape(lo, (TILE_W,)), ct.reshape(hi, (TILE_W,)), HALF))
