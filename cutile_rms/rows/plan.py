"""Plans of the row-tile kernels: the rules that turn (rows, N, element size, GPU) into a tile,
a grid and compiler hints. Pure Python, no GPU; ``plan(...)`` shows a reader the plan for any N.

    rows = plan("forward", a=16384, b=1, n=5376, elem_size=2, num_sms=132)

The forward's constants come from the H200 probe of session 12 (``python -m bench.probes.rows_probe``:
525 spill-free candidate plans around the rules, each timed by graph replay beside the copy
ceiling; bench/results/h200/ab/s12-rows-probe-0c1a727.csv, bench/NOTES.md). The backward's are
still the first choices read from the SASS (session 11); its kernel stays experimental.

- pieces: a row of n elements is held as at most MAX_PIECES power-of-two pieces, largest
  first, with the least padding (5376 = 4096 + 1024 + 256; 2880 -> 2048 + 1024, 192 lanes
  padded); padded lanes cost registers and issue slots, never bytes.
- which rows: at most MAX_ROW_ELEMS[op] elements (pieces included; longer rows spill at any
  hint with 8 warps, the most tileiras 13.4 takes), and for 2-byte elements a multiple of
  VECTOR_ELEMS: the JIT proves a row length divisible by 16 elements or by nothing, and a row
  it cannot prove loads 2 bytes at a time (probe: bf16 22369 x 3000 at 113-141 us, 46-57% of
  the copy ceiling, where fp32 rows of 3000, loaded 4 bytes at a time, reach 98.7%). Other rows
  get no plan (None): the caller runs the core kernels (TMA tiles, which need no divisibility).
- rows per tile: as many rows as fit TILE_BYTES of x (16 KB forward; 8 KB backward, which also
  holds dy), a power of two, at most MAX_TILE_ROWS. Probe, bf16: 16 KB tiles were the fastest or
  within 1% at every N from 128 to 8192 (64 x 128, 32 x 256, 4 x 2048, 2 x 4096, 2 x 8192 at
  94-97% of the copy ceiling); 8 KB tiles of one 4096 row lost 25% on one block per tile.
- warps: 4, and 8 for tiles of more than WIDE_TILE[op] elements. Probe: 4 warps won at every
  forward tile of up to 8192 elements (6144: 52.9 us with 4 warps, 61.2 with 8); rows of 12288
  and more hold 96+ elements per thread with 4 warps and run best with 8.
- registers: a tile needs REG_BASE[op] + REG_PER_ELEM[op] registers per element of one row a
  thread holds, plus REG_PER_TILE_ELEM[op] per element of the tile's other rows, read off the
  compiled kernels (bench/probes/rows_candidates.json: every forward tile whose hint cap was at
  least 28 + 2 per row element + 0.5 per other element compiled without spilling, e.g. one 6144
  row with 4 warps at a 128-register cap, 2 x 4096 at 128, 64 x 128 at 64: the compiler works a
  multi-row tile row by row; the backward, which also holds dy and the dW sums, needs about
  48 + 4 per element of the tile). The blocks an SM holds, ``resident``, follow: at most 8, at most 2048
  threads, at most 65536 registers.
- occupancy hint: the largest power of two up to ``resident`` and up to the blocks that keep
  IN_FLIGHT_BYTES of tiles per SM, so its register cap never falls under the need, and at most
  MAX_HINT: hints of 8 spilled on 8 KB tiles that compiled clean at 4 (16 x 256 and 4 x 1024
  bf16 with 4 warps: a 64-register cap), and where 8 compiled the probe timed it level with 4.
- grid: one block per row tile, except a persistent grid of SMs x resident blocks (weight loaded
  once per block) for the backward and for one-row forward tiles of 2-byte elements. Probe,
  bf16 one-row tiles, persistent vs one block per tile: 4096 71.2 vs 86.2 us, 5376 75.9 vs
  84.4, 16384 86.3 vs 104.8, 18432 51.0 vs 57.8, 6144 and 12288 level; fp32 one-row tiles ran
  3-10% faster on one block per tile at every N tried (4096-18432). A persistent grid must fill
  the SMs: at a grid of SMs x 1 the same tiles ran 1.5-3x slower (bf16 2048: 200 vs 70 us).
- two leading dims (A, B): a row tile is TILE_A x TILE_B rows with TILE_B the largest power of
  two that divides B (so no tile overhangs B), TILE_A the rest.

A row's plan depends on n, the element size and B only, never on A (the number of rows): a row
is reduced in the same order whatever batch it comes in (batch invariance); A sets the grid and
whether a tile can overhang A, neither of which changes a row's arithmetic.
"""

import functools
from dataclasses import dataclass

__all__ = ["MAX_ROW_ELEMS", "RowsPlan", "pieces", "plan"]

OPS = ("forward", "backward")
MAX_PIECES = 3
TILE_BYTES = {"forward": 16 * 1024, "backward": 8 * 1024}
MAX_TILE_ROWS = 256
WIDE_TILE = {"forward": 8192, "backward": 4095}
IN_FLIGHT_BYTES = 64 * 1024
REG_BASE = {"forward": 28, "backward": 48}
REG_PER_ELEM = {"forward": 2, "backward": 4}
REG_PER_TILE_ELEM = {"forward": 0.5, "backward": 4}
VECTOR_ELEMS = 16
MAX_BLOCKS_PER_SM = 8
MAX_HINT = 4
REGISTERS_PER_SM = 65536
MAX_ROW_ELEMS = {"forward": 18432, "backward": 8192}
OCCUPANCIES = (1, 2, 4, 8)
THREADS_PER_SM = 2048


def _prev_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def pieces(n: int, max_pieces: int = MAX_PIECES) -> tuple[int, ...]:
    """Powers of two, largest first, covering n in at most max_pieces with the least padding:
    n rounded up to a multiple of the smallest granule g (a power of two) whose multiple has at
    most max_pieces bits set."""
    if n < 1:
        raise ValueError(f"a row has at least one element, got {n}")
    g = 1
    while True:
        c = -(-n // g) * g
        bits = tuple(1 << b for b in range(c.bit_length() - 1, -1, -1) if c >> b & 1)
        if len(bits) <= max_pieces:
            return bits
        g *= 2


@dataclass(frozen=True)
class RowsPlan:
    """What the launcher runs: row tiles of tile_a x tile_b rows, each row as ``widths`` (three
    piece widths, 0 for an absent piece), on ``grid`` blocks with the compiler hints
    (occupancy, warps); check_a / check_n: a tile can overhang A / the pieces cover more than n."""

    op: str
    tile_a: int
    tile_b: int
    widths: tuple[int, int, int]
    warps: int
    occupancy: int
    grid: int
    check_a: bool
    check_n: bool
    tma: bool = False

    @property
    def hints(self) -> tuple:
        return (self.occupancy, self.warps)


@functools.lru_cache(maxsize=1024)
def plan(op: str, a: int, b: int, n: int, elem_size: int, num_sms: int, *, tile_rows: int | None = None,
         warps: int | None = None, occupancy: int | None = None, persistent: bool | None = None,
         tma: bool = False, max_pieces: int = MAX_PIECES, any_length: bool = False) -> RowsPlan | None:  # fmt: skip
    """The plan for an (a, b, n) problem of elem_size-byte elements on num_sms SMs, or None when
    the rules leave its rows to the core kernels (longer than MAX_ROW_ELEMS[op], or 2-byte rows
    not a multiple of VECTOR_ELEMS long). The keywords override the rules (probes, tests:
    max_pieces=1: one padded tile per row; any_length: plan rows of any length up to the
    longest)."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if a < 1 or b < 1:
        raise ValueError(f"a plan needs at least one row, got a={a}, b={b}")
    ps = pieces(n, max_pieces)
    width = sum(ps)
    if width > MAX_ROW_ELEMS[op] or (elem_size < 4 and n % VECTOR_ELEMS and not any_length):
        return None
    rows = tile_rows or max(1, min(MAX_TILE_ROWS, _prev_pow2(TILE_BYTES[op] // (width * elem_size))))
    tile_b = min(rows, b & -b)  # the largest power of two dividing b, at most the tile's rows
    tile_a = rows // tile_b
    elems = rows * width
    warps = warps or (8 if elems > WIDE_TILE[op] else 4)
    threads = 32 * warps
    row_elems = width / threads  # a row's elements per thread; a tile of more rows adds fewer per element
    need = int(REG_BASE[op] + REG_PER_ELEM[op] * row_elems + REG_PER_TILE_ELEM[op] * (elems / threads - row_elems))
    resident = max(1, min(MAX_BLOCKS_PER_SM, THREADS_PER_SM // threads, REGISTERS_PER_SM // (threads * need)))
    if occupancy is None:
        in_flight = IN_FLIGHT_BYTES // (elems * elem_size * (2 if op == "backward" else 1))  # bwd: x and dy
        occupancy = _prev_pow2(max(1, min(MAX_HINT, resident, in_flight)))
    else:
        resident = occupancy  # an override: the grid follows the hint
    tiles = -(-a // tile_a) * (b // tile_b)
    if persistent is None:
        persistent = op == "backward" or (rows == 1 and elem_size == 2)
    if op == "backward":
        resident = occupancy  # the dW partials are grid x N: the backward keeps its grid to the hint
    grid = min(tiles, num_sms * resident) if persistent else tiles
    widths = (*ps, 0, 0)[:3]
    return RowsPlan(op, tile_a, tile_b, widths, warps, occupancy, grid, a % tile_a != 0, width != n, tma)
