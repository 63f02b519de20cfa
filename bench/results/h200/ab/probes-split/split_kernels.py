"""Probe kernels: rows split across S cooperating blocks (issue #6). Each block holds one
SEG-wide column segment of TILE_M rows; the per-row partial sums are exchanged through global
memory (a plain store of the partial, a release increment of the row tile's counter, acquire
reads until S blocks have arrived), then summed in a fixed order by every partner."""
import cuda.tile as ct
from cutile_rms.rmsnorm.kernels import ZERO, _dw_rows, _normalize, _weight_row

REL = ct.MemoryOrder.RELEASE
ACQ = ct.MemoryOrder.ACQUIRE
ACQ_REL = ct.MemoryOrder.ACQ_REL
DEV = ct.MemoryScope.DEVICE


@ct.function
def _exchange(parts, counter, i, s, part, S: ct.Constant[int], TILE_M: ct.Constant[int]):
    ct.store(parts, (i, s), part, allow_tma=False)
    seen = ct.atomic_add(counter, i, 1, memory_order=ACQ_REL, memory_scope=DEV) + 1
    while seen < S:
        seen = ct.atomic_add(counter, i, 0, memory_order=ACQ, memory_scope=DEV)
    allp = ct.load(parts, (i, 0), (TILE_M, S), padding_mode=ZERO, allow_tma=False)
    return ct.sum(allp, axis=1, keepdims=True)


@ct.kernel
def fwd_split(x, w, y, rstd_out, parts, counter, eps, TILE_M: ct.Constant[int], SEG: ct.Constant[int],
              S: ct.Constant[int], CASTING: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    n = x.shape[1]
    s = ct.bid(0) % S
    g = ct.bid(0) // S
    G = ct.num_blocks(0) // S
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, s, 0.0, SEG, True)
    for i in range(g, num_row_tiles, G):
        xt = ct.load(x, (i, s), (TILE_M, SEG), padding_mode=ZERO)
        xf = ct.astype(xt, ct.float32)
        total = _exchange(parts, counter, i, s, ct.sum(xf * xf, axis=1, keepdims=True), S, TILE_M)
        rstd = ct.rsqrt(total / n + eps)
        yt = ct.astype(_normalize(xt, rstd, wp, CASTING, True), y.dtype)
        if TMA_STORE:
            ct.store(y, (i, s), yt)
        else:
            ct.store(y, (i, s), yt, allow_tma=False)
        if s == 0:
            ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))


@ct.kernel
def bwd_split(x, dy, w, rstd_in, dx, dw_partial, parts, counter, TILE_M: ct.Constant[int], SEG: ct.Constant[int],
              S: ct.Constant[int], ROUND_XHAT: ct.Constant[bool], TMA_STORE: ct.Constant[bool]):
    n = x.shape[1]
    s = ct.bid(0) % S
    g = ct.bid(0) // S
    G = ct.num_blocks(0) // S
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, s, 0.0, SEG, True)
    dw_acc = ct.zeros((1, SEG), dtype=ct.float32)
    for i in range(g, num_row_tiles, G):
        xf = ct.astype(ct.load(x, (i, s), (TILE_M, SEG), padding_mode=ZERO), ct.float32)
        dyf = ct.astype(ct.load(dy, (i, s), (TILE_M, SEG), padding_mode=ZERO), ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xhat = xf * rstd
        wdy = dyf * wp
        dw_acc += _dw_rows(dyf, xhat, x.dtype, ROUND_XHAT)
        c = _exchange(parts, counter, i, s, ct.sum(wdy * xhat, axis=1, keepdims=True), S, TILE_M) / n
        dxt = ct.astype((wdy - xhat * c) * rstd, dx.dtype)
        if TMA_STORE:
            ct.store(dx, (i, s), dxt)
        else:
            ct.store(dx, (i, s), dxt, allow_tma=False)
    ct.store(dw_partial, (g, s), dw_acc)
