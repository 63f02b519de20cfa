"""cuTile kernels for RMSNorm: forward, backward and the dW reduction.

Notation follows the math (Triton's layer-norm tutorial):

    rstd = 1 / sqrt(mean(x^2) + eps)          per row, fp32
    xhat = x * rstd
    y    = xhat * (offset + w)                 w = 1 when there is no weight
    wdy  = (offset + w) * dy
    c    = mean(wdy * xhat)                    per row
    dx   = rstd * (wdy - xhat * c)
    dw   = sum over rows of dy * xhat

All arithmetic is fp32 except where a casting mode asks for rounding to the input dtype
(forward only; see ``_normalize``). This module imports nothing but cuda.tile: it is free of
any array framework, and tileiras can compile it ahead of time on a machine without a GPU.

Tiles are loaded with zero padding wherever padded lanes feed a reduction: padded columns add
0 to the sum of squares, padded rows have x = 0 (and, in the backward, rstd = 0 and dy = 0), so
they add nothing to c or to dW, and their stores fall out of bounds and are dropped.

Rows too long for one block's registers can be split across SPLIT cooperating blocks (the
"split" kernels): each holds one TILE_N-wide column segment of a row tile and they exchange
their per-row partial sums through global memory (see ``_publish``). That keeps the one pass
over memory of the tile kernels where the chunked kernels read every row twice. No block waits
for a partner without bound (SPIN_LIMIT).

A row whose length is the sum of two powers of two (5120 = 4096 + 1024) can be held in two
tiles of a row tile, TILE_N and TAIL wide (the TAIL constant of the tile forward and the packed
backward; 0: one tile), the tail at tile index TILE_N // TAIL: no lane is padding, where one
8192-wide tile for a 5120-wide row pads 37% of its lanes.

Two memory knobs are compile-time constants chosen per tuning-table entry (config.py): LATENCY,
the latency hint of the row-tile loads (0: none, the compiler infers it), and TMA_STORE, which
lets the compiler store row tiles through TMA (True) or forbids it (False: plain stores, which
the H200 favours for one-row tiles, bench/NOTES.md).
"""

import cuda.tile as ct

ZERO = ct.PaddingMode.ZERO
_RELAXED = ct.MemoryOrder.RELAXED  # the split kernels' exchanges
_DEVICE = ct.MemoryScope.DEVICE

# Casting modes (kernel Constants; the names and meanings are Liger-Kernel's).
CAST_LLAMA = 0  # fp32 statistics; xhat rounded to the input dtype before the weight multiply
CAST_GEMMA = 1  # everything in fp32, one rounding of y at the end
CAST_NONE = 2  # fp32 mean of squares; rstd, xhat and y computed in the input dtype


@ct.function
def _weight_row(w, j, offset, TILE_N: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool]):
    """(1, TILE_N) fp32 tile of offset + w for column chunk j (1 when there is no weight)."""
    if HAS_WEIGHT:
        wt = ct.load(w, (j,), (TILE_N,), padding_mode=ZERO)
        return ct.reshape(ct.astype(wt, ct.float32) + offset, (1, TILE_N))
    else:
        return ct.full((1, TILE_N), 1.0, dtype=ct.float32)


@ct.function
def _weight_row_plain(w, j, offset, TILE_N: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool]):
    """_weight_row by plain loads (no TMA): for code off a kernel's main path, where a TMA load
    makes tileiras add a producer warp and lower every thread's register budget."""
    if HAS_WEIGHT:
        wt = ct.load(w, (j,), (TILE_N,), padding_mode=ZERO, allow_tma=False)
        return ct.reshape(ct.astype(wt, ct.float32) + offset, (1, TILE_N))
    else:
        return ct.full((1, TILE_N), 1.0, dtype=ct.float32)


@ct.function
def _normalize(xt, rstd, wp, CASTING: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool]):
    """y = xhat * (offset + w) for one (TILE_M, TILE_N) tile, rounded as the casting mode says.

    xt is in the input dtype, rstd is (TILE_M, 1) fp32, wp is (1, TILE_N) fp32. Returns fp32
    for llama/gemma and the input dtype for none; the caller casts to the output dtype.
    """
    if CASTING == CAST_NONE:
        xhat = xt * ct.astype(rstd, xt.dtype)
        if HAS_WEIGHT:
            return xhat * ct.astype(wp, xt.dtype)
        else:
            return xhat
    elif CASTING == CAST_LLAMA:
        xhat = ct.astype(ct.astype(xt, ct.float32) * rstd, xt.dtype)
        if HAS_WEIGHT:
            return ct.astype(xhat, ct.float32) * wp
        else:
            return xhat
    else:
        xhat = ct.astype(xt, ct.float32) * rstd
        if HAS_WEIGHT:
            return xhat * wp
        else:
            return xhat


@ct.function
def _dw_rows(dyf, xhat, x_dtype, ROUND_XHAT: ct.Constant[bool]):
    """(1, TILE_N) sum over the tile's rows of dy * xhat. With ROUND_XHAT (llama and none
    casting) xhat is first rounded to the input dtype, as the forward multiplied the weight by
    that rounded value: this is the exact derivative of what the forward computed."""
    if ROUND_XHAT:
        return ct.sum(dyf * ct.astype(ct.astype(xhat, x_dtype), ct.float32), axis=0, keepdims=True)
    else:
        return ct.sum(dyf * xhat, axis=0, keepdims=True)


@ct.function
def _load_tile(a, i, j, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int], LATENCY: ct.Constant[int]):
    """Tile (i, j) of a, zero-padded, with the latency hint LATENCY (0: none)."""
    if LATENCY == 0:
        return ct.load(a, (i, j), (TILE_M, TILE_N), padding_mode=ZERO)
    else:
        return ct.load(a, (i, j), (TILE_M, TILE_N), padding_mode=ZERO, latency=LATENCY)


@ct.function
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


@ct.function
def _store_tile(a, i, j, t, TMA_STORE: ct.Constant[bool], CHECK_BOUNDS: ct.Constant[bool]):
    """Stores tile t at tile index (i, j) of a; TMA_STORE=False forbids a TMA store."""
    if TMA_STORE:
        ct.store(a, (i, j), t, check_bounds=CHECK_BOUNDS)
    else:
        ct.store(a, (i, j), t, check_bounds=CHECK_BOUNDS, allow_tma=False)


@ct.function
def _add_residual(xt, r, s_out, i, j, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int],
                  CHECK_BOUNDS: ct.Constant[bool], TMA_STORE: ct.Constant[bool],
                  LATENCY: ct.Constant[int]):  # fmt: skip
    """s = x + r for one tile, summed in fp32 and rounded once to s_out's dtype, stored to
    s_out; returns s in that dtype (what the norm then reads, so y = rms_norm(s_out) exactly)."""
    rt = _load_rows(r, i, j, TILE_M, TILE_N, CHECK_BOUNDS, LATENCY)
    st = ct.astype(ct.astype(xt, ct.float32) + ct.astype(rt, ct.float32), s_out.dtype)
    _store_tile(s_out, i, j, st, TMA_STORE, CHECK_BOUNDS)
    return st


@ct.function
def _tail_weight(w, wp, offset, TILE_N: ct.Constant[int], TAIL: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool]):
    """The tail tile's (1, TAIL) offset + w (TAIL > 0); wp itself, unused, when there is no tail."""
    if TAIL > 0:
        return _weight_row(w, TILE_N // TAIL, offset, TAIL, HAS_WEIGHT)
    else:
        return wp


@ct.function
def _fwd_row_tile(
    x,
    r,
    y,
    s_out,
    rstd_out,
    i,
    wp,
    wpt,
    n,
    eps,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    TAIL: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    STORE_RSTD: ct.Constant[bool],
    ADD_RESIDUAL: ct.Constant[bool],
    CHECK_BOUNDS: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Forward of row tile i when a row fits one tile (N <= TILE_N) or, with TAIL > 0, two:
    columns [0, TILE_N) and [TILE_N, TILE_N + TAIL) (N = TILE_N + TAIL; module docstring).
    wp and wpt are the two tiles' offset + w. With ADD_RESIDUAL the row normalized is s = x + r,
    stored to s_out on the way (one pass: s stays on chip); otherwise r and s_out are unused.
    CHECK_BOUNDS=False (the caller has checked N == TILE_N and TILE_M divides M) skips the
    bounds checks."""
    xt = _load_rows(x, i, 0, TILE_M, TILE_N, CHECK_BOUNDS, LATENCY)
    if ADD_RESIDUAL:
        xt = _add_residual(xt, r, s_out, i, 0, TILE_M, TILE_N, CHECK_BOUNDS, TMA_STORE, LATENCY)
    xf = ct.astype(xt, ct.float32)
    sum_sq = ct.sum(xf * xf, axis=1, keepdims=True)
    if TAIL > 0:
        jt = TILE_N // TAIL  # the tail's tile index
        xu = _load_rows(x, i, jt, TILE_M, TAIL, CHECK_BOUNDS, LATENCY)
        if ADD_RESIDUAL:
            xu = _add_residual(xu, r, s_out, i, jt, TILE_M, TAIL, CHECK_BOUNDS, TMA_STORE, LATENCY)
        uf = ct.astype(xu, ct.float32)
        sum_sq = sum_sq + ct.sum(uf * uf, axis=1, keepdims=True)
    rstd = ct.rsqrt(sum_sq / n + eps)
    yt = _normalize(xt, rstd, wp, CASTING, HAS_WEIGHT)
    _store_tile(y, i, 0, ct.astype(yt, y.dtype), TMA_STORE, CHECK_BOUNDS)
    if TAIL > 0:
        _store_tile(y, i, jt, ct.astype(_normalize(xu, rstd, wpt, CASTING, HAS_WEIGHT), y.dtype), TMA_STORE,
                    CHECK_BOUNDS)  # fmt: skip
    if STORE_RSTD:
        ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)), check_bounds=CHECK_BOUNDS)


@ct.function
def _fwd_tile_rows(
    x,
    r,
    w,
    y,
    s_out,
    rstd_out,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    TAIL: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    STORE_RSTD: ct.Constant[bool],
    ADD_RESIDUAL: ct.Constant[bool],
    CHECK_BOUNDS: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Static persistent forward (see _fwd_row_tile): each block loads the weight once and
    strides over the (TILE_M, TILE_N) row tiles bid, bid + grid, bid + 2 grid, ..."""
    n = x.shape[1]
    wp = _weight_row(w, 0, offset, TILE_N, HAS_WEIGHT)
    wpt = _tail_weight(w, wp, offset, TILE_N, TAIL, HAS_WEIGHT)
    for i in range(ct.bid(0), ct.cdiv(x.shape[0], TILE_M), ct.num_blocks(0)):
        _fwd_row_tile(x, r, y, s_out, rstd_out, i, wp, wpt, n, eps, TILE_M, TILE_N, TAIL, CASTING, HAS_WEIGHT,
                      STORE_RSTD, ADD_RESIDUAL, CHECK_BOUNDS, TMA_STORE, LATENCY)  # fmt: skip


@ct.function
def _fwd_chunked_rows(
    x,
    r,
    w,
    y,
    s_out,
    rstd_out,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    STORE_RSTD: ct.Constant[bool],
    ADD_RESIDUAL: ct.Constant[bool],
    SUM_FROM_OUTPUT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Forward for rows of any length: each block takes TILE_M rows at a time and walks their
    columns in TILE_N chunks twice, once for the sum of squares and once to normalize.

    The second pass re-reads x, mostly from L2. With ADD_RESIDUAL it recomputes s = x + r from
    x and r (the same rounding gives the same s), or, with SUM_FROM_OUTPUT (in place, where the
    first pass overwrote r with s), reads s back from s_out. Recomputing avoids ordering the
    second pass's loads after the first pass's stores to the same array. Used by the gather
    mode (a block per row group) and by the persistent mode when a row does not fit one tile.
    """
    n = x.shape[1]
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    num_chunks = ct.cdiv(n, TILE_N)
    for i in range(ct.bid(0), num_row_tiles, ct.num_blocks(0)):
        sumsq = ct.zeros((TILE_M, 1), dtype=ct.float32)
        for j in range(num_chunks):
            xt = _load_tile(x, i, j, TILE_M, TILE_N, LATENCY)
            if ADD_RESIDUAL:
                xt = _add_residual(xt, r, s_out, i, j, TILE_M, TILE_N, True, TMA_STORE, LATENCY)
            xf = ct.astype(xt, ct.float32)
            sumsq += ct.sum(xf * xf, axis=1, keepdims=True)
        rstd = ct.rsqrt(sumsq / n + eps)
        for j in range(num_chunks):
            if SUM_FROM_OUTPUT:
                xt = _load_tile(s_out, i, j, TILE_M, TILE_N, LATENCY)
            else:
                xt = _load_tile(x, i, j, TILE_M, TILE_N, LATENCY)
                if ADD_RESIDUAL:
                    rt = _load_tile(r, i, j, TILE_M, TILE_N, LATENCY)
                    xt = ct.astype(ct.astype(xt, ct.float32) + ct.astype(rt, ct.float32), s_out.dtype)
            wp = _weight_row(w, j, offset, TILE_N, HAS_WEIGHT)
            yt = _normalize(xt, rstd, wp, CASTING, HAS_WEIGHT)
            _store_tile(y, i, j, ct.astype(yt, y.dtype), TMA_STORE, True)
        if STORE_RSTD:
            ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))


# Split rows. A block publishes the partial sums of its segment of a row tile as one int64
# slot per row, SLOT_FLAG | the fp32 bits, with a relaxed atomic exchange: the value carries
# its own ready flag, so no fence has to order it after the block's other writes (a fenced
# counter cost 1.5-2 us per row tile on the H200, bench/NOTES.md). The slots start at zero
# (allocated zeroed for every launch) and each is written once per launch.
SLOT_FLAG = 1 << 32
SLOT_BITS = (1 << 32) - 1

# No block waits on another without bound (issue #20). CUDA runs the blocks of a launch at once
# only for cooperative launches and within a cluster; NCCL kernels on another stream, an MPS
# thread limit, green contexts or a profiler can keep a partner from starting while the rest of
# its group holds SMs. So a block polls a row tile's slots at most POLLS times (a kernel
# constant: SPIN_LIMIT on a GPU; 1 in the CPU interpreter, which runs blocks one at a time, so a
# block there never sees a later block's writes). If a partner has still not published, the
# block marks its own slot PUT_ASIDE and goes on to its next row tile. After its last one, a
# block that put any aside finishes them by reading their whole rows itself, FALLBACK_N columns
# at a time (x, dy and w are inputs, always readable). That sum differs from the slots' only in
# the order of its fp32 adds, well inside the fp32 tolerance; where the partners run at once,
# as planned, nothing is put aside and results are bitwise reproducible.
# The main loop gains one untaken branch: the finishing code sits after it, where it holds no
# registers of the loop. (Reading the row inside the loop instead made tileiras 13.4 spill
# 32-736 bytes per thread in the shipped split configs, sm_90 SASS: bench/NOTES.md, session 13.)
# A poll is one L2 atomic round trip (about 1 us on Hopper); partners of one group start
# together and publish within a few row-tile loads of each other, so 256 polls (~0.25 ms) is far
# past the normal skew and small beside a hang.
SPIN_LIMIT = 256
PUT_ASIDE = 1 << 33
FALLBACK_N = 512


@ct.function
def _slot_rows(i, TILE_M: ct.Constant[int]):
    return ct.reshape(ct.arange(TILE_M, dtype=ct.int32) + i * TILE_M, (TILE_M, 1))


@ct.function
def _publish(slots, i, s, part, TILE_M: ct.Constant[int]):
    """Publishes part ((TILE_M, 1) fp32, this block's partial sums for row tile i) into
    column s of the slots."""
    bits = ct.astype(ct.bitcast(part, ct.int32), ct.int64) & ct.full((TILE_M, 1), SLOT_BITS, dtype=ct.int64)
    flagged = bits | ct.full((TILE_M, 1), SLOT_FLAG, dtype=ct.int64)
    ct.atomic_xchg(slots, (_slot_rows(i, TILE_M), s), flagged, memory_order=_RELAXED, memory_scope=_DEVICE)


@ct.function
def _read_slots(slots, i, SPLIT: ct.Constant[int], SLOTS_W: ct.Constant[int], TILE_M: ct.Constant[int]):
    """Row tile i's (TILE_M, SLOTS_W) slots, by an atomic add of 0 (always read from L2);
    columns past SPLIT read as published."""
    cols = ct.reshape(ct.arange(SLOTS_W, dtype=ct.int32), (1, SLOTS_W))
    nothing = ct.zeros((TILE_M, SLOTS_W), dtype=ct.int64)
    got = ct.atomic_add(slots, (_slot_rows(i, TILE_M), cols), nothing, memory_order=_RELAXED, memory_scope=_DEVICE)
    return ct.where(cols < SPLIT, got, ct.full((TILE_M, SLOTS_W), SLOT_FLAG, dtype=ct.int64))


@ct.function
def _published(slots, i, SPLIT: ct.Constant[int], SLOTS_W: ct.Constant[int], TILE_M: ct.Constant[int],
               POLLS: ct.Constant[int]):  # fmt: skip
    """Polls row tile i's slots up to POLLS times until all SPLIT partners have published;
    returns the last (TILE_M, SLOTS_W) read and whether it is complete."""
    got = _read_slots(slots, i, SPLIT, SLOTS_W, TILE_M)
    polls = 1
    while ct.min(got) < SLOT_FLAG and polls < POLLS:
        got = _read_slots(slots, i, SPLIT, SLOTS_W, TILE_M)
        polls += 1
    return got, ct.min(got) >= SLOT_FLAG


@ct.function
def _slot_sum(got, SLOTS_W: ct.Constant[int], TILE_M: ct.Constant[int]):
    """The (TILE_M, 1) sum of the fp32 partials in a complete read of the slots, added in column
    order: every partner that reads them gets the same bits."""
    bits = ct.astype(got & ct.full((TILE_M, SLOTS_W), SLOT_BITS, dtype=ct.int64), ct.int32)
    return ct.sum(ct.bitcast(bits, ct.float32), axis=1, keepdims=True)


@ct.function
def _put_aside(slots, i, s, TILE_M: ct.Constant[int]):
    """Marks row tile i's slot s (already published) PUT_ASIDE."""
    mark = ct.full((TILE_M, 1), PUT_ASIDE, dtype=ct.int64)
    ct.atomic_add(slots, (_slot_rows(i, TILE_M), s), mark, memory_order=_RELAXED, memory_scope=_DEVICE)


@ct.function
def _was_put_aside(slots, i, s, SPLIT: ct.Constant[int], SLOTS_W: ct.Constant[int], TILE_M: ct.Constant[int]):
    """Whether this block (slot column s) put row tile i aside."""
    got = _read_slots(slots, i, SPLIT, SLOTS_W, TILE_M)
    cols = ct.reshape(ct.arange(SLOTS_W, dtype=ct.int32), (1, SLOTS_W))
    return ct.max(ct.where(cols == s, got, ct.zeros((TILE_M, SLOTS_W), dtype=ct.int64))) >= PUT_ASIDE


@ct.function
def _row_sumsq(x, i, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int]):
    """Row tile i's (TILE_M, 1) fp32 sums of squares over whole rows, TILE_N columns at a time."""
    total = ct.zeros((TILE_M, 1), dtype=ct.float32)
    for j in range(ct.cdiv(x.shape[1], TILE_N)):
        total += _sumsq(ct.load(x, (i, j), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=False))
    return total


@ct.function
def _sumsq(xt):
    """A tile's per-row fp32 sum of squares ((TILE_M, 1))."""
    xf = ct.astype(xt, ct.float32)
    return ct.sum(xf * xf, axis=1, keepdims=True)


@ct.function
def _fwd_split_rows(
    x,
    w,
    y,
    rstd_out,
    slots,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    SPLIT: ct.Constant[int],
    SLOTS_W: ct.Constant[int],
    POLLS: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    STORE_RSTD: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Forward with each row split across SPLIT blocks (N <= SPLIT x TILE_N).

    Block b takes column segment s = b % SPLIT of the row tiles g, g + G, g + 2G, ... (g = b //
    SPLIT, G = grid / SPLIT): the SPLIT blocks of a group walk the same row tiles in step,
    exchange their sums of squares (_publish, _published) and each normalizes its segment.
    The grid must be a multiple of SPLIT with every group owning at least one row tile. A group
    is fastest when its blocks run at once (config.py plans such grids), but none waits on a
    partner without bound (POLLS, SPIN_LIMIT).
    """
    n = x.shape[1]
    s = ct.bid(0) % SPLIT
    g = ct.bid(0) // SPLIT
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, s, offset, TILE_N, HAS_WEIGHT)
    groups = ct.num_blocks(0) // SPLIT
    put_aside = 0
    for i in range(g, num_row_tiles, groups):
        xt = _load_tile(x, i, s, TILE_M, TILE_N, LATENCY)
        _publish(slots, i, s, _sumsq(xt), TILE_M)
        got, complete = _published(slots, i, SPLIT, SLOTS_W, TILE_M, POLLS)
        if complete:
            rstd = ct.rsqrt(_slot_sum(got, SLOTS_W, TILE_M) / n + eps)
            _store_tile(y, i, s, ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), y.dtype), TMA_STORE, True)
            if STORE_RSTD:  # noqa: SIM102 (a compile-time flag, then a runtime test)
                if s == 0:
                    ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))
        else:  # a partner has not run (POLLS): finished after the loop
            _put_aside(slots, i, s, TILE_M)
            put_aside += 1
    if put_aside > 0:
        for i in range(g, num_row_tiles, groups):
            if _was_put_aside(slots, i, s, SPLIT, SLOTS_W, TILE_M):
                rstd = ct.rsqrt(_row_sumsq(x, i, TILE_M, FALLBACK_N) / n + eps)
                xt = ct.load(x, (i, s), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=False)
                wp = _weight_row_plain(w, s, offset, TILE_N, HAS_WEIGHT)
                _store_tile(y, i, s, ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), y.dtype), False, True)
                if STORE_RSTD:  # noqa: SIM102 (a compile-time flag, then a runtime test)
                    if s == 0:
                        ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))


@ct.kernel
def rms_fwd_split(
    x,
    w,
    y,
    rstd_out,
    slots,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    SPLIT: ct.Constant[int],
    SLOTS_W: ct.Constant[int],
    POLLS: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Split-row forward that stores rstd (see _fwd_split_rows)."""
    _fwd_split_rows(x, w, y, rstd_out, slots, eps, offset, TILE_M, TILE_N, SPLIT, SLOTS_W, POLLS, CASTING, HAS_WEIGHT,
                    True, TMA_STORE, LATENCY)  # fmt: skip


@ct.kernel
def rms_fwd_split_infer(
    x,
    w,
    y,
    slots,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    SPLIT: ct.Constant[int],
    SLOTS_W: ct.Constant[int],
    POLLS: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Split-row forward without rstd (inference)."""
    _fwd_split_rows(x, w, y, y, slots, eps, offset, TILE_M, TILE_N, SPLIT, SLOTS_W, POLLS, CASTING, HAS_WEIGHT,
                    False, TMA_STORE, LATENCY)  # fmt: skip


# Each forward comes as two kernels: the training one stores rstd; the inference one has no
# rstd parameter at all. ct.launch spends host time on every array argument (about 0.5-1.4 us
# each on the H200 host, bench/NOTES.md), which is a large share of a decode-sized call.


@ct.kernel
def rms_fwd_tile(
    x,
    w,
    y,
    rstd_out,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    TAIL: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Single-tile forward that stores rstd (see _fwd_tile_rows)."""
    _fwd_tile_rows(x, x, w, y, y, rstd_out, eps, offset, TILE_M, TILE_N, TAIL, CASTING, HAS_WEIGHT, True, False, True,
                   TMA_STORE, LATENCY)  # fmt: skip


@ct.kernel
def rms_fwd_tile_infer(
    x,
    w,
    y,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    TAIL: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Single-tile forward without rstd (inference)."""
    _fwd_tile_rows(x, x, w, y, y, y, eps, offset, TILE_M, TILE_N, TAIL, CASTING, HAS_WEIGHT, False, False, True,
                   TMA_STORE, LATENCY)  # fmt: skip


@ct.kernel
def rms_fwd_chunked(
    x,
    w,
    y,
    rstd_out,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Chunked forward that stores rstd (see _fwd_chunked_rows)."""
    _fwd_chunked_rows(x, x, w, y, y, rstd_out, eps, offset, TILE_M, TILE_N, CASTING, HAS_WEIGHT, True, False, False,
                      TMA_STORE, LATENCY)  # fmt: skip


@ct.kernel
def rms_fwd_chunked_infer(
    x,
    w,
    y,
    eps,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    CASTING: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Chunked forward without rstd (inference)."""
    _fwd_chunked_rows(x, x, w, y, y, y, eps, offset, TILE_M, TILE_N, CASTING, HAS_WEIGHT, False, False, False,
                      TMA_STORE, LATENCY)  # fmt: skip


@ct.function
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


@ct.function
def _bwd_tile_rows(
    x,
    dy,
    dres,
    w,
    rstd_in,
    dx,
    dr,
    dw_partial,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    ROUND_XHAT: ct.Constant[bool],
    ADD_DRES: ct.Constant[bool],
    TWO_OUTPUTS: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Persistent backward when a row fits one tile (N <= TILE_N).

    dx for each (TILE_M, TILE_N) row tile; the block's share of dW accumulates in an fp32
    (1, TILE_N) tile and is written once, to row bid of dw_partial (grid x N, fp32). The
    assignment of rows to blocks depends only on the grid, so results are deterministic.
    (dres, dr: see _dx_out; unused by the plain RMSNorm kernels.)
    """
    n = x.shape[1]
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, 0, offset, TILE_N, HAS_WEIGHT)
    dw_acc = ct.zeros((1, TILE_N), dtype=ct.float32)
    for i in range(ct.bid(0), num_row_tiles, ct.num_blocks(0)):
        xf = ct.astype(_load_tile(x, i, 0, TILE_M, TILE_N, LATENCY), ct.float32)
        dyf = ct.astype(_load_tile(dy, i, 0, TILE_M, TILE_N, LATENCY), ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xhat = xf * rstd
        wdy = dyf * wp
        c = ct.sum(wdy * xhat, axis=1, keepdims=True) / n
        _dx_out(dx, dr, dres, i, 0, (wdy - xhat * c) * rstd, TILE_M, TILE_N, ADD_DRES, TWO_OUTPUTS, TMA_STORE, LATENCY)
        if HAS_WEIGHT:
            dw_acc += _dw_rows(dyf, xhat, x.dtype, ROUND_XHAT)
    if HAS_WEIGHT:
        ct.store(dw_partial, (ct.bid(0), 0), dw_acc)


@ct.kernel
def rms_bwd_tile(
    x,
    dy,
    w,
    rstd_in,
    dx,
    dw_partial,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    ROUND_XHAT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Single-tile backward (see _bwd_tile_rows)."""
    _bwd_tile_rows(x, dy, dy, w, rstd_in, dx, dx, dw_partial, offset, TILE_M, TILE_N, HAS_WEIGHT, ROUND_XHAT, False,
                   False, TMA_STORE, LATENCY)  # fmt: skip


@ct.kernel
def rms_bwd_row_dot(
    x,
    dy,
    w,
    rstd_in,
    c_out,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
):
    """First step of the chunked backward (rows longer than one tile): c = mean(wdy * xhat)
    per row, into c_out (M,) fp32. Blocks stride over row tiles and walk the columns."""
    n = x.shape[1]
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    for i in range(ct.bid(0), num_row_tiles, ct.num_blocks(0)):
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        acc = _row_wdy_x(x, dy, w, i, offset, TILE_M, TILE_N, HAS_WEIGHT, True)
        ct.store(c_out, (i,), ct.reshape(acc * rstd / n, (TILE_M,)))


@ct.function
def _bwd_chunk_cols(
    x,
    dy,
    dres,
    w,
    rstd_in,
    c_in,
    dx,
    dr,
    dw_partial,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    ROUND_XHAT: ct.Constant[bool],
    ADD_DRES: ct.Constant[bool],
    TWO_OUTPUTS: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Second step of the chunked backward, on a 2-D grid (row groups, column chunks).

    Block (g, j) owns column chunk j of the row tiles g, g + G, g + 2G, ... (G = grid rows):
    it writes dx there and its fp32 share of dW for chunk j to dw_partial[g, chunk j].
    (dres, dr: see _dx_out.)
    """
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    g = ct.bid(0)
    j = ct.bid(1)
    wp = _weight_row(w, j, offset, TILE_N, HAS_WEIGHT)
    dw_acc = ct.zeros((1, TILE_N), dtype=ct.float32)
    for i in range(g, num_row_tiles, ct.num_blocks(0)):
        xf = ct.astype(_load_tile(x, i, j, TILE_M, TILE_N, LATENCY), ct.float32)
        dyf = ct.astype(_load_tile(dy, i, j, TILE_M, TILE_N, LATENCY), ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        c = ct.reshape(ct.load(c_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xhat = xf * rstd
        dxf = (dyf * wp - xhat * c) * rstd
        _dx_out(dx, dr, dres, i, j, dxf, TILE_M, TILE_N, ADD_DRES, TWO_OUTPUTS, TMA_STORE, LATENCY)
        if HAS_WEIGHT:
            dw_acc += _dw_rows(dyf, xhat, x.dtype, ROUND_XHAT)
    if HAS_WEIGHT:
        ct.store(dw_partial, (g, j), dw_acc)


@ct.kernel
def rms_bwd_chunked(
    x,
    dy,
    w,
    rstd_in,
    c_in,
    dx,
    dw_partial,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    ROUND_XHAT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Chunked backward's second step (see _bwd_chunk_cols)."""
    _bwd_chunk_cols(x, dy, dy, w, rstd_in, c_in, dx, dx, dw_partial, offset, TILE_M, TILE_N, HAS_WEIGHT, ROUND_XHAT,
                    False, False, TMA_STORE, LATENCY)  # fmt: skip


@ct.function
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


@ct.function
def _wdy_xhat(wdy, xhat):
    """Per-row fp32 sum of wdy * xhat ((TILE_M, 1)): n * c over one segment."""
    return ct.sum(wdy * xhat, axis=1, keepdims=True)


@ct.kernel
def rms_bwd_split(
    x,
    dy,
    w,
    rstd_in,
    dx,
    dw_partial,
    slots,
    offset,
    TILE_M: ct.Constant[int],
    TILE_N: ct.Constant[int],
    SPLIT: ct.Constant[int],
    SLOTS_W: ct.Constant[int],
    POLLS: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    ROUND_XHAT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """Backward with each row split across SPLIT blocks (see _fwd_split_rows for the layout).

    The partners exchange their partial sums of wdy * xhat to form c; each block writes dx for
    its segment and accumulates its segment of dW in a (1, TILE_N) fp32 tile, stored once to
    dw_partial[g, segment s] (dw_partial: grid / SPLIT rows x N).
    """
    n = x.shape[1]
    s = ct.bid(0) % SPLIT
    g = ct.bid(0) // SPLIT
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    wp = _weight_row(w, s, offset, TILE_N, HAS_WEIGHT)
    dw_acc = ct.zeros((1, TILE_N), dtype=ct.float32)
    groups = ct.num_blocks(0) // SPLIT
    put_aside = 0
    for i in range(g, num_row_tiles, groups):
        xf = ct.astype(_load_tile(x, i, s, TILE_M, TILE_N, LATENCY), ct.float32)
        dyf = ct.astype(_load_tile(dy, i, s, TILE_M, TILE_N, LATENCY), ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xhat = xf * rstd
        wdy = dyf * wp
        _publish(slots, i, s, _wdy_xhat(wdy, xhat), TILE_M)
        if HAS_WEIGHT:  # needs no c: done while the partners catch up
            dw_acc += _dw_rows(dyf, xhat, x.dtype, ROUND_XHAT)
        got, complete = _published(slots, i, SPLIT, SLOTS_W, TILE_M, POLLS)
        if complete:
            c = _slot_sum(got, SLOTS_W, TILE_M) / n
            _store_tile(dx, i, s, ct.astype((wdy - xhat * c) * rstd, dx.dtype), TMA_STORE, True)
        else:  # a partner has not run (POLLS): finished after the loop
            _put_aside(slots, i, s, TILE_M)
            put_aside += 1
    if HAS_WEIGHT:
        ct.store(dw_partial, (g, s), dw_acc)
    if put_aside > 0:
        for i in range(g, num_row_tiles, groups):
            if _was_put_aside(slots, i, s, SPLIT, SLOTS_W, TILE_M):
                rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
                c = _row_wdy_x(x, dy, w, i, offset, TILE_M, FALLBACK_N, HAS_WEIGHT, False) * rstd / n
                xhat = ct.astype(ct.load(x, (i, s), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=False),
                                 ct.float32) * rstd  # fmt: skip
                dyf = ct.astype(ct.load(dy, (i, s), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=False), ct.float32)
                wdy = dyf * _weight_row_plain(w, s, offset, TILE_N, HAS_WEIGHT)
                _store_tile(dx, i, s, ct.astype((wdy - xhat * c) * rstd, dx.dtype), False, True)


# Packed 16-bit backward (kernel "packed"). x, dy, dx and the weight arrive as int32 views: a
# word holds elements 2k (low half) and 2k + 1 (high half) of a row. tileiras 13.4 moves a
# bf16 tile between shared memory and registers one 16-bit element per instruction; as words
# it moves two, and the H200 backward at N = 5120-8192 went from 58-78% to 69-88% of the copy
# ceiling (bench/NOTES.md, session 6). The even and odd columns are two (TILE_M, TILE_W) fp32
# tiles; nothing else changes. HALF names the 16-bit type of the words.
HALF_BF16 = 0
HALF_FP16 = 1
_HIGH_HALF = -65536  # 0xFFFF0000 as an int32


@ct.function
def _half_dtype(HALF: ct.Constant[int]):
    if HALF == HALF_BF16:
        return ct.bfloat16
    else:
        return ct.float16


@ct.function
def _unpack(t, HALF: ct.Constant[int]):
    """(even, odd) fp32 tiles of an int32 tile of 16-bit pairs. bf16 widens by a shift (its
    bits are an fp32's upper half); fp16 goes through int16 (arithmetic shifts keep each half's
    value in int16 range, so the narrowing is exact)."""
    if HALF == HALF_BF16:
        return ct.bitcast(t << 16, ct.float32), ct.bitcast(t & _HIGH_HALF, ct.float32)
    else:
        lo = ct.bitcast(ct.astype((t << 16) >> 16, ct.int16), ct.float16)
        hi = ct.bitcast(ct.astype(t >> 16, ct.int16), ct.float16)
        return ct.astype(lo, ct.float32), ct.astype(hi, ct.float32)


@ct.function
def _pack(lo, hi, HALF: ct.Constant[int]):
    """int32 words of (lo, hi) fp32 tiles, each rounded to the 16-bit type (round to nearest
    even, by astype)."""
    lo16 = ct.astype(ct.bitcast(ct.astype(lo, _half_dtype(HALF)), ct.int16), ct.int32)
    hi16 = ct.astype(ct.bitcast(ct.astype(hi, _half_dtype(HALF)), ct.int16), ct.int32)
    return (lo16 & 65535) | (hi16 << 16)


@ct.function
def _weight_pair(w, j, offset, TILE_W: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool], HALF: ct.Constant[int]):
    """(even, odd) (1, TILE_W) fp32 tiles of offset + w for word tile j (1 without a weight)."""
    if HAS_WEIGHT:
        lo, hi = _unpack(ct.reshape(ct.load(w, (j,), (TILE_W,), padding_mode=ZERO), (1, TILE_W)), HALF)
        return lo + offset, hi + offset
    else:
        one = ct.full((1, TILE_W), 1.0, dtype=ct.float32)
        return one, one


@ct.function
def _packed_terms(x, dy, i, j, rstd, w_lo, w_hi, TILE_M: ct.Constant[int], TILE_W: ct.Constant[int],
                  HALF: ct.Constant[int], LATENCY: ct.Constant[int]):  # fmt: skip
    """Word tile (i, j) of a row tile: (dy, xhat, wdy) as (even, odd) fp32 pairs, and its share
    of sum(wdy * xhat) per row."""
    x_lo, x_hi = _unpack(_load_tile(x, i, j, TILE_M, TILE_W, LATENCY), HALF)
    dy_lo, dy_hi = _unpack(_load_tile(dy, i, j, TILE_M, TILE_W, LATENCY), HALF)
    xhat_lo = x_lo * rstd
    xhat_hi = x_hi * rstd
    wdy_lo = dy_lo * w_lo
    wdy_hi = dy_hi * w_hi
    part = ct.sum(wdy_lo * xhat_lo, axis=1, keepdims=True) + ct.sum(wdy_hi * xhat_hi, axis=1, keepdims=True)
    return dy_lo, dy_hi, xhat_lo, xhat_hi, wdy_lo, wdy_hi, part


@ct.function
def _packed_dx(
    dx, i, j, xhat_lo, xhat_hi, wdy_lo, wdy_hi, c, rstd, HALF: ct.Constant[int], TMA_STORE: ct.Constant[bool]
):
    """Stores word tile (i, j) of dx = rstd * (wdy - xhat * c)."""
    _store_tile(dx, i, j, _pack((wdy_lo - xhat_lo * c) * rstd, (wdy_hi - xhat_hi * c) * rstd, HALF), TMA_STORE, True)


@ct.function
def _store_dw_pair(dw_partial, j, dw_lo, dw_hi, TILE_W: ct.Constant[int]):
    """This block's (even, odd) dW sums of word tile j, to dw_partial[bid, 0 / 1, tile j]."""
    ct.store(dw_partial, (ct.bid(0), 0, j), ct.reshape(dw_lo, (1, 1, TILE_W)))
    ct.store(dw_partial, (ct.bid(0), 1, j), ct.reshape(dw_hi, (1, 1, TILE_W)))


@ct.kernel
def rms_bwd_packed(
    x,
    dy,
    w,
    rstd_in,
    dx,
    dw_partial,
    offset,
    TILE_M: ct.Constant[int],
    TILE_W: ct.Constant[int],
    TAIL_W: ct.Constant[int],
    HALF: ct.Constant[int],
    HAS_WEIGHT: ct.Constant[bool],
    ROUND_XHAT: ct.Constant[bool],
    TMA_STORE: ct.Constant[bool],
    LATENCY: ct.Constant[int],
):
    """_bwd_tile_rows on packed 16-bit words: x, dy, dx are (m, n/2) int32 views, w an (n/2,)
    one; a row fits one (TILE_M, TILE_W) word tile, or, with TAIL_W > 0, a TILE_W-wide and a
    TAIL_W-wide one (n/2 = TILE_W + TAIL_W; module docstring). dW partials: dw_partial is (grid,
    2, n/2) fp32, [b, 0] the even columns' sums and [b, 1] the odd ones' (dw_reduce_packed
    interleaves them)."""
    n = x.shape[1] * 2
    num_row_tiles = ct.cdiv(x.shape[0], TILE_M)
    hd = _half_dtype(HALF)
    w_lo, w_hi = _weight_pair(w, 0, offset, TILE_W, HAS_WEIGHT, HALF)
    dw_lo = ct.zeros((1, TILE_W), dtype=ct.float32)
    dw_hi = ct.zeros((1, TILE_W), dtype=ct.float32)
    if TAIL_W > 0:
        jt = TILE_W // TAIL_W  # the tail's tile index
        v_lo, v_hi = _weight_pair(w, jt, offset, TAIL_W, HAS_WEIGHT, HALF)
        dv_lo = ct.zeros((1, TAIL_W), dtype=ct.float32)
        dv_hi = ct.zeros((1, TAIL_W), dtype=ct.float32)
    for i in range(ct.bid(0), num_row_tiles, ct.num_blocks(0)):
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        dy_lo, dy_hi, xhat_lo, xhat_hi, wdy_lo, wdy_hi, c = _packed_terms(x, dy, i, 0, rstd, w_lo, w_hi, TILE_M, TILE_W,
                                                                          HALF, LATENCY)  # fmt: skip
        if TAIL_W > 0:
            du_lo, du_hi, uhat_lo, uhat_hi, vdu_lo, vdu_hi, cu = _packed_terms(x, dy, i, jt, rstd, v_lo, v_hi, TILE_M,
                                                                               TAIL_W, HALF, LATENCY)  # fmt: skip
            c = c + cu
        c = c / n
        _packed_dx(dx, i, 0, xhat_lo, xhat_hi, wdy_lo, wdy_hi, c, rstd, HALF, TMA_STORE)
        if HAS_WEIGHT:
            dw_lo += _dw_rows(dy_lo, xhat_lo, hd, ROUND_XHAT)
            dw_hi += _dw_rows(dy_hi, xhat_hi, hd, ROUND_XHAT)
        if TAIL_W > 0:
            _packed_dx(dx, i, jt, uhat_lo, uhat_hi, vdu_lo, vdu_hi, c, rstd, HALF, TMA_STORE)
            if HAS_WEIGHT:
                dv_lo += _dw_rows(du_lo, uhat_lo, hd, ROUND_XHAT)
                dv_hi += _dw_rows(du_hi, uhat_hi, hd, ROUND_XHAT)
    if HAS_WEIGHT:
        _store_dw_pair(dw_partial, 0, dw_lo, dw_hi, TILE_W)
        if TAIL_W > 0:
            _store_dw_pair(dw_partial, jt, dv_lo, dv_hi, TAIL_W)


@ct.kernel
def dw_reduce_packed(dw_partial, dw, TILE_G: ct.Constant[int], TILE_W: ct.Constant[int], HALF: ct.Constant[int]):
    """dw = the sum over g of dw_partial[g] ((G, 2, n/2) fp32, even and odd columns apart), in
    a fixed order, stored to dw as packed words ((n/2,) int32 view of a 16-bit dW)."""
    num_g_tiles = ct.cdiv(dw_partial.shape[0], TILE_G)
    num_chunks = ct.cdiv(dw_partial.shape[2], TILE_W)
    for j in range(ct.bid(0), num_chunks, ct.num_blocks(0)):
        lo = ct.zeros((1, 1, TILE_W), dtype=ct.float32)
        hi = ct.zeros((1, 1, TILE_W), dtype=ct.float32)
        for g in range(num_g_tiles):
            lo += ct.sum(ct.load(dw_partial, (g, 0, j), (TILE_G, 1, TILE_W), padding_mode=ZERO), axis=0, keepdims=True)
            hi += ct.sum(ct.load(dw_partial, (g, 1, j), (TILE_G, 1, TILE_W), padding_mode=ZERO), axis=0, keepdims=True)
        ct.store(dw, (j,), _pack(ct.reshape(lo, (TILE_W,)), ct.reshape(hi, (TILE_W,)), HALF))


@ct.kernel
def dw_reduce(dw_partial, dw, TILE_G: ct.Constant[int], TILE_N: ct.Constant[int]):
    """dw[n] = sum over g of dw_partial[g, n], in fp32, in a fixed order; stored in dw's dtype.

    Blocks stride over TILE_N column chunks and walk the G partial rows TILE_G at a time.
    """
    num_g_tiles = ct.cdiv(dw_partial.shape[0], TILE_G)
    num_chunks = ct.cdiv(dw_partial.shape[1], TILE_N)
    for j in range(ct.bid(0), num_chunks, ct.num_blocks(0)):
        acc = ct.zeros((1, TILE_N), dtype=ct.float32)
        for g in range(num_g_tiles):
            acc += ct.sum(ct.load(dw_partial, (g, j), (TILE_G, TILE_N), padding_mode=ZERO), axis=0, keepdims=True)
        ct.store(dw, (j,), ct.astype(ct.reshape(acc, (TILE_N,)), dw.dtype))
