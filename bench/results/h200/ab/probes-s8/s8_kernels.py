"""Session-8 probe kernels: dynamic row-tile scheduling (bf16/fp16/fp32 llama forward)."""
import cuda.tile as ct

ZERO = ct.PaddingMode.ZERO
_RELAXED = ct.MemoryOrder.RELAXED
_DEVICE = ct.MemoryScope.DEVICE


@ct.function
def _ld(a, i, j, TM: ct.Constant[int], TN: ct.Constant[int], TMA_LOAD: ct.Constant[bool]):
    if TMA_LOAD:
        return ct.load(a, (i, j), (TM, TN), padding_mode=ZERO)
    else:
        return ct.load(a, (i, j), (TM, TN), padding_mode=ZERO, allow_tma=False)


@ct.function
def _st(a, i, j, t, TMA_STORE: ct.Constant[bool]):
    if TMA_STORE:
        ct.store(a, (i, j), t)
    else:
        ct.store(a, (i, j), t, allow_tma=False)


@ct.function
def _row_tile(x, y, rstd_out, i, wp, wpt, eps, n, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
              TAIL: ct.Constant[int], TMA_LOAD: ct.Constant[bool], TMA_STORE: ct.Constant[bool]):
    xt = _ld(x, i, 0, TILE_M, TILE_N, TMA_LOAD)
    xf = ct.astype(xt, ct.float32)
    ss = ct.sum(xf * xf, axis=1, keepdims=True)
    if TAIL > 0:
        xu = _ld(x, i, TILE_N // TAIL, TILE_M, TAIL, TMA_LOAD)
        uf = ct.astype(xu, ct.float32)
        ss = ss + ct.sum(uf * uf, axis=1, keepdims=True)
    rstd = ct.rsqrt(ss / n + eps)
    _st(y, i, 0, ct.astype(ct.astype(ct.astype(xf * rstd, xt.dtype), ct.float32) * wp, y.dtype), TMA_STORE)
    if TAIL > 0:
        _st(y, i, TILE_N // TAIL, ct.astype(ct.astype(ct.astype(uf * rstd, xt.dtype), ct.float32) * wpt, y.dtype),
            TMA_STORE)
    ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))


@ct.function
def _wp(w, j, TILE_N: ct.Constant[int], TMA_LOAD: ct.Constant[bool]):
    if TMA_LOAD:
        wt = ct.load(w, (j,), (TILE_N,), padding_mode=ZERO)
    else:
        wt = ct.load(w, (j,), (TILE_N,), padding_mode=ZERO, allow_tma=False)
    return ct.reshape(ct.astype(wt, ct.float32), (1, TILE_N))


@ct.function
def _wpt(w, TILE_N: ct.Constant[int], TAIL: ct.Constant[int], TMA_LOAD: ct.Constant[bool]):
    if TAIL > 0:
        return _wp(w, TILE_N // TAIL, TAIL, TMA_LOAD)
    else:
        return ct.zeros((1, 1), dtype=ct.float32)


@ct.kernel
def fwd_static(x, w, y, rstd_out, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], TAIL: ct.Constant[int],
               TMA_LOAD: ct.Constant[bool], TMA_STORE: ct.Constant[bool]):
    """The shipped scheme: static persistent grid-stride over row tiles (or one per block)."""
    n = x.shape[1]
    num = ct.cdiv(x.shape[0], TILE_M)
    wp = _wp(w, 0, TILE_N, TMA_LOAD)
    wpt = _wpt(w, TILE_N, TAIL, TMA_LOAD)
    for i in range(ct.bid(0), num, ct.num_blocks(0)):
        _row_tile(x, y, rstd_out, i, wp, wpt, eps, n, TILE_M, TILE_N, TAIL, TMA_LOAD, TMA_STORE)


@ct.kernel
def fwd_dyn(x, w, y, rstd_out, counter, claims, eps, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
            TAIL: ct.Constant[int], TMA_LOAD: ct.Constant[bool], TMA_STORE: ct.Constant[bool]):
    """Persistent grid that claims row tiles from a global counter (one relaxed atomic add per
    tile, issued a tile ahead). A launch makes exactly `claims` = row tiles + grid claims (each
    block stops after its first claim past the end); the block whose claim is the last one
    puts the counter back to 0 for the next launch."""
    n = x.shape[1]
    num = ct.cdiv(x.shape[0], TILE_M)
    wp = _wp(w, 0, TILE_N, TMA_LOAD)
    wpt = _wpt(w, TILE_N, TAIL, TMA_LOAD)
    i = ct.atomic_add(counter, 0, 1, memory_order=_RELAXED, memory_scope=_DEVICE)
    while i < num:
        nxt = ct.atomic_add(counter, 0, 1, memory_order=_RELAXED, memory_scope=_DEVICE)
        _row_tile(x, y, rstd_out, i, wp, wpt, eps, n, TILE_M, TILE_N, TAIL, TMA_LOAD, TMA_STORE)
        i = nxt
    if i == claims - 1:
        ct.atomic_xchg(counter, 0, 0, memory_order=_RELAXED, memory_scope=_DEVICE)
