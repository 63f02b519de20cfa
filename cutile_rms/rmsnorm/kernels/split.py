"""The "split" kernels: a row shared by SPLIT blocks, each holding one TILE_N-wide segment, that
exchange their partial sums through global memory (one pass over memory where the chunked
kernels read every row twice). No block waits for a partner without bound (SPIN_LIMIT)."""

import cuda.tile as ct

from cutile_rms._tile import tile_function, tile_kernel
from cutile_rms.rmsnorm.kernels.common import (
    _DEVICE,
    _RELAXED,
    ZERO,
    _dw_rows,
    _load_tile,
    _normalize,
    _row_wdy_x,
    _store_tile,
    _weight_row,
    _weight_row_plain,
)

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
# block marks its own slot PUT_ASIDE, goes on to its next row tile, and polls once per tile from
# then on. After its last one, a block that put any aside finishes them: with the slots' sum
# where every partner has published by then (the bits the partners used), else by reading the
# whole rows itself, FALLBACK_N columns at a time (x, dy and w are inputs, always readable: the
# torch front end, the one caller that writes dx over dy, plans no split kernel then,
# torch_impl.backward). That sum differs from
# the slots' only in the order of its fp32 adds, well inside the fp32 tolerance; where the
# partners run at once, as planned, nothing is put aside and results are bitwise reproducible.
# The main loop gains one untaken branch: the finishing code sits after it, where it holds no
# registers of the loop. (Reading the row inside the loop instead made tileiras 13.4 spill
# 32-736 bytes per thread in the shipped split configs, sm_90 SASS: bench/NOTES.md, session 13.)
# A poll is one L2 atomic round trip (about 1 us on Hopper); partners of one group start
# together and publish within a few row-tile loads of each other, so 256 polls (~0.25 ms) is far
# past the normal skew and small beside a hang.
SPIN_LIMIT = 256
PUT_ASIDE = 1 << 33
FALLBACK_N = 512

# The split kernels store without TMA (no TMA_STORE constant, unlike the other kinds). With TMA
# stores under the data-dependent "all partners published" branch, tileiras 13.4 code never
# finished on the H200 at occupancy hints of 2 or more, even with POLLS = 1 (no inter-block
# wait at all) and grids of 4 groups that were all resident: forward SPLIT 2, 4 and 8 at
# occupancy 2 and 4, backward SPLIT 8 at occupancy 2 (1000-wide rows in 128-512 segments); the
# same configs with plain stores, or at occupancy 1, ran in 2-8 s including their compile
# (bench/NOTES.md, session 24). Every shipped split entry stored without TMA already.


@tile_function
def _slot_rows(i, TILE_M: ct.Constant[int]):
    return ct.reshape(ct.arange(TILE_M, dtype=ct.int32) + i * TILE_M, (TILE_M, 1))


@tile_function
def _publish(slots, i, s, part, TILE_M: ct.Constant[int]):
    """Publishes part ((TILE_M, 1) fp32, this block's partial sums for row tile i) into
    column s of the slots."""
    bits = ct.astype(ct.bitcast(part, ct.int32), ct.int64) & ct.full((TILE_M, 1), SLOT_BITS, dtype=ct.int64)
    flagged = bits | ct.full((TILE_M, 1), SLOT_FLAG, dtype=ct.int64)
    ct.atomic_xchg(slots, (_slot_rows(i, TILE_M), s), flagged, memory_order=_RELAXED, memory_scope=_DEVICE)


@tile_function
def _read_slots(slots, i, SPLIT: ct.Constant[int], SLOTS_W: ct.Constant[int], TILE_M: ct.Constant[int]):
    """Row tile i's (TILE_M, SLOTS_W) slots, by an atomic add of 0 (always read from L2);
    columns past SPLIT read as published."""
    cols = ct.reshape(ct.arange(SLOTS_W, dtype=ct.int32), (1, SLOTS_W))
    nothing = ct.zeros((TILE_M, SLOTS_W), dtype=ct.int64)
    got = ct.atomic_add(slots, (_slot_rows(i, TILE_M), cols), nothing, memory_order=_RELAXED, memory_scope=_DEVICE)
    return ct.where(cols < SPLIT, got, ct.full((TILE_M, SLOTS_W), SLOT_FLAG, dtype=ct.int64))


@tile_function
def _published(slots, i, limit, SPLIT: ct.Constant[int], SLOTS_W: ct.Constant[int], TILE_M: ct.Constant[int]):
    """Polls row tile i's slots up to limit times until all SPLIT partners have published;
    returns the last (TILE_M, SLOTS_W) read and whether it is complete."""
    got = _read_slots(slots, i, SPLIT, SLOTS_W, TILE_M)
    polls = 1
    while ct.min(got) < SLOT_FLAG and polls < limit:
        got = _read_slots(slots, i, SPLIT, SLOTS_W, TILE_M)
        polls += 1
    return got, ct.min(got) >= SLOT_FLAG


@tile_function
def _slot_sum(got, SLOTS_W: ct.Constant[int], TILE_M: ct.Constant[int]):
    """The (TILE_M, 1) sum of the fp32 partials in a complete read of the slots, added in column
    order: every partner that reads them gets the same bits."""
    bits = ct.astype(got & ct.full((TILE_M, SLOTS_W), SLOT_BITS, dtype=ct.int64), ct.int32)
    return ct.sum(ct.bitcast(bits, ct.float32), axis=1, keepdims=True)


@tile_function
def _put_aside(slots, i, s, TILE_M: ct.Constant[int]):
    """Marks row tile i's slot s (already published) PUT_ASIDE."""
    mark = ct.full((TILE_M, 1), PUT_ASIDE, dtype=ct.int64)
    ct.atomic_add(slots, (_slot_rows(i, TILE_M), s), mark, memory_order=_RELAXED, memory_scope=_DEVICE)


@tile_function
def _aside(slots, i, s, SPLIT: ct.Constant[int], SLOTS_W: ct.Constant[int], TILE_M: ct.Constant[int]):
    """(whether this block, slot column s, put row tile i aside; a read of the tile's slots;
    whether all partners have published by now)."""
    got = _read_slots(slots, i, SPLIT, SLOTS_W, TILE_M)
    cols = ct.reshape(ct.arange(SLOTS_W, dtype=ct.int32), (1, SLOTS_W))
    mine = ct.max(ct.where(cols == s, got, ct.zeros((TILE_M, SLOTS_W), dtype=ct.int64))) >= PUT_ASIDE
    return mine, got, ct.min(got) >= SLOT_FLAG


@tile_function
def _row_sumsq(x, i, TILE_M: ct.Constant[int], TILE_N: ct.Constant[int]):
    """Row tile i's (TILE_M, 1) fp32 sums of squares over whole rows, TILE_N columns at a time."""
    total = ct.zeros((TILE_M, 1), dtype=ct.float32)
    for j in range(ct.cdiv(x.shape[1], TILE_N)):
        total += _sumsq(ct.load(x, (i, j), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=False))
    return total


@tile_function
def _sumsq(xt):
    """A tile's per-row fp32 sum of squares ((TILE_M, 1))."""
    xf = ct.astype(xt, ct.float32)
    return ct.sum(xf * xf, axis=1, keepdims=True)


@tile_function
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
    limit = POLLS  # after a first put-aside, one poll per tile (a partner that late stays late)
    for i in range(g, num_row_tiles, groups):
        xt = _load_tile(x, i, s, TILE_M, TILE_N, LATENCY)
        _publish(slots, i, s, _sumsq(xt), TILE_M)
        got, complete = _published(slots, i, limit, SPLIT, SLOTS_W, TILE_M)
        if complete:
            rstd = ct.rsqrt(_slot_sum(got, SLOTS_W, TILE_M) / n + eps)
            _store_tile(y, i, s, ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), y.dtype), False, True)
            if STORE_RSTD:  # noqa: SIM102 (a compile-time flag, then a runtime test)
                if s == 0:
                    ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))
        else:  # a partner has not run (POLLS): finished after the loop
            _put_aside(slots, i, s, TILE_M)
            put_aside += 1
            limit = 1
    if put_aside > 0:
        for i in range(g, num_row_tiles, groups):
            mine, got, complete = _aside(slots, i, s, SPLIT, SLOTS_W, TILE_M)
            if mine:
                if complete:  # noqa: SIM108 (a kernel: no conditional expressions)
                    total = _slot_sum(got, SLOTS_W, TILE_M)
                else:
                    total = _row_sumsq(x, i, TILE_M, FALLBACK_N)
                rstd = ct.rsqrt(total / n + eps)
                xt = ct.load(x, (i, s), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=False)
                wp = _weight_row_plain(w, s, offset, TILE_N, HAS_WEIGHT)
                _store_tile(y, i, s, ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), y.dtype), False, True)
                if STORE_RSTD:  # noqa: SIM102 (a compile-time flag, then a runtime test)
                    if s == 0:
                        ct.store(rstd_out, (i,), ct.reshape(rstd, (TILE_M,)))


@tile_kernel
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
    LATENCY: ct.Constant[int],
):
    """Split-row forward that stores rstd (see _fwd_split_rows)."""
    _fwd_split_rows(x, w, y, rstd_out, slots, eps, offset, TILE_M, TILE_N, SPLIT, SLOTS_W, POLLS, CASTING, HAS_WEIGHT,
                    True, LATENCY)  # fmt: skip


@tile_kernel
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
    LATENCY: ct.Constant[int],
):
    """Split-row forward without rstd (inference)."""
    _fwd_split_rows(x, w, y, y, slots, eps, offset, TILE_M, TILE_N, SPLIT, SLOTS_W, POLLS, CASTING, HAS_WEIGHT,
                    False, LATENCY)  # fmt: skip


@tile_function
def _wdy_xhat(wdy, xhat):
    """Per-row fp32 sum of wdy * xhat ((TILE_M, 1)): n * c over one segment."""
    return ct.sum(wdy * xhat, axis=1, keepdims=True)


@tile_kernel
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
    limit = POLLS  # as in _fwd_split_rows
    for i in range(g, num_row_tiles, groups):
        xf = ct.astype(_load_tile(x, i, s, TILE_M, TILE_N, LATENCY), ct.float32)
        dyf = ct.astype(_load_tile(dy, i, s, TILE_M, TILE_N, LATENCY), ct.float32)
        rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
        xhat = xf * rstd
        wdy = dyf * wp
        _publish(slots, i, s, _wdy_xhat(wdy, xhat), TILE_M)
        if HAS_WEIGHT:  # needs no c: done while the partners catch up
            dw_acc += _dw_rows(dyf, xhat, x.dtype, ROUND_XHAT)
        got, complete = _published(slots, i, limit, SPLIT, SLOTS_W, TILE_M)
        if complete:
            c = _slot_sum(got, SLOTS_W, TILE_M) / n
            _store_tile(dx, i, s, ct.astype((wdy - xhat * c) * rstd, dx.dtype), False, True)
        else:  # a partner has not run (POLLS): finished after the loop
            _put_aside(slots, i, s, TILE_M)
            put_aside += 1
            limit = 1
    if HAS_WEIGHT:
        ct.store(dw_partial, (g, s), dw_acc)
    if put_aside > 0:
        for i in range(g, num_row_tiles, groups):
            mine, got, complete = _aside(slots, i, s, SPLIT, SLOTS_W, TILE_M)
            if mine:
                rstd = ct.reshape(ct.load(rstd_in, (i,), (TILE_M,), padding_mode=ZERO), (TILE_M, 1))
                if complete:  # the partners' sums by now: the bits they used
                    c = _slot_sum(got, SLOTS_W, TILE_M) / n
                else:  # dy is an input here: no split kernel writes dx over dy (torch_impl.backward)
                    c = _row_wdy_x(x, dy, w, i, offset, TILE_M, FALLBACK_N, HAS_WEIGHT, False) * rstd / n
                xhat = ct.astype(ct.load(x, (i, s), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=False),
                                 ct.float32) * rstd  # fmt: skip
                dyf = ct.astype(ct.load(dy, (i, s), (TILE_M, TILE_N), padding_mode=ZERO, allow_tma=False), ct.float32)
                wdy = dyf * _weight_row_plain(w, s, offset, TILE_N, HAS_WEIGHT)
                _store_tile(dx, i, s, ct.astype((wdy - xhat * c) * rstd, dx.dtype), False, True)
