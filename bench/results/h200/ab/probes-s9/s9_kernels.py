"""Session-9 decode probe kernels: one block per TILE_M rows (no loop), inference forward (llama
casting), with loads/stores through TMA or plain, on the element type or on int32 words of
16-bit pairs (packed)."""
import cuda.tile as ct
from cutile_rms.rmsnorm.kernels import ZERO, _unpack, _pack


@ct.function
def _ld(a, idx, shape, TMA: ct.Constant[bool]):
    if TMA:
        return ct.load(a, idx, shape, padding_mode=ZERO)
    else:
        return ct.load(a, idx, shape, padding_mode=ZERO, allow_tma=False)


@ct.function
def _st(a, idx, t, TMA: ct.Constant[bool]):
    if TMA:
        ct.store(a, idx, t)
    else:
        ct.store(a, idx, t, allow_tma=False)


@ct.kernel
def empty_k(y):
    ct.store(y, (0,), ct.full((1,), 1.0, dtype=y.dtype), allow_tma=False)


@ct.kernel
def copy_k(x, y, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], LTMA: ct.Constant[bool],
           STMA: ct.Constant[bool]):
    i = ct.bid(0)
    _st(y, (i, 0), _ld(x, (i, 0), (TILE_M, TILE_N), LTMA), STMA)


@ct.kernel
def dec_fwd(x, w, y, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], LTMA: ct.Constant[bool],
            WTMA: ct.Constant[bool], STMA: ct.Constant[bool]):
    i = ct.bid(0)
    xt = _ld(x, (i, 0), (TILE_M, TILE_N), LTMA)
    wp = ct.reshape(ct.astype(_ld(w, (0,), (TILE_N,), WTMA), ct.float32), (1, TILE_N))
    xf = ct.astype(xt, ct.float32)
    rstd = ct.rsqrt(ct.sum(xf * xf, axis=1, keepdims=True) / x.shape[1] + eps)
    xhat = ct.astype(ct.astype(xf * rstd, x.dtype), ct.float32)
    _st(y, (i, 0), ct.astype(xhat * wp, y.dtype), STMA)


@ct.kernel
def dec_fwd_packed(x, w, y, eps, n, TILE_M: ct.Constant[int], TILE_W: ct.Constant[int], HALF: ct.Constant[int],
                   LTMA: ct.Constant[bool], WTMA: ct.Constant[bool], STMA: ct.Constant[bool]):
    """x, w, y are int32 views of 16-bit arrays (two elements per word)."""
    i = ct.bid(0)
    lo, hi = _unpack(_ld(x, (i, 0), (TILE_M, TILE_W), LTMA), HALF)
    w_lo, w_hi = _unpack(ct.reshape(_ld(w, (0,), (TILE_W,), WTMA), (1, TILE_W)), HALF)
    ss = ct.sum(lo * lo, axis=1, keepdims=True) + ct.sum(hi * hi, axis=1, keepdims=True)
    rstd = ct.rsqrt(ss / n + eps)
    dt = ct.bfloat16 if HALF == 0 else ct.float16
    y_lo = ct.astype(ct.astype(lo * rstd, dt), ct.float32) * w_lo
    y_hi = ct.astype(ct.astype(hi * rstd, dt), ct.float32) * w_hi
    _st(y, (i, 0), _pack(y_lo, y_hi, HALF), STMA)


@ct.kernel
def dec_parts(x, w, y, r, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], PART: ct.Constant[int],
              LTMA: ct.Constant[bool], WTMA: ct.Constant[bool], WLAT: ct.Constant[int]):
    """PART 0: sum of squares only (rstd stored to r); 1: y = xhat, no weight; 2: the full
    forward; 3: 2 with a latency hint WLAT on the weight load; 4: 2 with the weight made an
    input of the reduction (sum + sum(0 * w)), so its load cannot sink below it."""
    i = ct.bid(0)
    xt = _ld(x, (i, 0), (TILE_M, TILE_N), LTMA)
    if PART == 3:
        wt = ct.load(w, (0,), (TILE_N,), padding_mode=ZERO, allow_tma=WTMA, latency=WLAT)
    else:
        wt = _ld(w, (0,), (TILE_N,), WTMA)
    wp = ct.reshape(ct.astype(wt, ct.float32), (1, TILE_N))
    xf = ct.astype(xt, ct.float32)
    if PART == 4:
        ss = ct.sum(xf * xf + wp * 0.0, axis=1, keepdims=True)
    else:
        ss = ct.sum(xf * xf, axis=1, keepdims=True)
    rstd = ct.rsqrt(ss / x.shape[1] + eps)
    if PART == 0:
        ct.store(r, (i,), ct.reshape(rstd, (TILE_M,)), allow_tma=False)
    elif PART == 1:
        _st(y, (i, 0), ct.astype(xf * rstd, y.dtype), False)
    else:
        xhat = ct.astype(ct.astype(xf * rstd, x.dtype), ct.float32)
        _st(y, (i, 0), ct.astype(xhat * wp, y.dtype), False)


@ct.function
def _ldu(a, idx, shape, TMA: ct.Constant[bool]):
    if TMA:
        return ct.load(a, idx, shape, check_bounds=False)
    else:
        return ct.load(a, idx, shape, check_bounds=False, allow_tma=False)


@ct.kernel
def dec_nb(x, w, y, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], LTMA: ct.Constant[bool],
           WTMA: ct.Constant[bool], EARLY_W: ct.Constant[bool]):
    """dec_fwd without bounds checks (N == TILE_N, TILE_M divides M); EARLY_W: the weight feeds
    the reduction (0 * w), so its load is issued before it."""
    i = ct.bid(0)
    xt = _ldu(x, (i, 0), (TILE_M, TILE_N), LTMA)
    wp = ct.reshape(ct.astype(_ldu(w, (0,), (TILE_N,), WTMA), ct.float32), (1, TILE_N))
    xf = ct.astype(xt, ct.float32)
    if EARLY_W:
        ss = ct.sum(xf * xf + ct.minimum(ct.abs(wp), 0.0), axis=1, keepdims=True)
    else:
        ss = ct.sum(xf * xf, axis=1, keepdims=True)
    rstd = ct.rsqrt(ss / TILE_N + eps)
    xhat = ct.astype(ct.astype(xf * rstd, x.dtype), ct.float32)
    ct.store(y, (i, 0), ct.astype(xhat * wp, y.dtype), check_bounds=False, allow_tma=False)


@ct.kernel
def dec_nb_packed(x, w, y, eps, n, TILE_M: ct.Constant[int], TILE_W: ct.Constant[int], HALF: ct.Constant[int],
                  LTMA: ct.Constant[bool], WTMA: ct.Constant[bool], EARLY_W: ct.Constant[bool]):
    i = ct.bid(0)
    lo, hi = _unpack(_ldu(x, (i, 0), (TILE_M, TILE_W), LTMA), HALF)
    w_lo, w_hi = _unpack(ct.reshape(_ldu(w, (0,), (TILE_W,), WTMA), (1, TILE_W)), HALF)
    if EARLY_W:
        ss = ct.sum(lo * lo + hi * hi + ct.minimum(ct.abs(w_lo), 0.0), axis=1, keepdims=True)
    else:
        ss = ct.sum(lo * lo + hi * hi, axis=1, keepdims=True)
    rstd = ct.rsqrt(ss / n + eps)
    dt = ct.bfloat16 if HALF == 0 else ct.float16
    y_lo = ct.astype(ct.astype(lo * rstd, dt), ct.float32) * w_lo
    y_hi = ct.astype(ct.astype(hi * rstd, dt), ct.float32) * w_hi
    ct.store(y, (i, 0), _pack(y_lo, y_hi, HALF), check_bounds=False, allow_tma=False)
