"""The row-tile kernels (plan kind "tile"): rows_fwd and rows_bwd, a row tile of TILE_A x TILE_B rows,
each row held as up to three power-of-two pieces (plan.plan)."""

import cuda.tile as ct

from cutile_rms._tile import tile_function
from cutile_rms.rmsnorm.kernels import (
    CAST_GEMMA,
    RESIDUAL_ADD,
    RESIDUAL_NONE,
    _normalize,
)
from cutile_rms.rows.kernels.common import (
    C_BOOL,
    C_INT,
    LOADS_GATHER,
    RowArray,
    RowVector,
    _dw,
    _load,
    _mean,
    _rstd,
    _rstd_tile,
    _store,
    _sum_sq,
    _tile,
    _weights,
    row_kernel,
)


@tile_function
def _pieces(W0: C_INT, W1: C_INT, W2: C_INT, CHECK_A: C_BOOL, CHECK_N: C_BOOL):
    """(j1, j2, check0, check1, check2): the column-tile indices of pieces 1 and 2, and whether
    each piece's accesses need bounds checks (CHECK_A, or CHECK_N for the last piece)."""
    j1 = W0 // max(W1, 1)
    j2 = (W0 + W1) // max(W2, 1)
    return j1, j2, CHECK_A or (CHECK_N and W1 == 0), CHECK_A or (CHECK_N and W1 > 0 and W2 == 0), CHECK_A or CHECK_N


@tile_function
def _load_row_tile(x, ia, ib, j1, j2, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT, W2: C_INT, C0: C_BOOL,
                   C1: C_BOOL, C2: C_BOOL, LOADS: C_INT):  # fmt: skip
    """(x0, x1, x2, sum of squares per row) of row tile (ia, ib); an absent piece is x0."""
    x0 = _load(x, ia, ib, 0, TILE_A, TILE_B, W0, C0, LOADS)
    ss = _sum_sq(x0)
    x1 = x0
    x2 = x0
    if W1 > 0:
        x1 = _load(x, ia, ib, j1, TILE_A, TILE_B, W1, C1, LOADS)
        ss = ss + _sum_sq(x1)
    if W2 > 0:
        x2 = _load(x, ia, ib, j2, TILE_A, TILE_B, W2, C2, LOADS)
        ss = ss + _sum_sq(x2)
    return x0, x1, x2, ss


@tile_function
def _add_piece(x, r, s_out, ia, ib, j, TILE_A: C_INT, TILE_B: C_INT, W: C_INT, CHECK: C_BOOL, LOADS: C_INT,
               STORE: C_BOOL):  # fmt: skip
    """s = x + r (an fp32 add rounded once to s_out's dtype) of one piece, stored to s_out with
    STORE (s_out only names the sum's dtype otherwise)."""
    xf = ct.astype(_load(x, ia, ib, j, TILE_A, TILE_B, W, CHECK, LOADS), ct.float32)
    st = ct.astype(xf + ct.astype(_load(r, ia, ib, j, TILE_A, TILE_B, W, CHECK, LOADS), ct.float32), s_out.dtype)
    if STORE:
        _store(s_out, ia, ib, j, st, CHECK, LOADS)
    return st


@tile_function
def _add_row_tile(x, r, s_out, ia, ib, j1, j2, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT, W2: C_INT,
                  C0: C_BOOL, C1: C_BOOL, C2: C_BOOL, LOADS: C_INT, STORE: C_BOOL):  # fmt: skip
    """_load_row_tile of s = x + r (stored to s_out as it goes with STORE)."""
    s0 = _add_piece(x, r, s_out, ia, ib, 0, TILE_A, TILE_B, W0, C0, LOADS, STORE)
    ss = _sum_sq(s0)
    s1 = s0
    s2 = s0
    if W1 > 0:
        s1 = _add_piece(x, r, s_out, ia, ib, j1, TILE_A, TILE_B, W1, C1, LOADS, STORE)
        ss = ss + _sum_sq(s1)
    if W2 > 0:
        s2 = _add_piece(x, r, s_out, ia, ib, j2, TILE_A, TILE_B, W2, C2, LOADS, STORE)
        ss = ss + _sum_sq(s2)
    return s0, s1, s2, ss


@tile_function
def _fwd_tile(x, r, y, s_out, rstd_out, w0, w1, w2, ia, ib, j1, j2, eps, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT,
              W1: C_INT, W2: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, RESIDUAL: C_INT,
              C0: C_BOOL, C1: C_BOOL, C2: C_BOOL, CA: C_BOOL, LOADS: C_INT):  # fmt: skip
    """rows_fwd's work on row tile (ia, ib), with bounds checks on the pieces that say so."""
    if RESIDUAL == RESIDUAL_NONE:
        x0, x1, x2, ss = _load_row_tile(x, ia, ib, j1, j2, TILE_A, TILE_B, W0, W1, W2, C0, C1, C2, LOADS)
    else:
        x0, x1, x2, ss = _add_row_tile(x, r, s_out, ia, ib, j1, j2, TILE_A, TILE_B, W0, W1, W2, C0, C1, C2, LOADS,
                                       RESIDUAL == RESIDUAL_ADD)  # fmt: skip
    _fwd_out(x0, x1, x2, ss, y, rstd_out, w0, w1, w2, ia, ib, j1, j2, x.shape[2], eps, TILE_A, TILE_B, W1, W2,
             CASTING, HAS_WEIGHT, STORE_RSTD, C0, C1, C2, CA, LOADS)  # fmt: skip


@tile_function
def _fwd_out(x0, x1, x2, ss, y, rstd_out, w0, w1, w2, ia, ib, j1, j2, n, eps, TILE_A: C_INT, TILE_B: C_INT,
             W1: C_INT, W2: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, C0: C_BOOL, C1: C_BOOL,
             C2: C_BOOL, CA: C_BOOL, LOADS: C_INT):  # fmt: skip
    """y (and rstd) of row tile (ia, ib) from its pieces and their rows' sums of squares."""
    rstd = _rstd(ss, n, eps, LOADS)
    _store(y, ia, ib, 0, ct.astype(_normalize(x0, rstd, w0, CASTING, HAS_WEIGHT), y.dtype), C0, LOADS)
    if W1 > 0:
        _store(y, ia, ib, j1, ct.astype(_normalize(x1, rstd, w1, CASTING, HAS_WEIGHT), y.dtype), C1, LOADS)
    if W2 > 0:
        _store(y, ia, ib, j2, ct.astype(_normalize(x2, rstd, w2, CASTING, HAS_WEIGHT), y.dtype), C2, LOADS)
    if STORE_RSTD:
        ct.store(rstd_out, (ia, ib), ct.reshape(rstd, (TILE_A, TILE_B)), check_bounds=CA, allow_tma=False)


@tile_function
def _raw_row_tile(x, ia, ib, j1, j2, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT, W2: C_INT, C0: C_BOOL,
                  C1: C_BOOL, C2: C_BOOL, LOADS: C_INT):  # fmt: skip
    """The pieces (x0, x1, x2) of row tile (ia, ib) as loaded; an absent piece is x0."""
    x0 = _load(x, ia, ib, 0, TILE_A, TILE_B, W0, C0, LOADS)
    x1 = x0
    x2 = x0
    if W1 > 0:
        x1 = _load(x, ia, ib, j1, TILE_A, TILE_B, W1, C1, LOADS)
    if W2 > 0:
        x2 = _load(x, ia, ib, j2, TILE_A, TILE_B, W2, C2, LOADS)
    return x0, x1, x2


@tile_function
def _sum_sq3(x0, x1, x2, W1: C_INT, W2: C_INT):
    """The rows' sums of squares over the pieces that are present."""
    ss = _sum_sq(x0)
    if W1 > 0:
        ss = ss + _sum_sq(x1)
    if W2 > 0:
        ss = ss + _sum_sq(x2)
    return ss


@tile_function
def _whole(ia, a, TILE_A: C_INT, CHECK_A: C_BOOL, LOADS: C_INT):
    """Whether row tile ia is known to lie inside A, so that its rows need no bounds checks:
    gathered tiles (LOADS_GATHER) of a kernel that can overhang A (CHECK_A) take the unchecked
    path on every tile but the last (bf16 74: 181 against 214 us, session 16); elsewhere the
    checks are fixed at compile time. Plain tiles keep one path: their checked loads of aligned
    rows are predicated 16-byte loads (SASS, bf16 8 x 1024: 776 instructions checked, 2168 with
    both paths), and both paths spilled 16 x 512 (24 bytes of stack) and ran 131073 x 512 at
    71.3 us against 69.6 at M = 131072 (bench/NOTES.md, session 21). The branch a tile serves
    rows_fwd and rows_bwd without the prefetch; the prefetching rows_bwd asks it of its first
    tile only (``_whole_tiles``)."""
    return _split_a(CHECK_A, LOADS) and (ia + 1) * TILE_A <= a


@tile_function
def _split_a(CHECK_A: C_BOOL, LOADS: C_INT):
    """Whether the tiles can overhang A and are gathered (``_whole``, ``_whole_tiles``)."""
    return LOADS == LOADS_GATHER and CHECK_A


@tile_function
def _whole_tiles(a, tiles, tiles_b, TILE_A: C_INT, CHECK_A: C_BOOL, LOADS: C_INT):
    """The tiles the prefetching rows_bwd runs in its loop: where the tiles are gathered and can
    overhang A, the tiles wholly inside A (the first (A // TILE_A) * tiles_b: t = ia * tiles_b +
    ib), unchecked, the rest left to a checked loop after it (``_tail_start``); all tiles
    elsewhere. A block meets its tiles in the same order as in one loop with a branch a tile, whose
    body held both paths (SASS, bf16 2 x (512 + 256) backward of rows of 678: 829 instructions a
    loop at M = 99999, 402 at 99998; the two loops: 401 and the tail). Session 36, H200 (ab/s36e,
    with config.reduce_tiles): 98981 x 678 204.8 -> 134.7 us, 98980 x 678 168.7 -> 144.9. Tiles
    without the prefetch keep the branch: the static short-row tiles at 8 blocks (64 registers)
    spilled 32 more bytes as two loops and ran bf16 524289 x 72 86.5 -> 122.7 us, 264 333.2 ->
    359.2 (the review of session 36); the forward's 16-row gathered tiles spilled 16 bytes and ran
    within 1%."""
    if _split_a(CHECK_A, LOADS):
        return (a // TILE_A) * tiles_b
    else:
        return tiles


@tile_function
def _tail_start(whole):
    """This block's first tile at or past ``whole`` in its grid-stride order."""
    g = ct.num_blocks(0)
    return ct.bid(0) + ct.cdiv(ct.maximum(whole - ct.bid(0), 0), g) * g


@row_kernel
def rows_fwd(x: RowArray, r: RowArray, w: RowVector, y: RowArray, s_out: RowArray, rstd_out, eps, offset,
             TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT, W2: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL,
             STORE_RSTD: C_BOOL, RESIDUAL: C_INT, CHECK_A: C_BOOL, CHECK_N: C_BOOL, LOADS: C_INT,
             PREFETCH: C_BOOL, LOOP: C_BOOL):  # fmt: skip
    """y (and rstd, (A, B) fp32, with STORE_RSTD; rstd_out is a placeholder otherwise). RESIDUAL
    (the core kernels' RESIDUAL_*): NONE normalizes x (r and s_out are placeholders); ADD
    normalizes s = x + r (an fp32 add rounded once to s_out's dtype) and stores it to s_out;
    ADD_UNSTORED normalizes s without storing it (post-norm: s_out only names its dtype).
    PREFETCH (RESIDUAL_NONE, plain or TMA loads): each iteration loads the block's next tile (the
    last tile again at the end, so always in bounds) before it reduces and stores this one.
    LOOP: the blocks stride over the tiles (any grid); without it the grid must be the tiles:
    block t runs tile t and no loop is compiled (plan.RowsPlan.loop, plan.one_tile, plan.many_tiles,
    plan.lone_tiles, plan.lone_tma)."""
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    tiles = ct.cdiv(x.shape[0], TILE_A) * tiles_b
    j1, j2, c0, c1, c2 = _pieces(W0, W1, W2, CHECK_A, CHECK_N)
    _, _, u0, u1, u2 = _pieces(W0, W1, W2, False, CHECK_N)
    w0, w1, w2 = _weights(w, offset, W0, W1, W2, HAS_WEIGHT, CHECK_N, LOADS, CASTING)
    if PREFETCH and RESIDUAL == RESIDUAL_NONE and LOADS != LOADS_GATHER:
        ia, ib = _tile(ct.minimum(ct.bid(0), tiles - 1), tiles_b)
        x0, x1, x2 = _raw_row_tile(x, ia, ib, j1, j2, TILE_A, TILE_B, W0, W1, W2, c0, c1, c2, LOADS)
        for t in range(ct.bid(0), tiles, ct.num_blocks(0)):
            ia, ib = _tile(t, tiles_b)
            na, nb = _tile(ct.minimum(t + ct.num_blocks(0), tiles - 1), tiles_b)
            nx0, nx1, nx2 = _raw_row_tile(x, na, nb, j1, j2, TILE_A, TILE_B, W0, W1, W2, c0, c1, c2, LOADS)
            ss = _sum_sq3(x0, x1, x2, W1, W2)
            _fwd_out(x0, x1, x2, ss, y, rstd_out, w0, w1, w2, ia, ib, j1, j2, x.shape[2], eps, TILE_A, TILE_B, W1, W2,
                     CASTING, HAS_WEIGHT, STORE_RSTD, c0, c1, c2, CHECK_A, LOADS)  # fmt: skip
            x0, x1, x2 = nx0, nx1, nx2
    elif LOOP:
        for t in range(ct.bid(0), tiles, ct.num_blocks(0)):
            _fwd_at(x, r, y, s_out, rstd_out, w0, w1, w2, t, tiles_b, j1, j2, eps, TILE_A, TILE_B, W0, W1, W2,
                    CASTING, HAS_WEIGHT, STORE_RSTD, RESIDUAL, c0, c1, c2, u0, u1, u2, CHECK_A, LOADS)  # fmt: skip
    else:
        _fwd_at(x, r, y, s_out, rstd_out, w0, w1, w2, ct.bid(0), tiles_b, j1, j2, eps, TILE_A, TILE_B, W0, W1, W2,
                CASTING, HAS_WEIGHT, STORE_RSTD, RESIDUAL, c0, c1, c2, u0, u1, u2, CHECK_A, LOADS)  # fmt: skip


@tile_function
def _fwd_at(x, r, y, s_out, rstd_out, w0, w1, w2, t, tiles_b, j1, j2, eps, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT,
            W1: C_INT, W2: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, RESIDUAL: C_INT,
            C0: C_BOOL, C1: C_BOOL, C2: C_BOOL, U0: C_BOOL, U1: C_BOOL, U2: C_BOOL, CHECK_A: C_BOOL,
            LOADS: C_INT):  # fmt: skip
    """rows_fwd's work on row tile t: unchecked (U*) where ``_whole`` says it lies inside A."""
    ia, ib = _tile(t, tiles_b)
    if _whole(ia, x.shape[0], TILE_A, CHECK_A, LOADS):
        _fwd_tile(x, r, y, s_out, rstd_out, w0, w1, w2, ia, ib, j1, j2, eps, TILE_A, TILE_B, W0, W1, W2, CASTING,
                  HAS_WEIGHT, STORE_RSTD, RESIDUAL, U0, U1, U2, False, LOADS)  # fmt: skip
    else:
        _fwd_tile(x, r, y, s_out, rstd_out, w0, w1, w2, ia, ib, j1, j2, eps, TILE_A, TILE_B, W0, W1, W2, CASTING,
                  HAS_WEIGHT, STORE_RSTD, RESIDUAL, C0, C1, C2, CHECK_A, LOADS)  # fmt: skip


@tile_function
def _store_dw(dw_partial, j, acc, W: C_INT, CHECK: C_BOOL):
    """The sum over a (TILE_A, TILE_B, W) accumulator's rows into row bid of dw_partial, rounded to
    its dtype (fp32 partials; a one-block grid's launcher passes dW itself, launch.run_backward)."""
    total = ct.astype(ct.sum(ct.sum(acc, axis=0, keepdims=True), axis=1, keepdims=True), dw_partial.dtype)
    ct.store(dw_partial, (ct.bid(0), j), ct.reshape(total, (1, W)), check_bounds=CHECK, allow_tma=False)


@tile_function
def _grad(xr, dr, rstd, wp):
    """(xhat, dy, wdy) of one loaded piece, fp32, and its share of sum(wdy * xhat) per row."""
    xhat = ct.astype(xr, ct.float32) * rstd
    dyf = ct.astype(dr, ct.float32)
    wdy = dyf * wp
    return xhat, dyf, wdy, ct.sum(wdy * xhat, axis=2, keepdims=True)


@tile_function
def _bwd_loads(x, dy, rstd_in, ia, ib, j1, j2, TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT, W2: C_INT,
               C0: C_BOOL, C1: C_BOOL, C2: C_BOOL, CA: C_BOOL, LOADS: C_INT):  # fmt: skip
    """What rows_bwd reads of row tile (ia, ib): rstd as (TILE_A, TILE_B, 1) and each piece of x
    and dy (an absent piece's are piece 0's, never used), with bounds checks where they say so."""
    r2 = _rstd_tile(rstd_in, ia, ib, TILE_A, TILE_B, CA)
    x0 = _load(x, ia, ib, 0, TILE_A, TILE_B, W0, C0, LOADS)
    d0 = _load(dy, ia, ib, 0, TILE_A, TILE_B, W0, C0, LOADS)
    x1 = x0
    d1 = d0
    x2 = x0
    d2 = d0
    if W1 > 0:
        x1 = _load(x, ia, ib, j1, TILE_A, TILE_B, W1, C1, LOADS)
        d1 = _load(dy, ia, ib, j1, TILE_A, TILE_B, W1, C1, LOADS)
    if W2 > 0:
        x2 = _load(x, ia, ib, j2, TILE_A, TILE_B, W2, C2, LOADS)
        d2 = _load(dy, ia, ib, j2, TILE_A, TILE_B, W2, C2, LOADS)
    return ct.reshape(r2, (TILE_A, TILE_B, 1)), x0, d0, x1, d1, x2, d2


@tile_function
def _bwd_math(n, dx, rstd, x0, d0, x1, d1, x2, d2, w0, w1, w2, a0, a1, a2, ia, ib, j1, j2, W1: C_INT, W2: C_INT,
              HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL, C0: C_BOOL, C1: C_BOOL, C2: C_BOOL, LOADS: C_INT):  # fmt: skip
    """rows_bwd's work on the loaded row tile (ia, ib) of n-element rows: dx stored, with bounds
    checks on the pieces that say so; returns the dW accumulators (an absent piece's is a0, untouched)."""
    xh0, dy0, wdy0, c = _grad(x0, d0, rstd, w0)
    if W1 > 0:
        xh1, dy1, wdy1, part = _grad(x1, d1, rstd, w1)
        c = c + part
    if W2 > 0:
        xh2, dy2, wdy2, part = _grad(x2, d2, rstd, w2)
        c = c + part
    c = _mean(c, n, LOADS)
    _store(dx, ia, ib, 0, ct.astype((wdy0 - xh0 * c) * rstd, dx.dtype), C0, LOADS)
    if HAS_WEIGHT:
        a0 += _dw(dy0, xh0, x0.dtype, ROUND_XHAT)
    if W1 > 0:
        _store(dx, ia, ib, j1, ct.astype((wdy1 - xh1 * c) * rstd, dx.dtype), C1, LOADS)
        if HAS_WEIGHT:
            a1 += _dw(dy1, xh1, x0.dtype, ROUND_XHAT)
    if W2 > 0:
        _store(dx, ia, ib, j2, ct.astype((wdy2 - xh2 * c) * rstd, dx.dtype), C2, LOADS)
        if HAS_WEIGHT:
            a2 += _dw(dy2, xh2, x0.dtype, ROUND_XHAT)
    return a0, a1, a2


@tile_function
def _bwd_tile(x, dy, rstd_in, dx, w0, w1, w2, a0, a1, a2, t, tiles_b, j1, j2, TILE_A: C_INT, TILE_B: C_INT,
              W0: C_INT, W1: C_INT, W2: C_INT, HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL, C0: C_BOOL, C1: C_BOOL,
              C2: C_BOOL, CA: C_BOOL, LOADS: C_INT):  # fmt: skip
    """rows_bwd's loads and work on row tile t, without a prefetch; returns the dW accumulators."""
    ia, ib = _tile(t, tiles_b)
    r, x0, d0, x1, d1, x2, d2 = _bwd_loads(x, dy, rstd_in, ia, ib, j1, j2, TILE_A, TILE_B, W0, W1, W2, C0, C1, C2, CA,
                                           LOADS)  # fmt: skip
    return _bwd_math(x.shape[2], dx, r, x0, d0, x1, d1, x2, d2, w0, w1, w2, a0, a1, a2, ia, ib, j1, j2, W1, W2,
                     HAS_WEIGHT, ROUND_XHAT, C0, C1, C2, LOADS)  # fmt: skip


@row_kernel
def rows_bwd(x: RowArray, dy: RowArray, w: RowVector, rstd_in, dx: RowArray, dw_partial: RowVector, offset,
             TILE_A: C_INT, TILE_B: C_INT, W0: C_INT, W1: C_INT, W2: C_INT, HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL,
             CHECK_A: C_BOOL, CHECK_N: C_BOOL, LOADS: C_INT, PREFETCH: C_BOOL):  # fmt: skip
    """dx, and this block's share of dW into row bid of dw_partial ((grid, N) fp32, or with a
    grid of one block dW itself as (1, N) of its dtype: rows.launch.run_backward) with
    HAS_WEIGHT. Blocks take fixed row tiles (bid, bid + grid, ...), so dW is deterministic.
    PREFETCH: each iteration reads the block's next tile before it works on this one; gathered
    tiles that can overhang A run the tiles wholly inside A so (the next one clamped to the last
    of them), then the others in a checked loop without the prefetch (``_whole_tiles``)."""
    n = x.shape[2]
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    tiles = ct.cdiv(x.shape[0], TILE_A) * tiles_b
    j1, j2, c0, c1, c2 = _pieces(W0, W1, W2, CHECK_A, CHECK_N)
    _, _, u0, u1, u2 = _pieces(W0, W1, W2, False, CHECK_N)
    w0, w1, w2 = _weights(w, offset, W0, W1, W2, HAS_WEIGHT, CHECK_N, LOADS, CAST_GEMMA)
    a0 = ct.zeros((TILE_A, TILE_B, W0), dtype=ct.float32)
    a1 = a0
    a2 = a0
    if W1 > 0:
        a1 = ct.zeros((TILE_A, TILE_B, W1), dtype=ct.float32)
    if W2 > 0:
        a2 = ct.zeros((TILE_A, TILE_B, W2), dtype=ct.float32)
    if PREFETCH:
        whole = _whole_tiles(x.shape[0], tiles, tiles_b, TILE_A, CHECK_A, LOADS)
        main_a = CHECK_A and LOADS != LOADS_GATHER  # the loop's row checks: none where a tail loop follows
        _, _, m0, m1, m2 = _pieces(W0, W1, W2, main_a, CHECK_N)
        ia, ib = _tile(ct.minimum(ct.bid(0), tiles - 1), tiles_b)
        if _whole(ia, x.shape[0], TILE_A, CHECK_A, LOADS):
            r, x0, d0, x1, d1, x2, d2 = _bwd_loads(x, dy, rstd_in, ia, ib, j1, j2, TILE_A, TILE_B, W0, W1, W2, u0,
                                                   u1, u2, False, LOADS)  # fmt: skip
        else:
            r, x0, d0, x1, d1, x2, d2 = _bwd_loads(x, dy, rstd_in, ia, ib, j1, j2, TILE_A, TILE_B, W0, W1, W2, c0,
                                                   c1, c2, CHECK_A, LOADS)  # fmt: skip
        for t in range(ct.bid(0), whole, ct.num_blocks(0)):
            ia, ib = _tile(t, tiles_b)
            na, nb = _tile(ct.minimum(t + ct.num_blocks(0), whole - 1), tiles_b)
            nr, nx0, nd0, nx1, nd1, nx2, nd2 = _bwd_loads(x, dy, rstd_in, na, nb, j1, j2, TILE_A, TILE_B, W0, W1, W2,
                                                          m0, m1, m2, main_a, LOADS)  # fmt: skip
            a0, a1, a2 = _bwd_math(n, dx, r, x0, d0, x1, d1, x2, d2, w0, w1, w2, a0, a1, a2, ia, ib, j1, j2, W1, W2,
                                   HAS_WEIGHT, ROUND_XHAT, m0, m1, m2, LOADS)  # fmt: skip
            r, x0, d0, x1, d1, x2, d2 = nr, nx0, nd0, nx1, nd1, nx2, nd2
        if _split_a(CHECK_A, LOADS):  # the tiles that overhang A, after the loop (_whole_tiles)
            for t in range(_tail_start(whole), tiles, ct.num_blocks(0)):
                a0, a1, a2 = _bwd_tile(x, dy, rstd_in, dx, w0, w1, w2, a0, a1, a2, t, tiles_b, j1, j2, TILE_A, TILE_B,
                                       W0, W1, W2, HAS_WEIGHT, ROUND_XHAT, c0, c1, c2, CHECK_A, LOADS)  # fmt: skip
    else:
        for t in range(ct.bid(0), tiles, ct.num_blocks(0)):
            ia, _ = _tile(t, tiles_b)
            if _whole(ia, x.shape[0], TILE_A, CHECK_A, LOADS):
                a0, a1, a2 = _bwd_tile(x, dy, rstd_in, dx, w0, w1, w2, a0, a1, a2, t, tiles_b, j1, j2, TILE_A, TILE_B,
                                       W0, W1, W2, HAS_WEIGHT, ROUND_XHAT, u0, u1, u2, False, LOADS)  # fmt: skip
            else:
                a0, a1, a2 = _bwd_tile(x, dy, rstd_in, dx, w0, w1, w2, a0, a1, a2, t, tiles_b, j1, j2, TILE_A, TILE_B,
                                       W0, W1, W2, HAS_WEIGHT, ROUND_XHAT, c0, c1, c2, CHECK_A, LOADS)  # fmt: skip
    if HAS_WEIGHT:
        _store_dw(dw_partial, 0, a0, W0, CHECK_N and W1 == 0)
        if W1 > 0:
            _store_dw(dw_partial, j1, a1, W1, CHECK_N and W2 == 0)
        if W2 > 0:
            _store_dw(dw_partial, j2, a2, W2, CHECK_N)
