"""Constants and helpers shared by the core RMSNorm kernels (and the row-tile, fused-add and FP8
kernels that reuse them): casting modes, the weight row, the normalization of a tile, dW terms,
loads and stores with the memory knobs, the residual add, the row dot of the backward."""

import cuda.tile as ct

from cutile_rms._tile import tile_function

ZERO = ct.PaddingMode.ZERO
_RELAXED = ct.MemoryOrder.RELAXED  # the split kernels' exchanges
_DEVICE = ct.MemoryScope.DEVICE

# Casting modes (kernel Constants; the names and meanings are Liger-Kernel's).
CAST_LLAMA = 0  # fp32 statistics; xhat rounded to the input dtype before the weight multiply
CAST_GEMMA = 1  # everything in fp32, one rounding of y at the end
CAST_NONE = 2  # fp32 mean of squares; rstd, xhat and y computed in the input dtype
# Llama where offset + w is w itself, of x's dtype as y is (offset 0): y = xhat * w multiplied in
# that dtype (HMUL2), the weight loaded as it is. Same bits as CAST_LLAMA: the fp32 product of two
# 16-bit values is exact, so rounding it once to x's dtype is the correctly rounded native product;
# the one difference is the sign of a zero y where a weight element is -0.0 (llama multiplies by
# -0.0 + 0.0 = +0.0). The row-tile launchers pick it (launch.forward_casting; bench/NOTES.md,
# session 32); callers pass the public codes only (launch.check_casting).
CAST_LLAMA_NATIVE = 3


@tile_function
def _weight_factor(wt, offset, CASTING: ct.Constant[int]):
    """The weight tile as _normalize multiplies it: fp32 offset + w, or w as loaded under
    CAST_LLAMA_NATIVE (offset 0)."""
    if CASTING == CAST_LLAMA_NATIVE:
        return wt
    else:
        return ct.astype(wt, ct.float32) + offset


@tile_function
def _weight_row(w, j, offset, TILE_N: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool]):
    """(1, TILE_N) fp32 tile of offset + w for column chunk j (1 when there is no weight)."""
    if HAS_WEIGHT:
        wt = ct.load(w, (j,), (TILE_N,), padding_mode=ZERO)
        return ct.reshape(ct.astype(wt, ct.float32) + offset, (1, TILE_N))
    else:
        return ct.full((1, TILE_N), 1.0, dtype=ct.float32)


@tile_function
def _weight_row_plain(w, j, offset, TILE_N: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool]):
    """_weight_row by plain loads (no TMA): for code off a kernel's main path, where a TMA load
    makes tileiras add a producer warp and lower every thread's register budget."""
    if HAS_WEIGHT:
        wt = ct.load(w, (j,), (TILE_N,), padding_mode=ZERO, allow_tma=False)
        return ct.reshape(ct.astype(wt, ct.float32) + offset, (1, TILE_N))
    else:
        return ct.full((1, TILE_N), 1.0, dtype=ct.float32)


@tile_function
def _normalize(xt, rstd, wp, CASTING: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool]):
    """y = xhat * (offset + w) for one (TILE_M, TILE_N) tile, rounded as the casting mode says.

    xt is in the input dtype, rstd is (TILE_M, 1) fp32, wp is (1, TILE_N) fp32 (or of x's dtype
    under CAST_LLAMA_NATIVE: _weight_factor). Returns fp32 for llama/gemma and the input dtype for
    none and native; the caller casts to the output dtype.
    """
    if CASTING == CAST_NONE:
        xhat = xt * ct.astype(rstd, xt.dtype)
        if HAS_WEIGHT:
            return xhat * ct.astype(wp, xt.dtype)
        else:
            return xhat
    elif CASTING == CAST_LLAMA or CASTING == CAST_LLAMA_NATIVE:  # noqa: SIM109 (tile code: no tuple tests)
        xhat = ct.astype(ct.astype(xt, ct.float32) * rstd, xt.dtype)
        if not HAS_WEIGHT:
            return xhat
        elif CASTING == CAST_LLAMA_NATIVE:  # wp of x's dtype (_weight_factor): one multiply in that dtype
            return xhat * wp
        else:
            return ct.astype(xhat, ct.float32) * wp
    else:
        xhat = ct.astype(xt, ct.float32) * rstd
        if HAS_WEIGHT:
            return xhat * wp
        else:
            return xhat


@tile_function
def _dw_rows(dyf, xhat, x_dtype, ROUND_XHAT: ct.Constant[bool]):
    """(1, TILE_N) sum over the tile's rows of dy * xhat. With ROUND_XHAT (llama and none
    casting) xhat is first rounded to the input dtype, as the forward multiplied the weight by
    that rounded value: this is the exact derivative of what the forward computed."""
    if ROUND_XHAT:
        return ct.sum(dyf * ct.astype(ct.astype(xhat, x_dtype), ct.float32), axis=0, keepdims=True)
    else:
        return ct.sum(dyf * xhat, axis=0, keepdims=True)


@tile_function
def _load_tile(a, i, j, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], LATENCY: ct.Constant[int]):
    """Tile (i, j) of a, zero-padded, with the latency hint LATENCY (0: none)."""
    if LATENCY == 0:
        return ct.load(a, (i, j), (TILE_M, TILE_N), padding_mode=ZERO)
    else:
        return ct.load(a, (i, j), (TILE_M, TILE_N), padding_mode=ZERO, latency=LATENCY)


@tile_function
def _load_rows(a, i, j, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], CHECK_BOUNDS: ct.Constant[bool],
               LATENCY: ct.Constant[int]):  # fmt: skip
    """Tile (i, j) of a, zero-padded; or, with CHECK_BOUNDS=False (the caller guarantees the
    tile is inside a), without bounds checks. tileiras 13.4 rejects check_bounds=False
    together with a padding mode, hence the two calls."""
    if CHECK_BOUNDS:
        return _load_tile(a, i, j, TILE_M, TILE_N, LATENCY)
    elif LATENCY == 0:
        return ct.load(a, (i, j), (TILE_M, TILE_N), check_bounds=False)
    else:
        return ct.load(a, (i, j), (TILE_M, TILE_N), check_bounds=False, latency=LATENCY)


@tile_function
def _store_tile(a, i, j, t, TMA_STORE: ct.Constant[bool], CHECK_BOUNDS: ct.Constant[bool]):
    """Stores tile t at tile index (i, j) of a; TMA_STORE=False forbids a TMA store."""
    if TMA_STORE:
        ct.store(a, (i, j), t, check_bounds=CHECK_BOUNDS)
    else:
        ct.store(a, (i, j), t, check_bounds=CHECK_BOUNDS, allow_tma=False)


# The residual add of the forward helpers (their ADD_RESIDUAL constant): none (plain RMSNorm),
# s = x + r stored to s_out (the fused add), or s = x + r not stored (post-norm inference: s
# only normalized; s_out then only names the sum's dtype and is never touched).
RESIDUAL_NONE = 0
RESIDUAL_ADD = 1
RESIDUAL_ADD_UNSTORED = 2


@tile_function
def _add_residual(xt, r, s_out, i, j, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
                  CHECK_BOUNDS: ct.Constant[bool], TMA_STORE: ct.Constant[bool], LATENCY: ct.Constant[int],
                  STORE_SUM: ct.Constant[bool]):  # fmt: skip
    """s = x + r for one tile, summed in fp32 and rounded once to s_out's dtype, stored to
    s_out with STORE_SUM; returns s in that dtype (what the norm then reads, so y =
    rms_norm(s_out) exactly)."""
    rt = _load_rows(r, i, j, TILE_M, TILE_N, CHECK_BOUNDS, LATENCY)
    st = ct.astype(ct.astype(xt, ct.float32) + ct.astype(rt, ct.float32), s_out.dtype)
    if STORE_SUM:
        _store_tile(s_out, i, j, st, TMA_STORE, CHECK_BOUNDS)
    return st


@tile_function
def _tail_weight(w, wp, offset, TILE_N: ct.Constant[int], TAIL: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool]):
    """The tail tile's (1, TAIL) offset + w (TAIL > 0); wp itself, unused, when there is no tail."""
    if TAIL > 0:
        return _weight_row(w, TILE_N // TAIL, offset, TAIL, HAS_WEIGHT)
    else:
        return wp


@tile_function
def _dx_out(dx, dr, dres, i, j, dxf, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
            ADD_DRES: ct.Constant[bool], TWO_OUTPUTS: ct.Constant[bool], TMA_STORE: ct.Constant[bool],
            LATENCY: ct.Constant[int]):  # fmt: skip
    """Stores one (TILE_M, TILE_N) tile of dx (fp32 in dxf). For a fused residual add:
    ADD_DRES adds the gradient that reached the sum directly (dres); TWO_OUTPUTS also stores
    the result to dr, in dr's dtype (x and the residual have different dtypes)."""
    if ADD_DRES:
        dxf = dxf + ct.astype(_load_tile(dres, i, j, TILE_M, TILE_N, LATENCY), ct.float32)
    _store_tile(dx, i, j, ct.astype(dxf, dx.dtype), TMA_STORE, True)
    if TWO_OUTPUTS:
        _store_tile(dr, i, j, ct.astype(dxf, dr.dtype), TMA_STORE, True)


@tile_function
def _row_wdy_x(x, dy, w, i, offset, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool],
               TMA: ct.Constant[bool]):  # fmt: skip
    """Row tile i's (TILE_M, 1) fp32 sums of wdy * x over whole rows, TILE_N columns at a time
    (times rstd / n: c). TMA: whether the loads may go through TMA."""
    acc = ct.zeros((TILE_M, 1), dtype=ct.float32)
    for j in range(ct.cdiv(x.shape[1], TILE_N)):
        xf = ct.astype(ct.load(x, (i, j), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=TMA), ct.float32)
        dyf = ct.astype(ct.load(dy, (i, j), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=TMA), ct.float32)
        if TMA:
            wp = _weight_row(w, j, offset, TILE_N, HAS_WEIGHT)
        else:
            wp = _weight_row_plain(w, j, offset, TILE_N, HAS_WEIGHT)
        acc += ct.sum(dyf * wp * xf, axis=1, keepdims=True)
    return acc
