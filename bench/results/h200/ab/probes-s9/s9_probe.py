"""Session-9 decode probes (H200; run from a probe9/ folder beside the checkout at c1d3bd5,
PROBE2/3/4=1 select probes 2-4; bench/NOTES.md session 9). Probe 1: the fixed cost of a few-row forward. One block per TILE_M rows
(no loop), inference forward, loads/stores via TMA or plain, on elements or on int32 words of
16-bit pairs (packed); floors (an empty kernel, a copy kernel) and Liger in the same run. Graph
replay over rotated input sets, 3 interleaved rounds, median [min-max]; every variant checked
against a float64 reference first."""
import multiprocessing as mp, os, sys, time
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FTE

sys.path.insert(0, "probe9")
sys.path.insert(0, ".")
SHAPES = [(1, 4096), (1, 8192), (32, 4096), (32, 8192), (256, 4096), (256, 8192)]
DTYPES = ("bfloat16", "float16", "float32")
PROBE3 = os.environ.get("PROBE3") == "1"
PROBE4 = os.environ.get("PROBE4") == "1"
if PROBE4:
    SHAPES = [(32, 4096), (32, 8192), (256, 4096), (256, 8192)]
if os.environ.get("PROBE2") == "1":
    SHAPES = [(1, 4096), (1, 8192), (32, 4096)]
    DTYPES = ("bfloat16", "float32")
FLAGS = [(True, True, False), (False, False, False), (False, True, False), (True, False, False),
         (False, False, True), (True, True, True)]


PROBE2 = os.environ.get("PROBE2") == "1"


def specs(dt, m, n):
    if PROBE4:
        out = [("liger",), ("copy", 1, False, False, False, 8)]
        kinds = ["nb"] if dt == "float32" else ["nb", "nbp"]
        for kind in kinds:
            for tm in (1, 2, 4, 8):
                for w in (4, 8):
                    out.append((kind, False, False, False, w, tm))
        return out
    if PROBE3:
        out = [("shipped",), ("liger",), ("copy", 1, False, False, False, 8)]
        kinds = ["nb"] if dt == "float32" else (["nb", "nbp"] if dt == "bfloat16" else ["nbp"])
        for kind in kinds:
            for lt, wt in ((False, False), (False, True), (True, True)):
                for w in (4, 8):
                    for early in (False, True):
                        out.append((kind, lt, wt, early, w))
        return out
    if PROBE2:
        out = [("shipped",), ("liger",), ("copy", 1, False, False, False, 8)]
        for part in (0, 1, 2, 4):
            for lt, wt in ((False, False), (False, True), (True, True)):
                for w in (4, 8):
                    out.append(("parts", part, lt, wt, 0, w))
        for lat in (1, 5, 10):
            for w in (4, 8):
                out.append(("parts", 3, False, False, lat, w))
        if dt != "float32":
            out += [("packed", 1, False, False, False, 8), ("packed", 1, False, True, False, 8)]
        return out
    out = [("shipped",), ("liger",), ("copy", 1, True, True, False, 4), ("copy", 1, False, False, False, 4),
           ("empty",)]
    tms = [t for t in (1, 2, 4, 8) if t <= max(1, m // 8) or t == 1]
    kinds = ["dec"] if dt == "float32" else (["dec", "packed"] if dt == "bfloat16" else ["packed"])
    for kind in kinds:
        for tm in tms:
            for f in FLAGS:
                for w in (4, 8):
                    out.append((kind, tm, *f, w))
    return out


def make_call(spec, dt, m, n, t, di):
    import torch, cuda.tile as ct
    from cutile_rms.rmsnorm import launch as L
    import s9_kernels as S
    cs = torch.cuda.current_stream
    kind = spec[0]
    if kind == "shipped":
        plan = L.forward_plan(t["x"][0], None, di)
        casting = L.casting_code("llama", dt == "float32")
        label = f"shipped {plan.kernel} {plan.tile_m}x{plan.tile_n} occ{plan.occupancy} w{plan.warps} mem{plan.memory} grid {plan.grid} {plan.schedule}"
        def call(i):
            L.launch_forward(plan, t["x"][i], t["w"], t["y"][i], None, 1e-6, 0.0, casting, cs(), None)
        return label, call
    if kind == "liger":
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        def call(i):
            LigerRMSNormFunction.apply(t["x"][i], t["w"], 1e-6, 0.0, "llama", False)
        return "liger", call
    if kind == "empty":
        def call(i):
            ct.launch(cs(), (1,), S.empty_k, (t["e"],))
        return "empty kernel (1 block, 1 store)", call
    if kind in ("nb", "nbp"):
        lt, wt, early, w = spec[1:5]
        tm = spec[5] if len(spec) > 5 else 1
        lab = f"{kind} {tm}x{n} w{w} L{'tma' if lt else 'pl'} W{'tma' if wt else 'pl'} early{int(early)}"
        if kind == "nb":
            k = S.dec_nb.replace_hints(num_worker_warps=w)
            def call(i):
                ct.launch(cs(), (m // tm,), k, (t["x"][i], t["w"], t["y"][i], 1e-6, tm, n, lt, wt, early))
        else:
            k = S.dec_nb_packed.replace_hints(num_worker_warps=w)
            half = 0 if dt == "bfloat16" else 1
            def call(i):
                ct.launch(cs(), (m // tm,), k, (t["x32"][i], t["w32"], t["y32"][i], 1e-6, n, tm, n // 2, half, lt, wt, early))
        return lab, call
    if kind == "parts":
        part, lt, wt, lat, w = spec[1:]
        k = S.dec_parts.replace_hints(num_worker_warps=w)
        lab = f"parts{part} 1x{n} w{w} L{'tma' if lt else 'pl'} W{'tma' if wt else 'pl'} lat{lat}"
        def call(i):
            ct.launch(cs(), (m,), k, (t["x"][i], t["w"], t["y"][i], t["r"][i], 1e-6, 1, n, part, lt, wt, lat))
        return lab, call
    tm, lt, wt, st, w = spec[1:]
    grid = -(-m // tm)
    lab = f"{kind} {tm}x{n} g{grid} w{w} L{'tma' if lt else 'pl'} W{'tma' if wt else 'pl'} S{'tma' if st else 'pl'}"
    if kind == "copy":
        k = S.copy_k.replace_hints(num_worker_warps=w)
        def call(i):
            ct.launch(cs(), (grid,), k, (t["x"][i], t["y"][i], tm, n, lt, st))
        return lab, call
    if kind == "dec":
        k = S.dec_fwd.replace_hints(num_worker_warps=w)
        def call(i):
            ct.launch(cs(), (grid,), k, (t["x"][i], t["w"], t["y"][i], 1e-6, tm, n, lt, wt, st))
        return lab, call
    k = S.dec_fwd_packed.replace_hints(num_worker_warps=w)
    half = 0 if dt == "bfloat16" else 1
    def call(i):
        ct.launch(cs(), (grid,), k, (t["x32"][i], t["w32"], t["y32"][i], 1e-6, n, tm, n // 2, half, lt, wt, st))
    return lab, call


def inputs(dt, m, n, sets):
    import torch
    d = getattr(torch, dt)
    xs = [torch.randn(m, n, device="cuda", dtype=d) for _ in range(sets)]
    ys = [torch.empty_like(x) for x in xs]
    w = 1 + 0.1 * torch.randn(n, device="cuda", dtype=d)
    t = {"x": xs, "y": ys, "w": w, "e": torch.empty(16, device="cuda"),
         "r": [torch.empty(m, device="cuda") for _ in xs]}
    if dt != "float32":
        t["x32"] = [x.view(torch.int32) for x in xs]
        t["y32"] = [y.view(torch.int32) for y in ys]
        t["w32"] = w.view(torch.int32)
    return t


def warm(job):
    import torch
    from cutile_rms import _device
    dt, m, n, spec = job
    try:
        t0 = time.time()
        t = inputs(dt, m, n, 1)
        made = make_call(spec, dt, m, n, t, _device.device_info(0))
        made[1](0)
        torch.cuda.synchronize()
        return f"compiled {job} {time.time() - t0:.1f}s"
    except Exception as e:  # noqa: BLE001
        return f"FAILED {job}: {type(e).__name__}: {str(e)[-300:]}"


def main():
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 150
    jobs = [(dt, m, n, s) for dt in DTYPES for (m, n) in SHAPES for s in specs(dt, m, n)
            if s[0] not in ("shipped", "liger")]
    ok = set()
    t0 = time.time()
    pool = ProcessPoolExecutor(15, mp_context=mp.get_context("spawn"))
    futs = {pool.submit(warm, j): j for j in jobs}
    for f, j in futs.items():
        try:
            r = f.result(timeout=max(1, budget - (time.time() - t0)))
        except FTE:
            r = f"TIMEOUT {j}"
        if not r.startswith("compiled"):
            print(r[:400], flush=True)
        else:
            ok.add(j)
    pool.shutdown(wait=False, cancel_futures=True)
    print(f"warm-up {time.time() - t0:.0f}s, {len(ok)} of {len(jobs)} compiled", flush=True)
    import torch
    from bench import timing as T
    from cutile_rms import _device
    di = _device.device_info(0)
    tcalls = lambda calls: T.graph_us(calls, 3.0)
    for dt in DTYPES:
        for (m, n) in SHAPES:
            d = getattr(torch, dt)
            sets = T.num_sets(2 * m * n * d.itemsize)
            t = inputs(dt, m, n, sets)
            x0 = t["x"][0].double()
            xhat = x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True) + 1e-6)
            yref = (xhat.to(d).double() if dt != "float32" else xhat) * t["w"].double()
            made = {}
            for s in specs(dt, m, n):
                if s[0] not in ("shipped", "liger") and (dt, m, n, s) not in ok:
                    continue
                try:
                    label, call = make_call(s, dt, m, n, t, di)
                    t["y"][0].fill_(float("nan"))
                    call(0)
                    torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001
                    print(f"   ERROR {s}: {type(e).__name__}: {str(e)[-200:]}")
                    continue
                if s[0] not in ("copy", "empty", "liger") and not (s[0] == "parts" and s[1] in (0, 1)):
                    err = ((t["y"][0].double() - yref).abs().max() / yref.abs().max()).item()
                    if not err < 1e-2:
                        label += f" WRONG {err:.1e}"
                made[label] = call
            times = {k: [] for k in made}
            for r in range(3):
                for label, call in made.items():
                    times[label].append(tcalls([lambda i=i, call=call: call(i) for i in range(sets)]))
            med = lambda v: sorted(v)[len(v) // 2]
            print(f"== {dt} M={m} N={n} ({sets} sets)", flush=True)
            ranked = sorted(times.items(), key=lambda kv: med(kv[1]))
            for k, (label, v) in enumerate(ranked):
                if k < (40 if PROBE2 or PROBE3 or PROBE4 else 12) or label.startswith(("shipped", "liger", "copy", "empty")):
                    print(f"   {med(v):7.2f} us  [{min(v):.2f}-{max(v):.2f}]  {label}", flush=True)
            del t
            torch.cuda.empty_cache()
    os._exit(0)


if __name__ == "__main__":
    main()
