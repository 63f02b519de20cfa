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
lane where one 8192-wide tile pads 34%. LOADS says how tiles are read (LOADS_* below): plain
loads straight to registers (128 bits wide when N is a multiple of 16, what the JIT proves, and
the rows are 16-byte aligned; bench/NOTES.md, sessions 11-12), loads that may go through TMA,
or gathers for the checked pieces of rows that are not 16-byte aligned. Bounds are checked only
where a tile can overhang: CHECK_A (TILE_A does not divide A; gathered kernels skip the check on
the tiles wholly inside A) and CHECK_N (the pieces cover more than N: only the last piece can
overhang). Padded lanes load as 0 and add nothing; stores past the bounds are dropped. Rows
longer than one block holds (plan.long_plan) run on the long-row kernels at the end.

Casting modes and the rounding of xhat for dW are the core kernels' (cutile_rms.rmsnorm.kernels);
the forwards here also take CAST_LLAMA_NATIVE (their weight loaded raw, ``_weight_factor``), which
only the row-tile launchers pass (launch.forward_casting, session 32).

Static row layouts: rows_fwd, rows_bwd, rows_fwd_long, rows_bwd_long_onepass and the lanes kernels
(``row_kernel``) take their rows as ``RowArray`` (N and the three strides compile-time constants,
cuTile's documented ``ct.ArrayAnnotation``) and the weight and dW partials as ``RowVector`` (the
last dim constant), so a launch compiles once per row length and layout, as torch.compile and Quack
do; M stays a runtime value. Knowing the row stride, tileiras loads a 16-bit row of even length 4
bytes at a time (8 where 4 divides N), which the JIT of a runtime layout, proving 16 bytes or
nothing, reads 2 bytes an element; knowing N, it drops the loads, stores and checks of the lanes
past N and folds the row offsets into immediates (half the instructions of an odd row's lanes tile).
plan.static_fit, plan.odd_static, plan.vector_lanes and plan.long_static_chunk say where
the rules take them (bench/NOTES.md, sessions 20, 29, 30 and 31). ``DYNAMIC[kernel]`` is the same
kernel with runtime layouts: what the other rows run, and the launchers' fallback once a process
has compiled rows.launch.STATIC_LAYOUTS row layouts.
"""

import types
from typing import Annotated

import cuda.tile as ct

from cutile_rms._tile import tile_function, tile_kernel
from cutile_rms.rmsnorm.kernels import (
    CAST_GEMMA,
    RESIDUAL_ADD,
    RESIDUAL_NONE,
    _normalize,
    _weight_factor,
)

ZERO = ct.PaddingMode.ZERO
C_INT = ct.Constant[int]
C_BOOL = ct.Constant[bool]
# (A, B, N) rows whose N and strides are compile-time constants; (..., N) vectors whose N is.
RowArray = Annotated[ct.Array, ct.ArrayAnnotation(static_shape_dims=(-1,), static_stride_dims=(0, 1, 2))]
RowVector = Annotated[ct.Array, ct.ArrayAnnotation(static_shape_dims=(-1,))]


DYNAMIC = {}  # kernel object -> the same kernel with runtime layouts (row_kernel)


def row_kernel(fn):
    """tile_kernel (@ct.kernel) of fn, whose arrays take static layouts, and a second kernel object of the same
    code with runtime layouts (its annotations without ct.ArrayAnnotation) kept in DYNAMIC."""
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    twin.__qualname__, twin.__module__, twin.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    twin.__annotations__ = {k: ct.Array if v in (RowArray, RowVector) else v for k, v in fn.__annotations__.items()}
    kernel = tile_kernel(fn)
    DYNAMIC[kernel] = tile_kernel(twin)
    return kernel


# How a kernel reads and writes its row tiles (the LOADS constant): plain loads straight to
# registers, loads that may go through TMA, or per-element gathers and scatters. Rows whose byte
# length is not a multiple of 16 need the third (plan.unaligned): the JIT cannot prove their
# starts aligned, and tileiras 13.4 compiles a zero-padded ct.load of such a tile into one
# branch per pair of 16-bit (or per fp32) elements, each waiting for its own two loads before
# the next branch issues (SASS, bf16 16 x 512 of rows of 510: 64 LDG.U16 behind 32 branches, a
# use right after each pair), so a warp has one or two loads in flight. ct.gather of the same
# tile compiles to predicated loads without branches, all issued before the first use (64
# LDG.U16 in a row); on aligned rows it still compiles to 128-bit loads (bench/NOTES.md,
# session 16).
LOADS_PLAIN = 0
LOADS_TMA = 1
LOADS_GATHER = 2


@tile_function
def _indices(ia, ib, j, TILE_A: C_INT, TILE_B: C_INT, W: C_INT):
    """Element indices of piece j of row tile (ia, ib), for gather and scatter."""
    ra = ct.reshape(ct.arange(TILE_A, dtype=ct.int32) + ia * TILE_A, (TILE_A, 1, 1))
    rb = ct.reshape(ct.arange(TILE_B, dtype=ct.int32) + ib * TILE_B, (1, TILE_B, 1))
    c = ct.reshape(ct.arange(W, dtype=ct.int32) + j * W, (1, 1, W))
    return ra, rb, c


@tile_function
def _load(a, ia, ib, j, TILE_A: C_INT, TILE_B: C_INT, W: C_INT, CHECK: C_BOOL, LOADS: C_INT):
    """Piece j of row tile (ia, ib): zero-padded where CHECK (gathered with LOADS_GATHER), else
    without bounds checks (plain loads: unchecked loads of unaligned rows issue without branches)."""
    if LOADS == LOADS_GATHER and CHECK:
        return ct.gather(a, _indices(ia, ib, j, TILE_A, TILE_B, W), padding_value=0)
    elif CHECK:
        return ct.load(a, (ia, ib, j), (TILE_A, TILE_B, W), padding_mode=ZERO, allow_tma=LOADS == LOADS_TMA)
    else:
        return ct.load(a, (ia, ib, j), (TILE_A, TILE_B, W), check_bounds=False, allow_tma=LOADS == LOADS_TMA)


@tile_function
def _store(a, ia, ib, j, t, CHECK: C_BOOL, LOADS: C_INT):
    """Tile t into piece j of row tile (ia, ib), dropping what lies past a's bounds where CHECK
    (scattered with LOADS_GATHER)."""
    if LOADS == LOADS_GATHER and CHECK:
        ct.scatter(a, _indices(ia, ib, j, t.shape[0], t.shape[1], t.shape[2]), t)
    else:
        ct.store(a, (ia, ib, j), t, check_bounds=CHECK, allow_tma=False)


@tile_function
def _weight(w, j, offset, W: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL, LOADS: C_INT, CASTING: C_INT):
    """(1, 1, W) offset + w of piece j as CASTING's _normalize takes it (_weight_factor; fp32 1
    without a weight)."""
    if HAS_WEIGHT:
        if LOADS == LOADS_GATHER and CHECK:
            wt = ct.gather(w, ct.arange(W, dtype=ct.int32) + j * W, padding_value=0)
        elif CHECK:
            wt = ct.load(w, (j,), (W,), padding_mode=ZERO, allow_tma=False)
        else:
            wt = ct.load(w, (j,), (W,), check_bounds=False, allow_tma=False)
        return ct.reshape(_weight_factor(wt, offset, CASTING), (1, 1, W))
    else:
        return ct.full((1, 1, W), 1.0, dtype=ct.float32)


@tile_function
def _weights(
    w, offset, W0: C_INT, W1: C_INT, W2: C_INT, HAS_WEIGHT: C_BOOL, CHECK_N: C_BOOL, LOADS: C_INT, CASTING: C_INT
):
    """(1, 1, W) offset + w of each piece (an absent piece gets piece 0's, never used); with
    CHECK_N only the last piece can overhang N."""
    w0 = _weight(w, 0, offset, W0, HAS_WEIGHT, CHECK_N and W1 == 0, LOADS, CASTING)
    w1 = w0
    w2 = w0
    if W1 > 0:
        w1 = _weight(w, W0 // W1, offset, W1, HAS_WEIGHT, CHECK_N and W2 == 0, LOADS, CASTING)
    if W2 > 0:
        w2 = _weight(w, (W0 + W1) // W2, offset, W2, HAS_WEIGHT, CHECK_N, LOADS, CASTING)
    return w0, w1, w2


@tile_function
def _sum_sq(t):
    f = ct.astype(t, ct.float32)
    return ct.sum(f * f, axis=2, keepdims=True)


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
def _tile(t, tiles_b):
    """(ia, ib) of row tile t."""
    return t // tiles_b, t % tiles_b


@tile_function
def _mean(total, n, LOADS: C_INT):
    """total / n per row, as _rstd divides: times 1 / n on gathered tiles, divided on plain ones."""
    if LOADS == LOADS_GATHER:
        return total * (1.0 / n)
    else:
        return total / n


@tile_function
def _rstd(ss, n, eps, LOADS: C_INT):
    """1 / sqrt(ss / n + eps) of the rows' sums of squares. Gathered tiles spread each row over
    the whole block, so every thread holds every row of the tile: there ss is multiplied by 1 / n
    (one division a tile; SASS: an IEEE division a row and thread was 10 instructions). Plain tiles
    keep the division: on them the multiply moved tileiras 13.4's register allocation (bf16 2 x 4096:
    96 -> 127 registers) and cost 6% (bench/NOTES.md, session 16)."""
    return ct.rsqrt(_mean(ss, n, LOADS) + eps)


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
             PREFETCH: C_BOOL):  # fmt: skip
    """y (and rstd, (A, B) fp32, with STORE_RSTD; rstd_out is a placeholder otherwise). RESIDUAL
    (the core kernels' RESIDUAL_*): NONE normalizes x (r and s_out are placeholders); ADD
    normalizes s = x + r (an fp32 add rounded once to s_out's dtype) and stores it to s_out;
    ADD_UNSTORED normalizes s without storing it (post-norm: s_out only names its dtype).
    PREFETCH (RESIDUAL_NONE, plain or TMA loads): each iteration loads the block's next tile (the
    last tile again at the end, so always in bounds) before it reduces and stores this one."""
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
    else:
        for t in range(ct.bid(0), tiles, ct.num_blocks(0)):
            ia, ib = _tile(t, tiles_b)
            if _whole(ia, x.shape[0], TILE_A, CHECK_A, LOADS):
                _fwd_tile(x, r, y, s_out, rstd_out, w0, w1, w2, ia, ib, j1, j2, eps, TILE_A, TILE_B, W0, W1, W2,
                          CASTING, HAS_WEIGHT, STORE_RSTD, RESIDUAL, u0, u1, u2, False, LOADS)  # fmt: skip
            else:
                _fwd_tile(x, r, y, s_out, rstd_out, w0, w1, w2, ia, ib, j1, j2, eps, TILE_A, TILE_B, W0, W1, W2,
                          CASTING, HAS_WEIGHT, STORE_RSTD, RESIDUAL, c0, c1, c2, CHECK_A, LOADS)  # fmt: skip


@tile_function
def _dw(dyf, xhat, x_dtype, ROUND_XHAT: C_BOOL):
    """dy * xhat of the tile's rows, element by element, xhat rounded to x's dtype first with
    ROUND_XHAT (llama and none casting: the derivative of what the forward computed). The
    block adds them up in a tile-shaped accumulator and sums its rows once, at the end: no
    cross-warp reduction (shared memory and a barrier) per row tile."""
    if ROUND_XHAT:
        xhat = ct.astype(ct.astype(xhat, x_dtype), ct.float32)
    return dyf * xhat


@tile_function
def _store_dw(dw_partial, j, acc, W: C_INT, CHECK: C_BOOL):
    """The sum over a (TILE_A, TILE_B, W) accumulator's rows into row bid of dw_partial."""
    total = ct.sum(ct.sum(acc, axis=0, keepdims=True), axis=1, keepdims=True)
    ct.store(dw_partial, (ct.bid(0), j), ct.reshape(total, (1, W)), check_bounds=CHECK, allow_tma=False)


@tile_function
def _grad(xr, dr, rstd, wp):
    """(xhat, dy, wdy) of one loaded piece, fp32, and its share of sum(wdy * xhat) per row."""
    xhat = ct.astype(xr, ct.float32) * rstd
    dyf = ct.astype(dr, ct.float32)
    wdy = dyf * wp
    return xhat, dyf, wdy, ct.sum(wdy * xhat, axis=2, keepdims=True)


@tile_function
def _rstd_tile(rstd_in, ia, ib, TILE_A: C_INT, TILE_B: C_INT, CA: C_BOOL):
    """rstd of row tile (ia, ib) as (TILE_A, TILE_B) (0 past A where CA says so). Tiles of several
    heads (TILE_B > 1, a head view's rows) gather it element by element: tileiras 13.4 compiled
    the tile load of a (2, 32) rstd tile beside a (2, 32, 64) x tile (and (2, 32, 96 / 128),
    fp32 (2, 32, 32), (2, 16, 128)) to 8-byte loads at 4-byte aligned addresses: "misaligned
    address" on the H200 (compute-sanitizer: this load; bench/NOTES.md, session 27). The gather
    reads 4 bytes an element; a tile holds at most 256 rows."""
    if TILE_B > 1:
        ra = ct.reshape(ct.arange(TILE_A, dtype=ct.int32) + ia * TILE_A, (TILE_A, 1))
        rb = ct.reshape(ct.arange(TILE_B, dtype=ct.int32) + ib * TILE_B, (1, TILE_B))
        return ct.gather(rstd_in, (ra, rb), padding_value=0, check_bounds=CA)
    elif CA:
        return ct.load(rstd_in, (ia, ib), (TILE_A, TILE_B), padding_mode=ZERO, allow_tma=False)
    else:
        return ct.load(rstd_in, (ia, ib), (TILE_A, TILE_B), check_bounds=False, allow_tma=False)


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
    """dx, and this block's share of dW into row bid of dw_partial ((grid, N) fp32) with
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


# Short rows that are not 16-byte aligned (plan.lanes_plan): the kernels gather a row tile as
# (TILE_A, TILE_B, L, K), column l * K + k, so that tileiras lays it out with K lanes of one warp
# a row and L elements a lane (an unaligned gather holds one element a lane along the last axis,
# spreads the lanes along K and then over rows, and keeps L within each thread). Summed over L
# first, a row's sum of squares takes log2(K) shuffles and no barrier. The (TILE_A, TILE_B, W)
# tile as rows_fwd gathers it spreads each row over the whole block, so every thread holds
# every row: SASS, bf16 32 x (128 + 64) of rows of 191, 44 instructions an element with 246
# shuffles and 56 barriers a tile, against 16 for (16, 16, 16) here. y leaves through one
# ct.store a loop iteration: tileiras 13.4 orders a ct.scatter (or a second store to y) after
# the previous iteration's stores with a barrier per store instruction (bench/NOTES.md,
# session 17). With L = 4 on static layouts (plan.vector_lanes, session 31) a thread holds one
# contiguous 4-element vector of each of its row pieces instead: a row spreads over K / 4
# threads, its gathers compile to 8-byte loads, and its sum takes log2(K / 4) shuffles; with L = 8
# (2 mod 4 rows forward, session 32) a thread holds 8 elements, gathered 4 bytes at a time.


@tile_function
def _lane_columns(L: C_INT, K: C_INT):
    """(1, 1, L, K) column indices l * K + k of a lanes tile."""
    return ct.reshape(ct.arange(L, dtype=ct.int32) * K, (1, 1, L, 1)) + ct.reshape(ct.arange(K, dtype=ct.int32),
                                                                                   (1, 1, 1, K))  # fmt: skip


@tile_function
def _lane_indices(ia, ib, c, TILE_A: C_INT, TILE_B: C_INT):
    """Gather indices of lanes tile (ia, ib) with columns c."""
    ra = ct.reshape(ct.arange(TILE_A, dtype=ct.int32) + ia * TILE_A, (TILE_A, 1, 1, 1))
    rb = ct.reshape(ct.arange(TILE_B, dtype=ct.int32) + ib * TILE_B, (1, TILE_B, 1, 1))
    return ra, rb, c


@tile_function
def _lane_weight(w, c, offset, L: C_INT, K: C_INT, HAS_WEIGHT: C_BOOL, CASTING: C_INT):
    """(1, 1, L, K) offset + w at columns c as _weight (0 + offset past N; fp32 1 without a weight)."""
    if HAS_WEIGHT:
        return _weight_factor(ct.gather(w, c, padding_value=0), offset, CASTING)
    else:
        return ct.full((1, 1, L, K), 1.0, dtype=ct.float32)


@tile_function
def _lane_sum(t):
    """(TILE_A, TILE_B, 1, 1) sums of a lanes tile's rows: over L within each lane, then over
    the K lanes (shuffles within the threads that hold the row)."""
    return ct.sum(ct.sum(t, axis=2, keepdims=True), axis=3, keepdims=True)


@tile_function
def _store_lanes(a, ia, ib, t):
    """Lanes tile t into row tile (ia, ib) of a, with one ct.store (see above); the columns past
    N and the rows past A are dropped."""
    s = t.shape
    ct.store(a, (ia, ib, 0), ct.reshape(t, (s[0], s[1], s[2] * s[3])), allow_tma=False)


@row_kernel
def rows_fwd_lanes(x: RowArray, w: RowVector, y: RowArray, rstd_out, eps, offset, TILE_A: C_INT, TILE_B: C_INT,
                   L: C_INT, K: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL):  # fmt: skip
    """rows_fwd for short unaligned rows, tiles gathered as (TILE_A, TILE_B, L, K) (see above);
    L * K >= N, the lanes past N load as 0 and their stores are dropped."""
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    c = _lane_columns(L, K)
    wp = _lane_weight(w, c, offset, L, K, HAS_WEIGHT, CASTING)
    inv_n = 1.0 / x.shape[2]
    for t in range(ct.bid(0), ct.cdiv(x.shape[0], TILE_A) * tiles_b, ct.num_blocks(0)):
        ia, ib = _tile(t, tiles_b)
        xt = ct.gather(x, _lane_indices(ia, ib, c, TILE_A, TILE_B), padding_value=0)
        f = ct.astype(xt, ct.float32)
        rstd = ct.rsqrt(_lane_sum(f * f) * inv_n + eps)
        _store_lanes(y, ia, ib, ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), y.dtype))
        if STORE_RSTD:
            ct.store(rstd_out, (ia, ib), ct.reshape(rstd, (TILE_A, TILE_B)), allow_tma=False)


@tile_function
def _lanes_loads(x, dy, rstd_in, t, tiles_b, c, TILE_A: C_INT, TILE_B: C_INT):
    """(rstd as (TILE_A, TILE_B, 1, 1), x, dy) of lanes tile t, gathered (0 past N and A)."""
    ia, ib = _tile(t, tiles_b)
    idx = _lane_indices(ia, ib, c, TILE_A, TILE_B)
    r2 = _rstd_tile(rstd_in, ia, ib, TILE_A, TILE_B, True)
    return (
        ct.reshape(r2, (TILE_A, TILE_B, 1, 1)),
        ct.gather(x, idx, padding_value=0),
        ct.gather(dy, idx, padding_value=0),
    )


@tile_function
def _lanes_dx(dx, ia, ib, rstd, xt, dt, wp, inv_n):
    """dx of a loaded lanes tile, stored; returns (dy, xhat) in fp32."""
    xhat = ct.astype(xt, ct.float32) * rstd
    dyf = ct.astype(dt, ct.float32)
    wdy = dyf * wp
    cm = _lane_sum(wdy * xhat) * inv_n
    _store_lanes(dx, ia, ib, ct.astype((wdy - xhat * cm) * rstd, dx.dtype))
    return dyf, xhat


@row_kernel
def rows_bwd_lanes(x: RowArray, dy: RowArray, w: RowVector, rstd_in, dx: RowArray, dw_partial: RowVector, offset,
                   TILE_A: C_INT, TILE_B: C_INT, L: C_INT, K: C_INT, HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL,
                   PREFETCH: C_BOOL):  # fmt: skip
    """rows_bwd for short unaligned rows, x and dy gathered as rows_fwd_lanes gathers x; dx leaves
    through one ct.store an iteration, and this block's dW, summed in a lanes-shaped accumulator,
    goes into row bid of dw_partial ((grid, L * K) fp32: the columns past N sum to 0). PREFETCH:
    each iteration gathers the block's next tile (clamped to the last) before it works on this
    one, as rows_bwd's (plan.LANES_BWD_PREFETCH: on by default, session 27)."""
    tiles_b = ct.cdiv(x.shape[1], TILE_B)
    tiles = ct.cdiv(x.shape[0], TILE_A) * tiles_b
    c = _lane_columns(L, K)
    wp = _lane_weight(w, c, offset, L, K, HAS_WEIGHT, CAST_GEMMA)
    inv_n = 1.0 / x.shape[2]
    acc = ct.zeros((TILE_A, TILE_B, L, K), dtype=ct.float32)
    if PREFETCH:
        rstd, xt, dt = _lanes_loads(x, dy, rstd_in, ct.minimum(ct.bid(0), tiles - 1), tiles_b, c, TILE_A, TILE_B)
        for t in range(ct.bid(0), tiles, ct.num_blocks(0)):
            ia, ib = _tile(t, tiles_b)
            nt = ct.minimum(t + ct.num_blocks(0), tiles - 1)
            nrstd, nxt, ndt = _lanes_loads(x, dy, rstd_in, nt, tiles_b, c, TILE_A, TILE_B)
            dyf, xhat = _lanes_dx(dx, ia, ib, rstd, xt, dt, wp, inv_n)
            if HAS_WEIGHT:
                acc += _dw(dyf, xhat, x.dtype, ROUND_XHAT)
            rstd, xt, dt = nrstd, nxt, ndt
    else:
        for t in range(ct.bid(0), tiles, ct.num_blocks(0)):
            ia, ib = _tile(t, tiles_b)
            rstd, xt, dt = _lanes_loads(x, dy, rstd_in, t, tiles_b, c, TILE_A, TILE_B)
            dyf, xhat = _lanes_dx(dx, ia, ib, rstd, xt, dt, wp, inv_n)
            if HAS_WEIGHT:
                acc += _dw(dyf, xhat, x.dtype, ROUND_XHAT)
    if HAS_WEIGHT:
        total = ct.sum(ct.sum(acc, axis=0, keepdims=True), axis=1, keepdims=True)
        ct.store(dw_partial, (ct.bid(0), 0), ct.reshape(total, (1, L * K)), allow_tma=False)


# Rows longer than one block holds (plan.long_plan: unaligned 16-bit rows past the row tiles'
# longest, which the core kernels could only load 2 bytes at a time behind a branch each, at
# 0.14-0.19x torch.compile), and the forward of the aligned rows of plan.long_fit. One row at a
# time, in TILE_N-wide chunks: a chunk wholly inside the row loads without bounds checks, the
# last one (past N) is gathered on unaligned rows, a zero-padded plain load on aligned ones (LOADS).


@tile_function
def _long_chunk(a, ia, ib, j, TILE_N: C_INT, CHECK: C_BOOL, LOADS: C_INT):
    return _load(a, ia, ib, j, 1, 1, TILE_N, CHECK, LOADS)


@tile_function
def _long_y(x, w, y, ia, ib, j, rstd, offset, TILE_N: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL,
            LOADS: C_INT):  # fmt: skip
    """y of chunk j of row (ia, ib)."""
    wp = _weight(w, j, offset, TILE_N, HAS_WEIGHT, CHECK, LOADS, CASTING)
    yt = _normalize(_long_chunk(x, ia, ib, j, TILE_N, CHECK, LOADS), rstd, wp, CASTING, HAS_WEIGHT)
    _store(y, ia, ib, j, ct.astype(yt, y.dtype), CHECK, LOADS)


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
                  CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL, LOADS: C_INT, UNROLL: C_BOOL):  # fmt: skip
    """rows_fwd for long rows: blocks stride over the rows; each row is read twice, for its sum
    of squares and then for y (the second time from L2: the plan's grid keeps the rows in flight
    within it). The squares add up element by element in a chunk-shaped accumulator, summed
    across the block once a row: no barrier per chunk, and tileiras unrolls the first pass (SASS,
    bf16 rows of 8192 in chunks of 2048 on 8 warps: four 16-byte loads a thread in flight; the
    rules' chunks of 4096 at 4 blocks: 63 registers, no stack). chunks: the row's whole chunks,
    N // TILE_N, passed at run time; UNROLL (static layouts only) takes the compile-time N //
    TILE_N instead, so that tileiras knows the trip count: 1.13-1.30x faster on rows of 32-bit
    loads, but on rows of 64-bit loads it unrolled the loops whole and spilled (the rule:
    plan.LONG_UNROLL_WORD_ELEMS; bench/NOTES.md, session 23)."""
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
def _flat_y(xs, ws, ys, j, rstd, offset, TILE_N: C_INT, CASTING: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL):
    """y of chunk j of a row's interior: xs, ys its slices of x and y, ws its row of w_shift."""
    xt = _flat_chunk(xs, j, TILE_N, CHECK)
    if HAS_WEIGHT:
        wt = ct.reshape(ct.load(ws, (0, j), (1, TILE_N), check_bounds=False, allow_tma=False), (TILE_N,))
        wp = _weight_factor(wt, offset, CASTING)
    else:
        wp = ct.full((TILE_N,), 1.0, dtype=ct.float32)
    ct.store(ys, (j,), ct.astype(_normalize(xt, rstd, wp, CASTING, HAS_WEIGHT), ys.dtype), check_bounds=CHECK,
             allow_tma=False)  # fmt: skip


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
    exponent = (ct.bitcast(top, ct.int32) >> 23) & 255
    bits = ct.astype(1023 + EXACT_SUM_BITS + 126 - exponent, ct.int64)
    scale = ct.bitcast(bits << 52, ct.float64)  # 2^(48 + 126 - exponent): every lane under 2^48
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
              CASTING: C_INT, HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL):  # fmt: skip
    """rows_fwd_flat's work on row r. Its sum of squares reads [lo, b) in chunks (lo: the 16-byte
    boundary at or before the row's start; b: the last one inside its end; so 16 bytes a load
    throughout; the first FULL_Q chunks unchecked, the rest checked; FULL_Q < 0: counted at run
    time), the columns before the row's start masked out of the first chunk, then adds the
    tail's squares at their lanes (one V-lane group) last: lane i of the (TILE_N,) accumulator
    holds the row's columns i - d + j TILE_N (d = rN - lo < V) in column order, what lane
    (i - d) mod TILE_N holds for the same row at d = 0. _exact_sum adds the lanes whatever their
    order: a row's rstd is the same at every position (batch invariance). y: the interior [a, b)
    in chunks (FULL unchecked, likewise), the head and tail element by element."""
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
                  HAS_WEIGHT: C_BOOL, STORE_RSTD: C_BOOL):  # fmt: skip
    """rows_fwd_long for flat rows (above): x and y are the rows as one flat array of rows x n
    elements, rstd_out (rows,) fp32, w (n,), w_shift (V, W) from rows_weight_shift. Blocks stride
    over the rows; a row is read twice in TILE_N chunks (its squares from lo to b, then y of its
    interior: the second time from L2). N > 0 (static): the row length compiled in (n == N), and
    with it the counts of chunks every row holds whole, in [lo, b) (N - (V - 1)) // TILE_N and in
    its interior (N - 2 (V - 1)) // TILE_N; N == 0: n at run time, each row's whole chunks counted."""
    if N > 0:
        for r in range(ct.bid(0), x.shape[0] // N, ct.num_blocks(0)):
            _flat_row(x, w, w_shift, y, rstd_out, r, N, eps, offset, (N - (V - 1)) // TILE_N,
                      (N - 2 * (V - 1)) // TILE_N, TILE_N, V, CASTING, HAS_WEIGHT, STORE_RSTD)  # fmt: skip
    else:
        for r in range(ct.bid(0), x.shape[0] // n, ct.num_blocks(0)):
            _flat_row(x, w, w_shift, y, rstd_out, r, n, eps, offset, -1, -1, TILE_N, V, CASTING, HAS_WEIGHT,
                      STORE_RSTD)  # fmt: skip


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
