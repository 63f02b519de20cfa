"""Ahead-of-time compilation of the kernel specializations the dispatcher can pick.

tileiras runs on the host, so this needs no GPU. Array constraints are the ones the JIT derives
at launch for aligned rows (a 16-byte aligned base, row strides divisible by 16 bytes, a row
length divisible by 16: every real model's hidden size): those compile to other code than
constraints without divisibility (TMA and 128-bit loads instead of 16-bit ones, bench/NOTES.md,
session 11). Coverage, for each architecture:
- every (kernel, tile shape, occupancy hint) that the defaults and that architecture's shipped
  table can plan (sm_90: the H200 table; other architectures plan with the defaults only),
  compiled for the element size(s) it is planned for (a 16-bit entry as bf16, an fp32 one as
  fp32) with the training flags (llama casting, weight of x's dtype, rstd stored);
- every value of every compile-time flag (casting mode, weight dtype or no weight, rstd store,
  rounded xhat, bounds checks), in a pairwise covering set of combinations at one
  representative config per kernel, for each input dtype;
- each kernel once with the constraints of unaligned rows (no divisibility: a row length that is
  not a multiple of 8).
Architectures other than FULL_ARCH (FULL_ARCH is sm_90; the other is sm_100) compile one job of
each stratum of that set: each kernel variant (a kernel at its hints) with each set of parameter
kinds, array element dtypes and alignment, once; the other flag values and tile shapes only on
FULL_ARCH. What the second
architecture checks is that tileiras lowers each kernel's code for it. On this project's 2-core
machine (`CUDA_TILE_CACHE_DIR=off python -m tests.aot sm_100`, session 43) the 380 strata of
sm_100's 792 jobs compile in 261 s; the whole check took 919 s with all of them (session 42).
The full cross product of these (thousands of compiles per architecture) would add no new code
paths: the flags select code, the tile shape only sizes it.
"""

import dataclasses
import functools
import itertools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import cuda.tile as ct
from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, ScalarConstraint, export_kernel

from bench.probes.sass import static as static_rows
from cutile_rms._tile import python_function
from cutile_rms.experimental.fused_add import launch as FL
from cutile_rms.rmsnorm import config as C
from cutile_rms.rmsnorm import kernels as K
from cutile_rms.rmsnorm import launch as L
from cutile_rms.rmsnorm import signatures as S

DTYPES = {"bfloat16": ct.bfloat16, "float16": ct.float16, "float32": ct.float32}  # input dtypes
ARRAY_DTYPES = {
    **DTYPES,
    "int64": ct.int64,
    "int32": ct.int32,  # the split slots, the packed words
    "float8_e4m3fn": ct.float8_e4m3fn,
    "float8_e5m2": ct.float8_e5m2,
}  # FP8 outputs
F32 = ScalarConstraint(ct.float32)
I32 = ScalarConstraint(ct.int32)


ELEMENT_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "int32": 4,
    "int64": 8,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}

# The architecture of the shipped table (tuned/sm_90.json): every job compiles for it.
FULL_ARCH = "sm_90"

# Set by unaligned() around the jobs of unaligned rows (one module-level switch, read by arr()).
_ALIGNED = [True]


def arr(dtype_name: str, ndim: int, last_div: int = 16) -> ArrayConstraint:
    """What the JIT derives for an array of rows: a 16-byte aligned base and leading strides,
    unit last stride, the last dim divisible by last_div (16 for a row length or an n-vector;
    1 for an m-vector such as rstd, or a workspace of any width), leading dims of any size. In
    unaligned() (rows not a multiple of 8 long) there is no divisibility at all."""
    unit = 16 // ELEMENT_BYTES[dtype_name]
    if not _ALIGNED[0]:
        return ArrayConstraint(
            ARRAY_DTYPES[dtype_name], ndim, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=[],
            may_alias_internally=False, stride_constant=[None] * (ndim - 1) + [1],
        )  # fmt: skip
    return ArrayConstraint(
        ARRAY_DTYPES[dtype_name], ndim, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=[],
        may_alias_internally=False, stride_constant=[None] * (ndim - 1) + [1],
        stride_divisible_by=[unit] * (ndim - 1) + [1], shape_divisible_by=[1] * (ndim - 1) + [last_div],
        base_addr_divisible_by=16,
    )  # fmt: skip


def mvec(dtype_name: str = "float32") -> ArrayConstraint:
    """An m-long vector (rstd, the row dots) or a one-word workspace: no length divisibility."""
    return arr(dtype_name, 1, last_div=1)


def pairwise(*factors) -> list[tuple]:
    """A small set of combinations of the factors' values that holds every pair of values of
    every two factors (greedy covering array; every value of every factor appears)."""
    factors = [list(f) for f in factors]
    all_rows = list(itertools.product(*factors))
    uncovered = {(i, a, j, b) for i, j in itertools.combinations(range(len(factors)), 2)
                 for a in factors[i] for b in factors[j]}  # fmt: skip

    def pairs(row):
        return {(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(row)), 2)}

    chosen = [all_rows[0]] if all_rows else []
    uncovered -= pairs(all_rows[0]) if all_rows else set()
    while uncovered:
        best = max(all_rows, key=lambda r: len(pairs(r) & uncovered))
        chosen.append(best)
        uncovered -= pairs(best)
    return chosen


def _castings(x: str):
    return [K.CAST_GEMMA] if x == "float32" else [K.CAST_LLAMA, K.CAST_GEMMA, K.CAST_NONE]


def _row_castings(x: str):
    """_castings and the row-tile forward's native llama (launch.forward_casting) for 16-bit x."""
    return _castings(x) + ([] if x == "float32" else [K.CAST_LLAMA_NATIVE])


# The kernels' memory constants (TMA_STORE, LATENCY) of a config without memory knobs set.
NO_MEMORY_KNOBS = C.tile(1, 16, 1).memory


def _arrays(x, w) -> dict:
    """The constraints of the core kernels' arrays by parameter name (signatures.PARAMS) for
    input dtype x and weight dtype w (None: absent, replaced by x at launch, so it takes x's
    constraint, as does an absent dW workspace)."""
    rows = arr(x, 2)
    return dict(x=rows, y=rows, dy=rows, dx=rows, w=arr(w, 1) if w else rows, rstd_out=mvec(), rstd_in=mvec(),
                c_out=mvec(), c_in=mvec(), dw_partial=arr("float32", 2) if w else rows, slots=arr("int64", 2, 1),
                eps=F32, offset=F32)  # fmt: skip


def _memory(memory) -> dict:
    return dict(TMA_STORE=memory[0], LATENCY=memory[1])


def _fwd_params(x, w, tile_m, tile_n, casting, store_rstd, memory=NO_MEMORY_KNOBS, tail=None):
    # The tile kernels take a TAIL (tail: an int), the chunked ones do not (tail None).
    values = dict(_arrays(x, w), TILE_M=tile_m, TILE_N=tile_n, TAIL=tail, CASTING=casting, HAS_WEIGHT=w is not None,
                  **_memory(memory))  # fmt: skip
    return list(S.arguments(S.FORWARD["chunked" if tail is None else "tile", store_rstd], values))


def _bwd_values(x, w, tile_m, tile_n, round_xhat, memory) -> dict:
    return dict(_arrays(x, w), TILE_M=tile_m, TILE_N=tile_n, HAS_WEIGHT=w is not None, ROUND_XHAT=round_xhat,
                **_memory(memory))  # fmt: skip


def _bwd_tile_params(x, w, tile_m, tile_n, round_xhat, memory=NO_MEMORY_KNOBS):
    return list(S.arguments("rms_bwd_tile", _bwd_values(x, w, tile_m, tile_n, round_xhat, memory)))


def _split(splits) -> dict:
    return dict(SPLIT=splits, SLOTS_W=C.next_pow2(splits), POLLS=K.SPIN_LIMIT)


def _fwd_split_params(x, w, tile_m, tile_n, splits, casting, store_rstd, memory=NO_MEMORY_KNOBS):
    values = dict(_arrays(x, w), TILE_M=tile_m, TILE_N=tile_n, CASTING=casting, HAS_WEIGHT=w is not None,
                  **_split(splits), **_memory(memory))  # fmt: skip
    return list(S.arguments(S.FORWARD["split", store_rstd], values))


def _bwd_split_params(x, w, tile_m, tile_n, splits, round_xhat, memory=NO_MEMORY_KNOBS):
    return list(S.arguments("rms_bwd_split", dict(_bwd_values(x, w, tile_m, tile_n, round_xhat, memory),
                                                  **_split(splits))))  # fmt: skip


def _bwd_packed_params(x, w, tile_m, tile_n, round_xhat, memory=NO_MEMORY_KNOBS, tail=0):
    # x, dy, w, dx arrive as int32 word views; the weight shares x's 16-bit type or is absent.
    words = arr("int32", 2)
    values = dict(_bwd_values(x, w, tile_m, tile_n, round_xhat, memory), x=words, dy=words, dx=words,
                  w=arr("int32", 1) if w else words, dw_partial=arr("float32", 3) if w else words,
                  TILE_W=tile_n // 2, TAIL_W=tail // 2, HALF=_half(x))  # fmt: skip
    return list(S.arguments("rms_bwd_packed", values))


def _reduce_params(partial, dw, half=None, tiles=(C.REDUCE_TILE_G, C.REDUCE_TILE_N)):
    """dw_reduce's (half None) or dw_reduce_packed's parameters (widths in words) at (TILE_G, TILE_N)."""
    values = dict(dw_partial=partial, dw=dw, TILE_G=tiles[0], TILE_N=tiles[1], TILE_W=tiles[1] // 2,
                  HALF=half)  # fmt: skip
    return list(S.arguments("dw_reduce" if half is None else "dw_reduce_packed", values))


def _half(x):
    return K.HALF_BF16 if x == "bfloat16" else K.HALF_FP16


def _bwd_dot_params(x, w, tile_m, tile_n):
    return list(S.arguments("rms_bwd_row_dot", _bwd_values(x, w, tile_m, tile_n, False, NO_MEMORY_KNOBS)))


def _bwd_chunk_params(x, w, tile_m, tile_n, round_xhat, memory=NO_MEMORY_KNOBS):
    return list(S.arguments("rms_bwd_chunked", _bwd_values(x, w, tile_m, tile_n, round_xhat, memory)))


def _key(cfg):
    return (cfg.kernel, cfg.tile_n, cfg.tile_m, cfg.blocks_per_sm, repr(cfg.warps), cfg.memory)


# The representative configs the flag combinations compile at (the defaults' 4096 entries).
REP_FWD = C.DEFAULT_TABLE["forward"][4096]
REP_BWD = C.DEFAULT_TABLE["backward"][4096]
REP_CHUNK = C.GATHER
REP_SPLIT = C.split(1, 1024, 1, 8)
REP_PACKED = C.packed(1, 4096, 1, 8)
REP_TAIL = 1024  # a tail beside REP_FWD's and REP_PACKED's 4096-wide tiles
# Blocks per row the split kernels are compiled for at every planned split config (a table
# entry's bucket sets it: 2 for 16384-wide rows in 8192 segments, 8 for 65536; 16 for the
# backward's narrowest widths, config.narrow_split: 2048 x 16 at 32768, 4096 x 16 at 65536), and the
# odd count compiled once at REP_SPLIT with every flag (a row that is not a multiple of the segment).
SPLIT_COUNTS = (2, 4, 8, 16)
ODD_SPLIT = 3


def _dtypes_of(sizes) -> list[str]:
    """The input dtypes a config planned for these element sizes is compiled as: a 16-bit entry
    as bf16 (fp16 differs only in its conversions, which the flag jobs compile at every kernel),
    an fp32 one as fp32."""
    return [x for x, size in (("bfloat16", 2), ("float32", 4)) if size in sizes]


def _planned_jobs(add, arch):
    """Every config the defaults and arch's shipped table can plan, with the training flags."""
    planned = C.planned_configs(arch)
    for cfg, sizes in sorted(planned["forward"].items(), key=lambda kv: _key(kv[0])):
        kernel = L.forward_kernel(cfg.kernel, cfg.hints, True)
        for x in _dtypes_of(sizes):
            if cfg.kernel == "split":
                for splits in SPLIT_COUNTS:
                    params = _fwd_split_params(x, x, cfg.tile_m, cfg.tile_n, splits, K.CAST_LLAMA, True, cfg.memory)
                    add(f"fwd {x} {cfg} split={splits}", kernel, params)
            else:
                add(f"fwd {x} {cfg}", kernel,
                    _fwd_params(x, x, cfg.tile_m, cfg.tile_n, K.CAST_LLAMA, True, cfg.memory,
                                cfg.tail if cfg.kernel == "tile" else None))  # fmt: skip
    for cfg, sizes in sorted(planned["backward"].items(), key=lambda kv: _key(kv[0])):
        for x in _dtypes_of(sizes):
            c = cfg
            if c.kernel == "split":
                for splits in SPLIT_COUNTS:
                    params = _bwd_split_params(x, x, c.tile_m, c.tile_n, splits, x != "float32", c.memory)
                    add(f"bwd {x} {c} split={splits}", L.backward_kernel("split", c.hints), params)
                continue
            if c.kernel == "packed":
                if x != "float32":
                    add(f"bwd {x} {c}", L.backward_kernel("packed", c.hints),
                        _bwd_packed_params(x, x, c.tile_m, c.tile_n, True, c.memory, c.tail))  # fmt: skip
                # what runs where no word views can be made (config.kernel_config; a tail is dropped)
                c = C.fit_to_row(dataclasses.replace(c, kernel="tile"), c.tile_n + c.tail, "backward")
            if c.kernel == "tile":
                params = _bwd_tile_params(x, x, c.tile_m, c.tile_n, x != "float32", c.memory)
            else:
                params = _bwd_chunk_params(x, x, c.tile_m, c.tile_n, x != "float32", c.memory)
            add(f"bwd {x} {c}", L.backward_kernel(c.kernel, c.hints), params)
    for cfg, sizes in sorted(planned["backward_dot"].items(), key=lambda kv: _key(kv[0])):
        for x in _dtypes_of(sizes):
            add(f"bwd_row_dot {x} {cfg}", L.backward_kernel("row_dot", cfg.hints),
                _bwd_dot_params(x, x, cfg.tile_m, cfg.tile_n))  # fmt: skip


def _flag_jobs(add, x):
    """Every value of every flag, pairwise, at one representative config per kernel (dtype x)."""
    weights = [x, "float32" if x != "float32" else "bfloat16", None]
    f, b, ch, sp, pk = REP_FWD, REP_BWD, REP_CHUNK, REP_SPLIT, REP_PACKED
    for w, casting, store in pairwise(weights, _castings(x), (True, False)):
        tag = f"{x} w={w} cast={casting} rstd={store}"
        for tail in (0, REP_TAIL):
            add(f"fwd_tile {tag} tail={tail}", L.forward_kernel("tile", f.hints, store),
                _fwd_params(x, w, f.tile_m, f.tile_n, casting, store, tail=tail))  # fmt: skip
        add(f"fwd_chunked {tag}", L.forward_kernel("chunked", ch.hints, store),
            _fwd_params(x, w, ch.tile_m, ch.tile_n, casting, store))  # fmt: skip
        add(f"fwd_split {tag}", L.forward_kernel("split", sp.hints, store),
            _fwd_split_params(x, w, sp.tile_m, sp.tile_n, ODD_SPLIT, casting, store, sp.memory))  # fmt: skip
    for w in weights:
        for round_xhat in (False,) if w is None or x == "float32" else (False, True):
            tag = f"{x} w={w} round={round_xhat}"
            add(f"bwd_tile {tag}", L.backward_kernel("tile", b.hints), _bwd_tile_params(x, w, b.tile_m, b.tile_n,
                                                                                         round_xhat))  # fmt: skip
            add(f"bwd_chunked {tag}", L.backward_kernel("chunked", ch.hints),
                _bwd_chunk_params(x, w, ch.tile_m, ch.tile_n, round_xhat))  # fmt: skip
            add(f"bwd_split {tag}", L.backward_kernel("split", sp.hints),
                _bwd_split_params(x, w, sp.tile_m, sp.tile_n, ODD_SPLIT, round_xhat, sp.memory))  # fmt: skip
        add(f"bwd_row_dot {x} w={w}", L.backward_kernel("row_dot", ch.hints),
            _bwd_dot_params(x, w, ch.tile_m, ch.tile_n))  # fmt: skip
        if w is not None:  # every (TILE_G, TILE_N) that config.reduce_tiles gives
            for tiles in C.reduce_tile_pairs():
                add(f"dw_reduce {x} w={w} tiles={tiles}", K.dw_reduce, _reduce_params(arr("float32", 2), arr(w, 1),
                                                                                       tiles=tiles))  # fmt: skip
    if x != "float32":  # the packed kernels take 16-bit words only (a weight of x's dtype, or none)
        add(f"dw_reduce_packed {x}", K.dw_reduce_packed, _reduce_params(arr("float32", 3), arr("int32", 1), _half(x)))
        for (w, round_xhat), tail in pairwise(((x, False), (x, True), (None, False)), (0, REP_TAIL)):
            add(f"bwd_packed {x} w={w} round={round_xhat} tail={tail}", L.backward_kernel("packed", pk.hints),
                _bwd_packed_params(x, w, pk.tile_m, pk.tile_n, round_xhat, pk.memory, tail))  # fmt: skip


def _unaligned_jobs(add):
    """Each kernel once with the constraints of rows that are not a multiple of 8 elements long."""
    _ALIGNED[0] = False
    try:
        x, f, b, ch, sp = "bfloat16", REP_FWD, REP_BWD, REP_CHUNK, REP_SPLIT
        for store in (True, False):
            add(f"unaligned fwd_tile rstd={store}", L.forward_kernel("tile", f.hints, store),
                _fwd_params(x, x, f.tile_m, f.tile_n, K.CAST_LLAMA, store, tail=0))  # fmt: skip
            add(f"unaligned fwd_chunked rstd={store}", L.forward_kernel("chunked", ch.hints, store),
                _fwd_params(x, x, ch.tile_m, ch.tile_n, K.CAST_LLAMA, store))  # fmt: skip
            add(f"unaligned fwd_split rstd={store}", L.forward_kernel("split", sp.hints, store),
                _fwd_split_params(x, x, sp.tile_m, sp.tile_n, ODD_SPLIT, K.CAST_LLAMA, store, sp.memory))  # fmt: skip
        add("unaligned bwd_tile", L.backward_kernel("tile", b.hints), _bwd_tile_params(x, x, b.tile_m, b.tile_n, True))
        add("unaligned bwd_chunked", L.backward_kernel("chunked", ch.hints),
            _bwd_chunk_params(x, x, ch.tile_m, ch.tile_n, True))  # fmt: skip
        add(
            "unaligned bwd_row_dot", L.backward_kernel("row_dot", ch.hints), _bwd_dot_params(x, x, ch.tile_m, ch.tile_n)
        )
        add("unaligned bwd_split", L.backward_kernel("split", sp.hints),
            _bwd_split_params(x, x, sp.tile_m, sp.tile_n, ODD_SPLIT, True, sp.memory))  # fmt: skip
        for tiles in C.reduce_tile_pairs():
            add(f"unaligned dw_reduce tiles={tiles}", K.dw_reduce, _reduce_params(arr("float32", 2), arr(x, 1),
                                                                                  tiles=tiles))  # fmt: skip
    finally:
        _ALIGNED[0] = True


# Row lengths whose row-tile plans the compile check covers: the powers of two the kernels plan
# (one piece), lengths of two and three pieces, one padded piece in multi-row tiles (1536,
# 3584), and a padded last piece (fp32 3000).
ROWS_N = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 1536, 3072, 3584, 5376, 6144, 14336, 18432, 3000, 96, 320)


def _rows_arrays(x, w, b_one: bool, names, res=None, n=None, width=None, direct=False) -> dict:
    """Constraints of the row-tile kernels' arrays: (A, B, N) rows (B == 1: a 2-D input, which
    the JIT specializes on), (A, B) rstd, (N,) weight, (grid, N) fp32 dW partials (grid, width
    for the lanes kernels; direct: dW itself as (1, N) of the weight's dtype, a one-block grid's,
    rows.launch.run_backward); the residual and the sum in res's dtype (x's without a residual:
    placeholders). With n: the static layouts of kernels.RowArray and RowVector (the rows of a
    2-D input, B == 1, or of a fused QKV view of 3 x 6 heads)."""
    strides = None if n is None else (n, n, 1) if b_one else (18 * n, n, 1)

    def rows(dtype=x):
        c = arr(dtype, 3)
        if b_one and _ALIGNED[0]:
            c = dataclasses.replace(c, shape_constant=(None, 1, None))
        return c if n is None else static_rows(c, n, strides)

    def vec(c, last):
        return c if n is None else static_rows(c, last)

    rstd = arr("float32", 2, last_div=1)
    if b_one:
        rstd = dataclasses.replace(rstd, shape_constant=(None, 1))
    wa = vec(arr(w, 1), n) if w else rows()
    partial = vec(arr("float32", 2), width or n) if w else rows()
    if direct and w:
        partial = vec(dataclasses.replace(arr(w, 2), shape_constant=(1, None)), n)
    table = {"x": rows(), "r": rows(res or x), "s_out": rows(res or x), "y": rows(), "dy": rows(), "dx": rows(),
             "w": wa, "rstd_out": rstd, "rstd_in": rstd, "dw_partial": partial, "eps": F32, "offset": F32}  # fmt: skip
    return {k: table[k] for k in names}


def _rows_job(add, label, op, p, n, x, w, casting=K.CAST_LLAMA, store=True, b_one=True, res=None,
              residual=K.RESIDUAL_NONE, direct=False):  # fmt: skip
    """The row-tile kernel of plan p for rows of n (static or runtime layouts, as p says)."""
    from cutile_rms.rows import launch as RL

    _, names = RL.KERNELS[op]
    consts = RL.constants(p, K.CAST_GEMMA if x == "float32" else casting, w is not None, store, residual)
    arrays = _rows_arrays(x, w, b_one, [k for k in names if k not in consts], res, n if p.static else None,
                          direct=direct)  # fmt: skip
    values = {**arrays, **consts}
    add(f"rows {op} {label} n={n} {x} w={w} cast={casting} rstd={store} b_one={b_one} res={res}:{residual} "
        f"direct={direct} {p}", RL._VARIANTS[op, p.static][p.hints], [values[k] for k in names])  # fmt: skip


def _rows_jobs(add):
    """The row-tile kernels (the default forward and short-row backward): the plan of every
    ROWS_N (bf16 and fp32, 2-D inputs), with the training flags, and the forward's tiles of few
    rows; a one-block backward's direct dW; every flag value pairwise at one plan; a head view
    (B > 1); and each kernel once for unaligned rows."""
    from cutile_rms.rows import kernels as RK
    from cutile_rms.rows.plan import plan

    for x, es in (("bfloat16", 2), ("float32", 4)):
        for n in ROWS_N:
            for op in ("forward", "backward"):
                p = plan(op, 4099, 1, n, es, 132, long=False)  # row tiles (long rows: _long_jobs)
                if p is not None:  # (the torch API's casting: native llama forward, launch.forward_casting)
                    native = op == "forward" and x != "float32"
                    _rows_job(add, "plan", op, p, n, x, x, K.CAST_LLAMA_NATIVE if native else K.CAST_LLAMA)
    # few rows: the forward's tiles of fewer rows (plan.FILL_TILES_PER_SM), each such tile (and its
    # row check at an odd row count) with and without rstd, 16-bit as bf16 and fp16
    for x, es in (("bfloat16", 2), ("float16", 2), ("float32", 4)):
        for n in ROWS_N:
            base = plan("forward", 4099, 1, n, es, 132, long=False)
            few = {plan("forward", 2**k + odd, 1, n, es, 132, long=False) for k in range(12) for odd in (0, 1)}
            for p in sorted((p for p in few - {None} if p.tile_a != base.tile_a), key=repr):
                native = K.CAST_LLAMA_NATIVE if x != "float32" else K.CAST_LLAMA
                for store in (True, False):
                    _rows_job(add, "few rows", "forward", p, n, x, x, native, store)
    # many tiles (plan.many_tiles): a block a tile without the loop, a length of each kind of row it
    # takes (plain 16-byte rows of two pieces on runtime layouts; gathered static rows: odd, 2 mod 4,
    # 4 mod 8 on 8 warps, 8 mod 16; one 8192 or 16384 piece and three pieces on 8 warps), with and
    # without rstd in bf16, with it in fp16
    for n in (5120, 5376, 4441, 4642, 4804, 4392, 7469, 10563, 14601):
        p = plan("forward", 100000, 1, n, 2, 132, long=False)
        assert not p.loop and p.grid == 100000, p
        for x, store in (("bfloat16", True), ("bfloat16", False), ("float16", True)):
            _rows_job(add, "many tiles", "forward", p, n, x, x, K.CAST_LLAMA_NATIVE, store)
    # lone tiles (plan.lone_tiles): a block a tile without the loop for one-row tiles that leave one
    # block an SM: 16-bit 16384 (with and without rstd in bf16, with it in fp16), fp32 16384 + a piece
    for n, xs in ((16384, (("bfloat16", True), ("bfloat16", False), ("float16", True))),
                  (17408, (("float32", True), ("float32", False))), (17920, (("float32", True),))):  # fmt: skip
        p = plan("forward", 100000, 1, n, 2 if xs[0][0] != "float32" else 4, 132)
        assert p.kind == "tile" and not p.loop and p.grid == 100000, p
        for x, store in xs:
            _rows_job(add, "lone tiles", "forward", p, n, x, x, K.CAST_LLAMA_NATIVE if x != "float32" else K.CAST_LLAMA,
                      store)  # fmt: skip
    # fp32 lone tiles on the core's tile (plan.lone_tma): TMA loads, one piece, a block a row without
    # the loop at its hint; unpadded and padded, with and without rstd
    for n in (16384, 15328):
        p = plan("forward", 100000, 1, n, 4, 132, core_bits=True)
        assert p.loads == RK.LOADS_TMA and not p.loop and p.grid == 100000, p
        for store in (True, False):
            _rows_job(add, "lone tma", "forward", p, n, "float32", "float32", K.CAST_LLAMA, store)
    rep = {op: plan(op, 4099, 1, 4096, 2, 132) for op in ("forward", "backward")}
    # one block: dW stored directly in the weight's dtype (rows.launch.run_backward): one row of the
    # default's lengths, a padded last piece (fp32 3000), a static layout (bf16 1098), a head view
    weights = {
        "bfloat16": ("bfloat16", "float32"),
        "float16": ("float16", "float32"),
        "float32": ("float32", "bfloat16"),
    }
    for x, es in (("bfloat16", 2), ("float16", 2), ("float32", 4)):
        for n in (2048, 4096, 8192):
            for w in weights[x]:
                _rows_job(add, "one block", "backward", plan("backward", 1, 1, n, es, 132), n, x, w, direct=True)
    _rows_job(add, "one block", "backward", plan("backward", 1, 1, 3000, 4, 132), 3000, "float32", "float32",
              direct=True)  # fmt: skip
    _rows_job(add, "one block", "backward", plan("backward", 1, 1, 1098, 2, 132), 1098, "bfloat16", "bfloat16",
              direct=True)  # fmt: skip
    _rows_job(add, "one block", "backward", plan("backward", 1, 8, 128, 2, 132), 128, "bfloat16", "bfloat16",
              b_one=False, direct=True)  # fmt: skip
    for x in DTYPES:
        weights = [x, "float32" if x != "float32" else "bfloat16", None]
        for w, casting, store in pairwise(weights, _row_castings(x), (True, False)):
            _rows_job(add, "flags", "forward", rep["forward"], 4096, x, w, casting, store)
        for w, casting in pairwise(weights, _castings(x)):
            _rows_job(add, "flags", "backward", rep["backward"], 4096, x, w, casting)
    for op in ("forward", "backward"):
        _rows_job(add, "heads", op, plan(op, 4096, 32, 128, 2, 132), 128, "bfloat16", "bfloat16", b_one=False)
        # rows under ONE_HEAD_ROW_BYTES: tiles of several heads forward too (4 x 32 x 64)
        _rows_job(add, "heads", op, plan(op, 4096, 32, 64, 2, 132), 64, "bfloat16", "bfloat16", b_one=False)
        # head dim 96 of a fused QKV view (torch_impl: plan.short_view_rows)
        p96 = plan(op, 4096, 32, 96, 2, 132, any_length=True, persistent=True)
        _rows_job(add, "short view", op, p96, 96, "bfloat16", "bfloat16", b_one=False)
    # static layouts (plan.static_fit: 16-bit rows of an even length not a multiple of 16): multi-row
    # forward tiles on plain loads, one-row tiles of several pieces, 8 warps; every flag pairwise at
    # one plan; and the same rows on runtime layouts (rows.launch.STATIC_LAYOUTS' fallback); rows of
    # a multiple of 8 elements (16-byte loads there; on runtime layouts the core kernels take them)
    for n in (1098, 3260, 2876, 7724):
        for op in ("forward", "backward"):
            for static in (True, False):
                p = plan(op, 4099, 1, n, 2, 132, static=static, long=False)  # (7724 forward: long, _long_jobs)
                _rows_job(add, "static", op, p, n, "bfloat16", "bfloat16")
    for n in (1144, 6152):
        for op in ("forward", "backward"):
            p = plan(op, 4099, 1, n, 2, 132, long=False)  # (6152 forward: long, _long_jobs' 8 | N rows)
            _rows_job(add, "static 8 | N", op, p, n, "bfloat16", "bfloat16")
    # fp32 rows of 4 | N, not 16 | N, forward (plan.word_static): the runtime plan compiled for the
    # row layout, one piece (7944, gathered) and three pieces, 2-D and a head view
    for n in (6540, 7000, 7944):
        p = plan("forward", 4099, 1, n, 4, 132)
        assert p.kind == "tile" and p.static, p
        for store in (True, False):
            _rows_job(add, "word static", "forward", p, n, "float32", "float32", store=store)
        _rows_job(add, "word static heads", "forward", plan("forward", 4096, 6, n, 4, 132), n, "float32", None,
                  b_one=False)  # fmt: skip
    # fp32 rows of 16 | N, 8193-13312, forward (plan.wide_one_tile): a block a row without the
    # loop, 8192 + a padded power of two and one padded 16384 piece, with and without rstd
    for n in (9360, 12432):
        p = plan("forward", 4099, 1, n, 4, 132)
        assert p.kind == "tile" and not p.loop and not p.static, p
        for store in (True, False):
            _rows_job(add, "wide one tile", "forward", p, n, "float32", "float32", store=store)
    # gathered multi-row backward tiles that overhang A: with the prefetch (two loops, kernels._whole_tiles,
    # 678 on runtime layouts) and without it (one loop with a branch a tile: static 8 x 256 at 8 blocks)
    for n in (678, 136):
        p = plan("backward", 4099, 1, n, 2, 132)
        assert p.check_a and p.loads == RK.LOADS_GATHER and p.tile_a > 1 and p.prefetch == (n == 678), p
        _rows_job(add, "overhanging", "backward", p, n, "bfloat16", "bfloat16")
    for x in ("bfloat16", "float16"):
        weights = [x, "float32", None]
        at = {op: plan(op, 4099, 1, 1098, 2, 132) for op in ("forward", "backward")}
        for w, casting, store in pairwise(weights, _row_castings(x), (True, False)):
            _rows_job(add, "static flags", "forward", at["forward"], 1098, x, w, casting, store)
        for w, casting in pairwise(weights, _castings(x)):
            _rows_job(add, "static flags", "backward", at["backward"], 1098, x, w, casting)
        _rows_job(add, "static heads", "forward", plan("forward", 4096, 6, 1098, 2, 132), 1098, x, x, b_one=False)
    # The fused residual add on row tiles (experimental/fused_add, planned on the 4-byte line):
    # each residual flavour at a one-piece and a two-piece plan, each stream / residual dtype pair
    # at one flavour.
    flavours = ((K.RESIDUAL_ADD, True), (K.RESIDUAL_ADD, False), (K.RESIDUAL_ADD_UNSTORED, False))
    for n in (4096, 6144):
        for residual, store in flavours:
            _rows_job(add, "fused", "forward", plan("forward", 4099, 1, n, 4, 132), n, "bfloat16", "bfloat16",
                      store=store, res="bfloat16", residual=residual)  # fmt: skip
    for x, res in FUSED_STREAMS[1:]:
        _rows_job(add, "fused", "forward", plan("forward", 4099, 1, 4096, 4, 132), 4096, x, x, res=res,
                  residual=K.RESIDUAL_ADD)  # fmt: skip
    _ALIGNED[0] = False
    try:
        for op in ("forward", "backward"):
            # one-row tiles (a gathered last piece), gathered multi-row tiles, fp32's padded piece
            for x, es, n in (("bfloat16", 2, 3001), ("bfloat16", 2, 510), ("float16", 2, 74), ("float32", 4, 133)):
                for static in (True, False):  # static: plain multi-row tiles (510, 74), gathered odd rows
                    # (3001, 133: plan.odd_static); runtime: gathered
                    p = plan(op, 4099, 1, n, es, 132, lanes=False, static=static)
                    _rows_job(add, "unaligned", op, p, n, x, x, b_one=False)
        # the forward with PREFETCH (a persistent grid of plain loads: probes)
        p = plan("forward", 4099, 1, 4096, 2, 132, persistent=True, prefetch=True)
        assert p.prefetch, p
        _rows_job(add, "prefetch", "forward", p, 4096, "bfloat16", "bfloat16")
        _long_jobs(add)
        _lanes_jobs(add)
        _flat_jobs(add)
    finally:
        _ALIGNED[0] = True


def _long_jobs(add):
    """The long-row kernels (unaligned rows past the row tiles' longest): forward with and
    without rstd, the backward's row dot and chunks, each casting mode and weight presence, each
    element size's plan; the forward of aligned 16-bit rows (plan.long_fit: plain loads), and on
    the static layouts of even 16-bit rows not a multiple of 16 elements (plan.static_fit)."""
    from cutile_rms.rows import launch as RL
    from cutile_rms.rows.plan import long_plan

    def job(p, n, x, casting, has_weight, names, what):
        width = -(-n // p.widths[0]) * p.widths[0]
        names_2d = ("x", "dy", "dx", "y", "w", "rstd_out", "rstd_in", "dw_partial", "eps", "offset")
        arrays = _rows_arrays(x, x if has_weight else None, True, names_2d, n=n if p.static else None, width=width)
        values = dict(RL.constants(p, casting, has_weight, casting != K.CAST_NONE), **arrays, c_out=arrays["rstd_in"],
                      c_in=arrays["rstd_in"], chunks=I32)  # fmt: skip
        for name in names:
            kernel = RL._VARIANTS[name, p.static][p.hints]
            add(f"rows {name} {x} {what} n={n} cast={casting} w={has_weight} {p}", kernel,
                [values[k] for k in RL.KERNELS[name][1]])  # fmt: skip

    cases = (("bfloat16", K.CAST_LLAMA, True), ("float16", K.CAST_NONE, True), ("bfloat16", K.CAST_GEMMA, False),
             ("float32", K.CAST_GEMMA, True))  # fmt: skip
    native = (("bfloat16", K.CAST_LLAMA_NATIVE, True),)  # the torch API's forward casting (launch.forward_casting)
    for op, kernels in (("forward", ("forward_long",)), ("backward", ("dot_long", "backward_long"))):
        for x, casting, has_weight in cases + (native if op == "forward" else ()):
            es = ELEMENT_BYTES[x]
            job(long_plan(op, 4099, 1, 25263, es, 132), 25263, x, casting, has_weight, kernels, "unaligned")
            if op == "backward" and casting != K.CAST_NONE:  # the one-pass backward (probes), and static below
                p = long_plan(op, 4099, 1, 25263, es, 132, onepass=True)
                job(p, 25263, x, casting, has_weight, ("backward_long_onepass",), "unaligned")
            if x == "float32":
                if op == "forward":  # rows the row tiles hold at one block an SM: a block a row (session 30),
                    # and those past them (session 49), with the second pass's lookahead
                    for n in (13406, 14001, 17284, 18856, 19001):  # (no divisibility claimed: N, strides constant)
                        p = long_plan(op, 4099, 1, n, es, 132)
                        assert p.static and p.unroll and p.grid == 4099 and p.widths[0] == 4096 and p.prefetch, p
                        job(p, n, x, casting, has_weight, kernels, "fp32 static, a block a row")
                continue
            aligned, _ALIGNED[0] = _ALIGNED[0], True
            try:
                if op == "forward":  # aligned rows (22528 elements): plain loads, runtime layouts' persistent grid
                    p = long_plan(op, 4099, 1, 22528, es, 132, static=False)
                    assert not p.static and p.grid < 4099, p
                    job(p, 22528, x, casting, has_weight, kernels, "aligned")
                    for n in (7168, 10240):  # up to 5 chunks: static, unrolled, 4 and 8 blocks (session 28)
                        p = long_plan(op, 4099, 1, n, es, 132)
                        assert p.static and p.unroll and p.grid == 4099, p
                        job(p, n, x, casting, has_weight, kernels, "aligned static")
                    for n in (9016, 20488, 25984):  # 8 | N: 16-byte rows on static layouts (plan.vector_rows),
                        p = long_plan(op, 4099, 1, n, es, 132)  # 8 KB chunks, then 16 KB with the lookahead
                        assert p.static and p.unroll and p.widths[0] == (n > 20480) * 4096 + 4096, p
                        assert p.prefetch == (n > 20480), p
                        job(p, n, x, casting, has_weight, kernels, "8 | N static")
                    for n in (17284, 28044, 20478):  # even unaligned rows: a block a row, 8 / 16 KB (session 29),
                        p = long_plan(op, 4099, 1, n, es, 132)  # 16 KB with the second pass's lookahead (session 48)
                        assert p.static and p.unroll and p.grid == 4099 and p.widths[0] == (n > 20480) * 4096 + 4096
                        assert p.prefetch == (n > 20480), p
                        job(p, n, x, casting, has_weight, kernels, "unaligned static, a block a row")
                if op == "backward" and casting == K.CAST_LLAMA:
                    p = long_plan(op, 4099, 1, 25262, es, 132, onepass=True)
                    assert p.static, p
                    job(p, 25262, x, casting, has_weight, ("backward_long_onepass",), "static")
                if op == "forward":  # static layouts, the chunk count compiled in and (llama) at run time,
                    # on the persistent grid of 8 KB chunks (the rules' past long_static_chunk's rows)
                    for unroll in (True, False) if casting == K.CAST_LLAMA else (True,):
                        p = long_plan(op, 4099, 1, 25262, es, 132, unroll=unroll, chunk=4096, persistent=True)
                        assert p.static and p.unroll == unroll, p
                        job(p, 25262, x, casting, has_weight, kernels, "static")
            finally:
                _ALIGNED[0] = aligned


def _flat_jobs(add):
    """The flat rows forward (plan.flat_plan: unaligned rows contiguous end to end, one flat array
    of a 16-byte aligned base and any length) with and without rstd, each casting mode and weight
    presence, each element size's plan; the kernel that writes its shifted weights (a weight of
    any length, the copies' rows 16-byte aligned); and the flat backward's two kernels."""
    from cutile_rms.rows import launch as RL
    from cutile_rms.rows.plan import flat_plan, split_plan

    aligned, _ALIGNED[0] = _ALIGNED[0], True
    try:
        for x, casting, has_weight, store in (("bfloat16", K.CAST_LLAMA, True, True),
                                              ("bfloat16", K.CAST_LLAMA_NATIVE, True, False),
                                              ("float16", K.CAST_NONE, True, True),
                                              ("bfloat16", K.CAST_GEMMA, False, True),
                                              ("float32", K.CAST_GEMMA, True, True)):  # fmt: skip
            p = flat_plan("forward", 4099, 1, 25263, ELEMENT_BYTES[x], 132)  # 16-bit: 8 KB, PREFETCH; fp32: 16 KB
            flat, shifted = arr(x, 1, last_div=1), arr(x, 2)
            _ALIGNED[0] = False
            weight = arr(x, 1)  # a weight of any length
            _ALIGNED[0] = True
            values = dict(RL.constants(p, casting, has_weight, store), x=flat, y=flat, eps=F32, offset=F32, n=I32,
                          rstd_out=mvec() if store else flat, w=weight if has_weight else flat,
                          w_shift=shifted if has_weight else arr(x, 2, last_div=1))  # fmt: skip
            for n in (0, 25263):  # the row length at run time, and compiled in (p.static)
                add(f"rows forward_flat {x} N={n} cast={casting} w={has_weight} rstd={store} {p}",
                    RL._VARIANTS["forward_flat", False][p.hints],
                    [dict(values, N=n)[k] for k in RL.KERNELS["forward_flat"][1]])  # fmt: skip
            if casting == K.CAST_LLAMA:  # the rules' 8 KB chunks at 4 blocks (rows up to 40 KB), and
                # 16-bit rows past FLAT_PREFETCH_MAX_BYTES: 16 KB chunks without the lookahead
                for m in (12001, 65537) if x != "float32" else (12001,):
                    q = flat_plan("forward", 4099, 1, m, ELEMENT_BYTES[x], 132)
                    assert not q.prefetch, q
                    for n in (0, m):
                        small = dict(values, N=n, **RL.constants(q, casting, has_weight, store))
                        add(f"rows forward_flat {x} N={n} cast={casting} {q.widths[0]} chunks {q}",
                            RL._VARIANTS["forward_flat", False][q.hints],
                            [small[k] for k in RL.KERNELS["forward_flat"][1]])  # fmt: skip
            if has_weight:
                values = dict(w=weight, w_shift=shifted, first=I32, TILE_N=p.widths[0])
                add(f"rows weight_shift {x} {p.widths[0]}", RL.KERNELS["weight_shift"][0],
                    [values[k] for k in RL.KERNELS["weight_shift"][1]])  # fmt: skip
        # the split flat forward (plan.split_plan: fp32 unaligned rows past SPLIT_L2_SHARE), with a
        # weight and rstd (the training forward) and without either (inference, no weight)
        for casting, has_weight, store in ((K.CAST_GEMMA, True, True), (K.CAST_NONE, False, False)):
            p = split_plan("forward", 1574, 1, 42631, 4, 132)
            flat = arr("float32", 1, last_div=1)
            _ALIGNED[0] = False
            weight = arr("float32", 1)  # a weight of any length
            _ALIGNED[0] = True
            values = dict(RL.constants(p, casting, has_weight, store), x=flat, y=flat, eps=F32, offset=F32, n=I32,
                          rstd_out=mvec() if store else flat, w=weight if has_weight else flat,
                          w_shift=arr("float32", 2) if has_weight else arr("float32", 2, last_div=1),
                          slots=arr("int64", 2, 1), **RL.split_constants(42631, p.widths[0], K.SPIN_LIMIT))  # fmt: skip
            add(f"rows forward_split float32 cast={casting} w={has_weight} rstd={store} {p}",
                RL._VARIANTS["forward_split", False][p.hints],
                [values[k] for k in RL.KERNELS["forward_split"][1]])  # fmt: skip
        # the flat backward (the rules' plan: 4 KB dx chunks, the row dot's 8 KB, the prefetch; and
        # without it), its shifted weights one flat array from 16 bytes before each copy
        for x, casting, has_weight in (("bfloat16", K.CAST_LLAMA, True), ("float16", K.CAST_LLAMA, True),
                                       ("bfloat16", K.CAST_GEMMA, False), ("float16", K.CAST_NONE, True)):  # fmt: skip
            p = flat_plan("backward", 4099, 1, 25263, ELEMENT_BYTES[x], 132)
            flat = arr(x, 1, last_div=1)
            _ALIGNED[0] = False
            weight = arr(x, 1)
            _ALIGNED[0] = True
            values = dict(
                RL.constants(p, casting, has_weight),
                x=flat,
                dy=flat,
                dx=flat,
                n=I32,
                offset=F32,
                w=weight if has_weight else flat,
                w_shift=arr(x, 1) if has_weight else flat,
                rstd_in=mvec(),
                c_out=mvec(),
                c_in=mvec(),
                dw_partial=mvec() if has_weight else flat,
            )
            add(f"rows dot_flat {x} cast={casting} w={has_weight} {p}", RL._VARIANTS["dot_flat", False][p.hints],
                [dict(values, TILE_N=p.widths[1])[k] for k in RL.KERNELS["dot_flat"][1]])  # fmt: skip
            for prefetch in (True, False):
                add(f"rows backward_flat {x} cast={casting} w={has_weight} prefetch={prefetch} {p}",
                    RL._VARIANTS["backward_flat", False][p.hints],
                    [dict(values, PREFETCH=prefetch)[k] for k in RL.KERNELS["backward_flat"][1]])  # fmt: skip
    finally:
        _ALIGNED[0] = aligned


def _lanes_jobs(add):
    """The lanes kernels (short unaligned rows), forward and backward: each element size's plans
    (W = 128 and 256 for 16-bit, 128 for fp32; 2-D and head views), each casting mode and weight
    presence, the forward with and without rstd; on runtime layouts, and on the static ones of
    odd rows (plan.odd_static: 2-D, B = 1) and of the rules' vector lanes (plan.vector_lanes: 4
    elements a lane for 4 mod 8 rows forward and backward and 2 mod 4 rows backward, 8 for the
    forward of 2 mod 4 rows; 2-D and head views); the native llama forward (launch.forward_casting)."""
    from cutile_rms.rows import launch as RL
    from cutile_rms.rows.plan import lanes_plan, odd_static, plan, vector_lanes

    rstd = arr("float32", 2, last_div=1)

    def job(p, x, n, b, casting, has_weight, store):
        name = p.op + "_lanes"
        rows = arr(x, 3)
        values = dict(RL.constants(p, casting, has_weight, store), x=rows, y=rows, dy=rows, dx=rows,
                      w=arr(x, 1) if has_weight else rows, rstd_out=rstd, rstd_in=rstd,
                      dw_partial=arr("float32", 2) if has_weight else rows, eps=F32, offset=F32)  # fmt: skip
        if p.static:  # 2-D rows and a fused QKV view's heads
            values.update(_rows_arrays(x, x if has_weight else None, b == 1, ("x", "y", "dy", "dx", "w"), n=n))
            values["dw_partial"] = static_rows(arr("float32", 2), p.widths[0]) if has_weight else values["x"]
        add(f"rows {name} {'static ' if p.static else ''}{x} n={n} b={b} cast={casting} w={has_weight} rstd={store} "
            f"{p}", RL._VARIANTS[name, p.static][p.hints], [values[k] for k in RL.KERNELS[name][1]])  # fmt: skip

    cases = (("bfloat16", 191, K.CAST_LLAMA, True, True), ("float16", 81, K.CAST_NONE, True, False),
             ("bfloat16", 191, K.CAST_LLAMA_NATIVE, True, True),
             ("bfloat16", 81, K.CAST_GEMMA, False, True), ("float32", 81, K.CAST_GEMMA, True, True),
             ("float32", 81, K.CAST_GEMMA, False, False))  # fmt: skip
    for x, n, casting, has_weight, store in cases:
        for b in (1, 6):
            for op in ("forward", "backward"):
                job(lanes_plan(op, 4099, b, n, ELEMENT_BYTES[x], 132), x, n, b, casting, has_weight, store)
                if odd_static(n, ELEMENT_BYTES[x], op):
                    q = lanes_plan(op, 4099, b, n, ELEMENT_BYTES[x], 132, static=True)
                    job(q, x, n, b, casting, has_weight, store)
    # the forward of odd 16-bit rows of 257-511 on 512 lanes (plan.lanes_fit): static 16 / 8 rows
    # (263, 301), runtime 4 (441)
    for x, n, casting in (("bfloat16", 263, K.CAST_LLAMA_NATIVE), ("float16", 301, K.CAST_GEMMA),
                          ("bfloat16", 441, K.CAST_LLAMA)):  # fmt: skip
        p = plan("forward", 4099, 1, n, 2, 132)
        assert (p.kind, p.widths[0], p.tile_a, p.static) == ("lanes", 512, {263: 16, 301: 8}.get(n, 4), n < 385), p
        job(p, x, n, 1, casting, True, True)
    vector = (("forward", "bfloat16", 204, K.CAST_LLAMA, True), ("forward", "float16", 300, K.CAST_NONE, False),
              ("backward", "float16", 204, K.CAST_LLAMA, True), ("backward", "bfloat16", 138, K.CAST_GEMMA, True),
              ("forward", "bfloat16", 204, K.CAST_LLAMA_NATIVE, True),
              ("forward", "bfloat16", 138, K.CAST_LLAMA_NATIVE, True), ("forward", "float16", 66, K.CAST_LLAMA, False),
              ("backward", "bfloat16", 98, K.CAST_LLAMA, True))  # fmt: skip
    for op, x, n, casting, has_weight in vector:
        for b in (1, 6):
            p = plan(op, 4099, b, n, ELEMENT_BYTES[x], 132)
            assert p.kind == "lanes" and p.static and p.lanes == p.widths[0] // vector_lanes(n, 2, op), p
            job(p, x, n, b, casting, has_weight, True)
    # the vector lanes forward as the rules run it, a block a tile without the loop (plan.lanes_one_tile),
    # with and without the weight and rstd; and its tile on the loop (lanes_plan(persistent=True), probes)
    for x, n, casting, has_weight, store in (("bfloat16", 170, K.CAST_LLAMA_NATIVE, True, True),
                                             ("float16", 338, K.CAST_LLAMA, True, False),
                                             ("bfloat16", 500, K.CAST_NONE, False, True)):  # fmt: skip
        p = plan("forward", 1 << 20, 1, n, 2, 132)
        assert (p.kind, p.static, p.loop, p.prefetch) == ("lanes", True, False, False), p
        job(p, x, n, 1, casting, has_weight, store)
        q = lanes_plan("forward", 1 << 20, 1, n, 2, 132, static=True, lane_elems=vector_lanes(n, 2), persistent=True)
        assert (q.loop, q.prefetch) == (True, False), q
        job(q, x, n, 1, casting, has_weight, store)


@functools.lru_cache(maxsize=4)
def every_job(arch: str = "sm_90") -> list:
    """(label, kernel object, params) for every specialization the planner can pick for arch,
    deduplicated."""
    out = {}

    def add(label, kernel, params):
        key = (id(kernel), repr(params))
        out.setdefault(key, (label, kernel, params))

    _planned_jobs(add, arch)
    for x in DTYPES:
        _flag_jobs(add, x)
    _unaligned_jobs(add)
    fused_jobs(add)
    _rows_jobs(add)
    _fp8_jobs(add)
    _int64_jobs(add, list(out.values()))
    return list(out.values())


@functools.lru_cache(maxsize=4)
def jobs(arch: str = "sm_90") -> list:
    """The jobs compiled for arch: every_job(arch) for FULL_ARCH, else the first job of each
    ``stratum`` of it."""
    every = every_job(arch)
    if arch == FULL_ARCH:
        return every
    first = {}
    for i, (_, kernel, params) in enumerate(every):
        first.setdefault(stratum(kernel, params), i)
    keep = set(first.values())
    return [job for i, job in enumerate(every) if i in keep]


def stratum(kernel, params) -> tuple:
    """What an architecture other than FULL_ARCH compiles once: a kernel variant (a kernel object:
    the kernel at its hints) with one set of parameter kinds (_signature_key), its arrays' element
    dtypes and whether they are aligned (a divisible shape; unaligned(): no divisibility)."""
    arrays = tuple((str(p.dtype), any(d > 1 for d in p.shape_divisible_by or ()))
                   for p in params if isinstance(p, ArrayConstraint))  # fmt: skip
    return id(kernel), _signature_key(kernel, params), arrays


INT64_KERNELS = ("rms_fwd_tile", "rms_bwd_tile", "rms_bwd_chunked", "rows_fwd", "rows_bwd")


def _int64_jobs(add, planned):
    """A tensor past 2^31 elements: the JIT indexes its arrays with int64. The first job of each
    INT64_KERNELS with every array so indexed (their parameter buffers hold int64 shapes and
    strides: cutile_rms._abi)."""
    for name in INT64_KERNELS:
        label, kernel, params = next(job for job in planned if python_function(job[1]).__name__ == name)
        wide = [dataclasses.replace(p, index_dtype=ct.int64) if isinstance(p, ArrayConstraint) else p for p in params]
        add(f"int64 index: {label}", kernel, wide)


FUSED_STREAMS = (("bfloat16", "bfloat16"), ("float16", "float16"), ("float32", "float32"), ("bfloat16", "float32"))
FUSED_CHECKS = {(x, s, w): (i + j) % 2 == 0 for i, (x, s) in enumerate(FUSED_STREAMS) for j, w in enumerate((x, None))}


def fused_jobs(add):
    """The experimental fused residual-add kernels: every flavour and flag at one tile shape,
    for same-dtype residual streams and an fp32 stream beside bf16 activations; the post-norm
    inference forward (the sum not stored) with a weight."""
    s_f, s_b, ch = REP_FWD, REP_BWD, REP_CHUNK
    for x, s in FUSED_STREAMS:
        casting = K.CAST_GEMMA if s == "float32" else K.CAST_LLAMA
        for w in (x, None):
            base = dict(x=arr(x, 2), r=arr(s, 2), w=arr(w, 1) if w else arr(x, 2), y=arr(x, 2), s_out=arr(s, 2),
                        rstd_out=mvec(), eps=F32, offset=F32, CASTING=casting, HAS_WEIGHT=w is not None)  # fmt: skip
            # the bounds-check flag at every other (stream, weight) pair: both values, each pair once
            check = FUSED_CHECKS[(x, s, w)]
            residuals = (K.RESIDUAL_ADD, K.RESIDUAL_ADD_UNSTORED) if w else (K.RESIDUAL_ADD,)
            for flavour in FL.FLAVOURS:
                for residual in residuals if flavour == "infer" else (K.RESIDUAL_ADD,):
                    tag = f"{flavour} x={x} s={s} w={w} residual={residual}"
                    name = FL.forward_kernel_name("tile", flavour)
                    values = dict(base, TILE_M=s_f.tile_m, TILE_N=s_f.tile_n, TAIL=0, RESIDUAL=residual,
                                  CHECK_BOUNDS=check, **_memory(s_f.memory))  # fmt: skip
                    add(f"fused fwd tile {tag} check_bounds={check}", FL._VARIANTS[name][s_f.hints],
                        list(FL.arguments(name, values)))  # fmt: skip
                    name = FL.forward_kernel_name("chunked", flavour)
                    values = dict(base, TILE_M=ch.tile_m, TILE_N=ch.tile_n, RESIDUAL=residual, **_memory(ch.memory))
                    add(f"fused fwd chunked {tag}", FL._VARIANTS[name][ch.hints], list(FL.arguments(name, values)))
            for add_dres, two in itertools.product((False, True), (False, True) if x != s else (False,)):
                values = dict(s=arr(s, 2), dy=arr(x, 2), dres=arr(s, 2) if add_dres else arr(x, 2),
                              w=arr(w, 1) if w else arr(x, 2), rstd_in=mvec(), c_in=mvec(), dx=arr(x, 2),
                              dr=arr(s, 2) if two else arr(x, 2), dw_partial=arr("float32", 2) if w else arr(s, 2),
                              offset=F32, HAS_WEIGHT=w is not None,
                              ROUND_XHAT=w is not None and casting != K.CAST_GEMMA, ADD_DRES=add_dres,
                              TWO_OUTPUTS=two, **_memory(NO_MEMORY_KNOBS))  # fmt: skip
                tag = f"x={x} s={s} w={w} dres={add_dres} two={two}"
                add(
                    f"fused bwd tile {tag}",
                    FL._VARIANTS["fused_add_bwd_tile"][s_b.hints],
                    list(FL.arguments("fused_add_bwd_tile", dict(values, TILE_M=s_b.tile_m, TILE_N=s_b.tile_n))),
                )
                add(
                    f"fused bwd chunked {tag}",
                    FL._VARIANTS["fused_add_bwd_chunked"][ch.hints],
                    list(FL.arguments("fused_add_bwd_chunked", dict(values, TILE_M=ch.tile_m, TILE_N=ch.tile_n))),
                )


def _signature_key(kernel, params) -> tuple:
    """What decides a kernel's parameter buffer: its name and its runtime parameters' kinds."""

    def kind(p):
        if isinstance(p, ArrayConstraint):
            return "array", p.ndim, str(p.index_dtype)
        return "scalar", str(p.dtype)

    return python_function(kernel).__name__, tuple(
        kind(p) for p in params if isinstance(p, ArrayConstraint | ScalarConstraint)
    )


@functools.lru_cache(maxsize=4)
def layout_jobs(arch: str = "sm_90") -> frozenset:
    """The first job of each distinct _signature_key: their cubins' parameter tables are checked
    against cutile_rms._abi (the rest share a representative's buffer layout)."""
    first = {}
    for i, (_, kernel, params) in enumerate(jobs(arch)):
        first.setdefault(_signature_key(kernel, params), i)
    return frozenset(first.values())


def cubin_parameters(cubin: bytes) -> list:
    """[(offset, size)] of a cubin's kernel parameters in ordinal order (cuobjdump -elf, the
    EIATTR_KPARAM_INFO entries)."""
    import re

    from bench.probes.sass import cuobjdump

    elf = cuobjdump(cubin, "-elf")
    table = re.findall(r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x([0-9a-f]+)\s+Size\s*:\s*0x([0-9a-f]+)", elf)
    return [(int(off, 16), int(size, 16)) for _, off, size in sorted(table, key=lambda t: int(t[0], 16))]


def _compile_one(args):
    index, arch = args
    label, kernel, params = jobs(arch)[index]
    sig = KernelSignature(params, calling_convention=CallingConvention.cutile_python_v2())
    import io

    from cutile_rms import _abi

    buf = io.BytesIO()
    try:
        export_kernel(kernel, [sig], buf, gpu_code=arch, output_format="cubin")
    except Exception as e:  # report every failure, not only the first
        return f"{arch} {label}: {type(e).__name__}: {str(e)[:2000]}"
    if len(buf.getvalue()) == 0:
        return f"{arch} {label}: empty cubin"
    if index in layout_jobs(arch):
        ours = [(s.offset, s.size) for s in _abi.parameter_layout(params)]
        theirs = cubin_parameters(buf.getvalue())
        if ours != theirs:
            return f"{arch} {label}: parameter layout {ours} but the cubin's is {theirs}"
    return None


def compile_all(arch: str, workers: int | None = None) -> tuple[int, list[str]]:
    """Compile every job for `arch`; returns (number compiled, failures).

    Workers are spawned, not forked: cuda.tile reads CUDA_TILE_CACHE_DIR once, at import, so
    only a fresh interpreter honours CUDA_TILE_CACHE_DIR=off (real compiles, no cache hits).
    """
    n = len(jobs(arch))
    workers = workers or os.cpu_count() or 1
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_compile_one, [(i, arch) for i in range(n)]))
    return n, [r for r in results if r]


# Row lengths of the FP8 jobs: one piece in multi-row tiles, two pieces, the row-tile planner's
# longest (three pieces at 8 warps) and a row past it (the chunked kernel).
FP8_N = (128, 4096, 5120, 18432, 32768)


def _fp8_job(add, label, n, x, w, casting, dynamic, fmt, store=False, residual=None):
    from cutile_rms.experimental.fp8 import launch as F8

    p = F8.fp8_plan(4099, 1, n, ELEMENT_BYTES[x], 132)
    consts = F8.constants(p, casting, w is not None, store, dynamic, fmt, residual is not None)
    arrays = _rows_arrays(x, w, True, ["x", "w", "rstd_out"])
    arrays["r"] = arrays["s_out"] = _rows_arrays(residual or x, w, True, ["x"])["x"]
    fp8 = "float8_e4m3fn" if fmt == 0 else "float8_e5m2"
    arrays["y"] = dataclasses.replace(arr(fp8, 3), shape_constant=(None, 1, None))
    rows_f32 = arrays["rstd_out"]
    one = mvec()
    arrays.update(scale=rows_f32 if dynamic else one, stat=rows_f32 if dynamic else mvec("int32"), eps=F32, offset=F32)
    values = {**arrays, **consts}
    kernel = F8._ROWS[p.rows.hints] if p.kernel == "rows" else F8.KERNELS["chunked"]
    add(f"fp8 {label} n={n} {x} w={w} cast={casting} dynamic={dynamic} fmt={fmt} rstd={store} residual={residual} "
        f"{p.kernel}", kernel,
        [values[k] for k in F8.PARAMS[p.kernel]])  # fmt: skip


def _fp8_jobs(add):
    """The experimental FP8-output forward: each FP8_N (bf16, static and dynamic scales), every
    flag value pairwise at 4096, and the chunked kernel's other flags once (fp32, e5m2, rstd)."""
    for n in FP8_N:
        for dynamic in (True, False):
            _fp8_job(add, "plan", n, "bfloat16", "bfloat16", K.CAST_LLAMA, dynamic, 0)
    for x in DTYPES:
        for w, casting, dynamic, fmt, store in pairwise([x, None], _castings(x), (True, False), (0, 1), (True, False)):
            _fp8_job(add, "flags", 4096, x, w, casting, dynamic, fmt, store)
    _fp8_job(add, "flags", 32768, "float32", None, K.CAST_GEMMA, True, 1, True)
    from cutile_rms.experimental.fp8 import launch as F8

    for x in DTYPES:  # the transposed output (2-D rows, static scale): every flag pairwise
        for w, casting, fmt, store in pairwise([x, None], _castings(x), (0, 1), (True, False)):
            fp8 = "float8_e4m3fn" if fmt == 0 else "float8_e5m2"
            p = F8.fp8_plan(4099, 1, 4096, ELEMENT_BYTES[x], 132, transpose=True)
            values = {**F8.constants(p, casting, w is not None, store, False, fmt), "x": arr(x, 2),
                      "w": arr(w, 1) if w else arr(x, 2), "y": arr(fp8, 2), "y_t": arr(fp8, 2), "rstd_out": mvec(),
                      "scale": mvec(), "stat": mvec("int32"), "eps": F32, "offset": F32}  # fmt: skip
            add(f"fp8 transpose {x} w={w} cast={casting} fmt={fmt} rstd={store}", F8._TRANSPOSE[F8.TRANSPOSE_HINTS],
                [values[k] for k in F8.PARAMS["transpose"]])  # fmt: skip
    for n in (4096, 32768):  # the fused residual add: a same-dtype and an fp32 residual stream
        _fp8_job(add, "residual", n, "bfloat16", "bfloat16", K.CAST_LLAMA, True, 0, residual="bfloat16")
        _fp8_job(add, "residual", n, "bfloat16", "bfloat16", K.CAST_GEMMA, False, 0, True, residual="float32")


if __name__ == "__main__":
    import sys
    import time

    for arch in sys.argv[1:] or ["sm_90"]:
        t = time.time()
        n, failures = compile_all(arch)
        print(f"{arch}: {n} specializations, {len(failures)} failures, {time.time() - t:.0f} s")
        for f in failures:
            print(f)
