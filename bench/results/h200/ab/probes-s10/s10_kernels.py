"""Session-10 probe kernels, as run for s10-probe-d065827.log: cuTile streaming limits (copies shaped like the forward and the
backward), and an in-block two-pass backward for rows longer than a tile."""
import cuda.tile as ct

from cutile_rms.rmsnorm.kernels import _load_tile, _store_tile, _weight_row, _dw_rows

ZERO = ct.PaddingMode.ZERO


@ct.kernel
def copy_fwd(x, y, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    """y = x through fp32, persistent over (TILE_M, TILE_N) tiles (row-major tile order)."""
    cols = ct.cdiv(x.shape[1], TILE_N)
    total = ct.cdiv(x.shape[0], TILE_M) * cols
    for t in range(ct.bid(0), total, ct.num_blocks(0)):
        i = t // cols
        j = t % cols
        xt = ct.astype(_load_tile(x, i, j, TILE_M, TILE_N, 0), ct.float32)
        _store_tile(y, i, j, ct.astype(xt, y.dtype), TMA_STORE, True)


@ct.kernel
def copy_bwd(x, dy, dx, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], TMA_STORE: ct.Constant[bool]):
    """dx = x + dy through fp32 (two reads, one write), persistent over tiles."""
    cols = ct.cdiv(x.shape[1], TILE_N)
    total = ct.cdiv(x.shape[0], TILE_M) * cols
    for t in range(ct.bid(0), total, ct.num_blocks(0)):
        i = t // cols
        j = t % cols
        a = ct.astype(_load_tile(x, i, j, TILE_M, TILE_N, 0), ct.float32)
        b = ct.astype(_load_tile(dy, i, j, TILE_M, TILE_N, 0), ct.float32)
        _store_tile(dx, i, j, ct.astype(a + b, dx.dtype), TMA_STORE, True)


@ct.kernel
def bwd_twopass(x, dy, w, rstd_in, dx, dw_partial, TILE_N: ct.Constant[int], TMA_STORE: ct.Constant[bool],
                REVERSE: ct.Constant[bool]):
    """Llama backward (weight, xhat rounded for dW), a row per block iteration: pass 1 walks the
    row's chunks for c, pass 2 walks them again (REVERSE: last chunk first, the one most
    recently read) for dx, adding the block's dW share into its own row of dw_partial (grid, n)."""
    n = x.shape[1]
    chunks = ct.cdiv(n, TILE_N)
    for i in range(ct.bid(0), x.shape[0], ct.num_blocks(0)):
        rstd = ct.reshape(ct.load(rstd_in, (i,), (1,)), (1, 1))
        acc = ct.zeros((1, 1), dtype=ct.float32)
        for j in range(chunks):
            xf = ct.astype(_load_tile(x, i, j, 1, TILE_N, 0), ct.float32)
            dyf = ct.astype(_load_tile(dy, i, j, 1, TILE_N, 0), ct.float32)
            acc += ct.sum(dyf * _weight_row(w, j, 0.0, TILE_N, True) * xf, axis=1, keepdims=True)
        c = acc * rstd / n
        for jj in range(chunks):
            if REVERSE:
                j = chunks - 1 - jj
            else:
                j = jj
            xf = ct.astype(_load_tile(x, i, j, 1, TILE_N, 0), ct.float32)
            dyf = ct.astype(_load_tile(dy, i, j, 1, TILE_N, 0), ct.float32)
            xhat = xf * rstd
            _store_tile(dx, i, j, ct.astype((dyf * _weight_row(w, j, 0.0, TILE_N, True) - xhat * c) * rstd, dx.dtype),
                        TMA_STORE, True)
            part = _dw_rows(dyf, xhat, x.dtype, True)
            if i == ct.bid(0):
                ct.store(dw_partial, (ct.bid(0), j), part, allow_tma=False)
            else:
                prev = ct.load(dw_partial, (ct.bid(0), j), (1, TILE_N), allow_tma=False)
                ct.store(dw_partial, (ct.bid(0), j), part + prev, allow_tma=False)


@ct.kernel
def row3d(x3, w2, y3, eps, TILE_A: ct.Constant[int], V: ct.Constant[int]):
    """Few-row inference forward (llama, weight) on (M, N / V, V) views: one block per row,
    unchecked loads (N = TILE_A * V exactly), in the hope of V-wide vector accesses."""
    i = ct.bid(0)
    xt = ct.load(x3, (i, 0, 0), (1, TILE_A, V), check_bounds=False, allow_tma=False)
    wt = ct.astype(ct.load(w2, (0, 0), (TILE_A, V), check_bounds=False, allow_tma=False), ct.float32)
    xf = ct.astype(xt, ct.float32)
    ss = ct.sum(ct.sum(xf * xf, axis=2, keepdims=True), axis=1, keepdims=True)
    rstd = ct.rsqrt(ss / (TILE_A * V) + eps)
    xhat = ct.astype(ct.astype(xf * rstd, xt.dtype), ct.float32)
    yt = ct.astype(xhat * ct.reshape(wt, (1, TILE_A, V)), y3.dtype)
    ct.store(y3, (i, 0, 0), yt, check_bounds=False, allow_tma=False)
