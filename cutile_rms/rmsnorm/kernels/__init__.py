"""cuTile kernels for RMSNorm: forward, backward and the dW reduction, one module per kind
(common, tile, chunked, split, packed, reduce), all re-exported here.

Notation follows the math (Triton's layer-norm tutorial):

    rstd = 1 / sqrt(mean(x^2) + eps)          per row, fp32
    xhat = x * rstd
    y    = xhat * (offset + w)                 w = 1 when there is no weight
    wdy  = (offset + w) * dy
    c    = mean(wdy * xhat)                    per row
    dx   = rstd * (wdy - xhat * c)
    dw   = sum over rows of dy * xhat

All arithmetic is fp32 except where a casting mode asks for rounding to the input dtype
(forward only; see ``_normalize``; CAST_LLAMA_NATIVE, which only the row-tile forwards are
given, multiplies xhat by the weight in that dtype, the same bits). This module imports nothing
but cuda.tile: it is free of any array framework, and tileiras can compile it ahead of time on a
machine without a GPU.

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

# Every name of the kind modules, helpers included: the row-tile, fused-add and FP8 kernels and
# the tests reach them through this package.
from cutile_rms.rmsnorm.kernels.chunked import (  # noqa: F401
    _bwd_chunk_cols,
    _fwd_chunked_rows,
    rms_bwd_chunked,
    rms_bwd_row_dot,
    rms_fwd_chunked,
    rms_fwd_chunked_infer,
)
from cutile_rms.rmsnorm.kernels.common import (  # noqa: F401
    _DEVICE,
    _RELAXED,
    CAST_GEMMA,
    CAST_LLAMA,
    CAST_LLAMA_NATIVE,
    CAST_NONE,
    RESIDUAL_ADD,
    RESIDUAL_ADD_UNSTORED,
    RESIDUAL_NONE,
    ZERO,
    _add_residual,
    _dw_rows,
    _dx_out,
    _load_rows,
    _load_tile,
    _normalize,
    _row_wdy_x,
    _store_tile,
    _tail_weight,
    _weight_factor,
    _weight_row,
    _weight_row_plain,
)
from cutile_rms.rmsnorm.kernels.packed import (  # noqa: F401
    _HIGH_HALF,
    HALF_BF16,
    HALF_FP16,
    _half_dtype,
    _pack,
    _packed_dx,
    _packed_terms,
    _store_dw_pair,
    _unpack,
    _weight_pair,
    dw_reduce_packed,
    rms_bwd_packed,
)
from cutile_rms.rmsnorm.kernels.reduce import (  # noqa: F401
    dw_reduce,
)
from cutile_rms.rmsnorm.kernels.split import (  # noqa: F401
    FALLBACK_N,
    PUT_ASIDE,
    SLOT_BITS,
    SLOT_FLAG,
    SPIN_LIMIT,
    _aside,
    _fwd_split_rows,
    _publish,
    _published,
    _put_aside,
    _read_slots,
    _row_sumsq,
    _slot_rows,
    _slot_sum,
    _sumsq,
    _wdy_xhat,
    rms_bwd_split,
    rms_fwd_split,
    rms_fwd_split_infer,
)
from cutile_rms.rmsnorm.kernels.tile import (  # noqa: F401
    _bwd_tile_rows,
    _fwd_row_tile,
    _fwd_tile_rows,
    rms_bwd_tile,
    rms_fwd_tile,
    rms_fwd_tile_infer,
)
