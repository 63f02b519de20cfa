"""Scratch A/B kernels for the forward (issue #6 probes). Not part of the package."""
import cuda.tile as ct

from cutile_rms.rmsnorm.kernels import CAST_LLAMA, ZERO, _normalize, _weight_row


@ct.function
def _ld(x, i, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], LAT: ct.Constant[int]):
    if LAT == 0:
        return ct.load(x, (i, 0), (TILE_M, TILE_N), padding_mode=ZERO)
    else:
        return ct.load(x, (i, 0), (TILE_M, TILE_N), padding_mode=ZERO, latency=LAT)


@ct.function
def _row(xt, wp, y, rstd_out, i, n, eps, TILE_M: ct.Constant[int], STORE_NO_TMA: ct.Constant[bool]):
    xf = ct.astype(xt, ct.float32)
    rstd = ct.rsqrt(ct.sum(xf * xf, axis=1, keepdims=True) / n + eps)
    yt = ct.astype(_normalize(xt, rstd, wp, CAST_LLAMA, True), y.dtype)
    if STORE_NO_TMA:
        ct.store(y, (i, 0), yt, allow_tma=False)
    else:
        ct.store(y, (i, 0), yt)
    ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))


@ct.kernel
def fwd_probe(x, w, y, rstd_out, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
              UNROLL: ct.Constant[int], STORE_NO_TMA: ct.Constant[bool], LAT: ct.Constant[int]):
    """UNROLL=2 needs the row tiles to divide into 2 x grid (probe only)."""
    n = x.shape[1]
    num_tiles = ct.cdiv(x.shape[0], TILE_M)
    nb = ct.num_blocks(0)
    wp = _weight_row(w, 0, 0.0, TILE_N, True)
    for i in range(ct.bid(0), num_tiles, nb * UNROLL):
        if UNROLL == 2:
            xa = _ld(x, i, TILE_M, TILE_N, LAT)
            xb = _ld(x, i + nb, TILE_M, TILE_N, LAT)
            _row(xa, wp, y, rstd_out, i, n, eps, TILE_M, STORE_NO_TMA)
            _row(xb, wp, y, rstd_out, i + nb, n, eps, TILE_M, STORE_NO_TMA)
        else:
            xa = _ld(x, i, TILE_M, TILE_N, LAT)
            _row(xa, wp, y, rstd_out, i, n, eps, TILE_M, STORE_NO_TMA)


@ct.kernel
def copy_prefetch_min(x, y, TILE_N: ct.Constant[int]):
    """Reproducer: loop-carried prefetch with the builtin min clamp."""
    t = x.shape[0]
    nb = ct.num_blocks(0)
    nxt = ct.load(x, (ct.bid(0), 0), (1, TILE_N), padding_mode=ZERO)
    for i in range(ct.bid(0), t, nb):
        cur = nxt
        nxt = ct.load(x, (min(i + nb, t - 1), 0), (1, TILE_N), padding_mode=ZERO)
        ct.store(y, (i, 0), cur)


@ct.kernel
def copy_prefetch_divisible(x, y, TILE_N: ct.Constant[int]):
    """Reproducer without the clamp: the caller makes rows a multiple of the grid and pads x by
    one grid of rows, so the prefetch after the last tile stays in bounds."""
    t = y.shape[0]
    nb = ct.num_blocks(0)
    nxt = ct.load(x, (ct.bid(0), 0), (1, TILE_N), padding_mode=ZERO)
    for i in range(ct.bid(0), t, nb):
        cur = nxt
        nxt = ct.load(x, (i + nb, 0), (1, TILE_N), padding_mode=ZERO)
        ct.store(y, (i, 0), cur)


@ct.kernel
def copy_min_index(x, y, TILE_N: ct.Constant[int]):
    """Reproducer: no loop carry, just the min clamp on the load index (y[i] = x[min(i+1, t-1)])."""
    t = x.shape[0]
    for i in range(ct.bid(0), t, ct.num_blocks(0)):
        ct.store(y, (i, 0), ct.load(x, (min(i + 1, t - 1), 0), (1, TILE_N), padding_mode=ZERO))


@ct.function
def _ldn(x, i, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], LAT: ct.Constant[int]):
    return _ld(x, i, TILE_M, TILE_N, LAT)


@ct.kernel
def fwd_probe2(x, w, y, rstd_out, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
               STORE_TMA: ct.Constant[int], LAT: ct.Constant[int], RSTD_NO_TMA: ct.Constant[bool]):
    """STORE_TMA: 0 default, 1 allow_tma=False, 2 allow_tma=True; LAT 0 = no hint."""
    n = x.shape[1]
    num_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, 0, 0.0, TILE_N, True)
    for i in range(ct.bid(0), num_tiles, ct.num_blocks(0)):
        xt = _ld(x, i, TILE_M, TILE_N, LAT)
        xf = ct.astype(xt, ct.float32)
        rstd = ct.rsqrt(ct.sum(xf * xf, axis=1, keepdims=True) / n + eps)
        yt = ct.astype(_normalize(xt, rstd, wp, CAST_LLAMA, True), y.dtype)
        if STORE_TMA == 1:
            ct.store(y, (i, 0), yt, allow_tma=False)
        elif STORE_TMA == 2:
            ct.store(y, (i, 0), yt, allow_tma=True)
        else:
            ct.store(y, (i, 0), yt)
        if RSTD_NO_TMA:
            ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)), allow_tma=False)
        else:
            ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))


@ct.kernel
def bwd_probe(x, dy, w, rstd_in, dx, dw_partial, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
              STORE_TMA: ct.Constant[int], LAT: ct.Constant[int]):
    """The tile backward (llama rounding) with store / latency options."""
    n = x.shape[1]
    num_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, 0, 0.0, TILE_N, True)
    dw_acc = ct.zeros((1, TILE_N), dtype=ct.float32)
    for i in range(ct.bid(0), num_tiles, ct.num_blocks(0)):
        xf = ct.astype(_ld(x, i, TILE_M, TILE_N, LAT), ct.float32)
        dyf = ct.astype(_ld(dy, i, TILE_M, TILE_N, LAT), ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xhat = xf * rstd
        wdy = dyf * wp
        c = ct.sum(wdy * xhat, axis=1, keepdims=True) / n
        dxt = ct.astype((wdy - xhat * c) * rstd, dx.dtype)
        if STORE_TMA == 1:
            ct.store(dx, (i, 0), dxt, allow_tma=False)
        elif STORE_TMA == 2:
            ct.store(dx, (i, 0), dxt, allow_tma=True)
        else:
            ct.store(dx, (i, 0), dxt)
        dw_acc += ct.sum(dyf * ct.astype(ct.astype(xhat, x.dtype), ct.float32), axis=0, keepdims=True)
    ct.store(dw_partial, (ct.bid(0), 0), dw_acc)


@ct.kernel
def fwd_probe_decode(x, w, y, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
                     LOAD_TMA: ct.Constant[bool], STORE_TMA: ct.Constant[bool], W_FIRST: ct.Constant[bool]):
    """Inference forward (no rstd) with TMA-free loads as an option (decode probe)."""
    n = x.shape[1]
    num_tiles = ct.cdiv(x.shape[0], TILE_M)
    for i in range(ct.bid(0), num_tiles, ct.num_blocks(0)):
        if LOAD_TMA:
            xt = ct.load(x, (i, 0), (TILE_M, TILE_N), padding_mode=ZERO)
            wt = ct.load(w, (0,), (TILE_N,), padding_mode=ZERO)
        else:
            xt = ct.load(x, (i, 0), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=False)
            wt = ct.load(w, (0,), (TILE_N,), padding_mode=ZERO, allow_tma=False)
        wp = ct.reshape(ct.astype(wt, ct.float32), (1, TILE_N))
        xf = ct.astype(xt, ct.float32)
        rstd = ct.rsqrt(ct.sum(xf * xf, axis=1, keepdims=True) / n + eps)
        yt = ct.astype(_normalize(xt, rstd, wp, CAST_LLAMA, True), y.dtype)
        if STORE_TMA:
            ct.store(y, (i, 0), yt)
        else:
            ct.store(y, (i, 0), yt, allow_tma=False)
