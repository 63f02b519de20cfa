"""Session-8 probe 3 (H200): why the benchmark at 9859b35 timed the bf16 2048 forward with the
claim schedule at 92.6 us (probe 2: 68.1 us for the same layout, fp16 68.1 in both). The real
kernels through the launcher: the public API (as the benchmark calls it), run_forward, the claim
plan on a ticket zeroed per call, on one ticket kept across calls, the same layout strided, and
probe 2's kernel. 3 interleaved rounds, median [min-max]."""
import dataclasses, multiprocessing as mp, os, sys, time
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FTE

sys.path.insert(0, "scratch")
sys.path.insert(0, ".")
SHAPES = {2048: 32768, 4096: 16384, 8192: 8192}
DTYPES = ("bfloat16", "float16")
KINDS = ("api", "run", "zeroed", "kept", "stride", "probe")


def specs(dt, n):
    return [("fwd", k) for k in KINDS]


def compile_key(spec):
    return spec


def make_call(spec, dt, n, m, t, di):
    import torch, cuda.tile as ct
    from cutile_rms import rms_norm_forward
    from cutile_rms.rmsnorm import launch as L
    from cutile_rms.rmsnorm.torch_impl import _int64
    import s8_kernels as S
    cs = torch.cuda.current_stream
    casting = L.casting_code("llama", dt == "float32")
    kind = spec[1]
    plan = L.forward_plan(t["x"][0], None, di)
    label = f"fwd {kind} {plan.tile_m}x{plan.tile_n} occ{plan.occupancy} w{plan.warps} {plan.schedule} grid {plan.grid}"
    if kind == "api":
        first = [True]
        def call(i):
            y, r = rms_norm_forward(t["x"][i], t["w"], 1e-6)
            if first[0]:  # the harness's correctness check reads set 0 once, before timing
                first[0] = False
                t["y"][i].copy_(y), t["rf"][i].copy_(r)
        return label, call
    if kind == "run":
        def call(i):
            L.run_forward(t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, 0.0, casting, None, di, cs(), int64=_int64(t["x"][i]))
        return label, call
    if kind in ("zeroed", "kept"):
        kept = torch.zeros(1, dtype=torch.int64, device="cuda")
        def call(i):
            tk = kept if kind == "kept" else torch.zeros(1, dtype=torch.int64, device="cuda")
            L.launch_forward(plan, t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, 0.0, casting, cs(), tk)
        return label, call
    if kind == "stride":
        sp = dataclasses.replace(plan, schedule="stride")
        def call(i):
            L.launch_forward(sp, t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, 0.0, casting, cs(), None)
        return label, call
    k = S.fwd_dyn.replace_hints(occupancy=plan.occupancy, num_worker_warps=plan.warps)
    counter = torch.zeros(1, dtype=torch.int64, device="cuda")
    tiles = -(-m // plan.tile_m)
    claims = tiles + plan.grid
    def call(i):
        ct.launch(cs(), (plan.grid,), k, (t["x"][i], t["w"], t["y"][i], t["rf"][i], counter, claims, 1e-6, plan.tile_m, plan.tile_n, 0, True, plan.memory[0]))
    return label, call


def inputs(dt, n, m, sets):
    import torch
    d = getattr(torch, dt)
    xs = [torch.randn(m, n, device="cuda", dtype=d) for _ in range(sets)]
    return {"x": xs, "dy": [torch.randn_like(x) for x in xs], "y": [torch.empty_like(x) for x in xs],
            "rf": [torch.empty(m, device="cuda") for _ in xs],
            "rb": [torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6) for x in xs],
            "w": 1 + 0.1 * torch.randn(n, device="cuda", dtype=d), "dw": torch.empty(n, device="cuda", dtype=d)}


def warm(job):
    import torch
    from cutile_rms import _device
    dt, n, spec = job
    try:
        t0 = time.time()
        m = SHAPES[n]
        t = inputs(dt, n, m, 1)
        made = make_call(spec, dt, n, m, t, _device.device_info(0))
        if made is None:
            return f"skip {job}"
        made[1](0)
        torch.cuda.synchronize()
        return f"compiled {job} {time.time() - t0:.1f}s"
    except Exception as e:  # noqa: BLE001
        return f"FAILED {job}: {type(e).__name__}: {str(e)[-300:]}"


def main():
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 150
    jobs, seen = [], set()
    for n in SHAPES:
        for dt in DTYPES:
            for s in specs(dt, n):
                key = (dt, n, compile_key(s))
                if key not in seen:
                    seen.add(key)
                    jobs.append((dt, n, s))
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
            print(r, flush=True)
        else:
            ok.add((j[0], j[1], compile_key(j[2])))
    pool.shutdown(wait=False, cancel_futures=True)
    print(f"warm-up {time.time() - t0:.0f}s, {len(ok)} of {len(jobs)} compiled", flush=True)
    import torch
    from bench import timing as T
    from cutile_rms import _device
    di = _device.device_info(0)
    tcalls = lambda calls: T.graph_us(calls, T.eager_us(calls[:1], reps=3))
    ROUNDS = 3
    for n in SHAPES:
        for dt in DTYPES:
            if not specs(dt, n):
                continue
            m = SHAPES[n]
            es = 4 if dt == "float32" else 2
            d = getattr(torch, dt)
            sets = T.num_sets(3 * m * n * es)
            t = inputs(dt, n, m, sets)
            copy_calls = [lambda x=x, o=o: torch.neg(x, out=o) for x, o in zip(t["x"], t["y"])]
            x0 = t["x"][0].double(); rref = torch.rsqrt(x0.pow(2).mean(-1) + 1e-6); xhat = x0 * rref[:, None]
            wd = t["w"].double()
            yref = (xhat.to(d).double() * wd) if es == 2 else xhat * wd
            rel = lambda a, b: ((a.double() - b).abs().max() / b.abs().max()).item()
            made = {}
            for s in specs(dt, n):
                if (dt, n, compile_key(s)) not in ok:
                    continue
                mc = make_call(s, dt, n, m, t, di)
                label, call = mc
                t["y"][0].fill_(float("nan")); t["rf"][0].fill_(float("nan"))
                call(0); torch.cuda.synchronize()
                errs = (rel(t["y"][0], yref), rel(t["rf"][0], rref))
                bad = not all(e < 2e-2 for e in errs)
                made[label + (f" WRONG {errs[0]:.1e}/{errs[1]:.1e}" if bad else "")] = call
            times = {k: [] for k in ["copy", *made]}
            for r in range(ROUNDS):
                times["copy"].append(tcalls(copy_calls))
                for label, call in made.items():
                    times[label].append(tcalls([lambda i=i, call=call: call(i) for i in range(sets)]))
            med = lambda v: sorted(v)[len(v) // 2]
            copy = med(times.pop("copy"))
            print(f"== {dt} M={m} N={n}: copy {copy:.2f} us", flush=True)
            for label, v in sorted(times.items(), key=lambda kv: med(kv[1])):
                print(f"   {100 * copy / med(v):6.1f}%  {med(v):8.2f} us  [{min(v):.2f}-{max(v):.2f}]  {label}", flush=True)
            del t
            torch.cuda.empty_cache()
    os._exit(0)


if __name__ == "__main__":
    main()
