"""Session-8 probe 2 (H200): dynamic row-tile claiming, repeated. Probe 1 (s8-probe) found the
forward's blocks faster when they claim row tiles from a global counter at some layouts and much
slower at others. This run: each spec timed in 3 interleaved rounds (median, min-max), the
counter either kept across launches (the kernel's last claimer resets it) or zero-filled per call
(one fill node more in the graph), with tails (5120) and more layouts around probe 1's winners."""
import dataclasses, multiprocessing as mp, os, sys, time
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FTE

sys.path.insert(0, "scratch")
sys.path.insert(0, ".")
SHAPES = {512: 131072, 1024: 65536, 2048: 32768, 4096: 16384, 5120: 13107, 7168: 9362, 8192: 8192}
DTYPES = ("bfloat16", "float16", "float32")
TAILS = {5120: (4096, 1024)}
# (tile_m, blocks per SM, warps, tma store) per row length and element size; dyn specs
DYN = {2: {2048: [(4, 2, 4, False), (8, 1, 8, False)],
           4096: [(2, 2, 4, False), (2, 2, 4, True), (2, 2, 8, False), (4, 1, 8, False), (4, 2, 4, False),
                  (2, 4, 4, False)],
           5120: [(2, 2, 4, False), (2, 2, 8, False), (1, 4, 4, False), (4, 1, 8, False)],
           7168: [(2, 1, 8, True), (1, 2, 4, False), (2, 1, 8, False)],
           8192: [(2, 1, 8, True), (2, 1, 8, False), (1, 2, 4, False), (2, 2, 8, False), (4, 1, 8, False)]},
       4: {512: [(8, 4, 4, False), (16, 2, 4, False), (8, 8, 4, False), (16, 4, 8, False)],
           1024: [(4, 4, 4, False), (2, 8, 4, False), (4, 2, 8, False)],
           2048: [(2, 4, 4, False), (4, 2, 4, False), (2, 8, 4, False), (4, 4, 8, False)],
           4096: [(1, 4, 4, False), (2, 2, 4, False), (1, 8, 4, False)],
           5120: [(2, 2, 4, False), (1, 4, 4, False)],
           7168: [(1, 2, 4, False), (2, 2, 8, False)],
           8192: [(1, 2, 4, False), (1, 4, 4, False), (2, 2, 8, False)]}}
STATIC = {2: {4096: [(2, 2, 4, False)], 8192: [(2, 1, 8, True)]}, 4: {2048: [(2, 4, 4, False)]}}


def specs(dt, n):
    es = 4 if dt == "float32" else 2
    if n not in DYN[es]:
        return []
    out = [("fwd", "shipped")]
    out += [("fwd", "static", *v) for v in STATIC[es].get(n, [])]
    for k, v in enumerate(DYN[es][n]):
        out.append(("fwd", "dyn", *v))
        if k == 0:
            out.append(("fwd", "dynzero", *v))
    return out


def compile_key(spec):
    return ("fwd", "dyn", *spec[2:]) if spec[1] == "dynzero" else spec


def make_call(spec, dt, n, m, t, di):
    """(label, call(i)) for a spec; t holds the input sets."""
    import torch, cuda.tile as ct
    from cutile_rms.rmsnorm import launch as L
    import s8_kernels as S
    cs = torch.cuda.current_stream
    casting = L.casting_code("llama", dt == "float32")
    zeros = lambda shape: torch.zeros(shape, device="cuda", dtype=torch.int64)
    kind = spec[1]
    sms = di.num_sms
    if kind == "shipped":
        plan = L.forward_plan(t["x"][0], None, di, allow_split=True)
        label = f"fwd shipped {plan.kernel} {plan.tile_m}x{plan.tile_n}+{plan.tail} occ{plan.occupancy} w{plan.warps} mem{plan.memory} grid {plan.grid}"
        def call(i):
            slots = zeros(plan.slots) if plan.kernel == "split" else None
            L.launch_forward(plan, t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, 0.0, casting, cs(), slots)
        return label, call
    tm, occ, w, tma = spec[2:]
    tn, tail = TAILS.get(n, (n, 0))
    if n == 7168:
        tn = 8192
    tiles = -(-m // tm)
    grid = min(tiles, sms * occ)
    label = f"fwd {kind} {tm}x{tn}+{tail} occ{occ} w{w} tma{int(tma)} grid {grid}"
    if kind == "static":
        k = S.fwd_static.replace_hints(occupancy=occ, num_worker_warps=w)
        def call(i):
            ct.launch(cs(), (grid,), k, (t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, tm, tn, tail, True, tma))
        return label, call
    k = S.fwd_dyn.replace_hints(occupancy=occ, num_worker_warps=w)
    counter = zeros(1)
    claims = tiles + grid
    def call(i):
        c = zeros(1) if kind == "dynzero" else counter
        ct.launch(cs(), (grid,), k, (t["x"][i], t["w"], t["y"][i], t["rf"][i], c, claims, 1e-6, tm, tn, tail, True, tma))
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
