import cuda.tile as ct
from cutile_rms.rmsnorm.kernels import ZERO, _load_tile, _store_tile


@ct.kernel
def bwd_tile_r3(x, dy, w, rstd_in, dx, dw_partial, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
                TMA_STORE: ct.Constant[bool], V: ct.Constant[int]):
    """Loads (TILE_M, TILE_N) tiles and reshapes them to (TILE_M, TILE_N // V, V)."""
    n = x.shape[1]
    H = TILE_N // V
    nrt = ct.cdiv(x.shape[0], TILE_M)
    wp = ct.reshape(ct.astype(ct.load(w, (0,), (TILE_N,), padding_mode=ZERO), ct.float32), (1, H, V))
    acc = ct.zeros((1, H, V), dtype=ct.float32)
    for i in range(ct.bid(0), nrt, ct.num_blocks(0)):
        xf = ct.astype(ct.reshape(_load_tile(x, i, 0, TILE_M, TILE_N, 0), (TILE_M, H, V)), ct.float32)
        dyf = ct.astype(ct.reshape(_load_tile(dy, i, 0, TILE_M, TILE_N, 0), (TILE_M, H, V)), ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1, 1))
        xhat = xf * rstd
        wdy = dyf * wp
        c = ct.sum(ct.sum(wdy * xhat, axis=2, keepdims=True), axis=1, keepdims=True) / n
        dxt = ct.reshape(ct.astype((wdy - xhat * c) * rstd, dx.dtype), (TILE_M, TILE_N))
        _store_tile(dx, i, 0, dxt, TMA_STORE, True)
        acc += ct.sum(dyf * ct.astype(ct.astype(xhat, x.dtype), ct.float32), axis=0, keepdims=True)
    ct.store(dw_partial, (ct.bid(0), 0), ct.reshape(acc, (1, TILE_N)))


@ct.kernel
def fwd_tile_r3(x, w, y, rstd_out, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
                TMA_STORE: ct.Constant[bool], V: ct.Constant[int]):
    """Llama forward on (TILE_M, TILE_N // V, V) reshaped tiles."""
    n = x.shape[1]
    H = TILE_N // V
    nrt = ct.cdiv(x.shape[0], TILE_M)
    wp = ct.reshape(ct.astype(ct.load(w, (0,), (TILE_N,), padding_mode=ZERO), ct.float32), (1, H, V))
    for i in range(ct.bid(0), nrt, ct.num_blocks(0)):
        xt = ct.reshape(_load_tile(x, i, 0, TILE_M, TILE_N, 0), (TILE_M, H, V))
        xf = ct.astype(xt, ct.float32)
        ss = ct.sum(ct.sum(xf * xf, axis=2, keepdims=True), axis=1, keepdims=True)
        rstd = ct.rsqrt(ss / n + eps)
        yt = ct.astype(ct.astype(ct.astype(xf * rstd, x.dtype), ct.float32) * wp, y.dtype)
        _store_tile(y, i, 0, ct.reshape(yt, (TILE_M, TILE_N)), TMA_STORE, True)
        ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))
