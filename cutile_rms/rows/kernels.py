"""Row-tile RMSNorm kernels: the forward is the core forward (see plan.py for when it runs);
the backward runs by default on short rows (``plan.backward_by_default``) and wherever its rules
plan the row with ``mode="rows"``.

    rstd = 1 / sqrt(mean(x^2) + eps),  xhat = x * rstd,  y = xhat * (offset + w)
    wdy = (offset + w) * dy,  c = mean(wdy * xhat),  dx = rstd * (wdy - xhat * c),  dw = sum dy * xhat

Arrays are 3-D, (A, B, N), with unit stride along N and any strides for A and B: a 2-D input is
(M, 1, N), and a head view of a fused QKV projection, (tokens, heads, head_dim) with the
projection's row stride, is read in place. A row tile is (TILE_A, TILE_B) rows, TILE_B dividing
B (plan.py), and the tiles are numbered t = ia * cdiv(B, TILE_B) + ib. One loop form serves two
grids: a grid of one block per row tile (each block runs the loop once) and a persistent grid
(blocks stride over the tiles, the weight loaded once per block).

A row of N elements is held as up to three pieces W0 >= W1 >= W2 (powers of two; W1, W2 = 0
when absent), at column tiles 0, W0 / W1 and (W0 + W1) / W2: 5376 = 4096 + 1024 + 256 pads no
lane where one 8192-wide tile pads 34%. Loads are plain (TMA=False: straight to registers, 128
bits wide when N is a multiple of 16 (what the JIT proves) and the rows are 16-byte aligned;
bench/NOTES.md, sessions 11-12) or may go through TMA (TMA=True). Bounds are checked only where a tile can overhang:
CHECK_A (TILE_A does not divide A) and CHECK_N (the pieces cover more than N: only the last
piece can overhang). Padded lanes load as 0 and add nothing; stores past the bounds are dropped.

Casting modes and the rounding of xhat for dW are the core kernels' (cutile_rms.rmsnorm.kernels).
"""

import cuda.tile as ct

from cutile_rms._launch import experimental_kernel
from cutile_rms.rmsnorm.kernels import (
    RESIDUAL_ADD,
    RESIDUAL_NONE,
    _half_dtype,
    _normalize,
    _pack,
    _unpack,
    _weight_pair,
)

ZERO = ct.PaddingMode.ZERO
C_INT = ct.Constant[int]
C_BOOL = ct.Constant[bool]


@ct.function
def _load(a, ia, ib, j, TILE_A: C_INT, TILE_B: C_INT, W: C_INT, CHECK: C_BOOL, TMA: C_BOOL):
    """Piece j of row tile (ia, ib): zero-padded where CHECK, else without bounds checks."""
    if CHECK:
        return ct.load(a, (ia, ib, j), (TILE_A, TILE_B, W), padding_mode=ZERO, allow_tma=TMA)
    else:
        return ct.load(a, (ia, ib, j), (TILE_A, TILE_B, W), check_bounds=False, allow_tma=TMA)


@ct.function
def _store(a, ia, ib, j, t, CHECK: C_BOOL):
    ct.store(a, (ia, ib, j), t, check_bounds=CHECK, allow_tma=False)


@ct.function
def _weight(w, j, offset, W: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL):
    """(1, 1, W) fp32 offset + w of piece j (1 without a weight)."""
    if HAS_WEIGHT:
        if CHECK:
            wt = ct.load(w, (j,), (W,), padding_mode=ZERO, allow_tma=False)
        else:
            wt = ct.load(w, (j,), (W,), check_bounds=False, allow_tma=False)
        return ct.reshape(ct.astype(wt, ct.float32) + offset, (1, 1, W))
    else:
        return ct.full((1, 1, W), 1.0, dtype=ct.float32)


@ct.function
def _weights(w, offset, W0: C_INT, W1: C_INT, W2: C_INT, HAS_WEIGHT: C_BOOL, CHECK_N: C_BOOL):
    """(1, 1, W) offset + w of each piece (an absent piece gets piece 0's, never used); with
    CHECK_N only the last piece can overhang N."""
    w0 = _weight(w, 0, offset, W0, HAS_WEIGHT, CHECK_N and W1 == 0)
    w1 = w0
    w2 = w0
    if W1 > 0:
        w1 = _weight(w, W0 // W1, offset, W1, HAS_WEIGHT, CHECK_N and W2 == 0)
    if W2 > 0:
        w2 = _weight(w, (W0 + W1) // W2, offset, W2, HAS_WEIGHT, CHECK_N)
    return w0, w1, w2


@ct.function
def _sum_sq(t):
    f = ct.astype(t, ct.float32)
    return ct.sum(f * f, axis=2, keepdims=True)


@ct.function
def _pieces(W0: C_INT, W1: C_INT, W2: C_INT, CHECK_A: C_BOOL, CHECK_N: C_BOOL):
    """(j1, j2, check0, check1, check2): the column-tile indices of pieces 1 and 2, and whether
    each piece's accesses need bounds checks (CHECK_A, or CHECK_N for the last piece)."""
    j1 = W0 // max(W1, 1)
    j2 = (W0 + W1) // max(W2, 1)
    return j1, j2, CHECK_A or (CHECK_N and W1 == 0), CHECK_A or (CHECK_N and W1 > 0 and W2 == 0), CHECK_A or CHECK_N


@ct.function
def _load_row_tile(x, ia, ib, j1, j2, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT, W2: C_INT, C0: C_BOOL,
                   C1: C_BOOL, C2: C_BOOL, TMA: C_BOOL):  # fmt: skip
    """(x0, x1, x2, sum of squares per row) of row tile (ia, ib); an absent piece is x0."""
    x0 = _load(x, ia, ib, 0, TILE_A, TILE_B, W0, C0, TMA)
    ss = _sum_sq(x0)
    x1 = x0
    x2 = x0
    if W1 > 0:
        x1 = _load(x, ia, ib, j1, TILE_A, TILE_B, W1, C1, TMA)
        ss = ss + _sum_sq(x1)
    if W2 > 0:
        x2 = _load(x, ia, ib, j2, TILE_A, TILE_B, W2, C2, TMA)
        ss = ss + _sum_sq(x2)
    return x0, x1, x2, ss


@ct.function
def _add_piece(x, r, s_out, ia, ib, j, TILE_A: C_INT, TILE_B: C_INT, W: C_INT, CHECK: C_BOOL, TMA: C_BOOL,
               STORE: C_BOOL):  # fmt: skip
    """s = x + r (an fp32 add rounded once to s_out's dtype) of one piece, stored to s_out with
    STORE (s_out only names the sum's dtype otherwise)."""
    xf = ct.astype(_load(x, ia, ib, j, TILE_A, TILE_B, W, CHECK, TMA), ct.float32)
    st = ct.astype(xf + ct.astype(_load(r, ia, ib, j, TILE_A, TILE_B, W, CHECK, TMA), ct.float32), s_out.dtype)
    if STORE:
        _store(s_out, ia, ib, j, st, CHECK)
    return st


@ct.function
def _add_row_tile(x, r, s_out, ia, ib, j1, j2, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT, W2: C_INT,
                  C0: C_BOOL, C1: C_BOOL, C2: C_BOOL, TMA: C_BOOL, STORE: C_BOOL):  # fmt: skip
    """_load_row_tile of s = x + r (stored to s_out as it goes with STORE)."""
    s0 = _add_piece(x, r, s_out, ia, ib, 0, TILE_A, TILE_B, W0, C0, TMA, STORE)
    ss = _sum_sq(s0)
    s1 = s0
    s2 = s0
    if W1 > 0:
        s1 = _add_piece(x, r, s_out, ia, ib, j1, TILE_A, TILE_B, W1, C1, TMA, STORE)
        ss = ss + _sum_sq(s1)
    if W2 > 0:
        s2 = _add_piece(x, r, s_out, ia, ib, j2, TILE_A, TILE_B, W2, C2, TMA, STORE)
        ss = ss + _sum_sq(s2)
    return s0, s1, s2, ss


@ct.function
def _tile(t, tiles_b):
    """(ia, ib) of row tile t."""
    return t // tiles_b, t % tiles_b


@ct.kernel
def rows_fwd(x, r, w, y, s_out, rstd_out, eps, offset, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT,
             W2: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, RESIDUAL: C_INT, CHECK_A: C_BOOL,
             CHECK_N: C_BOOL, TMA: C_BOOL):  # fmt: skip
    """y (and rstd, (A, B) fp32, with STORE_RSTD; rstd_out is a placeholder otherwise). RESIDUAL
    (the core kernels' RESIDUAL_*): NONE normalizes x (r and s_out are placeholders); ADD
    normalizes s = x + r (an fp32 add rounded once to s_out's dtype) and stores it to s_out;
    ADD_UNSTORED normalizes s without storing it (post-norm: s_out only names its dtype)."""
    n = x.shape[2]
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    j1, j2, c0, c1, c2 = _pieces(W0, W1, W2, CHECK_A, CHECK_N)
    w0, w1, w2 = _weights(w, offset, W0, W1, W2, HAS_WEIGHT, CHECK_N)
    for t in range(ct.bid(0), ct.cdiv(x.shape[0], TILE_A) * tiles_b, ct.num_blocks(0)):
        ia, ib = _tile(t, tiles_b)
        if RESIDUAL == RESIDUAL_NONE:
            x0, x1, x2, ss = _load_row_tile(x, ia, ib, j1, j2, TILE_A, TILE_B, W0, W1, W2, c0, c1, c2, TMA)
        else:
            x0, x1, x2, ss = _add_row_tile(x, r, s_out, ia, ib, j1, j2, TILE_A, TILE_B, W0, W1, W2, c0, c1, c2, TMA,
                                           RESIDUAL == RESIDUAL_ADD)  # fmt: skip
        rstd = ct.rsqrt(ss / n + eps)
        _store(y, ia, ib, 0, ct.astype(_normalize(x0, rstd, w0, CASTING, HAS_WEIGHT), y.dtype), c0)
        if W1 > 0:
            _store(y, ia, ib, j1, ct.astype(_normalize(x1, rstd, w1, CASTING, HAS_WEIGHT), y.dtype), c1)
        if W2 > 0:
            _store(y, ia, ib, j2, ct.astype(_normalize(x2, rstd, w2, CASTING, HAS_WEIGHT), y.dtype), c2)
        if STORE_RSTD:
            ct.store(rstd_out, (ia, ib), ct.reshape(rstd, (TILE_A, TILE_B)), check_bounds=CHECK_A, allow_tma=False)


@ct.function
def _pair_piece(x, ia, ib, j, TILE_A: C_INT, TILE_B: C_INT, W: C_INT, CHECK: C_BOOL, HALF: C_INT):
    """(even, odd) fp32 elements of word piece j, and their sum of squares per row."""
    lo, hi = _unpack(_load(x, ia, ib, j, TILE_A, TILE_B, W, CHECK, False), HALF)
    return lo, hi, ct.sum(lo * lo, axis=2, keepdims=True) + ct.sum(hi * hi, axis=2, keepdims=True)


@ct.function
def _pair_weights(w, j, offset, W: C_INT, HAS_WEIGHT: C_BOOL, HALF: C_INT):
    """(1, 1, W) fp32 offset + w of word piece j's even and odd elements."""
    lo, hi = _weight_pair(w, j, offset, W, HAS_WEIGHT, HALF)
    return ct.reshape(lo, (1, 1, W)), ct.reshape(hi, (1, 1, W))


@ct.function
def _pair_store(y, ia, ib, j, lo, hi, rstd, wlo, whi, CHECK: C_BOOL, HALF: C_INT, CASTING: C_INT,
                HAS_WEIGHT: C_BOOL):  # fmt: skip
    """y of one word piece: each half normalized as rows_fwd normalizes x (in x's dtype), packed."""
    dt = _half_dtype(HALF)
    ylo = _normalize(ct.astype(lo, dt), rstd, wlo, CASTING, HAS_WEIGHT)
    yhi = _normalize(ct.astype(hi, dt), rstd, whi, CASTING, HAS_WEIGHT)
    _store(y, ia, ib, j, _pack(ylo, yhi, HALF), CHECK)


@experimental_kernel
@ct.kernel
def rows_fwd_pairs(x, w, y, rstd_out, eps, offset, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT, W2: C_INT,
                   HALF: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, CHECK_A: C_BOOL,
                   CHECK_N: C_BOOL):  # fmt: skip
    """rows_fwd on int32 word views of 16-bit rows of even length N (HALF: bf16 or fp16, as the
    core packed backward): x and y (A, B, N / 2) int32, w (N / 2,) int32, a word holding elements
    2k (low half) and 2k + 1 (high half). The pieces W0, W1, W2 count words. For rows whose byte
    length is not a multiple of 16: the JIT cannot prove them 16-byte aligned, so rows_fwd loads
    them 2 bytes an element; as words they load 4 (bench/NOTES.md, session 15)."""
    n = x.shape[2] * 2
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    j1, j2, c0, c1, c2 = _pieces(W0, W1, W2, CHECK_A, CHECK_N)
    wl0, wh0 = _pair_weights(w, 0, offset, W0, HAS_WEIGHT, HALF)
    wl1, wh1, wl2, wh2 = wl0, wh0, wl0, wh0
    if W1 > 0:
        wl1, wh1 = _pair_weights(w, j1, offset, W1, HAS_WEIGHT, HALF)
    if W2 > 0:
        wl2, wh2 = _pair_weights(w, j2, offset, W2, HAS_WEIGHT, HALF)
    for t in range(ct.bid(0), ct.cdiv(x.shape[0], TILE_A) * tiles_b, ct.num_blocks(0)):
        ia, ib = _tile(t, tiles_b)
        l0, h0, ss = _pair_piece(x, ia, ib, 0, TILE_A, TILE_B, W0, c0, HALF)
        l1, h1, l2, h2 = l0, h0, l0, h0
        if W1 > 0:
            l1, h1, part = _pair_piece(x, ia, ib, j1, TILE_A, TILE_B, W1, c1, HALF)
            ss = ss + part
        if W2 > 0:
            l2, h2, part = _pair_piece(x, ia, ib, j2, TILE_A, TILE_B, W2, c2, HALF)
            ss = ss + part
        rstd = ct.rsqrt(ss / n + eps)
        _pair_store(y, ia, ib, 0, l0, h0, rstd, wl0, wh0, c0, HALF, CASTING, HAS_WEIGHT)
        if W1 > 0:
            _pair_store(y, ia, ib, j1, l1, h1, rstd, wl1, wh1, c1, HALF, CASTING, HAS_WEIGHT)
        if W2 > 0:
            _pair_store(y, ia, ib, j2, l2, h2, rstd, wl2, wh2, c2, HALF, CASTING, HAS_WEIGHT)
        if STORE_RSTD:
            ct.store(rstd_out, (ia, ib), ct.reshape(rstd, (TILE_A, TILE_B)), check_bounds=CHECK_A, allow_tma=False)


@ct.function
def _grad_piece(x, dy, ia, ib, j, rstd, wp, TILE_A: C_INT, TILE_B: C_INT, W: C_INT, CHECK: C_BOOL, TMA: C_BOOL):
    """(xhat, dy, wdy) of one piece, fp32, and its share of sum(wdy * xhat) per row."""
    xhat = ct.astype(_load(x, ia, ib, j, TILE_A, TILE_B, W, CHECK, TMA), ct.float32) * rstd
    dyf = ct.astype(_load(dy, ia, ib, j, TILE_A, TILE_B, W, CHECK, TMA), ct.float32)
    wdy = dyf * wp
    return xhat, dyf, wdy, ct.sum(wdy * xhat, axis=2, keepdims=True)


@ct.function
def _dw(dyf, xhat, x_dtype, ROUND_XHAT: C_BOOL):
    """dy * xhat of the tile's rows, element by element, xhat rounded to x's dtype first with
    ROUND_XHAT (llama and none casting: the derivative of what the forward computed). The
    block adds them up in a tile-shaped accumulator and sums its rows once, at the end: no
    cross-warp reduction (shared memory and a barrier) per row tile."""
    if ROUND_XHAT:
        xhat = ct.astype(ct.astype(xhat, x_dtype), ct.float32)
    return dyf * xhat


@ct.function
def _store_dw(dw_partial, j, acc, W: C_INT, CHECK: C_BOOL):
    """The sum over a (TILE_A, TILE_B, W) accumulator's rows into row bid of dw_partial."""
    total = ct.sum(ct.sum(acc, axis=0, keepdims=True), axis=1, keepdims=True)
    ct.store(dw_partial, (ct.bid(0), j), ct.reshape(total, (1, W)), check_bounds=CHECK, allow_tma=False)


@ct.kernel
def rows_bwd(x, dy, w, rstd_in, dx, dw_partial, offset, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT,
             W2: C_INT, HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL, CHECK_A: C_BOOL, CHECK_N: C_BOOL,
             TMA: C_BOOL):  # fmt: skip
    """dx, and this block's share of dW into row bid of dw_partial ((grid, N) fp32) with
    HAS_WEIGHT. Blocks take fixed row tiles (bid, bid + grid, ...), so dW is deterministic."""
    n = x.shape[2]
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    j1, j2, c0, c1, c2 = _pieces(W0, W1, W2, CHECK_A, CHECK_N)
    w0, w1, w2 = _weights(w, offset, W0, W1, W2, HAS_WEIGHT, CHECK_N)
    a0 = ct.zeros((TILE_A, TILE_B, W0), dtype=ct.float32)
    if W1 > 0:
        a1 = ct.zeros((TILE_A, TILE_B, W1), dtype=ct.float32)
    if W2 > 0:
        a2 = ct.zeros((TILE_A, TILE_B, W2), dtype=ct.float32)
    for t in range(ct.bid(0), ct.cdiv(x.shape[0], TILE_A) * tiles_b, ct.num_blocks(0)):
        ia, ib = _tile(t, tiles_b)
        if CHECK_A:
            r2 = ct.load(rstd_in, (ia, ib), (TILE_A, TILE_B), padding_mode=ZERO, allow_tma=False)
        else:
            r2 = ct.load(rstd_in, (ia, ib), (TILE_A, TILE_B), check_bounds=False, allow_tma=False)
        rstd = ct.reshape(r2, (TILE_A, TILE_B, 1))
        xh0, dy0, wdy0, c = _grad_piece(x, dy, ia, ib, 0, rstd, w0, TILE_A, TILE_B, W0, c0, TMA)
        if W1 > 0:
            xh1, dy1, wdy1, part = _grad_piece(x, dy, ia, ib, j1, rstd, w1, TILE_A, TILE_B, W1, c1, TMA)
            c = c + part
        if W2 > 0:
            xh2, dy2, wdy2, part = _grad_piece(x, dy, ia, ib, j2, rstd, w2, TILE_A, TILE_B, W2, c2, TMA)
            c = c + part
        c = c / n
        _store(dx, ia, ib, 0, ct.astype((wdy0 - xh0 * c) * rstd, dx.dtype), c0)
        if HAS_WEIGHT:
            a0 += _dw(dy0, xh0, x.dtype, ROUND_XHAT)
        if W1 > 0:
            _store(dx, ia, ib, j1, ct.astype((wdy1 - xh1 * c) * rstd, dx.dtype), c1)
            if HAS_WEIGHT:
                a1 += _dw(dy1, xh1, x.dtype, ROUND_XHAT)
        if W2 > 0:
            _store(dx, ia, ib, j2, ct.astype((wdy2 - xh2 * c) * rstd, dx.dtype), c2)
            if HAS_WEIGHT:
                a2 += _dw(dy2, xh2, x.dtype, ROUND_XHAT)
    if HAS_WEIGHT:
        _store_dw(dw_partial, 0, a0, W0, CHECK_N and W1 == 0)
        if W1 > 0:
            _store_dw(dw_partial, j1, a1, W1, CHECK_N and W2 == 0)
        if W2 > 0:
            _store_dw(dw_partial, j2, a2, W2, CHECK_N)


@ct.function
def _pair_grad(x, dy, ia, ib, j, rstd, wlo, whi, TILE_A: C_INT, TILE_B: C_INT, W: C_INT, CHECK: C_BOOL,
               HALF: C_INT):  # fmt: skip
    """_grad_piece of word piece j: (xhat, dy, wdy) as (even, odd) fp32 pairs, and its share of
    sum(wdy * xhat) per row."""
    x_lo, x_hi = _unpack(_load(x, ia, ib, j, TILE_A, TILE_B, W, CHECK, False), HALF)
    dy_lo, dy_hi = _unpack(_load(dy, ia, ib, j, TILE_A, TILE_B, W, CHECK, False), HALF)
    xh_lo = x_lo * rstd
    xh_hi = x_hi * rstd
    wdy_lo = dy_lo * wlo
    wdy_hi = dy_hi * whi
    part = ct.sum(wdy_lo * xh_lo, axis=2, keepdims=True) + ct.sum(wdy_hi * xh_hi, axis=2, keepdims=True)
    return xh_lo, xh_hi, dy_lo, dy_hi, wdy_lo, wdy_hi, part


@ct.function
def _pair_dx(dx, ia, ib, j, xh_lo, xh_hi, wdy_lo, wdy_hi, c, rstd, CHECK: C_BOOL, HALF: C_INT):
    """Word piece j of dx = rstd * (wdy - xhat * c), packed."""
    _store(dx, ia, ib, j, _pack((wdy_lo - xh_lo * c) * rstd, (wdy_hi - xh_hi * c) * rstd, HALF), CHECK)


@ct.function
def _store_dw_pair(dw_partial, j, acc_lo, acc_hi, W: C_INT, CHECK: C_BOOL):
    """The sums over (TILE_A, TILE_B, W) accumulators' rows into dw_partial[bid, 0 / 1, piece j]
    ((grid, 2, N / 2) fp32: even and odd columns apart, as the core packed backward's)."""
    lo = ct.sum(ct.sum(acc_lo, axis=0, keepdims=True), axis=1, keepdims=True)
    hi = ct.sum(ct.sum(acc_hi, axis=0, keepdims=True), axis=1, keepdims=True)
    ct.store(dw_partial, (ct.bid(0), 0, j), lo, check_bounds=CHECK, allow_tma=False)
    ct.store(dw_partial, (ct.bid(0), 1, j), hi, check_bounds=CHECK, allow_tma=False)


@experimental_kernel
@ct.kernel
def rows_bwd_pairs(x, dy, w, rstd_in, dx, dw_partial, offset, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT,
                   W2: C_INT, HALF: C_INT, HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL, CHECK_A: C_BOOL,
                   CHECK_N: C_BOOL):  # fmt: skip
    """rows_bwd on int32 word views of 16-bit rows of even length N (as rows_fwd_pairs): x, dy and
    dx (A, B, N / 2) int32, w (N / 2,) int32; this block's dW into dw_partial ((grid, 2, N / 2)
    fp32, even and odd columns apart; the core's dw_reduce_packed sums and packs them)."""
    n = x.shape[2] * 2
    hd = _half_dtype(HALF)
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    j1, j2, c0, c1, c2 = _pieces(W0, W1, W2, CHECK_A, CHECK_N)
    wl0, wh0 = _pair_weights(w, 0, offset, W0, HAS_WEIGHT, HALF)
    wl1, wh1, wl2, wh2 = wl0, wh0, wl0, wh0
    a0l = ct.zeros((TILE_A, TILE_B, W0), dtype=ct.float32)
    a0h = ct.zeros((TILE_A, TILE_B, W0), dtype=ct.float32)
    if W1 > 0:
        wl1, wh1 = _pair_weights(w, j1, offset, W1, HAS_WEIGHT, HALF)
        a1l = ct.zeros((TILE_A, TILE_B, W1), dtype=ct.float32)
        a1h = ct.zeros((TILE_A, TILE_B, W1), dtype=ct.float32)
    if W2 > 0:
        wl2, wh2 = _pair_weights(w, j2, offset, W2, HAS_WEIGHT, HALF)
        a2l = ct.zeros((TILE_A, TILE_B, W2), dtype=ct.float32)
        a2h = ct.zeros((TILE_A, TILE_B, W2), dtype=ct.float32)
    for t in range(ct.bid(0), ct.cdiv(x.shape[0], TILE_A) * tiles_b, ct.num_blocks(0)):
        ia, ib = _tile(t, tiles_b)
        if CHECK_A:
            r2 = ct.load(rstd_in, (ia, ib), (TILE_A, TILE_B), padding_mode=ZERO, allow_tma=False)
        else:
            r2 = ct.load(rstd_in, (ia, ib), (TILE_A, TILE_B), check_bounds=False, allow_tma=False)
        rstd = ct.reshape(r2, (TILE_A, TILE_B, 1))
        xl0, xh0, dl0, dh0, vl0, vh0, c = _pair_grad(x, dy, ia, ib, 0, rstd, wl0, wh0, TILE_A, TILE_B, W0, c0, HALF)
        if W1 > 0:
            xl1, xh1, dl1, dh1, vl1, vh1, part = _pair_grad(x, dy, ia, ib, j1, rstd, wl1, wh1, TILE_A, TILE_B, W1, c1,
                                                            HALF)  # fmt: skip
            c = c + part
        if W2 > 0:
            xl2, xh2, dl2, dh2, vl2, vh2, part = _pair_grad(x, dy, ia, ib, j2, rstd, wl2, wh2, TILE_A, TILE_B, W2, c2,
                                                            HALF)  # fmt: skip
            c = c + part
        c = c / n
        _pair_dx(dx, ia, ib, 0, xl0, xh0, vl0, vh0, c, rstd, c0, HALF)
        if HAS_WEIGHT:
            a0l += _dw(dl0, xl0, hd, ROUND_XHAT)
            a0h += _dw(dh0, xh0, hd, ROUND_XHAT)
        if W1 > 0:
            _pair_dx(dx, ia, ib, j1, xl1, xh1, vl1, vh1, c, rstd, c1, HALF)
            if HAS_WEIGHT:
                a1l += _dw(dl1, xl1, hd, ROUND_XHAT)
                a1h += _dw(dh1, xh1, hd, ROUND_XHAT)
        if W2 > 0:
            _pair_dx(dx, ia, ib, j2, xl2, xh2, vl2, vh2, c, rstd, c2, HALF)
            if HAS_WEIGHT:
                a2l += _dw(dl2, xl2, hd, ROUND_XHAT)
                a2h += _dw(dh2, xh2, hd, ROUND_XHAT)
    if HAS_WEIGHT:
        _store_dw_pair(dw_partial, 0, a0l, a0h, W0, CHECK_N and W1 == 0)
        if W1 > 0:
            _store_dw_pair(dw_partial, j1, a1l, a1h, W1, CHECK_N and W2 == 0)
        if W2 > 0:
            _store_dw_pair(dw_partial, j2, a2l, a2h, W2, CHECK_N)
