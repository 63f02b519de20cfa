"""Plans of the row-tile kernels: the rules that turn (rows, N, element size, GPU) into a tile,
a grid and compiler hints. Pure Python, no GPU; ``plan(...)`` shows a reader the plan for any N.

    rows = plan("forward", a=16384, b=1, n=5376, elem_size=2, num_sms=132)

The rules, and what each stands on. Every constant below is a first choice read from the SASS
of the kernels (bench/NOTES.md, session 11: registers and spills per tile, no GPU was lent);
none is timed yet. The GPU probe ``python -m bench.probes.rows_probe`` times the candidates
around them.

- pieces: a row of n elements is held as at most MAX_PIECES power-of-two pieces, largest
  first, with the least padding (5376 = 4096 + 1024 + 256; 2880 -> 2048 + 1024, 192 lanes
  padded); padded lanes cost registers and issue slots, never bytes.
- rows per tile: as many rows as fit TILE_BYTES of x (16 KB forward; 8 KB backward, which
  also holds dy), a power of two, at most MAX_TILE_ROWS: enough bytes per load for a block
  that a few resident blocks keep an SM's share of the memory system busy.
- warps: 8 for tiles of WIDE_TILE elements or more (at most 72 elements per thread at the
  longest rows planned), else 4.
- occupancy hint: the blocks per SM that keep IN_FLIGHT_BYTES of row tiles in flight per SM,
  a power of two from 1 to 8, never more threads than an SM holds, and never so many that the
  hint's register cap, 65536 / (blocks x threads), falls under what the tile needs:
  REG_BASE + REG_PER_ELEM[op] registers per element a thread holds. That need is read off the
  compiled kernels (bench/probes/rows_candidates.json: the highest hint that compiled without
  spills, for bf16 and fp32, 4 and 8 warps, 1-256 rows of 128-18432 elements): one-row forward
  tiles spilled at 64 registers with 21-24 elements per thread and compiled at 128; the
  backward, which also holds dy and the dW sums, needs about twice as many per element.
- longest rows: MAX_ROW_ELEMS (forward 18432, backward 8192 elements, pieces included): the
  longest rows whose 8-warp kernel compiled without spilling for both bf16 and fp32. Longer
  rows get no plan (None): the caller runs the core kernels.
- grid: the forward launches one block per row tile (the hardware schedules them; the loop
  runs once per block), the backward a persistent grid of SMs x occupancy blocks, trimmed to
  the row tiles, each block adding its rows' dW into its own row of the partial buffer.
- two leading dims (A, B): a row tile is TILE_A x TILE_B rows with TILE_B the largest power of
  two that divides B (so no tile overhangs B), TILE_A the rest.

A row's plan depends on n, the element size and B only, never on A (the number of rows): a row
is reduced in the same order whatever batch it comes in (batch invariance).
"""

import functools
from dataclasses import dataclass

__all__ = ["MAX_ROW_ELEMS", "RowsPlan", "pieces", "plan"]

OPS = ("forward", "backward")
MAX_PIECES = 3
TILE_BYTES = {"forward": 16 * 1024, "backward": 8 * 1024}
MAX_TILE_ROWS = 256
WIDE_TILE = 4096
IN_FLIGHT_BYTES = 64 * 1024
REG_BASE = 48
REG_PER_ELEM = {"forward": 2, "backward": 4}
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
         tma: bool = False, max_pieces: int = MAX_PIECES) -> RowsPlan | None:  # fmt: skip
    """The plan for an (a, b, n) problem of elem_size-byte elements on num_sms SMs, or None when
    its rows are longer than MAX_ROW_ELEMS[op]. The keywords override the rules (probes, tuning;
    max_pieces=1: one padded tile per row)."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if a < 1 or b < 1:
        raise ValueError(f"a plan needs at least one row, got a={a}, b={b}")
    ps = pieces(n, max_pieces)
    width = sum(ps)
    if width > MAX_ROW_ELEMS[op]:
        return None
    rows = tile_rows or max(1, min(MAX_TILE_ROWS, _prev_pow2(TILE_BYTES[op] // (width * elem_size))))
    tile_b = min(rows, b & -b)  # the largest power of two dividing b, at most the tile's rows
    tile_a = rows // tile_b
    elems = rows * width
    warps = warps or (8 if elems >= WIDE_TILE else 4)
    tile_bytes = elems * elem_size * (2 if op == "backward" else 1)
    threads = 32 * warps
    registers = REG_BASE + REG_PER_ELEM[op] * elems // threads
    fit = min(OCCUPANCIES[-1], THREADS_PER_SM // threads, REGISTERS_PER_SM // (threads * registers),
              IN_FLIGHT_BYTES // tile_bytes)  # fmt: skip
    occupancy = occupancy or _prev_pow2(max(1, fit))
    tiles = -(-a // tile_a) * (b // tile_b)
    if persistent is None:
        persistent = op == "backward"
    grid = min(tiles, num_sms * occupancy) if persistent else tiles
    widths = (*ps, 0, 0)[:3]
    return RowsPlan(op, tile_a, tile_b, widths, warps, occupancy, grid, a % tile_a != 0, width != n, tma)
