"""GPU probe of the row-tile kernels (cutile_rms.rows): every candidate plan of
rows_candidates.json (the rules' choice and the plans around it that compiled without spills),
forward on one block per row tile and on a persistent grid, backward persistent, beside the
shipped plans, the core kernels' own, Liger and the copy ceiling of the same run.
Graph replay over rotated inputs (bench.timing); every candidate checked against float64 first.
Writes $OUT/rows.csv and prints one line per shape (best of each provider).

    python -m bench.probes.rows_probe                     # PROBE_SECONDS bounds it (default 470)
    ROWS_CANDIDATES=other.json python -m bench.probes.rows_probe   # another candidate list

A candidate that names "core" (the fields of a cutile_rms.rmsnorm.config.KernelConfig; "dot" for
a chunked backward's row dot) runs that config on the core kernels (rows_candidates.core_plan),
labelled "core-" by kernel, tile, blocks an SM and warps.
A candidate may name the plan keywords of cutile_rms.rows.plan.plan (tile_rows, warps,
occupancy, max_pieces, min_piece, loads, lanes, static, long, chunk, flat, prefetch); one that names
its loads, the lanes kernels or runtime layouts ("static": false) is labelled by them. "casting" (a forward's
kernels.CAST_* code; absent: what the torch API picks, launch.forward_casting) labels it too.
A forward candidate runs on one block per row tile and on a persistent grid, or with
"persistent": null on the rules' grid ("persistent" counts as a keyword: a lanes candidate names
"lanes": true; on one block a tile the lanes forward runs without its loop, y scattered).

It first prints the array constraints the JIT derives for a real tensor beside the CPU rule of
bench/probes/sass.py (what the SASS reports of bench/NOTES.md, session 11, assume), then
compiles every kernel in parallel into the disk caches, then times.
"""

import csv
import json
import math
import multiprocessing as mp
import os
import time

T0 = time.time()
DEADLINE = float(os.environ.get("PROBE_SECONDS", "470"))
OUT = os.environ.get("OUT", "/tmp")
HERE = os.path.dirname(os.path.abspath(__file__))
EPS = 1e-6
LIGER_MAX_N = 65536  # Liger's kernels refuse longer rows (one Triton block a row)


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def make_inputs(torch, dtype, m, n, nsets, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    tdt = getattr(torch, dtype)
    out = []
    for _ in range(nsets):
        x = torch.randn((m, n), generator=g, device="cuda").to(tdt)
        w = (1.0 + 0.1 * torch.randn((n,), generator=g, device="cuda")).to(tdt)
        out.append((x, w, torch.randn((m, n), generator=g, device="cuda").to(tdt)))
    return out


def _plan(c, persistent=None):
    from bench.probes.rows_candidates import core_plan, plan_of

    return core_plan(c) or plan_of(c, persistent)


def _stream(torch):
    """The current stream, read by each launch closure when it runs: under graph capture, the
    capture stream (a stream read when the closure was made leaves the graph empty)."""
    return torch.cuda.current_stream().cuda_stream


def forward_call(torch, c, x, w, y, rstd, persistent):
    """One forward launch of candidate c on (m, n) tensors, as a closure."""
    from cutile_rms._device import device_info
    from cutile_rms.rmsnorm.launch import forward_casting
    from cutile_rms.rows import launch as RL

    m, n = x.shape
    code = 0 if x.dtype != torch.float32 else 1  # llama / gemma (kernels.CAST_*), as the torch API picks
    info = device_info(0)
    p = _plan(c, persistent)
    if "core" in c:  # the core kernels (llama casting, as the torch API gives them)
        from cutile_rms.rmsnorm.launch import run_forward
        from cutile_rms.rmsnorm.torch_impl import int64_workspace

        return p, lambda: run_forward(x, w, y, rstd, EPS, 0.0, code, None, info, _stream(torch),
                                      int64=int64_workspace(x), plan=p)  # fmt: skip
    code = c["casting"] if "casting" in c else forward_casting(code, x, w, y, 0.0)
    x3, y3, r2 = x.view(m, 1, n), y.view(m, 1, n), rstd.view(m, 1)
    from cutile_rms.rmsnorm.torch_impl import int64_workspace

    return p, lambda: RL.run_forward(p, x3, w, y3, r2, EPS, 0.0, code, info, _stream(torch),
                                     empty=lambda shape: w.new_empty(shape), int64=int64_workspace(x))  # fmt: skip


def core_forward_call(torch, x, w, y, rstd):
    """One forward launch on the core kernels' own plan (what the rules' None leaves a row to),
    as a closure: the row tiles' rival wherever they take rows the core kernels ran before."""
    from cutile_rms._device import device_info
    from cutile_rms.rmsnorm.launch import run_forward

    code = 0 if x.dtype != torch.float32 else 1
    info = device_info(0)
    return lambda: run_forward(x, w, y, rstd, EPS, 0.0, code, None, info, _stream(torch))


def backward_call(torch, c, x, dy, w, rstd, dx, dw):
    from cutile_rms._device import device_info
    from cutile_rms.rows import launch as RL

    m, n = x.shape
    code = 0 if x.dtype != torch.float32 else 1
    info = device_info(0)
    p = _plan(c)
    bufs = {}  # the workspaces by shape (long rows take two), made once, outside the timed replays

    def empty_f32(shape):
        if tuple(shape) not in bufs:
            bufs[tuple(shape)] = torch.empty(shape, device="cuda")
        return bufs[tuple(shape)]

    if "core" in c:  # the core kernels
        from cutile_rms.rmsnorm import torch_impl
        from cutile_rms.rmsnorm.launch import run_backward

        return p, lambda: run_backward(x, dy, w, rstd, dx, dw, 0.0, code, empty_f32, info, _stream(torch),
                                       int64=torch_impl.int64_workspace(x), as_words=torch_impl.as_words,
                                       plan=p)  # fmt: skip
    args = (p, x.view(m, 1, n), dy.view(m, 1, n), w, rstd.view(m, 1), dx.view(m, 1, n), dw, 0.0, code, empty_f32)
    return p, lambda: RL.run_backward(*args, info, _stream(torch), empty=lambda shape: w.new_empty(shape))


def warm(task):
    """Pool worker: one launch of a task, so its kernels are compiled into the disk caches."""
    import torch

    kind, c = task
    try:
        ((x, w, dy),) = make_inputs(torch, c["dtype"], c["m"], c["n"], 1, 1)
        rstd = torch.rsqrt(x.float().pow(2).mean(-1) + EPS)
        if kind == "cand" and c["op"] == "forward":
            forward_call(torch, c, x, w, torch.empty_like(x), torch.empty_like(rstd), False)[1]()
        elif kind == "cand":
            backward_call(torch, c, x, dy, w, rstd, torch.empty_like(x), torch.empty_like(w))[1]()
        elif kind == "shipped":
            import cutile_rms

            xg, wg = x.requires_grad_(), w.requires_grad_()
            torch.autograd.grad(cutile_rms.rms_norm(xg, wg, EPS), [xg, wg], dy)
            with torch.no_grad():
                cutile_rms.rms_norm(x, w, EPS)
        elif kind == "liger" and c["n"] <= LIGER_MAX_N:
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction

            xg, wg = x.requires_grad_(), w.requires_grad_()
            torch.autograd.grad(LigerRMSNormFunction.apply(xg, wg, EPS, 0.0, "llama", False), [xg, wg], dy)
        torch.cuda.synchronize()
        return None
    except Exception as e:
        return f"{kind} {c}: {type(e).__name__}: {e}"[:300]


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


class Recorder:
    """Rows of one shape into the CSV, with % of the copy ceiling, and the best per provider."""

    COLUMNS = ["op", "dtype", "M", "N", "who", "tile", "widths", "warps", "occupancy", "regs", "grid", "us",
               "pct_copy", "err", "copy_us"]  # fmt: skip

    def __init__(self, writer, f, op, dtype, m, n, copy_us):
        es = 4 if dtype == "float32" else 2
        self.writer, self.f = writer, f
        self.base = dict(op=op, dtype=dtype, M=m, N=n, copy_us=round(copy_us, 2))
        self.nbytes = (2 * m * n * es + 4 * m) if op == "forward" else (3 * m * n * es + 4 * m)
        self.copy_gbps = 2 * m * n * es / copy_us
        self.best = {}
        self.failed = []  # candidates that failed or gave a wrong answer: (who, err)

    def __call__(self, who, us, err="", c=None, p=None):
        pct = round(100 * (self.nbytes / us) / self.copy_gbps, 1) if us else ""
        kw = {}
        if p is not None and hasattr(p, "widths"):  # a row-tile plan
            kw = dict(tile=f"{p.tile_a}x{p.tile_b}", widths="+".join(str(w) for w in p.widths if w), warps=p.warps,
                      occupancy=p.occupancy, regs=c.get("regs", ""), grid=p.grid)  # fmt: skip
        elif p is not None:  # a core plan (rmsnorm.config.ForwardPlan / BackwardPlan: its blocks a row)
            occupancy, warps = p.hints
            splits = getattr(p, "splits", getattr(p, "num_chunks", 1))
            grid = getattr(p, "grid", getattr(p, "partial_rows", ""))
            kw = dict(tile=f"{p.tile_m}x{p.tile_n}", widths=f"{p.kernel}/{splits}", warps=warps, occupancy=occupancy,
                      regs="", grid=grid)  # fmt: skip
        row = dict(self.base, who=who, us=round(us, 2) if us else "", pct_copy=pct, err=err, **kw)
        self.writer.writerow(row)
        self.f.flush()
        if us and (who not in self.best or us < self.best[who]["us"]):
            self.best[who] = row
        if not us and err:
            self.failed.append((who, err))

    def line(self) -> str:
        b = self.base
        out = f"{b['op']:8} {b['dtype']:8} {b['M']:>6}x{b['N']:<6} copy {b['copy_us']:6.1f}us"
        for who in sorted(self.best, key=lambda w: (w not in ("shipped", "liger"), w)):
            if who in self.best:
                r = self.best[who]
                out += f" | {who} {r['us']:7.1f} ({r['pct_copy']:5.1f}%)"
                if who.startswith(("rows", "core-")):
                    out += f" [{r['tile']} {r['widths']} w{r['warps']} o{r['occupancy']} r{r['regs']}]"
        for who, err in self.failed:
            out += f" | {who} {err[:80]}"
        return out


def print_signatures(torch):
    """What the JIT derives for a real (16384, 4096) bf16 array, beside sass.py's CPU rule."""
    import cuda.tile as ct
    from cuda.tile.compilation import CallingConvention, KernelSignature

    from bench.probes.sass import array
    from cutile_rms.rows import launch as RL
    from cutile_rms.rows.plan import plan

    x = torch.empty((16384, 1, 4096), device="cuda", dtype=torch.bfloat16)
    p = plan("forward", 16384, 1, 4096, 2, 132)
    values = dict(RL.constants(p, 0, True), x=x, r=x, s_out=x, w=x[0, 0], y=x,
                  rstd_out=torch.empty((16384, 1), device="cuda"), eps=EPS, offset=0.0)  # fmt: skip
    args = RL.arguments("forward", values)
    for cc in ("cutile_python_v1", "cutile_python_v2"):
        try:
            sig = KernelSignature.from_kernel_args(RL.KERNELS["forward"][0], args, getattr(CallingConvention, cc)())
            log(cc, "x:", sig.parameters[0])
        except Exception as e:
            log(cc, "signature failed:", type(e).__name__, e)
    log("cpu rule x:", array(ct.bfloat16, (16384, 1, 4096)))


def warm_all(shapes, cands):
    tasks = [("cand", c) for c in cands]
    for _op, dtype, m, n in shapes:
        tasks += [("shipped", dict(m=m, n=n, dtype=dtype)), ("liger", dict(m=m, n=n, dtype=dtype))]
    tasks = list({json.dumps(t, sort_keys=True): t for t in tasks}.values())
    with mp.get_context("spawn").Pool(14) as pool:
        errs = [e for e in pool.imap_unordered(warm, tasks, chunksize=2) if e]
    log("warmed", len(tasks), "tasks;", len(errs), "errors")
    for e in errs[:20]:
        log("  ", e)


def _core_label(c):
    """A core candidate's label: kernel, tile (and tail tile), blocks an SM, warps."""
    k = c["core"]
    tail = f"+{k['tail']}" if k.get("tail") else ""
    return f"core-{k['kernel']}-{k.get('tile_m', 1)}x{k['tile_n']}{tail}-o{k['blocks_per_sm']}-w{k.get('warps')}"


def _loads_label(c):
    """A candidate that names its loads (rows.kernels.LOADS_*), the lanes or long-row kernels or
    runtime layouts ("static": false) is labelled by them."""
    lanes = {True: "-lanes", False: "-nolanes"}.get(c.get("lanes"), "") + {True: "-long", False: "-nolong"}.get(
        c.get("long"), ""
    )
    static = {False: "-runtime", "force": "-static"}.get(c.get("static"), "")
    unroll = {True: "-unroll", False: "-rolled"}.get(c.get("unroll"), "") + ("-onepass" if c.get("onepass") else "")
    unroll += {True: "-prefetch", False: "-noprefetch"}.get(c.get("prefetch"), "")
    lanes += f"-L{c['lane_elems']}" if c.get("lane_elems") else ""
    lanes += f"-cast{c['casting']}" if "casting" in c else ""
    if "flat" in c:
        lanes += {True: "-flat", None: "-flatrule", False: "-noflat"}[c["flat"]]
        lanes += f"-c{c['chunk']}" if c.get("chunk") else ""
        lanes += f"-dot{c['dot_chunk']}" if c.get("dot_chunk") else ""
    unroll += "-noloop" if c.get("loop") is False else ""
    unroll += f"-o{c['occupancy']}" if c.get("occupancy") else ""
    return static + lanes + unroll + ("" if c.get("loads") is None else ("-plain", "-tma", "-gather")[c["loads"]])


def _tol(dtype):
    return 1e-4 if dtype == "float32" else 2e-2


def time_forward(torch, rec, sets, cands):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    import cutile_rms
    from bench import timing as Tm

    m = sets[0][0].shape[0]
    dtype = str(sets[0][0].dtype).removeprefix("torch.")
    xd = sets[0][0].double()
    rref = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS)
    yref, rref = xd * rref * sets[0][1].double(), rref.squeeze(-1)
    ys = [torch.empty_like(s[0]) for s in sets]
    rs = [torch.empty(m, device="cuda") for _ in sets]
    rec("shipped", Tm.graph_us([lambda s=s: cutile_rms.rms_norm_forward(s[0], s[1], EPS) for s in sets], 50))
    rec("core", Tm.graph_us([core_forward_call(torch, s[0], s[1], y, r) for s, y, r in zip(sets, ys, rs, strict=True)],
                            50))  # fmt: skip
    if sets[0][0].shape[1] <= LIGER_MAX_N:
        with torch.no_grad():
            rec("liger", Tm.graph_us([lambda s=s: LigerRMSNormFunction.apply(s[0], s[1], EPS, 0.0, "llama", False)
                                      for s in sets], 50))  # fmt: skip
    for c in cands:  # "persistent": null in a candidate: the rules' grid only (a core candidate: its config's)
        for persistent in (c.get("persistent"),) if "persistent" in c or "core" in c else (False, True):
            who = {None: "rows-rules", False: "rows", True: "rows-persistent"}[persistent] + _loads_label(c)
            who = _core_label(c) if "core" in c else who

            def calls(c=c, persistent=persistent):
                return [
                    forward_call(torch, c, s[0], s[1], y, r, persistent) for s, y, r in zip(sets, ys, rs, strict=True)
                ]

            time_candidate(rec, who, c, calls, (ys[0], rs[0]), (yref, rref), dtype, 50)


def time_candidate(rec, who, c, make_calls, outs, refs, dtype, est_us):
    """One candidate: make_calls() gives its (plan, call) per input set; the first set's outputs
    outs are poisoned, computed and checked against the float64 refs, then every call is timed
    by graph replay. A candidate that cannot plan, compile or launch is recorded as failed, not
    the end of the probe."""
    from bench import timing as Tm

    try:
        calls = make_calls()
        p = calls[0][0]
        for out in outs:
            out.fill_(float("nan"))
        calls[0][1]()
    except Exception as e:  # noqa: BLE001 (any failure of one candidate)
        rec(who, None, f"failed {type(e).__name__}: {e}"[:200], c)
        return
    err = max(rel(out, ref) for out, ref in zip(outs, refs, strict=True))
    if not err < _tol(dtype):
        rec(who, None, f"wrong {err:.2e}", c, p)
        return
    rec(who, Tm.graph_us([f for _, f in calls], est_us), "", c, p)


def time_backward(torch, rec, sets, cands):
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    import cutile_rms
    from bench import timing as Tm
    from cutile_rms.rmsnorm import torch_impl

    dtype = str(sets[0][0].dtype).removeprefix("torch.")
    xg = [s[0].clone().requires_grad_() for s in sets]
    wg = [s[1].clone().requires_grad_() for s in sets]
    providers = {"shipped": lambda a, b: cutile_rms.rms_norm(a, b, EPS),
                 "liger": lambda a, b: LigerRMSNormFunction.apply(a, b, EPS, 0.0, "llama", False)}  # fmt: skip
    for who, fn in providers.items():
        if who == "liger" and sets[0][0].shape[1] > LIGER_MAX_N:
            continue
        with torch.cuda.stream(Tm.capture_stream()):  # autograd runs backward on the forward's stream
            ys = [fn(a, b) for a, b in zip(xg, wg, strict=True)]
        torch.cuda.current_stream().wait_stream(Tm.capture_stream())
        calls = [lambda y=y, a=a, b=b, s=s: torch.autograd.grad(y, [a, b], s[2], retain_graph=True)
                 for y, a, b, s in zip(ys, xg, wg, sets, strict=True)]  # fmt: skip
        rec(who, Tm.graph_us(calls, 100))
    rstds = [torch.rsqrt(s[0].float().pow(2).mean(-1) + EPS) for s in sets]
    code = 0 if dtype != "float32" else 1
    # the core kernels' own backward plan: torch_impl.backward with a mode other than None and "rows"
    core = [lambda s=s, r=r: torch_impl.backward(s[0], s[2], s[1], r, 0.0, code, None, mode="core")
            for s, r in zip(sets, rstds, strict=True)]  # fmt: skip
    rec("core", Tm.graph_us(core, 100))
    x0, w0, dy0 = sets[0]
    xd, wd = x0.double().requires_grad_(), w0.double().requires_grad_()
    dxr, dwr = torch.autograd.grad(
        xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * wd, [xd, wd], dy0.double()
    )
    dxs = [torch.empty_like(s[0]) for s in sets]
    dws = [torch.empty_like(s[1]) for s in sets]
    for c in cands:
        who = _core_label(c) if "core" in c else "rows" + _loads_label(c)

        def calls(c=c):
            return [backward_call(torch, c, s[0], s[2], s[1], r, dx, dw)
                    for s, r, dx, dw in zip(sets, rstds, dxs, dws, strict=True)]  # fmt: skip

        time_candidate(rec, who, c, calls, (dxs[0], dws[0]), (dxr, dwr), dtype, 100)


def main():
    import torch

    from bench import timing as Tm

    with open(os.environ.get("ROWS_CANDIDATES") or os.path.join(HERE, "rows_candidates.json")) as f:
        cands = json.load(f)
    log("GPU", torch.cuda.get_device_name(), "cands", len(cands))
    core = [c for c in cands if _plan(c, c.get("persistent")) is None]
    if core:  # the rules leave these rows to the core kernels: "shipped" times them
        log(len(core), "candidates without a row-tile plan, timed as shipped:", [(c["dtype"], c["n"]) for c in core])
        cands = [c for c in cands if c not in core]
    print_signatures(torch)
    shapes = {}
    for c in cands:
        shapes.setdefault((c["op"], c["dtype"], c["m"], c["n"]), []).append(c)
    warm_all(shapes, cands)
    summary = []
    with open(os.path.join(OUT, "rows.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, Recorder.COLUMNS)
        writer.writeheader()
        for key in sorted(shapes, key=lambda s: (s[1] != "bfloat16", s[0] != "forward")):
            if time.time() - T0 > DEADLINE:
                log("deadline: stopping before", key)
                break
            op, dtype, m, n = key
            es = 4 if dtype == "float32" else 2
            sets = make_inputs(torch, dtype, m, n, max(2, math.ceil(2 * 60e6 / (m * n * es))), 7)
            outs = [torch.empty_like(s[0]) for s in sets]
            copy_us = Tm.graph_us(
                [lambda x=s[0], y=y: torch.neg(x, out=y) for s, y in zip(sets, outs, strict=True)], 50
            )
            del outs
            rec = Recorder(writer, f, op, dtype, m, n, copy_us)
            (time_forward if op == "forward" else time_backward)(torch, rec, sets, shapes[key])
            log(rec.line())
            summary.append(rec.line())
            del sets
            torch.cuda.empty_cache()
    print("\n".join(summary))


if __name__ == "__main__":
    main()
