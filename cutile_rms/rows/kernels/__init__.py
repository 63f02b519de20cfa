"""Row-tile RMSNorm kernels: the forward is the core forward (see plan.py for when it runs);
the backward runs by default on the rows ``plan.backward_by_default`` names and few rows
(``plan.few_rows``), and wherever its rules plan the row with ``mode="rows"``.

    rstd = 1 / sqrt(mean(x^2) + eps),  xhat = x * rstd,  y = xhat * (offset + w)
    wdy = (offset + w) * dy,  c = mean(wdy * xhat),  dx = rstd * (wdy - xhat * c),  dw = sum dy * xhat

Arrays are 3-D, (A, B, N), with unit stride along N and any strides for A and B: a 2-D input is
(M, 1, N), and a head view of a fused QKV projection, (tokens, heads, head_dim) with the
projection's row stride, is read in place. A row tile is (TILE_A, TILE_B) rows, TILE_B dividing
B (plan.py), and the tiles are numbered t = ia * cdiv(B, TILE_B) + ib. One loop form serves two
grids: a grid of one block per row tile (each block runs the loop once) and a persistent grid
(blocks stride over the tiles, the weight loaded once per block); rows_fwd also compiles without
the loop (LOOP False: block t runs tile t) for the short one-row tiles of plan.one_tile, the
many one-row tiles of plan.many_tiles and the one-block-an-SM tiles of plan.lone_tiles and
plan.lone_tma (the latter with TMA loads: the core's tile and bits).

A row of N elements is held as up to three pieces W0 >= W1 >= W2 (powers of two; W1, W2 = 0
when absent), at column tiles 0, W0 / W1 and (W0 + W1) / W2: 5376 = 4096 + 1024 + 256 pads no
lane where one 8192-wide tile pads 34%. LOADS says how tiles are read (LOADS_* below): plain
loads straight to registers (128 bits wide when N is a multiple of 16, what the JIT proves, and
the rows are 16-byte aligned; bench/NOTES.md, sessions 11-12), loads that may go through TMA,
or gathers for the checked pieces of rows that are not 16-byte aligned. Bounds are checked only
where a tile can overhang: CHECK_A (TILE_A does not divide A; gathered kernels skip the check on
the tiles wholly inside A) and CHECK_N (the pieces cover more than N: only the last piece can
overhang). Padded lanes load as 0 and add nothing; stores past the bounds are dropped. Rows
longer than one block holds (plan.long_plan) run on the long-row kernels at the end; long rows
contiguous end to end whose starts are not 16-byte aligned on the flat rows kernels (flat.py) and
the split flat forward (split.py: a row's segments on as many blocks, one pass over memory).

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
plan.static_fit, plan.odd_static, plan.word_static, plan.vector_lanes and plan.long_static_chunk
say where the rules take them (bench/NOTES.md, sessions 20, 29, 30, 31 and 56); fp32 rows of 4 | N,
not 16 | N, load 4 bytes at a time on runtime layouts for the same reason. ``DYNAMIC[kernel]`` is the same
kernel with runtime layouts: what the other rows run, and the launchers' fallback once a process
has compiled rows.launch.STATIC_LAYOUTS row layouts.
"""

# Every name of the kind modules, helpers included: the launchers, the FP8 kernels and the tests
# reach them through this package.
from cutile_rms.rows.kernels.common import (  # noqa: F401
    C_BOOL,
    C_INT,
    DYNAMIC,
    LOADS_GATHER,
    LOADS_PLAIN,
    LOADS_TMA,
    ZERO,
    RowArray,
    RowVector,
    _dw,
    _indices,
    _load,
    _mean,
    _rstd,
    _rstd_tile,
    _store,
    _sum_sq,
    _tile,
    _weight,
    _weights,
    row_kernel,
)
from cutile_rms.rows.kernels.flat import (  # noqa: F401
    EXACT_SUM_BITS,
    EXACT_SUM_MAX_LANES,
    FP32_MAX,
    _exact_scale,
    _exact_sum,
    _flat_bounds,
    _flat_chunk,
    _flat_dx,
    _flat_dx_loads,
    _flat_dx_rows,
    _flat_edge,
    _flat_edge_dx,
    _flat_edge_grad,
    _flat_edge_y,
    _flat_row,
    _flat_squares,
    _flat_tail,
    _flat_wdy_x,
    _flat_y,
    rows_bwd_flat,
    rows_dot_flat,
    rows_fwd_flat,
    rows_weight_shift,
)
from cutile_rms.rows.kernels.lanes import (  # noqa: F401
    _lane_columns,
    _lane_indices,
    _lane_sum,
    _lane_weight,
    _lanes_dx,
    _lanes_loads,
    _store_lanes,
    rows_bwd_lanes,
    rows_fwd_lanes,
)
from cutile_rms.rows.kernels.long import (  # noqa: F401
    _bwd_long_chunk,
    _long_chunk,
    _long_chunk_loads,
    _long_dot_term,
    _long_dx,
    _long_dx_of,
    _long_row_c,
    _long_row_dot,
    _long_squares,
    _long_y,
    _onepass_chunk,
    rows_bwd_long,
    rows_bwd_long_onepass,
    rows_dot_long,
    rows_fwd_long,
)
from cutile_rms.rows.kernels.split import (  # noqa: F401
    _exact_sum3,
    _own_sum,
    _segment,
    _segment_bounds,
    _segment_y,
    rows_fwd_flat_split,
)
from cutile_rms.rows.kernels.tile import (  # noqa: F401
    _add_piece,
    _add_row_tile,
    _bwd_loads,
    _bwd_math,
    _bwd_tile,
    _fwd_out,
    _fwd_tile,
    _grad,
    _load_row_tile,
    _pieces,
    _raw_row_tile,
    _split_a,
    _store_dw,
    _sum_sq3,
    _tail_start,
    _whole,
    _whole_tiles,
    rows_bwd,
    rows_fwd,
)
