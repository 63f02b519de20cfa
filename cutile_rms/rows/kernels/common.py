"""What the row kernels of every kind share: the static row layouts (``RowArray``, ``row_kernel``),
how a tile is read (LOADS_*), the loads, stores and weights of row tiles, the sum of squares, rstd
and the dW terms."""

import types
from typing import Annotated

import cuda.tile as ct

from cutile_rms._tile import tile_function, tile_kernel
from cutile_rms.rmsnorm.kernels import (
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
def _weight_raw(w, j, W: C_INT, CHECK: C_BOOL, LOADS: C_INT):
    """(W,) piece j of the weight as stored: zero past its end where CHECK (gathered with LOADS_GATHER)."""
    if LOADS == LOADS_GATHER and CHECK:
        return ct.gather(w, ct.arange(W, dtype=ct.int32) + j * W, padding_value=0)
    elif CHECK:
        return ct.load(w, (j,), (W,), padding_mode=ZERO, allow_tma=False)
    else:
        return ct.load(w, (j,), (W,), check_bounds=False, allow_tma=False)


@tile_function
def _weight(w, j, offset, W: C_INT, HAS_WEIGHT: C_BOOL, CHECK: C_BOOL, LOADS: C_INT, CASTING: C_INT):
    """(1, 1, W) offset + w of piece j as CASTING's _normalize takes it (_weight_factor; fp32 1
    without a weight)."""
    if HAS_WEIGHT:
        return ct.reshape(_weight_factor(_weight_raw(w, j, W, CHECK, LOADS), offset, CASTING), (1, 1, W))
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
def _dw(dyf, xhat, x_dtype, ROUND_XHAT: C_BOOL):
    """dy * xhat of the tile's rows, element by element, xhat rounded to x's dtype first with
    ROUND_XHAT (llama and none casting: the derivative of what the forward computed). The
    block adds them up in a tile-shaped accumulator and sums its rows once, at the end: no
    cross-warp reduction (shared memory and a barrier) per row tile."""
    if ROUND_XHAT:
        xhat = ct.astype(ct.astype(xhat, x_dtype), ct.float32)
    return dyf * xhat


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
