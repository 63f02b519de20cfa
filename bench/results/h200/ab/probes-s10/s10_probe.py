"""Session-10 probe (H200): what cuTile's own streaming kernels reach on the training set
(copies shaped like the forward, 1 read + 1 write, and like the backward, 2 reads + 1 write,
with the layouts the shipped plans use), beside the shipped forward and backward in the same
run; plus, for 16-bit rows of 32768 / 65536, an in-block two-pass backward (the row's second
pass from L2) and the split backward at 2 blocks/SM. Graph replay over rotated inputs, % of
torch's copy kernel (torch.neg(x, out=y)) timed the same way for the same shape; the norm
variants are checked against float64 first."""
import multiprocessing as mp, os, sys, time
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FTE

sys.path.insert(0, "probe10")
sys.path.insert(0, ".")
NS = [int(v) for v in os.environ.get("NS", "512 1024 2048 4096 8192 16384 32768 65536").split()]
DTYPES = os.environ.get("DTYPES", "bfloat16 float16 float32").split()
ELEMS = 1 << 26
LAYOUTS = {512: [(16, 512, 1, 8, False), (8, 512, 2, 4, True), (32, 512, 1, 8, True)],
           1024: [(8, 1024, 1, 8, True), (4, 1024, 2, 4, True), (8, 1024, 1, 8, False)],
           2048: [(4, 2048, 1, 8, True), (2, 2048, 2, 4, True), (4, 2048, 1, 8, False)],
           4096: [(2, 4096, 1, 8, True), (2, 4096, 2, 4, False), (1, 4096, 2, 8, True)],
           8192: [(2, 8192, 1, 8, True), (1, 8192, 2, 8, True), (1, 8192, 1, 8, False)],
           16384: [(1, 16384, 1, 8, False), (1, 16384, 1, 8, True), (1, 8192, 2, 8, True)],
           32768: [(1, 32768, 1, 8, True), (1, 8192, 2, 8, True), (2, 8192, 1, 8, True)],
           65536: [(1, 16384, 1, 8, False), (1, 8192, 2, 8, True), (2, 8192, 1, 8, True)]}
LONG = [("twopass", 4096, 2, True), ("twopass", 8192, 1, True), ("twopass", 8192, 1, False),
        ("twopass", 16384, 1, True), ("split2", 8192, 2, False)]


def specs(dt, n):
    out = [("fwd", "shipped"), ("bwd", "shipped")]
    out += [(op, "copy", *lay) for op in ("fwd", "bwd") for lay in LAYOUTS[n]]
    if n >= 32768 and dt != "float32":
        out += [("bwd", *v) for v in LONG]
    return out


def make_call(spec, dt, n, m, t, di):
    import torch, cuda.tile as ct
    from cutile_rms.rmsnorm import torch_impl as TI, launch as L, config as C
    import s10_kernels as S
    cs = torch.cuda.current_stream
    casting = L.casting_code("llama", dt == "float32")
    op, kind = spec[:2]
    if kind == "shipped" and op == "fwd":
        return "fwd shipped", lambda i: TI.forward(t["x"][i], t["w"], 1e-6, 0.0, casting, None, True)
    if kind == "shipped":
        return "bwd shipped", lambda i: TI.backward(t["x"][i], t["dy"][i], t["w"], t["rb"][i], 0.0, casting)
    sms = di.num_sms
    if kind == "copy":
        tm, tn, occ, w, tma = spec[2:]
        tiles = -(-m // tm) * -(-n // tn)
        grid = min(tiles, sms * occ)
        label = f"{op} copy {tm}x{tn} occ{occ} w{w} tma{int(tma)}"
        if op == "fwd":
            k = S.copy_fwd.replace_hints(occupancy=occ, num_worker_warps=w)
            return label, lambda i: ct.launch(cs(), (grid,), k, (t["x"][i], t["y"][i], tm, tn, tma))
        k = S.copy_bwd.replace_hints(occupancy=occ, num_worker_warps=w)
        return label, lambda i: ct.launch(cs(), (grid,), k, (t["x"][i], t["dy"][i], t["y"][i], tm, tn, tma))
    if kind == "twopass":
        tn, occ, rev = spec[2:]
        grid = min(m, sms * occ)
        k = S.bwd_twopass.replace_hints(occupancy=occ, num_worker_warps=8)
        part = torch.empty(grid, n, device="cuda")
        red_grid = max(1, min(-(-n // L.REDUCE_TILE_N), sms * C.REDUCE_BLOCKS_PER_SM))
        import cutile_rms.rmsnorm.kernels as K

        def call(i):
            ct.launch(cs(), (grid,), k, (t["x"][i], t["dy"][i], t["w"], t["rb"][i], t["y"][i], part, tn, True, rev))
            ct.launch(cs(), (red_grid,), K.dw_reduce, (part, t["dw"], L.REDUCE_TILE_G, L.REDUCE_TILE_N))
        return f"bwd twopass 1x{tn} occ{occ} rev{int(rev)} grid {grid}", call
    if kind == "split2":
        tn, occ = spec[2:4]
        cfg = C.split(1, tn, occ, 8, tma_store=False)
        plan = C.backward_plan_from(cfg, cfg, m, n, sms)
        part = torch.empty(plan.partial_shape(n), device="cuda")

        def call(i):
            slots = torch.zeros(plan.slots, dtype=torch.int64, device="cuda")
            L.launch_backward(plan, t["x"][i], t["dy"][i], t["w"], t["rb"][i], t["y"][i], t["dw"], part, None, 0.0,
                              casting, cs(), slots)
        return f"bwd split 1x{tn} occ{occ} S{plan.num_chunks} groups {plan.partial_rows}", call
    raise ValueError(spec)


def inputs(dt, n, m, sets):
    import torch
    d = getattr(torch, dt)
    xs = [torch.randn(m, n, device="cuda", dtype=d) for _ in range(sets)]
    return {"x": xs, "dy": [torch.randn_like(x) for x in xs], "y": [torch.empty_like(x) for x in xs],
            "rb": [torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6) for x in xs],
            "w": 1 + 0.1 * torch.randn(n, device="cuda", dtype=d), "dw": torch.empty(n, device="cuda", dtype=d)}


def warm(job):
    import torch
    from cutile_rms import _device
    dt, n, spec = job
    try:
        t0 = time.time()
        m = ELEMS // n
        t = inputs(dt, n, m, 1)
        _, call = make_call(spec, dt, n, m, t, _device.device_info(0))
        call(0)
        torch.cuda.synchronize()
        return f"compiled {job} {time.time() - t0:.1f}s"
    except Exception as e:  # noqa: BLE001
        return f"FAILED {job}: {type(e).__name__}: {str(e)[-300:]}"


def main():
    budget = float(sys.argv[1]) if len(sys.argv) > 1 else 150
    jobs = [(dt, n, s) for n in NS for dt in DTYPES for s in specs(dt, n)]
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
            ok.add(j)
    pool.shutdown(wait=False, cancel_futures=True)
    print(f"warm-up {time.time() - t0:.0f}s, {len(ok)} of {len(jobs)} compiled", flush=True)
    import torch
    from bench import timing as T
    from cutile_rms import _device
    from cutile_rms.rmsnorm import torch_impl as TI, launch as L
    di = _device.device_info(0)
    tcalls = lambda calls: T.graph_us(calls, T.eager_us(calls[:1], reps=3))
    for n in NS:
        for dt in DTYPES:
            m = ELEMS // n
            es = 4 if dt == "float32" else 2
            d = getattr(torch, dt)
            sets = T.num_sets(3 * m * n * es)
            t = inputs(dt, n, m, sets)
            copy = tcalls([lambda x=x, o=o: torch.neg(x, out=o) for x, o in zip(t["x"], t["y"])])
            x0 = t["x"][0].double(); rref = torch.rsqrt(x0.pow(2).mean(-1) + 1e-6); xhat = x0 * rref[:, None]
            wd = t["w"].double()
            wdy = t["dy"][0].double() * wd
            dxref = (wdy - xhat * (wdy * xhat).mean(-1, keepdim=True)) * rref[:, None]
            dwref = (t["dy"][0].double() * xhat.to(d).double()).sum(0)
            rel = lambda a, b: ((a.double() - b).abs().max() / b.abs().max()).item()
            res = []
            for s in specs(dt, n):
                if (dt, n, s) not in ok:
                    continue
                label, call = make_call(s, dt, n, m, t, di)
                note = ""
                if s[1] != "copy":
                    t["y"][0].fill_(float("nan")); t["dw"].fill_(float("nan"))
                    out = call(0); torch.cuda.synchronize()
                    if s == ("fwd", "shipped"):
                        yref = (xhat.to(d).double() * wd) if es == 2 else xhat * wd
                        errs = (rel(out[0], yref), rel(out[1], rref))
                    elif s == ("bwd", "shipped"):
                        errs = (rel(out[0], dxref), rel(out[1], dwref))
                    else:
                        errs = (rel(t["y"][0], dxref), rel(t["dw"], dwref))
                    if not all(e < 2e-2 for e in errs):
                        note = f" WRONG {errs[0]:.1e}/{errs[1]:.1e}"
                us = tcalls([lambda i=i: call(i) for i in range(sets)])
                res.append((s[0], label + note, us))
            print(f"== {dt} M={m} N={n}: torch copy {copy:.2f} us", flush=True)
            for op in ("fwd", "bwd"):
                for _, label, us in sorted((r for r in res if r[0] == op), key=lambda r: r[2]):
                    print(f"   {100 * copy * (1.5 if op == 'bwd' else 1) / us:6.1f}%  {us:8.2f} us  {label}", flush=True)
            del t
            torch.cuda.empty_cache()
    os._exit(0)


if __name__ == "__main__":
    main()
