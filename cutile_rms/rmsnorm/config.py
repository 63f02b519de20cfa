"""Kernel and tile selection for the RMSNorm kernels: every heuristic lives here.

Planning is pure Python (no GPU, no framework): given the problem size, the element size and
the GPU it returns a frozen plan that the launchers execute. Tests call these functions
directly.

Where the configs come from, in the order a plan looks them up (cutile_rms.rmsnorm.tables):

1. the per-device tuning cache, written by ``cutile_rms.tune`` (only when a user ran it);
2. the checked-in table for the GPU architecture (``tuned/sm_90.json``: measured on an H200 by
   ``python -m cutile_rms.tune --table``);
3. the architecture-neutral defaults below (any other GPU, and the CPU interpreter).

A table maps (op, element size, row bucket) to a :class:`KernelConfig`. The row bucket is the
row length rounded up to a power of two, from 512 up to ``LARGEST_BUCKET``; shorter rows use
the 512 bucket's kernel with more rows per tile, longer ones the largest bucket's (chunked).
Tables hold buckets only, never an exact row length: a length that is not a power of two gets
its bucket's config adapted by rules (fit_to_row: Tails), so a model's hidden size that no one
tuned is planned as one that someone did.
"""

import dataclasses
import functools
from dataclasses import dataclass

from cutile_rms.rmsnorm import tables

__all__ = [
    "BackwardPlan",
    "ForwardPlan",
    "KernelConfig",
    "MODES",
    "OCCUPANCIES",
    "plan_backward",
    "plan_forward",
]

MODES = ("persistent", "gather")
KERNELS = ("tile", "chunked", "split", "packed")

# A fifth kind, "row" (a few-row forward: one block per row tile, plain loads and stores; bf16
# 1 x 4096 decode in 1.54 us against the tile kernel's 2.07, bench/NOTES.md, session 9), served
# only rows of exactly 4096 and 8192 elements, which the row-tile forward (cutile_rms.rows, the
# same design for any length) plans since session 12: it was removed. Tables that name it read
# as their tile fallback (tables.parse).

# Split rows (kernel "split"): a row of n elements is shared by cdiv(n, tile_n) blocks, 2 to
# MAX_SPLIT of them, that exchange partial sums through global memory. They are fast only
# when a whole group runs at once (a block whose partners have not run puts its row tile aside
# and later reads the whole row itself: kernels.SPIN_LIMIT; it never waits for them without
# bound), so a split plan needs split <= SMs x blocks per SM; where it does not fit, or where
# the caller cannot run split kernels, the plan falls back to the architecture-neutral default
# for the row bucket.
MAX_SPLIT = 16
# The forward's split kernel runs 16-bit rows only where the JIT proves them a multiple of
# SPLIT_VECTOR_ELEMS elements; on any other (by the rules, rows of a multiple of 8 elements, not
# 16, past the row tiles' longest; any row under a forced core mode) the bucket's default serves. Session
# 23 (ab/s23b), H200, graph replay, bf16 / fp16 us, split (3 blocks a row) -> the default (chunked,
# 4096 a chunk): 1953 x 34360 184.3 / 176.3 -> 115.7 / 112.9, 1511 x 44392 150.9 / 144.4 -> 114.1
# / 113.2. The backward's split plans were not measured on such rows.
SPLIT_VECTOR_ELEMS = 16

# Packed words (kernel "packed", backward of 16-bit inputs only): the tile backward on int32
# views of x, dy, dx and the weight, two elements per word (kernels/packed.py says why). It needs an
# even row length, a weight of x's dtype (or none) and a caller that can make the views; a
# packed config falls back to the same tile config otherwise.

# Tails (kernels "tile" forward and "packed"): a row of n = tile_n + tail elements, both powers of
# two (tail < tile_n), held as two tiles of a row tile instead of one tile of next_pow2(n), where
# 5120-wide rows pad 37% of an 8192-wide tile's lanes. On the H200 (bench/NOTES.md, session 7)
# 16-bit N = 5120 ran 67 -> 77% of the copy ceiling backward and 89 -> 93-95% forward; three
# pieces (7168 = 4096 + 2048 + 1024) were slower than one padded tile, so one tail at most. The
# rule (fit_to_row): a row of p + p / 4 elements (p a power of two: 1280, 2560, 5120, 10240,
# ...) takes its bucket's config as a p-wide tile and a p / 4 tail at twice the blocks per SM
# (the two tiles hold 5/8 of the padded tile's lanes): at 5120 that is the config the session-7
# search found at that length (16-bit forward 2 x 4096 + 1024 at 2 blocks per SM against the
# 8192 bucket's 2 x 8192 at 1; packed backward 1 x 4096 + 1024 at 2 against 1 x 8192 at 1).
# A row of p + p / 2 pads a quarter of one tile only and keeps it (no measurement favoured two).
# Rows with p above MAX_TAIL_DOUBLING keep their blocks per SM: their bucket's tiles (16384 and
# wider) are planned at their register limit, and no row that long was measured with a tail.
MAX_TAIL_DOUBLING = 4096
TAIL_KERNELS = (("forward", "tile"), ("backward", "packed"))  # (op, kernel) pairs with a TAIL constant

# Row-tile schedules of the "tile" forward (the backward always strides: its dW partials take
# one row per block):
# - "stride": a persistent grid (SMs x blocks per SM); block b takes row tiles b, b + grid, ...
# - "per_tile": one block per row tile, as a non-persistent kernel launches; the hardware
#   schedules the blocks. On the H200 the fp32 forward with one-row tiles ran at 98.3-98.6% of
#   the copy ceiling this way against 95.4-95.8% strided (N = 1024 at 8 blocks/SM, 4096 at 4);
#   16-bit rows, wider rows and multi-row tiles lost 2-60% (bench/NOTES.md, session 7).
# A third schedule, "claim" (blocks claiming row tiles from an atomic ticket that block 0 set up),
# ran 1.2-9% faster than "stride" on some buckets (bench/NOTES.md, session 8) but had every block
# wait for block 0: a kernel may not wait on a block that is not guaranteed to run (issue #20).
# It was removed in session 12, once the row-tile forward took over the lengths it served;
# tables that name it stride (tables.parse).
SCHEDULES = ("stride", "per_tile")

# Occupancy hints (blocks per SM) a config may ask for, and worker-warp counts (None: the
# compiler's choice; tileiras 13.4 accepts 4 and 8, more warps spread a large tile's registers).
# Each (occupancy, warps) pair is one kernel object (cutile_rms.rmsnorm.launch): these two sets
# bound them, and are what the tuner searches.
OCCUPANCIES = (1, 2, 4, 8)
WARPS = (None, 4, 8)

# Memory knobs, compile-time constants of the kernels (not compiler hints): the latency hint of
# the row-tile loads (None: the compiler infers it; cuTile accepts 1-10) and whether row tiles
# may be stored through TMA. On the H200 plain stores beat TMA stores for one-row tiles by 7-9%
# of the copy ceiling and lose 2-5% for tiles of 4-16 rows; latency 1 moves some shapes by a
# few % either way (bench/NOTES.md, 2026-11-21 probes): both are searched per bucket.
MAX_LATENCY = 10


@dataclass(frozen=True)
class KernelConfig:
    """One tuning-table entry.

    kernel "tile": a row fits one (tile_m, tile_n) tile; "chunked": rows are walked in column
    chunks of tile_n, tile_m rows at a time; "split": each row is shared by cdiv(n, tile_n)
    blocks, each holding a (tile_m, tile_n) segment (MAX_SPLIT above); "packed": "tile" for a
    backward on 16-bit words (tile_n counts elements). blocks_per_sm sets the grid (SMs x
    blocks_per_sm, trimmed to the work) and is passed to the compiler as the occupancy hint;
    warps is the num_worker_warps hint (None: the compiler's choice). tma_store=False stores the
    output row tiles without TMA (always so for "split": ``split()`` defaults to it); latency is
    the row-tile loads' latency hint (None: none). tail > 0 (a "tile" forward or a "packed"
    backward): rows of tile_n + tail elements in two tiles (Tails). schedule (a "tile" forward;
    SCHEDULES above): how blocks take row tiles, "stride" for every other kernel.
    """

    kernel: str
    tile_m: int
    tile_n: int
    blocks_per_sm: int
    warps: int | None = None
    tma_store: bool = True
    latency: int | None = None
    tail: int = 0
    schedule: str = "stride"

    def __post_init__(self):
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {self.kernel!r}")
        for name in ("tile_m", "tile_n"):
            v = getattr(self, name)
            if v < 1 or v & (v - 1):
                raise ValueError(f"{name} must be a power of two, got {v}")
        if self.blocks_per_sm not in OCCUPANCIES:
            raise ValueError(f"blocks_per_sm must be one of {OCCUPANCIES}, got {self.blocks_per_sm}")
        if self.warps not in WARPS:
            raise ValueError(f"warps must be one of {WARPS}, got {self.warps}")
        if not isinstance(self.tma_store, bool):
            raise ValueError(f"tma_store must be a bool, got {self.tma_store!r}")
        if self.kernel == "split" and self.tma_store:
            raise ValueError("split kernels store without TMA (kernels/split.py): tma_store must be False")
        if self.latency is not None and not (isinstance(self.latency, int) and 1 <= self.latency <= MAX_LATENCY):
            raise ValueError(f"latency must be None or an int in 1..{MAX_LATENCY}, got {self.latency!r}")
        if self.tail and (
            self.kernel not in ("tile", "packed") or self.tail & (self.tail - 1) or self.tail >= self.tile_n
        ):
            raise ValueError(f"tail must be 0 or a power of two below tile_n, for tile or packed, got {self.tail!r}")
        if self.schedule not in SCHEDULES or (self.schedule != "stride" and self.kernel != "tile"):
            raise ValueError(
                f"schedule must be one of {SCHEDULES}, other than stride only for tile, got {self.schedule!r}"
            )

    @property
    def hints(self) -> tuple:
        return (self.blocks_per_sm, self.warps)

    @property
    def memory(self) -> tuple:
        """The kernels' (TMA_STORE, LATENCY) constants (latency 0: no hint)."""
        return (self.tma_store, self.latency or 0)


def tile(tile_m, tile_n, blocks_per_sm, warps=None, **knobs):
    return KernelConfig("tile", tile_m, tile_n, blocks_per_sm, warps, **knobs)


def chunked(tile_m, tile_n, blocks_per_sm, warps=None, **knobs):
    return KernelConfig("chunked", tile_m, tile_n, blocks_per_sm, warps, **knobs)


def split(tile_m, tile_n, blocks_per_sm, warps=None, **knobs):
    return KernelConfig("split", tile_m, tile_n, blocks_per_sm, warps, **{"tma_store": False, **knobs})


def packed(tile_m, tile_n, blocks_per_sm, warps=None, **knobs):
    return KernelConfig("packed", tile_m, tile_n, blocks_per_sm, warps, **knobs)


def split_count(n: int, tile_n: int) -> int:
    """Blocks that share a row of n elements in tile_n-wide segments."""
    return -(-n // tile_n)


# The backward's split width (kernel "split"): the table's configs (8192-wide segments at 1 block an
# SM for fp32 16384-65536) were tuned on powers of two among few candidates. narrow_split takes the
# narrowest width, down to SPLIT_MIN_WIDTH, whose blocks a row stay within max_splits, at the same
# bytes in flight an SM (blocks per SM x width) and SPLIT_THREAD_ELEMS elements a thread (warps =
# width / (32 x that): 4 or 8). Session 35 (ab/s35d-f; H200, graph replay, fp32 us, about 64 Mi
# elements, the table's 8192 at 1 block -> 4096 at 2 blocks of 8 warps -> 2048 at 4 of 4 warps):
# 9016 473.1 / 291.9 / 237.4, 10448 257.0 / 216.1 / 209.3, 12004 377.2 / 254.1 / 229.8, 14340 336.2 /
# - / 242.3, 16384 214.6 / 204.5 / 200.4, 17184 245.8 / 223.9 / 207.9, 20004 351.9 / 256.8 / 238.6,
# 24580 364.8 / 273.4 / 245.2, 29000 322.1 / 258.2 / 235.1, 32768 215.0 / 203.9 / 202.5, 65536 228.1 /
# 211.2 (16 blocks a row) / 213.8 (32, past MAX_SPLIT). Narrower wins beyond the padding it saves
# (14340 pads 12% at both 8192 and 2048). 2048 at 8 warps (8 elements a thread) ran 1.4-2.2x slower
# than at 4. The forward keeps the table's width: fp32 33786 and 27859 on 4096 at 2 blocks ran
# 1.2-1.3x slower than on 8192, at 4 blocks 1.8-2.3x slower (s35d).
SPLIT_MIN_WIDTH = 2048
SPLIT_THREAD_ELEMS = 16


def narrow_split(cfg: KernelConfig, n: int, max_splits: int) -> KernelConfig:
    """A backward split config at its narrowest segment width for rows of n elements within
    max_splits blocks a row (see SPLIT_MIN_WIDTH above); other configs as they are."""
    return next((c for c in narrower_splits(cfg) if split_count(n, c.tile_n) <= max_splits), cfg)


def narrower_splits(cfg: KernelConfig):
    """A split config at each narrower segment width from SPLIT_MIN_WIDTH up, narrowest first: the
    same bytes in flight an SM (blocks per SM x width, at most OCCUPANCIES[-1] blocks) and
    SPLIT_THREAD_ELEMS elements a thread. None for other kernels."""
    width = SPLIT_MIN_WIDTH
    while cfg.kernel == "split" and width < cfg.tile_n:
        blocks = min(OCCUPANCIES[-1], cfg.blocks_per_sm * cfg.tile_n // width)
        warps = max(WARPS[1], min(WARPS[2], width // (32 * SPLIT_THREAD_ELEMS)))
        yield dataclasses.replace(cfg, tile_n=width, blocks_per_sm=blocks, warps=warps)
        width *= 2


SMALLEST_BUCKET = 512
LARGEST_BUCKET = 65536  # longer rows reuse this bucket's (chunked) config

# Rows shorter than SMALLEST_BUCKET: as many rows per tile as fit this many elements, at most
# MAX_TILE_M (131072 x 512 peaked with 32 x 512 = 16384 elements in the first sweep).
SHORT_ROW_TILE_ELEMS = {"forward": 16384, "backward": 4096}
MAX_TILE_M = 128

# ---------------------------------------------------------------------------------------------
# Architecture-neutral defaults: the first H200 sweep (shared/reference/cutile-facts.md, bf16,
# "A first map of the knobs"); entries marked "interpolated" were not measured. The tuned sm_90
# table replaces them on Hopper; they remain what other GPUs and the interpreter get.

DEFAULT_TABLE = {
    "forward": {
        512: tile(32, 512, 1),  # measured: 131072 x 512, best of TM 1..32 x occupancy 1..8: 3645 GB/s
        1024: tile(32, 1024, 8),  # measured: 65536 x 1024: 3882 GB/s
        2048: tile(4, 2048, 4),  # interpolated between 1024 and 4096
        4096: tile(1, 4096, 4),  # measured: 16384 x 4096: 3883 GB/s
        8192: tile(1, 8192, 2),  # interpolated between 4096 and 16384
        16384: tile(1, 16384, 1),  # measured: 4096 x 16384: 3773 GB/s
        32768: chunked(1, 4096, 2),  # first benchmark (bench/NOTES.md): 50% of the copy ceiling
        65536: chunked(1, 4096, 2),
    },
    "backward": {
        512: tile(8, 512, 2),  # measured: 131072 x 512: 3432 GB/s
        1024: tile(4, 1024, 2),  # measured: 65536 x 1024: 3390 GB/s
        2048: tile(2, 2048, 2),  # interpolated
        4096: tile(2, 4096, 2),  # measured: 16384 x 4096: 3670 GB/s
        8192: tile(1, 8192, 2),  # interpolated
        # A (1, 16384) fp32 dW accumulator per block ran at 1582 GB/s (37%): chunked above 8192.
        16384: chunked(1, 4096, 2),
        32768: chunked(1, 4096, 2),
        65536: chunked(1, 4096, 2),
    },
    # The chunked backward's first kernel (c = mean(wdy * xhat) per row).
    "backward_dot": {b: chunked(1, min(b, 4096), 4) for b in (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)},
}

# Forced gather mode ("a block per row group, looping over column chunks"): fixed, not tuned.
GATHER = chunked(1, 4096, 4)

# Problems of at most this many rows (decode steps: one token per sequence) look up their own
# table entries first (op + FEW_ROWS_SUFFIX), tuned at such an M: the first tuned table, made at
# M = 64 Mi / N, slowed the fp32 decode forward down by up to 1.7x (bench/NOTES.md). Below the
# training set's smallest M (1024 rows of 65536: 64 Mi elements, a bandwidth-bound problem).
FEW_ROWS = 512
FEW_ROWS_SUFFIX = "_few"

# A tile may not hold so many rows that fewer row tiles than SMs are left: with few rows (decode,
# M <= a few hundred) every SM should get a row tile rather than one block walking several.
FILL_SMS = True


def next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _prev_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def bucket(n: int) -> int:
    """The table bucket of a row of n elements."""
    return min(max(SMALLEST_BUCKET, next_pow2(n)), LARGEST_BUCKET)


def quarter_tail(n: int) -> int:
    """The tail of a row of n = p + p / 4 elements (p a power of two, Tails), else 0."""
    p = _prev_pow2(n)
    return p // 4 if p >= 4 and n == p + p // 4 else 0


def table_op(op: str, m: int | None) -> str:
    """The table op for a problem of m rows: few rows have their own entries ("forward_few",
    ...) where a table has them, since configs tuned for a bandwidth-bound M are not the best
    for a latency-bound one (bench/NOTES.md)."""
    return f"{op}{FEW_ROWS_SUFFIX}" if m is not None and m <= FEW_ROWS else op


@dataclass(frozen=True)
class Provides:
    """What a caller can give the kernels beyond its arrays; plans use only kernels it can run.

    slots: zero-filled int64 workspaces, new for each launch (the split kernels' slots).
    words: int32 views of 16-bit arrays, two elements per word (the packed backward).
    """

    slots: bool = True
    words: bool = False


ONLY_ARRAYS = Provides(slots=False, words=False)  # a caller that passes its arrays and nothing else


def kernel_config(
    op: str,
    n: int,
    elem_size: int,
    device_key: str | None,
    m: int | None = None,
    split_blocks: int = 0,
    provides: Provides = ONLY_ARRAYS,
) -> KernelConfig:
    """The config for rows of n elements (m of them, if known): the table entry of n's bucket
    (see the module docstring for the lookup order), adapted to rows shorter than the smallest
    bucket. The backward's split config takes its narrowest width within split_blocks blocks a
    row (narrow_split). A split config is kept only if its blocks per row are at most split_blocks (the
    blocks that can run at once on the GPU; 0: the caller runs no split kernels); otherwise
    the bucket's default serves. A packed config is kept only where the caller provides words
    (a 16-bit backward with an even n); otherwise it runs as "tile"."""
    b = bucket(n)
    ops = dict.fromkeys((table_op(op, m), op))  # few-row entries first
    found = next(filter(None, (tables.lookup(o, elem_size, b, device_key) for o in ops)), None)
    cfg = KernelConfig(*found) if found else DEFAULT_TABLE[op][b]
    if cfg.kernel == "packed" and not (provides.words and op == "backward" and elem_size == 2 and n % 2 == 0):
        cfg = dataclasses.replace(cfg, kernel="tile")
    cfg = fit_to_row(cfg, n, op)
    if op == "backward":
        cfg = narrow_split(cfg, n, split_blocks)
    unproven = op == "forward" and elem_size == 2 and n % SPLIT_VECTOR_ELEMS != 0  # (SPLIT_VECTOR_ELEMS above)
    if cfg.kernel == "split" and (split_count(n, cfg.tile_n) > split_blocks or unproven):
        return fit_to_row(DEFAULT_TABLE[op][b], n, op)
    return cfg


def fit_to_row(cfg: KernelConfig, n: int, op: str) -> KernelConfig:
    """cfg adapted to rows of n elements: rows shorter than the smallest bucket take more rows
    per tile (SHORT_ROW_TILE_ELEMS); a chunk is never wider than the row; a tail is kept only
    for rows of exactly tile_n + tail elements, in a kernel that has one (TAIL_KERNELS), and a
    row of p + p / 4 elements gets one (Tails: quarter_tail)."""
    row_n = max(16, next_pow2(n))
    if cfg.tail and (cfg.tile_n + cfg.tail != n or (op, cfg.kernel) not in TAIL_KERNELS):
        cfg = dataclasses.replace(cfg, tile_n=row_n, tail=0)
    tail = quarter_tail(n)
    if tail and not cfg.tail and cfg.tile_n == row_n and (op, cfg.kernel) in TAIL_KERNELS and n >= SMALLEST_BUCKET:
        blocks = min(OCCUPANCIES[-1], 2 * cfg.blocks_per_sm) if n - tail <= MAX_TAIL_DOUBLING else cfg.blocks_per_sm
        cfg = dataclasses.replace(cfg, tile_n=n - tail, tail=tail, blocks_per_sm=blocks)
    if cfg.kernel in ("tile", "packed") and n < SMALLEST_BUCKET and op in SHORT_ROW_TILE_ELEMS:
        tile_m = max(1, min(MAX_TILE_M, SHORT_ROW_TILE_ELEMS[op] // row_n))
        return dataclasses.replace(cfg, tile_m=tile_m, tile_n=row_n, tail=0)
    if cfg.kernel == "chunked" and cfg.tile_n > row_n:
        return dataclasses.replace(cfg, tile_n=row_n)
    if cfg.kernel == "split" and split_count(n, cfg.tile_n) == 1:  # the row fits one segment
        return dataclasses.replace(cfg, kernel="tile", tile_n=row_n)
    return cfg


def fill_sms(tile_m: int, m: int, num_sms: int) -> int:
    """tile_m, lowered (by powers of two) until the row tiles cover every SM when m allows."""
    if not FILL_SMS or m >= tile_m * num_sms:
        return tile_m
    return min(tile_m, _prev_pow2(max(1, m // num_sms)))


def grid_size(m: int, tile_m: int, blocks_per_sm: int, num_sms: int) -> int:
    """Persistent grid: SMs x blocks per SM, trimmed to the number of row tiles."""
    return max(1, min(-(-m // tile_m), num_sms * blocks_per_sm))


def balanced_grid(m: int, tile_m: int, blocks_per_sm: int, num_sms: int) -> int:
    """grid_size, lowered to the fewest blocks that take as many rounds of row tiles: each block
    then walks the same number of row tiles, give or take one, and the last round is not left to
    a few blocks. For the one-tile backward kernels: on the H200, 4096 row tiles on 132 blocks
    (31.03 rounds) ran 2-3.5% slower than on 128 (16-bit N = 4096 and 16384), and elsewhere the
    two agreed within 1% (bench/NOTES.md, session 7). The forward showed no such gain."""
    row_tiles = -(-m // tile_m)
    rounds = -(-row_tiles // grid_size(m, tile_m, blocks_per_sm, num_sms))
    return -(-row_tiles // rounds)


def split_groups(m: int, tile_m: int, splits: int, blocks_per_sm: int, num_sms: int) -> int:
    """Groups of a split grid (grid = groups x splits): as many as fit SMs x blocks per SM,
    never more than the row tiles (every group must own one)."""
    return max(1, min(-(-m // tile_m), (num_sms * blocks_per_sm) // splits))


def split_blocks(num_sms: int) -> int:
    """The most blocks of one split group a plan may ask to run at once: one per SM."""
    return min(MAX_SPLIT, num_sms)


def slots_shape(m: int, tile_m: int, splits: int) -> tuple[int, int]:
    """The split kernels' int64 workspace, zeroed before each launch: one slot per (row, split)
    for whole row tiles, its width rounded up to a power of two (the kernels read it as one
    tile)."""
    return (-(-m // tile_m) * tile_m, next_pow2(splits))


def split_layout(cfg: KernelConfig, m: int, n: int, num_sms: int) -> tuple:
    """(blocks per row, rows per tile, groups, slots shape) of a split config for an (m, n)
    problem: the grid is groups x blocks per row, forward and backward alike."""
    splits = split_count(n, cfg.tile_n)
    tile_m = fill_sms(cfg.tile_m, m, max(1, num_sms // splits))
    groups = split_groups(m, tile_m, splits, cfg.blocks_per_sm, num_sms)
    return splits, tile_m, groups, slots_shape(m, tile_m, splits)


# ---------------------------------------------------------------------------------------------
# Forward


@dataclass(frozen=True)
class ForwardPlan:
    """What the forward launcher runs: kernel ("tile", "chunked" or "split"), tile shape, 1-D
    grid, the kernel's compiler hints (occupancy, worker warps), its memory constants
    (TMA_STORE, LATENCY: see KernelConfig), for "split" the blocks per row (the grid is a
    multiple of it) and the shape of the zeroed int64 workspace it needs, and for "tile" the
    width of a second, tail tile (0: none; see KernelConfig) and the row-tile schedule."""

    mode: str
    kernel: str
    tile_m: int
    tile_n: int
    grid: int
    occupancy: int
    warps: int | None = None
    memory: tuple = (True, 0)
    splits: int = 1
    slots: tuple = ()
    tail: int = 0
    schedule: str = "stride"

    @property
    def hints(self) -> tuple:
        return (self.occupancy, self.warps)


def forward_plan_from(cfg: KernelConfig, m: int, num_sms: int, mode: str, n: int) -> ForwardPlan:
    """The forward plan of a config for an (m, n) input."""
    if cfg.kernel == "split":
        splits, tile_m, groups, slots = split_layout(cfg, m, n, num_sms)
        return ForwardPlan(mode, "split", tile_m, cfg.tile_n, splits * groups, cfg.blocks_per_sm, cfg.warps, cfg.memory,
                           splits, slots)  # fmt: skip
    tile_m = fill_sms(cfg.tile_m, m, num_sms)
    row_tiles = -(-m // tile_m)
    grid = row_tiles if cfg.schedule == "per_tile" else grid_size(m, tile_m, cfg.blocks_per_sm, num_sms)
    return ForwardPlan(mode, cfg.kernel, tile_m, cfg.tile_n, grid, cfg.blocks_per_sm, cfg.warps, cfg.memory,
                       tail=cfg.tail, schedule=cfg.schedule)  # fmt: skip


@functools.lru_cache(maxsize=1024)
def plan_forward(
    m: int,
    n: int,
    num_sms: int,
    mode: str | None = None,
    *,
    elem_size: int = 2,
    device_key: str | None = None,
    provides: Provides = Provides(),  # noqa: B008 (a frozen, immutable default)
) -> ForwardPlan:
    """Choose the forward kernel, tile and grid for an (m, n) input of elem_size-byte elements
    on a GPU with num_sms SMs (device_key: see tables.lookup; None: defaults only).

    mode=None follows the table; "persistent" also does (so a row that fits no tile takes the
    table's chunked or split config); "gather" always takes the fixed GATHER config.
    provides: what the caller can give (Provides); without slots no split kernel is planned.
    """
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} or None, got {mode!r}")
    if mode == "gather":
        return forward_plan_from(fit_to_row(GATHER, n, "forward"), m, num_sms, mode, n)
    cfg = kernel_config("forward", n, elem_size, device_key, m, split_blocks(num_sms) if provides.slots else 0,
                        provides)  # fmt: skip
    if mode is None:
        mode = "gather" if cfg.kernel == "chunked" else "persistent"
    return forward_plan_from(cfg, m, num_sms, mode, n)


# ---------------------------------------------------------------------------------------------
# Backward

# dW reduction: a (partial_rows x N) fp32 buffer summed over its rows by dw_reduce, one block a
# chunk of TILE_N columns, TILE_G rows at a time. The chunks are the narrowest power of two that
# spreads N over the SMs, one chunk an SM (REDUCE_MIN_TILE_N to REDUCE_TILE_N columns), each tile
# REDUCE_TILE_ELEMS elements (16 KB) and at least REDUCE_TILE_G rows (``reduce_tiles``; partials of
# at most REDUCE_TILE_G rows keep 32 x 256). Before
# session 36 every chunk was 32 x 256: cdiv(N, 256) blocks, 3 for N = 678, each walking 528 partial
# rows. Session 36 (bench/NOTES.md; dw_reduce alone on the H200, graph replay, the partials in L2
# as the backward leaves them, us, (rows, N): 32 x 256 -> the rule's tile): (528, 678) 31.7 -> 6.7
# (256 x 16), (1056, 600) 16.6 -> 3.8, (528, 1294) 31.8 -> 6.8, (1056, 1024) 16.6 -> 3.8, (528,
# 2048) 9.3 -> 3.2, (528, 128) 9.2 -> 2.9, (264, 4804) 5.8 -> 3.7 (64 x 64), (264, 8192) 5.7 -> 4.0
# (64 x 64); the other tiles measured (32 x 64, 64 x 128, 128 x 32, 128 x 64, 256 x 32) were slower
# at those N but for 256 x 32 at 2048 (3.4) and 128 x 64 at 4804 (3.8); (132, 16384) ran 32 x 256
# 4.1, 64 x 128 4.5. The packed reduction (dw_reduce_packed, REDUCE_TILE_N // 2 words) keeps 32 x 256.
REDUCE_TILE_G = 32
REDUCE_TILE_N = 256
REDUCE_MIN_TILE_N = 16
REDUCE_TILE_ELEMS = 4096
REDUCE_BLOCKS_PER_SM = 4


def reduce_tiles(n: int, rows: int, num_sms: int) -> tuple[int, int]:
    """(TILE_G, TILE_N) of dw_reduce for (rows, N) dW partials on num_sms SMs (see above); partials
    of at most REDUCE_TILE_G rows, which one 32 x 256 tile a chunk reads at once, keep that tile (the
    decode set's M = 1 and 32, session 36: 2-6% slower on the narrow tiles, 0.1-0.3 us)."""
    if rows <= REDUCE_TILE_G:
        return REDUCE_TILE_G, REDUCE_TILE_N
    tile_n = min(REDUCE_TILE_N, max(REDUCE_MIN_TILE_N, next_pow2(-(-n // num_sms))))
    return _reduce_tile_g(tile_n), tile_n


def _reduce_tile_g(tile_n: int) -> int:
    return max(REDUCE_TILE_G, REDUCE_TILE_ELEMS // tile_n)


def reduce_grid(n: int, tile_n: int, num_sms: int) -> int:
    """dw_reduce's blocks: one a column chunk, at most REDUCE_BLOCKS_PER_SM an SM."""
    return max(1, min(-(-n // tile_n), num_sms * REDUCE_BLOCKS_PER_SM))


def reduce_plan(n: int, rows: int, num_sms: int, packed: bool = False) -> tuple[tuple[int, int], int]:
    """((TILE_G, TILE_N), blocks) of the dW reduction of (rows, N) partials: dw_reduce's by
    reduce_tiles, dw_reduce_packed's (packed) at 32 x 256; what every backward launcher runs."""
    tiles = (REDUCE_TILE_G, REDUCE_TILE_N) if packed else reduce_tiles(n, rows, num_sms)
    return tiles, reduce_grid(n, tiles[1], num_sms)


def reduce_tile_pairs() -> tuple[tuple[int, int], ...]:
    """Every (TILE_G, TILE_N) that reduce_tiles gives (the compile-ahead check compiles each)."""
    widths, w = [], REDUCE_MIN_TILE_N
    while w <= REDUCE_TILE_N:
        widths.append(w)
        w *= 2
    return tuple((_reduce_tile_g(w), w) for w in widths)


@dataclass(frozen=True)
class BackwardPlan:
    """What the backward launcher runs.

    kernel "tile": one persistent kernel (grid = (partial_rows,)) with compiler hints
    `hints` (occupancy, warps) and memory constants `memory` (see KernelConfig).
    kernel "chunked": a row-dot kernel (grid = (dot_grid,), tile dot_tile_m x dot_tile_n,
    hints dot_hints) that writes c per row into an (m,) fp32 workspace, then a 2-D kernel over
    (partial_rows, num_chunks).
    kernel "split": one kernel over partial_rows x num_chunks blocks (1-D grid; num_chunks
    blocks share each row), with a zeroed int64 workspace of shape `slots`.
    kernel "packed": "tile" on int32 word views of 16-bit arrays; tail > 0: each row is a
    tile_n-wide and a tail-wide tile (KernelConfig), for "packed" only.
    Either way dW partials land in an fp32 workspace of partial_shape(n), reduced by dw_reduce
    (dw_reduce_packed) on reduce_grid blocks of reduce_tiles ((TILE_G, TILE_N): reduce_tiles).
    """

    kernel: str
    tile_m: int
    tile_n: int
    partial_rows: int
    num_chunks: int
    hints: tuple
    reduce_grid: int
    reduce_tiles: tuple  # dw_reduce's (TILE_G, TILE_N): reduce_tiles, (REDUCE_TILE_G, REDUCE_TILE_N) for packed
    dot_tile_m: int = 1
    dot_tile_n: int = 0
    dot_grid: int = 0
    dot_hints: tuple = (1, None)
    memory: tuple = (True, 0)
    slots: tuple = ()
    tail: int = 0

    @property
    def needs_row_dot(self) -> bool:
        return self.kernel == "chunked"

    def partial_shape(self, n: int) -> tuple:
        """The dW partials' shape: (partial_rows, n), or (partial_rows, 2, n / 2) for "packed"
        (the even columns' sums, then the odd ones')."""
        return (self.partial_rows, 2, n // 2) if self.kernel == "packed" else (self.partial_rows, n)


def chunked_backward_grid(m: int, cfg: KernelConfig, n: int, num_sms: int) -> tuple[int, int]:
    """(row groups, column chunks) of the chunked backward's 2-D grid: about SMs x blocks per
    SM blocks in all, never more row groups than row tiles."""
    num_chunks = -(-n // cfg.tile_n)
    row_tiles = -(-m // cfg.tile_m)
    return max(1, min(row_tiles, (num_sms * cfg.blocks_per_sm) // num_chunks)), num_chunks


def backward_plan_from(cfg: KernelConfig, dot: KernelConfig, m: int, n: int, num_sms: int) -> BackwardPlan:
    """The backward plan of a config (and, for a chunked one, the row-dot kernel's config)."""

    def reduce(rows: int) -> dict:  # the dW reduction of (rows, n) partials
        tiles, grid = reduce_plan(n, rows, num_sms, cfg.kernel == "packed")
        return dict(reduce_grid=grid, reduce_tiles=tiles)

    if cfg.kernel in ("tile", "packed"):
        tile_m = fill_sms(cfg.tile_m, m, num_sms)
        grid = balanced_grid(m, tile_m, cfg.blocks_per_sm, num_sms)
        return BackwardPlan(cfg.kernel, tile_m, cfg.tile_n, grid, 1, cfg.hints, memory=cfg.memory, tail=cfg.tail,
                            **reduce(grid))  # fmt: skip
    if cfg.kernel == "split":
        splits, tile_m, groups, slots = split_layout(cfg, m, n, num_sms)
        return BackwardPlan("split", tile_m, cfg.tile_n, groups, splits, cfg.hints, memory=cfg.memory, slots=slots,
                            **reduce(groups))  # fmt: skip
    groups, num_chunks = chunked_backward_grid(m, cfg, n, num_sms)
    dot_m = fill_sms(dot.tile_m, m, num_sms)
    dot_grid = grid_size(m, dot_m, dot.blocks_per_sm, num_sms)
    return BackwardPlan("chunked", cfg.tile_m, cfg.tile_n, groups, num_chunks, cfg.hints, dot_tile_m=dot_m,
                        dot_tile_n=dot.tile_n, dot_grid=dot_grid, dot_hints=dot.hints, memory=cfg.memory,
                        **reduce(groups))  # fmt: skip


@functools.lru_cache(maxsize=1024)
def plan_backward(
    m: int,
    n: int,
    num_sms: int,
    *,
    elem_size: int = 2,
    device_key: str | None = None,
    provides: Provides = Provides(),  # noqa: B008 (a frozen, immutable default)
) -> BackwardPlan:
    """Choose the backward kernels, tiles and grids for an (m, n) problem (provides: what the
    caller can give, Provides: slots for the split kernels, words for the packed one)."""
    cfg = kernel_config("backward", n, elem_size, device_key, m, split_blocks(num_sms) if provides.slots else 0,
                        provides)  # fmt: skip
    dot = kernel_config("backward_dot", n, elem_size, device_key, m)
    return backward_plan_from(cfg, dot, m, n, num_sms)


def clear_plan_caches() -> None:
    """Forget cached plans (after a tuning table changed)."""
    plan_forward.cache_clear()
    plan_backward.cache_clear()


def planned_configs(arch: str | None = None) -> dict[str, dict[KernelConfig, frozenset]]:
    """Every KernelConfig a plan can take from the defaults and the checked-in table of arch
    (of every architecture: None), by op, each with the element sizes it is planned for (the
    ahead-of-time compile check compiles each for those). Short rows add their narrower tiles,
    the backward's split configs their narrower widths (narrow_split)."""
    both = frozenset((2, 4))
    out = {op: dict.fromkeys(t.values(), both) for op, t in DEFAULT_TABLE.items()}

    def add(op, cfg, sizes):
        out[op][cfg] = out[op].get(cfg, frozenset()) | sizes

    for op, elem_size, entry in tables.checked_in_configs(arch):
        add(op.removesuffix(FEW_ROWS_SUFFIX), KernelConfig(*entry), frozenset((elem_size,)))
    for op in SHORT_ROW_TILE_ELEMS:
        for cfg, sizes in list(out[op].items()):
            if cfg.kernel == "tile" and cfg.tile_n == SMALLEST_BUCKET:
                for k in range(4, SMALLEST_BUCKET.bit_length() - 1):
                    tn = 1 << k
                    tm = max(1, min(MAX_TILE_M, SHORT_ROW_TILE_ELEMS[op] // tn))
                    add(op, dataclasses.replace(cfg, tile_m=tm, tile_n=tn), sizes)
    for cfg, sizes in list(out["backward"].items()):  # the narrower widths of split rows (narrow_split)
        for narrower in narrower_splits(cfg):
            add("backward", narrower, sizes)
    add("forward", GATHER, both)
    return out
