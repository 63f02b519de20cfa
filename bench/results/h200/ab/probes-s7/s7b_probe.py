"""Session-7 probe 2 (H200): one-row forward tiles at 4 / 8 blocks per SM, persistent grid against one block per row (non-persistent, as Liger launches), against the shipped forward. Built on probe 1:

Probe 1: (1) grid balance: the shipped plans with their grid, with a balanced
persistent grid (the fewest blocks that need as many row-tile rounds: every block gets the same
number of row tiles, give or take one, and no round runs with a few blocks alone), and with one
block per row tile; (2) rows as power-of-two pieces (N = 5120 = 4096 + 1024, 7168 = 4096 +
2048 + 1024; scratch/s7_kernels.py) so no lane is padding; (3) 16-bit split forwards with
16384-wide segments at N = 32768 / 65536. Graph replay over rotated inputs, % of a copy kernel
timed the same way in the same run; every variant checked against float64 (outputs poisoned)
before it is timed."""
import dataclasses, multiprocessing as mp, os, sys, time
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FTE

sys.path.insert(0, "scratch")
sys.path.insert(0, ".")
SHAPES = {512: 131072, 1024: 65536, 2048: 32768, 4096: 16384, 5120: 13107, 7168: 9362, 8192: 8192, 16384: 4096,
          32768: 2048, 65536: 1024}
DTYPES = ("bfloat16", "float16", "float32")
PIECES = {5120: (4096, 1024, 0), 7168: (4096, 2048, 1024)}
FWD_PIECES = {2: [(1, 2, None, False), (1, 4, None, False), (2, 1, None, False), (2, 2, None, False),
                  (4, 1, 8, False), (2, 1, 8, True), (1, 2, 8, False)],
              4: [(1, 4, None, False), (1, 8, None, False), (2, 4, 8, False), (2, 8, 8, False), (4, 2, 8, False)]}
BWD_PIECES = [(1, 1, True), (1, 1, False), (1, 2, False), (2, 1, False), (2, 1, True), (4, 1, False)]
SPLITS = {32768: [(1, 16384, 1, False), (1, 16384, 2, False), (1, 16384, 1, True)],
          65536: [(1, 16384, 1, False), (1, 16384, 2, False), (1, 16384, 1, True)]}


SHAPES = {512: 131072, 1024: 65536, 2048: 32768, 4096: 16384, 8192: 8192, 16384: 4096}


def specs(dt, n):
    out = [("fwd", "shipped", "plan")]
    out += [("fwd", "row1", occ, tma, g) for occ in (4, 8) for tma in (False, True) for g in ("plan", "tiles")]
    return out


def compile_key(spec):
    return spec[:-1] if spec[1] in ("shipped", "pieces", "row1") else spec


def balanced(tiles, grid):
    if tiles <= grid:
        return tiles
    rounds = -(-tiles // grid)
    return -(-tiles // rounds)


def grid_for(mode, tiles, grid):
    return {"plan": grid, "balanced": balanced(tiles, grid), "tiles": tiles}[mode]


def make_call(spec, dt, n, m, t, di):
    """(label, call(i)) for a spec; t holds the input sets."""
    import torch, cuda.tile as ct
    from cutile_rms.rmsnorm import config as C, kernels as K, launch as L
    from cutile_rms.rmsnorm.torch_impl import as_words as W
    import s7_kernels as S
    cs = torch.cuda.current_stream
    casting = L.casting_code("llama", dt == "float32")
    zeros = lambda shape: torch.zeros(shape, device="cuda", dtype=torch.int64)
    op, kind = spec[:2]
    x0 = t["x"][0]
    sms = di.num_sms
    if op == "fwd" and kind == "shipped":
        plan = L.forward_plan(x0, None, di, allow_split=True)
        if plan.kernel == "tile":
            plan = dataclasses.replace(plan, grid=grid_for(spec[2], -(-m // plan.tile_m), plan.grid))
        elif spec[2] != "plan":
            return None
        label = f"fwd shipped {plan.kernel} {plan.tile_m}x{plan.tile_n} occ{plan.occupancy} w{plan.warps} mem{plan.memory} grid {plan.grid} ({spec[2]})"
        def call(i):
            slots = zeros(plan.slots) if plan.kernel == "split" else None
            L.launch_forward(plan, t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, 0.0, casting, cs(), slots)
        return label, call
    if op == "fwd" and kind == "row1":
        occ, tma, gm = spec[2:]
        plan = C.forward_plan_from(C.tile(1, n, occ, None, tma_store=tma), m, sms, "persistent", n)
        plan = dataclasses.replace(plan, grid=grid_for(gm, m, plan.grid))
        label = f"fwd row1 1x{n} occ{occ} tma{int(tma)} grid {plan.grid} ({gm})"
        def call(i):
            L.launch_forward(plan, t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, 0.0, casting, cs(), None)
        return label, call
    if op == "fwd" and kind == "split":
        tm, tn, occ, tma = spec[2:]
        plan = C.forward_plan_from(C.split(tm, tn, occ, 8, tma_store=tma), m, sms, "persistent", n)
        label = f"fwd split {tm}x{tn} occ{occ} tma{int(tma)} S{plan.splits} grid {plan.grid}"
        def call(i):
            L.launch_forward(plan, t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, 0.0, casting, cs(), zeros(plan.slots))
        return label, call
    if op == "fwd" and kind == "pieces":
        tm, occ, warps, tma, gm = spec[2:]
        p0, p1, p2 = PIECES[n]
        k = S.fwd_pieces.replace_hints(occupancy=occ, num_worker_warps=warps)
        tiles = -(-m // tm)
        grid = grid_for(gm, tiles, min(tiles, sms * occ))
        label = f"fwd pieces {tm}x({p0}+{p1}+{p2}) occ{occ} w{warps} tma{int(tma)} grid {grid} ({gm})"
        def call(i):
            ct.launch(cs(), (grid,), k, (t["x"][i], t["w"], t["y"][i], t["rf"][i], 1e-6, 0.0, tm, p0, p1, p2, casting,
                                         True, tma))
        return label, call
    if op == "bwd" and kind == "shipped":
        plan = L.backward_plan(x0, di, allow_split=True, allow_packed=True)
        if plan.kernel in ("tile", "packed"):
            plan = dataclasses.replace(plan, partial_rows=grid_for(spec[2], -(-m // plan.tile_m), plan.partial_rows))
        elif spec[2] != "plan":
            return None
        label = f"bwd shipped {plan.kernel} {plan.tile_m}x{plan.tile_n} {plan.hints} mem{plan.memory} grid {plan.partial_rows}x{plan.num_chunks} ({spec[2]})"
        half = L.half_code(x0.dtype)
        dwp = torch.empty(plan.partial_shape(n), device="cuda")
        row_dot = torch.empty(m, device="cuda") if plan.needs_row_dot else None
        pk = plan.kernel == "packed"
        v = W if pk else (lambda a: a)
        def call(i):
            slots = zeros(plan.slots) if plan.kernel == "split" else None
            L.launch_backward(plan, v(t["x"][i]), v(t["dy"][i]), v(t["w"]), t["rb"][i], v(t["y"][i]), v(t["dw"]), dwp,
                              row_dot, 0.0, casting, cs(), slots, half)
        return label, call
    if op == "bwd" and kind == "pieces":
        tm, occ, tma, gm = spec[2:]
        p0, p1, p2 = PIECES[n]
        k = S.bwd_packed_pieces.replace_hints(occupancy=occ, num_worker_warps=8)
        tiles = -(-m // tm)
        grid = grid_for(gm, tiles, min(tiles, sms * occ))
        half = L.half_code(x0.dtype)
        dwp = torch.empty(grid, 2, n // 2, device="cuda")
        rg = max(1, min(-(-n // C.REDUCE_TILE_N), sms * C.REDUCE_BLOCKS_PER_SM))
        label = f"bwd packed pieces {tm}x({p0}+{p1}+{p2}) occ{occ} tma{int(tma)} grid {grid} ({gm})"
        def call(i):
            ct.launch(cs(), (grid,), k, (W(t["x"][i]), W(t["dy"][i]), W(t["w"]), t["rb"][i], W(t["y"][i]), dwp, 0.0, tm,
                                         p0 // 2, p1 // 2, p2 // 2, half, True, True, tma))
            ct.launch(cs(), (rg,), K.dw_reduce_packed, (dwp, W(t["dw"]), C.REDUCE_TILE_G, C.REDUCE_TILE_N // 2, half))
        return label, call
    raise ValueError(spec)


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
