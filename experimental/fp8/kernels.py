"""RMSNorm kernels that write FP8 for the next GEMM (experimental).

    v = rms_norm(x) * (offset + w)              fp32, rounded as the casting mode says
    static scale s:      y = q(v / s),  amax = max |v| over the whole input
    dynamic, per row:    s_row = max(max |v_row| / FP8_MAX, MIN_SCALE),  y_row = q(v_row / s_row)
    q(t) = round to nearest even in the FP8 format, saturated to +-FP8_MAX; NaN stays NaN

s is a dequantization scale (x ~ y * s). The casting mode's rounding point comes before the
division: in llama mode xhat is rounded to x's dtype, as in the unquantized op.

With a residual, the norm is of s = x + residual (an fp32 add rounded once to the residual's
dtype), and s is stored as residual_out.

Two kernels share that math. ``rows_fwd_fp8`` is the row-tile forward (cutile_rms.rows: 3-D
(A, B, N) arrays, a row held as up to three pieces, the tile and grid from rows.plan) for rows
the row-tile planner can hold; ``chunked_fwd_fp8`` walks longer rows one at a time in TILE_N
chunks, reading x once for the sum of squares, once more for the dynamic amax, and once to
quantize (the later reads mostly from L2).

The static amax is a max over blocks: each block keeps the max of its tiles and adds it with an
atomic max on the int32 bits of the fp32 value (for values >= 0 the bits order as the values),
so the result does not depend on the order of the blocks. Max reductions drop NaN (cuTile's
default), so a NaN row adds nothing to amax; its y is NaN (its rstd is) and its dynamic scale
is MIN_SCALE.
"""

import cuda.tile as ct

from cutile_rms._launch import experimental_kernel
from cutile_rms._tile import tile_function, tile_kernel
from cutile_rms.rmsnorm.kernels import _normalize, _weight_row
from cutile_rms.rows.kernels import (
    LOADS_PLAIN,
    _add_piece,
    _add_row_tile,
    _load,
    _load_row_tile,
    _pieces,
    _rstd,
    _store,
    _sum_sq,
    _tile,
    _weight,
    _weights,
)

ZERO = ct.PaddingMode.ZERO
C_INT = ct.Constant[int]
C_BOOL = ct.Constant[bool]
_RELAXED = ct.MemoryOrder.RELAXED
_DEVICE = ct.MemoryScope.DEVICE

# FP8 formats (the FMT constant) and their largest finite values.
FMT_E4M3 = 0  # float8_e4m3fn: 448
FMT_E5M2 = 1  # float8_e5m2: 57344
# The smallest dynamic scale: fp32's smallest normal number, so an all-zero row divides by a
# finite, nonzero scale (and yields zeros) instead of 0 / 0.
MIN_SCALE = 2.0**-126


@tile_function
def _fp8_max(FMT: C_INT):
    if FMT == FMT_E4M3:
        return 448.0
    else:
        return 57344.0


@tile_function
def _value(xt, rstd, wp, CASTING: C_INT, HAS_WEIGHT: C_BOOL):
    """v of one piece, fp32 (the unquantized op's y before its final rounding)."""
    return ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), ct.float32)


@tile_function
def _row_amax(v):
    """(TILE_A, TILE_B, 1) max |v| per row (NaN dropped)."""
    return ct.max(ct.abs(v), axis=2, keepdims=True)


@tile_function
def _fp8_dtype(FMT: C_INT):
    if FMT == FMT_E4M3:
        return ct.float8_e4m3fn
    else:
        return ct.float8_e5m2


@tile_function
def _quantize(v, inv_s, dtype, FMT: C_INT):
    """v * inv_s (inv_s = 1 / s, the scale's reciprocal) rounded to the FP8 format FMT, saturated
    to +-max (a NaN stays NaN), as dtype: the FP8 dtype itself or int8 (its bits, for frameworks
    without FP8 dtypes, e.g. CuPy). A product, not v / s: an IEEE fp32 division per element is a
    reciprocal, its refinement and a slow-path check (about 10 SASS instructions an element,
    session 15), which made these kernels issue-bound at 45-55% of the copy ceiling; one
    reciprocal per row (dynamic) or per block (static) is free. v * (1 / s) is within 1.5 fp32
    ulps of v / s, so it rounds to another FP8 value only next to a rounding boundary, as
    vLLM's and TransformerEngine's quantizers (which multiply by an inverse scale) do too."""
    fmax = _fp8_max(FMT)
    q = ct.minimum(ct.maximum(v * inv_s, -fmax, propagate_nan=True), fmax, propagate_nan=True)
    return ct.bitcast(ct.astype(q, _fp8_dtype(FMT)), dtype)


@tile_function
def _all_max(t):
    """(1, 1, 1) max of a 3-D tile."""
    return ct.max(ct.max(ct.max(t, axis=0, keepdims=True), axis=1, keepdims=True), axis=2, keepdims=True)


@tile_function
def _publish_amax(stat, block_max):
    """stat[0] (int32 bits of an fp32 >= 0) <- max(stat[0], block_max)."""
    bits = ct.bitcast(ct.reshape(block_max, (1,)), ct.int32)
    ct.atomic_max(stat, ct.zeros((1,), dtype=ct.int32), bits, memory_order=_RELAXED, memory_scope=_DEVICE)


@tile_function
def _static_inverse(scale):
    """(1, 1, 1) 1 / the static scale (one division per block)."""
    return 1.0 / ct.reshape(ct.load(scale, (0,), (1,), allow_tma=False), (1, 1, 1))


@experimental_kernel
@tile_kernel
def rows_fwd_fp8(x, r, w, y, s_out, rstd_out, scale, stat, eps, offset, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT,
                 W1: C_INT, W2: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, DYNAMIC: C_BOOL,
                 FMT: C_INT, ADD_RESIDUAL: C_BOOL, CHECK_A: C_BOOL, CHECK_N: C_BOOL, LOADS: C_INT):  # fmt: skip
    """y (FP8, (A, B, N)) of row tiles as in rows_fwd. DYNAMIC: the per-row scales into stat
    ((A, B) fp32; scale is a placeholder); else scale is the 1-element fp32 static scale and
    stat the 1-element int32 that receives amax's bits (zeroed by the caller). rstd ((A, B)
    fp32) with STORE_RSTD. ADD_RESIDUAL: the norm is of s = x + r (an fp32 add rounded once to
    s_out's dtype), stored to s_out; r and s_out are placeholders otherwise."""
    n = x.shape[2]
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    j1, j2, c0, c1, c2 = _pieces(W0, W1, W2, CHECK_A, CHECK_N)
    w0, w1, w2 = _weights(w, offset, W0, W1, W2, HAS_WEIGHT, CHECK_N, LOADS, CASTING)
    inv_s = ct.full((TILE_A, TILE_B, 1), 1.0, dtype=ct.float32)
    if not DYNAMIC:
        inv_s = ct.broadcast_to(_static_inverse(scale), (TILE_A, TILE_B, 1))
    block_max = ct.zeros((1, 1, 1), dtype=ct.float32)
    for t in range(ct.bid(0), ct.cdiv(x.shape[0], TILE_A) * tiles_b, ct.num_blocks(0)):
        ia, ib = _tile(t, tiles_b)
        if ADD_RESIDUAL:
            x0, x1, x2, ss = _add_row_tile(x, r, s_out, ia, ib, j1, j2, TILE_A, TILE_B, W0, W1, W2, c0, c1, c2, LOADS,
                                           True)  # fmt: skip
        else:
            x0, x1, x2, ss = _load_row_tile(x, ia, ib, j1, j2, TILE_A, TILE_B, W0, W1, W2, c0, c1, c2, LOADS)
        rstd = _rstd(ss, n, eps, LOADS)
        v0 = _value(x0, rstd, w0, CASTING, HAS_WEIGHT)
        amax = _row_amax(v0)
        if W1 > 0:
            v1 = _value(x1, rstd, w1, CASTING, HAS_WEIGHT)
            amax = ct.maximum(amax, _row_amax(v1))
        if W2 > 0:
            v2 = _value(x2, rstd, w2, CASTING, HAS_WEIGHT)
            amax = ct.maximum(amax, _row_amax(v2))
        q = inv_s
        if DYNAMIC:
            row_s = ct.maximum(amax / _fp8_max(FMT), MIN_SCALE)
            ct.store(stat, (ia, ib), ct.reshape(row_s, (TILE_A, TILE_B)), check_bounds=CHECK_A, allow_tma=False)
            q = 1.0 / row_s
        else:
            block_max = ct.maximum(block_max, _all_max(amax))
        _store(y, ia, ib, 0, _quantize(v0, q, y.dtype, FMT), c0, LOADS)
        if W1 > 0:
            _store(y, ia, ib, j1, _quantize(v1, q, y.dtype, FMT), c1, LOADS)
        if W2 > 0:
            _store(y, ia, ib, j2, _quantize(v2, q, y.dtype, FMT), c2, LOADS)
        if STORE_RSTD:
            ct.store(rstd_out, (ia, ib), ct.reshape(rstd, (TILE_A, TILE_B)), check_bounds=CHECK_A, allow_tma=False)
    if not DYNAMIC:
        _publish_amax(stat, block_max)


@tile_function
def _chunk(x, s_out, ia, ib, j, TILE_N: C_INT, ADD_RESIDUAL: C_BOOL):
    """Chunk j of the row being normalized: of s_out (stored by the first pass) with a residual."""
    if ADD_RESIDUAL:
        return _load(s_out, ia, ib, j, 1, 1, TILE_N, True, LOADS_PLAIN)
    else:
        return _load(x, ia, ib, j, 1, 1, TILE_N, True, LOADS_PLAIN)


@experimental_kernel
@tile_kernel
def chunked_fwd_fp8(x, r, w, y, s_out, rstd_out, scale, stat, eps, offset, TILE_N: C_INT, CASTING: C_INT,
                    HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, DYNAMIC: C_BOOL, FMT: C_INT,
                    ADD_RESIDUAL: C_BOOL):  # fmt: skip
    """rows_fwd_fp8 (same arrays and flags) for rows of any length: one row at a time, in
    TILE_N-wide chunks (zero-padded past N; stores past N are dropped). With ADD_RESIDUAL the
    first pass stores s = x + r and the later passes read it back from s_out."""
    n = x.shape[2]
    b = x.shape[1]
    chunks = ct.cdiv(n, TILE_N)
    inv_s = ct.full((1, 1, 1), 1.0, dtype=ct.float32)
    if not DYNAMIC:
        inv_s = _static_inverse(scale)
    block_max = ct.zeros((1, 1, 1), dtype=ct.float32)
    for t in range(ct.bid(0), x.shape[0] * b, ct.num_blocks(0)):
        ia, ib = _tile(t, b)
        ss = ct.zeros((1, 1, 1), dtype=ct.float32)
        for j in range(chunks):
            if ADD_RESIDUAL:
                ss = ss + _sum_sq(_add_piece(x, r, s_out, ia, ib, j, 1, 1, TILE_N, True, LOADS_PLAIN, True))
            else:
                ss = ss + _sum_sq(_load(x, ia, ib, j, 1, 1, TILE_N, True, LOADS_PLAIN))
        rstd = ct.rsqrt(ss / n + eps)
        q = inv_s
        if DYNAMIC:
            amax = ct.zeros((1, 1, 1), dtype=ct.float32)
            for j in range(chunks):
                wp = _weight(w, j, offset, TILE_N, HAS_WEIGHT, True, LOADS_PLAIN, CASTING)
                xt = _chunk(x, s_out, ia, ib, j, TILE_N, ADD_RESIDUAL)
                amax = ct.maximum(amax, _row_amax(_value(xt, rstd, wp, CASTING, HAS_WEIGHT)))
            row_s = ct.maximum(amax / _fp8_max(FMT), MIN_SCALE)
            ct.store(stat, (ia, ib), ct.reshape(row_s, (1, 1)), allow_tma=False)
            q = 1.0 / row_s
        for j in range(chunks):
            wp = _weight(w, j, offset, TILE_N, HAS_WEIGHT, True, LOADS_PLAIN, CASTING)
            v = _value(_chunk(x, s_out, ia, ib, j, TILE_N, ADD_RESIDUAL), rstd, wp, CASTING, HAS_WEIGHT)
            if not DYNAMIC:
                block_max = ct.maximum(block_max, _all_max(ct.abs(v)))
            _store(y, ia, ib, j, _quantize(v, q, y.dtype, FMT), True, LOADS_PLAIN)
        if STORE_RSTD:
            ct.store(rstd_out, (ia, ib), ct.reshape(rstd, (1, 1)), allow_tma=False)
    if not DYNAMIC:
        _publish_amax(stat, block_max)


@experimental_kernel
@tile_kernel
def tiled_fwd_fp8_t(x, w, y, y_t, rstd_out, scale, stat, eps, offset, TILE_M: C_INT, TILE_N: C_INT, CASTING: C_INT,
                    HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, FMT: C_INT):  # fmt: skip
    """y ((M, N), FP8) and its transpose y_t ((N, M), FP8, contiguous), static scale only.

    Blocks take TILE_M-row slabs of a 2-D x. A first pass over the slab's TILE_N-wide chunks
    sums the squares; a second reads each chunk again (mostly from L2), quantizes it and stores
    it twice: as a (TILE_M, TILE_N) tile of y and, transposed, as a (TILE_N, TILE_M) tile of
    y_t, whose rows then get TILE_M contiguous bytes (32: one full sector). amax as in
    rows_fwd_fp8 (stat: the int32 bits)."""
    n = x.shape[1]
    chunks = ct.cdiv(n, TILE_N)
    inv_s = ct.reshape(_static_inverse(scale), (1, 1))
    block_max = ct.zeros((1, 1), dtype=ct.float32)
    for i in range(ct.bid(0), ct.cdiv(x.shape[0], TILE_M), ct.num_blocks(0)):
        ss = ct.zeros((TILE_M, 1), dtype=ct.float32)
        for j in range(chunks):
            xf = ct.astype(ct.load(x, (i, j), (TILE_M, TILE_N), padding_mode=ZERO), ct.float32)
            ss += ct.sum(xf * xf, axis=1, keepdims=True)
        rstd = ct.rsqrt(ss / n + eps)
        for j in range(chunks):
            xt = ct.load(x, (i, j), (TILE_M, TILE_N), padding_mode=ZERO)
            v = ct.astype(_normalize(xt, rstd, _weight_row(w, j, offset, TILE_N, HAS_WEIGHT), CASTING, HAS_WEIGHT),
                          ct.float32)  # fmt: skip
            block_max = ct.maximum(block_max, ct.max(ct.max(ct.abs(v), axis=1, keepdims=True), axis=0, keepdims=True))
            q = _quantize(v, inv_s, y.dtype, FMT)
            ct.store(y, (i, j), q, allow_tma=False)
            ct.store(y_t, (j, i), ct.transpose(q), allow_tma=False)
        if STORE_RSTD:
            ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)), allow_tma=False)
    _publish_amax(stat, ct.reshape(block_max, (1, 1, 1)))
