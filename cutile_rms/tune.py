"""Autotune the RMSNorm kernels for this machine's GPU and remember the result.

    import cutile_rms.tune
    cutile_rms.tune.tune([(16384, 4096)], torch.bfloat16)      # once, e.g. at install time

    python -m cutile_rms.tune --n 4096 8192 --dtype bfloat16    # the same from a shell

Nothing ever searches unless asked: a plan takes, in order, the per-device cache this writes,
the checked-in table of the GPU's architecture, and the architecture-neutral defaults
(cutile_rms.rmsnorm.config). A search times every candidate of the row's bucket with
``cuda.tile.tune.exhaustive_search`` (a few seconds per bucket once compiled; compiling the
candidates the first time takes longer) and stores the winners, per (op, element size, row
bucket), in the cache file named by :func:`cutile_rms.rmsnorm.tables.cache_path`.

The search times single launches after an L2 flush. Those times carry a few microseconds of
fixed cost and about 1% of noise, as much as the gaps between the best candidates, so each
search's fastest few (autotune.RUNNERS_UP) are timed again the way a benchmark or a
CUDA-graph training step runs them, and the fastest of those wins: many launches replayed from
one CUDA graph over input sets rotated so that every launch reads from DRAM (median of
GRAPH_REPS replays). The table records that time. The kinds a single launch cannot time (the
split kernels, whose slots start at zero at every launch, and the packed 16-bit backward:
autotune.graph_candidates) are timed that way only, beside the runners-up, through the same
launchers as the torch API (slots zeroed inside the graph, as each call zeroes its own).

``--table PATH`` also writes the winners as a standalone table: that is how
``cutile_rms/rmsnorm/tuned/sm_90.json`` was made (see its "made_by" field).
"""

import argparse
import dataclasses
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from cutile_rms.rmsnorm import autotune as A
from cutile_rms.rmsnorm import config as C
from cutile_rms.rmsnorm import tables
from cutile_rms.rmsnorm.launch import casting_code, run_backward, run_forward
from cutile_rms.rmsnorm.torch_impl import as_words, int64_workspace, launch_target

__all__ = ["tune"]

OPS = ("forward", "backward")
# The training-set size: x holds 64 Mi elements, beyond the H200's L2 (as in bench/cases.py).
DEFAULT_ELEMS = 64 * 2**20
DEFAULT_N = [1 << k for k in range(C.SMALLEST_BUCKET.bit_length() - 1, C.LARGEST_BUCKET.bit_length())]


def _inputs(m, n, dtype, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(m, n, device=device, dtype=torch.float32, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(n, device=device, generator=g)).to(dtype)
    dy = torch.randn(m, n, device=device, dtype=torch.float32, generator=g).to(dtype)
    return x, w, dy


def _tune_one(m, n, dtype, device, ops, candidates=None):
    """Results of searching the given ops for an (m, n) problem (inputs are random). A full
    search (candidates=None) re-times its runners-up by graph replay (see the module doc)."""
    stream, info = launch_target(device)
    x, w, dy = _inputs(m, n, dtype, device, seed=n)
    casting = casting_code("llama", dtype == torch.float32)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    rstd = torch.empty(m, device=device, dtype=torch.float32)
    run_forward(x, w, y, rstd, 1e-6, 0.0, casting, None, info, stream)  # rstd for the backward

    def empty_f32(shape):
        return torch.empty(shape, device=device, dtype=torch.float32)

    results = []
    if "forward" in ops:
        results.append(A.tune_forward(x, w, y, rstd, 1e-6, 0.0, casting, info, stream, candidates))
    if "backward" in ops:
        results += A.tune_backward(x, dy, w, rstd, dx, 0.0, casting, empty_f32, info, stream, candidates)
    torch.cuda.synchronize(device)
    if candidates is None:
        results = _rerank(results, x, w, dy, casting, info, empty_f32)
    return results


# Graph re-timing of the runners-up: replays per candidate, and the launches one graph holds
# (about GRAPH_TARGET_US of work, as in bench/timing.py).
GRAPH_REPS = 15
GRAPH_TARGET_US = 2000.0
MAX_INPUT_SETS = 64


def _graph_us(launch, sets: int, est_us: float, device) -> float:
    """Median time per call of launch(set_index, stream), from CUDA-graph replay."""
    inner = max(5, min(400, int(GRAPH_TARGET_US / max(est_us, 0.5))))
    s = torch.cuda.Stream(device)
    s.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(s):
        for i in range(sets):  # warm-up (and compile) outside the capture
            launch(i, s)
    torch.cuda.synchronize(device)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for k in range(inner):
            launch(k % sets, s)
    g.replay()
    torch.cuda.synchronize(device)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(GRAPH_REPS)]
    for a, b in events:
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize(device)
    return statistics.median(a.elapsed_time(b) * 1000.0 / inner for a, b in events)


def _rerank(results, x, w, dy, casting, info, empty_f32):
    """results with each forward/backward winner replaced by the fastest of its runners-up and
    of the kinds only graph replay times (autotune.graph_candidates; one that fails to compile
    or launch is skipped and counted as failed), under graph replay (and that time as its us)."""
    m, n = x.shape
    props = torch.cuda.get_device_properties(x.device)
    per_set = 4 * x.numel() * x.element_size()
    sets = max(2, min(MAX_INPUT_SETS, -(-2 * int(props.L2_cache_size) // per_set)))
    xs = [x] + [torch.randn_like(x) for _ in range(sets - 1)]
    dys = [dy] + [torch.randn_like(dy) for _ in range(sets - 1)]
    ys, dxs = [torch.empty_like(x) for _ in xs], [torch.empty_like(x) for _ in xs]
    rs = [empty_f32((m,)) for _ in xs]
    stream = launch_target(x.device)[0]
    for i in range(sets):  # each set's rstd, for the backward
        run_forward(xs[i], w, ys[i], rs[i], 1e-6, 0.0, casting, None, info, stream)
    dw, int64, blocks = torch.empty_like(w), int64_workspace(x), C.split_blocks(info.num_sms)

    def words(t):  # (a packed plan whose views fail would run the planner's plan instead: refuse)
        v = as_words(t)
        if v is None:
            raise ValueError("no int32 word view for the packed kernel")
        return v

    dots = {r.op.replace("backward_dot", "backward"): r.config for r in results if r.op.startswith("backward_dot")}
    out = []
    for r in results:
        if not r.ranked or r.op.startswith("backward_dot"):
            out.append(r)
            continue
        forward = r.op.startswith("forward")
        extra = A.graph_candidates("forward" if forward else "backward", n, x.element_size())
        if not forward:  # what the planner runs of a split seed (config.narrow_split), each once
            extra = list(dict.fromkeys(C.narrow_split(c, n, blocks) for c in extra))
        extra = [c for c in extra if c.kernel != "split" or C.split_count(n, c.tile_n) <= blocks]
        times, failed = {}, 0
        for cfg, us in (*r.ranked, *((c, r.us) for c in extra)):
            if forward:
                plan = C.forward_plan_from(cfg, m, info.num_sms, "persistent", n)

                def launch(i, s, plan=plan):
                    run_forward(xs[i], w, ys[i], rs[i], 1e-6, 0.0, casting, None, info, s, int64, plan)
            else:
                plan = C.backward_plan_from(cfg, dots.get(r.op, cfg), m, n, info.num_sms)

                def launch(i, s, plan=plan):
                    run_backward(xs[i], dys[i], w, rs[i], dxs[i], dw, 0.0, casting, empty_f32, info, s, int64,
                                 words, plan)  # fmt: skip

            try:
                times[cfg] = _graph_us(launch, sets, us, x.device)
            except Exception as e:  # noqa: BLE001 (as exhaustive_search skips a candidate that fails)
                if cfg not in extra:
                    raise
                print(f"n={n} {r.op} {cfg}: skipped: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
                failed += 1
        best = min(times, key=times.get)
        ranked = tuple(sorted(times.items(), key=lambda kv: kv[1]))
        out.append(dataclasses.replace(r, config=best, us=times[best], ranked=ranked, failed=r.failed + failed,
                                       timed=r.timed + len(extra) - failed))  # fmt: skip
    return out


def tune(shapes, dtype=torch.bfloat16, device=None, *, ops=OPS, save=True, made_by="cutile_rms.tune.tune()"):
    """Search the best kernel configs for each (m, n) in ``shapes`` on ``device`` (default: the
    current CUDA device) and, with ``save``, store them in that device's tuning cache, which
    every later plan on a GPU of the same model reads. Returns the list of
    :class:`cutile_rms.rmsnorm.autotune.Result`.

    One search covers the row bucket of n (n rounded up to a power of two; the winner is
    recorded for the bucket, so a search at a length that is not a power of two refines every
    length of its bucket: tables hold no exact lengths) for the dtype's
    element size, and one of two row classes: m <= config.FEW_ROWS (decode-sized problems) or
    more (take an m whose input is beyond the L2 cache, as in training).
    """
    device = _current() if device is None else torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"tuning times kernels on a CUDA device, got {device}")
    if dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise TypeError(f"dtype must be bfloat16, float16 or float32, got {dtype}")
    bad = [op for op in ops if op not in OPS]
    if bad:
        raise ValueError(f"ops must be among {OPS}, got {bad}")
    results = []
    with torch.cuda.device(device):
        for m, n in shapes:
            if m < 1 or n < 1:
                raise ValueError(f"shapes must be positive (m, n) pairs, got {(m, n)}")
            results += _tune_one(m, n, dtype, device, ops)
        if save and results:
            info = launch_target(device)[1]
            tables.record(info.key, info.name, [r.entry() for r in results], made_by)
            C.clear_plan_caches()
    return results


WARM_SLICE = 6  # candidates per compile job: small slices keep every worker busy


def _warm_jobs(jobs):
    for m, n, d, ops in jobs:
        for op in ops:
            space = A.forward_candidates(n, m) if op == "forward" else A.backward_candidates(n)
            for i in range(0, len(space), WARM_SLICE):
                yield m, n, d, op, space[i : i + WARM_SLICE]


def _warm(args):
    """Compile some candidates in a worker process, by running their search there (the
    timings are thrown away: processes that share a GPU disturb each other's)."""
    m, n, dtype_name, op, candidates = args
    try:
        _tune_one(m, n, getattr(torch, dtype_name), _current(), (op,), candidates)
    except Exception as e:  # noqa: BLE001 (reported; the real search reports it again)
        return f"n={n} {dtype_name} {op}: {type(e).__name__}: {str(e)[:200]}"
    return None


def _current():
    return torch.device("cuda", torch.cuda.current_device())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cutile_rms.tune", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=DEFAULT_N, help="row lengths (default: every bucket)")
    p.add_argument("--elems", type=int, default=DEFAULT_ELEMS, help="m = elems // n (default 64 Mi)")
    p.add_argument("--m", type=int, help="rows, instead of elems // n (m <= 1024 fills the few-rows entries)")
    p.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"], choices=["bfloat16", "float16", "float32"])
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS)
    p.add_argument("--table", help="also write the winners as a standalone table to this path")
    p.add_argument("--no-save", action="store_true", help="do not write the device's tuning cache")
    p.add_argument("--compile-workers", type=int, default=0,
                   help="compile the candidates in this many processes first (fills cuTile's disk cache)")  # fmt: skip
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("cutile_rms.tune: no CUDA GPU found; tuning times kernels on a GPU.")
        return 2
    made_by = "python -m cutile_rms.tune " + " ".join(sys.argv[1:] if argv is None else argv)
    jobs = [(args.m or max(1, args.elems // n), n, d, tuple(args.ops)) for d in args.dtype for n in args.n]
    if args.compile_workers > 0:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.compile_workers, mp_context=ctx) as pool:
            errors = [e for e in pool.map(_warm, list(_warm_jobs(jobs))) if e]
        print(f"compiled the candidates of {len(jobs)} buckets; errors: {errors or 'none'}", flush=True)
    results = []
    for m, n, d, ops in jobs:
        res = tune([(m, n)], getattr(torch, d), ops=ops, save=not args.no_save, made_by=made_by)
        for r in res:
            c = r.config
            line = f"{d:9s} {r.op:13s} n={n:6d} m={m:7d}: {c.kernel:7s} {c.tile_m:3d} x {c.tile_n:5d}"
            print(f"{line} @ {c.blocks_per_sm}/SM {r.us:9.2f} us ({r.timed} timed, {r.failed} failed)", flush=True)
        results += res
    info = launch_target(_current())[1]
    if args.table:
        tables.write(Path(args.table), tables.document([r.entry() for r in results], info.name, info.arch, made_by))
        print(f"wrote {args.table}")
    if not args.no_save:
        print(f"tuning cache: {tables.cache_path(info.key)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
