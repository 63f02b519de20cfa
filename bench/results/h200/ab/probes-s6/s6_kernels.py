"""Session-6 probe kernels (issue #6): software prefetch of the next row tile in the
persistent tile and split kernels. The tiles carried across iterations are the fp32
conversions of the loads (register values), not the loaded tiles themselves: session 3's
prefetch carried the loaded tiles and came out wrong on the GPU (other rows' values)."""
import cuda.tile as ct
from cutile_rms.rmsnorm.kernels import (
    ZERO, _dw_rows, _load_tile, _normalize, _publish, _split_total, _store_tile, _weight_row,
)


@ct.kernel
def bwd_tile_pf(x, dy, w, rstd_in, dx, dw_partial, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
                ROUND_XHAT: ct.Constant[bool], TMA_STORE: ct.Constant[bool], CARRY_F32: ct.Constant[bool]):
    """Tile backward with the next row tile's x, dy loaded before this tile's math
    (grid <= row tiles)."""
    n = x.shape[1]
    nrt = ct.cdiv(x.shape[0], TILE_M)
    nb = ct.num_blocks(0)
    wp = _weight_row(w, 0, 0.0, TILE_N, True)
    dw_acc = ct.zeros((1, TILE_N), dtype=ct.float32)
    i0 = ct.bid(0)
    if CARRY_F32:
        xc = ct.astype(_load_tile(x, i0, 0, TILE_M, TILE_N, 0), ct.float32)
        dyc = ct.astype(_load_tile(dy, i0, 0, TILE_M, TILE_N, 0), ct.float32)
    else:
        xc = _load_tile(x, i0, 0, TILE_M, TILE_N, 0)
        dyc = _load_tile(dy, i0, 0, TILE_M, TILE_N, 0)
    for i in range(i0, nrt, nb):
        nxt = min(i + nb, nrt - 1)
        if CARRY_F32:
            xn = ct.astype(_load_tile(x, nxt, 0, TILE_M, TILE_N, 0), ct.float32)
            dyn = ct.astype(_load_tile(dy, nxt, 0, TILE_M, TILE_N, 0), ct.float32)
        else:
            xn = _load_tile(x, nxt, 0, TILE_M, TILE_N, 0)
            dyn = _load_tile(dy, nxt, 0, TILE_M, TILE_N, 0)
        xf = ct.astype(xc, ct.float32)
        dyf = ct.astype(dyc, ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xhat = xf * rstd
        wdy = dyf * wp
        c = ct.sum(wdy * xhat, axis=1, keepdims=True) / n
        _store_tile(dx, i, 0, ct.astype((wdy - xhat * c) * rstd, dx.dtype), TMA_STORE, True)
        dw_acc += _dw_rows(dyf, xhat, x.dtype, ROUND_XHAT)
        xc = xn
        dyc = dyn
    ct.store(dw_partial, (ct.bid(0), 0), dw_acc)


@ct.kernel
def fwd_tile_pf(x, w, y, rstd_out, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
                CASTING: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    """Tile forward with the next row tile loaded (and converted) before this tile's math."""
    n = x.shape[1]
    nrt = ct.cdiv(x.shape[0], TILE_M)
    nb = ct.num_blocks(0)
    wp = _weight_row(w, 0, 0.0, TILE_N, True)
    i0 = ct.bid(0)
    xc = _load_tile(x, i0, 0, TILE_M, TILE_N, 0)
    xcf = ct.astype(xc, ct.float32)
    for i in range(i0, nrt, nb):
        nxt = min(i + nb, nrt - 1)
        xnf = ct.astype(_load_tile(x, nxt, 0, TILE_M, TILE_N, 0), ct.float32)
        rstd = ct.rsqrt(ct.sum(xcf * xcf, axis=1, keepdims=True) / n + eps)
        xt = ct.astype(xcf, x.dtype)
        _store_tile(y, i, 0, ct.astype(_normalize(xt, rstd, wp, CASTING, True), y.dtype), TMA_STORE, True)
        ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))
        xcf = xnf


@ct.kernel
def bwd_split_pf(x, dy, w, rstd_in, dx, dw_partial, slots, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
                 SPLIT: ct.Constant[int], SLOTS_W: ct.Constant[int], ROUND_XHAT: ct.Constant[bool],
                 TMA_STORE: ct.Constant[bool]):
    """Split backward with the next row tile's segment loaded before this tile's math."""
    n = x.shape[1]
    s = ct.bid(0) % SPLIT
    g = ct.bid(0) // SPLIT
    G = ct.num_blocks(0) // SPLIT
    nrt = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, s, 0.0, TILE_N, True)
    dw_acc = ct.zeros((1, TILE_N), dtype=ct.float32)
    xc = ct.astype(_load_tile(x, g, s, TILE_M, TILE_N, 0), ct.float32)
    dyc = ct.astype(_load_tile(dy, g, s, TILE_M, TILE_N, 0), ct.float32)
    for i in range(g, nrt, G):
        nxt = min(i + G, nrt - 1)
        xn = ct.astype(_load_tile(x, nxt, s, TILE_M, TILE_N, 0), ct.float32)
        dyn = ct.astype(_load_tile(dy, nxt, s, TILE_M, TILE_N, 0), ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xhat = xc * rstd
        wdy = dyc * wp
        _publish(slots, i, s, ct.sum(wdy * xhat, axis=1, keepdims=True), TILE_M)
        dw_acc += _dw_rows(dyc, xhat, x.dtype, ROUND_XHAT)
        c = _split_total(slots, i, SPLIT, SLOTS_W, TILE_M) / n
        _store_tile(dx, i, s, ct.astype((wdy - xhat * c) * rstd, dx.dtype), TMA_STORE, True)
        xc = xn
        dyc = dyn
    ct.store(dw_partial, (g, s), dw_acc)


@ct.kernel
def fwd_split_pf(x, w, y, rstd_out, slots, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
                 SPLIT: ct.Constant[int], SLOTS_W: ct.Constant[int], CASTING: ct.Constant[int],
                 TMA_STORE: ct.Constant[bool]):
    """Split forward with the next row tile's segment loaded before this tile's exchange."""
    n = x.shape[1]
    s = ct.bid(0) % SPLIT
    g = ct.bid(0) // SPLIT
    G = ct.num_blocks(0) // SPLIT
    nrt = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, s, 0.0, TILE_N, True)
    xcf = ct.astype(_load_tile(x, g, s, TILE_M, TILE_N, 0), ct.float32)
    for i in range(g, nrt, G):
        nxt = min(i + G, nrt - 1)
        xnf = ct.astype(_load_tile(x, nxt, s, TILE_M, TILE_N, 0), ct.float32)
        _publish(slots, i, s, ct.sum(xcf * xcf, axis=1, keepdims=True), TILE_M)
        rstd = ct.rsqrt(_split_total(slots, i, SPLIT, SLOTS_W, TILE_M) / n + eps)
        xt = ct.astype(xcf, x.dtype)
        _store_tile(y, i, s, ct.astype(_normalize(xt, rstd, wp, CASTING, True), y.dtype), TMA_STORE, True)
        if s == 0:
            ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))
        xcf = xnf


# ---- packed bf16: the arrays are passed as int32 views (two bf16 per word, element 2k in the
# low half); loads and stores move words, unpacking is a shift / a mask. ----
HI_MASK = -65536  # 0xFFFF0000 as int32


@ct.function
def _lo(t):
    return ct.bitcast(t << 16, ct.float32)


@ct.function
def _hi(t):
    return ct.bitcast(t & HI_MASK, ct.float32)


@ct.function
def _pack(lo, hi):
    lb = ct.astype(ct.bitcast(ct.astype(lo, ct.bfloat16), ct.int16), ct.int32) & 65535
    hb = ct.astype(ct.bitcast(ct.astype(hi, ct.bfloat16), ct.int16), ct.int32) << 16
    return lb | hb


@ct.function
def _round_bf16(t):
    return ct.astype(ct.astype(t, ct.bfloat16), ct.float32)


@ct.kernel
def bwd_tile_packed(x, dy, w, rstd_in, dx, dw_partial, TILE_M: ct.Constant[int], TILE_W: ct.Constant[int],
                    TMA_STORE: ct.Constant[bool]):
    """Llama bf16 backward on int32 views (x, dy, dx: (M, N/2); w: (N/2,)); dw_partial: (grid,
    2, N/2) fp32, [g, 0] the even columns, [g, 1] the odd ones."""
    n = x.shape[1] * 2
    nrt = ct.cdiv(x.shape[0], TILE_M)
    wt = ct.reshape(ct.load(w, (0,), (TILE_W,), padding_mode=ZERO), (1, TILE_W))
    w_lo = _lo(wt)
    w_hi = _hi(wt)
    acc_lo = ct.zeros((1, TILE_W), dtype=ct.float32)
    acc_hi = ct.zeros((1, TILE_W), dtype=ct.float32)
    for i in range(ct.bid(0), nrt, ct.num_blocks(0)):
        xt = _load_tile(x, i, 0, TILE_M, TILE_W, 0)
        dyt = _load_tile(dy, i, 0, TILE_M, TILE_W, 0)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xh_lo = _lo(xt) * rstd
        xh_hi = _hi(xt) * rstd
        dy_lo = _lo(dyt)
        dy_hi = _hi(dyt)
        wdy_lo = dy_lo * w_lo
        wdy_hi = dy_hi * w_hi
        c = (ct.sum(wdy_lo * xh_lo, axis=1, keepdims=True) + ct.sum(wdy_hi * xh_hi, axis=1, keepdims=True)) / n
        _store_tile(dx, i, 0, _pack((wdy_lo - xh_lo * c) * rstd, (wdy_hi - xh_hi * c) * rstd), TMA_STORE, True)
        acc_lo += ct.sum(dy_lo * _round_bf16(xh_lo), axis=0, keepdims=True)
        acc_hi += ct.sum(dy_hi * _round_bf16(xh_hi), axis=0, keepdims=True)
    ct.store(dw_partial, (ct.bid(0), 0, 0), ct.reshape(acc_lo, (1, 1, TILE_W)))
    ct.store(dw_partial, (ct.bid(0), 1, 0), ct.reshape(acc_hi, (1, 1, TILE_W)))


@ct.kernel
def bwd_split_packed(x, dy, w, rstd_in, dx, dw_partial, slots, TILE_M: ct.Constant[int], TILE_W: ct.Constant[int],
                     SPLIT: ct.Constant[int], SLOTS_W: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    """Split-row version of bwd_tile_packed; dw_partial: (groups, 2, N/2)."""
    n = x.shape[1] * 2
    s = ct.bid(0) % SPLIT
    g = ct.bid(0) // SPLIT
    nrt = ct.cdiv(x.shape[0], TILE_M)
    wt = ct.reshape(ct.load(w, (s,), (TILE_W,), padding_mode=ZERO), (1, TILE_W))
    w_lo = _lo(wt)
    w_hi = _hi(wt)
    acc_lo = ct.zeros((1, TILE_W), dtype=ct.float32)
    acc_hi = ct.zeros((1, TILE_W), dtype=ct.float32)
    for i in range(g, nrt, ct.num_blocks(0) // SPLIT):
        xt = _load_tile(x, i, s, TILE_M, TILE_W, 0)
        dyt = _load_tile(dy, i, s, TILE_M, TILE_W, 0)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xh_lo = _lo(xt) * rstd
        xh_hi = _hi(xt) * rstd
        dy_lo = _lo(dyt)
        dy_hi = _hi(dyt)
        wdy_lo = dy_lo * w_lo
        wdy_hi = dy_hi * w_hi
        _publish(slots, i, s, ct.sum(wdy_lo * xh_lo, axis=1, keepdims=True)
                 + ct.sum(wdy_hi * xh_hi, axis=1, keepdims=True), TILE_M)
        acc_lo += ct.sum(dy_lo * _round_bf16(xh_lo), axis=0, keepdims=True)
        acc_hi += ct.sum(dy_hi * _round_bf16(xh_hi), axis=0, keepdims=True)
        c = _split_total(slots, i, SPLIT, SLOTS_W, TILE_M) / n
        _store_tile(dx, i, s, _pack((wdy_lo - xh_lo * c) * rstd, (wdy_hi - xh_hi * c) * rstd), TMA_STORE, True)
    ct.store(dw_partial, (g, 0, s), ct.reshape(acc_lo, (1, 1, TILE_W)))
    ct.store(dw_partial, (g, 1, s), ct.reshape(acc_hi, (1, 1, TILE_W)))


@ct.kernel
def fwd_tile_packed(x, w, y, rstd_out, eps, TILE_M: ct.Constant[int], TILE_W: ct.Constant[int],
                    TMA_STORE: ct.Constant[bool]):
    """Llama bf16 forward on int32 views."""
    n = x.shape[1] * 2
    nrt = ct.cdiv(x.shape[0], TILE_M)
    wt = ct.reshape(ct.load(w, (0,), (TILE_W,), padding_mode=ZERO), (1, TILE_W))
    w_lo = _lo(wt)
    w_hi = _hi(wt)
    for i in range(ct.bid(0), nrt, ct.num_blocks(0)):
        xt = _load_tile(x, i, 0, TILE_M, TILE_W, 0)
        x_lo = _lo(xt)
        x_hi = _hi(xt)
        ss = ct.sum(x_lo * x_lo, axis=1, keepdims=True) + ct.sum(x_hi * x_hi, axis=1, keepdims=True)
        rstd = ct.rsqrt(ss / n + eps)
        _store_tile(y, i, 0, _pack(_round_bf16(x_lo * rstd) * w_lo, _round_bf16(x_hi * rstd) * w_hi), TMA_STORE, True)
        ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))
