"""Ahead-of-time compilation of the kernel specializations the dispatcher can pick.

tileiras runs on the host, so this needs no GPU. Coverage:
- every (kernel, tile shape, occupancy hint) that config.py can plan, for each input dtype
  (weight of the same dtype, llama casting, rstd stored);
- every combination of the compile-time flags (casting mode, weight dtype or no weight, rstd
  store, rounded xhat) at one tile shape per kernel, for each input dtype.
The full cross product of the two (about 1,500 compiles per GPU architecture) would add no
new code paths: the flags select code, the tile shape only sizes it.
"""

import dataclasses
import itertools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import cuda.tile as ct
from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, ScalarConstraint, export_kernel

from cutile_rms.experimental.fused_add import launch as FL
from cutile_rms.rmsnorm import config as C
from cutile_rms.rmsnorm import kernels as K
from cutile_rms.rmsnorm import launch as L

DTYPES = {"bfloat16": ct.bfloat16, "float16": ct.float16, "float32": ct.float32}  # input dtypes
ARRAY_DTYPES = {**DTYPES, "int64": ct.int64, "int32": ct.int32}  # the split slots, the packed words
F32 = ScalarConstraint(ct.float32)
I32 = ScalarConstraint(ct.int32)  # a Python int argument (the claim kernels' nonce)


def arr(dtype_name: str, ndim: int) -> ArrayConstraint:
    return ArrayConstraint(
        ARRAY_DTYPES[dtype_name], ndim, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=[],
        may_alias_internally=False, stride_constant=[None] * (ndim - 1) + [1],
    )  # fmt: skip


def _castings(x: str):
    return [K.CAST_GEMMA] if x == "float32" else [K.CAST_LLAMA, K.CAST_GEMMA, K.CAST_NONE]


# The kernels' memory constants (TMA_STORE, LATENCY) of a config without memory knobs set.
NO_MEMORY_KNOBS = C.tile(1, 16, 1).memory


def _fwd_params(x, w, tile_m, tile_n, casting, store_rstd, memory=NO_MEMORY_KNOBS, tail=None):
    # An absent weight is replaced by x at launch (launch.py), so it takes x's constraint. The
    # inference kernels have no rstd parameter; the tile kernels take a TAIL (tail: an int), the
    # chunked ones do not (tail None).
    rstd = [arr("float32", 1)] if store_rstd else []
    tails = [] if tail is None else [tail]
    return [arr(x, 2), arr(w, 1) if w else arr(x, 2), arr(x, 2), *rstd, F32, F32, tile_m, tile_n, *tails, casting,
            w is not None, *memory]  # fmt: skip


def _fwd_row_params(x, w, tile_m, tile_n, casting, store_rstd, check_bounds):
    # The few-row kernels: no memory knobs, a CHECK_BOUNDS constant instead.
    rstd = [arr("float32", 1)] if store_rstd else []
    return [arr(x, 2), arr(w, 1) if w else arr(x, 2), arr(x, 2), *rstd, F32, F32, tile_m, tile_n, casting,
            w is not None, check_bounds]  # fmt: skip


def _fwd_claim_params(x, w, tile_m, tile_n, casting, store_rstd, memory=NO_MEMORY_KNOBS, tail=0):
    # The claim kernels: the tile kernels' parameters with the ticket and the nonce after rstd.
    rstd = [arr("float32", 1)] if store_rstd else []
    return [arr(x, 2), arr(w, 1) if w else arr(x, 2), arr(x, 2), *rstd, arr("int64", 1), I32, F32, F32, tile_m, tile_n,
            tail, casting, w is not None, *memory]  # fmt: skip


def _bwd_tile_params(x, w, tile_m, tile_n, round_xhat, memory=NO_MEMORY_KNOBS):
    return [arr(x, 2), arr(x, 2), arr(w, 1) if w else arr(x, 2), arr("float32", 1), arr(x, 2),
            arr("float32", 2) if w else arr(x, 2), F32, tile_m, tile_n, w is not None, round_xhat,
            *memory]  # fmt: skip


def _fwd_split_params(x, w, tile_m, tile_n, splits, casting, store_rstd, memory=NO_MEMORY_KNOBS):
    rstd = [arr("float32", 1)] if store_rstd else []
    return [arr(x, 2), arr(w, 1) if w else arr(x, 2), arr(x, 2), *rstd, arr("int64", 2), F32, F32, tile_m, tile_n,
            splits, C.next_pow2(splits), casting, w is not None, *memory]  # fmt: skip


def _bwd_split_params(x, w, tile_m, tile_n, splits, round_xhat, memory=NO_MEMORY_KNOBS):
    return [arr(x, 2), arr(x, 2), arr(w, 1) if w else arr(x, 2), arr("float32", 1), arr(x, 2),
            arr("float32", 2) if w else arr(x, 2), arr("int64", 2), F32, tile_m, tile_n, splits, C.next_pow2(splits),
            w is not None, round_xhat, *memory]  # fmt: skip


def _bwd_packed_params(x, w, tile_m, tile_n, round_xhat, memory=NO_MEMORY_KNOBS, tail=0):
    # x, dy, w, dx arrive as int32 word views; the weight shares x's 16-bit type or is absent.
    words = arr("int32", 2)
    return [words, words, arr("int32", 1) if w else words, arr("float32", 1), words,
            arr("float32", 3) if w else words, F32, tile_m, tile_n // 2, tail // 2, _half(x), w is not None,
            round_xhat, *memory]  # fmt: skip


def _half(x):
    return K.HALF_BF16 if x == "bfloat16" else K.HALF_FP16


def _bwd_dot_params(x, w, tile_m, tile_n):
    return [arr(x, 2), arr(x, 2), arr(w, 1) if w else arr(x, 2), arr("float32", 1), arr("float32", 1), F32,
            tile_m, tile_n, w is not None]  # fmt: skip


def _bwd_chunk_params(x, w, tile_m, tile_n, round_xhat, memory=NO_MEMORY_KNOBS):
    return [arr(x, 2), arr(x, 2), arr(w, 1) if w else arr(x, 2), arr("float32", 1), arr("float32", 1), arr(x, 2),
            arr("float32", 2) if w else arr(x, 2), F32, tile_m, tile_n, w is not None, round_xhat,
            *memory]  # fmt: skip


def _key(cfg):
    return (cfg.kernel, cfg.tile_n, cfg.tile_m, cfg.blocks_per_sm, repr(cfg.warps), cfg.memory)


# The representative configs the flag combinations compile at (the defaults' 4096 entries).
REP_FWD = C.DEFAULT_TABLE["forward"][4096]
REP_BWD = C.DEFAULT_TABLE["backward"][4096]
REP_CHUNK = C.GATHER
REP_SPLIT = C.split(1, 1024, 1, 8, tma_store=False)
REP_PACKED = C.packed(1, 4096, 1, 8)
REP_ROW = C.row(1, 4096, 8)
REP_TAIL = 1024  # a tail beside REP_FWD's and REP_PACKED's 4096-wide tiles
# Blocks per row the split kernels are compiled for at every planned split config (a table
# entry's bucket sets it: 2 for 16384-wide rows in 8192 segments, 8 for 65536), and the odd
# count compiled once at REP_SPLIT with every flag (a row that is not a multiple of the segment).
SPLIT_COUNTS = (2, 4, 8)
ODD_SPLIT = 3


def jobs():
    """(label, kernel object, params) for every specialization to compile, deduplicated."""
    out = {}

    def add(label, kernel, params):
        key = (id(kernel), repr(params))
        out.setdefault(key, (label, kernel, params))

    planned = C.planned_configs()
    fwd_cfgs = sorted(planned["forward"], key=_key)
    bwd_cfgs = sorted(planned["backward"], key=_key)
    dot_cfgs = sorted(planned["backward_dot"], key=_key)
    for x in DTYPES:
        for cfg, store in itertools.product(fwd_cfgs, (True, False)):
            kernel = L.forward_kernel(cfg.kernel, cfg.hints, store)
            if cfg.kernel == "split":
                for splits in SPLIT_COUNTS:
                    params = _fwd_split_params(x, x, cfg.tile_m, cfg.tile_n, splits, K.CAST_LLAMA, store, cfg.memory)
                    add(f"fwd {x} {cfg} split={splits} rstd={store}", kernel, params)
                continue
            if cfg.schedule == "claim":
                params = _fwd_claim_params(x, x, cfg.tile_m, cfg.tile_n, K.CAST_LLAMA, store, cfg.memory, cfg.tail)
                add(f"fwd {x} {cfg} rstd={store}", L.forward_kernel("claim", cfg.hints, store), params)
                continue
            if cfg.kernel == "row":  # planned only for rows of exactly tile_n (config.fit_to_row)
                params = _fwd_row_params(x, x, cfg.tile_m, cfg.tile_n, K.CAST_LLAMA, store, cfg.tile_m > 1)
                add(f"fwd {x} {cfg} rstd={store}", kernel, params)
                continue
            add(f"fwd {x} {cfg} rstd={store}", kernel,
                _fwd_params(x, x, cfg.tile_m, cfg.tile_n, K.CAST_LLAMA, store, cfg.memory,
                            cfg.tail if cfg.kernel == "tile" else None))  # fmt: skip
        for cfg in bwd_cfgs:
            if cfg.kernel == "split":
                for splits in SPLIT_COUNTS:
                    params = _bwd_split_params(x, x, cfg.tile_m, cfg.tile_n, splits, x != "float32", cfg.memory)
                    add(f"bwd {x} {cfg} split={splits}", L.backward_kernel("split", cfg.hints), params)
                continue
            if cfg.kernel == "packed":
                if x != "float32":
                    add(f"bwd {x} {cfg}", L.backward_kernel("packed", cfg.hints),
                        _bwd_packed_params(x, x, cfg.tile_m, cfg.tile_n, True, cfg.memory, cfg.tail))  # fmt: skip
                # what runs where no word views can be made (config.kernel_config; a tail is dropped)
                cfg = C.fit_to_row(dataclasses.replace(cfg, kernel="tile"), cfg.tile_n + cfg.tail, "backward")
            if cfg.kernel == "tile":
                params = _bwd_tile_params(x, x, cfg.tile_m, cfg.tile_n, x != "float32", cfg.memory)
            else:
                params = _bwd_chunk_params(x, x, cfg.tile_m, cfg.tile_n, x != "float32", cfg.memory)
            add(f"bwd {x} {cfg}", L.backward_kernel(cfg.kernel, cfg.hints), params)
        for cfg in dot_cfgs:
            add(f"bwd_row_dot {x} {cfg}", L.backward_kernel("row_dot", cfg.hints),
                _bwd_dot_params(x, x, cfg.tile_m, cfg.tile_n))  # fmt: skip
        add(f"dw_reduce {x}", K.dw_reduce, [arr("float32", 2), arr(x, 1), C.REDUCE_TILE_G, C.REDUCE_TILE_N])
        if x != "float32":
            add(f"dw_reduce_packed {x}", K.dw_reduce_packed,
                [arr("float32", 3), arr("int32", 1), C.REDUCE_TILE_G, C.REDUCE_TILE_N // 2, _half(x)])  # fmt: skip
            pk = REP_PACKED
            for w, round_xhat in ((x, False), (x, True), (None, False)):
                add(f"bwd_packed {x} w={w} round={round_xhat}", L.backward_kernel("packed", pk.hints),
                    _bwd_packed_params(x, w, pk.tile_m, pk.tile_n, round_xhat, pk.memory))  # fmt: skip
                add(f"bwd_packed {x} w={w} round={round_xhat} tail={REP_TAIL}", L.backward_kernel("packed", pk.hints),
                    _bwd_packed_params(x, w, pk.tile_m, pk.tile_n, round_xhat, pk.memory, REP_TAIL))  # fmt: skip

        # Flag combinations at one representative config per kernel.
        weights = [x, "float32" if x != "float32" else "bfloat16", None]
        f, b, ch = REP_FWD, REP_BWD, REP_CHUNK
        for w, casting, store in itertools.product(weights, _castings(x), (True, False)):
            add(f"fwd_tile {x} w={w} cast={casting} rstd={store}", L.forward_kernel("tile", f.hints, store),
                _fwd_params(x, w, f.tile_m, f.tile_n, casting, store, tail=0))  # fmt: skip
            add(f"fwd_tile {x} w={w} cast={casting} rstd={store} tail={REP_TAIL}",
                L.forward_kernel("tile", f.hints, store),
                _fwd_params(x, w, f.tile_m, f.tile_n, casting, store, tail=REP_TAIL))  # fmt: skip
            add(f"fwd_claim {x} w={w} cast={casting} rstd={store}", L.forward_kernel("claim", f.hints, store),
                _fwd_claim_params(x, w, f.tile_m, f.tile_n, casting, store))  # fmt: skip
            for check in (False, True):
                add(f"fwd_row {x} w={w} cast={casting} rstd={store} check={check}",
                    L.forward_kernel("row", REP_ROW.hints, store),
                    _fwd_row_params(x, w, REP_ROW.tile_m, REP_ROW.tile_n, casting, store, check))  # fmt: skip
            add(f"fwd_chunked {x} w={w} cast={casting} rstd={store}",
                L.forward_kernel("chunked", ch.hints, store),
                _fwd_params(x, w, ch.tile_m, ch.tile_n, casting, store))  # fmt: skip
            sp = REP_SPLIT
            add(f"fwd_split {x} w={w} cast={casting} rstd={store}", L.forward_kernel("split", sp.hints, store),
                _fwd_split_params(x, w, sp.tile_m, sp.tile_n, ODD_SPLIT, casting, store, sp.memory))  # fmt: skip
        for w in weights:
            for round_xhat in (False,) if w is None or x == "float32" else (False, True):
                add(f"bwd_tile {x} w={w} round={round_xhat}", L.backward_kernel("tile", b.hints),
                    _bwd_tile_params(x, w, b.tile_m, b.tile_n, round_xhat))  # fmt: skip
                add(f"bwd_chunked {x} w={w} round={round_xhat}", L.backward_kernel("chunked", ch.hints),
                    _bwd_chunk_params(x, w, ch.tile_m, ch.tile_n, round_xhat))  # fmt: skip
                add(f"bwd_split {x} w={w} round={round_xhat}", L.backward_kernel("split", REP_SPLIT.hints),
                    _bwd_split_params(x, w, REP_SPLIT.tile_m, REP_SPLIT.tile_n, ODD_SPLIT, round_xhat,
                                      REP_SPLIT.memory))  # fmt: skip
            add(f"bwd_row_dot {x} w={w}", L.backward_kernel("row_dot", ch.hints),
                _bwd_dot_params(x, w, ch.tile_m, ch.tile_n))  # fmt: skip
            if w is not None:
                add(
                    f"dw_reduce {x} w={w}",
                    K.dw_reduce,
                    [arr("float32", 2), arr(w, 1), C.REDUCE_TILE_G, C.REDUCE_TILE_N],
                )
    fused_jobs(add)
    return list(out.values())


def fused_jobs(add):
    """The experimental fused residual-add kernels: every flavour and flag at one tile shape,
    for same-dtype residual streams and an fp32 stream beside bf16 activations."""
    s_f, s_b, ch = REP_FWD, REP_BWD, REP_CHUNK
    for x, s in (("bfloat16", "bfloat16"), ("float16", "float16"), ("float32", "float32"), ("bfloat16", "float32")):
        casting = K.CAST_GEMMA if s == "float32" else K.CAST_LLAMA
        for w in (x, None):
            wa = arr(w, 1) if w else arr(x, 2)
            common = [F32, F32]
            for flavour, tiles, chunked in (
                ("train", *FL._FORWARD["train"]), ("infer", *FL._FORWARD["infer"]), ("inplace", *FL._FORWARD["inplace"])
            ):  # fmt: skip
                if flavour == "inplace":
                    arrays = [arr(x, 2), arr(s, 2), wa]
                else:
                    rstd = [arr("float32", 1)] if flavour == "train" else []
                    arrays = [arr(x, 2), arr(s, 2), wa, arr(x, 2), arr(s, 2), *rstd]
                for check in (True, False):
                    add(f"fused fwd {flavour} tile x={x} s={s} w={w} check_bounds={check}",
                        tiles[s_f.hints], [*arrays, *common, s_f.tile_m, s_f.tile_n, 0, casting, w is not None,
                                                   check, *s_f.memory])  # fmt: skip
                add(f"fused fwd {flavour} chunked x={x} s={s} w={w}", chunked[ch.hints],
                    [*arrays, *common, ch.tile_m, ch.tile_n, casting, w is not None, *ch.memory])  # fmt: skip
            for add_dres, two in itertools.product((False, True), (False, True) if x != s else (False,)):
                round_xhat = w is not None and casting != K.CAST_GEMMA
                dres = arr(s, 2) if add_dres else arr(x, 2)
                dr = arr(s, 2) if two else arr(x, 2)
                part = arr("float32", 2) if w else arr(s, 2)
                flags = [w is not None, round_xhat, add_dres, two, *NO_MEMORY_KNOBS]
                add(f"fused bwd tile x={x} s={s} w={w} dres={add_dres} two={two}", FL._BWD_TILE[s_b.hints],
                    [arr(s, 2), arr(x, 2), dres, wa, arr("float32", 1), arr(x, 2), dr, part, F32, s_b.tile_m,
                     s_b.tile_n, *flags])  # fmt: skip
                add(f"fused bwd chunked x={x} s={s} w={w} dres={add_dres} two={two}",
                    FL._BWD_CHUNKED[ch.hints],
                    [arr(s, 2), arr(x, 2), dres, wa, arr("float32", 1), arr("float32", 1), arr(x, 2), dr, part, F32,
                     ch.tile_m, ch.tile_n, *flags])  # fmt: skip


def _compile_one(args):
    index, arch = args
    label, kernel, params = jobs()[index]
    sig = KernelSignature(params, calling_convention=CallingConvention.cutile_python_v1())
    import io

    buf = io.BytesIO()
    try:
        export_kernel(kernel, [sig], buf, gpu_code=arch, output_format="cubin")
    except Exception as e:  # report every failure, not only the first
        return f"{arch} {label}: {type(e).__name__}: {str(e)[:2000]}"
    if len(buf.getvalue()) == 0:
        return f"{arch} {label}: empty cubin"
    return None


def compile_all(arch: str, workers: int | None = None) -> tuple[int, list[str]]:
    """Compile every job for `arch`; returns (number compiled, failures).

    Workers are spawned, not forked: cuda.tile reads CUDA_TILE_CACHE_DIR once, at import, so
    only a fresh interpreter honours CUDA_TILE_CACHE_DIR=off (real compiles, no cache hits).
    """
    n = len(jobs())
    workers = workers or os.cpu_count() or 1
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_compile_one, [(i, arch) for i in range(n)]))
    return n, [r for r in results if r]


if __name__ == "__main__":
    import sys
    import time

    for arch in sys.argv[1:] or ["sm_90"]:
        t = time.time()
        n, failures = compile_all(arch)
        print(f"{arch}: {n} specializations, {len(failures)} failures, {time.time() - t:.0f} s")
        for f in failures:
            print(f)
