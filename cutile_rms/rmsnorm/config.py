"""Mode and tile selection for the RMSNorm kernels: every heuristic lives here.

Planning is pure Python (no GPU, no framework): given the problem size and the number of SMs
it returns a frozen plan that the launchers execute. Tests call these functions directly.

Where the numbers come from: the first sweep of a plain static-persistent forward and
persistent backward on the H200 (rows per tile x blocks per SM, bf16, CUDA-graph timing),
recorded in shared/reference/cutile-facts.md ("A first map of the knobs"). Entries marked
"interpolated" were not measured; the benchmark (bench/) is where they get re-measured, and
bench/NOTES.md records each change.
"""

import functools
from dataclasses import dataclass

__all__ = [
    "BackwardPlan",
    "ForwardPlan",
    "MODES",
    "TileShape",
    "plan_backward",
    "plan_forward",
]

MODES = ("persistent", "gather")


@dataclass(frozen=True)
class TileShape:
    """Rows per tile, columns per tile (both powers of two), and blocks launched per SM."""

    tile_m: int
    tile_n: int
    blocks_per_sm: int


# ---------------------------------------------------------------------------------------------
# Forward

# Longest row the persistent forward holds in one tile. The sweep ran 4096 x 16384 bf16 as one
# (1, 16384) tile at 3773 GB/s (88% of the copy ceiling); longer rows take the chunked path.
FWD_MAX_TILE_N = 16384

# Elements per tile for short rows (tile_n < 512): 131072 x 512 peaked with 32 x 512 = 16384.
FWD_SHORT_ROW_TILE_ELEMS = 16384
FWD_MAX_TILE_M = 128

# Persistent single-tile forward, by tile_n (the row length rounded up to a power of two).
FWD_TILE_TABLE = {
    512: TileShape(32, 512, 1),  # measured: 131072 x 512, best of TM 1..32 x occupancy 1..8: 3645 GB/s
    1024: TileShape(32, 1024, 8),  # measured: 65536 x 1024: 3882 GB/s
    2048: TileShape(4, 2048, 4),  # interpolated between 1024 and 4096
    4096: TileShape(1, 4096, 4),  # measured: 16384 x 4096: 3883 GB/s
    8192: TileShape(1, 8192, 2),  # interpolated between 4096 and 16384
    16384: TileShape(1, 16384, 1),  # measured: 4096 x 16384: 3773 GB/s
}

# Chunked forward (gather mode, or persistent with rows longer than FWD_MAX_TILE_N): one row per
# block-iteration, columns in chunks of this size; the second pass re-reads the row from L2.
# Not yet measured: 4096 elements is the chunk the single-tile sweep liked best per row.
FWD_CHUNK_N = 4096
GATHER_BLOCKS_PER_SM = 4  # grid = min(rows, SMs x 4); not yet measured
CHUNKED_PERSISTENT_BLOCKS_PER_SM = 2  # not yet measured


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@dataclass(frozen=True)
class ForwardPlan:
    """What the forward launcher runs: kernel ("tile" or "chunked"), tile shape, 1-D grid, and
    the kernel's occupancy hint (None: the compiler's default)."""

    mode: str
    kernel: str
    tile_m: int
    tile_n: int
    grid: int
    occupancy: int | None


def _short_row_shape(tile_n: int, elems: int, blocks_per_sm: int) -> TileShape:
    return TileShape(max(1, min(FWD_MAX_TILE_M, elems // tile_n)), tile_n, blocks_per_sm)


def _table_shape(n: int, table: dict, short_row_elems: int) -> TileShape:
    """The table's tile for a row of n elements; rows shorter than 512 take as many rows per
    tile as fit short_row_elems, at the 512 entry's blocks per SM."""
    tile_n = max(16, next_pow2(n))
    if tile_n < 512:
        return _short_row_shape(tile_n, short_row_elems, table[512].blocks_per_sm)
    return table[tile_n]


def forward_tile_shape(n: int) -> TileShape:
    """Tile for the single-tile persistent forward (requires n <= FWD_MAX_TILE_N)."""
    return _table_shape(n, FWD_TILE_TABLE, FWD_SHORT_ROW_TILE_ELEMS)


@functools.lru_cache(maxsize=1024)
def plan_forward(m: int, n: int, num_sms: int, mode: str | None = None) -> ForwardPlan:
    """Choose the forward kernel, tile and grid for an (m, n) input on a GPU with num_sms SMs.

    mode=None picks persistent whenever a row fits one tile and gather otherwise; a forced
    mode is always honoured (persistent falls back to its chunked path for long rows).
    """
    if mode is None:
        mode = "persistent" if n <= FWD_MAX_TILE_N else "gather"
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} or None, got {mode!r}")
    if mode == "persistent" and n <= FWD_MAX_TILE_N:
        shape = forward_tile_shape(n)
        kernel = "tile"
        occupancy = shape.blocks_per_sm
    else:
        tile_n = min(max(16, next_pow2(n)), FWD_CHUNK_N)
        per_sm = GATHER_BLOCKS_PER_SM if mode == "gather" else CHUNKED_PERSISTENT_BLOCKS_PER_SM
        shape = TileShape(1, tile_n, per_sm)
        kernel = "chunked"
        occupancy = None
    row_tiles = -(-m // shape.tile_m)
    grid = max(1, min(row_tiles, num_sms * shape.blocks_per_sm))
    return ForwardPlan(mode, kernel, shape.tile_m, shape.tile_n, grid, occupancy)


# ---------------------------------------------------------------------------------------------
# Backward

# Longest row the persistent backward holds in one tile. The sweep's (1, 16384) fp32 dW
# accumulator per block ran 4096 x 16384 at only 1582 GB/s (37% of the ceiling), so rows over
# 8192 take the chunked two-kernel path instead.
BWD_MAX_TILE_N = 8192
BWD_SHORT_ROW_TILE_ELEMS = 4096  # 131072 x 512 peaked at 8 x 512 rows per tile

BWD_TILE_TABLE = {
    512: TileShape(8, 512, 2),  # measured: 131072 x 512: 3432 GB/s
    1024: TileShape(4, 1024, 2),  # measured: 65536 x 1024: 3390 GB/s
    2048: TileShape(2, 2048, 2),  # interpolated
    4096: TileShape(2, 4096, 2),  # measured: 16384 x 4096: 3670 GB/s
    8192: TileShape(1, 8192, 2),  # interpolated
}

BWD_CHUNK_N = 4096  # column chunk of the chunked backward; not yet measured
BWD_CHUNKED_BLOCKS_PER_SM = 2  # (row groups x chunks) launched per SM; not yet measured

# dW reduction: a (grid x N) fp32 partial buffer summed over its rows.
REDUCE_TILE_G = 32
REDUCE_TILE_N = 256
REDUCE_BLOCKS_PER_SM = 4


@dataclass(frozen=True)
class BackwardPlan:
    """What the backward launcher runs.

    kernel "tile": one persistent kernel (grid = (partial_rows,)) with occupancy hint
    `occupancy`.
    kernel "chunked": a row-dot kernel (grid = (dot_grid,)) that writes c per row into an
    (m,) fp32 workspace, then a 2-D kernel over (partial_rows, num_chunks).
    Either way dW partials land in a (partial_rows, n) fp32 workspace, reduced by dw_reduce
    on reduce_grid blocks.
    """

    kernel: str
    tile_m: int
    tile_n: int
    partial_rows: int
    num_chunks: int
    dot_grid: int
    reduce_grid: int
    occupancy: int | None

    @property
    def needs_row_dot(self) -> bool:
        return self.kernel == "chunked"


def backward_tile_shape(n: int) -> TileShape:
    """Tile for the single-tile persistent backward (requires n <= BWD_MAX_TILE_N)."""
    return _table_shape(n, BWD_TILE_TABLE, BWD_SHORT_ROW_TILE_ELEMS)


@functools.lru_cache(maxsize=1024)
def plan_backward(m: int, n: int, num_sms: int) -> BackwardPlan:
    """Choose the backward kernels, tiles and grids for an (m, n) problem."""
    reduce_grid = max(1, min(-(-n // REDUCE_TILE_N), num_sms * REDUCE_BLOCKS_PER_SM))
    if n <= BWD_MAX_TILE_N:
        shape = backward_tile_shape(n)
        row_tiles = -(-m // shape.tile_m)
        grid = max(1, min(row_tiles, num_sms * shape.blocks_per_sm))
        return BackwardPlan("tile", shape.tile_m, shape.tile_n, grid, 1, 0, reduce_grid, shape.blocks_per_sm)
    tile_n = BWD_CHUNK_N
    num_chunks = -(-n // tile_n)
    row_tiles = m  # tile_m = 1
    row_groups = max(1, min(row_tiles, (num_sms * BWD_CHUNKED_BLOCKS_PER_SM) // num_chunks))
    dot_grid = max(1, min(row_tiles, num_sms * GATHER_BLOCKS_PER_SM))
    return BackwardPlan("chunked", 1, tile_n, row_groups, num_chunks, dot_grid, reduce_grid, None)


def forward_tile_shapes() -> list[TileShape]:
    """Every tile shape the single-tile forward can be planned with (for the AOT check)."""
    return sorted({forward_tile_shape(1 << k) for k in range(4, FWD_MAX_TILE_N.bit_length())}, key=_key)


def forward_chunk_widths() -> list[int]:
    """Every column chunk the chunked forward can be planned with."""
    return [1 << k for k in range(4, FWD_CHUNK_N.bit_length())]


def backward_tile_shapes() -> list[TileShape]:
    return sorted({backward_tile_shape(1 << k) for k in range(4, BWD_MAX_TILE_N.bit_length())}, key=_key)


def _key(s: TileShape):
    return (s.tile_n, s.tile_m, s.blocks_per_sm)
