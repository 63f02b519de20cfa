"""The split flat forward (plan kind "split": plan.split_plan): rows contiguous end to end, read
as one flat array as the flat forward reads them, each row shared by SPLIT blocks that exchange
their sums of squares through the core split kernels' slots (cutile_rms.rmsnorm.kernels.split).

    rstd = 1 / sqrt(mean(x^2) + eps),  y = x * rstd * (offset + w)

Block b takes column segment s = b % SPLIT, columns [s TILE_N, min((s + 1) TILE_N, n)), of rows
g, g + G, ... (g = b // SPLIT, G = grid / SPLIT). The segment's flat elements [fs, fe) have an
interior [a, b) whose ends are 16-byte boundaries (the flat forward's: loaded and stored 16 bytes
a thread through a slice of the flat array) and a head [fs, a) and tail [b, fe) of fewer than V
elements each, gathered and scattered one by one. The interior's weight comes from the flat
forward's shifted copies (rows_weight_shift): copy k = a - fs, chunk s.

One pass over memory: a block holds its segment's x in registers while it waits for its
partners, as the core's split forward does, where the flat forward reads a row twice (its second
pass from L2, which its rows in flight fill past plan.SPLIT_L2_SHARE) and the core's split kernel on
rows whose starts are not 16-byte aligned loads 4 bytes a thread (bench/NOTES.md, session 50).

Batch invariance: a segment's partial is _exact_sum's int64 fixed point over the segment's own
squares, which does not depend on where the 16-byte boundaries fall (the row's position); the
partials add in slot order (_slot_sum). A row's rstd is the same at every position and M.

No block waits for a partner without bound (the core's POLLS, SPIN_LIMIT): a block whose partners
have not published puts the row aside and finishes it after its loop, from the slots where they
have published by then, else from every segment's partial computed by itself, encoded and summed
as the slots are (_own_sum: the same bits)."""

import cuda.tile as ct

from cutile_rms._tile import tile_function, tile_kernel
from cutile_rms.rmsnorm.kernels import _normalize, _weight_factor
from cutile_rms.rmsnorm.kernels.split import SLOT_BITS, SLOT_FLAG, _aside, _publish, _published, _put_aside, _slot_sum
from cutile_rms.rows.kernels.common import C_BOOL, C_INT, ZERO
from cutile_rms.rows.kernels.flat import EXACT_SUM_BITS, FP32_MAX, _exact_scale, _flat_edge, _flat_edge_y


@tile_function
def _exact_scale32(top):
    """_exact_scale(top), 2^k (k = EXACT_SUM_BITS + 126 - top's biased exponent: -81..174, past
    fp32's range), as two fp32 powers of two whose product it is."""
    k = EXACT_SUM_BITS + 126 - ((ct.bitcast(top, ct.int32) >> 23) & 255)
    k1 = ct.minimum(k, 127)
    return ct.bitcast((k1 + 127) << 23, ct.float32), ct.bitcast((k - k1 + 127) << 23, ct.float32)


@tile_function
def _fixed(v, s1, s2):
    """The int64 fixed point of non-negative fp32 values v at the scale s1 s2 (_exact_scale32),
    truncated toward zero, summed ((1,)). v s1 s2 is exact in fp32 (powers of two, the result under
    2^EXACT_SUM_BITS) down to fp32's smallest normal, and below it under 1, truncated to 0 either
    way: the fp64 fixed point's value with one conversion (fp32 -> int64) where it took three
    (fp32 -> fp64, a DMUL, fp64 -> int64; 2-3% of the fp32 forward's time, session 51)."""
    return ct.sum(ct.astype(v * s1 * s2, ct.int64), axis=0, keepdims=True)


@tile_function
def _exact_sum3(p, h, t):
    """(1,) fp32 sum of the non-negative values of three 1-D fp32 tiles taken together, by
    kernels.flat._exact_sum's fixed point (_exact_scale: each value truncated 2^EXACT_SUM_BITS below the
    largest, the int64s summed exactly): it depends on the values only, not on which tile or lane
    holds each. Tiles holding an inf or a NaN take the plain sum."""
    tp = ct.max(p, axis=0, keepdims=True, propagate_nan=True)  # a NaN lane: the plain sum (as _exact_sum)
    th = ct.max(h, axis=0, keepdims=True, propagate_nan=True)
    tt = ct.max(t, axis=0, keepdims=True, propagate_nan=True)
    top = ct.maximum(tp, ct.maximum(th, tt))
    s1, s2 = _exact_scale32(top)
    q = _fixed(p, s1, s2) + _fixed(h, s1, s2) + _fixed(t, s1, s2)
    total = ct.astype(ct.astype(q, ct.float64) / _exact_scale(top), ct.float32)
    plain = ct.sum(p, axis=0, keepdims=True) + ct.sum(h, axis=0, keepdims=True) + ct.sum(t, axis=0, keepdims=True)
    return ct.where(tp <= FP32_MAX, ct.where(th <= FP32_MAX, ct.where(tt <= FP32_MAX, total, plain), plain), plain)


@tile_function
def _segment_bounds(r, s, n, TILE_N: C_INT, V: C_INT):
    """(fs, a, b, fe) of segment s of row r: its flat elements [fs, fe) and their interior [a, b)
    (a: the first 16-byte boundary at or after fs, b: the last at or before fe, never before a;
    an interior may be empty)."""
    fs = r * n + s * TILE_N
    fe = r * n + min(s * TILE_N + TILE_N, n)
    a = ct.assume_divisible_by((fs + V - 1) // V * V, V)
    b = ct.assume_divisible_by(max(fe // V * V, a), V)
    return fs, a, b, fe


@tile_function
def _segment(x, w, w_shift, r, s, n, TILE_N: C_INT, V: C_INT, HAS_WEIGHT: C_BOOL):
    """Segment s of row r: (head x, w, interior x, tail x, w, its exact sum of squares (1,)), w raw
    (x again without a weight), 0 past each part's end. The interior's weight is read by _segment_y,
    after the row's sum: not held in registers while the block waits for its partners."""
    fs, a, b, fe = _segment_bounds(r, s, n, TILE_N, V)
    xh, wh = _flat_edge(x, w, fs, s * TILE_N, min(a, fe), V, HAS_WEIGHT)
    xt, wt = _flat_edge(x, w, b, b - r * n, fe, V, HAS_WEIGHT)
    xi = ct.load(x.slice(axis=0, start=a, stop=b), (0,), (TILE_N,), padding_mode=ZERO, allow_tma=False)
    hf = ct.astype(xh, ct.float32)
    tf = ct.astype(xt, ct.float32)
    xf = ct.astype(xi, ct.float32)
    return xh, wh, xi, xt, wt, _exact_sum3(xf * xf, hf * hf, tf * tf)


@tile_function
def _segment_y(y, w_shift, xh, wh, xi, xt, wt, r, s, n, rstd, offset, TILE_N: C_INT, V: C_INT, CASTING: C_INT,
               HAS_WEIGHT: C_BOOL):  # fmt: skip
    """Stores y of segment s of row r from its loads (_segment) and the row's rstd ((1,) fp32); the
    interior's weight read here, from the shifted copy a - fs, chunk s (in L2: every block of a
    segment reads it)."""
    fs, a, b, fe = _segment_bounds(r, s, n, TILE_N, V)
    wp = ct.full((TILE_N,), 1.0, dtype=ct.float32)
    if HAS_WEIGHT:
        ws = w_shift.slice(axis=0, start=a - fs, stop=a - fs + 1)
        wi = ct.reshape(ct.load(ws, (0, s), (1, TILE_N), check_bounds=False, allow_tma=False), (TILE_N,))
        wp = _weight_factor(wi, offset, CASTING)
    ct.store(y.slice(axis=0, start=a, stop=b), (0,), ct.astype(_normalize(xi, rstd, wp, CASTING, HAS_WEIGHT), y.dtype),
             allow_tma=False)  # fmt: skip
    _flat_edge_y(y, xh, wh, fs, min(a, fe), rstd, offset, V, CASTING, HAS_WEIGHT)
    _flat_edge_y(y, xt, wt, b, fe, rstd, offset, V, CASTING, HAS_WEIGHT)


@tile_function
def _own_sum(x, w, w_shift, r, n, TILE_N: C_INT, V: C_INT, SPLIT: C_INT, SLOTS_W: C_INT, HAS_WEIGHT: C_BOOL):
    """Row r's sum of squares ((1, 1)) from every segment's partial computed here, each encoded
    as _publish encodes it and summed by _slot_sum itself: a put-aside row whose partners never
    published gets the bits of the slots' sum."""
    cols = ct.reshape(ct.arange(SLOTS_W, dtype=ct.int32), (1, SLOTS_W))
    slots = ct.full((1, SLOTS_W), SLOT_FLAG, dtype=ct.int64)  # (columns past SPLIT: read as published, 0.0)
    for k in range(SPLIT):
        xh, wh, xi, xt, wt, part = _segment(x, w, w_shift, r, k, n, TILE_N, V, HAS_WEIGHT)
        bits = ct.astype(ct.bitcast(ct.reshape(part, (1, 1)), ct.int32), ct.int64) & SLOT_BITS
        slots = ct.where(cols == k, bits | SLOT_FLAG, slots)
    return _slot_sum(slots, SLOTS_W, 1)


@tile_function
def _finish(x, w, w_shift, y, rstd_out, total, r, s, n, eps, offset, TILE_N: C_INT, V: C_INT, CASTING: C_INT,
            HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL):  # fmt: skip
    """y of segment s of row r (and its rstd, from segment 0) from the row's sum of squares
    ((1, 1))."""
    rstd = ct.reshape(ct.rsqrt(total / n + eps), (1,))
    xh, wh, xi, xt, wt, part = _segment(x, w, w_shift, r, s, n, TILE_N, V, HAS_WEIGHT)
    _segment_y(y, w_shift, xh, wh, xi, xt, wt, r, s, n, rstd, offset, TILE_N, V, CASTING, HAS_WEIGHT)
    if STORE_RSTD:  # noqa: SIM102 (a compile-time flag, then a runtime test)
        if s == 0:
            ct.store(rstd_out, (r,), rstd, allow_tma=False)


@tile_kernel
def rows_fwd_flat_split(x, w, w_shift, y, rstd_out, slots, eps, offset, n, TILE_N: C_INT, V: C_INT, SPLIT: C_INT,
                        SLOTS_W: C_INT, POLLS: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL,
                        STORE_RSTD: C_BOOL):  # fmt: skip
    """The split flat forward (module docstring): x and y the rows as one flat array of rows x n
    elements, rstd_out (rows,) fp32, w (n,), w_shift (V, SPLIT x TILE_N) from rows_weight_shift,
    slots (rows, SLOTS_W) int64, zero-filled for each launch. n <= SPLIT x TILE_N < n + TILE_N;
    the grid a multiple of SPLIT."""
    s = ct.bid(0) % SPLIT
    g = ct.bid(0) // SPLIT
    groups = ct.num_blocks(0) // SPLIT
    rows = x.shape[0] // n
    put_aside = 0
    limit = POLLS  # after a first put-aside, one poll a row (a partner that late stays late)
    for r in range(g, rows, groups):
        xh, wh, xi, xt, wt, part = _segment(x, w, w_shift, r, s, n, TILE_N, V, HAS_WEIGHT)
        _publish(slots, r, s, ct.reshape(part, (1, 1)), 1)
        got, complete = _published(slots, r, limit, SPLIT, SLOTS_W, 1)
        if complete:
            rstd = ct.reshape(ct.rsqrt(_slot_sum(got, SLOTS_W, 1) / n + eps), (1,))
            _segment_y(y, w_shift, xh, wh, xi, xt, wt, r, s, n, rstd, offset, TILE_N, V, CASTING, HAS_WEIGHT)
            if STORE_RSTD:  # noqa: SIM102 (a compile-time flag, then a runtime test)
                if s == 0:
                    ct.store(rstd_out, (r,), rstd, allow_tma=False)
        else:  # a partner has not run (POLLS): finished after the loop
            _put_aside(slots, r, s, 1)
            put_aside += 1
            limit = 1
    if put_aside > 0:
        for r in range(g, rows, groups):
            mine, got, complete = _aside(slots, r, s, SPLIT, SLOTS_W, 1)
            if mine:
                if complete:  # noqa: SIM108 (a kernel: no conditional expressions)
                    total = _slot_sum(got, SLOTS_W, 1)
                else:
                    total = _own_sum(x, w, w_shift, r, n, TILE_N, V, SPLIT, SLOTS_W, HAS_WEIGHT)
                _finish(x, w, w_shift, y, rstd_out, total, r, s, n, eps, offset, TILE_N, V, CASTING, HAS_WEIGHT,
                        STORE_RSTD)  # fmt: skip
