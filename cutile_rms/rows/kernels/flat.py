"""The flat rows kernels (plan kind "flat"): rows_weight_shift, rows_fwd_flat, rows_dot_flat and
rows_bwd_flat, rows contiguous end to end read as one flat array (plan.flat_plan)."""

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
    ZERO,
    _dw,
)

# Flat rows (plan.flat_plan): the forward of rows (16-bit; fp32 from session 38) whose byte length
# is not a multiple of 16, read as one flat array (the caller's rows contiguous end to end). Row r spans [rN, rN + N);
# its interior [a, b) (a, b: the multiples of V = 16 bytes / element nearest inside) starts and
# ends 16-byte aligned where the array's base is (the JIT specializes on that: on another base
# the same code loads narrower, with the same results), so a slice of the flat array from a loads
# and stores it 16 bytes a thread, where a row-shaped view of such rows proves 2 (odd N) or 4 / 8
# bytes. y of the head [rN, a) and the tail [b, rN + N), fewer than V elements each, is gathered
# and scattered element by element (their squares: _flat_row, position-free). The
# weight of the interior starts at column d = a - rN (0 <= d < V), not aligned either: it is read
# from w_shift, V copies of the weight, copy d shifted left by d (rows_weight_shift writes them
# before each forward), so that row d of it starts column d on a 16-byte boundary.


@tile_kernel
def rows_weight_shift(w, w_shift, first, TILE_N: C_INT):
    """w_shift[k, i] = w[i + k + first] (0 outside w) on a (V, chunks) grid: block (k, j) writes
    chunk j of copy k; w_shift is (V, W) of w's dtype, W a multiple of TILE_N. The forward's
    copies start at first = 0, the backward's at -V (rows_dot_flat also reads a row from the
    16-byte boundary before its start)."""
    k = ct.bid(0)
    j = ct.bid(1)
    i = ct.arange(TILE_N, dtype=ct.int32) + (j * TILE_N + k + first)
    t = ct.gather(w, i, mask=i >= 0, padding_value=0)
    ct.store(w_shift, (k, j), ct.reshape(t, (1, TILE_N)), allow_tma=False)


@tile_function
def _flat_chunk(xs, j, TILE_N: C_INT, CHECK: C_BOOL):
    """Chunk j of a slice xs of the flat rows: zero-padded past its end where CHECK, else unchecked."""
    if CHECK:
        return ct.load(xs, (j,), (TILE_N,), padding_mode=ZERO, allow_tma=False)
    else:
        return ct.load(xs, (j,), (TILE_N,), check_bounds=False, allow_tma=False)


@tile_function
def _flat_squares(xs, j, TILE_N: C_INT, CHECK: C_BOOL):
    """(TILE_N,) fp32 squares of chunk j of a slice xs of a row (0 past its end where CHECK)."""
    f = ct.astype(_flat_chunk(xs, j, TILE_N, CHECK), ct.float32)
    return f * f


@tile_function
def _flat_xw(xs, ws, j, TILE_N: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL):
    """(x, w) of chunk j of a row's interior: xs its slice of x, ws its row of w_shift (w raw; x
    again without a weight)."""
    xt = _flat_chunk(xs, j, TILE_N, CHECK)
    wt = xt
    if HAS_WEIGHT:
        wt = ct.reshape(ct.load(ws, (0, j), (1, TILE_N), check_bounds=False, allow_tma=False), (TILE_N,))
    return xt, wt


@tile_function
def _flat_y_of(xt, wt, ys, j, rstd, offset, TILE_N: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL):
    """Stores y of chunk j of a row's interior (ys its slice of y) from its x and w (_flat_xw)."""
    wp = ct.full((TILE_N,), 1.0, dtype=ct.float32)
    if HAS_WEIGHT:
        wp = _weight_factor(wt, offset, CASTING)
    ct.store(ys, (j,), ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), ys.dtype), check_bounds=CHECK,
             allow_tma=False)  # fmt: skip


@tile_function
def _flat_y(xs, ws, ys, j, rstd, offset, TILE_N: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL):
    """y of chunk j of a row's interior: xs, ys its slices of x and y, ws its row of w_shift."""
    xt, wt = _flat_xw(xs, ws, j, TILE_N, HAS_WEIGHT, CHECK)
    _flat_y_of(xt, wt, ys, j, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, CHECK)


@tile_function
def _flat_edge(x, w, start, col, stop, V: C_INT, HAS_WEIGHT: C_BOOL):
    """(x, w) of the elements [start, stop) (fewer than V) of the flat rows, whose first is column
    col: (V,) tiles gathered (0 past stop; w raw, x again without a weight)."""
    i = ct.arange(V, dtype=ct.int32)
    inside = i < stop - start
    xt = ct.gather(x, i + start, mask=inside, padding_value=0)
    wt = xt
    if HAS_WEIGHT:
        wt = ct.gather(w, i + col, mask=inside, padding_value=0)
    return xt, wt


@tile_function
def _flat_edge_y(y, xt, wt, start, stop, rstd, offset, V: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL):
    """y of the elements [start, stop) of the flat rows from their gathered x and w (_flat_edge)."""
    i = ct.arange(V, dtype=ct.int32)
    wp = ct.full((V,), 1.0, dtype=ct.float32)
    if HAS_WEIGHT:
        wp = _weight_factor(wt, offset, CASTING)
    ct.scatter(y, i + start, ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), y.dtype), mask=i < stop - start)


# _exact_sum's fixed point: T lanes below 2^EXACT_SUM_BITS each sum below 2^62 for T <=
# EXACT_SUM_MAX_LANES (plan.flat_plan refuses longer chunks).
EXACT_SUM_BITS = 48
EXACT_SUM_MAX_LANES = 2**14
FP32_MAX = 3.4028234663852886e38


@tile_function
def _exact_scale(top):
    """The fp64 power of two 2^(EXACT_SUM_BITS + 126 - top's biased exponent) that puts every
    value of magnitude up to top ((1,) fp32) under 2^EXACT_SUM_BITS: _exact_sum's fixed point."""
    exponent = (ct.bitcast(top, ct.int32) >> 23) & 255
    return ct.bitcast(ct.astype(1023 + EXACT_SUM_BITS + 126 - exponent, ct.int64) << 52, ct.float64)


@tile_function
def _exact_sum(acc, SIGNED: C_BOOL):
    """(1,) fp32 sum of a 1-D tile of fp32 values (non-negative unless SIGNED) that does not
    depend on where in the tile each value sits: each is scaled by a power of two (from the
    largest magnitude's exponent) and truncated to an int64 (toward zero, a value at a time: the
    same bits wherever it sits), the int64s summed exactly, the total scaled back; each lane
    loses what lies 2^48 below the largest (for non-negative lanes a relative error under (T - 1)
    2^-47: 2^-34 at T = 2^13; signed lanes that cancel keep that error against the largest
    lane, not the sum). Tiles holding an inf or a NaN take the plain sum (a NaN lane would not
    survive the conversion to int64)."""
    size = ct.abs(acc) if SIGNED else acc
    top = ct.max(size, axis=0, keepdims=True, propagate_nan=True)  # a NaN lane: the plain sum
    scale = _exact_scale(top)
    q = ct.astype(ct.astype(acc, ct.float64) * scale, ct.int64)
    total = ct.astype(ct.astype(ct.sum(q, axis=0, keepdims=True), ct.float64) / scale, ct.float32)
    return ct.where(top <= FP32_MAX, total, ct.sum(acc, axis=0, keepdims=True))


@tile_function
def _flat_tail(t, k, TILE_N: C_INT, V: C_INT):
    """(TILE_N // V, V) fp32: a row's tail t ((V,) fp32) at lane group k mod TILE_N // V, 0
    elsewhere: an operand of the accumulator's whole shape, so that a product of two such adds
    into the accumulator fused (FFMA), as the chunks' do; a (1, V) product is computed once,
    rounded, then broadcast and added (SASS: FMUL, FADD), which rounds differently (session 37)."""
    groups = TILE_N // V
    at = ct.reshape(ct.arange(groups, dtype=ct.int32), (groups, 1)) == k % groups
    return ct.where(at, ct.broadcast_to(ct.reshape(t, (1, V)), (groups, V)), 0.0)


@tile_function
def _flat_bounds(s, e, V: C_INT):
    """(lo, a, b) of the flat rows' elements [s, e): the 16-byte boundary at or before s, the
    first at or after s and the last at or before e."""
    lo = ct.assume_divisible_by(s // V * V, V)
    a = ct.assume_divisible_by((s + V - 1) // V * V, V)
    b = ct.assume_divisible_by(e // V * V, V)
    return lo, a, b


@tile_function
def _flat_row(x, w, w_shift, y, rstd_out, r, n, eps, offset, FULL_Q: C_INT, FULL: C_INT, TILE_N: C_INT, V: C_INT,
              CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, PREFETCH: C_BOOL):  # fmt: skip
    """rows_fwd_flat's work on row r. Its sum of squares reads [lo, b) in chunks (lo: the 16-byte
    boundary at or before the row's start; b: the last one inside its end; so 16 bytes a load
    throughout; the first FULL_Q chunks unchecked, the rest checked; FULL_Q < 0: counted at run
    time), the columns before the row's start masked out of the first chunk, then adds the
    tail's squares at their lanes (one V-lane group) last: lane i of the (TILE_N,) accumulator
    holds the row's columns i - d + j TILE_N (d = rN - lo < V) in column order, what lane
    (i - d) mod TILE_N holds for the same row at d = 0. _exact_sum adds the lanes whatever their
    order: a row's rstd is the same at every position (batch invariance). y: the interior [a, b)
    in chunks (FULL unchecked, likewise; PREFETCH: chunk j + 1 loaded before chunk j is stored), the
    head and tail element by element."""
    s = r * n
    e = s + n
    lo, a, b = _flat_bounds(s, e, V)
    xh, wh = _flat_edge(x, w, s, 0, a, V, HAS_WEIGHT)  # the head and tail first: their loads
    xt, wt = _flat_edge(x, w, b, b - s, e, V, HAS_WEIGHT)  # are in flight while the chunks are
    lane = ct.arange(TILE_N, dtype=ct.int32)
    xq = x.slice(axis=0, start=lo, stop=b)
    full_q = FULL_Q if FULL_Q >= 0 else (b - lo) // TILE_N
    acc = ct.where(lane >= s - lo, _flat_squares(xq, 0, TILE_N, True), 0.0)
    for j in range(1, full_q):
        acc += _flat_squares(xq, j, TILE_N, False)
    for j in range(max(1, full_q), ct.cdiv(b - lo, TILE_N)):
        acc += _flat_squares(xq, j, TILE_N, True)
    # The tail's columns are the last of their lanes: added last, in column order, each square
    # fused into its add as the chunks' are (FFMA: an fp32 square is not exact, so a column must
    # add the same way whether it sits in a chunk or in the tail; _flat_tail)
    tail = _flat_tail(ct.astype(xt, ct.float32), (b - lo) // V, TILE_N, V)
    acc = ct.reshape(ct.reshape(acc, (TILE_N // V, V)) + tail * tail, (TILE_N,))
    rstd = ct.rsqrt(_exact_sum(acc, False) * (1.0 / n) + eps)
    xs = x.slice(axis=0, start=a, stop=b)
    ys = y.slice(axis=0, start=a, stop=b)
    ws = w_shift
    if HAS_WEIGHT:
        ws = w_shift.slice(axis=0, start=a - s, stop=a - s + 1)
    full = FULL if FULL >= 0 else (b - a) // TILE_N
    if PREFETCH:
        if full > 0:  # chunk j + 1's loads issued before chunk j's stores (and tileiras' barrier after them)
            xc, wc = _flat_xw(xs, ws, 0, TILE_N, HAS_WEIGHT, False)
            for j in range(full):
                xn, wn = _flat_xw(xs, ws, min(j + 1, full - 1), TILE_N, HAS_WEIGHT, False)
                _flat_y_of(xc, wc, ys, j, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, False)
                xc, wc = xn, wn
    else:
        for j in range(full):
            _flat_y(xs, ws, ys, j, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, False)
    for j in range(full, ct.cdiv(b - a, TILE_N)):
        _flat_y(xs, ws, ys, j, rstd, offset, TILE_N, CASTING, HAS_WEIGHT, True)
    _flat_edge_y(y, xh, wh, s, a, rstd, offset, V, CASTING, HAS_WEIGHT)
    _flat_edge_y(y, xt, wt, b, e, rstd, offset, V, CASTING, HAS_WEIGHT)
    if STORE_RSTD:
        ct.store(rstd_out, (r,), rstd, allow_tma=False)


@tile_kernel
def rows_fwd_flat(x, w, w_shift, y, rstd_out, eps, offset, n, N: C_INT, TILE_N: C_INT, V: C_INT, CASTING: C_INT,
                  HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, PREFETCH: C_BOOL):  # fmt: skip
    """rows_fwd_long for flat rows (above): x and y are the rows as one flat array of rows x n
    elements, rstd_out (rows,) fp32, w (n,), w_shift (V, W) from rows_weight_shift. Blocks stride
    over the rows; a row is read twice in TILE_N chunks (its squares from lo to b, then y of its
    interior: the second time from L2). N > 0 (static): the row length compiled in (n == N), and
    with it the counts of chunks every row holds whole, in [lo, b) (N - (V - 1)) // TILE_N and in
    its interior (N - 2 (V - 1)) // TILE_N; N == 0: n at run time, each row's whole chunks counted.
    PREFETCH: the second pass loads chunk j + 1 before it stores chunk j (plan.FLAT_PREFETCH_*)."""
    if N > 0:
        for r in range(ct.bid(0), x.shape[0] // N, ct.num_blocks(0)):
            _flat_row(x, w, w_shift, y, rstd_out, r, N, eps, offset, (N - (V - 1)) // TILE_N,
                      (N - 2 * (V - 1)) // TILE_N, TILE_N, V, CASTING, HAS_WEIGHT, STORE_RSTD, PREFETCH)  # fmt: skip
    else:
        for r in range(ct.bid(0), x.shape[0] // n, ct.num_blocks(0)):
            _flat_row(x, w, w_shift, y, rstd_out, r, n, eps, offset, -1, -1, TILE_N, V, CASTING, HAS_WEIGHT,
                      STORE_RSTD, PREFETCH)  # fmt: skip


# The flat backward (plan.flat_plan's op "backward"): the same rows as one flat array, in two
# kernels, as the long backward. rows_dot_flat reduces c = mean(wdy * xhat) of each row from its
# 16-byte boundary lo at or before its start, so that its sum is the same at every position
# (_flat_row's order, and _exact_sum over signed lanes); a column's term adds as wdy (rounded) times
# x fused into the add (FFMA) whether it sits in a chunk or in the row's tail (SASS, session 37:
# tileiras fuses even a ct.mul of explicit rounding into the add, so the tail is written the same
# way rather than rounded first). rows_bwd_flat writes dx of each row's interior in chunks,
# 16 bytes a load and store, on a (G, chunks) grid whose G is a multiple of V: every row of block g
# then starts at the same column offset, and its dW terms add up by column in one chunk-shaped
# accumulator, stored once at that offset; block (g, 0) also takes the rows' heads and tails
# (fewer than V elements each) element by element.


@tile_function
def _flat_wdy_x(xq, dq, wq, j, offset, TILE_N: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL):
    """(wdy, x), (TILE_N,) fp32, of chunk j of slices xq, dq of the flat rows, wq the matching
    slice of the shifted weights."""
    xf = ct.astype(_flat_chunk(xq, j, TILE_N, CHECK), ct.float32)
    df = ct.astype(_flat_chunk(dq, j, TILE_N, CHECK), ct.float32)
    if HAS_WEIGHT:
        df = df * _weight_factor(ct.load(wq, (j,), (TILE_N,), check_bounds=False, allow_tma=False), offset, CAST_GEMMA)
    return df, xf


@tile_function
def _flat_edge_grad(x, dy, w, start, col, stop, offset, V: C_INT, HAS_WEIGHT: C_BOOL):
    """(x, dy, offset + w), (V,) fp32, of the flat rows' elements [start, stop) (fewer than V),
    whose first is column col (_flat_edge; 0 past stop, w 1 without a weight)."""
    xt, wt = _flat_edge(x, w, start, col, stop, V, HAS_WEIGHT)
    i = ct.arange(V, dtype=ct.int32)
    dyf = ct.astype(ct.gather(dy, i + start, mask=i < stop - start, padding_value=0), ct.float32)
    wp = ct.full((V,), 1.0, dtype=ct.float32)
    if HAS_WEIGHT:
        wp = _weight_factor(wt, offset, CAST_GEMMA)
    return ct.astype(xt, ct.float32), dyf, wp


@tile_kernel
def rows_dot_flat(x, dy, w, w_shift, rstd_in, c_out, offset, n, TILE_N: C_INT, V: C_INT, HAS_WEIGHT: C_BOOL):
    """The flat backward's first step: c = mean(wdy * xhat) of each row into c_out ((rows,)
    fp32); x, dy the rows as one flat array, rstd_in (rows,) fp32, w_shift the backward's shifted
    weights as one flat array (V copies of W elements, copy k at w[i + k - V]). Blocks stride
    over the rows; a row's [lo, b) in TILE_N chunks (the columns before its start masked out of
    the first), its tail (fewer than V elements) gathered and added last at its lanes: lane i
    holds the columns i - d + j TILE_N (d = rN - lo) in column order, so _exact_sum gives the
    same bits at every d (batch invariance)."""
    lane = ct.arange(TILE_N, dtype=ct.int32)
    width = w_shift.shape[0] // V
    groups = TILE_N // V
    for r in range(ct.bid(0), x.shape[0] // n, ct.num_blocks(0)):
        s = r * n
        e = s + n
        lo, a, b = _flat_bounds(s, e, V)
        xt, dt, wt = _flat_edge_grad(x, dy, w, b, b - s, e, offset, V, HAS_WEIGHT)
        if HAS_WEIGHT:
            dt = dt * wt
        xq = x.slice(axis=0, start=lo, stop=b)
        dq = dy.slice(axis=0, start=lo, stop=b)
        wq = w_shift
        if HAS_WEIGHT:  # copy a - s (the interior's first column), from V - (a - lo): column lo - s
            start = ct.assume_divisible_by((a - s) * width + V - (a - lo), V)
            wq = w_shift.slice(axis=0, start=start, stop=ct.assume_divisible_by((a - s + 1) * width, V))
        full = (b - lo) // TILE_N
        d0, x0 = _flat_wdy_x(xq, dq, wq, 0, offset, TILE_N, HAS_WEIGHT, True)
        acc = ct.where(lane >= s - lo, d0 * x0, 0.0)
        for j in range(1, full):
            dj, xj = _flat_wdy_x(xq, dq, wq, j, offset, TILE_N, HAS_WEIGHT, False)
            acc = acc + dj * xj
        for j in range(max(1, full), ct.cdiv(b - lo, TILE_N)):
            dj, xj = _flat_wdy_x(xq, dq, wq, j, offset, TILE_N, HAS_WEIGHT, True)
            acc = acc + dj * xj
        # the tail's terms, added as the chunks' (wdy rounded, then one FFMA: the same bits; _flat_tail)
        k = (b - lo) // V
        acc = ct.reshape(ct.reshape(acc, (groups, V)) + _flat_tail(dt, k, TILE_N, V) * _flat_tail(xt, k, TILE_N, V),
                         (TILE_N,))  # fmt: skip
        rstd = ct.load(rstd_in, (r,), (1,), allow_tma=False)
        ct.store(c_out, (r,), _exact_sum(acc, True) * rstd * (1.0 / n), allow_tma=False)


@tile_function
def _flat_dx_loads(x, dy, rstd_in, c_in, r, n, head, size, j, TILE_N: C_INT, V: C_INT, CHECK: C_BOOL):
    """(rstd, c, x chunk, dy chunk) of chunk j of row r's interior (from column head, size long)."""
    a = ct.assume_divisible_by(r * n + head, V)
    xt = _flat_chunk(x.slice(axis=0, start=a, stop=a + size), j, TILE_N, CHECK)
    dt = _flat_chunk(dy.slice(axis=0, start=a, stop=a + size), j, TILE_N, CHECK)
    # the chunks first: a one-element tile reaches the block through a barrier (SASS, s37c), which
    # the chunk loads issued after it would wait for
    rstd = ct.load(rstd_in, (r,), (1,), allow_tma=False)
    return rstd, ct.load(c_in, (r,), (1,), allow_tma=False), xt, dt


@tile_function
def _flat_dx(xt, dt, dx, ws, r, n, head, size, j, rstd, c, offset, TILE_N: C_INT, V: C_INT, HAS_WEIGHT: C_BOOL,
             CHECK: C_BOOL):  # fmt: skip
    """dx = rstd * (wdy - xhat * c) of chunk j of row r's interior from its loaded x and dy
    chunks (ws its weights' slice), stored; returns (dy, xhat) in fp32."""
    xhat = ct.astype(xt, ct.float32) * rstd
    dyf = ct.astype(dt, ct.float32)
    wp = ct.full((TILE_N,), 1.0, dtype=ct.float32)
    if HAS_WEIGHT:
        wp = _weight_factor(ct.load(ws, (j,), (TILE_N,), check_bounds=False, allow_tma=False), offset, CAST_GEMMA)
    a = ct.assume_divisible_by(r * n + head, V)
    ct.store(dx.slice(axis=0, start=a, stop=a + size), (j,), ct.astype((dyf * wp - xhat * c) * rstd, dx.dtype),
             check_bounds=CHECK, allow_tma=False)  # fmt: skip
    return dyf, xhat


@tile_function
def _flat_dx_rows(x, dy, ws, rstd_in, c_in, dx, n, head, size, j, offset, TILE_N: C_INT, V: C_INT,
                  HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL, CHECK: C_BOOL, PREFETCH: C_BOOL):  # fmt: skip
    """rows_bwd_flat's chunk j of its rows' interiors (each from column head, size elements
    long): dx stored, the (TILE_N,) sum of their dW terms returned. PREFETCH: each row's chunk
    is read before the previous one is worked on (the next row clamped to the block's last)."""
    acc = ct.zeros((TILE_N,), dtype=ct.float32)
    rows = x.shape[0] // n
    g = ct.bid(0)
    step = ct.num_blocks(0)
    if PREFETCH and g < rows:
        last = g + (rows - 1 - g) // step * step  # the block's last row (its rows share one head)
        rstd, c, xt, dt = _flat_dx_loads(x, dy, rstd_in, c_in, g, n, head, size, j, TILE_N, V, CHECK)
        for r in range(g, rows, step):
            nrstd, nc, nxt, ndt = _flat_dx_loads(x, dy, rstd_in, c_in, ct.minimum(r + step, last), n, head, size, j,
                                                 TILE_N, V, CHECK)  # fmt: skip
            dyf, xhat = _flat_dx(xt, dt, dx, ws, r, n, head, size, j, rstd, c, offset, TILE_N, V, HAS_WEIGHT, CHECK)
            if HAS_WEIGHT:
                acc += _dw(dyf, xhat, x.dtype, ROUND_XHAT)
            rstd, c, xt, dt = nrstd, nc, nxt, ndt
    elif not PREFETCH:
        for r in range(g, rows, step):
            rstd, c, xt, dt = _flat_dx_loads(x, dy, rstd_in, c_in, r, n, head, size, j, TILE_N, V, CHECK)
            dyf, xhat = _flat_dx(xt, dt, dx, ws, r, n, head, size, j, rstd, c, offset, TILE_N, V, HAS_WEIGHT, CHECK)
            if HAS_WEIGHT:
                acc += _dw(dyf, xhat, x.dtype, ROUND_XHAT)
    return acc


@tile_function
def _flat_edge_dx(x, dy, w, dx, start, col, stop, rstd, c, offset, V: C_INT, HAS_WEIGHT: C_BOOL,
                  ROUND_XHAT: C_BOOL):  # fmt: skip
    """dx of the flat rows' elements [start, stop) (fewer than V), whose first is column col,
    element by element; returns their (V,) dW terms (0 past stop)."""
    xf, dyf, wp = _flat_edge_grad(x, dy, w, start, col, stop, offset, V, HAS_WEIGHT)
    xhat = xf * rstd
    i = ct.arange(V, dtype=ct.int32)
    ct.scatter(dx, i + start, ct.astype((dyf * wp - xhat * c) * rstd, dx.dtype), mask=i < stop - start)
    return _dw(dyf, xhat, x.dtype, ROUND_XHAT)


@tile_kernel
def rows_bwd_flat(x, dy, w, w_shift, rstd_in, c_in, dx, dw_partial, offset, n, TILE_N: C_INT, V: C_INT,
                  HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL, PREFETCH: C_BOOL):  # fmt: skip
    """The flat backward's second step on a (G, chunks) grid, G a multiple of V: block (g, j)
    writes dx of chunk j of the interiors of rows g, g + G, ... (16 bytes a load and store) and
    their dW terms, summed in row order, into dw_partial[g] (the (G, n) fp32 partials as one flat
    array) from the interiors' first column, the same in all its rows (G n is a multiple of V);
    block (g, 0) also the rows' heads and tails, element by element. Deterministic: fixed rows
    per block, in order."""
    g = ct.bid(0)
    j = ct.bid(1)
    s0 = g * n
    head = (s0 + V - 1) // V * V - s0  # the interior's first column in every row of block g
    size = ct.assume_divisible_by((s0 + n) // V * V - s0 - head, V)  # and its length
    width = w_shift.shape[0] // V
    ws = w_shift
    if HAS_WEIGHT:  # copy head, from column V (copy k holds w[i + k - V])
        start = ct.assume_divisible_by(head * width + V, V)
        ws = w_shift.slice(axis=0, start=start, stop=ct.assume_divisible_by((head + 1) * width, V))
    if j * TILE_N < size:
        if (j + 1) * TILE_N <= size:
            acc = _flat_dx_rows(x, dy, ws, rstd_in, c_in, dx, n, head, size, j, offset, TILE_N, V, HAS_WEIGHT,
                                ROUND_XHAT, False, PREFETCH)  # fmt: skip
        else:
            acc = _flat_dx_rows(x, dy, ws, rstd_in, c_in, dx, n, head, size, j, offset, TILE_N, V, HAS_WEIGHT,
                                ROUND_XHAT, True, PREFETCH)  # fmt: skip
        if HAS_WEIGHT:
            part = dw_partial.slice(axis=0, start=s0 + head, stop=s0 + head + size)
            ct.store(part, (j,), acc, allow_tma=False)
    if j == 0:
        acc_h = ct.zeros((V,), dtype=ct.float32)
        acc_t = ct.zeros((V,), dtype=ct.float32)
        for r in range(g, x.shape[0] // n, ct.num_blocks(0)):
            s = r * n
            rstd = ct.load(rstd_in, (r,), (1,), allow_tma=False)
            c = ct.load(c_in, (r,), (1,), allow_tma=False)
            acc_h += _flat_edge_dx(x, dy, w, dx, s, 0, s + head, rstd, c, offset, V, HAS_WEIGHT, ROUND_XHAT)
            acc_t += _flat_edge_dx(x, dy, w, dx, s + head + size, head + size, s + n, rstd, c, offset, V, HAS_WEIGHT,
                                   ROUND_XHAT)  # fmt: skip
        if HAS_WEIGHT:
            i = ct.arange(V, dtype=ct.int32)
            ct.scatter(dw_partial, i + s0, acc_h, mask=i < head)
            ct.scatter(dw_partial, i + (s0 + head + size), acc_t, mask=i < n - head - size)
