"""Probe kernels v2: split rows without fences. Each partner publishes its per-row partial as
one int64 slot (1 << 32 | float bits) with a relaxed store; readers poll the row tile's S
slots with relaxed loads until all are set (slots start at 0). DEFER: a block publishes row
tile k and then finishes row tile k - G (whose partials are long published), so the wait
overlaps the next tile's load."""
import cuda.tile as ct
from cutile_rms.rmsnorm.kernels import ZERO, _dw_rows, _normalize, _weight_row

RLX = ct.MemoryOrder.RELAXED
DEV = ct.MemoryScope.DEVICE
FLAG = 4294967296
LOW = 4294967295


@ct.function
def _publish(slots, i, s, part, TILE_M: ct.Constant[int]):
    bits = ct.astype(ct.bitcast(part, ct.int32), ct.int64) & ct.full((TILE_M, 1), LOW, dtype=ct.int64)
    rows = ct.reshape(ct.arange(TILE_M, dtype=ct.int32) + i * TILE_M, (TILE_M, 1))
    ct.atomic_xchg(slots, (rows, s), bits | ct.full((TILE_M, 1), FLAG, dtype=ct.int64), memory_order=RLX,
                   memory_scope=DEV)


@ct.function
def _total(slots, i, S: ct.Constant[int], TILE_M: ct.Constant[int]):
    rows = ct.reshape(ct.arange(TILE_M, dtype=ct.int32) + i * TILE_M, (TILE_M, 1))
    cols = ct.reshape(ct.arange(S, dtype=ct.int32), (1, S))
    zero = ct.zeros((TILE_M, S), dtype=ct.int64)
    got = ct.atomic_add(slots, (rows, cols), zero, memory_order=RLX, memory_scope=DEV)
    while ct.min(got) < FLAG:
        got = ct.atomic_add(slots, (rows, cols), zero, memory_order=RLX, memory_scope=DEV)
    vals = ct.bitcast(ct.astype(got & ct.full((TILE_M, S), LOW, dtype=ct.int64), ct.int32), ct.float32)
    return ct.sum(vals, axis=1, keepdims=True)


@ct.function
def _fwd_finish(x_i, i, s, total, w_p, y, rstd_out, n, eps, TILE_M: ct.Constant[int], CASTING: ct.Constant[int]):
    rstd = ct.rsqrt(total / n + eps)
    ct.store(y, (i, s), ct.astype(_normalize(x_i, rstd, w_p, CASTING, True), y.dtype), allow_tma=False)
    if s == 0:
        ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))


@ct.kernel
def fwd_split2(x, w, y, rstd_out, slots, eps, TILE_M: ct.Constant[int], SEG: ct.Constant[int],
               S: ct.Constant[int], CASTING: ct.Constant[int], DEFER: ct.Constant[bool]):
    n = x.shape[1]
    s = ct.bid(0) % S
    g = ct.bid(0) // S
    G = ct.num_blocks(0) // S
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, s, 0.0, SEG, True)
    if DEFER:
        cur = ct.load(x, (g, s), (TILE_M, SEG), padding_mode=ZERO)
        cf = ct.astype(cur, ct.float32)
        _publish(slots, g, s, ct.sum(cf * cf, axis=1, keepdims=True), TILE_M)
        for i in range(g + G, num_row_tiles, G):
            nxt = ct.load(x, (i, s), (TILE_M, SEG), padding_mode=ZERO)
            nf = ct.astype(nxt, ct.float32)
            _publish(slots, i, s, ct.sum(nf * nf, axis=1, keepdims=True), TILE_M)
            _fwd_finish(cur, i - G, s, _total(slots, i - G, S, TILE_M), wp, y, rstd_out, n, eps, TILE_M, CASTING)
            cur = nxt
        last = g + ((num_row_tiles - 1 - g) // G) * G
        _fwd_finish(cur, last, s, _total(slots, last, S, TILE_M), wp, y, rstd_out, n, eps, TILE_M, CASTING)
    else:
        for i in range(g, num_row_tiles, G):
            xt = ct.load(x, (i, s), (TILE_M, SEG), padding_mode=ZERO)
            xf = ct.astype(xt, ct.float32)
            _publish(slots, i, s, ct.sum(xf * xf, axis=1, keepdims=True), TILE_M)
            _fwd_finish(xt, i, s, _total(slots, i, S, TILE_M), wp, y, rstd_out, n, eps, TILE_M, CASTING)


@ct.function
def _bwd_finish(xt, dyt, i, s, dot, w_p, rstd_in, dx, n, TILE_M: ct.Constant[int]):
    rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
    xhat = ct.astype(xt, ct.float32) * rstd
    wdy = ct.astype(dyt, ct.float32) * w_p
    ct.store(dx, (i, s), ct.astype((wdy - xhat * (dot * rstd / n)) * rstd, dx.dtype), allow_tma=False)


@ct.function
def _bwd_start(xt, dyt, i, s, w_p, dw_acc, slots, x_dtype, TILE_M: ct.Constant[int], ROUND_XHAT: ct.Constant[bool]):
    """Publishes sum(wdy * x) (rstd factored out: c = rstd * that / n) and returns dw_acc updated."""
    xf = ct.astype(xt, ct.float32)
    dyf = ct.astype(dyt, ct.float32)
    _publish(slots, i, s, ct.sum(dyf * w_p * xf, axis=1, keepdims=True), TILE_M)
    return dw_acc


@ct.kernel
def bwd_split2(x, dy, w, rstd_in, dx, dw_partial, slots, TILE_M: ct.Constant[int], SEG: ct.Constant[int],
               S: ct.Constant[int], ROUND_XHAT: ct.Constant[bool], DEFER: ct.Constant[bool]):
    n = x.shape[1]
    s = ct.bid(0) % S
    g = ct.bid(0) // S
    G = ct.num_blocks(0) // S
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, s, 0.0, SEG, True)
    dw_acc = ct.zeros((1, SEG), dtype=ct.float32)
    if DEFER:
        cx = ct.load(x, (g, s), (TILE_M, SEG), padding_mode=ZERO)
        cdy = ct.load(dy, (g, s), (TILE_M, SEG), padding_mode=ZERO)
        cxf = ct.astype(cx, ct.float32)
        cdyf = ct.astype(cdy, ct.float32)
        _publish(slots, g, s, ct.sum(cdyf * wp * cxf, axis=1, keepdims=True), TILE_M)
        r0 = ct.reshape(ct.load(rstd_in, (g,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        dw_acc += _dw_rows(cdyf, cxf * r0, x.dtype, ROUND_XHAT)
        for i in range(g + G, num_row_tiles, G):
            nx = ct.load(x, (i, s), (TILE_M, SEG), padding_mode=ZERO)
            ndy = ct.load(dy, (i, s), (TILE_M, SEG), padding_mode=ZERO)
            nxf = ct.astype(nx, ct.float32)
            ndyf = ct.astype(ndy, ct.float32)
            _publish(slots, i, s, ct.sum(ndyf * wp * nxf, axis=1, keepdims=True), TILE_M)
            ri = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
            dw_acc += _dw_rows(ndyf, nxf * ri, x.dtype, ROUND_XHAT)
            _bwd_finish(cx, cdy, i - G, s, _total(slots, i - G, S, TILE_M), wp, rstd_in, dx, n, TILE_M)
            cx = nx
            cdy = ndy
        last = g + ((num_row_tiles - 1 - g) // G) * G
        _bwd_finish(cx, cdy, last, s, _total(slots, last, S, TILE_M), wp, rstd_in, dx, n, TILE_M)
    else:
        for i in range(g, num_row_tiles, G):
            xt = ct.load(x, (i, s), (TILE_M, SEG), padding_mode=ZERO)
            dyt = ct.load(dy, (i, s), (TILE_M, SEG), padding_mode=ZERO)
            xf = ct.astype(xt, ct.float32)
            dyf = ct.astype(dyt, ct.float32)
            _publish(slots, i, s, ct.sum(dyf * wp * xf, axis=1, keepdims=True), TILE_M)
            ri = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
            dw_acc += _dw_rows(dyf, xf * ri, x.dtype, ROUND_XHAT)
            _bwd_finish(xt, dyt, i, s, _total(slots, i, S, TILE_M), wp, rstd_in, dx, n, TILE_M)
    ct.store(dw_partial, (g, s), dw_acc)
