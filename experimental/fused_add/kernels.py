"""Fused residual-add RMSNorm kernels (experimental).

    s = x + r   (summed in fp32, rounded once to s's dtype: the residual stream's)
    y = rms_norm(s) * (offset + w)

The row math is the core kernels' (cutile_rms.rmsnorm.kernels): their helpers take the
residual add (ADD_RESIDUAL) and the extra incoming gradient (ADD_DRES) as compile-time flags,
so the plain RMSNorm kernels compile exactly as before and the fused ones share every line of
normalization and gradient code. Only the entry points below are new.

When a row fits one tile, the forward is a single pass: x and r are read once, s is written
once and normalized from registers. Longer rows take two passes (the second recomputes s
from x and r, mostly from L2; the in-place variant reads s back from r). The backward of the
sum is the identity: ds = d(rms_norm)/ds + dres goes to both x and r.
"""

import cuda.tile as ct

from cutile_rms._launch import experimental_kernel
from cutile_rms._tile import tile_kernel
from cutile_rms.rmsnorm.kernels import (
    RESIDUAL_ADD,
    _bwd_chunk_cols,
    _bwd_tile_rows,
    _fwd_chunked_rows,
    _fwd_tile_rows,
)

C_INT = ct.Constant[int]
C_BOOL = ct.Constant[bool]


@experimental_kernel
@tile_kernel
def fused_add_fwd_tile(x, r, w, y, s_out, rstd_out, eps, offset, TILE_M: C_INT, TILE_N: C_INT, TAIL: C_INT,
                       CASTING: C_INT, HAS_WEIGHT: C_BOOL, CHECK_BOUNDS: C_BOOL, TMA_STORE: C_BOOL,
                       LATENCY: C_INT):  # fmt: skip
    """Training forward, one tile per row (two with TAIL > 0, as in the plain kernel): y, s and
    rstd. CHECK_BOUNDS=False when the shapes are aligned to the tile (no masked lanes)."""
    _fwd_tile_rows(x, r, w, y, s_out, rstd_out, eps, offset, TILE_M, TILE_N, TAIL, CASTING, HAS_WEIGHT, True,
                   RESIDUAL_ADD, CHECK_BOUNDS, TMA_STORE, LATENCY)  # fmt: skip


@experimental_kernel
@tile_kernel
def fused_add_fwd_tile_infer(x, r, w, y, s_out, eps, offset, TILE_M: C_INT, TILE_N: C_INT, TAIL: C_INT,
                             CASTING: C_INT, HAS_WEIGHT: C_BOOL, RESIDUAL: C_INT, CHECK_BOUNDS: C_BOOL,
                             TMA_STORE: C_BOOL, LATENCY: C_INT):  # fmt: skip
    """Inference forward, one tile per row: y and s (RESIDUAL_ADD) or y only
    (RESIDUAL_ADD_UNSTORED: post-norm, s_out only names the sum's dtype), no rstd."""
    _fwd_tile_rows(x, r, w, y, s_out, y, eps, offset, TILE_M, TILE_N, TAIL, CASTING, HAS_WEIGHT, False, RESIDUAL,
                   CHECK_BOUNDS, TMA_STORE, LATENCY)  # fmt: skip


@experimental_kernel
@tile_kernel
def fused_add_fwd_tile_inplace(x, r, w, eps, offset, TILE_M: C_INT, TILE_N: C_INT, TAIL: C_INT, CASTING: C_INT,
                               HAS_WEIGHT: C_BOOL, CHECK_BOUNDS: C_BOOL, TMA_STORE: C_BOOL,
                               LATENCY: C_INT):  # fmt: skip
    """In-place inference forward, one tile per row: s into r, y into x. Each tile is loaded
    before it is overwritten, and x and r are each one array (no aliasing between arguments)."""
    _fwd_tile_rows(x, r, w, x, r, x, eps, offset, TILE_M, TILE_N, TAIL, CASTING, HAS_WEIGHT, False, RESIDUAL_ADD,
                   CHECK_BOUNDS, TMA_STORE, LATENCY)  # fmt: skip


@experimental_kernel
@tile_kernel
def fused_add_fwd_chunked(x, r, w, y, s_out, rstd_out, eps, offset, TILE_M: C_INT, TILE_N: C_INT, CASTING: C_INT,
                          HAS_WEIGHT: C_BOOL, TMA_STORE: C_BOOL, LATENCY: C_INT):  # fmt: skip
    """Training forward for rows longer than one tile (two passes over column chunks)."""
    _fwd_chunked_rows(x, r, w, y, s_out, rstd_out, eps, offset, TILE_M, TILE_N, CASTING, HAS_WEIGHT, True, RESIDUAL_ADD,
                      False, TMA_STORE, LATENCY)  # fmt: skip


@experimental_kernel
@tile_kernel
def fused_add_fwd_chunked_infer(x, r, w, y, s_out, eps, offset, TILE_M: C_INT, TILE_N: C_INT, CASTING: C_INT,
                                HAS_WEIGHT: C_BOOL, RESIDUAL: C_INT, TMA_STORE: C_BOOL, LATENCY: C_INT):  # fmt: skip
    """Inference forward for long rows: y and s (or y only, as fused_add_fwd_tile_infer), no
    rstd; the second pass recomputes s from x and r."""
    _fwd_chunked_rows(x, r, w, y, s_out, y, eps, offset, TILE_M, TILE_N, CASTING, HAS_WEIGHT, False, RESIDUAL, False,
                      TMA_STORE, LATENCY)  # fmt: skip


@experimental_kernel
@tile_kernel
def fused_add_fwd_chunked_inplace(x, r, w, eps, offset, TILE_M: C_INT, TILE_N: C_INT, CASTING: C_INT,
                                  HAS_WEIGHT: C_BOOL, TMA_STORE: C_BOOL, LATENCY: C_INT):  # fmt: skip
    """In-place inference forward for long rows: the first pass writes s into r, the second
    reads it back from r and writes y into x."""
    _fwd_chunked_rows(x, r, w, x, r, x, eps, offset, TILE_M, TILE_N, CASTING, HAS_WEIGHT, False, RESIDUAL_ADD, True,
                      TMA_STORE, LATENCY)  # fmt: skip


@experimental_kernel
@tile_kernel
def fused_add_bwd_tile(s, dy, dres, w, rstd_in, dx, dr, dw_partial, offset, TILE_M: C_INT, TILE_N: C_INT,
                       HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL, ADD_DRES: C_BOOL, TWO_OUTPUTS: C_BOOL,
                       TMA_STORE: C_BOOL, LATENCY: C_INT):  # fmt: skip
    """Backward, one tile per row: dx (= dr) = d(rms_norm)/ds + dres, and dW partials."""
    _bwd_tile_rows(s, dy, dres, w, rstd_in, dx, dr, dw_partial, offset, TILE_M, TILE_N, HAS_WEIGHT, ROUND_XHAT,
                   ADD_DRES, TWO_OUTPUTS, TMA_STORE, LATENCY)  # fmt: skip


@experimental_kernel
@tile_kernel
def fused_add_bwd_chunked(s, dy, dres, w, rstd_in, c_in, dx, dr, dw_partial, offset, TILE_M: C_INT, TILE_N: C_INT,
                          HAS_WEIGHT: C_BOOL, ROUND_XHAT: C_BOOL, ADD_DRES: C_BOOL, TWO_OUTPUTS: C_BOOL,
                       TMA_STORE: C_BOOL, LATENCY: C_INT):  # fmt: skip
    """Backward for long rows, second step (the first is the core row-dot kernel on s)."""
    _bwd_chunk_cols(s, dy, dres, w, rstd_in, c_in, dx, dr, dw_partial, offset, TILE_M, TILE_N, HAS_WEIGHT,
                    ROUND_XHAT, ADD_DRES, TWO_OUTPUTS, TMA_STORE, LATENCY)  # fmt: skip
