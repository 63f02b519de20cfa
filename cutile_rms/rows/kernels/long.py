"""The long-row kernels (plan kind "long"): rows_fwd_long, rows_dot_long, rows_bwd_long and
rows_bwd_long_onepass, a row at a time in TILE_N chunks (plan.long_plan)."""

import cuda.tile as ct

from cutile_rms._tile import tile_function, tile_kernel
from cutile_rms.rmsnorm.kernels import (
    CAST_GEMMA,
    _normalize,
    _weight_factor,
)
from cutile_rms.rows.kernels.common import (
    C_BOOL,
    C_INT,
    RowArray,
    RowVector,
    _dw,
    _load,
    _mean,
    _rstd,
    _store,
    _tile,
    _weight,
    _weight_raw,
    row_kernel,
)

# Rows longer than one block holds (plan.long_plan: unaligned 16-bit rows past the row tiles'
# longest, which the core kernels could only load 2 bytes at a time behind a branch each, at
# 0.14-0.19x torch.compile), and the forward of the aligned rows of plan.long_fit and of fp32 rows
# up to five 16 KB chunks (plan.long_static_chunk). One row at a
# time, in TILE_N-wide chunks: a chunk wholly inside the row loads without bounds checks, the
# last one (past N) is gathered on unaligned rows, a zero-padded plain load on aligned ones (LOADS).


@tile_function
def _long_chunk(a, ia, ib, j, TILE_N: C_INT, CHECK: C_BOOL, LOADS: C_INT):
    return _load(a, ia, ib, j, 1, 1, TILE_N, CHECK, LOADS)


@tile_function
def _long_xw(x, w, ia, ib, j, TILE_N: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL, LOADS: C_INT):
    """(x, w) of chunk j of row (ia, ib), as loaded (w raw, (TILE_N,); x again without a weight)."""
    xt = _long_chunk(x, ia, ib, j, TILE_N, CHECK, LOADS)
    wt = xt
    if HAS_WEIGHT:
        wt = _weight_raw(w, j, TILE_N, CHECK, LOADS)
    return xt, wt


@tile_function
def _long_y_of(xt, wt, y, ia, ib, j, rstd, offset, TILE_N: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL,
               LOADS: C_INT):  # fmt: skip
    """Stores y of chunk j of row (ia, ib) from its x and w (_long_xw)."""
    wp = ct.full((1, 1, TILE_N), 1.0, dtype=ct.float32)
    if HAS_WEIGHT:
        wp = ct.reshape(_weight_factor(wt, offset, CASTING), (1, 1, TILE_N))
    _store(y, ia, ib, j, ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), y.dtype), CHECK, LOADS)


@tile_function
def _long_y(x, w, y, ia, ib, j, rstd, offset, TILE_N: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL,
            LOADS: C_INT):  # fmt: skip
    """y of chunk j of row (ia, ib)."""
    xt, wt = _long_xw(x, w, ia, ib, j, TILE_N, HAS_WEIGHT, CHECK, LOADS)
    _long_y_of(xt, wt, y, ia, ib, j, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, CHECK, LOADS)


@tile_function
def _long_y_ahead(x, w, y, ia, ib, full, rstd, offset, TILE_N: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL,
                  LOADS: C_INT):  # fmt: skip
    """y of row (ia, ib), full > 0 whole chunks and the last one past N (if any), each chunk's loads
    issued before the previous chunk's stores."""
    n = x.shape[2]
    xc, wc = _long_xw(x, w, ia, ib, 0, TILE_N, HAS_WEIGHT, False, LOADS)
    for j in range(full - 1):
        xn, wn = _long_xw(x, w, ia, ib, j + 1, TILE_N, HAS_WEIGHT, False, LOADS)
        _long_y_of(xc, wc, y, ia, ib, j, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, False, LOADS)
        xc, wc = xn, wn
    if full * TILE_N < n:
        xn, wn = _long_xw(x, w, ia, ib, full, TILE_N, HAS_WEIGHT, True, LOADS)
        _long_y_of(xc, wc, y, ia, ib, full - 1, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, False, LOADS)
        _long_y_of(xn, wn, y, ia, ib, full, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, True, LOADS)
    else:
        _long_y_of(xc, wc, y, ia, ib, full - 1, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, False, LOADS)


@tile_function
def _long_dot_term(x, dy, w, ia, ib, j, offset, TILE_N: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL, LOADS: C_INT):
    """wdy * x of chunk j of row (ia, ib), element by element, fp32."""
    wp = _weight(w, j, offset, TILE_N, HAS_WEIGHT, CHECK, LOADS, CAST_GEMMA)
    xf = ct.astype(_long_chunk(x, ia, ib, j, TILE_N, CHECK, LOADS), ct.float32)
    dyf = ct.astype(_long_chunk(dy, ia, ib, j, TILE_N, CHECK, LOADS), ct.float32)
    return dyf * wp * xf


@tile_function
def _long_row_dot(x, dy, w, ia, ib, offset, full, TILE_N: C_INT, HAS_WEIGHT: C_BOOL, LOADS: C_INT):
    """(1, 1, 1) fp32 sum of wdy * x over row (ia, ib): the ``full`` whole chunks unchecked, then
    the last one, past N, checked; added element by element in a chunk-shaped accumulator and
    summed across the block once (as rows_fwd_long's squares: no barrier per chunk)."""
    n = x.shape[2]
    acc = ct.zeros((1, 1, TILE_N), dtype=ct.float32)
    for j in range(full):
        acc += _long_dot_term(x, dy, w, ia, ib, j, offset, TILE_N, HAS_WEIGHT, False, LOADS)
    if full * TILE_N < n:
        acc += _long_dot_term(x, dy, w, ia, ib, full, offset, TILE_N, HAS_WEIGHT, True, LOADS)
    return ct.sum(acc, axis=2, keepdims=True)


@tile_function
def _long_row_c(x, dy, w, rstd_in, ia, ib, offset, full, TILE_N: C_INT, HAS_WEIGHT: C_BOOL, LOADS: C_INT):
    """((1, 1, 1) rstd, c = mean(wdy * xhat)) of row (ia, ib)."""
    rstd = ct.reshape(ct.load(rstd_in, (ia, ib), (1, 1), allow_tma=False), (1, 1, 1))
    dot = _long_row_dot(x, dy, w, ia, ib, offset, full, TILE_N, HAS_WEIGHT, LOADS)
    return rstd, _mean(dot * rstd, x.shape[2], LOADS)


@tile_function
def _long_squares(x, ia, ib, j, TILE_N: C_INT, CHECK: C_BOOL, LOADS: C_INT):
    """(1, 1, TILE_N) fp32 squares of chunk j of row (ia, ib)."""
    f = ct.astype(_long_chunk(x, ia, ib, j, TILE_N, CHECK, LOADS), ct.float32)
    return f * f


@row_kernel
def rows_fwd_long(x: RowArray, w: RowVector, y: RowArray, rstd_out, eps, offset, chunks, TILE_N: C_INT,
                  CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, LOADS: C_INT, UNROLL: C_BOOL,
                  PREFETCH: C_BOOL):  # fmt: skip
    """rows_fwd for long rows: blocks stride over the rows; each row is read twice, for its sum
    of squares and then for y (the second time from L2: the plan's grid keeps the rows in flight
    within it). The squares add up element by element in a chunk-shaped accumulator, summed
    across the block once a row: no barrier per chunk, and tileiras unrolls the first pass (SASS,
    bf16 rows of 8192 in chunks of 2048 on 8 warps: four 16-byte loads a thread in flight; the
    rules' chunks of 4096 at 4 blocks: 63 registers, no stack). chunks: the row's whole chunks,
    N // TILE_N, passed at run time; UNROLL (static layouts only) takes the compile-time N //
    TILE_N instead, so that tileiras knows the trip count: 1.13-1.30x faster on rows of 32-bit
    loads, but on rows of 64-bit loads it unrolled the loops whole and spilled (the rule:
    plan.LONG_UNROLL_WORD_ELEMS; bench/NOTES.md, session 23). PREFETCH: the second pass loads whole
    chunk j + 1 before it stores chunk j (as rows_fwd_flat's: tileiras issues a chunk's loads only
    after the previous chunk's stores; plan.LONG_PREFETCH_*)."""
    n = x.shape[2]
    b = x.shape[1]
    full = n // TILE_N if UNROLL else chunks
    for t in range(ct.bid(0), x.shape[0] * b, ct.num_blocks(0)):
        ia, ib = _tile(t, b)
        acc = ct.zeros((1, 1, TILE_N), dtype=ct.float32)
        for j in range(full):
            acc += _long_squares(x, ia, ib, j, TILE_N, False, LOADS)
        if full * TILE_N < n:
            acc += _long_squares(x, ia, ib, full, TILE_N, True, LOADS)
        rstd = _rstd(ct.sum(acc, axis=2, keepdims=True), n, eps, LOADS)
        if PREFETCH and full > 0:
            _long_y_ahead(x, w, y, ia, ib, full, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, LOADS)
        else:
            for j in range(full):
                _long_y(x, w, y, ia, ib, j, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, False, LOADS)
            if full * TILE_N < n:
                _long_y(x, w, y, ia, ib, full, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, True, LOADS)
        if STORE_RSTD:
            ct.store(rstd_out, (ia, ib), ct.reshape(rstd, (1, 1)), allow_tma=False)


@tile_kernel
def rows_dot_long(x, dy, w, rstd_in, c_out, offset, chunks, TILE_N: C_INT, HAS_WEIGHT: C_BOOL, LOADS: C_INT):
    """The long-row backward's first step: c = mean(wdy * xhat) of each row into c_out ((A, B)
    fp32); blocks stride over the rows. chunks: N // TILE_N (as for rows_fwd_long)."""
    b = x.shape[1]
    for t in range(ct.bid(0), x.shape[0] * b, ct.num_blocks(0)):
        ia, ib = _tile(t, b)
        _, c = _long_row_c(x, dy, w, rstd_in, ia, ib, offset, chunks, TILE_N, HAS_WEIGHT, LOADS)
        ct.store(c_out, (ia, ib), ct.reshape(c, (1, 1)), allow_tma=False)


@tile_function
def _long_dx_of(xr, dr, wp, rstd, c, dx, ia, ib, j, CHECK: C_BOOL, LOADS: C_INT):
    """dx = rstd * (wdy - xhat * c) of chunk j of row (ia, ib) from its loaded x and dy, stored;
    returns (dy, xhat) in fp32."""
    xhat = ct.astype(xr, ct.float32) * rstd
    dyf = ct.astype(dr, ct.float32)
    _store(dx, ia, ib, j, ct.astype((dyf * wp - xhat * c) * rstd, dx.dtype), CHECK, LOADS)
    return dyf, xhat


@tile_function
def _long_dx(x, dy, wp, rstd, c, dx, ia, ib, j, TILE_N: C_INT, CHECK: C_BOOL, LOADS: C_INT):
    """_long_dx_of chunk j of row (ia, ib), loaded here."""
    xr = _long_chunk(x, ia, ib, j, TILE_N, CHECK, LOADS)
    dr = _long_chunk(dy, ia, ib, j, TILE_N, CHECK, LOADS)
    return _long_dx_of(xr, dr, wp, rstd, c, dx, ia, ib, j, CHECK, LOADS)


@tile_function
def _long_chunk_loads(x, dy, rstd_in, c_in, t, j, TILE_N: C_INT, CHECK: C_BOOL, LOADS: C_INT):
    """(rstd, c, x chunk, dy chunk) of chunk j of row t."""
    ia, ib = _tile(t, x.shape[1])
    rstd = ct.reshape(ct.load(rstd_in, (ia, ib), (1, 1), allow_tma=False), (1, 1, 1))
    c = ct.reshape(ct.load(c_in, (ia, ib), (1, 1), allow_tma=False), (1, 1, 1))
    return rstd, c, _long_chunk(x, ia, ib, j, TILE_N, CHECK, LOADS), _long_chunk(dy, ia, ib, j, TILE_N, CHECK, LOADS)


@tile_function
def _bwd_long_chunk(x, dy, w, rstd_in, c_in, dx, dw_partial, offset, TILE_N: C_INT, HAS_WEIGHT: C_BOOL,
                    ROUND_XHAT: C_BOOL, CHECK: C_BOOL, LOADS: C_INT):  # fmt: skip
    """Block (g, j) of rows_bwd_long. fp16 and fp32 blocks read the next row's chunk (clamped to
    the last row) before they work on this one, as rows_bwd's PREFETCH; bf16 blocks do not. The
    measurement (bench/NOTES.md, session 26, s26d, 6 odd long rows, H100): with it fp16 1.07-1.16x
    faster, fp32 1.06-1.10x, bf16 0.76-0.86x (tileiras 13.4 already pipelines bf16's loop; with
    the prefetch it spills 32 bytes a thread)."""
    rows = x.shape[0] * x.shape[1]
    j = ct.bid(1)
    wp = _weight(w, j, offset, TILE_N, HAS_WEIGHT, CHECK, LOADS, CAST_GEMMA)
    acc = ct.zeros((1, 1, TILE_N), dtype=ct.float32)
    if x.dtype == ct.bfloat16:
        for t in range(ct.bid(0), rows, ct.num_blocks(0)):
            ia, ib = _tile(t, x.shape[1])
            rstd, c, xr, dr = _long_chunk_loads(x, dy, rstd_in, c_in, t, j, TILE_N, CHECK, LOADS)
            dyf, xhat = _long_dx_of(xr, dr, wp, rstd, c, dx, ia, ib, j, CHECK, LOADS)
            if HAS_WEIGHT:
                acc += _dw(dyf, xhat, x.dtype, ROUND_XHAT)
    else:
        rstd, c, xr, dr = _long_chunk_loads(x, dy, rstd_in, c_in, ct.minimum(ct.bid(0), rows - 1), j, TILE_N, CHECK,
                                            LOADS)  # fmt: skip
        for t in range(ct.bid(0), rows, ct.num_blocks(0)):
            ia, ib = _tile(t, x.shape[1])
            nxt = ct.minimum(t + ct.num_blocks(0), rows - 1)
            nrstd, nc, nxr, ndr = _long_chunk_loads(x, dy, rstd_in, c_in, nxt, j, TILE_N, CHECK, LOADS)
            dyf, xhat = _long_dx_of(xr, dr, wp, rstd, c, dx, ia, ib, j, CHECK, LOADS)
            if HAS_WEIGHT:
                acc += _dw(dyf, xhat, x.dtype, ROUND_XHAT)
            rstd, c, xr, dr = nrstd, nc, nxr, ndr
    if HAS_WEIGHT:
        ct.store(dw_partial, (ct.bid(0), j), ct.reshape(acc, (1, TILE_N)), allow_tma=False)


@tile_kernel
def rows_bwd_long(x, dy, w, rstd_in, c_in, dx, dw_partial, offset, TILE_N: C_INT, HAS_WEIGHT: C_BOOL,
                  ROUND_XHAT: C_BOOL, LOADS: C_INT):  # fmt: skip
    """The long-row backward's second step, on a 2-D grid (row groups, chunks): block (g, j)
    writes dx of chunk j of rows g, g + G, ... and their dW into dw_partial[g, chunk j] ((G,
    chunks x TILE_N) fp32, whole chunks: the padded columns, past N, sum to nothing the
    reduction stores). Its dW is deterministic: fixed rows per block."""
    if (ct.bid(1) + 1) * TILE_N <= x.shape[2]:
        _bwd_long_chunk(x, dy, w, rstd_in, c_in, dx, dw_partial, offset, TILE_N, HAS_WEIGHT, ROUND_XHAT, False, LOADS)
    else:
        _bwd_long_chunk(x, dy, w, rstd_in, c_in, dx, dw_partial, offset, TILE_N, HAS_WEIGHT, ROUND_XHAT, True, LOADS)


@tile_function
def _onepass_chunk(x, dy, w, rstd, c, dx, dw_partial, ia, ib, j, first, offset, TILE_N: C_INT, HAS_WEIGHT: C_BOOL,
                   ROUND_XHAT: C_BOOL, CHECK: C_BOOL, LOADS: C_INT):  # fmt: skip
    """dx of chunk j of row (ia, ib), and its dy * xhat added into the block's dW partials
    (stored over them for the block's first row, ``first``)."""
    wp = _weight(w, j, offset, TILE_N, HAS_WEIGHT, CHECK, LOADS, CAST_GEMMA)
    dyf, xhat = _long_dx(x, dy, wp, rstd, c, dx, ia, ib, j, TILE_N, CHECK, LOADS)
    if HAS_WEIGHT:
        term = ct.reshape(_dw(dyf, xhat, x.dtype, ROUND_XHAT), (1, TILE_N))
        if first:
            ct.store(dw_partial, (ct.bid(0), j), term, allow_tma=False)
        else:
            prev = ct.load(dw_partial, (ct.bid(0), j), (1, TILE_N), allow_tma=False)
            ct.store(dw_partial, (ct.bid(0), j), prev + term, allow_tma=False)


@row_kernel
def rows_bwd_long_onepass(x: RowArray, dy: RowArray, w: RowVector, rstd_in, dx: RowArray, dw_partial: RowVector,
                          offset, chunks, TILE_N: C_INT, HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL,
                          LOADS: C_INT):  # fmt: skip
    """The long-row backward in one kernel (plan.long_plan's ``onepass``: the rules take it where
    two blocks an SM fit, even 16-bit rows up to about 11900 elements; at one block an SM it ran
    1.4-2.2x slower than the two-kernel backward, bench/NOTES.md, sessions 24-25): blocks stride
    over the rows; a block reduces a row's c = mean(wdy * xhat) over its chunks (x and dy from
    DRAM), then reads the row's chunks again (from L2, where the row it just read still is) for dx,
    and adds each chunk's dy * xhat into its own row of the fp32 dW partials ((G, chunks x TILE_N),
    in L2 too). DRAM sees x and dy once, where rows_dot_long + rows_bwd_long read them twice.
    Deterministic: fixed rows per block, in order. chunks: N // TILE_N (as for rows_fwd_long)."""
    n = x.shape[2]
    b = x.shape[1]
    for t in range(ct.bid(0), x.shape[0] * b, ct.num_blocks(0)):
        ia, ib = _tile(t, b)
        rstd, c = _long_row_c(x, dy, w, rstd_in, ia, ib, offset, chunks, TILE_N, HAS_WEIGHT, LOADS)
        first = t == ct.bid(0)
        for j in range(chunks):
            _onepass_chunk(x, dy, w, rstd, c, dx, dw_partial, ia, ib, j, first, offset, TILE_N, HAS_WEIGHT,
                           ROUND_XHAT, False, LOADS)  # fmt: skip
        if chunks * TILE_N < n:
            _onepass_chunk(x, dy, w, rstd, c, dx, dw_partial, ia, ib, chunks, first, offset, TILE_N, HAS_WEIGHT,
                           ROUND_XHAT, True, LOADS)  # fmt: skip
