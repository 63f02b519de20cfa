"""Autotuning: time every candidate config of a row bucket with ``cuda.tile.tune``.

Framework-free, like the launchers: the caller passes arrays (inputs with the shape to tune
for, outputs it may overwrite) and the stream; nothing here allocates except through the
caller's ``empty_f32``. Inputs are only read. ``cutile_rms.tune`` is the torch front end that
allocates the arrays, records the winners in the per-device cache and writes tables.

What is searched (named so the search space reads as one table):

- forward: one tile per row (``tile``) with tile_m rows (one-row tiles also on a grid of one
  block a tile), and the chunked kernel with tile_m rows x tile_n-column chunks; each at every
  occupancy hint, with and without TMA stores, and the fastest few again with a load latency
  hint; few rows search the same space;
- backward: the same two kinds; the chunked one runs the row-dot kernel first, so its time is
  its own plus the best row-dot config's, which is recorded as ``backward_dot``;
- both: the kinds a single launch cannot time (``graph_candidates``): the split kernels, whose
  blocks exchange their sums through slots that must start at zero at every launch, and the
  packed 16-bit backward, which reads int32 word views. ``cutile_rms.tune`` times them by graph
  replay through the launchers beside the runners-up of the search (session 53: before, 15 of the 72
  entries of tuned/sm_90.json were configs the tuner could not produce).

exhaustive_search flushes L2 before every sample and samples each candidate until its mean is
known within 1% (or 0.5 us); candidates that fail to compile or launch are skipped.
"""

import dataclasses
from dataclasses import dataclass

import cuda.tile as ct

from cutile_rms.rmsnorm import config as C
from cutile_rms.rmsnorm import launch as L
from cutile_rms.rmsnorm import signatures as S

__all__ = [
    "Result",
    "backward_candidates",
    "forward_candidates",
    "graph_candidates",
    "row_dot_candidates",
    "tune_backward",
    "tune_forward",
]

TILE_M_CHOICES = (1, 2, 4, 8, 16, 32, 64)
# Largest tile (tile_m x tile_n elements) searched for the one-tile kernels. The first sweep
# (cutile-facts.md) found nothing better above 32 x 512 = 16384 elements, forward or backward.
MAX_TILE_ELEMS = 16384
# Rows of one tile are searched up to these lengths (tile_m = 1 only above MAX_TILE_ELEMS): a
# (1, 32768) forward tile keeps a long row on chip for a single pass over memory; the backward
# holds x, dy and the dW accumulator, so it stops at half that. (Twice these did not finish
# compiling within minutes on the H200 host.)
MAX_ROW_TILE_N = {"forward": 32768, "backward": 16384}
CHUNK_CHOICES = (1024, 2048, 4096, 8192, 16384)
CHUNK_TILE_M_CHOICES = (1, 2, 4)
CHUNK_OCCUPANCIES = (1, 2, 4)
# Worker warps: the compiler's choice, or 8 (num_worker_warps; its documentation names large
# normalization tiles as the case where more warps relieve register pressure). Only tiles of at
# least this many elements try 8: smaller ones hold few registers per thread anyway.
WARPS_CHOICES = (None, 8)
# Forward tiles of MIN_TILE_ELEMS_FOR_WARPS to FOUR_WARPS_MAX_ELEMS elements also try 4 warps: the
# checked-in table's forward tiles of 2 x 4096, 1 x 8192 and 8 x 512 / 2 x 2048 fp32 run on 4.
FOUR_WARPS_MAX_ELEMS = 8192
MIN_TILE_ELEMS_FOR_WARPS = 4096
# Every candidate is timed with TMA stores allowed and forbidden (one-row tiles gained 7-9% of
# the copy ceiling without them, multi-row tiles lost 2-5%: bench/NOTES.md). Then the
# LATENCY_TOP_K fastest are timed again with each load latency hint of LATENCY_CHOICES: the hint
# moved a few shapes by up to 5% either way, too rarely to multiply the whole space by it.
TMA_STORE_CHOICES = (True, False)
LATENCY_CHOICES = (1,)
LATENCY_TOP_K = 4


@dataclass(frozen=True)
class Result:
    """The winner of one search: table op ("forward", "backward" or "backward_dot", with the
    few-rows suffix when m <= config.FEW_ROWS), the table key (the row bucket,
    config.bucket: tables hold no exact row lengths),
    element size, config, its mean time in us, the M it was timed at, how many candidates
    were timed / failed, and the RUNNERS_UP fastest (config, us) pairs, best first, for a
    second timing by the caller (cutile_rms.tune re-times them by CUDA-graph replay, with the
    graph-timed kinds, and keeps all it timed there, best first)."""

    op: str
    bucket: int
    elem_size: int
    config: C.KernelConfig
    us: float
    m: int
    timed: int
    failed: int
    ranked: tuple = ()

    def entry(self) -> dict:
        """The tuning-table entry (tables.py format)."""
        c = self.config
        return {
            "op": self.op, "elem_size": self.elem_size, "bucket": self.bucket, "kernel": c.kernel,
            "tile_m": c.tile_m, "tile_n": c.tile_n, "blocks_per_sm": c.blocks_per_sm, "warps": c.warps,
            "tma_store": c.tma_store, "latency": c.latency, "us": round(self.us, 2), "m": self.m,
            **({"tail": c.tail} if c.tail else {}), **({} if c.schedule == "stride" else {"schedule": c.schedule}),
        }  # fmt: skip


def _tile_candidates(op: str, n: int) -> list:
    """One tile a row; one-row forward tiles also on a grid of one block a tile ("per_tile": the
    table's fp32 1024 and 4096 entries)."""
    tile_n = max(16, C.next_pow2(n))
    if tile_n > MAX_ROW_TILE_N[op]:
        return []
    out = []
    for tm in TILE_M_CHOICES:
        if tm == 1 or tm * tile_n <= MAX_TILE_ELEMS:
            schedules = C.SCHEDULES if op == "forward" and tm == 1 else ("stride",)
            elems = tm * tile_n
            four = op == "forward" and MIN_TILE_ELEMS_FOR_WARPS <= elems <= FOUR_WARPS_MAX_ELEMS
            out += [
                C.tile(tm, tile_n, occ, w, tma_store=ts, schedule=sc)
                for occ in C.OCCUPANCIES for w in _warps(elems) + ((4,) if four else ())
                for ts in TMA_STORE_CHOICES for sc in schedules
            ]  # fmt: skip
    return out


def _warps(tile_elems: int):
    return WARPS_CHOICES if tile_elems >= MIN_TILE_ELEMS_FOR_WARPS else (None,)


def _chunked_candidates(n: int, tma_stores=TMA_STORE_CHOICES) -> list:
    """Chunks narrower than the row (a chunk as wide as the row is the one-tile kernel's job)."""
    out = []
    for chunk in CHUNK_CHOICES:
        if chunk < C.next_pow2(n):
            for tm in CHUNK_TILE_M_CHOICES:
                if tm * chunk <= MAX_TILE_ELEMS:
                    out += [
                        C.chunked(tm, chunk, occ, w, tma_store=ts)
                        for occ in CHUNK_OCCUPANCIES for w in _warps(tm * chunk) for ts in tma_stores
                    ]  # fmt: skip
    return out


def forward_candidates(n: int, m: int | None = None) -> list:
    """The forward search space for rows of n elements (m of them, if known; the same space)."""
    return _tile_candidates("forward", n) + _chunked_candidates(n)


def backward_candidates(n: int) -> list:
    return _tile_candidates("backward", n) + _chunked_candidates(n)


# The split kernels (graph_candidates): segments of CHUNK_CHOICES that give 2 to config.MAX_SPLIT
# blocks a row, one row a tile (the table's), at SPLIT_OCCUPANCIES blocks an SM of SPLIT_WARPS warps.
SPLIT_OCCUPANCIES = (1, 2)
SPLIT_WARPS = (4, 8)
# The packed 16-bit backward (graph_candidates): rows padded to PACKED_MIN_TILE_N or more (the
# table's 4096-16384 buckets; packed-probe logs of sessions 6 and 7), the one-tile kernel's tiles at
# PACKED_OCCUPANCIES blocks of 8 warps (every packed entry of the table).
PACKED_MIN_TILE_N = 4096
PACKED_OCCUPANCIES = (1, 2)
PACKED_WARPS = 8


def split_candidates(n: int) -> list:
    """The split kernels' configs for rows of n elements (forward and backward)."""
    return [
        C.split(1, seg, occ, w)
        for seg in CHUNK_CHOICES if 2 <= C.split_count(n, seg) <= C.MAX_SPLIT
        for occ in SPLIT_OCCUPANCIES for w in SPLIT_WARPS
    ]  # fmt: skip


def packed_candidates(n: int) -> list:
    """The packed 16-bit backward's configs for rows of n elements: the one-tile kernel's tiles
    (``backward_candidates``) of PACKED_MIN_TILE_N or more at PACKED_OCCUPANCIES of PACKED_WARPS."""
    return [
        dataclasses.replace(c, kernel="packed")
        for c in _tile_candidates("backward", n)
        if c.tile_n >= PACKED_MIN_TILE_N and c.blocks_per_sm in PACKED_OCCUPANCIES and c.warps == PACKED_WARPS
    ]


def graph_candidates(op: str, n: int, elem_size: int) -> list:
    """The configs of op ("forward" or "backward") for rows of n elem_size-byte elements that
    only graph replay times (see the module doc): split (the forward of 16-bit rows only where
    the planner takes it: a multiple of config.SPLIT_VECTOR_ELEMS), and the packed backward of
    even 16-bit rows (word views). The backward's split configs are seeds: the planner narrows
    them (config.narrow_split), and the caller times what it would run."""
    split = op == "backward" or elem_size == 4 or n % C.SPLIT_VECTOR_ELEMS == 0
    packed = op == "backward" and elem_size == 2 and n % 2 == 0
    return (split_candidates(n) if split else []) + (packed_candidates(n) if packed else [])


def row_dot_candidates(n: int) -> list:
    """The row-dot kernel stores only c per row: the memory knobs do not apply to it."""
    return _chunked_candidates(n, (True,)) or [C.chunked(1, max(16, C.next_pow2(n)), 1)]


def _search(configs, stream, grid_fn, kernel_fn, args_fn, refine=False):
    """{config: mean us} of every candidate that ran, and the number that failed. With refine,
    the LATENCY_TOP_K fastest are also timed with each of LATENCY_CHOICES."""
    res = ct.tune.exhaustive_search(list(configs), stream, grid_fn, kernel_fn, args_fn, quiet=True)
    times, failed = {m.config: m.mean_us for m in res.successes}, len(res.failures)
    if refine and times:
        top = sorted(times, key=times.get)[:LATENCY_TOP_K]
        more = [dataclasses.replace(c, latency=lat) for c in top for lat in LATENCY_CHOICES if c.latency is None]
        t, f = _search(more, stream, grid_fn, kernel_fn, args_fn)
        times.update(t)
        failed += f
    return times, failed


def _best(times: dict):
    cfg = min(times, key=times.get)
    return cfg, times[cfg]


# How many of a search's fastest candidates a Result keeps (see Result.ranked).
RUNNERS_UP = 6


def _ranked(times: dict) -> tuple:
    return tuple((c, times[c]) for c in sorted(times, key=times.get)[:RUNNERS_UP])


def tune_forward(x, w, y, rstd, eps, offset, casting, device, stream, candidates=None) -> Result:
    """Search the forward configs for x's row length (rstd stored: the training forward; the
    inference forward shares the winner). Overwrites y and rstd."""
    m, n = x.shape
    num_sms = device.num_sms

    def plan(cfg):
        return C.forward_plan_from(cfg, m, num_sms, "persistent", n)

    def args(cfg):
        return L.forward_args(plan(cfg), x, w, y, rstd, eps, offset, casting)

    times, failed = _search(
        candidates or forward_candidates(n, m), stream, lambda cfg: (plan(cfg).grid,),
        lambda cfg: L.forward_kernel(cfg.kernel, cfg.hints, True), args, refine=candidates is None,
    )  # fmt: skip
    cfg, us = _best(times)
    return Result(C.table_op("forward", m), C.bucket(n), x.dtype.itemsize, cfg, us, m, len(times), failed,
                  _ranked(times))  # fmt: skip


def tune_backward(x, dy, w, rstd, dx, offset, casting, empty_f32, device, stream, candidates=None) -> list:
    """Search the backward configs for x's row length; returns the "backward" winner and, when
    chunked candidates ran, the best "backward_dot" config. Overwrites dx. The dW reduction
    is not timed (config.reduce_tiles plans it from the grid and N: 3-7 us at the partials
    measured in session 36)."""
    m, n = x.shape
    num_sms = device.num_sms
    has_weight = w is not None
    refine = candidates is None
    candidates = candidates or backward_candidates(n)
    partial = empty_f32((num_sms * max(C.OCCUPANCIES), n)) if has_weight else None
    row_dot = empty_f32((m,))
    elem = x.dtype.itemsize
    results = []

    def plan(cfg):  # a row-dot config plans as a forward one does: same rows per tile and grid
        return C.backward_plan_from(cfg, cfg, m, n, num_sms)

    def values(cfg):
        return L.backward_values(plan(cfg), x, dy, w, rstd, dx, None, partial, row_dot, offset, casting)

    def tile_args(cfg):
        return S.arguments("rms_bwd_tile", values(cfg))

    def dot_args(cfg):
        p = plan(cfg)
        return S.arguments("rms_bwd_row_dot", dict(values(cfg), TILE_M=p.dot_tile_m, TILE_N=cfg.tile_n))

    def chunk_args(cfg):
        return S.arguments("rms_bwd_chunked", dict(values(cfg), TILE_M=cfg.tile_m, TILE_N=cfg.tile_n))

    times, failed = {}, 0
    tiles = [c for c in candidates if c.kernel == "tile"]
    if tiles:
        t, failed = _search(
            tiles, stream, lambda cfg: (plan(cfg).partial_rows,),
            lambda cfg: L.backward_kernel("tile", cfg.hints), tile_args, refine,
        )  # fmt: skip
        times.update(t)
    chunks = [c for c in candidates if c.kernel == "chunked"]
    if chunks:
        dot_times, f = _search(
            row_dot_candidates(n), stream, lambda cfg: (plan(cfg).dot_grid,),
            lambda cfg: L.backward_kernel("row_dot", cfg.hints), dot_args,
        )  # fmt: skip
        dot_cfg, dot_us = _best(dot_times)
        results.append(Result(C.table_op("backward_dot", m), C.bucket(n), elem, dot_cfg, dot_us, m, len(dot_times), f))
        t, f2 = _search(
            chunks, stream, lambda cfg: (plan(cfg).partial_rows, plan(cfg).num_chunks),
            lambda cfg: L.backward_kernel("chunked", cfg.hints), chunk_args, refine,
        )  # fmt: skip
        times.update({cfg: us + dot_us for cfg, us in t.items()})
        failed += f + f2
    cfg, us = _best(times)
    results.insert(0, Result(C.table_op("backward", m), C.bucket(n), elem, cfg, us, m, len(times), failed,
                             _ranked(times)))  # fmt: skip
    return results
