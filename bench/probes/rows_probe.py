"""GPU probe: the row-tile kernels (rows_kernels.py) on the candidates of
rows_candidates.json against the shipped plans, Liger and the copy ceiling. Graph replay over rotated
inputs (bench.timing), every variant checked against float64 first. Writes $OUT/rows.csv."""

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
DT = {"bfloat16": "bfloat16", "float32": "float32"}
EPS = 1e-6


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def cand_kernel(c):
    from bench.probes import rows_kernels as R

    hints = {"num_worker_warps": c["warps"]}
    if c.get("occ"):
        hints["occupancy"] = c["occ"]
    return (R.fwd_rows if c["op"] == "fwd" else R.bwd_rows).replace_hints(**hints)


def consts(c):
    w = list(c["pieces"]) + [0] * (3 - len(c["pieces"]))
    return c["tm"], w, c["m"] % c["tm"] != 0, sum(c["pieces"]) != c["n"]


def resident(c, sms_threads=2048):
    threads = 32 * c["warps"]
    regs = -(-c["regs"] // 8) * 8
    return max(1, min(32, 65536 // (regs * threads), sms_threads // threads))


def make_inputs(torch, dtype, m, n, nsets, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    tdt = getattr(torch, dtype)
    sets = []
    for _ in range(nsets):
        x = torch.randn((m, n), generator=g, device="cuda").to(tdt)
        w = (1.0 + 0.1 * torch.randn((n,), generator=g, device="cuda")).to(tdt)
        dy = torch.randn((m, n), generator=g, device="cuda").to(tdt)
        sets.append((x, w, dy))
    return sets


def fwd_launcher(torch, ct, c, x, w, y, rstd, grid):
    k = cand_kernel(c)
    tm, W, cm, cn = consts(c)
    llama = x.dtype != torch.float32
    args = (x, w, y, rstd, EPS, 0.0, tm, *W, llama, True, True, cm, cn, False)
    return lambda: ct.launch(torch.cuda.current_stream(), (grid,), k, args)


def bwd_launcher(torch, ct, c, x, dy, w, rstd, dx, partial, dw, grid):
    from cutile_rms.rmsnorm import kernels as K

    k = cand_kernel(c)
    tm, W, cm, cn = consts(c)
    rnd = x.dtype != torch.float32
    args = (x, dy, w, rstd, dx, partial, 0.0, tm, *W, True, rnd, cm, cn, False)
    n = x.shape[1]
    rgrid = max(1, min(-(-n // 256), 132 * 4))

    def run():
        s = torch.cuda.current_stream()
        ct.launch(s, (grid,), k, args)
        ct.launch(s, (rgrid,), K.dw_reduce, (partial, dw, 32, 256))

    return run


def warm(task):
    """Pool worker: run one launch of a task so its kernels are compiled into the disk caches."""
    import cuda.tile as ct
    import torch

    kind, c = task
    try:
        m, n, dtype = c["m"], c["n"], c["dtype"]
        ((x, w, dy),) = make_inputs(torch, dtype, m, n, 1, 1)
        if kind == "cand" and c["op"] == "fwd":
            fwd_launcher(torch, ct, c, x, w, torch.empty_like(x), torch.empty(m, device="cuda"), 1)()
        elif kind == "cand":
            p = torch.empty((1, n), device="cuda")
            bwd_launcher(torch, ct, c, x, dy, w, torch.ones(m, device="cuda"), torch.empty_like(x), p,
                         torch.empty_like(w), 1)()  # fmt: skip
        elif kind == "shipped":
            import cutile_rms

            xg = x.requires_grad_()
            wg = w.requires_grad_()
            y = cutile_rms.rms_norm(xg, wg, EPS)
            torch.autograd.grad(y, [xg, wg], dy)
            with torch.no_grad():
                cutile_rms.rms_norm(x, w, EPS)
        elif kind == "liger":
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction

            xg = x.requires_grad_()
            wg = w.requires_grad_()
            y = LigerRMSNormFunction.apply(xg, wg, EPS, 0.0, "llama", False)
            torch.autograd.grad(y, [xg, wg], dy)
        torch.cuda.synchronize()
        return None
    except Exception as e:
        return f"{kind} {c}: {type(e).__name__}: {e}"[:300]


def ref_fwd(torch, x, w):
    xd = x.double()
    rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS)
    return xd * rstd * w.double(), rstd.squeeze(-1)


def rel(torch, a, b):
    return ((a.double() - b).norm() / b.norm()).item()


class Recorder:
    """Rows of one shape into the probe's CSV, with % of the copy ceiling, and the best of each
    provider for the summary line."""

    COLUMNS = ["op", "dtype", "M", "N", "who", "tm", "pieces", "warps", "occ", "regs", "grid", "us", "pct_copy", "err",
               "copy_us"]  # fmt: skip

    def __init__(self, writer, f, op, dtype, m, n, copy_us):
        es = 2 if dtype == "bfloat16" else 4
        self.writer, self.f = writer, f
        self.base = dict(op=op, dtype=dtype, M=m, N=n, copy_us=round(copy_us, 2))
        self.nbytes = (2 * m * n * es + 4 * m) if op == "fwd" else (3 * m * n * es + 4 * m)
        self.copy_gbps = 2 * m * n * es / copy_us
        self.best = {}

    def __call__(self, who, us, err="", **kw):
        pct = round(100 * (self.nbytes / us) / self.copy_gbps, 1) if us else ""
        row = dict(self.base, who=who, us=round(us, 2) if us else "", pct_copy=pct, err=err, **kw)
        self.writer.writerow(row)
        self.f.flush()
        if us and (who not in self.best or us < self.best[who]["us"]):
            self.best[who] = row
        return row

    def line(self) -> str:
        b = self.base
        out = f"{b['op']:3} {b['dtype']:8} {b['M']:>6}x{b['N']:<6} copy {b['copy_us']:6.1f}us"
        for who in ("shipped", "liger", "cand"):
            if who in self.best:
                r = self.best[who]
                out += f" | {who} {r['us']:7.1f} ({r['pct_copy']:5.1f}%)"
        if "cand" in self.best:
            r = self.best["cand"]
            out += f" [tm {r['tm']} {r['pieces']} w{r['warps']} occ{r['occ']} r{r['regs']} g{r['grid']}]"
        return out


def _cand_fields(c, grid):
    return dict(tm=c["tm"], pieces="+".join(map(str, c["pieces"])), warps=c["warps"], occ=c["occ"] or "",
                regs=c["regs"], grid=grid)  # fmt: skip


def _tol(dtype):
    return 2e-2 if dtype == "bfloat16" else 1e-4


def print_signatures(torch, cands):
    """What the JIT derives for a real (16384, 4096) bf16 array, beside the CPU rule of sass.py."""
    import cuda.tile as ct
    from cuda.tile.compilation import CallingConvention, KernelSignature

    from bench.probes.sass import array

    x = torch.empty((16384, 4096), device="cuda", dtype=torch.bfloat16)
    k = cand_kernel(next(c for c in cands if c["op"] == "fwd"))
    args = (x, x[0], x, torch.empty(16384, device="cuda"), EPS, 0.0, 1, 4096, 0, 0, True, True, True, False, False,
            False)  # fmt: skip
    for cc in ("cutile_python_v1", "cutile_python_v2"):
        try:
            sig = KernelSignature.from_kernel_args(k, args, getattr(CallingConvention, cc)())
            log(cc, "x:", sig.parameters[0])
        except Exception as e:
            log(cc, "signature failed:", type(e).__name__, e)
    log("cpu rule x:", array(ct.bfloat16, (16384, 4096)))


def warm_all(shapes, cands):
    """Compile every candidate, the shipped kernels and Liger's for every shape, in parallel."""
    tasks = [("cand", c) for c in cands]
    for _op, dtype, m, n in shapes:
        tasks += [("shipped", dict(m=m, n=n, dtype=dtype)), ("liger", dict(m=m, n=n, dtype=dtype))]
    tasks = list({json.dumps(t, sort_keys=True): t for t in tasks}.values())
    with mp.get_context("spawn").Pool(14) as pool:
        errs = [e for e in pool.imap_unordered(warm, tasks, chunksize=2) if e]
    log("warmed", len(tasks), "tasks;", len(errs), "errors")
    for e in errs[:20]:
        log("  ", e)


def time_forward(torch, rec, sets, cands, sms):
    import cuda.tile as ct
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    import cutile_rms
    from bench import timing as Tm

    m = sets[0][0].shape[0]
    dtype = str(sets[0][0].dtype).removeprefix("torch.")
    yref, rref = ref_fwd(torch, sets[0][0], sets[0][1])
    ys = [torch.empty_like(s[0]) for s in sets]
    rs = [torch.empty(m, device="cuda") for _ in sets]
    try:
        rec("shipped", Tm.graph_us([lambda s=s: cutile_rms.rms_norm_forward(s[0], s[1], EPS) for s in sets], 50))
    except Exception as e:
        rec("shipped", None, f"{type(e).__name__}: {e}"[:100])
    with torch.no_grad():
        calls = [lambda s=s: LigerRMSNormFunction.apply(s[0], s[1], EPS, 0.0, "llama", False) for s in sets]
        rec("liger", Tm.graph_us(calls, 50))
    for c in cands:
        tiles = -(-m // c["tm"])
        for grid in dict.fromkeys((tiles, min(tiles, sms * resident(c)))):  # one block per row tile; persistent
            calls = [fwd_launcher(torch, ct, c, s[0], s[1], y, r, grid) for s, y, r in zip(sets, ys, rs, strict=True)]
            ys[0].fill_(float("nan"))
            rs[0].fill_(float("nan"))
            calls[0]()
            err = max(rel(torch, ys[0], yref), rel(torch, rs[0], rref))
            if not err < _tol(dtype):
                rec("cand", None, f"wrong {err:.2e}", **_cand_fields(c, grid))
                continue
            rec("cand", Tm.graph_us(calls, 50), **_cand_fields(c, grid))


def time_backward(torch, rec, sets, cands, sms):
    import cuda.tile as ct
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    import cutile_rms
    from bench import timing as Tm

    m, n = sets[0][0].shape
    dtype = str(sets[0][0].dtype).removeprefix("torch.")
    xg = [s[0].clone().requires_grad_() for s in sets]
    wg = [s[1].clone().requires_grad_() for s in sets]
    providers = {"shipped": lambda a, b: cutile_rms.rms_norm(a, b, EPS),
                 "liger": lambda a, b: LigerRMSNormFunction.apply(a, b, EPS, 0.0, "llama", False)}  # fmt: skip
    for who, fn in providers.items():
        try:
            with torch.cuda.stream(Tm.capture_stream()):  # autograd runs backward on the forward's stream
                ys = [fn(a, b) for a, b in zip(xg, wg, strict=True)]
            torch.cuda.current_stream().wait_stream(Tm.capture_stream())
            calls = [lambda y=y, a=a, b=b, s=s: torch.autograd.grad(y, [a, b], s[2], retain_graph=True)
                     for y, a, b, s in zip(ys, xg, wg, sets, strict=True)]  # fmt: skip
            rec(who, Tm.graph_us(calls, 100))
        except Exception as e:
            rec(who, None, f"{type(e).__name__}: {e}"[:150])
    rstds = [torch.rsqrt(s[0].float().pow(2).mean(-1) + EPS) for s in sets]
    x0, w0, dy0 = sets[0]
    xd = x0.double().requires_grad_()
    wd = w0.double().requires_grad_()
    dxr, dwr = torch.autograd.grad(
        xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * wd, [xd, wd], dy0.double()
    )
    dxs = [torch.empty_like(s[0]) for s in sets]
    dws = [torch.empty_like(s[1]) for s in sets]
    for c in cands:
        grid = min(-(-m // c["tm"]), sms * resident(c))
        parts = [torch.empty((grid, n), device="cuda") for _ in sets]
        calls = [bwd_launcher(torch, ct, c, s[0], s[2], s[1], r, dx, p, dw, grid)
                 for s, r, dx, p, dw in zip(sets, rstds, dxs, parts, dws, strict=True)]  # fmt: skip
        dxs[0].fill_(float("nan"))
        dws[0].fill_(float("nan"))
        calls[0]()
        err = max(rel(torch, dxs[0], dxr), rel(torch, dws[0], dwr))
        if not err < _tol(dtype):
            rec("cand", None, f"wrong {err:.2e}", **_cand_fields(c, grid))
            continue
        rec("cand", Tm.graph_us(calls, 100), **_cand_fields(c, grid))


def main():
    import torch

    from bench import timing as Tm

    with open(os.path.join(HERE, "rows_candidates.json")) as f:
        cands = json.load(f)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    log("GPU", torch.cuda.get_device_name(), "SMs", sms, "cands", len(cands))
    print_signatures(torch, cands)
    shapes = {}
    for c in cands:
        shapes.setdefault((c["op"], c["dtype"], c["m"], c["n"]), []).append(c)
    warm_all(shapes, cands)
    summary = []
    with open(os.path.join(OUT, "rows.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, Recorder.COLUMNS)
        writer.writeheader()
        for key in sorted(shapes, key=lambda s: (s[1] != "bfloat16", s[0] != "fwd")):
            if time.time() - T0 > DEADLINE:
                log("deadline: stopping before", key)
                break
            op, dtype, m, n = key
            es = 2 if dtype == "bfloat16" else 4
            sets = make_inputs(torch, dtype, m, n, max(2, math.ceil(2 * 60e6 / (m * n * es))), 7)
            outs = [torch.empty_like(s[0]) for s in sets]
            copy_us = Tm.graph_us(
                [lambda x=s[0], y=y: torch.neg(x, out=y) for s, y in zip(sets, outs, strict=True)], 50
            )
            del outs
            rec = Recorder(writer, f, op, dtype, m, n, copy_us)
            (time_forward if op == "fwd" else time_backward)(torch, rec, sets, shapes[key], sms)
            log(rec.line())
            summary.append(rec.line())
            del sets
            torch.cuda.empty_cache()
    print("\n".join(summary))


if __name__ == "__main__":
    main()
