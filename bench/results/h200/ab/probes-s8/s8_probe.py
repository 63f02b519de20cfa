"""Session-8 probe (H200): dynamic row-tile scheduling. The persistent forward's blocks claim
row tiles from a global counter (scratch/s8_kernels.py fwd_dyn: one relaxed atomic add per tile,
issued one tile ahead) instead of striding over a fixed set, against the same kernel body on the
static grid-stride loop (fwd_static) and the shipped forward. Graph replay over rotated inputs,
% of a copy kernel timed the same way in the same run; every variant checked against float64
(outputs poisoned) before it is timed."""
import dataclasses, multiprocessing as mp, os, sys, time
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FTE

sys.path.insert(0, "scratch")
sys.path.insert(0, ".")
SHAPES = {512: 131072, 1024: 65536, 2048: 32768, 4096: 16384, 8192: 8192, 16384: 4096}
DTYPES = ("bfloat16", "float16", "float32")
# (tile_m, blocks per SM, warps) per row length and element size
LAYOUTS = {2: {512: [(16, 1, 8), (8, 2, 4), (4, 4, 4)], 1024: [(8, 1, 8), (4, 2, 4), (2, 4, 4), (1, 4, 4), (1, 8, 4)],
               2048: [(4, 1, 8), (2, 2, 4), (1, 4, 4)], 4096: [(1, 4, 4), (1, 2, 4), (2, 2, 4)],
               8192: [(1, 2, 4), (1, 1, 8), (2, 1, 8)], 16384: [(1, 1, 8), (1, 2, 8)]},
           4: {512: [(32, 8, 8), (8, 4, 4)], 1024: [(1, 8, 4), (4, 4, 4)], 2048: [(8, 8, 8), (2, 4, 4)],
               4096: [(1, 4, 4), (2, 2, 4)], 8192: [(2, 8, 8), (1, 2, 4)], 16384: [(1, 1, 8)]}}


def specs(dt, n):
    es = 4 if dt == "float32" else 2
    out = [("fwd", "shipped", "plan")]
    out += [("fwd", kind, tm, occ, w, tma) for (tm, occ, w) in LAYOUTS[es][n] for kind in ("static", "dyn")
            for tma in (False, True)]
    return out


def compile_key(spec):
    return spec


def make_call(spec, dt, n, m, t, di):
    """(label, call(i)) for a spec; t holds the input sets."""
    import torch, cuda.tile as ct
    from cutile_rms.rmsnorm import launch as L
    import s8_kernels as S
    cs = torch.cuda.current_stream
    casting = L.casting_code("llama", dt == "float32")
    zeros = lambda shape: torch.zeros(shape, device="cuda", dtype=torch.int64)
    op, kind = spec[:2]
    x0 = t["x"][0]
    sms = di.num_sms
    if kind == "shipped":
        plan = L.forward_plan(x0, None, di, allow_split=True)
        label = f"fwd shipped {plan.kernel} {plan.tile_m}x{plan.tile_n} occ{plan.occupancy} w{plan.warps} mem{plan.memory} grid {plan.grid}"
        def call(i):
            slots = zeros(plan.slots) if plan.kernel == "split" else None
            L.launch_forward(plan, t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, 0.0, casting, cs(), slots)
        return label, call
    tm, occ, w, tma = spec[2:]
    tiles = -(-m // tm)
    grid = min(tiles, sms * occ)
    label = f"fwd {kind} {tm}x{n} occ{occ} w{w} tma{int(tma)} grid {grid}"
    if kind == "static":
        k = S.fwd_static.replace_hints(occupancy=occ, num_worker_warps=w)
        def call(i):
            ct.launch(cs(), (grid,), k, (t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, tm, n, True, tma))
        return label, call
    k = S.fwd_dyn.replace_hints(occupancy=occ, num_worker_warps=w)
    counter = zeros(1)
    claims = tiles + grid
    def call(i):
        ct.launch(cs(), (grid,), k, (t["x"][i], t["w"], t["y"][i], t["rf"][i], counter, claims, 1e-6, tm, n, True, tma))
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
    for n in SHAPES:
        for dt in DTYPES:
            m = SHAPES[n]
            es = 4 if dt == "float32" else 2
            d = getattr(torch, dt)
            sets = T.num_sets(3 * m * n * es)
            t = inputs(dt, n, m, sets)
            res = {"copy": tcalls([lambda x=x, o=o: torch.neg(x, out=o) for x, o in zip(t["x"], t["y"])])}
            x0 = t["x"][0].double(); rref = torch.rsqrt(x0.pow(2).mean(-1) + 1e-6); xhat = x0 * rref[:, None]
            wd = t["w"].double()
            yref = (xhat.to(d).double() * wd) if es == 2 else xhat * wd
            wdy = t["dy"][0].double() * wd
            dxref = (wdy - xhat * (wdy * xhat).mean(-1, keepdim=True)) * rref[:, None]
            dwref = (t["dy"][0].double() * xhat.to(d).double()).sum(0)
            rel = lambda a, b: ((a.double() - b).abs().max() / b.abs().max()).item()
            for s in specs(dt, n):
                if (dt, n, compile_key(s)) not in ok:
                    continue
                made = make_call(s, dt, n, m, t, di)
                if made is None:
                    continue
                label, call = made
                t["y"][0].fill_(float("nan")); t["rf"][0].fill_(float("nan")); t["dw"].fill_(float("nan"))
                call(0); torch.cuda.synchronize()
                if s[0] == "fwd":
                    errs = (rel(t["y"][0], yref), rel(t["rf"][0], rref))
                else:
                    errs = (rel(t["y"][0], dxref), rel(t["dw"], dwref))
                bad = not all(e < 2e-2 for e in errs)
                us = tcalls([lambda i=i: call(i) for i in range(sets)])
                res[label + (f" WRONG {errs[0]:.1e}/{errs[1]:.1e}" if bad else "")] = us
            copy = res.pop("copy")
            print(f"== {dt} M={m} N={n}: copy {copy:.2f} us", flush=True)
            for op in ("fwd", "bwd"):
                for label, us in sorted(((k, v) for k, v in res.items() if k.startswith(op)), key=lambda kv: kv[1]):
                    print(f"   {100 * copy * (1.5 if op == 'bwd' else 1) / us:6.1f}%  {us:8.2f} us  {label}", flush=True)
            del t
            torch.cuda.empty_cache()
    os._exit(0)


if __name__ == "__main__":
    main()
