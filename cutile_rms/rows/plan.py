"""Plans of the row-tile kernels: the rules that turn (rows, N, element size, GPU) into a tile,
a grid and compiler hints. Pure Python, no GPU; ``plan(...)`` shows a reader the plan for any N.

    rows = plan("forward", a=16384, b=1, n=5376, elem_size=2, num_sms=132)

The forward's constants come from two H200 probes of session 12 (``python -m bench.probes.rows_probe``:
the 525 spill-free candidates of rows_candidates.json, then 204 more around the lengths the
first rules got wrong; each timed by graph replay beside the copy ceiling of the same run;
bench/results/h200/ab/s12*-rows-probe-*.csv, bench/NOTES.md); session 14 changed the masked
tiles' rule; session 18 the gathered tiles' (the comment above GATHERED_BWD_MIN_WIDTH) and the
lanes backward.
The backward's row-tile rules are still the first choices read from the SASS (session 11); it runs
by default on the rows that ``backward_by_default`` names (short power-of-two rows: session 14's
comparison with the core backward; unaligned rows; 16-bit rows of a multiple of 8 elements, not
16, whose static tiles hold 16 warps an SM: session 22; aligned rows up to SHORT_BWD_MAX_ELEMS
that are not a power of two: session 27; aligned 16-bit rows whose tiles keep ALIGNED_BWD_IN_FLIGHT
in flight, ``aligned_backward_tile``: session 52) and at most as many rows as SMs of 2048 elements or more
(``few_rows``: session 39), elsewhere only with ``mode="rows"``. Session 53: two-row gathered tiles
where one row keeps too little in flight (GATHERED_BWD_PAIR_ELEMS), pieces of at least
SHORT_BWD_MIN_PIECE for the 4-row short aligned tiles.

- which rows (forward): at most MAX_ROW_ELEMS elements (longer rows spill at any hint with 8
  warps, the most tileiras 13.4 takes), and for 2-byte elements a multiple of VECTOR_ELEMS: the
  JIT proves a row length divisible by 16 elements or by nothing, and a row it cannot prove
  loads 2 bytes at a time (probe: bf16 22369 x 3000 at 113-141 us, 46-57% of the copy ceiling,
  where fp32 rows of 3000, loaded 4 bytes at a time, reach 98.7%), except on static layouts
  (``static_fit``: a multiple of 8, not 16, elements loads 16 bytes there). 16-bit rows shorter than
  MIN_PIECE_BYTES that are not a power of two run only on static layouts, as one padded piece
  (runtime pieces or padded tiles: 77-130 us at bf16 96, 160, 192 against the core's 81; static:
  STATIC_PADDED_BLOCKS), and a row that leaves one block per SM runs on the core's TMA tile
  unless that power-of-two tile pads more than 1/7 of the row (one block per SM hides no
  latency: bf16 16384 71.9 us on the core tile, 85-105 on any row tile with the loop; fp32 14336
  144 vs 178; but 18432, which the core pads to 32768, 86 vs 121 bf16 and 135 vs 139 fp32), or the
  row is 16-bit and its one-row tiles number at least LONE_TILES_PER_SM an SM (``lone_tiles``: a
  block a tile without the loop, two blocks an SM, session 42), or the row is fp32 and its rows
  number at least LONE_TMA_TILES_PER_SM an SM, 2-D rows whose caller says they give the core's
  bits (``lone_tma``, ``same_bits``: aligned rows, a weight of x's dtype or none; the core's own
  tile and TMA loads, a block a row without the loop at two blocks an SM, session 44). Other rows get
  no plan (None): the caller runs the core kernels. (Before these, ``long_fit`` takes the
  forward of aligned 16-bit rows of 12 KB or more on static layouts, 24 KB on runtime ones, that
  are not a power of two, 7168 and 18432 among them: the bullet on long rows below.)
- pieces: a row of n elements is held as at most MAX_PIECES power-of-two pieces, largest
  first, with the least padding, none narrower than MIN_PIECE_BYTES (a 16-byte vector for each
  thread of 4 warps) unless the row is: 18432 = 16384 + 2048, 5376 -> 4096 + 2048, 1536 ->
  2048; except that a row of 4 KB or more takes two pieces down to 1 KB where they pad less
  (2560 = 2048 + 512). Padded lanes cost registers and issue slots, never bytes. Narrow pieces
  cost more, but a second one less than a third: bf16 3584 as 2048 + 1024 + 512 ran 76-77 us, as
  one 4096 tile 70; 1536 as 1024 + 512 78-79 (one-row tiles of 3 KB), as 2048 68.6; 2560 as
  2048 + 512 69.0, as 2048 + 1024 76.0. The backward's 16-bit short rows of 513-640 take pieces
  of at least SHORT_BWD_MIN_PIECE (session 53).
- rows per tile: a row of one piece: as many rows as fit TILE_BYTES of x (16 KB forward; 8 KB
  backward, which also holds dy), a power of two, at most MAX_TILE_ROWS (bf16: 16 KB tiles were
  the fastest or within 1% from 128 to 8192, 94-97% of the copy ceiling). A row of several
  pieces (2 KB or longer): one row per tile (bf16 3072: 66.7 us one row per tile, 78.8 two;
  5376, 6144, 12288 likewise). Few rows of 2048 elements or more take fewer rows a tile, down to
  one (FILL_TILES_PER_SM).
- warps: 4, and 8 for tiles of more than WIDE_TILE[op] elements (backward: one-row tiles only, and
  the two-row gathered tiles of GATHERED_BWD_PAIR_ELEMS that keep a one-row tile's 8 warps).
  Probe 1, bf16: 4 won at every forward tile of up to 8192 elements (6144: 52.9 us with 4, 61.2
  with 8; 12288 and longer rows run best on 8); backward, 32 x 128 176 us with 4 warps, 209
  with 8, 16 x 256 249 vs 344, but one 4096 row 125 with 8, 135 with 4.
- registers: a thread of the tile needs base + per_row x (elements of one row it holds) +
  per_other x (elements of the tile's other rows) registers (REGISTERS, by op and element
  size): the line under which bench/probes/rows_candidates.json's compiled tiles stopped
  spilling (e.g. bf16: one 6144 row with 4 warps compiled clean at a 128-register cap, one 8192
  row only at 256; 8 x 1024 at 64, 4 x 2048 only at 128; fp32 needs more per element).
  ``resident``: the blocks an SM then holds (at most 8 blocks, 2048 threads, 65536 registers).
- occupancy hint: the largest power of two up to ``resident``, so its register cap never falls
  under the need, except 3 where the line holds 3 blocks of 4 warps (ODD_HINT_MIN_REGS: a hint
  of 2 let the compiler take 180 registers for fp16 8192, 2 blocks per SM); forward tiles
  whose rows fit one warp's 16-byte vectors (512 B: a row reduced by shuffles, no block
  barrier) at most WARP_LOCAL_HINT. Probe, bf16: rows reduced across
  warps need the blocks (16 x 512, 8 x 1024: 69.6 us at 8 blocks, 78.3 at 4); rows within a warp
  do not (64 x 128: 67.4 at 4, 69.9 at 8). 16-bit tiles of several rows that overhang N (a
  padded piece) take 8 whatever the line says: 1536 as 4 x 2048 ran 68.6 us at 8 blocks (the
  line's 4: 79.3), though 4 x 2048 compiles with a few spilled registers there. The rule is 32
  warps per SM at the 64-register cap that goes with it: where 4 warps need more than
  MASKED_NEED, the tile takes twice the rows on 8 warps at 4 blocks (session 14: 3584 as 2 x 4096
  on 4 warps at 8 blocks, need 89, spilled: 80.0 us, ncu 55 MB of local-memory writes beside the
  112 MB of y; as 4 x 4096 on 8 warps at 4 blocks, need 67: 68.2 us, Liger 67.6). Backward: also
  at most the blocks that keep IN_FLIGHT_BYTES of x and dy tiles per SM; gathered 16-bit tiles
  halve their rows until they hold GATHERED_WARPS_PER_SM warps per SM, and even ones whose one-row
  tiles keep too little in flight take two rows (GATHERED_BWD_PAIR_ELEMS, session 53).
- prefetch (backward): each block reads its next tile before it works on this one where the hint
  leaves 128 registers a thread or more and the register line's need passes that cap by less than
  PREFETCH_OVER_CAP (session 26: fp16 1.2-1.95x, bf16 up to 1.25x, fp32 up to 1.2x; tiles at 8
  blocks an SM, or far over their cap, spilled and lost).
- grid: one block per row tile, except a persistent grid of SMs x hint blocks (the weight
  loaded once per block) for the backward and for one-row forward tiles of 2-byte rows of 8 KB
  or more that take several pieces or one block per SM, unless those tiles (of 2-D rows) are at
  least MANY_TILES_WAVES times that grid (``many_tiles``: then a block a tile without the loop,
  1.03-1.40x on fresh lengths of every class it takes, session 41). Probe, bf16, persistent vs a block per
  tile: 5376 75.9 vs 84.4 us, 7168 74.5 vs 88.3, 14336 74.2 vs 91.6, 18432 51.0 vs 57.8; but
  8192 (one piece, 3 blocks per SM) 79.2 vs 70.1, 3072 (6 KB) 72.2 vs 66.7; fp32 one-row tiles
  ran 3-10% faster on a block per tile at every N tried. A persistent grid must fill the SMs:
  at SMs x 1 blocks the same tiles ran 1.5-3x slower (bf16 2048: 200 vs 70 us).
- loop (forward): the blocks stride over the tiles in a loop, but for one unpadded row of plain
  loads of at most ONE_TILE_THREAD_BYTES a thread on a grid of one block a tile where the caller
  fills (fill=True), which runs without it (the loop's software-pipelined code was most of such
  a block's work: decode-sized rows 0.98-1.12x, geomean 1.04, session 40; wider rows, padded and
  gathered tiles on a block-a-tile grid lost without it), and for ``many_tiles``' and
  ``lone_tiles``' and ``lone_tma``'s grids (fill=True too): without the loop those tiles compile to fewer registers,
  so more blocks an SM keep rows in flight; the lanes forward of 16-bit rows on static vector lanes
  runs without it at every M (``lanes_one_tile``, session 55: 1.05-1.18x).
- two leading dims (A, B): a row tile is TILE_A x TILE_B rows with TILE_B the largest power of
  two that divides B (so no tile overhangs B), TILE_A the rest; the forward's rows of
  ONE_HEAD_ROW_BYTES or more take TILE_B = 1.

- static layouts (``static_fit``: 16-bit rows of an even length not a multiple of 16, of at
  least 1 KB forward and 2 KB backward, and the forward of short 16-bit multiples of 16 that are
  not a power of two): the kernels compile N and the row strides in
  (kernels.RowArray), which loads such rows 4, 8 or 16 bytes at a time; their multi-row forward
  tiles take plain loads. The rest run runtime layouts. Rows of a multiple of 8 elements, not
  16, of 2 KB or more (MIN_PIECE_BYTES, as for every 16-bit row that is not a power of two) run
  on them forward (the core kernels before session 22); without static layouts (past
  rows.launch.STATIC_LAYOUTS, or a caller's static=False) they stay with the core kernels. Past
  the row tiles only the forward of even unaligned rows (and of fp32 rows, the static long forward:
  sessions 30, 49) takes them, and the one-pass long backward (the two-kernel long backward stays
  on runtime layouts: session 23).
- short rows on static layouts (session 25): 16-bit rows of 4 | N (8-byte aligned starts) at
  any length and fp32 rows of up to 1024 elements forward (511 backward) run static too; rows
  under 2 KB there (and every static fp32 row) take one padded power-of-two piece, whose lanes
  past N tileiras drops, with registers counted on N; their backward tiles keep IN_FLIGHT_BYTES
  of x and dy in flight at 8 blocks an SM. So 16-bit rows of 8 x odd elements under 2 KB leave
  the core kernels, forward and (by default) backward.
- 16-bit rows of a multiple of 16 elements, of 12 KB or more, that are not a power of two
  (``long_fit``: 4 rows an SM fit half of L2; 6144-24816 on 132 SMs) run forward on the
  long-row kernel: each row read twice, the second time from L2, 8 KB a chunk on 8 warps (no
  padded lanes, few registers, many warps). Up to LONG_UNROLL_MAX_CHUNKS chunks (20480 elements)
  on static layouts with the chunk count compiled in, one block per row, 4 or 8 blocks an SM
  (session 28: torch.compile's structure; 1.02-1.17x); every such row on runtime layouts from 24
  KB on, on a persistent grid at 4 blocks (session 21). Session 52: on static layouts, those of 8 |
  N past 20480 elements up to 5 chunks of 16 KB (40960) run one block per row too, in 16 KB chunks
  at 2 blocks with the lookahead (``long_static_chunk``: 1.06-1.27x, a tie at 30976).
- odd rows (``odd_static``, session 29): their runtime plan, compiled for the row layout (tileiras
  then drops the lanes past N and folds the row offsets: about half the instructions of a lanes
  tile), from 65 elements: forward for 16-bit rows the row tiles hold (but 385-511, whose static
  tile spills) and fp32 rows up to 512 elements, backward on the 16-bit lanes tiles. Even unaligned
  16-bit rows that load 4 or 8 bytes at a time, from 12 KB to 5 chunks of 16 KB
  (``long_static_chunk``), run the static long forward one block per row as the aligned ones do
  (session 29: 1.04-1.3x).
- session 30: fp32 rows that the forward row tiles hold at one block an SM with padded lanes
  (13313-18431 elements on 132 SMs) run that static long forward too, in 16 KB chunks at 2 blocks
  an SM (``long_static_chunk``: 1.03-1.3x, but 0.94x at 17999).
- session 31: 16-bit rows of 4 mod 8 elements padded to 128-512 (forward and backward) and the
  backward of those of 2 mod 4 padded to 256 run static lanes tiles of 4 elements a lane, one
  8-byte vector a thread and row piece (``vector_lanes``: 1.06-1.28x; session 30's static row
  tiles of 4 mod 8 rows went).
- session 32: the forward multiplies xhat by the weight in x's dtype where llama casting allows it
  (kernels.common.CAST_LLAMA_NATIVE, the same bits but for zero signs; 1.04-1.10x on 16-bit rows whose tiles did not
  grow); with it the forward of 16-bit 2 mod 4 rows padded to 128-512 runs static lanes of 8
  elements (1.07-1.32x), and the backward of those padded to 128 joins the 4-element lanes.
- sessions 33-35: the forward of 16-bit rows whose rows are contiguous end to end (the caller's
  ``flat``), odd ones from 24000 bytes, 2 mod 4 ones from 64000, 8 mod 16 ones from 52000 (on static
  layouts past 40960 elements since session 52) and 4 mod 8 ones past 80 KB (FLAT_MIN_BYTES), reads
  them as one flat array (``flat_plan``, kernels.rows_fwd_flat): each row's 16-byte aligned
  interior 16 bytes a load, its head and tail element by element, its weight from 8 shifted
  copies, its sum of squares from 16-byte loads too, added exactly (bf16 57085 2.67x the gathered
  long kernel, 12001 1.19x the row tiles, 63566 1.15x the long forward's 4-byte loads).
- session 35: 16-bit rows of a multiple of 8 elements, not 16, are 16-byte rows on static layouts
  and take the long forward's aligned rules (``vector_rows``: 1.0-1.6x); the fp32 backward of rows
  that are not a power of two, past 4 KB, runs on the row tiles (FP32_BWD_MIN_BYTES: 1.0-1.7x the
  core); the gathered 16-bit backward on static layouts holds a row as one padded piece where the
  row fills 3/4 of it (PADDED_BWD_MIN_SHARE: 1.2-1.3x); the core's split backward takes its
  narrowest width (rmsnorm.config.narrow_split).
- session 37: the backward of 16-bit rows that are not 16-byte aligned, contiguous, from 16 KB, odd
  or past CORE_BWD_MAX_ELEMS, reads them flat too (FLAT_BWD_*: kernels.rows_dot_flat,
  rows_bwd_flat; 1.02-1.31x the long backward); the fp32 backward of unaligned rows past the row
  tiles runs the core's split kernels (1.02-1.08x the long backward).
- session 38: fp32 odd and 2 mod 4 rows from 64000 bytes (while 2 an SM fit FLAT_FP32_L2_SHARE of
  L2) take the flat forward again, its tail's squares now fused into their adds as the chunks'
  (batch invariant): 1.01-1.49x the core's split kernel in one probe (16411-33958; that probe ran
  the split kernel 10% slower at 17425 than the random set had: 225.3 against 203.5 us); up to
  20480 elements the static long forward since session 49.
- session 45: the forward of 16-bit 2 mod 4 rows on static 8-element lanes tiles held as many rows
  as kept a tile within 40 live elements a thread: up to 1.23x where a padded row holds few live
  elements, 0.99-1.00x where it holds many (replaced in session 55).
- session 46: the forward of odd 16-bit rows of 257-511 runs on the lanes tiles (512 lanes wide; on
  static layouts within 36 live elements a thread, ODD_LANES_FWD_LIVE_ELEMS: 0.99-1.12x the row
  tiles; under llama's fp32 multiply and gemma too).
- sessions 47-49: the second pass of the flat forward (16-bit) and of the static long forward (rows
  at 2 blocks an SM: 16 KB chunks, 16-bit and fp32) loads the next chunk before it stores this one
  (FLAT_PREFETCH_*, LONG_PREFETCH_*: 1.04-1.24x); session 49: fp32 rows up to 5 chunks of 16 KB
  that the row tiles left to the core (but line-aligned ones) and the odd and 2 mod 4 ones of
  16000-20480 that the flat forward took run the static long forward (LONG_FP32_CORE_LINE_BYTES:
  1.03-1.18x).
- session 50: fp32 odd and 2 mod 4 rows, contiguous, whose flat forward's rows in flight fill more
  than SPLIT_L2_SHARE of L2 run the split flat forward (``split_fit``, ``split_plan``: a row's 16 KB
  segments on as many blocks, loaded 16 bytes a thread from the flat array, their sums exchanged as
  the core's split kernels exchange them: 1.08-1.16x the core's split kernel and the flat forward,
  29790-65535 on 132 SMs); session 51: its weight read after the row's sum, 5 blocks an SM, from
  22342 (1.09-1.29x).
- session 54: the forward of 16-bit 2 mod 4 rows on vector lanes tiles of at most 32 rows (82-510)
  ran at 4 blocks an SM with the prefetch (1.005-1.077x); session 55: the forward of 16-bit rows on
  static vector lanes runs a block a tile of 2048 elements without the loop, y scattered
  (``lanes_one_tile``: 1.05-1.18x; it replaced sessions 45's and 54's rules for those tiles).
- session 56: the forward of fp32 rows of 4 | N, not 16 | N, of 5633-8192 elements (the widest
  4-warp row tiles, whose 4-byte loads on runtime layouts spill or wait; ``word_static``): their
  runtime plan, compiled for the row layout, where it loads 16 bytes at a time (1.00-1.06x at 6 of
  6 lengths; shorter rows gained nothing); session 57 moved its line to 5633 (the 4096 + 2048
  pieces: 1.00-1.03x at 9 lengths). Session 57: the forward of fp32 rows of 16 | N, 8193-13312
  (one-row 8-warp tiles), runs a block a row without the loop in at most two pieces
  (``wide_one_tile``: 1.07-1.23x where the loop's tile issued loads late; where it did not, 1.00x,
  but 0.99x at the 8192 + 1024 pieces, 8705-9216).
- unaligned rows (a byte length not a multiple of 16, ``unaligned``; the forward of long ones,
  contiguous, reads them flat: sessions 33-35 and 38 above): gathers on the pieces that
  need bounds checks (GATHER_PIECES and the comment above it); past the longest row tile, the
  long-row kernels (``long_plan``: 16-bit forward and backward, where not flat, and fp32 forward up
  to 20480 elements, ``long_static_chunk``; the forward of even 16-bit rows
  on static layouts, 4 or 8 bytes a load, with the chunk count compiled in on rows of an odd
  number of 4-byte words, LONG_UNROLL_WORD_ELEMS); short ones (padded to at most
  512 bytes forward (odd 16-bit rows 1 KB), 2 KB and 512 elements backward, ``lanes_fit``) the lanes kernels
  (``lanes_plan``): forward rows padded to at most 256 elements (odd 16-bit ones and those of
  ``vector_lanes`` 512), backward to 2 KB. Even unaligned
  16-bit rows past 8192 elements run the long forward (from 12 KB on static layouts where they are
  not a multiple of 8 elements: ``long_static_chunk``, a block a row); their backward is the one-pass long
  backward where two blocks an SM fit half of L2, the core kernels past that up to 16384
  elements (CORE_BWD_MAX_ELEMS), the two long kernels beyond (session 25; the flat backward where
  the rows are contiguous, session 37).

A row's plan depends on n, the element size and B only, never on A (the number of rows), but
for the forward tile's rows (and with them its occupancy hint) where few rows of 2048 elements or
more would leave SMs idle (FILL_TILES_PER_SM): a row is reduced in the same order whatever batch
it comes in (batch invariance; where the tile's rows change with A, that rests on the compiler's
per-row layout, the same at one, two and four rows a tile on tileiras 13.4, sm_90, which
test_rows_batch_invariance checks on the GPU at 2048 and 4096; the flat rows kernels,
whose loads start where a row's alignment puts them, add their sums' lanes exactly instead:
kernels._exact_sum, and the split flat forward each segment's squares: kernels.split._exact_sum3);
A sets the grid and
whether a tile can overhang A, neither of which changes a row's arithmetic (no rule has a forward
read its next tile first; the flat and long forwards' chunk lookahead follows N alone; a probe's
next-tile prefetch is the same arithmetic in another compiled kernel, and each compiled kernel may
order a row's sum its own way, session 55) (gathered and plain
loads of an unaligned row tile take the same register layout, two 16-bit elements or one 32-bit
a vector: the JIT proves no wider alignment either way). Rows that take static layouts
(``static_fit``, ``odd_static``, ``word_static``, ``vector_lanes``, ``long_static_chunk``) plan again on runtime
layouts once a process has compiled rows.launch.STATIC_LAYOUTS row layouts: there a row's kernel, and so its bits, can
depend on what the process ran before (a bounded cache, not the batch).
"""

import functools
import math
from dataclasses import dataclass

from cutile_rms.rows.kernels import EXACT_SUM_MAX_LANES, LOADS_GATHER, LOADS_PLAIN, LOADS_TMA

__all__ = [
    "MAX_ROW_ELEMS",
    "RowsPlan",
    "aligned_backward_tile",
    "backward_by_default",
    "few_rows",
    "flat_fit",
    "flat_plan",
    "lanes_fit",
    "lanes_plan",
    "long_fit",
    "long_plan",
    "long_static_chunk",
    "odd_static",
    "pieces",
    "plan",
    "same_bits",
    "short_backward",
    "short_view_rows",
    "split_fit",
    "split_plan",
    "static_fit",
    "unaligned",
    "vector_lanes",
    "word_static",
]

OPS = ("forward", "backward")
MAX_PIECES = 3
TILE_BYTES = {"forward": 16 * 1024, "backward": 8 * 1024}
MAX_TILE_ROWS = 256
WIDE_TILE = {"forward": 8192, "backward": 4095}
IN_FLIGHT_BYTES = 64 * 1024
# Registers a tile needs: (base, per element of one row, per element of the tile's other rows),
# per thread; the forward's by element size (what compiled without spilling, see above).
REGISTERS = {("forward", 2): (20, 1.75, 0.4), ("forward", 4): (20, 2.0, 1.4), ("backward", 2): (48, 4, 4),
             ("backward", 4): (48, 4, 4)}  # fmt: skip
VECTOR_ELEMS = 16
MIN_PIECE_BYTES = 2048
# Few rows, forward: a multi-row tile (TILE_BYTES) leaves SMs idle, or one block per SM, where the
# rows are few; the tile's rows halve while there are fewer than FILL_TILES_PER_SM row tiles an
# SM (the core's fill_sms, config.FILL_SMS, the same idea). Session 39 (ab/s39h, H200, graph replay,
# us, the rules' tile -> one row a tile, rstd stored): bf16 2048 (4 rows) M = 1 1.96 -> 1.53, 32
# 2.37 -> 1.76, 132 3.62 -> 2.59, 256 3.85 -> 2.72, 512 4.29 -> 3.19; bf16 4096 (2 rows) 32 2.36 ->
# 2.06, 132 3.35 -> 2.92, 256 3.74 -> 3.41, 512 4.53 -> 4.43; fp32 2048 (2 rows) 32 2.50 -> 1.90,
# 132 3.46 -> 2.77, 256 3.85 -> 3.29, 512 4.79 -> 4.34 (inference alike); 8 warps a row changed
# nothing. Measured on unpadded 2-D rows of 2048-4096 elements (FILL_MIN_ROW_ELEMS); shorter rows
# (more rows a tile, fp32 1024 among them), padded ones and head views keep their tiles (not
# measured), as do the callers that pass fill=False (the experimental fused add and FP8: not
# measured). A row's bits do not change with its tile's rows (test_rows_batch_invariance, y: bf16
# and fp32 2048 and 4096 at 1-4099 rows against 20000, on the H200).
FILL_TILES_PER_SM = 2
FILL_MIN_ROW_ELEMS = 2048
# One tile a block, forward (RowsPlan.loop False: kernels.rows_fwd without its grid-stride loop):
# where the grid is the tiles, each block runs one tile, and a tile of one short row is a
# latency-bound round trip. The loop's code, which tileiras 13.4 software-pipelines (the next
# tile's loads and address math in the prologue), is most of such a block's work: CPU SASS, bf16
# 1 x 2048 at 8 blocks 728 instructions and 61 registers with the loop, 304 and 40 without; bf16
# 1 x 4096 888 / 98 -> 368 / 63. ncu (H200, bf16 132 x 2048, ab/s40a; active cycles an SM): rows_fwd
# 2880, minimal one-row kernels 2504 with the loop and 2289 without, Liger's 2296; rows_fwd's extra
# stalls are no-instruction (icache), short-scoreboard and wait. Session 40 (ab/s40b-d, H200, graph
# replay, us, loop -> none, one y as the torch API's allocations in a captured graph): one unpadded
# plain row of at most ONE_TILE_THREAD_BYTES a thread ran faster or tied: bf16 2048 M = 1 / 32 / 132 /
# 256 1.53 / 1.77 / 2.06 / 2.52 -> 1.42 / 1.62 / 1.92 / 2.45, bf16 4096 1.66 / 1.94 / 2.68 / 3.08 ->
# 1.53 / 1.74 / 2.52 / 3.05, fp16 4096 1.64 / 1.77 / 2.56 / 3.08 -> 1.54 / 1.74 / 2.51 / 3.10, fp32
# 2048 1.55 / 1.76 / 2.57 / 3.00 -> 1.42 / 1.66 / 2.46 / 2.87; to the rule's largest M (526 rows:
# fill gives one row a tile up to there) 0.98-1.08x (s40c: 2048 at 384 / 526, s40d: 4096 at 320-526;
# 0.98-1.12x in all, geomean 1.04); 128 bytes a thread and more lost or tied (bf16 8192 0.96x,
# fp32 4096 0.98-1.01x, fp32 8192 0.98-1.02x), where the loop's early loads pay. Without the loop,
# on the grids the rules then gave (a block a tile already; ``many_tiles`` below is another case),
# tiles of several rows, padded pieces and gathers lost (bf16 16384 x 1536 (4 x 2048 padded) 0.83x,
# 16384 x 2880 0.90x, gathered 148143 x 453 0.27x, 99999 x 383 0.66x; training tiles of several
# rows 0.99-1.02x): they keep the loop. Callers that pass fill=False (the experimental fused add;
# FP8 has a kernel of its own) keep it too: unmeasured.
ONE_TILE_THREAD_BYTES = 64
# Many tiles, forward (RowsPlan.loop False on a grid of the tiles instead of a persistent grid): the
# one-row 16-bit tiles that the rules run on a persistent grid (rows of 8 KB or more in several
# pieces, and gathered rows: ``persistent`` in plan()) run a block a tile without the loop where the
# tiles are at least MANY_TILES_WAVES times that grid. Without the loop the same tile compiles to
# fewer registers (CPU SASS, sm_90, 4 warps: bf16 4096 + 1024 90 -> 78, 4096 + 2048 112 -> 93,
# gathered 4441 96 -> 56, 5873 128 -> 64; no stack), so more blocks an SM keep rows in flight.
# Session 41 (ab/s41b, s41c; H200, graph replay, about 64 Mi elements, us, persistent -> a block a
# tile without the loop): plain 16-byte rows bf16 4352 72.5 -> 66.8, 4400 72.8 -> 67.2, 5120 69.6 ->
# 66.3, 5376 70.0 -> 67.3, 5888 69.1 -> 67.1 (with 4464, 4608, 4864, 5600, 5856: 1.03-1.09x), fp16
# 4400 / 4464 / 5120 / 5376 1.04-1.08x; rows of 2-byte loads (odd, 2 mod 4) 4159 92.3 -> 82.1, 4642
# 87.1 -> 67.8 (with 4354, 4441, 4866, 4883, 4990, 5225, 5722: 1.08-1.29x; 5873 1.00x), odd rows of
# the other bands 7681 / 7889 / 8435 / 10563 / 13865 / 14121 (1-3 pieces on 8 warps) 1.04-1.31x
# (10563 113.7 -> 86.5); 8- and 16-byte gathered rows with a last piece of at most 1024 (4392, 4700,
# 4804) 1.06-1.10x. But 8- and 16-byte gathered rows with a last piece of 2048 (past
# MANY_TILES_GATHER_MAX_PIECE) lost (8 mod 16 5464 / 5512 / 5528 / 5544 0.91-0.92x, 4 mod 8 5196 /
# 5212 / 5228 0.86-0.87x; the same loads and no stack in their SASS: not explained): they keep the
# persistent loop (``many_tiles``). Fewer tiles (s41d: the persistent grid x 1.5 / 3 / 6 / 12 rows)
# were mixed below 12 (bf16 5376 0.97 / 0.87 / 0.98 / 1.02x, 4441 0.91 / 0.74 / 0.93 / 1.03x, 10563
# 1.00 / 0.81 / 1.05 / 1.20x, 2881 0.87 / 0.85 / 0.93 / 0.99x, 5120 1.08 / 0.98 / 1.03 / 1.04x; 4642
# 1.09-1.26x at every count): the persistent loop's prologue, which loads a block's next row, pays
# until the tiles are many waves of the grid. Fresh lengths of every class the rule changes (s41e,
# seed 4142, one a class): 4097-18431 1.03-1.40x at full size (e.g. 4110 76.9 -> 68.0, 4714 86.2 ->
# 67.8, 8853 105.4 -> 84.6, 14601 122.9 -> 92.4, fp16 17299 137.8 -> 98.2), 1.02-1.25x at 12 waves.
# But rows of 2049-3071, whose two-piece tiles the rules already run at 8 blocks of 4 warps an SM
# (the hint the loop-free registers would raise), went 0.89-1.05x (2114 74.1 -> 80.5, 2326 71.8 ->
# 81.0, 2412 69.3 -> 66.4; s41c's 2067 / 2881 1.03-1.04x) and lost at 12 waves (0.89-1.02x): the
# rule needs a hint under MAX_BLOCKS_PER_SM. Views (B > 1: head views, strided rows) were not
# measured: they keep the persistent grid.
MANY_TILES_WAVES = 12
MANY_TILES_GATHER_MAX_PIECE = 1024  # the widest last piece of 8- and 16-byte gathered rows measured faster
# Lone tiles, forward (RowsPlan.loop False on a grid of the tiles): one-row tiles of plain loads and
# unpadded pieces (16-bit: one) that the register line leaves one block an SM (``resident`` 1: 16-bit
# 16384, fp32 rows of 14336 and up) run a block a tile without the loop from LONE_TILES_PER_SM tiles an
# SM (``lone_tiles``; padded pieces, such as runtime layouts give fp32 13313-18432, were not measured,
# and lost without the loop in session 40: they keep it). Without the
# loop such a tile compiles to 92-110 registers at 8 warps (CPU SASS, sm_90: bf16 1 x 16384 92, with
# the loop 122; fp32 16384 93, 14336 as 8192 + 4096 + 2048 108, 17408 as 16384 + 1024 101 against
# 178; no stack), so two blocks an SM keep rows in flight where one did, which then had none while it
# reduced and stored. Session 42 (ab/s42a, s42c, s42d; H200, graph replay, us, the rules -> a block a
# row without the loop, the rules' hint 1 but where named): bf16 16384 at 1024 / 2048 / 4096 / 8192
# rows 20.8 / 38.2 / 71.8 / 141.1 -> 19.9 / 35.6 / 66.6 (hint 2, the same 92 registers) / 130.4 (Liger
# 20.2 / 36.5 / 67.8 / 132.1), fp16 4096 / 8192 71.5 / 140.9 -> 67.8 (hint 3) / 130.8; fp32 17408 (16384 +
# 1024 a block a tile with the loop) 171.7 -> 133.8, 18432 134.9 -> 134.0. In the training set (5d0eaff,
# hint 1): bf16 / fp16 4096 x 16384 72.6 / 72.1 -> 66.9 / 67.0 (Quack 67.8 / 67.3 in that run).
# Fewer rows lost against the core's plans (bf16 16384 at 132 / 256 / 512 rows 5.1 / 6.4 / 10.4 ->
# 5.3 / 7.2 / 11.8), so below the threshold the rules stay as they were: 16-bit 16384 on the core,
# whose tile gives the same bits (y and rstd of 8192 rows, bf16 and fp16, s42e: batch invariance
# holds across the switch, but for the sign of a zero y where the weight holds -0.0: the core
# multiplies by llama's w + 0.0, the row tiles natively, kernels.common.CAST_LLAMA_NATIVE). fp32 rows
# that leave one block an SM and that the core takes (14336-16384, a multiple of 4) gained as much
# (16384 at 2048 / 4096 / 8192 rows 73.4 / 142.1 / 277.0 -> 69.1 / 133.3 / 262.6; 14336, 15328,
# 15744, 16336 1.07-1.12x) but not with plain loads: the core's fp32 tile sums the squares in another
# order (6-10% of y and rstd differ, s42e), so a switch at a row count would break batch invariance;
# they take the core's own tile instead (``lone_tma``, below). Gathered tiles lost (fp32 15036, 15480:
# 150.2 / 148.2 -> 166.8 / 163.3).
LONE_TILES_PER_SM = 8
# Wide one-row tiles, forward (``wide_one_tile``, session 57): fp32 rows of 16 | N past WIDE_TILE
# (one-row tiles on 8 warps, 16-byte loads on runtime layouts) to WIDE_ONE_TILE_MAX_ELEMS run a
# block a row without the loop, in at most WIDE_ONE_TILE_PIECES pieces. Their grid is the rows
# already (fp32 tiles are not persistent), so the loop ran once a block; with it the block loads the
# weight up front (live through the row) and tileiras issues some of the row's x loads only after
# its first use of a loaded value, so they wait a whole DRAM round trip (``deferred_loads`` of
# bench/probes/sass.py, bench/NOTES.md, sessions 56-57). CPU SASS (sm_90, the rules' hints: 2, and 1
# for the 16384 piece; ab/s56-sass-fp32-band8.txt, ab/s57c-sass-noloop-variants.txt,
# ab/s57d-sass-noloop2.txt), the first padded and the exact length of each of the rules' 10 piece
# sets of 8193-13312: with the loop 11 of 20 kernels defer 1-6 x loads (12304 also spills 48 bytes);
# without it, on the rules' three pieces, 3 of 20 defer one ((8192, 2048, 1024), (8192, 4096,
# 1024)); without it in two pieces (8192 and the next power of two, or one 16384 piece past 12288:
# padded lanes cost issue slots, no DRAM bytes) none of 20 defers, at 64-98 registers without
# stack. H200, graph replay, about 64 Mi elements, us, the loop -> a block a row without it in two
# pieces (ab/s57d, fresh lengths, seed 5701; the copy 128): 10560 143.1 -> 132.1, 12432 161.6 ->
# 133.7, 12464 163.2 -> 132.9, 12592 163.2 -> 133.9, 12896 143.8 -> 133.0, 12912 142.8 -> 133.9
# (where the loop defers), 9760 132.5 -> 133.0, 9872 133.2 -> 133.5, 10976 133.1 -> 132.6, 11072
# 132.3 -> 132.0, 11344 132.9 -> 133.1 (where it does not), 8848 131.6 -> 133.3 (0.99x); held out
# (ab/s57f, seed 5703) 9392 149.7 -> 133.2, 10304 144.5 -> 131.8, 10384 144.1 -> 132.0, 12320 155.5
# -> 132.9, 8864 131.7 -> 132.9, 9056 132.0 -> 132.8 (the 8192 + 1024 pieces, where the loop defers
# nothing, 0.99x at all three lengths); 8400 (8192 + 256, the same pieces either way; ab/s56c)
# 154.8 -> 133.7. On the rules' three pieces (ab/s57a) 9360 149.4 -> 132.5, but the sets that defer
# one without the loop ran slower than two pieces do: 10768 132.4 -> 139.4, 11040 132.2 -> 138.2,
# 12880 143.4 -> 135.4: hence two pieces. Rows of 4 | N, not 16 | N (4-byte loads) lost without the
# loop (8264, 8964, 11944, 13064, 13276: 0.95-0.98x; 13064 and 13276 compile to 146 registers):
# they keep it. Past 13312 the rules run the static long forward; callers without static layouts
# keep the loop there (not measured), as do callers that pass fill=False (not measured). Views (B > 1)
# take the rule too (not measured; the same kernel): a view of one leading row (M = 1) is planned as
# 2-D rows (torch_impl.row_groups drops dims of one), so a rule for 2-D rows alone would sum a row of
# such a view in another order at M = 1 than at M > 1.
WIDE_ONE_TILE_PIECES = 2
WIDE_ONE_TILE_MAX_ELEMS = 8192 + 4096 + 1024  # the rules' widest row tile of 16 | N rows (13312)
# fp32 lone tiles on the core's tile (``lone_tma``, session 44): fp32 rows that the core takes as one
# block an SM (its power-of-two TMA tile: 14336-16384, a multiple of 4) run that tile as a row tile,
# one padded piece of TMA loads, a block a row without the loop at hint LONE_TMA_HINT. Its bits are
# the core's: y and rstd of 4096 rows and of 1 / 7 / 130 / 1055 / 1057 alone equal the API's at
# 14336, 14340, 15328, 16000, 16380, 16384 (ab/s44a-bits.log, s44c-bits.log; the sum's order follows
# the load path, s43c, and the hint: at hint 3 5.7-7.3% of y differ). Why hint 2: at hint 1 a TMA
# one-row tile compiles to 168 registers (one block an SM, s43f: 144.3 us at 4096 x 16384), at hint 2
# to 80 registers, no stack and 66.7 KB of shared memory (CPU SASS, sm_90), so two blocks an SM keep a
# row's TMA load in flight while the other reduces and stores; hint 3 lost everywhere (4096 x 16384
# 177.8 us). Tiles of more elements spill at hint 2 (bf16 32768: 152 B of stack, 89.4 us against the
# core's 76.5 at 2048 rows, s44c), hence LONE_TMA_MAX_ELEMS (64 a thread of 8 warps); 16-bit 16384
# lost with TMA loads to its plain lone tile (70.8 against 67.1 us), so fp32 alone. H200, graph replay,
# us, shipped (the core) -> this tile (ab/s44a-rows.csv, s44c-rows.csv): 16384 at 132 / 512 / 1024 /
# 1536 / 2048 / 3072 / 4096 / 8192 rows 7.0 / 19.5 / 37.1 / 55.9 / 73.3 / 107.9 / 142.6 / 278.3 -> 8.3 /
# 21.7 / 38.2 / 54.1 / 70.4 / 101.8 / 133.9 / 263.4 (Liger 6.2 / 20.4 / 36.7 / 52.8 / 68.9 / 101.4 /
# 133.6 / 263.6); 15328 at 1024 / 1536 / 2048 / 3072 / 4096 35.2 / 53.8 / 70.5 / 103.0 / 134.7 -> 36.6 /
# 51.7 / 66.6 / 96.3 / 126.8; 14336 at the same 33.4 / 50.5 / 65.8 / 96.7 / 126.5 -> 34.3 / 48.2 / 61.9 /
# 89.9 / 118.0; 16000 at 1024 / 4096 36.7 / 138.7 -> 37.8 / 131.0. It loses at 7.8 tiles an SM (1024
# rows: 3.9 waves of two blocks, the last wave's idle SMs, 0.96-0.97x) and gains from 11.6 (1536: 5.8
# waves, 1.03-1.05x). Between, s44d (ab/s44d-rows.csv; the core -> this tile at 9 / 10 / 11 / 20 / 45
# tiles an SM) at 16384 43.6 / 47.9 / 52.6 / 93.3 / 204.2 -> 43.0 / 47.9 / 51.9 / 89.1 / 193.1, and the
# unmeasured lengths 14848 at 10 / 11 / 20 / 45 43.5 / 47.4 / 84.2 / 186.1 -> 44.5 / 47.9 / 81.3 / 175.1,
# 15872 45.9 / 51.3 / 90.0 / 197.6 -> 46.9 / 51.0 / 86.5 / 187.6, 16128 47.6 / 51.7 / 91.7 / 203.1 ->
# 47.5 / 51.6 / 87.9 / 190.7: even at 11 (0.99-1.01x), 0.98x at 10; the switch goes at 12 tiles an SM
# (6 waves of two blocks), where every length measured gains. A 16-bit weight with fp32 rows breaks
# the bits (the core's y and rstd differ in 9-19%, rstd too, so the core compiles x's sum otherwise
# beside a 16-bit weight; s44f): those rows keep the core (``same_bits``), as do rows whose start or
# stride is not 16-byte aligned (not measured) and callers that cannot tell (core_bits False).
# 16-bit rows' plain lone tiles keep the core's bits with any weight dtype and none (s44f).
LONE_TMA_TILES_PER_SM = 12
LONE_TMA_HINT = 2
LONE_TMA_WARPS = 8  # the core's tile's (sm_90 table: tile(1, 16384, 1, warps=8)), whose bits it keeps
LONE_TMA_MAX_ELEMS = 16384
FEW_ROWS_MIN_ELEMS = 2048  # the default backward's few rows (few_rows): the shortest measured
WARP_ROW_BYTES = 32 * 16
WARP_LOCAL_HINT = 4
MAX_BLOCKS_PER_SM = 8
REGISTERS_PER_SM = 65536
MAX_ROW_ELEMS = {"forward": 18432, "backward": 8192}  # pieces included
DEFAULT_BACKWARD_BYTES = (128, WARP_ROW_BYTES)  # rows the default backward runs on row tiles (measured range)
# fp32 rows that are not a power of two, past FP32_BWD_MIN_BYTES and up to the row tiles' longest, whose
# backward the core pads to the next power of two: session 35 (ab/s35e-g; H200, graph replay, us,
# about 64 Mi elements, the core -> the row tiles): 1196 352.8 -> 208.5, 1500 301.6 -> 216.3, 2024
# 252.3 -> 212.7, 2040 254.4 -> 212.0, 2500 231.7 -> 203.1, 3000 211.9 -> 202.1, 3076 212.3 -> 199.8,
# 3500 203.6 -> 202.8, 4500 269.2 -> 226.5, 5000 245.9 -> 202.5, 6004 222.3 -> 206.0, 6500 214.9 ->
# 209.9, 7000 203.4 -> 201.9, 8188 206.7 -> 204.2; shorter ones lost: 516 267.2 -> 273.9, 804 205.6 ->
# 223.1, 1004 197.1 -> 205.9 (the core's tile pads them a quarter at most).
FP32_BWD_MIN_BYTES = 4 * 1024
# Aligned rows that are not a power of two, of at most SHORT_BWD_MAX_ELEMS elements, take the
# row-tile backward by default (short_backward). The core backward pads such a row to the next
# power of two and does the work of the padded row: its time tracks that width (bf16 640 / 704 /
# 768 / 832 / 1024: 153 / 141 / 130 / 122 / 104 us at 134 MB), and below 512 it runs at 35-50% of
# the copy ceiling at any padding; the row tiles with their PREFETCH rule run 16-bit rows at
# 125-140 us whatever the length (75% of the copy). Session 27, H200 (ab/s27a, ab/s27b), core ->
# row tiles, us, bf16 / fp16: 96 214 / 213 -> 135 / 134, 160 278 / 281 -> 223 / 178 (the rules'
# o4 tile; 130 on 32 rows at o2, not yet a rule), 192 232 / 236 -> 129 / 134, 320 248 / 246 ->
# 139 / 128, 384 206 / 206 -> 129 / 133, 448 177 / 176 -> 125 / 129, 640 153 / 148 -> 132 / 125;
# fp32 96 270 -> 208, 160 258 -> 204, 192 237 -> 202, 320 258 -> 205, 384 238 -> 200, 640 227 ->
# 204. Past it the core wins or ties: bf16 / fp16 704 141 / 136 vs 151 / 141, 768 130 / 126 vs
# 129 / 134, 832 122 / 119 vs 130 / 133; fp32 768 207 vs 199, 832 200 vs 228, 896 195 vs 211;
# powers of two past DEFAULT_BACKWARD_BYTES too (bf16 512 112 vs 119, 1024 104 vs 134; fp32 256
# 212 vs 210, 512 202 vs 210).
SHORT_BWD_MIN_ELEMS = 96  # the shortest measured (shorter rows: DEFAULT_BACKWARD_BYTES' powers of two)
SHORT_BWD_MAX_ELEMS = 640
# Their 16-bit rows past SHORT_BWD_WIDE_ELEMS (tiles of 4 rows: 8 KiB of x over rows of 528-640
# elements) take pieces of at least SHORT_BWD_MIN_PIECE elements. The pieces' rule (least padding,
# any width) gave some of them a 16- or 32-element piece, 64 or 128 elements of the tile over its
# 128 threads, and those ran at 31-74% of the copy; 4 x 16 elements were the slowest, 608's 4 x 32
# the least slow (not profiled). H200, graph replay, about 64 Mi elements, bf16, us,
# shipped -> pieces of at least 64 (s53a, s53b; the core's own in brackets): 528 (512 + 16 -> 512 + 64) 172.3
# -> 118.4 [179.7], 560 (512 + 32 + 16) 312.9 -> 122.3 [170.3], 592 (512 + 64 + 16) 314.6 -> 142.9
# [161.9], 608 (512 + 64 + 32) 130.9 -> 125.7 [157.6]. Shorter rows' tiles of 8 and 16 rows keep the
# narrow pieces: pieces of 64 lost there (272 124.6 -> 145.5, 304 139.0 -> 146.6; 336 136.7 -> 130.6).
SHORT_BWD_WIDE_ELEMS = 512
SHORT_BWD_MIN_PIECE = 64
# Longer aligned 16-bit rows that are not a power of two (a multiple of VECTOR_ELEMS) take the row-tile
# backward by default too where a tile on ALIGNED_BWD_WARPS warps keeps ALIGNED_BWD_IN_FLIGHT bytes of x
# and dy in flight an SM within the registers of its blocks (``aligned_backward_tile``): 4 blocks where
# a thread holds at most ALIGNED_BWD_ELEMS[4] elements of x (as many of dy, and the prefetched tile's),
# else 2 blocks at most ALIGNED_BWD_ELEMS[2], up to ALIGNED_BWD_MAX_ROWS rows a tile. Before session 52
# the core's backward ran them (its packed tile, one block an SM, 59-84% of the copy), and the rules'
# own row tiles held too few bytes (5376: one block of 8 warps, 21 KiB). H200, graph replay, about
# 64 Mi elements, bf16, us, the core -> the rule's tile (s52d, s52e): 2304 133.9 -> 105.1 (4 blocks,
# 36 KiB), 2560 237.8 -> 102.8, 2880 115.6 -> 103.2 (2 rows at 2 blocks), 3072 111.5 -> 102.2, 4608
# 163.4 -> 108.9 (2 blocks, 36 KiB), 5120 129.3 -> 105.1, 5376 144.2 -> 104.7 (fp16 146.1 -> 104.1),
# 5632 139.6 -> 103.7, 6144 130.6 -> 104.6, 6656 125.0 -> 105.4 (89-95% of the copy). The bounds: 4
# blocks lost past 20 elements a thread (2880 131.4, 3072 126.1: the 128-register cap), 2 blocks past
# 52 (7168 148.2, where the core's 119.4 stays), and tiles of fewer bytes in flight lost to the core
# or barely won (3584 on one row at 2 blocks, 28 KiB, 137.7 against 106.8; 1536's 24 KiB tiles won
# by 1-6% only, 116.2 / 122.5 against 123.2, which the bound leaves to the core; 2304 on 2 rows at 2
# blocks, 36 KiB but 36 elements a thread, 118.2 against 105.1 on 1 row at 4).
# Lengths the rule was not fit to (s52f), the core -> the rule: 1280 (2 rows at 4 blocks, 40 KiB)
# 145.2 -> 105.7, 2320 153.9 -> 106.3, 2496 123.7 -> 104.1, 2752 118.5 -> 116.8, 3200 109.5 -> 110.9
# (the one loss, 1%: 50 elements a thread), 3328 108.6 -> 102.3, 4672 162.3 -> 109.1, 4880 157.6 ->
# 109.1, 5504 141.9 -> 104.9, 5888 135.2 -> 105.4, 6400 127.8 -> 103.9, 6640 125.1 -> 104.7; fp16 3072
# 110.6 -> 102.7, 5632 141.4 -> 103.6; and 1536 on 2 rows at 4 blocks (24 elements a thread, which
# the rule refuses) 139.9 against the core's 123.2. The rule starts where 36 KiB first fit: 1152.
ALIGNED_BWD_WARPS = 4
ALIGNED_BWD_IN_FLIGHT = 36 * 1024
ALIGNED_BWD_ELEMS = {4: 20, 2: 52}
ALIGNED_BWD_MAX_ROWS = 2
# A tile of a head view's rows ((A, B, N): a fused QKV projection's tokens x heads) spans tokens,
# not heads, in the forward where a row holds ONE_HEAD_ROW_BYTES or more: tileiras 13.4 moves a
# (tokens, heads, N) tile of several heads through shared memory to change its layout (SASS,
# sm_90, bf16 128 and 256 on 2-16 heads a tile: 16 LDS.128 + 16 STS.128, and 2 x 32 x 128 or 4 x
# 16 x 128 88 bytes of stack), a (tokens, 1, N) tile not (117 registers, no stack). Session 27
# (H200, graph replay, bf16 forward on the fused-QKV view, heads-first -> tokens-first tile, us;
# ab/s27d-*): 16384 x 32 x 128 92.1 -> 70.5, 65536 x 8 x 128 78.6 -> 68.8, 131072 x 4 x 128 78.5
# -> 68.4, 32768 x 8 x 256 97.1 -> 67.8 (the copy ceiling 64.5). Rows of 128 bytes keep the heads
# (32768 x 32 x 64 66.7 against 76.1; 8, 16 and 2 heads alike); so does the backward, whose tiles
# tied or lost tokens-first (64: 115.6 -> 124.4, 128 and 256 within 1%). The choice depends on N
# and B, not on A: a row's bits do not depend on the tokens in the call.
ONE_HEAD_ROW_BYTES = 256
# The core kernels load their tiles through TMA, whose global strides must be multiples of 16
# bytes; a row whose byte length is not (bf16 510, fp32 133) leaves them on cuTile's element-wise
# fallback: 2.8-12% of the copy ceiling on the H200 (session 15 probe, the random set of seed
# 780467363: bf16 131586 x 510 forward 697 us, backward 2875; fp32 504578 x 133 349 / 627). The
# row tiles' plain loads run those rows 1.0-13x faster, forward and backward, at every such
# length measured (bf16 510 174 / 991 us, 2265 86 / 204; fp32 133 216 / 386; the same on rows
# that are: fp32 292, 1168 bytes, 167-200 vs the core's 199 forward, but backward 310 vs 286).
ALIGN_BYTES = 16
# Unaligned rows read through gathers (kernels.LOADS_GATHER): in tiles of several rows every
# piece, in one-row tiles of 16-bit rows the checked last piece (fp32 one-row tiles keep plain
# loads). Session 16, H200, graph replay (bench/NOTES.md): bf16 131586 x 510 forward 178 -> 81 us,
# 295633 x 227 464 -> 119, 81640 x 822 108 -> 78, backward 510 991 -> 207; one-row tiles, 16-bit,
# persistent, gathered tail / plain: 3001 95 / 118, 5001 91 / 110, 13934 102 / 140, 8686 100 / 84;
# fp32 plain one-row tiles beat gathered tails at 2265-8686 (132-137 vs 132-168 us). Gathered
# rows shorter than MIN_PIECE_BYTES take at most GATHER_PIECES pieces of GATHER_GRANULE elements
# or more: bf16 74 as 64 + 32 216 us (128: 256), 133 as 128 + 32 backward 359 (256: 489,
# 128 + 4 + 1: 1244); fp32 one padded piece, 74 235 us (64 + 32: 268), 133 backward 347 (469).
GATHER_PIECES = {2: 2, 4: 1}
# The forward's gathered short rows longer than the lanes kernels' take one padded piece (session
# 25, H200, us: ab/s25b bf16 100013 x 671 8 x (512 + 256) 97.7 -> 8 x 1024 83.9, 148800 x 451 one
# already, 84.3; ab/s25c 587 100.4 -> 91.3, fp16 587 98.4 -> 94.2). Rows the lanes kernels take keep
# two pieces where a caller asks for row tiles (lanes=False: the fused add, FP8; not measured).
GATHER_FWD_PIECES = 1
GATHER_GRANULE = 32
# A checked piece whose row length the JIT cannot prove a multiple of 16 elements is checked
# element by element, aligned rows too: a plain zero-padded load of it compiles to a branch an
# element (SASS, fp32 rows of 8116, one 8192 piece: 192 LDG, 125 branches, 879 ISETP, 254
# registers, against 48 LDG.128 and 22 branches at 8192). So such pieces are gathered wherever
# unaligned ones are, and also when the piece is the whole row. Session 18 (H200, ab/s18b), fp32
# forward, aligned rows, plain / gathered: 8269 x 8116 200.3 / 160.2 us, 17200 x 3900 184.7 / 130.3,
# 67108 x 1000 144.8 / 130.6, 153919 x 436 (8 x (256 + 128 + 64)) 179.0 / 157.4; but one-row tiles
# of several pieces keep plain loads, as for unaligned rows: 13421 x 5000 (4096 + 1024) 130.9 / 140.5.
# Gathered 16-bit tiles want 16 warps per SM, more than the register line gives them: the
# backward of rows of GATHERED_BWD_MIN_WIDTH or more takes one-row tiles (8 warps past
# WIDE_TILE; even rows up to 3070: two rows, GATHERED_BWD_PAIR_ELEMS below) at GATHERED_WARPS_PER_SM
# warps per SM, and one-row forward tiles of WIDE_TILE
# elements 8 warps. Session 18, H200, us: backward bf16 33996 x 1974 2 x 2048 on 4 warps at 2
# blocks (the line's plan) 205.1, 1 x 2048 on 4 at 4 162.8, 4 x 2048 on 8 at 2 153.5; 33107 x
# 2027, bf16 / fp16: 2 x 2048 on 4 at 2 216.8 / 196.0, 1 x 2048 on 4 at 4 162.3 / 161.9, 4 x
# 2048 on 8 at 2 163.8 / 527.1 (fp16 alone; its SASS holds no more spills than bf16's, 8-16
# stack bytes: not profiled); 8116, bf16 / fp16: 1 x 8192 on 8 warps at 1 block 196.5 / 195.9,
# at 2 166.4 / 172.6. Forward bf16 8269 x 8116 on 4 warps at 2 blocks 111.4, on 8 at 2 89.2
# (persistent; 4 blocks of 4 warps spilled: 162).
# Narrower gathered 16-bit backward tiles keep their rules' rows where those hold 16 warps per
# SM, and halve them until they do: the power-of-two hint of 3 resident blocks was 2, 8 warps per
# SM. Session 19 (ab/s19a, s19b), H200, bf16 / fp16 us, the rules' tile at 8 warps per SM -> the
# halved one at 16: 51543 x 1302 2 x 1312 199.0 / 293.7 -> 1 x 1312 183.3 / 227.1; 75403 x 890 4 x
# 1024 219.4 / 218.6 -> 2 x 1024 203.3 / 209.7; 102456 x 655 4 x 768 365.1 / 364.8 -> 2 x 768 211.9
# / 336.2; 45000 x 1501 (bf16) 221.0 -> 180.2; 37000 x 1777 (fp16) 238.3 -> 234.0. Tiles the rules
# already run at 16 warps per SM stay (60001 x 1111: 2 x 1120 170.1 us, one row 193.6, one row at
# 32 warps per SM 221.8; 120000 x 555: 4 x 576 197.3, one row 269.5 / 227.7).
# One-row gathered 16-bit backward tiles whose 4-warp register line cannot take the prefetch (need
# at or past the 128 registers of 16 warps an SM plus PREFETCH_OVER_CAP) run on 8 warps at 2
# blocks, where they prefetch. Session 28 (ab/s27h), H200, us, 4 warps at 4 blocks (no prefetch)
# -> 8 at 2 (prefetch), bf16 / fp16: 2859 171.7 / 172.8 -> 152.1 / 146.9, 3001 168.8 / 169.3 ->
# 149.1 / 144.6, 3002 170.5 / 171.6 -> 149.1 / 158.8, 3172 160.8 / 154.4 -> 137.5 / 142.9, 3500
# 153.4 / 156.2 -> 132.9 / 135.8 (predicted 1.3-1.45x: came out 1.08-1.18x).
GATHERED_BWD_MIN_WIDTH = 2048
# The gathered 16-bit backward on static layouts holds a row as one padded power-of-two piece where
# that piece uses at least PADDED_BWD_MIN_SHARE of its lanes (the lanes past N are dropped at compile
# time; several pieces each pay their own reductions and gathers). Session 35 (ab/s35h, s35i), H200,
# graph replay, us, about 64 Mi elements, the rules' pieces -> one piece, bf16 / fp16: 7124 (87% of
# 8192) 161.7 / 165.0 -> 121.4 / 123.0, 6146 (75%) 167.1 -> 137.9, 3002 (73% of 4096) 150.2 / 160.2 ->
# 149.8 / 145.2; lower shares lost: 5002 (61%) 130.7 -> 146.1, 4282 (52%) 150.2 -> 157.0, 4100 111.2
# -> 140.2, 2500 108.6 -> 145.0, 2052 114.9 -> 162.1 (1500, 73% of 2048 in 1024 + 512: 127.7 -> 128.8).
# SASS (the review): the 8192 piece at 2 blocks of 8 warps holds 32 bytes of stack at 6500-7124 (7124
# won with it), 72-80 at 7500-8180 (rows pieces() held in one piece before this rule: unchanged);
# the 4096 piece none.
PADDED_BWD_MIN_SHARE = 0.75
PADDED_BWD_WIDTHS = (4096, MAX_ROW_ELEMS["backward"])  # the pieces measured (2048: 1500 tied at 73%)
GATHERED_WARPS_PER_SM = 16
# One-row gathered 16-bit backward tiles whose blocks keep less than ALIGNED_BWD_IN_FLIGHT of x and
# dy in flight an SM (rows of 1281-2303 elements on 4 warps at 4 blocks, 2817-4607 on 8 at 2) take
# two rows on the same warps and blocks, with the prefetch, where the two rows hold at most
# GATHERED_BWD_PAIR_ELEMS elements (padded) a thread: session 52's line of the aligned rows holds
# for these too, up to the registers. H200, graph replay, about 64 Mi elements, us, one row -> two
# (s53a, s53b): bf16 1302 138.3 -> 121.5 (20.5 elements a thread), 1442 136.6 -> 105.7 (24), 2830
# 140.4 -> 109.1 (24), 2922 139.4 -> 108.1 (24; fp16 150.0 -> 108.4), 79-92.5% of the copy; past 24 they
# lost: 1667 130.5 -> 156.7 (28; fp16 128.1 -> 166.7), 3333 142.9 -> 175.2 (28), 1894 118.9 -> 152.3
# (32), 3850 123.5 -> 158.9 (32), 2221 131.5 -> 219.1 (35), 4390 124.2 -> 214.4 (34.5), 2270 114.4 ->
# 184.2 (36), 4558 121.0 -> 191.2 (36). Neither 8 warps at 4 blocks (1442 129.3, 2922 156.7) nor one
# row at 8 blocks (1442 151.7) won; nor more rows in the tiles of 2 rows or more (698: 4 rows at 4
# blocks 148.8 against 143.3). Lengths it was not fit to (s53c), one row -> two: bf16 1380 127.9 ->
# 123.2, 1494 133.5 -> 105.6, 1530 132.0 -> 105.6, 3020 120.0 -> 103.6, 3066 135.3 -> 107.5; fp16 1302
# 138.2 -> 119.5, 1460 121.5 -> 101.8, 2850 149.3 -> 109.3. Odd rows tied or lost (bf16 1333 135.9 ->
# 134.7, 2901 138.6 -> 146.9, fp16 3001 132.1 -> 139.1), so even rows only: the rule changes the
# even unaligned rows of 1282-1534 and 2818-3070. (Where two rows fit 24 elements a thread, one row
# always keeps under 36 KiB today: the bound of elements is the one that binds.) Timed at about 64 Mi
# elements only: with few rows the tiles of two rows leave half the blocks of one (132 rows of 2830:
# 66 blocks), not timed.
GATHERED_BWD_PAIR_ELEMS = 24
# The forward's occupancy hint is a power of two up to the line's resident blocks, except where the
# line holds 3 blocks of 4 warps: there the compiler, capped at 255 registers by a hint of 2,
# took more than a third of the register file for some dtypes (fp16 one-row 8192 tiles: 180
# registers, 2 blocks per SM; bf16: 167, 3). A hint of the resident count itself caps them where
# the line says, and is used where that cap is at least ODD_HINT_MIN_REGS (lower caps spilled:
# bf16 8116 on 8 warps at 3 blocks, 85 registers, 89.8 -> 114.0 us). Session 19 (ab/s19b), H200,
# us, hint 2 -> 3: fp16 16384 x 8192 172.4 -> 134.1, fp32 8269 x 8116 (gathered) 160.9 -> 141.0;
# bf16 16384 x 8192 136.0 -> 135.5, fp32 16384 x 8192 263.1 -> 263.5, fp32 16384 x 7168 229.4 ->
# 229.3.
ODD_HINT_MIN_REGS = 128
# One-row forward tiles of rows whose start is 8-byte but not 16-byte aligned (16-bit 4 mod 8 rows:
# 8-byte loads on static layouts) take 8 warps where 8-warp blocks give more warps an SM than 4-warp ones at the
# register line's occupancy (``_warps_per_sm``: widths 4097-6144, 4 blocks of 8 warps against 4 of
# 4). Session 36 (ab/s36a, s36c; H200, graph replay, about 64 Mi elements, us, 4 warps -> 8, both
# at 4 blocks, persistent): bf16 4804 85.3 -> 73.4, 5212 84.1 -> 73.1, 6116 79.7 -> 71.2, 4636 85.2
# -> 73.9, 5988 79.5 -> 70.3, fp16 4804 83.7 -> 72.7, 5212 82.5 -> 72.2. Rows of other alignments
# tied or lost at the same widths (bf16 odd 4441 92.3 -> 93.4, 5873 87.2 -> 88.5; 2 mod 4 4354 75.4
# -> 76.7, 5722 81.8 -> 81.6; 8 mod 16 4392 73.5 -> 75.5, 5528 70.3 -> 70.4; 16-byte 4464 72.9 ->
# 75.6, 5680 70.0 -> 69.3), and 2604, whose 4-warp tiles already run 8 blocks, lost on 8 at 4 (70.2
# -> 90.1). On static layouts only: runtime layouts load such rows 2 bytes an element, and there 8
# warps tied or lost (the review of session 36, H200, 4 -> 8 warps, us: 4804 89.8 -> 89.4, 4636 91.0
# -> 90.9, 5212 91.6 -> 98.8, 6116 85.5 -> 93.5).
ROW_FWD_WARPS = 8
# The backward's tiles read the block's next tile before they work on this one (RowsPlan.prefetch,
# kernels.rows_bwd's PREFETCH) where the hint leaves a thread at least 128 registers (at most
# PREFETCH_MAX_BLOCKS blocks of 4 warps an SM) and the register line's need passes that cap by
# less than PREFETCH_OVER_CAP. Without it tileiras 13.4 pipelines some tiles across iterations and
# not others, by dtype: fp16's gathered tiles issued their loads a few at a time between the row
# reductions, bf16's all at once (SASS; fp16 1.05-1.6x slower on the same plans). Session 26, H200
# (ab/s26a), rules' tile without -> with, us, bf16 / fp16: 120916 x 555 196 / 248 -> 180 / 168,
# 97400 x 689 205 / 326 -> 167 / 167, 76000 x 883 209 / 198 -> 161 / 159, 47696 x 1407 181 / 225
# -> 163 / 164, 29165 x 2301 178 / 178 -> 156 / 158, 12080 x 5555 (8 warps, 2 blocks, need 136) 194
# / 193 -> 147 / 174, 524288 x 128 127 / 122 -> 114 / 113; fp32 1407 275 -> 229, 4999 248 -> 207,
# 689 271 -> 272. Where it lost: 22362 x 3001 (need 144 against a cap of 128: 144 bytes of stack)
# 169 -> 214; every tile at 8 blocks (a 64-register cap) but fp32 292 (272 -> 215): bf16 136 170
# -> 250 (80 bytes of stack), 292 174 -> 252, 1000 (static 2 x 1024) 126 -> 204, fp32 136 232 -> 261.
PREFETCH_MAX_BLOCKS = 4
PREFETCH_OVER_CAP = 16
# Static layouts (kernels.RowArray: N and the row strides compile-time constants) where they
# widen the loads: 16-bit rows of an even length that is not a multiple of 16 (static_fit). Such a
# row starts 4-byte aligned (8-byte where 4 divides N, 16-byte where 8 does), which only a
# compiled-in row stride shows tileiras; at runtime it proves 16 bytes only for multiples of 16
# elements and reads the others 2 bytes an element. On static
# layouts the forward's multi-row tiles read their checked pieces with plain loads (a zero-padded
# plain load of N known compiles to 4-byte loads without the element-wise checks the gathers
# were for). Session 20, H200, graph replay (ab/s20a), runtime -> static, us, bf16 forward:
# 61119 x 1098 95.6 -> 75.9, 39851 x 1684 78.5 -> 68.9, 20586 x 3260 83.6 -> 71.5, 153919 x 436
# 84.8 -> 81.3, 30476 x 2202 88.1 -> 77.2, 23334 x 2876 96.0 -> 76.2, 8688 x 7724 93.6 -> 81.7,
# 13492 x 4974 92.3 -> 87.5, 13031 x 5150 94.3 -> 88.5, but 131586 x 510 80.9 -> 82.9 and 189573 x
# 354 (16 x (256 + 128), 16 bytes of stack) 112.1 -> 122.8; fp16 1098 94.7 -> 73.8; backward bf16
# 7724 170.2 -> 141.3, 1684 148.5 -> 139.3, 3260 164.6 -> 160.3, 4974 175.1 -> 171.6, 1098 173.6 ->
# 174.6, fp16 1098 199.7 -> 169.6. Not elsewhere, measured the same run: odd rows, 2 bytes an
# element either way (static plain multi-row tiles serialized their loads: bf16 431 on 16 x 512
# 86.2 -> 191.6 us, SASS 36 loads into 4 registers against 132 into 46; one-row tiles within 2%
# but 12653, 102.6 -> 96.0), aligned rows (4096 69.1 -> 69.7, 5376 71.3 -> 72.7), fp32 rows (1098
# forward 136.4 -> 137.4, backward 259.5 -> 269.5), the lanes kernels (backward 1.5-3x slower:
# bf16 510 141.7 -> 414.9, 138 204.4 -> 460.3; forward 81-191 7-17% slower but 138 141.8 ->
# 107.6) and the long-row backward (28567 274.8 -> 442.2). (Those lanes rows were even: static
# lanes tiles of even rows take wide loads and move them through shared memory, with spills, SASS
# of session 29 at 204-520; odd ones gain, ODD_STATIC_MAX_ELEMS below.)
# Session 21 (ab/s21b: 9 lengths of that class drawn from a fresh seed, 636255548, after the rule),
# runtime -> static, us: forward bf16 5321 x 12612 101.7 -> 75.1, 6762 x 9924 100.1 -> 78.2,
# 26588 x 2524 85.0 -> 70.4, 8359 x 8028 91.0 -> 80.5, 9287 x 7226 96.8 -> 93.1, 110015 x 610
# 100.1 -> 95.3, fp16 55279 x 1214 88.4 -> 70.5, 5282 x 12706 104.7 -> 97.3, but fp16 172074 x
# 390 (16 x 512) 88.6 -> 97.1; backward 2524 150.3 -> 119.9, 7226 189.2 -> 158.3, 8028 167.8 ->
# 139.9, fp16 1214 188.2 -> 157.3, but bf16 610 (4 x (512 + 128)) 195.1 -> 240.4. With session
# 20's (forward 510 and 354 on 16-row tiles lost; backward 1098, 2196 bytes, even), tiles of
# many short rows lose: static layouts from STATIC_MIN_ROW_BYTES[op] on.
# Session 22 (ab/s22a; H200, graph replay, us, bf16 / fp16): 16-bit rows of a multiple of 8
# elements, not 16, which the rules had left to the core kernels, forward, core -> static row
# tiles (runtime ones load them 2 bytes an element: 85-102 us): 58661 x 1144 117.2 / 113.8 -> 78.4
# / 75.7, 32640 x 2056 102.1 / 101.2 -> 81.4 / 77.6, 22369 x 3000 78.8 / 78.5 -> 80.4 / 68.4, 13421
# x 5000 79.6 / 83.4 -> 72.1 / 71.3, 10908 x 6152 75.3 / 75.9 -> 83.8 (40 bytes of stack) / 72.2,
# 6716 x 9992 102.7 / 102.9 -> 77.0 / 76.1, 5050 x 13288 87.1 / 85.3 -> 82.8 / 85.7. Backward
# (mode="rows"), runtime -> static: 3000 205.0 / 203.3 -> 145.1 / 143.1, 5000 159.6 / 159.2 ->
# 142.4 / 139.1, 2056 129.9 / 129.1 -> 129.3 / 127.0, 6152 186.7 / 230.5 -> 181.8 / 177.8, 1144
# 138.8 / 159.7 -> 152.2 / 150.3 (the default backward keeps the core: 125.1 at 3000, 132.2 at
# 6152, where the row tiles run 8 warps an SM; 154.5-192.4 at the others; ab/s22b, core -> static:
# 1128 194.0 -> 153.1, 1192 184.4 -> 154.9, 1208 182.8 -> 154.1 at 16 warps an SM; at 8: 1736 135.5
# -> 189.3, 2728 134.7 -> 192.4, 3480 110.8 -> 141.8, 3496 110.8 -> 141.3, 7592 118.4 -> 149.3, 7816
# 117.5 -> 146.9, 5976 135.9 -> 154.7: backward_by_default takes the former). Fresh lengths of the
# class (ab/s22b, seed 445264182), forward, core -> static: 1128 118.7 / 114.7 -> 79.1 / 76.2, 1192
# 112.7 / 110.0 -> 77.0 / 74.5, 1208 112.0 / 109.5 -> 76.7 / 73.9, 1736 80.6 / 78.4 -> 69.0 / 69.0,
# 2728 83.3 / 83.1 -> 86.2 / 70.8, 3480 72.6 / 72.5 -> 70.2 / 69.9, 3496 72.6 / 72.8 -> 70.0 / 69.8,
# 5976 77.5 / 77.5 -> 70.8 / 70.5, 7592 71.5 / 70.9 -> 74.4 / 72.0, 7816 71.3 / 71.0 -> 73.3 / 70.8,
# 9240 110.0 / 109.7 -> 79.5 / 78.4, 9928 104.4 / 103.7 -> 77.3 / 76.3, 10104 102.4 / 102.8 -> 76.5
# / 75.7 (geomean 1.21x with s22a's, worst 0.96); one occupancy lower lost at every length; but
# rows under 2 KB, held as multi-row tiles of several padded pieces, tied or lost: 648 102.3 /
# 96.6 -> 106.2 / 96.5, 856 80.1 / 75.8 -> 104.1 / 101.4; these stay with the core (the rule for
# short 16-bit rows that are not a power of two, MIN_PIECE_BYTES).
STATIC_MIN_ROW_BYTES = {"forward": 1024, "backward": 2048}
# Short aligned 16-bit rows that are not a power of two (n % 16 == 0, under MIN_PIECE_BYTES), which
# the forward left to the core's power-of-two TMA tile (or ran as pieces 1.25-1.6x slower), run on
# static layouts as one padded piece too, and every static padded 16-bit tile takes 32 warps an SM
# (8 blocks of 4), rows reduced within a warp included (the hint of WARP_LOCAL_HINT was measured on
# unpadded tiles). Session 27 (H200, graph replay, ab/s27c), core -> static one piece at 8 blocks
# (at 4), us, bf16: 699050 x 96 81.0 -> 70.7 (90.2), 419430 x 160 81.1 -> 77.5 (100.2), 349525 x
# 192 75.7 -> 70.7 (92.1), 209715 x 320 80.0 -> 77.9, 149796 x 448 79.2 -> 67.5; fp16 96 82.6 ->
# 69.4 (87.7), 192 80.0 -> 69.1 (86.8), 320 75.8 -> 75.5. The rules' pieces on runtime layouts:
# 97.9-128.4. Persistent grids of the same tiles: within 1% or slower (448: 73.2). After the rule
# (ab/s27f), core -> static, bf16 / fp16: 48 81.1 / 80.1 -> 68.8 / 68.3, 640 78.2 / 76.3 -> 74.3 /
# 72.3, 768 86.4 / 81.7 -> 68.4 / 67.4, 1008 69.2 / 69.3 -> 68.5 / 68.2; and 4 | N rows within a
# warp that had run at 4 blocks, 4 -> 8: bf16 200 92.8 -> 70.3, 232 87.1 -> 68.2.
STATIC_PADDED_BLOCKS = MAX_BLOCKS_PER_SM
# Short rows on static layouts (session 25, ab/s25b; H200, graph replay, us; the rules' runtime
# tiles -> static ones). A row whose start is 8-byte aligned (16-bit, 4 | N) or an fp32 row loads
# 8 or 16 bytes at a time once N and the stride are compiled in, and its padded lanes are dropped
# at compile time, so one padded power-of-two piece beats several exact ones (rows under
# MIN_PIECE_BYTES, and static fp32 rows, take one piece; their registers follow N, not the
# padded width).
# Forward: bf16 229825 x 292 16 x (256 + 64) gathered 106.2 -> 16 x 512 96.4, fp16 104.8 -> 94.2;
# 189573 x 354 111.5 -> 98.5; 153919 x 436 85.0 -> 81.0; 78398 x 856 (the core's tile) 79.9 ->
# 8 x 1024 68.1; fp32 292 (256 + 32 + 4, plain) 197.5 -> 16 x 512 134.8, 436 157.4 -> 131.8, 518
# 141.1 -> 133.3, 856 131.8 -> 131.9 (the copy ceiling 127.4). 16-bit rows of 4-byte aligned starts
# under 1 KB tied or lost (bf16 510 80.4 -> 83.0, 518 86.9 -> 87.4, fp16 390 87.6 -> 91.2), odd
# rows lost 1.5-2x (static plain tiles load 2 bytes at a time, serialized: bf16 451 84.3 ->
# 128.3, 671 97.3 -> 167.1), fp32 rows of 1098 tied forward and lost backward (session 20).
# Backward: the tile that keeps IN_FLIGHT_BYTES of x and dy in flight at MAX_BLOCKS_PER_SM
# blocks: bf16 292 8 x (256 + 64) at 4 blocks 236.0 -> 4 x 512 at 8 178.4 (8 x 512 at 4: 287.0),
# fp32 292 (the core's) 284.1 -> 2 x 512 at 8 223.8.
STATIC_FP32_MAX_ELEMS = {"forward": 1024, "backward": MIN_PIECE_BYTES // 4 - 1}
# Odd rows on static layouts (``odd_static``, session 29): an odd row loads 2 (fp32: 4) bytes an
# element on any layout, but with N and the row stride compiled in tileiras drops the lanes past N
# and folds the row offsets into immediates: far fewer instructions where a tile holds several
# rows or padded lanes. SASS (sm_90), bf16 rows_fwd_lanes 8 x 256 on 4 warps, runtime -> static:
# 672 -> 344 instructions at 135 (loop body 390 -> 227: 1.44 warp instructions an element at
# runtime, where the copy rate needs 5.6 a clock an SM against the 4 it issues), 376 at 211, 384
# at 255; gathered row tiles 1175 (4 x 2048) 1464 -> 808, 2747 (2048 + 1024) 632 with 40 bytes of
# stack -> 456 and none. They keep the runtime plan (pieces, gathers, blocks; but the rows of the 16-bit forward's
# 512-wide lanes tiles, ODD_LANES_FWD_LIVE_ELEMS, session 46): only the layout
# changes. H200, graph replay, M = 64 Mi / N, us (ab/s29a): forward bf16 135 134.9 -> 107.8, 211
# 95.5 -> 89.2, 255 88.9 -> 85.3, 303 (16 x 512 gathered) 104.6 -> 96.5, 421 87.3 -> 90.0 (the
# lanes tile 8 x 512, static: 87.3), 1175 90.6 -> 79.6, 2747 98.7 -> 86.2, 5001 92.2 -> 93.2; fp16
# 135 117.3 -> 105.0; fp32 135 / 211 / 255 within 0.7%, 303 146.3 -> 134.3. Backward bf16 135
# 194.8 -> 169.2, 211 148.4 -> 145.0, 303 196.7 -> 198.8, 1175 187.9 -> 185.0; fp32 135 / 211
# 207.9 / 209.1 -> 212.7 / 211.9. Session 29 (ab/s29b), static / runtime: forward bf16 3001 83.3 /
# 95.5, 4001 81.0 / 82.1, 6001 88.0 / 87.2, 7001 93.4 / 93.0, 8191 90.2 / 89.5, 9001 86.0 / 101.8,
# 12001 94.7 / 94.3, 16001 122.8 / 123.3; fp16 303 96.0 / 104.5, 1175 78.5 / 90.0; fp32 405 132.9 /
# 132.5, 1023 134.7 / 131.6; backward bf16 2747 183.3 / 159.8, 5001 165.8 / 173.6, 8191 191.6 /
# 179.0. So: the 16-bit forward wherever the row tiles hold the row (ties within 1% but 421,
# 0.97x), the backward on the lanes tiles only (one-row tiles lost up to 13%), fp32 forward rows up
# to 512 elements (its 512-wide multi-row tiles; 1023 lost 2%).
# The review of session 29 (SASS, sm_90, the rules' plans, static against runtime): odd rows under
# 65 (tiles of 64-256 rows) spill 48-160 bytes static (none runtime): not timed, left runtime; the
# 16-bit 16 x 512 gathered tile spills 8 bytes at 257-383 (303: 1.08x all the same) and 16-32 at
# 385-511 (bf16 421: 0.97x): those stay runtime; fp32's 8 x 512 tile holds no stack either way.
# Since session 46 that tile runs the 16-bit forward of 257-511 only for callers without the lanes
# kernels (lanes=False); on the lanes tiles 385-511 stay runtime because static layouts bought 0-1% (s46b).
ODD_STATIC_MAX_ELEMS = MAX_ROW_ELEMS["forward"]
ODD_STATIC_FP32_MAX_ELEMS = 512
ODD_STATIC_MIN_ELEMS = 65  # rows the lanes kernels pad to LANES_MIN_ELEMS (128) and up
ODD_STATIC_SPILLS = (385, 511)
# fp32 rows of 4 | N but not 16 | N on static layouts (``word_static``, session 56): every such row
# starts 16-byte aligned, but the JIT promises a row stride divisible by 16 elements or nothing, so
# on runtime layouts tileiras loads and stores them 4 bytes at a time. CPU SASS of the rules'
# runtime plans (ab/s56-sass-widths.txt, ab/s56g-sass-shipped.txt, ab/s56e-sass-shipped.txt): 1032
# 30 LDG and 22 STG against 1040's 6 LDG.128 and 3 LDG.64; 1380-13080 plain LDG only, 4x the load
# and store instructions, and 6200, 6540, 7800, 7944, 8044 (4 warps), 11548, 13000, 13080 (8 warps)
# spill 8-32 bytes. ncu (s56d, s56f): 128 bytes a warp request at 7800 and 13080, 473-511 at 16 | N
# (7800: 42.7 M instructions against the static tile's 19.5 M). Compiled for the row layout the
# same 4-warp plans load 16 bytes and hold no stack (ab/s56g-sass-static.txt). H200, graph replay, about 64
# Mi elements, us, runtime -> static (ab/s56c, ab/s56g): on the 4-warp tiles (at most WIDE_TILE)
# 1380 128.9 -> 128.3, 1484 129.2 -> 128.8, 2220 131.0 -> 130.3, 2600 130.5 -> 129.6, 3292 130.8 ->
# 131.1, 3400 131.5 -> 131.2, 3564 131.0 -> 131.0, 4596 131.9 -> 131.6, 5400 131.5 -> 132.8, 6200
# 133.2 -> 133.3, and the longest, 6540 136.3 -> 132.6, 7000 141.2 -> 132.8, 7800 140.1 -> 132.9, 7944
# 138.8 -> 131.7, 8044 139.9 -> 131.7 (the copy 127-128), but 5000 132.0 -> 137.6. The gains follow
# the tile's length more than its spills (7000's runtime tile holds no stack but defers 5 loads;
# 6200's spills and tied). On the 8-warp
# tiles past WIDE_TILE static layouts lost at 7 of 10 lengths, for reasons not yet profiled: 8260
# 137.8 -> 149.5, 9400 132.5 -> 149.7, 9460 133.4 -> 149.4, 10276 134.6 -> 143.0, 11548 138.9 ->
# 150.3, 12600 136.6 -> 161.5, 12712 135.3 -> 161.9 (9000 131.8 -> 132.1; 11000 141.2 -> 133.4 and
# 13000 147.3 -> 142.2 gained): those rows stay on runtime layouts, as does the backward (not
# measured). Nor did the shorter rows gain, and the SASS shows where the line falls
# (ab/s56-sass-word-static-sweep.txt, every 13th length of the class, the rules' pieces): the
# runtime 4-warp tiles hold their 4-byte loads without stack up to 5632 elements, and from 6145
# (48 a thread) every one spills 16-32 bytes or issues 4-5 of its x loads after the first use of a
# loaded value (the slow pattern of 16-byte tiles, bench/NOTES.md, session 56; 4-byte tiles it does
# not sort: 6200 ran 133.2 with both), while every static one holds 124-155 registers without
# either. Measured below 6145, static layouts bought nothing (9 of 10 lengths within 1%) and lost at
# 5000, whose static tile (4096 + 1024 pieces) defers 2 loads; from 6145 they ran 1.00-1.06x at 6 of
# 6 lengths. Session 57 (ab/s57h, s57e; the same method) held it out and measured 5633-6144, the
# rules' 4096 + 2048 pieces, where the SASS said both layouts spill or defer: fresh lengths of the
# class 6412-8168 ran runtime -> static 1.00-1.08x (6648 132.9 -> 132.4, 6788 141.5 -> 131.5, 8132
# 140.3 -> 132.0), and 5640, 5652, 5800, 6004, 6028, 6116 1.00-1.03x (6116 136.2 -> 132.4), none
# slower; under 5633 (4096 + 1024 and shorter pieces) static lost again (4708 131.2 -> 140.3, 5000
# 130.9 -> 136.6, 2472 130.7 -> 133.9). So WORD_STATIC_MIN_ELEMS is where the rules' pieces become
# 4096 + 2048; the deferred-load reading of the SASS (which called 5633-6144 a loss) does not sort
# these 4-warp tiles.
WORD_STATIC_MIN_ELEMS = 4096 + 1024 + 512 + 1  # 5633
# Unaligned rows longer than the row tiles take (MAX_ROW_ELEMS), and aligned 16-bit forward rows
# that ``long_fit`` names (session 21, below): kernels.rows_*_long, in chunks of
# LONG_CHUNK_BYTES[op] on LONG_WARPS[op] warps (SASS, sm_90: 16 KB forward chunks 104-112
# registers, the 8 KB ones of session 21 62-79; no spills). Before them such rows ran on the core
# kernels at 0.14-0.19x torch.compile (bf16 2656 x 25263, session 15). The forward reads each row
# twice, the second time from L2 if the rows in flight (SMs x blocks per SM) fit LONG_L2_SHARE of
# it (L2_BYTES: 50 MiB on H100 and H200), which sets the blocks per SM, at least LONG_MIN_BLOCKS;
# so its chunks were large (16 KB, until session 21) to keep bytes
# in flight. Session 16, H200, bf16: 2013 x 33333 and 2656 x 25263 at 2 blocks per SM 144 and
# 140 us, 1.28-1.31x the best other provider; 1024 x 65535 at 1 block (16 KB in flight per SM)
# 235 us, 0.61x torch.compile. The backward runs a row-dot kernel, then a (row groups x chunks)
# grid that keeps each chunk's dW in registers: 1.15-1.30x torch.compile at 11111-65535. The core
# kernels ran such rows' backward at 0.06-0.09x the best other provider where they are even (bf16
# 1994 x 33654, 3218 x 20852: its chunked backward) and fp32 ones at 0.47-0.65x (session 16,
# random seed 57259388), so every unaligned row past the row tiles takes the long backward (fp32
# 1994 x 33654 522 -> 404 us, 1125 x 59642 481 -> 418, 7726 x 8686 703 -> 433; Quack 242-309),
# and 16-bit ones the long forward; fp32 forwards keep the core's split kernels, which the long
# forward did not beat (1994 x 33654 211 -> 261 us, 1125 x 59642 198 -> 289: ab/s16d, ab/s16e).
# (Session 37: the core's split backward, narrowed since (session 35), runs fp32 unaligned long
# rows 1.02-1.08x faster than the long backward again, so they went back to it: FLAT_BWD_* below.)
# Session 21 (ab/s21a, ab/s21b; H200, graph replay, us): with the squares summed element by
# element (kernels.rows_fwd_long), 8 KB chunks at 4 blocks per SM ran aligned 16-bit rows that
# the row tiles hold as several pieces, or the core pads to a power of two, faster than either:
# bf16 4096 x 12288 59.8 -> 58.1, 2048 x 18432 51.1 -> 48.9, fp16 2048 x 18432 51.1 -> 47.0, bf16
# 2979 x 22528 97.6 (the core's tile padded to 32768) -> 84.7. 16 KB chunks at 2 blocks: 78.5,
# 53.7, 52.4, 89.4; 4 KB chunks at 8 blocks 62.1, 53.0, 52.2, 95.1; at 2 or 4 blocks 1.5-2x
# slower. Where the row is a power of two, or shorter, the register tiles and the core won: 16384
# x 8192 135.6 against 151.2 at best, 16384 x 7168 127.6 against 133.7, 4096 x 16384 72.4 (core)
# against 80.3, 2048 x 32768 74.6 against 85.7, 1024 x 65536 89.8 against 102.7, and every fp32
# row tried (8192-65536, 7-45% slower). The unaligned bf16 2349 x 28567 ran 130.5 (16 KB at 2
# blocks) and 131.9 (8 KB at 2). So the forward's chunks are 8 KB, its blocks per SM those whose
# rows fit LONG_L2_SHARE of L2, at most LONG_MAX_BLOCKS, and ``long_fit`` names the aligned rows
# it takes: 16-bit, a multiple of VECTOR_ELEMS, of at least LONG_MIN_BYTES (the shortest row
# measured to win: 12288; 7168 lost and 8208-12280 were not timed), not a power of two,
# LONG_MAX_BLOCKS rows an SM in that share of L2 (up to 48 KB a row on 132 SMs: 12288-24816
# elements). Session 28 (below) took rows from 12 KB on static layouts. The odd results of the
# other settings were spills (SASS: 4 KB chunks at 4 blocks, 160 bytes of stack);
# tests/test_rows.py compiles the rules' long plans and checks for none.
LONG_CHUNK_BYTES = {"forward": 8 * 1024, "backward": 8 * 1024}
LONG_WARPS = {"forward": 8, "backward": 8}
LONG_BWD_BLOCKS = 2
LONG_MIN_BLOCKS = 2
LONG_MAX_BLOCKS = 4
LONG_MIN_BYTES = 24 * 1024  # on runtime layouts (the chunk count at run time, a persistent grid)
# Session 28 (ab/s28b, ab/s28c; H200, graph replay, us, shipped -> long): on static layouts, with the
# chunk count compiled in (UNROLL) and one block per row, the long forward of aligned 16-bit rows
# reaches 91-98% of the copy ceiling from 12 KB rows on, where the row tiles hold a row in 104-128
# registers at 4 blocks of 4 warps (ncu, bf16 7168: 25% occupancy, torch.compile's looped kernel
# 91%). About 64 Mi elements, 8 KB chunks, bf16 / fp16: 6144 69.8 / 69.4 -> 69.3 / 67.6, 7168 73.7 /
# 72.3 -> 71.2 / 69.8 (at 8 blocks; the rule's 4: 72.5 / 70.5), 10240 74.5 / 73.9 -> 71.1 /
# 70.2, 12288 75.5 / 74.1 -> 70.3 / 69.2, 14336 81.7 / 77.6 -> 72.2 / 71.8, 18432 83.8 / 80.2 ->
# 75.6 / 75.1, 24576 86.8 / 84.9 -> 82.7 / 80.4;
# bf16 16384 x 7168 127.7 -> 121.2, fp16 16384 x 5376 103.4 -> 91.2. Powers of two tie or lose
# (8192 69.2 -> 69.1, 16384 71.7 -> 72.6, 32768 73.6 -> 89.7), so do 10 KB rows (bf16 5120 70.2 ->
# 74.5, 5376 70.8 -> 73.4) and fp32 (8192 132.4 -> 138.4). The same kernels on runtime layouts ran
# 8-30% slower, on a persistent grid 1-13% slower. Blocks per SM: as many as keep the rows in
# flight within LONG_L2_SHARE of L2, up to LONG_STATIC_MAX_BLOCKS (14336, 18432 at 4: 72.2 / 75.6
# against 73.7 / 80.7 at 8), and 4 where the last chunk is more than half a chunk: the SASS of such
# rows at 8 blocks (48 registers) spills 16-48 bytes (6656-7680, 11264; 6144, 9216, 10240, 12288
# none), and s28d timed them so: bf16 11264 82.1 -> 87.5 us (7168 at 8 still won, 71.2 against
# 72.5 at 4). Past LONG_UNROLL_MAX_CHUNKS chunks the unrolled loop spills at 4 blocks too (22528:
# 16 bytes, 84.9 -> 88.9; 24816: 56 bytes, 89.6 -> 106.3): those rows kept the runtime layouts'
# plan until session 52 (since: five LONG_WIDE_CHUNK_BYTES chunks at 2 blocks, ``long_static_chunk``,
# the comment after LONG_WIDE_CHUNK_BYTES).
LONG_STATIC_MIN_BYTES = 12 * 1024
LONG_STATIC_MAX_BLOCKS = 8
LONG_UNROLL_MAX_CHUNKS = 5
# The static long forward (static_fit rows past the row tiles: even 16-bit rows, 4- or 8-byte
# aligned) compiles its chunk count in (kernels.rows_fwd_long's UNROLL) on rows of an odd number
# of 4-byte words (n % 4 == 2, 32-bit loads), where tileiras keeps the loops' size (SASS, 5-15
# chunks: 832-1488 instructions, no stack); rows of a multiple of 4 elements (64-bit loads) take
# it at run time, since there tileiras unrolls the loops whole from 6 chunks on and spills at the
# 128-register cap of 2 blocks (6 of 8 lengths of 6-13 chunks, 8-64 bytes of stack). Session 23
# (ab/s23c), H200, graph replay, bf16 / fp16 us, run-time count -> compiled in: n % 4 == 2, 11
# lengths 24326-64450: 1.13-1.30x faster (28566 116.3 / 115.7 -> 89.5 / 88.9, 64450 146.5 / 148.3
# -> 126.1 / 125.7); n % 4 == 0: 53908 127.8 / 113.3 -> 172.9 / 128.5, 60172 138.7 / 119.5 ->
# 142.3 / 129.6, but 22356 (5 chunks at 4 blocks, no spill) 92.0 / 86.1 -> 80.3 / 80.6.
LONG_UNROLL_WORD_ELEMS = 4
# Even unaligned 16-bit rows of 4- or 8-byte loads on static layouts (not a multiple of 8) take the
# static long forward of aligned rows too, one block per row with the chunk count compiled in
# (``long_static_chunk``): from LONG_STATIC_MIN_BYTES, in 8 KB chunks up to LONG_UNROLL_MAX_CHUNKS
# of them, past that in LONG_WIDE_CHUNK_BYTES chunks up to as many; at LONG_MAX_BLOCKS blocks an SM
# (fewer where L2 says: 8 won only at 6500 and spilled or lost elsewhere). Before, the row tiles
# took them up to 8192 elements (4 blocks of 4 warps, several pieces) and a persistent grid of 8 KB
# chunks with the count at run time past that. Session 29 (ab/s29b, ab/s29c; H200, graph replay,
# bf16, about 64 Mi elements, us, before -> the rule; the best candidate in brackets): 5564 (11 KB,
# under the bound) 82.4 [76.8], 6500 88.4 -> 74.9 [71.4 at 8 blocks], 7254 92.5 -> 74.0, 9434 79.1
# -> 73.9, 10812 83.5 -> 75.6 [73.7 in 16 KB chunks], 13514 83.2 -> 77.2, 17284 87.6 -> 84.5 [74.4
# in 16 KB chunks], 21010 85.3 -> 84.9 (16 KB chunks at 4 blocks; 80.1 at 2), 28044 113.0 -> 84.7
# (16 KB at 2), 33580 115.3 -> 98.3 (16 KB at 2; 96.6 at 4; Quack 78.8 in the random set); fp16
# 17284 86.0 -> [73.9]. Past 5 chunks the loop, compiled in or not, lost (41234 in 16 KB chunks
# rolled: 124.6 against the persistent grid's 118.1). The SASS of the rule's plans holds no stack;
# 16 KB chunks at 8 blocks spilled 32-88 bytes (9434-13514) and ran 1.2-1.6x slower.
LONG_WIDE_CHUNK_BYTES = 16 * 1024
# Aligned 16-bit rows (8 | N on static layouts) past five 8 KB chunks take the same: LONG_UNROLL_MAX_CHUNKS
# chunks of LONG_WIDE_CHUNK_BYTES, a block a row, at 2 blocks an SM with the lookahead (the L2 share;
# ``long_static_chunk``). Before session 52 they took the persistent grid of 8 KB chunks at 4 blocks
# (long_fit's 4 rows an SM within half of L2: up to 24816 on 132 SMs), then the core's bucket-32768
# tile (one 32768-lane tile a row, one block of 8 warps an SM: 25984 pads 21% of its lanes), the
# flat forward (8 mod 16 from 26008) and the core's split past 32768. H200, graph replay, about 64
# Mi elements, us, shipped -> this (s52a, s52c): bf16 22528 81.0 -> 76.7, 24816 86.9 -> 71.4, 25000
# 90.6 -> 71.8, 25984 88.2 -> 69.8 (92% of the copy; fp16 83.4 -> 69.7), 27000 81.9 -> 75.7, 28672
# 78.1 -> 70.3, 30976 73.5 -> 73.8 (the one tie: the tile pads 5.5%), 31000 80.9 -> 76.0, 32760
# 80.7 -> 76.3, 33792 93.4 -> 73.5, 35000 83.6 -> 75.1, 36864 87.8 -> 74.4 (fp16 87.8 -> 74.5), 39000
# 84.0 -> 77.5, 40000 84.0 -> 77.0. Its persistent grid ran 3-8% slower, its rolled loop 81.7-84.4, 8 KB
# chunks at 4 blocks 82-94 (56 bytes of stack at 25984), the core's split 87-144. CPU SASS of the
# rules' plans (s52a): 124-128 registers, no stack, LDG.128. 32768 keeps the core's exact tile.
LONG_FP32_MAX_BLOCKS = 2
# The static long forward (a block a row, the chunk count compiled in: ``long_static_chunk`` and
# the aligned rows of ``long_fit``) loads the next whole chunk before it stores this
# one in its second pass (kernels.rows_fwd_long's PREFETCH, as the flat forward's FLAT_PREFETCH_*)
# where that leaves at most LONG_PREFETCH_MAX_BLOCKS blocks an SM. The lookahead holds two chunks
# of x and w: chunk bytes / threads registers a thread, plus LONG_PREFETCH_REGS for the rest (CPU
# SASS, session 48: 8 KB chunks on 8 warps compile to 56-64 registers; 16 KB chunks under 4
# blocks' cap of 64 held at 20690, 63 registers, but spilled 128 bytes at 24822), so 16 KB chunks
# take it at 2 blocks, 8 KB ones at 4. A weight or y wider than x (the plan counts x's element
# size for them) runs without it (rows.launch.narrow_lookahead: bf16 x with an fp32 weight at 30450 and
# 36004 spilled 88 and 112 bytes, CPU SASS, session 48's review). At 2
# blocks (16 warps an SM) each chunk's L2 round trip stalls the pass; at 4 the other blocks' loads
# cover it. Session 48, H200, us, bf16 without -> with the lookahead (s48a, s48b): 16 KB chunks at
# 2 blocks: 20690 83.2 -> 75.2 (from 4 blocks; fp16 83.2 -> 75.1), 24822 92.0 -> 74.0 (from 4;
# 3 blocks alone, session 47: 5%), 26002 83.9 -> 74.4, 30450 91.4 -> 79.0, 36004 92.2 -> 85.8;
# 8 KB chunks at 4 blocks (from 8 where the rules gave 8): 6144 66.7 -> 66.9, 6616 70.9 -> 68.5,
# 10000 69.4 -> 71.1, 12288 70.6 -> 68.2 (fp16 70.6 -> 68.3), 13000 70.5 -> 68.4, 15002 (4-byte
# loads) 77.1 -> 84.2, 18432 70.6 -> 71.4: no rule there. fp32 rows (16 KB chunks at 2 blocks, the
# LONG_FP32_* rows below; CPU SASS 84 -> 110 registers at 13406, 96 -> 116 at 15002, no stack),
# session 49 (s49a), without -> with: 13406 150.6 -> 139.4, 14000 153.9 -> 142.0, 15002 154.2 ->
# 140.0, 17284 160.0 -> 138.4, 18000 161.3 -> 141.8 (7-14%).
LONG_PREFETCH_REGS = 32
LONG_PREFETCH_MAX_BLOCKS = 2
# fp32 rows that the forward row tiles hold at one block an SM (8 warps: 13313-18431 elements on
# 132 SMs, but the rows of 4 | N of 14336-16384, which go to the core) run the static long forward
# instead (``long_static_chunk``): one block per row, LONG_WIDE_CHUNK_BYTES chunks compiled in, at
# the blocks an SM the L2 share gives, at most LONG_FP32_MAX_BLOCKS (the 2 measured; 4 lost at 132
# SMs, s30a: 13000 146.3 -> 155.6, 15362 155.9 -> 175.7). ncu (session 30, ab/s30a-ncu, 5162 x 13000, where the
# row tile holds 2 blocks): the row tile spills (289 k spill instructions, 128 registers) at 25%
# occupancy; the long forward none, 76 registers, 37.5%. H200, graph replay, us, row tile ->
# static long: s29d 13514 195.4 -> 149.9, 17284 193.9 -> 160.3; s30a 15362 173.2 -> 155.9, the odd
# 17999 191.3 -> 203.6 (the one loss); fresh lengths after the rule (s30b): 13406 195.1 -> 150.8,
# 13832 189.6 -> 154.3, 14100 193.5 -> 155.9, 16898 197.1 -> 165.7, 17500 195.9 -> 164.7, 18200
# 185.5 -> 162.8, odd 14001 196.9 -> 161.2, 16383 174.4 -> 170.1, 17408 (16 | N) 168.5 -> 148.9.
# Where the row tiles hold 2 to 4 blocks they tie or win (s30a, 3334-13000: 0.91-1.04x; 10244
# 134.3 against 146.9, 12001 141.9 against 150.2), and 16 KB chunks at 4 blocks never beat 2.
# Rows whose pieces pad no lane (17408, 17920, 18432) keep the row tile, which holds them without
# waste: s30d, row tile -> static long, 2048 x 18432 77.6 -> 88.5, 8192 x 18432 295.7 -> 319.8 (a
# models-table shape). 17408 gained all the same (s30b 168.5 -> 148.9, s30d 2048 rows 91.8 ->
# 83.5): one of the three, given up for a rule that keeps the exact model sizes; 1024 x 13400
# 41.1 -> 38.1 (the core's 32.6 at so few rows). The core's split kernels would run two 4 | N rows
# of the class 4% faster still (s30b: 13832 147.9, 14100 150.1 against 154.3, 155.9).
# Session 49, with the lookahead (LONG_PREFETCH_* above; us, H200, about 64 Mi elements): the rows
# past the row tiles (past MAX_ROW_ELEMS, up to LONG_UNROLL_MAX_CHUNKS chunks of 16 KB, not a power
# of two) run it too (s49b, the core -> static long: 18856 155.9 -> 143.1, 19500 154.9 -> 145.2, 20200
# 152.0 -> 144.9; but 20480 138.3 -> 142.5; without the lookahead 18856
# ran 163.9), and so do the odd and 2 mod 4 rows of 64000 bytes or more that the flat forward took
# (FLAT_MIN_BYTES; s49c, flat -> static long: 16001 153.0 -> 148.2, 17425 164.3 -> 151.1, 18002
# 159.5 -> 140.9, 19001 164.0 -> 155.0, 20002 159.4 -> 147.5, 20479 163.9 -> 157.2). The rows that
# keep their kernels, with the lookahead against them: the core's 4 | N 15360 134.1 against 135.2,
# 16000 134.2 against 140.0; the row tile's exact pieces 17408 133.6 against 136.7, 18432 133.6
# against 137.4. CPU SASS of the forced plans (s49b, 15360-20480): 114-126 registers, no stack.
# So the core keeps the rows whose byte length is a multiple of LONG_FP32_CORE_LINE_BYTES (a cache
# line: every row starts on one): its TMA tiles ran such rows at 134-138 (15360, 16000, 20480) and
# the others past the row tiles at 152-156 (18856-20200). s49d, the core -> static long: line-aligned
# 18464 140.3 -> 141.1, 19456 139.0 -> 137.4, 19968 138.2 -> 141.4, 14592 133.9 -> 139.6; the 4 | N
# rows of 14336-16384 that are not line-aligned, which the core took at one block an SM, 14340 169.7
# -> 143.8, 15004 170.4 -> 144.4, 16004 168.7 -> 145.1. The rule: every row the row tiles leave to
# the core (past MAX_ROW_ELEMS, and those 4 | N rows), up to 5 chunks, but the line-aligned ones.
LONG_FP32_CORE_LINE_BYTES = 128
# The one-pass long backward (kernels.rows_bwd_long_onepass, ``long_plan``'s onepass): blocks per SM
# such that the rows in flight (x and dy) and the blocks' dW partials fit LONG_L2_SHARE of L2, 1 to
# ONEPASS_MAX_BLOCKS. Session 24 (ab/s24b), H200, graph replay, us, two-kernel -> one-pass: at the 1
# block an SM this gives from 18803 on, 1.4-2.2x slower (bf16 21630 262.3 -> 400.5, fp32 21630 399.6
# -> 891.2); at 2 (10812) faster, bf16 264.9 -> 228.4, fp16 352.4 -> 225.7. Session 25 (ab/s25a,
# ab/s25d; 2 blocks of 8 warps forced): bf16 / fp16 10812 264.3 / 352.4 -> 226.9 / 224.4, 11500
# 268.0 / 366.0 -> 224.4 / 223.6, 12474 (1 block by the rule) 293.0 / 300.3 -> 291.1 / 286.9, then
# slower: 13642 277.1 / 298.4 -> 306.5 / 306.9, 15002 259.1 / 337.5 -> 326.2 / 320.3, 18803-21630
# 1.3-1.6x, fp32 1.3-1.5x everywhere. So the rules take the one-pass backward where 2 blocks an SM
# fit (ONEPASS_MAX_BLOCKS: 16-bit rows up to about 11900 on 132 SMs) on static layouts (the layouts
# measured; odd rows keep the two kernels).
ONEPASS_MAX_BLOCKS = 2
# Session 25 (ab/s25e; H200, graph replay, us). Even unaligned 16-bit rows past one WIDE_TILE
# forward tile run the long forward (static layouts) rather than one-row tiles of several pieces:
# bf16 / fp16 9002 83.8 / 81.4 -> 78.3 / 77.9, 10002 102.2 / 94.9 -> 78.8 / 78.3, 12474 95.5 / 96.2
# -> 83.0 / 82.0, 13642 97.4 / 96.9 -> 83.0 / 82.3, 15002 104.3 / 102.5 -> 82.3 / 81.5; odd rows
# lost (13933 101.7 / 101.6 -> 106.3 / 119.5) and keep the row tiles. Backward: where the one-pass
# does not fit, the core backward, which holds such a row in one register tile up to
# CORE_BWD_MAX_ELEMS, beat the two-kernel long backward: bf16 / fp16 12474 290.3 / 297.7 -> 242.1 /
# 269.3, 13642 274.4 / 294.7 -> 239.8 / 263.2, 15002 257.2 / 332.1 -> 232.2 / 246.4, 16382 272.8 /
# 341.8 -> 226.5 / 244.1; past it (16390, its chunked plan) 2303 / 2414 against 280 / 277, on odd
# rows 1194 / 592 (13933), on fp32 rows 1.04-1.7x slower (8202-16390).
CORE_BWD_MAX_ELEMS = 16384
L2_BYTES = 50 * 2**20
LONG_L2_SHARE = 0.5
# Flat rows (``flat_plan``: kernels.rows_fwd_flat): the forward of 16-bit (and, session 38, fp32)
# rows whose start is not 16-byte aligned in every row, long enough that the old kernels' narrow
# loads cost more than the flat kernel's fixed work a row (FLAT_MIN_BYTES by the widest load such
# a row's own layout allows: 2 bytes for odd rows, 4 for 2 mod 4 ones, 8 for 4 mod 8 ones past the
# static long forward's chunks, 16 for 8 mod 16 ones past the long forward's rule: session 35),
# read as one flat array where the caller's rows are contiguous end to end (plan's ``flat``): each
# row's interior 16 bytes a load, its head and tail (fewer than 16 bytes each) element by element,
# its weight from FLAT_ALIGN_BYTES / element size shifted copies; its sum of squares the same at
# every position (kernels._flat_row, _exact_sum: batch invariance). A block a row, FLAT_CHUNK_BYTES
# chunks at FLAT_BLOCKS blocks an SM, past LONG_UNROLL_MAX_CHUNKS of them LONG_WIDE_CHUNK_BYTES
# chunks at LONG_MIN_BLOCKS (the static long forward's chunks); the row length compiled in (static)
# where a row's interior holds at least FLAT_STATIC_MIN_CHUNKS whole chunks (SASS of the first
# version: one whole chunk compiled in spilled 264-608 bytes, 8197 / 10001-16385; two to 31 held no
# stack). H200, graph replay, us, about 64 Mi elements, bf16 unless named, the old rules -> the flat
# forward. Session 33 (ab/s33a-e), a first version whose rstd depended on the row's position (not
# shipped): odd 8197 87.9 -> 84.4, 12001 95.5 -> 74.9, 24461 176.6 -> 78.5, 57085 295.1 -> 106.8;
# 2 mod 4 18630 81.3 -> 76.0, 19134 80.4 -> 75.7, 35878 102.2 -> 87.3, 42014 124.5 -> 95.1, 65022 126.8
# -> 110.0, fp16 47418 130.6 -> 96.3; random set 30518 92.5 (old, s34a) against 95.1. Session 34
# (ab/s34a-b), the shipped sum (16-byte loads of [lo, b), the exact sum): odd 12001 95.4 -> 80.3,
# 24461 175.0 -> 86.1, 57085 295.9 -> 110.8; 2 mod 4 18630 80.4 -> 80.9, 63566 125.8 -> 109.3 (the
# same kernel with ct.sum, not batch invariant: 75.9-106.7, 2-8% faster; a fold by halves, invariant
# with plain fp32 adds: 120-160, its shared-memory steps mio-throttled, ncu ab/s34b-ncu.log). So
# odd rows from the shortest measured win (12001: 24002 bytes), 2 mod 4 rows from 64000 bytes
# (between 30518's loss, 61036 bytes, and 35878's gain). Session 35 (ab/s35c-e): 8 mod 16 rows past the
# long forward's rule (``vector_rows``: where L2 holds 4 rows an SM): 26632 88.1 (the core) -> 85.7,
# 33800 113.7 -> 87.7, 45064 119.2 -> 89.5 (20488, which the long forward takes: 81.8 against 88.3),
# so from 52000 bytes (session 52: on static layouts the static long forward keeps them up to 40960
# elements, the comment after LONG_WIDE_CHUNK_BYTES); 4 mod 8 rows past the static long forward's
# chunks compiled in (8-byte loads, LONG_UNROLL_MAX_CHUNKS of LONG_WIDE_CHUNK_BYTES): 50004 130.7 ->
# 106.0 (36004, which it holds, 91.8 against 92.3); odd 80001 / 100001 (rows in flight past L2) 337.9 / 330.8 (the long
# forward's 2-byte loads) -> 128.1 / 125.5. fp32, whose odd and 2 mod 4 rows the row tiles and the
# core load 4 or 8 bytes at a time: odd 14001 160.1 -> 156.0, 16001 172.4 -> 152.0, 18001 205.7 ->
# 163.4, 24001 188.5 -> 170.1, 27859 202.1 -> 175.6, 41001 207.5 -> 211.4, 60001 199.1 -> 219.8; 2
# mod 4 14002 149.4 -> 155.0, 18002 167.5 -> 158.0, 20002 203.9 -> 159.2, 33786 209.9 -> 196.8, 41002
# 207.1 -> 207.6, 60002 198.1 -> 218.1; 8001-12001 lost to the row tiles (90-94% of the copy
# ceiling). Session 38 (ab/s38a, fresh lengths, the core's split kernel (the old rules) -> flat): odd
# 16411 236.0 -> 158.6, 17425 225.3 -> 162.9, 23457 190.3 -> 169.3, 30299 193.7 -> 192.4, 37233 200.3 ->
# 205.2; 2 mod 4 20458 200.3 -> 157.9, 27982 198.9 -> 176.0, 33958 209.0 -> 197.3. So fp32 odd and 2 mod
# 4 rows from 64000 bytes, up to rows whose LONG_MIN_BLOCKS an SM fit FLAT_FP32_L2_SHARE of L2 (the
# second pass reads them there: 35.7-35.9 MB in flight won at 33786 / 33958, 39.3 MB lost 2% at
# 37233, 43 MB at 41001). (Off the rule from session 35's review to session 38: an fp32 square is not
# exact, and the chunk loop fused it into its add (FFMA) where the tail rounded it first (FMUL, then
# FADD), so a column in the tail at one position and in a chunk at another added different bits, 1
# ulp of rstd in about 1e-5 of random rows; the tail now adds fused too: kernels._flat_tail, SASS.)
# 16-bit squares are exact in fp32, so any order of adding them that is the same at every position
# gives the same bits; their rows have no L2 bound (their other kernels load 2 or 4 bytes).
FLAT_MIN_BYTES = {  # element size: {the row's low bit: bytes}
    2: {2: 24000, 4: 64000, 8: LONG_UNROLL_MAX_CHUNKS * LONG_WIDE_CHUNK_BYTES, 16: 52000},
    4: {4: 64000, 8: 64000},
}
FLAT_FP32_L2_SHARE = 0.7  # (36.7 MB of H200's 50 MB: between 33958's win and 37233's loss)
# The flat forward's arrays hold at most FLAT_MAX_ELEMS elements a launch (cuda.tile's int32 shapes):
# longer inputs run in parts of a multiple of 16 bytes / element size rows (rows.launch), so a row
# holds at most FLAT_MAX_ELEMS // (16 / element size) elements there.
FLAT_MAX_ELEMS = 2**31 - 1
FLAT_CHUNK_BYTES = LONG_CHUNK_BYTES["forward"]
FLAT_BLOCKS = 4
FLAT_WARPS = LONG_WARPS["forward"]  # not varied
FLAT_STATIC_MIN_CHUNKS = 2
# The flat forward's second pass, which reads x and w of each chunk again (from L2) and stores y:
# tileiras issues a chunk's loads only after the previous chunk's stores and the barrier it puts
# after them, so each chunk waited one L2 round trip. With PREFETCH (kernels.rows_fwd_flat) it loads
# chunk j + 1 before it stores chunk j, so those loads are in flight during the stores and the
# barrier. Session 47 (ab/s47d, ab/s47e; H200, graph replay, about 64 Mi elements, the rules' grid,
# us: the old plan, 16 KB chunks -> the lookahead at 16 KB -> the lookahead at 8 KB): bf16 27000 85.3
# -> 86.4 -> 81.7, 33333 91.4 -> 90.1 -> 85.7, 43796 92.9 -> 92.6 -> 86.4, 44302 92.6 -> 91.9 -> 86.7,
# 58002 110.4 -> 105.5 -> 103.2, 59926 113.2 -> 108.6 -> 107.2; fp16 43796 93.4 -> 92.8 -> 86.2; fp32
# 20690 (16 KB chunks) 163.0 -> 155.3. (8 KB chunks without it lost: 43796 97.7; 3 or 4 blocks an SM
# lost at 43796 and 33333, their rows past L2, s47b.) The CPU SASS of bf16 43796: 128 registers, no
# stack, the next chunk's LDG.128 before this one's STG.128 (read at 16 KB chunks). So the forward of 16-bit rows past
# LONG_UNROLL_MAX_CHUNKS chunks, up to FLAT_PREFETCH_MAX_BYTES (the measured ones, 54-120 KB, to the
# random set's longest rows) takes it at FLAT_PREFETCH_CHUNK_BYTES.
# fp32 rows keep the old pass, although 20690 gained: with the lookahead tileiras rounded a tail
# square on its own at 27982 (an FMUL, then an FADD, where the chunks fuse it: SASS,
# test_flat_plans_compile_without_spills), and an fp32 square is not exact, so a row's rstd would
# depend on its position (the FFMA comment above). Shorter 16-bit rows (odd 12001-20480) are not
# measured with it. Those of 40-54 KB, which take it by the rule, measured in session 48 (s48a, us,
# the old 16 KB pass -> the lookahead at 8 KB): bf16 21001 93.2 -> 89.4, 23457 87.8 -> 86.3, 25999
# 95.1 -> 91.8.
FLAT_PREFETCH_CHUNK_BYTES = 8 * 1024
FLAT_PREFETCH_MAX_BYTES = 128 * 1024
FLAT_ALIGN_BYTES = ALIGN_BYTES  # a flat row interior's alignment: its weight takes 16 // elem_size shifted copies
# The flat backward (kernels.rows_dot_flat, rows_bwd_flat): 16-bit rows whose byte length is not a
# multiple of 16, from FLAT_BWD_MIN_BYTES, that the rules would give the two-kernel long backward
# (odd ones, and even ones past CORE_BWD_MAX_ELEMS: the core holds those below in one tile; not
# those of the one-pass long backward, which on GPUs of fewer SMs fits longer rows), contiguous
# end to end. Two passes, as the long backward (x and dy read twice), each row's
# interior 16 bytes a load: the row dot in FLAT_DOT_CHUNK_BYTES chunks, one row a block, on
# SMs x FLAT_BWD_BLOCKS blocks; dx in FLAT_BWD_CHUNK_BYTES chunks on a (row groups, chunks) grid that
# fits the SMs' FLAT_BWD_BLOCKS at once, the row groups a multiple of 16 bytes / element size,
# each block reading its next row's chunk before it works on this one; FLAT_BWD_WARPS warps.
# Session 37, H200, graph replay, about 64 Mi elements, us, the long backward -> this rule
# (ab/s37d): bf16 8197 301.9 -> 236.6, 12001 265.5 -> 212.7, 17425 259.0 -> 217.0, 27982 252.0 ->
# 212.6, 34020 251.4 -> 219.5, 57085 279.0 -> 213.4; fp16 34020 233.7 -> 229.7. The same kernels on
# 8 warps, 8 KB chunks at 2 blocks: 0.97-1.2x the long backward (s37b); with 16 KB dot chunks
# there, no better. ncu (s37c): bytes in flight, not the passes, hold it back (the core's
# chunked backward of aligned rows, also two passes, reads at 79-83% of DRAM peak, TMA). fp32 rows
# gain nothing from it (their loads are 4 bytes already: s37b 415-466 against 358-362).
FLAT_BWD_MIN_BYTES = 16 * 1024  # (8197, the shortest measured: 1.28x)
FLAT_BWD_CHUNK_BYTES = 4 * 1024
FLAT_DOT_CHUNK_BYTES = 8 * 1024
FLAT_BWD_WARPS = 4
FLAT_BWD_BLOCKS = 4
# Short unaligned rows (``lanes_plan``): kernels.rows_fwd_lanes and rows_bwd_lanes, rows padded to
# W (a power of two) of at most LANES_FWD_MAX_ELEMS forward (odd 16-bit rows LANES_MAX),
# LANES_BWD_ROW_BYTES backward, each
# held by W / LANES_ELEMS lanes of LANES_ELEMS elements, LANES_TILE_ELEMS[op] elements a tile (16
# a thread on 4 warps; session 17's forward held 32), LANES_OCCUPANCY[op] blocks per SM on a
# persistent grid. H200, graph replay, against the gathered row tiles (us). Forward (session 17,
# inference): bf16 351355 x 191 153.9 -> 106.6 (16 x (16 x 16); best 94.2 at 16 x (8 x 32)),
# 828504 x 81 166.2 -> 126.1 (32 x (16 x 8)), fp32 828504 x 81 199.7 -> 166.8; rows of 1 KB did
# not gain (bf16 291, 338, 510: 103.2 / 111.1 / 81.0 against 106.9 / 98.6 / 83.0; fp32 191 147.0
# against 144.2). Fewer elements a lane lost (bf16 81 as 32 x (4 x 32): 174.7), so did 8 blocks
# per SM and tiles where rows x lanes < 128 (a layout conversion in shared memory: SASS).
# Backward (session 18, ab/s18a): 2048-element tiles at 4 blocks won at every length tried
# (4096 at 2 blocks 8-22% slower, 4096 at 4 spills, 1024 2-4x slower: SASS of the 1024 tile
# shuffles through shared memory): bf16 486296 x 138 308.6 -> 203.3, 691844 x 97 318.1 -> 180.7,
# 351355 x 191 284.2 -> 165.0, 828504 x 81 285.5 -> 201.8, and rows of 1 KB too: bf16 131586 x 510
# 207.0 -> 141.2, fp32 438620 x 153 317.5 -> 233.2, 486296 x 138 337.6 -> 243.8. At the same
# padded width the lanes tile ran 1.4-1.5x faster than the row tiles (510; fp32 138, 153), so a
# row of more than one warp's vectors keeps the row tiles where their pieces pad less than W /
# LANES_PIECES_GAIN: bf16 236299 x 284 as 256 + 32 171.3 against 196.0 on lanes of 512.
# Session 19 (ab/s19a, s19b): fp32 backward rows padded to 512 elements (2 KB, 32 lanes: still
# one warp) ran faster on lanes than on 4 x 512 row tiles, at every length tried: 261124 x 257
# 333.6 -> 244.1 us, 160000 x 401 266.8 -> 200.3, 220000 x 301 305.7 -> 226.3, 130000 x 509 254.8
# -> 214.5. So the backward's bound is 2 KB and LANES_MAX (32 lanes, one warp) elements.
LANES_BWD_ROW_BYTES = 4 * WARP_ROW_BYTES
LANES_MIN_ELEMS = 128  # the shortest padded row measured (bf16 and fp32 81)
LANES_ELEMS = 16
LANES_MAX = 32 * LANES_ELEMS  # a row's lanes stay within one warp (W = 1024 on 64 lanes: 10x slower)
LANES_TILE_ELEMS = {"forward": 2048, "backward": 2048}
LANES_OCCUPANCY = {"forward": 8, "backward": 4}
# Session 25 (ab/s25b; H200, graph replay, us): forward tiles of 2048 elements at 8 blocks per SM
# (32 warps) beat session 17's 4096 at 4: bf16 387913 x 173 120.3 (16 x 256 at 4) -> 108.8 (8 x
# 256 at 8; 16 x 256 at 8 117.1, 32 x 256 at 4 116.7); and fp32 rows padded to 256 elements (1 KB,
# 16 lanes: still within one warp), which ran on gathered row tiles, gain as much: fp32 387913 x
# 173 166.8 (16 x 256 row tiles at 4) -> 138.6 (lanes 8 x 256 at 8; the row tiles' best 155.3).
LANES_FWD_MAX_ELEMS = 256
# The lanes backward reads each block's next tile before it works on this one (kernels'
# PREFETCH, as the row tiles' PREFETCH_* rule below), at its 4 blocks of 4 warps (128 registers;
# SASS: 65-66 loads a thread instead of 33-34, no stack but fp16 98-114, 8 bytes). Session 27, H200
# (ab/s27a), us, without -> with: bf16 945195 x 71 224.4 -> 202.0, 684784 x 98 180.1 -> 162.8,
# 588674 x 114 164.1 -> 153.4, 450395 x 149 193.4 -> 179.9, 278460 x 241 147.3 -> 144.0; fp16
# 216.1 -> 195.2, 175.4 -> 162.7, 161.6 -> 154.8, 191.4 -> 166.6, 148.4 -> 141.4; fp32 241.8 ->
# 205.3, 215.1 -> 210.7, 214.9 -> 210.3, 237.6 -> 205.0, but 206.4 -> 212.1 at 241 (3% lost).
LANES_BWD_PREFETCH = True
# Vector lanes (``vector_lanes``, session 31): on static layouts a lanes tile of L = VECTOR_LANE_ELEMS
# elements a lane (kernels' (TILE_A, TILE_B, L, K), K = W / L) gives each thread one 8-byte vector of
# a 16-bit row piece, a row over K / 4 threads, and tileiras compiles its gathers to LDG.64 without
# a shared-memory step; the rules' L = LANES_ELEMS strides a thread's elements by K (2-byte loads,
# or wide loads moved through shared memory). Short 16-bit rows are issue-bound, not load-bound:
# ncu (session 30, ab/s30a-ncu, bf16 328965 x 204) counted 65.1 M warp instructions for the
# runtime lanes tile and 69.6 M for session 30's static row tile (90.6% of the issue slots, 221
# bytes a load request), torch.compile's kernel 32.7 M. SASS (sm_90, ab/s30e-sass-loops.txt),
# warp instructions an element in the innermost loop, the rule before -> L = 4: bf16 204 0.97 ->
# 0.56, 252 0.79 -> 0.45, 100 0.97 -> 0.57, 292 1.15 -> 0.66, 138 (2 mod 4) 1.42 -> 0.94. Tiles of
# 2048 elements (LANES_TILE_ELEMS) at LANES_OCCUPANCY, as the other lanes tiles. H200, graph
# replay, about 64 Mi elements, us, the rules -> L = 4 (ab/s31a, ab/s31c): forward, 4 mod 8 (the
# static row tiles of session 30 before: 32 x 256, 64 x 128, 16 x 512): bf16 76 101.7 -> 83.4, 116
# 81.2 -> 72.0, 140 110.1 -> 89.0, 172 93.4 -> 79.9, 188 88.1 -> 75.7, 196 85.4 -> 75.6, 204 85.4 ->
# 74.7, 228 80.3 -> 71.2, 244 79.6 -> 70.8, 292 97.1 -> 85.6, 300 91.7 -> 83.5, 340 88.2 -> 79.6,
# 380 82.2 -> 75.1, 452 80.5 -> 71.8, 500 76.9 -> 70.1, 508 76.4 -> 70.5; fp16 140 105.8 -> 88.6,
# 172 91.1 -> 77.0, 204 83.3 -> 72.4, 300 91.0 -> 82.7, 340 87.7 -> 77.1 (1.08-1.24x); tiles of twice
# the rows lost 2-5%, of half the rows spill (SASS: 72-400 bytes of stack at 8 blocks' 64
# registers). Backward (the runtime lanes tile or the static row tile before): bf16 76 189.4 ->
# 147.4, 100 159.6 -> 140.9, 140 188.1 -> 153.1, 196 152.8 -> 134.7, 204 148.5 -> 132.6, 228 143.4
# -> 126.2, 252 140.6 -> 124.7, 300 171.6 -> 151.5; fp16 100 159.0 -> 131.1, 140 175.1 -> 156.9, 196
# 146.3 -> 136.6, 204 142.3 -> 134.4, 252 138.6 -> 123.3, 300 164.9 -> 148.1 (1.06-1.28x); and 2 mod
# 4 rows (4-byte loads), backward bf16 138 190.6 -> 168.1, 250 140.1 -> 115.7, fp16 250 137.8 ->
# 115.2, but forward bf16 138 131.7 -> 130.9, 226 92.9 -> 94.2, 250 88.3 -> 88.8, fp16 226 87.8 ->
# 91.0: the forward of those took L = 8 in session 32 (below). Not taken: fp32 (196 / 204 forward
# 132.3 -> 143.9 / 144.5), 16-byte aligned rows (SASS: 8-144 bytes of stack with L = 4 or 8), 2 mod 4
# rows padded to 512 on L = 4 (410: 600 bytes of stack) and odd rows (135: 392 bytes). The bounds are the
# measured ones: 4 mod 8 rows padded to 128, 256 and 512 (the backward's 512 at 300 only; s32d: 284
# 157.2 against the row tiles' 183.3, 508 127.3 against 129.2), 2 mod 4 rows padded to 256 (128:
# below).
VECTOR_LANE_ELEMS = 4
VECTOR_LANES_WIDTHS = (128, 512)  # the padded widths of 4 mod 8 rows, forward and backward
# The backward of 2 mod 4 rows padded to 256 (s31c), and to 128 since session 32 (ab/s32d, the rules'
# runtime lanes -> L = 4, us: bf16 98 162.7 -> 129.8, 126 149.2 -> 114.7).
VECTOR_LANES_2MOD4_WIDTHS = (128, 256)
# The forward of 16-bit 2 mod 4 rows padded to 128-512 (VECTOR_2MOD4_FWD_WIDTHS) on static lanes of
# VECTOR_2MOD4_FWD_ELEMS = 8 elements (four 4-byte loads a lane), session 32, after the native
# llama multiply (kernels.common.CAST_LLAMA_NATIVE) had cut the rest of the loop: SASS (sm_90,
# bench/NOTES.md), warp instructions a live element, runtime L = 16 -> static L = 8: bf16 66 1.51 ->
# 0.77, 138 1.16 -> 0.60, 250 0.64 -> 0.40, 40-48 registers, no stack (L = 16 static: 8-32 bytes of
# stack). H200, graph replay, about 64 Mi elements, us (ab/s32a), the rules -> L = 8: bf16 66 136.4
# -> 103.6, 98 100.1 -> 83.7, 110 94.5 -> 79.8, 138 117.5 -> 91.8, 226 89.8 -> 75.9, 250 85.9 ->
# 72.8; fp16 66 131.5 -> 102.8, 98 98.2 -> 84.0, 110 93.5 -> 79.4, 138 111.2 -> 91.3, 226 87.4 ->
# 75.7, 250 83.8 -> 72.6 (1.15-1.32x); fresh lengths (ab/s32d) bf16 70 129.6 -> 99.9, 86 108.7 ->
# 89.7, 122 92.1 -> 76.2, 154 107.7 -> 87.3, 186 94.9 -> 82.2, 242 88.1 -> 74.3, fp16 90 101.7 -> 87.2,
# 202 88.5 -> 79.4. Those padded to 512 (the static or runtime 16 x 512 row tiles before, 0.82-1.00
# warp instructions an element; 4 x 512 lanes tiles 0.47-0.54, 40-48 registers, no stack at 15
# lengths of 258-510), ab/s32f: bf16 338 96.5 -> 86.5, 414 90.0 -> 80.2, 490 82.0 -> 74.5, fp16 338 93.5
# -> 85.9, 414 85.5 -> 79.9, 490 82.5 -> 74.5 (1.07-1.12x). Every timing ran the native multiply (the
# torch API's llama with a weight of x's dtype and offset 0); the other castings (an fp32 weight, an
# offset, gemma, none) take the same tiles unmeasured: their SASS holds no stack either (the
# register test compiles llama), and under llama's fp32 multiply L = 4 had tied (s31c). Not fp32
# (ab/s32d: -1% to +5%), not odd rows padded to 512 on L = 16 (s32f: 0.98-1.04x; L = 8 there holds
# 200-232 bytes of stack).
VECTOR_2MOD4_FWD_ELEMS = 8
VECTOR_2MOD4_FWD_WIDTHS = (128, 512)
LANES_WARPS = 4
# The forward of 16-bit rows on their static vector lanes (``vector_lanes``: 2 mod 4 rows on
# VECTOR_2MOD4_FWD_ELEMS lanes, 4 mod 8 rows on VECTOR_LANE_ELEMS lanes, padded to 128-512) runs a
# block a tile of LANES_TILE_ELEMS padded elements without the loop, y scattered at the gather's
# indices (rows_fwd_lanes' LOOP false: ``lanes_one_tile``), on a grid of its tiles. Before (sessions
# 45 and 54) the loop's tiles held more rows (up to 40 live elements a thread) and ran at 4 blocks an
# SM with the next tile's gathers first: the loop holds y's stores behind 3-4 block barriers an
# iteration (CPU SASS) and keeps few blocks resident; ncu (s55c, at the benchmark's clocks, bf16
# 394758 x 170): that kernel 67% DRAM at 24% achieved occupancy, stalled on the barrier first, where
# torch.compile's warp a row reached 81% at 38%. Without the loop, 2048-element tiles compile to
# 31-36 registers without stack (CPU SASS, s54d), so the SM holds as many blocks as its threads
# allow and warps, not rows, hide the latency. H200, graph replay, about 64 Mi elements, us (% of the
# copy), the loop's rule -> a block a tile (ab/s54d, s55d): bf16 66 84.8 -> 72.1 (90.7), 74 79.9 ->
# 68.8, 78 79.2 -> 68.2, 90 78.6 -> 68.1, 102 75.8 -> 69.7, 130 82.5 -> 74.3, 138 80.4 -> 71.9, 162
# 80.0 -> 68.8, 170 77.7 -> 66.7 (96.7), 194 75.8 -> 68.9, 218 73.1 -> 67.2, 246 72.4 -> 66.3, 258
# 87.3 -> 74.9, 290 80.7 -> 70.4, 326 79.5 -> 68.7, 338 77.8 -> 67.4, 374 75.6 -> 67.1, 418 73.5 ->
# 67.5, 462 72.2 -> 66.7, 494 71.6 -> 66.2, 502 71.7 -> 66.8 (97.3); 4 mod 8: 68 83.9 -> 72.8, 92
# 73.2 -> 68.6, 116 70.0 -> 66.2, 124 70.0 -> 66.9, 140 83.9 -> 78.3, 180 73.8 -> 69.6, 252 70.2 ->
# 66.2, 260 86.9 -> 79.9, 300 78.7 -> 73.5, 308 77.8 -> 73.5, 380 72.1 -> 67.9, 452 70.5 -> 66.4, 500
# 70.0 -> 66.5; fp16 100 71.8 -> 67.8, 142 79.8 -> 69.9, 266 84.5 -> 72.1, 356 73.0 -> 68.7, 482 71.9
# -> 66.7 (1.05-1.18x at every one of the 39 lengths, 82-101% of the copy; 33 of them held out,
# s55d). The tile's size is the bound both ways: tiles of the loop's rows, 4096-8192 padded elements
# at 48-64 registers, gained less or lost (170 at 16 rows 76.4, 338 at 8 72.3, 138 at 32 87.1, 74 at
# 64 107.3; ncu of 170 at 16: the barrier back among the stalls), and 1024-element tiles collapsed
# (116 at 8 rows 292.0, 62 registers; 300 at 2 rows 1201.2, 37 registers and no stack: not profiled,
# not understood). The bare copy in the same layouts (bench/probes/store_layout.py, s55b, 16 rows)
# ran the scattered form slowest (46-52% of the copy), so the scatter's stores alone do not explain
# the gain; the likelier cause is the occupancy the loop had kept down (the 2048-element tiles
# have not been under ncu). Not the other lanes tiles (s54d,
# a block a tile): odd 16-bit rows (97 96.1 -> 166.1, 183 88.5 -> 101.5, 411 / 435 1.01-1.03x), fp32
# on runtime lanes (74 141.9 -> 147.5, 82 139.7 -> 154.5, 106 144.8 -> 159.3; 138-250 1.01-1.04x).
# Each compiled kernel sums a row in an order of its own: the one-tile and the loop's kernels, and
# the two llama castings' one-tile kernels, may give a row's rstd an ulp apart (s55e), while a row's
# bits stay a function of N and the layout (the same kernel at every M).
# Not taken (session 46): the forward of 16-bit 2 mod 4 rows padded to 1024 (8 x 1024 plain-load row
# tiles, 74% of the copy) with a row on one warp, 32 lanes of 32 elements, 8 rows a tile. ncu (s46n,
# at the benchmark's clocks, bf16 110015 x 610): the row tile reduces each row across its 4 warps,
# 2.1 cycles an issue stalled on the barrier, 7.3 on loads, DRAM 62%; torch.compile's warp a row
# 73%. H200, graph replay, about 64 Mi elements, us, the row tile -> that lanes tile (s46e, s46f):
# with the native multiply bf16 530 81.2 -> 75.9, 598 86.7 -> 78.6, 610 86.5 -> 79.0, fp16 610 85.9
# -> 78.8, where 8 rows stay within 40 live elements a thread (674, 42 a thread, 82.8 -> 83.4; 778
# 81.8 -> 93.4; 1018 73.0 -> 108.3); but under llama's fp32 multiply and gemma (216-248 bytes of stack
# in the CPU SASS, 64-88 natively) 1.6-1.8x slower (s46g: 610 85.4 / 81.8 -> 146.7 / 150.1, 530 87.6 /
# 84.0 -> 141.4 / 136.8), and the plan does not know the casting. Nor odd rows of 513-1023 (s46e,
# static, 4 rows: 555 83.2 -> 84.6, 701 79.2 -> 82.6, 1001 77.5 -> 82.8; their gathered row tiles
# reach 78-84% of the copy), nor 4 mod 8 (620 / 780 / 1004 at 8 rows: 336-355 us).
# The forward of odd 16-bit rows padded to LANES_MAX (257-511: 16 x 512 gathered row tiles before)
# runs on the lanes tiles (``lanes_fit``), and on static layouts (257-383, ``odd_static``) holds the
# most rows within ODD_LANES_FWD_LIVE_PER_THREAD live elements a thread (as the 2 mod 4 rows' loop
# tiles did within 40 until session 55).
# H200, graph replay, about 64 Mi elements, us (s46a, s46b), bf16, the row tile -> lanes at 4 / 8 /
# 16 rows: 263 104.7 -> 100.1 / 96.1 / 93.1, 267 102.4 -> 99.4 / 94.9 / 92.1, 271 102.1 -> - / 94.4 /
# 91.1, 279 99.4 -> - / 92.5 / 90.6, 287 97.0 -> - / 91.5 / 88.9, 295 97.1 -> - / 91.5 / 91.4, 301 95.7
# -> 93.4 / 90.3 / 91.7, 339 89.8 -> 88.6 / 86.6 / 90.9, 377 85.3 -> 85.3 / 84.4 / 95.4; fp16 267 102.1
# -> 98.9 / 94.0, 301 95.5 -> - / 89.7 / 91.2, 339 90.2 -> - / 87.5. The best held 19-36 live
# elements a thread; 36.9 (295 at 16) tied, 37.6 (301 at 16) lost 1.5%, 42-47 5-13%, with no
# stack in the native multiply's SASS (s46b-sass: 16 rows of 271-319, 64 registers; 16 bytes at
# 257-287 under llama's fp32 one, s46g-sass). On runtime layouts (385-511,
# ODD_STATIC_SPILLS) the tile keeps LANES_TILE_ELEMS (4 rows), which won there: bf16 417 90.1 ->
# 85.6 (8 rows 87.6), 441 86.8 -> 83.5 (85.6), 499 80.9 -> 81.8 (84.3; the one loss, 1%); static
# layouts there bought 0-1% (s46b: 417 84.6, 441 82.9, 499 82.1), not taken. Odd rows padded to 128
# and 256 keep their 2048-element tiles: twice the rows lost at every length (s46a: 71 109.7 ->
# 144.4, 135 101.7 -> 112.4, 229 85.8 -> 86.6; ncu of 135, 12% more instructions at 16 rows).
ODD_LANES_FWD_LIVE_PER_THREAD = 36
ODD_LANES_FWD_LIVE_ELEMS = ODD_LANES_FWD_LIVE_PER_THREAD * 32 * LANES_WARPS
LANES_PIECES_GAIN = 1.4
MASKED_NEED = 68  # registers: 64 (the cap at 32 warps per SM) and the few that 1536's 4 x 2048 spilled at no cost
OCCUPANCIES = (1, 2, 4, 8)
THREADS_PER_SM = 2048
MAX_THREAD_REGS = 255  # what tileiras gives a thread at most (a hint of 1 or 2 blocks)


def _prev_pow2(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _next_pow2(n: int) -> int:
    return 1 << (max(1, n) - 1).bit_length()


def pieces(n: int, max_pieces: int = MAX_PIECES, min_piece: int = 1) -> tuple[int, ...]:
    """Powers of two, largest first, covering n in at most max_pieces with the least padding,
    none narrower than min_piece unless n itself is: n rounded up to a multiple of the smallest
    granule g (a power of two, from min(min_piece, the largest power of two <= n)) whose
    multiple has at most max_pieces bits set."""
    if n < 1:
        raise ValueError(f"a row has at least one element, got {n}")
    g = min(_prev_pow2(min_piece), _prev_pow2(n))
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
    (occupancy, warps); check_a / check_n: a tile can overhang A / the pieces cover more than n;
    loads: how the tiles are read and written (kernels.LOADS_*: plain, TMA or gather). kind
    "long" (long_plan): rows of widths[0]-wide chunks, one row at a time (grid: the row groups
    of the backward's 2-D grid); kind "lanes" (lanes_plan): rows padded to widths[0], each held
    by ``lanes`` lanes of widths[0] // lanes elements; kind "flat" (flat_plan): rows contiguous
    end to end, read as one flat array in widths[0]-wide chunks, ``lanes`` the elements of 16
    bytes; kind "split" (split_plan): the same rows, each row's widths[0]-wide segments on
    cdiv(n, widths[0]) blocks that exchange their sums (grid: a multiple of that). static: the
    kernels take the row length and strides as compile-time constants (kernels.RowArray; the rules: ``static_fit``,
    ``odd_static``, ``word_static``, ``vector_lanes``, ``long_static_chunk``), else runtime layouts. prefetch: each
    block reads its next tile before it works on the current one (kernels.rows_bwd's PREFETCH,
    the rule: PREFETCH_MAX_BLOCKS; rows_bwd_lanes', LANES_BWD_PREFETCH; rows_fwd's on
    persistent forward grids, probes only; the flat and the static long forwards' second pass, the
    next chunk first: FLAT_PREFETCH_*, LONG_PREFETCH_*). loop (forward tiles): the blocks stride
    over the tiles; False (``one_tile``, ``many_tiles``, ``lone_tiles``, ``lone_tma``,
    ``wide_one_tile``, on a grid of one block a tile) kernels.rows_fwd runs block t's tile t
    without a loop (LOOP), and so does
    rows_fwd_lanes where ``lanes_one_tile`` or ``lanes_plan(persistent=False)`` says, its y scattered."""

    op: str
    tile_a: int
    tile_b: int
    widths: tuple[int, int, int]
    warps: int
    occupancy: int
    grid: int
    check_a: bool
    check_n: bool
    loads: int = LOADS_PLAIN
    kind: str = "tile"
    lanes: int = 0
    static: bool = False
    unroll: bool = False
    onepass: bool = False
    prefetch: bool = False
    loop: bool = True

    @property
    def hints(self) -> tuple:
        return (self.occupancy, self.warps)


def one_tile(op: str, rows: int, pieces, n: int, elem_size: int, threads: int, loads: int) -> bool:
    """Whether a forward tile of ``rows`` rows as ``pieces`` runs without the grid-stride loop
    where the grid is the tiles: one unpadded row of plain loads, at most ONE_TILE_THREAD_BYTES
    a thread (see ONE_TILE_THREAD_BYTES)."""
    return (op == "forward" and rows == 1 and len(pieces) == 1 and pieces[0] == n and loads == LOADS_PLAIN
            and n * elem_size <= ONE_TILE_THREAD_BYTES * threads)  # fmt: skip


def many_tiles(op: str, rows: int, b: int, pieces, n: int, elem_size: int, loads: int, occupancy: int, tiles: int,
               grid: int) -> bool:  # fmt: skip
    """Whether a persistent forward grid of ``grid`` blocks (``occupancy`` an SM) over ``tiles``
    one-row tiles of 2-D rows (b == 1) runs a block a tile without the loop instead: at least
    MANY_TILES_WAVES tiles a block, where the hint leaves room for more blocks an SM (under
    MAX_BLOCKS_PER_SM), but for rows of 8-byte loads or wider gathered in a last piece wider than
    MANY_TILES_GATHER_MAX_PIECE (see MANY_TILES_WAVES)."""
    wide_gather = loads == LOADS_GATHER and n * elem_size % 8 == 0 and pieces[-1] > MANY_TILES_GATHER_MAX_PIECE
    room = occupancy < MAX_BLOCKS_PER_SM
    many = tiles >= MANY_TILES_WAVES * grid
    return op == "forward" and rows == 1 and b == 1 and room and many and not wide_gather


def lone_tiles(op: str, rows: int, b: int, pieces, n: int, elem_size: int, loads: int, resident: int, tiles: int,
               num_sms: int) -> bool:  # fmt: skip
    """Whether one-row forward tiles of 2-D rows (b == 1), plain loads and unpadded pieces (one for
    16-bit rows) that the register line leaves one block an SM (``resident`` 1) run a block a tile
    without the loop: from LONE_TILES_PER_SM tiles an SM (see LONE_TILES_PER_SM)."""
    exact = sum(pieces) == n and (elem_size == 4 or len(pieces) == 1)  # the classes measured
    one = op == "forward" and rows == 1 and b == 1 and resident == 1 and loads == LOADS_PLAIN and exact
    return one and tiles >= LONE_TILES_PER_SM * num_sms


def wide_one_tile(op: str, n: int, elem_size: int) -> bool:
    """Whether the forward of fp32 rows of a multiple of VECTOR_ELEMS elements (16-byte loads on
    runtime layouts) past WIDE_TILE, up to WIDE_ONE_TILE_MAX_ELEMS, runs its one-row 8-warp tiles
    a block a row without the loop, in at most WIDE_ONE_TILE_PIECES pieces (see
    WIDE_ONE_TILE_PIECES). A function of n alone: not of the row count nor of the row groups."""
    fits = WIDE_TILE[op] < n <= WIDE_ONE_TILE_MAX_ELEMS and n % VECTOR_ELEMS == 0
    return op == "forward" and elem_size == 4 and fits


def lone_tma(op: str, b: int, n: int, elem_size: int, tiles: int, num_sms: int, core_bits: bool = False) -> bool:
    """Whether the forward of fp32 rows that the core's TMA tile takes as one block an SM (the
    caller, ``plan``, checks that the core takes them) runs that tile as a row tile (TMA loads, one
    padded piece of at most LONE_TMA_MAX_ELEMS), a block a row without the loop at LONE_TMA_HINT:
    2-D rows (b == 1) from LONE_TMA_TILES_PER_SM tiles an SM, where the caller's inputs give the
    core's bits (core_bits: ``same_bits``), so M may cross the threshold."""
    fits = elem_size == 4 and core_bits and _next_pow2(n) <= LONE_TMA_MAX_ELEMS
    return op == "forward" and b == 1 and fits and tiles >= LONE_TMA_TILES_PER_SM * num_sms


def same_bits(elem_size: int, w_elem_size: int | None, address: int, row_strides) -> bool:
    """Whether ``lone_tma``'s tile gives the core's bits for these inputs: rows whose start
    (address, bytes) and strides (row_strides, elements, of the leading dims with more than one
    row) are 16-byte aligned, so both kernels load them through TMA (other rows were not measured),
    and a weight of x's dtype or none (w_elem_size: its element size, None: no weight; a 16-bit
    weight beside fp32 rows changes the core's bits, s44f)."""
    aligned = address % ALIGN_BYTES == 0 and all(s * elem_size % ALIGN_BYTES == 0 for s in row_strides)
    return aligned and w_elem_size in (None, elem_size)


def unaligned(n: int, elem_size: int) -> bool:
    """Whether rows of n elements are not a multiple of ALIGN_BYTES long: the core kernels'
    TMA tiles cannot load them, the row tiles take them forward and backward (see above)."""
    return n * elem_size % ALIGN_BYTES != 0


def static_fit(n: int, elem_size: int, op: str = "forward") -> bool:
    """Whether op's row tiles of n-element rows run on static layouts (kernels.RowArray) where the
    caller allows: rows of an even length that is not a multiple of VECTOR_ELEMS, which a
    compiled-in row length and stride load 4, 8 or 16 bytes at a time and check by the row, not
    by the element. 16-bit rows: those whose start is 8-byte aligned (4 divides N) at any length,
    the others from STATIC_MIN_ROW_BYTES[op]; fp32 rows of at most STATIC_FP32_MAX_ELEMS
    (measured: the comments after ODD_HINT_MIN_REGS and before STATIC_FP32_MAX_ELEMS). And the
    forward of 16-bit rows of a multiple of VECTOR_ELEMS under MIN_PIECE_BYTES that are not a power
    of two: one padded piece whose lanes past N are dropped at compile time (STATIC_PADDED_BLOCKS)."""
    if n % 2:
        return False
    if n % VECTOR_ELEMS == 0:  # short aligned 16-bit rows that are not a power of two, forward (above)
        return op == "forward" and elem_size == 2 and n & (n - 1) != 0 and n * elem_size < MIN_PIECE_BYTES
    if elem_size == 2:
        return n % 4 == 0 or n * elem_size >= STATIC_MIN_ROW_BYTES[op]
    return elem_size == 4 and n <= STATIC_FP32_MAX_ELEMS[op]


def odd_static(n: int, elem_size: int, op: str = "forward") -> bool:
    """Whether the row tiles and lanes tiles of odd rows of n elements run on static layouts
    with the runtime layouts' plan (ODD_STATIC_MAX_ELEMS above; the 16-bit forward's 512-wide lanes tiles
    hold more rows, ODD_LANES_FWD_LIVE_ELEMS), from ODD_STATIC_MIN_ELEMS: the
    forward of 16-bit rows up to ODD_STATIC_MAX_ELEMS but those of ODD_STATIC_SPILLS, and of fp32
    rows up to ODD_STATIC_FP32_MAX_ELEMS; the backward of 16-bit rows that the lanes kernels take
    (``plan`` keeps the backward's row tiles, those of a caller's keywords too, on runtime
    layouts)."""
    if n % 2 == 0 or n < ODD_STATIC_MIN_ELEMS:
        return False
    if op == "backward":
        return elem_size == 2 and lanes_fit(n, elem_size, op)
    if elem_size == 2:
        return n <= ODD_STATIC_MAX_ELEMS and not ODD_STATIC_SPILLS[0] <= n <= ODD_STATIC_SPILLS[1]
    return n <= ODD_STATIC_FP32_MAX_ELEMS


def word_static(n: int, elem_size: int, op: str = "forward") -> bool:
    """Whether the forward of fp32 rows of a multiple of 4 elements, not of VECTOR_ELEMS, from
    WORD_STATIC_MIN_ELEMS to WIDE_TILE (the widest row tiles on 4 warps), runs its runtime plan
    compiled for the row layout, where it loads 16 bytes at a time (the comment after
    ODD_STATIC_SPILLS)."""
    fits = WORD_STATIC_MIN_ELEMS <= n <= WIDE_TILE[op]
    return op == "forward" and elem_size == 4 and n % 4 == 0 and n % VECTOR_ELEMS != 0 and fits


def backward_by_default(n: int, elem_size: int) -> bool:
    """Whether a call without a mode runs the row-tile backward for rows of n elements: rows that
    are ``unaligned`` (where the row rules plan them: at most MAX_ROW_ELEMS["backward"]), and
    rows of a power-of-two length of DEFAULT_BACKWARD_BYTES (each reduced within one warp; why they win is
    not yet profiled: ncu showed the core backward at 255 registers, 9% occupancy, at 128).
    Session 14 (H200, graph replay, one run, row-tile vs core backward): bf16 64 127.4 vs 128.6 us,
    128 128.7 vs 162.5, 256 130.6 vs 174.0; fp32 64 212.3 vs 225.1. Longer rows lose: bf16 512
    153.8 vs 112.7, 1024 152.5 vs 104.4, 4096 108.6 vs 105.4; fp32 192-4096 by 4-11%. The row tiles
    also read a head view of a fused QKV projection in place, where the core kernels copy it.
    And 16-bit rows of a multiple of 8 elements, not 16, on static layouts, whose tiles hold 16
    warps an SM (session 22: 1128-1208 1.19-1.27x the core, 2056 1.33x, 5000 1.09x; the nine
    lengths whose tiles held 8 lost, 0.70-0.88x). And aligned rows that are not a power of two, up
    to SHORT_BWD_MAX_ELEMS (``short_backward``; session 27: 1.1-1.9x the core). And fp32 rows that
    are not a power of two past FP32_BWD_MIN_BYTES (session 35: 1.0-1.7x the core). And aligned
    16-bit rows whose tiles keep ALIGNED_BWD_IN_FLIGHT in flight (``aligned_backward_tile``,
    session 52: 1.0-2.3x the core)."""
    lo, hi = DEFAULT_BACKWARD_BYTES
    if unaligned(n, elem_size) or (n & (n - 1) == 0 and lo <= n * elem_size <= hi) or short_backward(n, elem_size):
        return True
    if aligned_backward_tile(n, elem_size) is not None:  # (ALIGNED_BWD_*: session 52)
        return True
    if elem_size == 4 and n & (n - 1) and n * elem_size > FP32_BWD_MIN_BYTES and n <= MAX_ROW_ELEMS["backward"]:
        return True
    if not static_fit(n, elem_size, "backward"):
        return False
    # rows of a multiple of 8 elements, not 16, on static layouts, where their tiles hold
    # GATHERED_WARPS_PER_SM warps an SM (the comment before STATIC_MIN_ROW_BYTES); their warps and
    # blocks depend on n and the element size alone
    p = plan("backward", 1, 1, n, elem_size, 1)
    return p is not None and p.warps * p.occupancy >= GATHERED_WARPS_PER_SM


def few_rows(m: int, n: int, num_sms: int) -> bool:
    """Whether a call without a mode runs the row-tile backward for m rows of n elements (where the
    rules plan the rows): at most as many rows as SMs (a decode step's or a small batch's), so
    that the row tiles (one or two rows each at these lengths) spread over the SMs, where the
    core's plans are tuned for bandwidth-bound M; a grid of one block (one tile) stores dW itself
    (rows.launch.run_backward). Rows of FEW_ROWS_MIN_ELEMS or more: the measured ones.
    Session 39 (ab/s39g, H200, graph replay, us, the core -> the row tiles, aligned N 2048-8192):
    M = 1 bf16 4096 5.42 -> 1.94, 8192 6.64 -> 2.59, fp32 4096 4.90 -> 2.16 (2.1-2.9x); M = 8-64
    1.07-1.43x in 16-bit, 1.10-1.23x fp32; M = 132 1.02-1.28x, fp32 1.06-1.12x; past the SMs (200,
    256) 16-bit still 1.06-1.24x, fp32 0.96-1.10x (4096: 0.96): the bound is the SMs. Shorter rows
    were not timed: they keep their rules (backward_by_default)."""
    return m <= num_sms and FEW_ROWS_MIN_ELEMS <= n <= MAX_ROW_ELEMS["backward"]


def aligned_backward_tile(n: int, elem_size: int) -> tuple[int, int] | None:
    """(rows a tile, blocks an SM) of the default row-tile backward for 16-bit rows of n elements, a
    multiple of VECTOR_ELEMS and not a power of two (ALIGNED_BWD_* above), or None (the other rules
    decide; for these rows, the core): the first block count, 4 then 2, whose tiles of
    the most rows (a power of two, at most ALIGNED_BWD_MAX_ROWS) within ALIGNED_BWD_ELEMS elements a
    thread keep ALIGNED_BWD_IN_FLIGHT bytes of x and dy in flight an SM. A function of n and the
    element size."""
    if elem_size != 2 or n % VECTOR_ELEMS or n & (n - 1) == 0:
        return None
    threads = 32 * ALIGNED_BWD_WARPS
    for blocks, elems in sorted(ALIGNED_BWD_ELEMS.items(), reverse=True):
        rows = min(ALIGNED_BWD_MAX_ROWS, _prev_pow2(elems * threads // n)) if n <= elems * threads else 0
        if rows and _in_flight_line(blocks, rows, n, elem_size):
            return rows, blocks
    return None


def _in_flight_line(blocks: int, rows: int, n: int, elem_size: int) -> bool:
    """Whether blocks tiles an SM of rows rows of n elements keep ALIGNED_BWD_IN_FLIGHT of x and dy
    in flight (the backward's line, sessions 52 and 53)."""
    return blocks * rows * n * 2 * elem_size >= ALIGNED_BWD_IN_FLIGHT


def _gathered_pair(n: int, elem_size: int, span: int, rows: int, threads: int, blocks: int) -> int:
    """The blocks an SM of a two-row gathered 16-bit backward tile where a one-row tile of rows of n
    elements (span padded) on threads at blocks an SM keeps less than ALIGNED_BWD_IN_FLIGHT of x
    and dy in flight and two rows hold at most GATHERED_BWD_PAIR_ELEMS elements a thread (the
    comment above it), else 0."""
    low = not _in_flight_line(blocks, 1, n, elem_size)
    even = n % 2 == 0  # (odd rows, loaded 2 bytes at a time, tied or lost: the comment above)
    return blocks if even and rows == 1 and low and 2 * span <= GATHERED_BWD_PAIR_ELEMS * threads else 0


def short_backward(n: int, elem_size: int) -> bool:
    """Whether rows of n elements are a multiple of VECTOR_ELEMS (16-byte aligned rows that runtime
    layouts load 16 bytes at a time; the lengths measured), not a power of two, and
    SHORT_BWD_MIN_ELEMS to SHORT_BWD_MAX_ELEMS long: the core backward pads them to a power of two,
    the row tiles do not (see above)."""
    return SHORT_BWD_MIN_ELEMS <= n <= SHORT_BWD_MAX_ELEMS and n & (n - 1) != 0 and n % VECTOR_ELEMS == 0


def short_view_rows(n: int, elem_size: int) -> bool:
    """Whether the row tiles take rows of n elements in a view that the core kernels would copy
    (leading dims that merge into two groups, not one: a QK-norm head view of a fused QKV
    projection) even where plan() would leave them to the core kernels: rows of at most
    WARP_ROW_BYTES, 16-bit ones a multiple of VECTOR_ELEMS (e.g. head dims 96 and 192). The copy
    of x (and dy) costs two more passes over each: on contiguous rows the row tiles tied the core
    backward at bf16 192 (231.8 vs 231.9 us) and ran the forward at 96 in 76.1 us (persistent
    64 x (64 + 32)) against the core's 81.1, before any copy (session 14)."""
    return n * elem_size <= WARP_ROW_BYTES and (elem_size >= 4 or n % VECTOR_ELEMS == 0)


def _need(op: str, elem_size: int, width: int, rows: int, warps: int) -> float:
    """Registers per thread that a tile of rows x width on warps needs (REGISTERS' line)."""
    threads = 32 * warps
    base, per_row, per_other = REGISTERS[op, min(elem_size, 4)]
    return base + per_row * width / threads + per_other * (rows - 1) * width / threads


def _resident(need: float, threads: int) -> int:
    """Blocks of threads an SM holds at need registers per thread (at most MAX_BLOCKS_PER_SM)."""
    return max(1, min(MAX_BLOCKS_PER_SM, THREADS_PER_SM // threads, int(REGISTERS_PER_SM // (threads * need))))


def _warps_per_sm(op: str, elem_size: int, width: int, warps: int) -> int:
    """Warps an SM runs of one-row tiles of width on warps, at the register line's power-of-two
    occupancy (ROW_FWD_WARPS above)."""
    return warps * _prev_pow2(_resident(_need(op, elem_size, width, 1, warps), 32 * warps))


def _prefetches(need: float, occupancy: int, threads: int) -> bool:
    """Whether a backward row tile of the register line's need, at occupancy blocks of threads
    an SM, reads its next tile first (PREFETCH_* above)."""
    cap = min(MAX_THREAD_REGS, REGISTERS_PER_SM // (occupancy * threads))
    return occupancy <= PREFETCH_MAX_BLOCKS and need < cap + PREFETCH_OVER_CAP


def _backward_hint(elem_size: int, width: int, rows: int, resident: int) -> int:
    """The backward's occupancy hint: the blocks that keep IN_FLIGHT_BYTES of x and dy tiles per
    SM, at most ``resident``, rounded down to a power of two."""
    return _prev_pow2(max(1, min(resident, IN_FLIGHT_BYTES // (2 * rows * width * elem_size))))


def _l2_blocks(block_bytes: int, num_sms: int) -> int:
    """Blocks an SM whose rows (block_bytes each, in flight at once on every SM) fit LONG_L2_SHARE
    of L2, where the long kernels' second pass reads them."""
    return int(LONG_L2_SHARE * L2_BYTES // (num_sms * block_bytes))


def long_plan(op: str, a: int, b: int, n: int, elem_size: int, num_sms: int, *, chunk: int | None = None,
              warps: int | None = None, occupancy: int | None = None, static: bool = True,
              unroll: bool | None = None, onepass: bool | None = None, loads: int | None = None,
              persistent: bool | None = None, prefetch: bool | None = None) -> RowsPlan:  # fmt: skip
    """The plan of the long-row kernels (kind "long") for (a, b, n) rows (LONG_* above); the
    keywords override the rules (probes): chunk in elements, a power of two; static: whether the
    caller may run static layouts, which the forward takes where ``static_fit`` does and on
    aligned rows of ``long_fit`` or ``long_static_chunk`` in at most LONG_UNROLL_MAX_CHUNKS chunks; unroll:
    whether a static forward compiles its chunk count in (kernels.rows_fwd_long's UNROLL);
    onepass: the backward in one kernel (ONEPASS_MAX_BLOCKS), on static layouts where
    ``static_fit`` holds; None: where ONEPASS_MAX_BLOCKS blocks an SM fit, on static layouts;
    loads: kernels.LOADS_* (None: gathers on unaligned rows, else plain loads); persistent (the
    forward): a persistent grid (True) or one block per row (False), None: one block per row for
    the rows of ``long_static_chunk`` (and aligned ones of ``long_fit`` by the chunk they run) on static layouts in at
    most LONG_UNROLL_MAX_CHUNKS chunks (LONG_STATIC_* above), else persistent. The chunk (None):
    ``long_static_chunk``'s for its rows (8 or 16 KB), else LONG_CHUNK_BYTES[op]. prefetch (the
    forward): the second pass loads the next whole chunk first (kernels.rows_fwd_long's PREFETCH),
    None: the static long forward's rows at LONG_PREFETCH_MAX_BLOCKS (its occupancy capped
    to the blocks that hold the lookahead, LONG_PREFETCH_REGS)."""
    one_row_chunk = long_static_chunk(n, elem_size, num_sms, static) if op == "forward" else 0
    chunk = chunk or one_row_chunk or LONG_CHUNK_BYTES[op] // elem_size
    rows = a * b
    per_block = 2 * n * elem_size + 4 * -(-n // chunk) * chunk  # a row of x and dy, the dW partials
    if onepass is None:
        fits = _l2_blocks(per_block, num_sms) >= ONEPASS_MAX_BLOCKS
        onepass = fits and static and static_fit(n, elem_size, "backward")
    onepass = onepass and op == "backward"
    # rows on static layouts with the chunk count compiled in, one block per row (sessions 28, 29);
    # aligned rows of long_fit by the chunk they run (a probe's chunk too), all by long_static_chunk
    aligned = vector_rows(n, elem_size, static)
    fits = bool(one_row_chunk) or (aligned and long_fit(n, elem_size, num_sms))
    one_row = op == "forward" and static and fits and -(-n // chunk) <= LONG_UNROLL_MAX_CHUNKS
    if op == "forward":
        fit = _l2_blocks(n * elem_size, num_sms)
        most = LONG_MAX_BLOCKS
        if one_row and aligned and 2 * (n % chunk) <= chunk:  # (a last chunk past half a chunk: 4, above)
            most = LONG_STATIC_MAX_BLOCKS
        if one_row and elem_size == 4:
            most = LONG_FP32_MAX_BLOCKS
        one_per_row = not persistent if persistent is not None else one_row
        threads = 32 * (warps or LONG_WARPS[op])  # the blocks that hold the lookahead's two chunks:
        hold = REGISTERS_PER_SM // (threads * (chunk * elem_size // threads + LONG_PREFETCH_REGS))
        if prefetch is None:  # (LONG_PREFETCH_*; a block a row only, at the caller's occupancy if given)
            blocks = occupancy or min(most, fit, hold)
            prefetch = one_row and one_per_row and blocks <= LONG_PREFETCH_MAX_BLOCKS
        if prefetch:
            most = min(most, hold)
        occupancy = occupancy or _prev_pow2(max(LONG_MIN_BLOCKS, min(most, fit)))
        grid = rows if one_per_row else max(1, min(rows, num_sms * occupancy))
    elif onepass:
        fit = _l2_blocks(per_block, num_sms)
        occupancy = occupancy or _prev_pow2(max(1, min(ONEPASS_MAX_BLOCKS, fit)))
        grid = max(1, min(rows, num_sms * occupancy))
    else:
        occupancy = occupancy or LONG_BWD_BLOCKS
        grid = max(1, min(rows, num_sms * occupancy // -(-n // chunk)))
    if loads is None:
        loads = LOADS_GATHER if unaligned(n, elem_size) else LOADS_PLAIN
    static = static and (op == "forward" or onepass) and (static_fit(n, elem_size, op) or one_row)
    if unroll is None:
        unroll = one_row or n % LONG_UNROLL_WORD_ELEMS != 0
    unroll = static and op == "forward" and unroll
    prefetch = op == "forward" and bool(prefetch)
    return RowsPlan(op, 1, 1, (chunk, 0, 0), warps or LONG_WARPS[op], occupancy, grid, False, n % chunk != 0, loads,
                    "long", 0, static, unroll, onepass, prefetch)  # fmt: skip


def long_static_chunk(n: int, elem_size: int, num_sms: int, static: bool = True) -> int:
    """The chunk (elements) of the static long forward, one block per row with the chunk count
    compiled in, for rows of n elements, or 0 where the rules do not run it: 16-bit rows that are
    not a power of two, from LONG_STATIC_MIN_BYTES, aligned ones (``long_fit``) up to
    LONG_UNROLL_MAX_CHUNKS chunks of LONG_CHUNK_BYTES and past that (whatever ``long_fit`` says)
    in LONG_WIDE_CHUNK_BYTES chunks up to as many (session 52), even unaligned ones that load 4 or 8 bytes at
    a time (not a multiple of 8 elements) in LONG_CHUNK_BYTES chunks up to as many of them, past
    that in LONG_WIDE_CHUNK_BYTES chunks up to as many (the comments above LONG_STATIC_MIN_BYTES
    and LONG_WIDE_CHUNK_BYTES); fp32 rows that are not a power of two, up to as many
    LONG_WIDE_CHUNK_BYTES chunks, whose forward row tile (on runtime layouts) holds one block an SM
    and pads lanes past N, or that the row tiles leave to the core (past MAX_ROW_ELEMS, and 4 | N
    rows of 14336-16384) whose byte length is not a multiple of LONG_FP32_CORE_LINE_BYTES, in
    LONG_WIDE_CHUNK_BYTES chunks (the comments after
    LONG_PREFETCH_MAX_BLOCKS); ``plan`` runs the fp32 ones rather than the flat forward."""
    row = n * elem_size
    if elem_size == 4:  # fp32 rows the row tiles hold at one block an SM, or past them (LONG_FP32_*)
        if not static or row > LONG_UNROLL_MAX_CHUNKS * LONG_WIDE_CHUNK_BYTES or n & (n - 1) == 0:
            return 0
        # (fill=False: the tile without ``wide_one_tile``, whose one 16384 piece past 12288 is planned at
        # hint 1 and measured on that tile, not on this forward)
        tile = plan("forward", 1, 1, n, elem_size, num_sms, static=False, long=False, fill=False)
        padded = tile is not None and tile.occupancy == 1 and tile.check_n  # (exact pieces: s30d)
        core = tile is None and row % LONG_FP32_CORE_LINE_BYTES != 0  # the core's rows, but line-aligned ones
        return LONG_WIDE_CHUNK_BYTES // elem_size if padded or core else 0
    if not static or elem_size != 2 or n % 2 or n & (n - 1) == 0 or row < LONG_STATIC_MIN_BYTES:
        return 0
    for chunk_bytes in (LONG_CHUNK_BYTES["forward"], LONG_WIDE_CHUNK_BYTES):
        if row <= LONG_UNROLL_MAX_CHUNKS * chunk_bytes:  # (aligned rows' 8 KB chunks: where long_fit holds;
            narrow = chunk_bytes == LONG_CHUNK_BYTES["forward"]  # wide ones: after LONG_WIDE_CHUNK_BYTES)
            held = not (narrow and vector_rows(n, elem_size, static)) or long_fit(n, elem_size, num_sms)
            return chunk_bytes // elem_size if held else 0
    return 0


def vector_rows(n: int, elem_size: int, static: bool) -> bool:
    """Whether 16-bit rows of n elements load 16 bytes at a time in the long forward: rows of a
    multiple of VECTOR_ELEMS (what the JIT proves of a runtime layout), and on static layouts, whose
    row stride is compiled in, of a multiple of VECTOR_ELEMS // 2 (16-byte rows: session 35)."""
    return elem_size == 2 and n % (VECTOR_ELEMS // 2 if static else VECTOR_ELEMS) == 0


def padded_backward(n: int, elem_size: int) -> bool:
    """Whether the gathered 16-bit backward holds unaligned rows of n elements, on static layouts,
    as one padded power-of-two piece (PADDED_BWD_MIN_SHARE above): pieces of PADDED_BWD_WIDTHS that
    the row fills at least that share of."""
    width = _next_pow2(n)
    in_widths = PADDED_BWD_WIDTHS[0] <= width <= PADDED_BWD_WIDTHS[1]
    return elem_size == 2 and unaligned(n, elem_size) and in_widths and PADDED_BWD_MIN_SHARE * width <= n


def _long_unaligned(n: int, elem_size: int) -> bool:
    """Whether the forward of unaligned rows of n elements takes the long-row kernel although a
    row tile would hold it: even 16-bit rows past one WIDE_TILE tile (CORE_BWD_MAX_ELEMS above)."""
    return elem_size == 2 and n % 2 == 0 and unaligned(n, elem_size) and n > WIDE_TILE["forward"]


def _core_backward(n: int, elem_size: int) -> bool:
    """Whether the backward of unaligned rows of n elements past the row tiles, where the one-pass
    long backward does not fit, goes to the core kernels: even 16-bit rows of at most
    CORE_BWD_MAX_ELEMS (measured above)."""
    return elem_size == 2 and n % 2 == 0 and n <= CORE_BWD_MAX_ELEMS


def long_fit(n: int, elem_size: int, num_sms: int, static: bool = True) -> bool:
    """Whether the forward of aligned rows of n elements runs on the long-row kernel (LONG_* above):
    16-bit rows of 16-byte loads (``vector_rows``: a multiple of VECTOR_ELEMS, which the JIT proves,
    or on static layouts of VECTOR_ELEMS // 2; else the loads are 2 bytes:
    bf16 5050 x 13288 ran 126.1 us, 0.55x Quack, session 21) of at least LONG_MIN_BYTES, or on
    static layouts from LONG_STATIC_MIN_BYTES to LONG_UNROLL_MAX_CHUNKS chunks, not a power of two,
    whose LONG_MAX_BLOCKS rows per SM fit LONG_L2_SHARE of L2 (the second pass reads them from
    there). ``long_plan`` runs the static ones with the chunk count compiled in, a block a row."""
    row = n * elem_size
    fits = vector_rows(n, elem_size, static) and n & (n - 1) != 0 and _l2_blocks(row, num_sms) >= LONG_MAX_BLOCKS
    if static and LONG_STATIC_MIN_BYTES <= row <= LONG_UNROLL_MAX_CHUNKS * LONG_CHUNK_BYTES["forward"]:
        return fits
    return fits and row >= LONG_MIN_BYTES


def lanes_fit(n: int, elem_size: int, op: str = "forward") -> bool:
    """Whether op on unaligned rows of n elements runs on the lanes kernels (LANES_* above) with
    the rules' lanes of LANES_ELEMS elements (those of ``vector_lanes`` where static layouts are
    allowed): forward, rows padded to LANES_FWD_MAX_ELEMS, odd 16-bit ones to LANES_MAX
    (ODD_LANES_FWD_LIVE_PER_THREAD's comment)."""
    w = _next_pow2(n)
    if not (unaligned(n, elem_size) and LANES_MIN_ELEMS <= w <= LANES_MAX):
        return False
    if op == "forward":  # (odd 16-bit rows up to LANES_MAX: ODD_LANES_FWD_LIVE_PER_THREAD below)
        return w <= (LANES_MAX if elem_size == 2 and n % 2 else LANES_FWD_MAX_ELEMS)
    if w * elem_size > LANES_BWD_ROW_BYTES:
        return False
    if w * elem_size <= WARP_ROW_BYTES:
        return True
    return LANES_PIECES_GAIN * sum(pieces(n, GATHER_PIECES[min(elem_size, 4)], GATHER_GRANULE)) > w


def vector_lanes(n: int, elem_size: int, op: str = "forward") -> int:
    """The elements a lane of the static lanes tiles that op on rows of n elements runs on where
    static layouts are allowed, or 0 (the comments above VECTOR_LANE_ELEMS and
    VECTOR_2MOD4_FWD_ELEMS): VECTOR_LANE_ELEMS for 16-bit rows of 4 mod 8 elements padded to
    VECTOR_LANES_WIDTHS and the backward of those of 2 mod 4 padded to VECTOR_LANES_2MOD4_WIDTHS;
    VECTOR_2MOD4_FWD_ELEMS for the forward of 2 mod 4 rows padded to VECTOR_2MOD4_FWD_WIDTHS."""
    if elem_size != 2:
        return 0
    w = _next_pow2(n)
    lo, hi = VECTOR_LANES_WIDTHS
    lo2, hi2 = VECTOR_LANES_2MOD4_WIDTHS
    if (n % 8 == 4 and lo <= w <= hi) or (op == "backward" and n % 4 == 2 and lo2 <= w <= hi2):
        return VECTOR_LANE_ELEMS
    lo, hi = VECTOR_2MOD4_FWD_WIDTHS
    return VECTOR_2MOD4_FWD_ELEMS if op == "forward" and n % 4 == 2 and lo <= w <= hi else 0


def flat_fit(n: int, elem_size: int, op: str = "forward", *, num_sms: int) -> bool:
    """Whether op on rows of n elements runs on the flat rows kernels where the caller's rows are
    contiguous end to end (FLAT_* above): forward, rows of at least FLAT_MIN_BYTES[element size][the
    widest load their own layout allows] (16-bit odd, 2 mod 4, 4 mod 8 and 8 mod 16 rows; fp32 odd
    and 2 mod 4 ones while LONG_MIN_BLOCKS of them an SM fit FLAT_FP32_L2_SHARE of L2); backward,
    16-bit unaligned rows of at least FLAT_BWD_MIN_BYTES, odd or past CORE_BWD_MAX_ELEMS (``plan``
    also leaves it the rows of the one-pass long backward)."""
    row_bytes = n * elem_size
    # (the backward's shifted weights, V copies of n + two chunks or so, take int32 indices too)
    if n > FLAT_MAX_ELEMS // (FLAT_ALIGN_BYTES // elem_size) // (2 if op == "backward" else 1):
        return False
    if op == "backward":
        long = n % 2 == 1 or n > CORE_BWD_MAX_ELEMS  # (the even ones below: the core, _core_backward)
        return elem_size == 2 and unaligned(n, elem_size) and row_bytes >= FLAT_BWD_MIN_BYTES and long
    in_l2 = elem_size != 4 or LONG_MIN_BLOCKS * num_sms * row_bytes <= FLAT_FP32_L2_SHARE * L2_BYTES
    return in_l2 and row_bytes >= FLAT_MIN_BYTES.get(elem_size, {}).get(row_bytes & -row_bytes, math.inf)


def flat_plan(op: str, a: int, b: int, n: int, elem_size: int, num_sms: int, *, chunk: int | None = None,
              warps: int | None = None, occupancy: int | None = None, persistent: bool | None = None,
              static: bool = True, prefetch: bool | None = None, dot_chunk: int | None = None) -> RowsPlan:  # fmt: skip
    """The plan of the flat rows kernels (kind "flat") for op on (a, b, n) rows contiguous end to
    end (FLAT_* above): the forward kernels.rows_fwd_flat, the backward rows_dot_flat then
    rows_bwd_flat (FLAT_BWD_* above). The keywords override the rules (probes): chunk in
    elements, a power of two; forward: persistent True: a persistent grid (the rules: a block a
    row); static: whether the row length may be compiled in (kernels.rows_fwd_flat's N; the rules:
    where FLAT_STATIC_MIN_CHUNKS whole chunks fit a row's interior), prefetch (True: the second
    pass loads the next chunk first, FLAT_PREFETCH_*; it also sets the chunk, None or not:
    FLAT_PREFETCH_CHUNK_BYTES with it, the rules' 8 or 16 KB without, unless chunk is given);
    backward: prefetch (False: off), dot_chunk (the row dot's chunk, widths[1]; grid: the dx
    kernel's row groups). ``lanes`` holds the elements of 16 bytes (the kernels' V)."""
    v = FLAT_ALIGN_BYTES // elem_size
    if n < 2 * v:
        raise ValueError(f"the flat rows kernel needs rows of at least {2 * v} elements, got {n}")
    if op == "backward":
        chunk = chunk or FLAT_BWD_CHUNK_BYTES // elem_size
        dot_chunk = dot_chunk or FLAT_DOT_CHUNK_BYTES // elem_size
        if max(chunk, dot_chunk) > EXACT_SUM_MAX_LANES:
            raise ValueError(f"the flat rows kernel's chunks hold at most {EXACT_SUM_MAX_LANES} elements")
        occupancy = occupancy or FLAT_BWD_BLOCKS
        # row groups: a multiple of v (kernels.rows_bwd_flat) whose blocks, chunks a group, fit
        # the SMs at once (s37a: rounded up past them, a second wave of 24 blocks cost 10%)
        groups = min(-(-(a * b) // v), num_sms * occupancy // -(-n // chunk) // v)
        grid = max(1, groups) * v
        return RowsPlan(op, 1, 1, (chunk, dot_chunk, 0), warps or FLAT_BWD_WARPS, occupancy, grid, False, True,
                        LOADS_GATHER, "flat", v, False, prefetch=prefetch is not False)  # fmt: skip
    wide = n * elem_size > LONG_UNROLL_MAX_CHUNKS * FLAT_CHUNK_BYTES
    if prefetch is None:  # (FLAT_PREFETCH_CHUNK_BYTES above)
        prefetch = wide and elem_size == 2 and n * elem_size <= FLAT_PREFETCH_MAX_BYTES
    chunk = chunk or (FLAT_PREFETCH_CHUNK_BYTES if prefetch else LONG_WIDE_CHUNK_BYTES if wide else
                      FLAT_CHUNK_BYTES) // elem_size  # fmt: skip
    if chunk > EXACT_SUM_MAX_LANES:
        raise ValueError(f"the flat rows kernel's chunks hold at most {EXACT_SUM_MAX_LANES} elements, got {chunk}")
    if occupancy is None and wide:
        occupancy = LONG_MIN_BLOCKS
    elif occupancy is None:  # (8 KB chunks: the rule's rows up to LONG_UNROLL_MAX_CHUNKS chunks, and probes)
        fit = _l2_blocks(n * elem_size, num_sms)
        occupancy = _prev_pow2(max(LONG_MIN_BLOCKS, min(FLAT_BLOCKS, fit)))
    grid = max(1, min(a * b, num_sms * occupancy)) if persistent else a * b
    static = static and (n - 2 * (v - 1)) // chunk >= FLAT_STATIC_MIN_CHUNKS
    return RowsPlan(op, 1, 1, (chunk, 0, 0), warps or FLAT_WARPS, occupancy, grid, False, True, LOADS_GATHER, "flat",
                    v, static, prefetch=prefetch)  # fmt: skip


# The split flat forward (kernels.rows_fwd_flat_split, ``split_plan``): rows contiguous end to end,
# each row's SPLIT_SEGMENT_BYTES-wide column segments on SPLIT blocks (at most SPLIT_MAX_BLOCKS, each
# group's blocks resident at once: SPLIT_BLOCKS an SM) that exchange their sums through the core's
# slots, each segment's interior loaded 16 bytes a thread from the flat array (the flat forward's
# reads) and held in registers: one pass over memory. It takes the forward of fp32 rows that are
# not 16-byte aligned (odd and 2 mod 4) once the flat forward's rows in flight (LONG_MIN_BLOCKS an
# SM) fill more than SPLIT_L2_SHARE of L2, up to SPLIT_MAX_BLOCKS segments (``split_fit``). Before,
# the flat forward ran them up to FLAT_FP32_L2_SHARE and the core's split kernel past it, whose
# 2-D row view of such rows loads 4 or 8 bytes a thread: 62-66% of the copy where it ran 16-byte
# aligned rows (fp32 45056) at 92.5% (session 50, s50b). H200, graph replay, about 64 Mi elements, us
# (s50d, s50e): the core's split -> split flat in 16 KB segments at 4 blocks of 4 warps: 42631
# 203.0 -> 175.2, 50035 205.2 -> 178.8, 54883 196.9 -> 179.2, 63990 192.0 -> 174.4; the flat forward
# -> split flat: 30450 189.1 -> 172.6 (its rows in flight 61% of L2), 27002 171.8 -> 172.8 (54%),
# 24001 169.1 -> 167.3 (48%). 32 KB segments at 2 blocks of 8 warps: 186-203 (188.4 at 63990), 16
# KB at 2 blocks 280-293 (twice the exchanges a row's bytes). Both fp32 shapes compile to 128
# registers without stack (CPU SASS); 16-bit rows lost to the flat forward (bf16 42631-63990:
# 147-163 against 87-109) and keep it. Session 51 (s51b, s51d): the fixed point took three
# conversions a square (f2i: one, 2-3% faster; no fixed point at all, not position-free: 80% of the
# copy), and the interior's weight, loaded with x and held to the end of the row (64 of 128
# registers a thread), is read after the row's sum: 96 registers (CPU SASS, no stack), so 5 blocks
# an SM (80 KB of x in flight where 4 held 64 KB), us, 4 blocks -> 5 with the late weight: 30450
# 168.3 -> 157.4, 42631 172.5 -> 166.1, 50035 174.9 -> 159.5, 54883 176.1 -> 158.5, 63990 170.8 ->
# 156.0 (77-82% of the copy); at 4 blocks the late weight ran 175-184, and the weight held across
# rows at 4 blocks (no reload while a block's rows share one shift) 1-2% (bf16 stays on the flat
# forward: 124-143 against 87-109). Its reach at 5 blocks (s51e), the flat forward -> split flat:
# 21001 165.4 -> 164.0 (the flat forward's rows in flight 42% of L2), 24001 169.1 -> 154.4 (48%),
# 27002 171.8 -> 154.1 (54%).
SPLIT_SEGMENT_BYTES = 16 * 1024
SPLIT_BLOCKS = 5
SPLIT_WARPS = 4
SPLIT_MAX_BLOCKS = 16  # the core's MAX_SPLIT (its slots' widths)
SPLIT_L2_SHARE = 0.45  # (5 blocks, s51e: between 21001's tie at 42% of L2 and 24001's gain at 48%;
# 4 blocks, s50e: 0.6, between 27002's tie at 54% and 30450's gain at 61%)


def split_fit(n: int, elem_size: int, op: str = "forward", *, num_sms: int) -> bool:
    """Whether op on rows of n elements runs on the split flat forward where the caller's rows
    are contiguous end to end (SPLIT_* above): the forward of fp32 rows that are not 16-byte
    aligned, whose flat forward's rows in flight overflow SPLIT_L2_SHARE of L2, in at most
    SPLIT_MAX_BLOCKS segments, the last of at least two 16-byte vectors (``split_plan``), past the
    static long forward's rows (LONG_UNROLL_MAX_CHUNKS chunks of LONG_WIDE_CHUNK_BYTES)."""
    if op != "forward" or elem_size != 4 or not unaligned(n, elem_size):
        return False
    if n * elem_size <= LONG_UNROLL_MAX_CHUNKS * LONG_WIDE_CHUNK_BYTES:  # (the static long forward's: more SMs)
        return False
    v, chunk = FLAT_ALIGN_BYTES // elem_size, SPLIT_SEGMENT_BYTES // elem_size
    splits = -(-n // chunk)
    full = LONG_MIN_BLOCKS * num_sms * n * elem_size > SPLIT_L2_SHARE * L2_BYTES
    return full and 1 < splits <= min(SPLIT_MAX_BLOCKS, num_sms) and n - (splits - 1) * chunk >= 2 * v


def split_plan(op: str, a: int, b: int, n: int, elem_size: int, num_sms: int, *, chunk: int | None = None,
               warps: int | None = None, occupancy: int | None = None) -> RowsPlan:  # fmt: skip
    """The plan of the split flat forward (kind "split") for (a, b, n) rows contiguous end to end
    (SPLIT_* above): widths[0] the segment (chunk, elements: a power of two), ``lanes`` the
    elements of 16 bytes, grid SPLIT x groups, the groups as many as SMs x occupancy hold, at most
    the rows. The keywords override the rules (probes)."""
    if op != "forward":
        raise ValueError("the split flat rows kernel is a forward")
    v = FLAT_ALIGN_BYTES // elem_size
    chunk = chunk or SPLIT_SEGMENT_BYTES // elem_size
    splits = -(-n // chunk)
    occupancy = occupancy or SPLIT_BLOCKS
    last = n - (splits - 1) * chunk  # (at least 2 V elements: a segment's interior is never empty)
    fits = 1 < splits <= min(SPLIT_MAX_BLOCKS, num_sms * occupancy) and last >= 2 * v
    if chunk & (chunk - 1) or not 2 * v <= chunk <= EXACT_SUM_MAX_LANES - 2 * v or not fits:
        raise ValueError(f"no split flat plan for rows of {n} in segments of {chunk}")
    groups = max(1, min(a * b, num_sms * occupancy // splits))
    return RowsPlan(op, 1, 1, (chunk, 0, 0), warps or SPLIT_WARPS, occupancy, groups * splits, False, True,
                    LOADS_GATHER, "split", v, False)  # fmt: skip


def lanes_plan(op: str, a: int, b: int, n: int, elem_size: int, num_sms: int, *, tile_rows: int | None = None,
               warps: int | None = None, occupancy: int | None = None, prefetch: bool | None = None,
               static: bool = False, lane_elems: int = LANES_ELEMS,
               persistent: bool | None = None) -> RowsPlan:  # fmt: skip
    """The plan of op's lanes kernel (kind "lanes": rows_fwd_lanes, rows_bwd_lanes) for (a, b, n)
    rows (LANES_* above), lane_elems elements a lane; the keywords override the rules (probes).
    The backward reads its next tile first unless prefetch is False (LANES_BWD_PREFETCH; the
    forward has no prefetch: prefetch=True raises); static: the kernels compiled for the row
    layout (``odd_static``, ``vector_lanes``); the forward runs a block a tile without the loop, y
    scattered (rows_fwd_lanes' LOOP false), where persistent is False or, None, ``lanes_one_tile``
    says; else the persistent grid."""
    w = _next_pow2(n)
    rows = tile_rows or lanes_tile_rows(op, n, elem_size, lane_elems, static)
    one = op == "forward" and (persistent is False or (persistent is None and lanes_one_tile(elem_size, lane_elems,
                                                                                          static)))  # fmt: skip
    tile_b = min(rows, b & -b)
    tile_a = rows // tile_b
    tiles = -(-a // tile_a) * (b // tile_b)
    occupancy = occupancy or LANES_OCCUPANCY[op]
    grid = tiles if one else max(1, min(tiles, num_sms * occupancy))
    if op == "backward":
        prefetch = LANES_BWD_PREFETCH if prefetch is None else prefetch
    elif prefetch:
        raise ValueError("the lanes forward has no prefetch (rows_fwd_lanes, session 55)")
    return RowsPlan(op, tile_a, tile_b, (w, 0, 0), warps or LANES_WARPS, occupancy, grid, a % tile_a != 0, w != n,
                    LOADS_GATHER, "lanes", max(1, w // lane_elems), static, prefetch=bool(prefetch),
                    loop=not one)  # fmt: skip


def lanes_one_tile(elem_size: int, lane_elems: int, static: bool) -> bool:
    """Whether a lanes forward runs a block a tile without the loop, y scattered (the comment after
    VECTOR_2MOD4_FWD_WIDTHS, session 55): 16-bit rows on their static vector lanes
    (``vector_lanes``)."""
    return elem_size == 2 and static and lane_elems in (VECTOR_LANE_ELEMS, VECTOR_2MOD4_FWD_ELEMS)


def lanes_tile_rows(op: str, n: int, elem_size: int, lane_elems: int, static: bool = False) -> int:
    """The rows of op's lanes tile for rows of n elem_size-byte elements, lane_elems a lane, on
    static layouts or not: LANES_TILE_ELEMS[op] padded elements, or, where ``lanes_live_elems``
    gives a budget, the most rows (a power of two) whose live elements (rows x n) stay within it.
    A function of n and the layout alone, never of the row count: a row's bits do not depend on
    the batch."""
    rows = max(1, min(MAX_TILE_ROWS, LANES_TILE_ELEMS[op] // _next_pow2(n)))
    live = lanes_live_elems(op, n, elem_size, lane_elems, static)
    while 2 * rows * n <= live and 2 * rows <= MAX_TILE_ROWS:
        rows *= 2
    return rows


def lanes_live_elems(op: str, n: int, elem_size: int, lane_elems: int, static: bool) -> int:
    """The live elements a forward lanes tile may hold (``lanes_tile_rows``), 0 where the tile keeps
    LANES_TILE_ELEMS: ODD_LANES_FWD_LIVE_ELEMS for odd 16-bit rows padded to LANES_MAX on static
    layouts (the rows measured: the comment there)."""
    if op != "forward" or elem_size != 2:
        return 0
    odd_wide = n % 2 == 1 and _next_pow2(n) == LANES_MAX and lane_elems == LANES_ELEMS
    return ODD_LANES_FWD_LIVE_ELEMS if odd_wide and static else 0


@functools.lru_cache(maxsize=1024)
def plan(op: str, a: int, b: int, n: int, elem_size: int, num_sms: int, *, tile_rows: int | None = None,
         warps: int | None = None, occupancy: int | None = None, persistent: bool | None = None,
         loads: int | None = None, max_pieces: int | None = None, min_piece: int | None = None,
         any_length: bool = False, lanes: bool | None = None, static: bool = True, long: bool | None = None,
         chunk: int | None = None, unroll: bool | None = None, onepass: bool | None = None,
         prefetch: bool | None = None, flat: bool | None = False, fill: bool = True,
         core_bits: bool = False, split: bool = False) -> RowsPlan | None:  # fmt: skip
    """The plan for an (a, b, n) problem of elem_size-byte elements on num_sms SMs, or None when
    the rules leave its rows to the core kernels (see the module's docstring). The keywords
    override the rules (probes, tests: max_pieces=1: one padded tile per row, None: the rules'
    choice; any_length: plan rows of any length up to the longest; loads: kernels.LOADS_*, None:
    the rules' choice, gathers for ``unaligned`` rows in multi-row or 16-bit tiles (GATHER_PIECES);
    lanes: whether a forward may take rows_fwd_lanes, None: where ``lanes_fit`` and no other keyword
    overrides the rules (or ``vector_lanes`` on static layouts), False for callers whose
    kernels have only the row-tile layout; static: whether the caller may run static layouts where
    ``static_fit`` takes them (and the runtime plans that ``odd_static``, ``word_static``,
    ``vector_lanes`` and ``long_static_chunk`` compile), False: runtime layouts everywhere; long: True runs the long-row
    kernels (``long_plan``, chunk: their chunk in elements) whatever the row's length, None where
    ``long_fit`` or the row's length says so and no other keyword overrides the rules, False
    never: callers whose kernels have only the row-tile layout; prefetch: whether the backward's
    row tiles read the next tile first, None: the rule, PREFETCH_MAX_BLOCKS; the forward's where
    asked, on a persistent grid of plain loads with more tiles than blocks (a probe keyword: the
    rules never set it for row tiles, and the caller picks the hint it compiles at, session 31; a
    lanes forward's: none, ``lanes_plan`` raises; a flat
    forward's: ``flat_plan``, which also picks its chunk by it; a long forward's: ``long_plan``); flat: whether the
    caller's rows are contiguous end to end, one flat array that the flat rows kernels may read
    (``flat_plan``): None where ``flat_fit`` and no other keyword overrides the rules, True always
    (probes), False never (the default: callers that cannot give a flat array and the shifted
    weights' workspace); fill: whether few rows may take fewer rows a forward tile
    (FILL_TILES_PER_SM) and a forward on a grid of its tiles may run without the loop
    (``one_tile``, ``many_tiles``, ``lone_tiles``, ``lone_tma``, and ``wide_one_tile``, which also
    takes two pieces where the rules take three); False: the tile of any number of rows, always the
    loop and the persistent grid where the rules give one (the experimental fused add's and FP8's
    plans, which pass lanes=False: a lanes forward's loop is ``lanes_one_tile``'s, whatever fill);
    core_bits: whether the caller's inputs give ``lone_tma``'s tile the core's bits
    (``same_bits``: aligned rows, a weight of x's dtype or none); False, the default for
    callers that cannot tell, keeps those rows on the core at every M; split: True runs the split
    flat forward (``split_plan``, a probe keyword; the rules take it where flat is None and
    ``split_fit``)."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if a < 1 or b < 1:
        raise ValueError(f"a plan needs at least one row, got a={a}, b={b}")
    overridden = any(v is not None for v in (tile_rows, warps, occupancy, persistent, loads, max_pieces, min_piece))
    auto = flat is None and long is None and chunk is None and not overridden
    keep = overridden or lanes or flat or long or chunk is not None  # (a caller's or probe's choice stands)
    tile = aligned_backward_tile(n, elem_size) if op == "backward" and not keep else None
    if tile is not None:  # aligned 16-bit rows' default backward tile (ALIGNED_BWD_*)
        (tile_rows, occupancy), warps = tile, ALIGNED_BWD_WARPS
    split = split or (auto and split_fit(n, elem_size, op, num_sms=num_sms))
    if split:  # the split flat forward (split_plan; ``split`` True: probes)
        return split_plan(op, a, b, n, elem_size, num_sms, chunk=chunk, warps=warps, occupancy=occupancy)
    # (the backward: where the long one would run two kernels; its one-pass fits by the SMs, session 37's review)
    fits = flat is None and long is None and not overridden and flat_fit(n, elem_size, op, num_sms=num_sms)
    static_long = op == "forward" and (elem_size == 4 or vector_rows(n, elem_size, static))
    if fits and static_long and long_static_chunk(n, elem_size, num_sms, static):
        fits = False  # fp32 and aligned 16-bit rows of the static long forward, which runs them faster
    if flat or (fits and not (op == "backward" and long_plan(op, a, b, n, elem_size, num_sms, static=static).onepass)):
        return flat_plan(op, a, b, n, elem_size, num_sms, chunk=chunk, warps=warps, occupancy=occupancy,
                         persistent=persistent, static=static, prefetch=prefetch)  # fmt: skip
    if long or (long is None and not overridden and op == "forward" and long_fit(n, elem_size, num_sms, static)):
        return long_plan(op, a, b, n, elem_size, num_sms, chunk=chunk, warps=warps, occupancy=occupancy, static=static,
                         unroll=unroll, onepass=onepass, loads=loads, persistent=persistent,
                         prefetch=prefetch)  # fmt: skip
    if (
        long is None
        and not overridden
        and op == "forward"
        and (_long_unaligned(n, elem_size) or long_static_chunk(n, elem_size, num_sms, static))
    ):
        return long_plan(op, a, b, n, elem_size, num_sms, chunk=chunk, static=static, unroll=unroll, prefetch=prefetch)
    # the runtime layouts' plan (but lanes_tile_rows), compiled
    compiled = static and (odd_static(n, elem_size, op) or word_static(n, elem_size, op))
    vector = vector_lanes(n, elem_size, op) if static else 0
    static = static and static_fit(n, elem_size, op)
    if lanes or (lanes is None and not overridden and (vector or lanes_fit(n, elem_size, op))):
        return lanes_plan(op, a, b, n, elem_size, num_sms, tile_rows=tile_rows, warps=warps, occupancy=occupancy,
                          prefetch=prefetch, static=compiled or vector > 0,
                          lane_elems=vector or LANES_ELEMS, persistent=persistent)  # fmt: skip
    row_bytes = n * elem_size
    short = row_bytes < MIN_PIECE_BYTES
    unal = unaligned(n, elem_size)
    one_piece = static and (short or elem_size == 4)  # its lanes past N dropped (STATIC_FP32_MAX_ELEMS above)
    if unal:
        any_length = True  # the core kernels cannot load these rows fast (ALIGN_BYTES)
        if short and max_pieces is None and not one_piece:  # gathered multi-row tiles (GATHER_PIECES)
            fwd_one = op == "forward" and _next_pow2(n) > LANES_FWD_MAX_ELEMS  # (odd 16-bit 257-511: lanes=False only)
            pieces_max = GATHER_FWD_PIECES if fwd_one else GATHER_PIECES[min(elem_size, 4)]
            max_pieces, min_piece = pieces_max, min_piece or GATHER_GRANULE
    wide_one = fill and not overridden and wide_one_tile(op, n, elem_size)  # (WIDE_ONE_TILE_PIECES above)
    if max_pieces is None:  # (one padded piece for the gathered 16-bit backward: PADDED_BWD_MIN_SHARE above)
        padded = op == "backward" and static and padded_backward(n, elem_size)
        max_pieces = 1 if one_piece or padded else WIDE_ONE_TILE_PIECES if wide_one else MAX_PIECES
    odd_short = short and n & (n - 1) and not (op == "backward" and short_backward(n, elem_size))
    if elem_size < 4 and not any_length and not static and (n % VECTOR_ELEMS or odd_short):
        return None  # (static: rows of a multiple of 8, not 16, elements, which only static layouts load 16 B)
    wide_short = elem_size == 2 and n > SHORT_BWD_WIDE_ELEMS and short_backward(n, elem_size)
    if not overridden and op == "backward" and wide_short:  # (above SHORT_BWD_MIN_PIECE)
        min_piece = SHORT_BWD_MIN_PIECE
    if min_piece is None:
        min_piece = 1 if short or op == "backward" else MIN_PIECE_BYTES // elem_size
    ps = pieces(n, max_pieces, min_piece)
    if op == "forward" and row_bytes >= 2 * MIN_PIECE_BYTES and max_pieces >= 2:  # two pieces of 1 KB or more
        two = pieces(n, 2, MIN_PIECE_BYTES // 2 // elem_size)
        ps = two if sum(two) < sum(ps) else ps
    width = sum(ps)
    if width > MAX_ROW_ELEMS[op]:
        take_long = unal and elem_size < 4 and long is not False  # fp32: the core's split kernels
        if not take_long:  # split kernels
            return None
        lp = long_plan(op, a, b, n, elem_size, num_sms, chunk=chunk, warps=warps, occupancy=occupancy, static=static,
                       unroll=unroll, onepass=onepass)  # fmt: skip
        core = not lp.onepass and long is None and not overridden and _core_backward(n, elem_size)
        return None if op == "backward" and core else lp
    if tile_rows is None and op == "forward" and len(ps) > 1 and not short:
        tile_rows = 1
    auto = tile_rows is None and warps is None and occupancy is None
    if one_piece and auto and op == "backward":  # IN_FLIGHT_BYTES at MAX_BLOCKS_PER_SM blocks (see above)
        tile_rows = _prev_pow2(max(1, IN_FLIGHT_BYTES // (2 * width * elem_size * MAX_BLOCKS_PER_SM)))
        occupancy = MAX_BLOCKS_PER_SM
    rows = tile_rows or max(1, min(MAX_TILE_ROWS, _prev_pow2(TILE_BYTES[op] // (width * elem_size))))
    if fill and tile_rows is None and op == "forward" and b == 1 and width == n and n >= FILL_MIN_ROW_ELEMS:
        while rows > 1 and -(-a // rows) < FILL_TILES_PER_SM * num_sms:  # (FILL_TILES_PER_SM above)
            rows //= 2
    warp_local = width * elem_size <= WARP_ROW_BYTES  # a row reduced by shuffles within one warp
    masked = op == "forward" and elem_size == 2 and width != n and rows > 1 and not warp_local
    span = n if one_piece else width  # the elements a row holds in registers (STATIC_FP32_MAX_ELEMS above)
    gathered16 = unal and elem_size < 4  # 16-bit tiles read through gathers (GATHERED_* above)
    if gathered16 and auto and op == "backward" and width >= GATHERED_BWD_MIN_WIDTH:
        rows = 1
        four = _prefetches(_need(op, elem_size, span, 1, 4), GATHERED_WARPS_PER_SM // 4, 128)  # 4 warps prefetch?
        warps = 8 if width > WIDE_TILE[op] or not four else 4  # (above GATHERED_BWD_MIN_WIDTH)
        occupancy = GATHERED_WARPS_PER_SM // warps
    wide = rows * width > WIDE_TILE[op] or (gathered16 and op == "forward" and rows == 1 and width >= WIDE_TILE[op])
    eight = static and elem_size < 4 and row_bytes % ALIGN_BYTES == 8  # 8-byte loads (ROW_FWD_WARPS above)
    if warps is None and occupancy is None and op == "forward" and rows == 1 and eight:
        wide = wide or _warps_per_sm(op, elem_size, span, ROW_FWD_WARPS) > _warps_per_sm(op, elem_size, span, 4)
    warps = warps or (8 if wide and (op == "forward" or rows == 1) else 4)
    need = _need(op, elem_size, span, rows, warps)
    if masked and auto and need > MASKED_NEED and 2 * rows <= MAX_TILE_ROWS:
        rows, warps = 2 * rows, 8  # masked multi-row tiles: 32 warps per SM within 64 registers (see above)
        need = _need(op, elem_size, span, rows, warps)
    threads = 32 * warps
    if gathered16 and auto and op == "backward":  # at least GATHERED_WARPS_PER_SM warps per SM (see above)
        per_sm = GATHERED_WARPS_PER_SM // warps
        while rows > 1 and _backward_hint(elem_size, width, rows, _resident(need, threads)) < per_sm:
            rows //= 2
            need = _need(op, elem_size, span, rows, warps)
        hint = occupancy or _backward_hint(elem_size, width, rows, _resident(need, threads))
        pair = _gathered_pair(n, elem_size, span, rows, threads, hint)
        if pair and not overridden:  # one-row tiles under the line take two rows (GATHERED_BWD_PAIR_*)
            rows, occupancy, prefetch = 2, pair, True if prefetch is None else prefetch
            need = _need(op, elem_size, span, rows, warps)
    # the largest power of two dividing b, at most the tile's rows; one head for the forward's
    # rows of ONE_HEAD_ROW_BYTES or more (see above)
    tile_b = 1 if op == "forward" and width * elem_size >= ONE_HEAD_ROW_BYTES else min(rows, b & -b)
    tile_a = rows // tile_b
    resident = _resident(need, threads)
    if occupancy is None:
        if op == "forward":
            occupancy = _prev_pow2(min(resident, WARP_LOCAL_HINT if warp_local else MAX_BLOCKS_PER_SM))
            if masked:
                occupancy = THREADS_PER_SM // 2 // threads  # 32 warps per SM, whatever the line says (see above)
            elif static and one_piece and width != n and elem_size == 2:
                occupancy = STATIC_PADDED_BLOCKS
            elif occupancy < resident and REGISTERS_PER_SM // (threads * resident) >= ODD_HINT_MIN_REGS:
                occupancy = resident  # not a power of two (ODD_HINT_MIN_REGS above)
        else:
            occupancy = _backward_hint(elem_size, width, rows, resident)
    tiles = -(-a // tile_a) * (b // tile_b)
    if loads is None:  # gathers for pieces checked element by element (above GATHERED_BWD_MIN_WIDTH)
        checked = unal or (width != n and n % VECTOR_ELEMS != 0)
        gather = checked and (rows > 1 or elem_size < 4 or len(ps) == 1)
        if static and op == "forward" and rows > 1:  # plain multi-row tiles on static layouts (see above)
            gather = False
        loads = LOADS_GATHER if gather else LOADS_PLAIN
    lone = fill and persistent is not True and lone_tiles(op, rows, b, ps, n, elem_size, loads, resident, tiles,
                                                          num_sms)  # (LONE_TILES_PER_SM above)  # fmt: skip
    core = op == "forward" and resident == 1 and 7 * _next_pow2(n) <= 8 * n and not any_length
    if core and fill and not overridden and lone_tma(op, b, n, elem_size, a, num_sms, core_bits):
        w = _next_pow2(n)  # the core's tile, a block a row (LONE_TMA_TILES_PER_SM above)
        return RowsPlan(op, 1, 1, (w, 0, 0), LONE_TMA_WARPS, LONE_TMA_HINT, a, False, w != n, LOADS_TMA, "tile", 0,
                        False, loop=False)  # fmt: skip
    if core and not (lone and elem_size == 2):  # (fp32's plain lone tiles: other bits, LONE_TILES_PER_SM)
        return None  # one block per SM, and the core's power-of-two TMA tile pads at most 1/7 of the row
    blocks = min(tiles, num_sms * occupancy)  # a persistent grid: the hint's blocks are resident
    many = False  # a block a tile without the loop where a persistent grid would take many tiles
    if persistent is None:
        one_row = rows == 1 and elem_size == 2 and (2 * row_bytes >= TILE_BYTES[op] or unal)
        persistent = op == "backward" or (one_row and (len(ps) > 1 or resident == 1 or unal))
        many = persistent and fill and many_tiles(op, rows, b, ps, n, elem_size, loads, occupancy, tiles, blocks)
        persistent = persistent and not (many or lone)
    grid = blocks if persistent else tiles
    widths = (*ps, 0, 0)[:3]
    if op != "backward":
        # a persistent forward grid of plain or TMA loads (kernels.rows_fwd's PREFETCH: not a rule yet)
        prefetch = bool(prefetch) and grid < tiles and loads != LOADS_GATHER
    elif prefetch is None:
        prefetch = _prefetches(need, occupancy, threads)
    one = wide_one or one_tile(op, rows, ps, n, elem_size, threads, loads)
    loop = not (fill and grid == tiles and (many or lone or one))
    return RowsPlan(op, tile_a, tile_b, widths, warps, occupancy, grid, a % tile_a != 0, width != n, loads, "tile", 0,
                    static or (compiled and op == "forward"), prefetch=prefetch, loop=loop)  # fmt: skip
