"""Session-6 probe 2: the shipped packed backward kernel (rms_bwd_packed via launch_backward)
at the other 16-bit buckets, against the shipped plan and a copy kernel; graph replay over
rotated inputs; dx and dW checked against float64 before timing."""
import multiprocessing as mp, os, sys, time
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FTE
sys.path.insert(0, ".")
SHAPES = {512: 131072, 1024: 65536, 2048: 32768, 4096: 16384, 16384: 4096}
VARIANTS = {  # (tile_m, tile_n, blocks_per_sm, warps, tma_store)
    512: [(16, 512, 1, None, False), (8, 512, 2, None, False), (16, 512, 1, 8, False)],
    1024: [(4, 1024, 2, None, True), (4, 1024, 1, 8, False), (8, 1024, 1, 8, False)],
    2048: [(4, 2048, 1, 8, False), (2, 2048, 1, 8, False), (4, 2048, 1, 8, True)],
    4096: [(4, 4096, 1, 8, True), (4, 4096, 1, 8, False), (2, 4096, 1, 8, False)],
    16384: [(1, 16384, 1, 8, False), (1, 16384, 1, 8, True)],
}
DTYPES = {512: ("bfloat16",), 1024: ("bfloat16",), 2048: ("bfloat16",), 4096: ("bfloat16", "float16"),
          16384: ("bfloat16", "float16")}


def jobs():
    return [(dt, n, v) for n in SHAPES for dt in DTYPES[n] for v in VARIANTS[n]]


def setup(dt, n, v, m):
    import torch
    from cutile_rms.rmsnorm import config as C
    d = getattr(torch, dt)
    cfg = C.packed(v[0], v[1], v[2], v[3], tma_store=v[4])
    return cfg, d


def launch_one(plan, x, dy, w, r, dx, dw, dwp, half, cs):
    from cutile_rms.rmsnorm import launch as L
    from cutile_rms.rmsnorm.torch_impl import as_words as W
    L.launch_backward(plan, W(x), W(dy), W(w), r, W(dx), W(dw), dwp, None, 0.0, 0, cs(), None, half)


def warm(job):
    import torch
    from cutile_rms.rmsnorm import config as C, launch as L
    dt, n, v = job
    try:
        t0 = time.time()
        m = 256
        cfg, d = setup(dt, n, v, m)
        plan = C.backward_plan_from(cfg, cfg, m, n, 132)
        x = torch.randn(m, n, device="cuda", dtype=d)
        dwp = torch.empty(plan.partial_shape(n), device="cuda")
        launch_one(plan, x, x, x[0].clone(), torch.ones(m, device="cuda"), torch.empty_like(x),
                   torch.empty(n, device="cuda", dtype=d), dwp, L.half_code(d), torch.cuda.current_stream)
        torch.cuda.synchronize()
        return f"compiled {job} {time.time() - t0:.1f}s"
    except Exception as e:  # noqa: BLE001
        return f"FAILED {job}: {type(e).__name__}: {str(e)[-300:]}"


def main():
    ok = set()
    pool = ProcessPoolExecutor(14, mp_context=mp.get_context("spawn"))
    futs = {pool.submit(warm, j): j for j in jobs()}
    t0 = time.time()
    for f, j in futs.items():
        try:
            r = f.result(timeout=max(1, 120 - (time.time() - t0)))
        except FTE:
            r = f"TIMEOUT {j}"
        print(r, flush=True)
        if r.startswith("compiled"):
            ok.add(j)
    pool.shutdown(wait=False, cancel_futures=True)
    print(f"warm-up {time.time() - t0:.0f}s", flush=True)
    import torch
    from bench import timing as T
    from cutile_rms import _device
    from cutile_rms.rmsnorm import config as C, launch as L, kernels as K
    di = _device.device_info(0)
    cs = torch.cuda.current_stream
    ef = lambda shape: torch.empty(shape, device="cuda")
    tcalls = lambda calls: T.graph_us(calls, T.eager_us(calls[:1], reps=3))
    for n in SHAPES:
        for dt in DTYPES[n]:
            m = SHAPES[n]
            d = getattr(torch, dt)
            sets = T.num_sets(3 * m * n * 2)
            xs = [torch.randn(m, n, device="cuda", dtype=d) for _ in range(sets)]
            dys = [torch.randn_like(x) for x in xs]
            w = 1 + 0.1 * torch.randn(n, device="cuda", dtype=d)
            dxs = [torch.empty_like(x) for x in xs]
            rs = [torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6) for x in xs]
            dw = torch.empty_like(w)
            res = {"copy": tcalls([lambda x=x, o=o: torch.neg(x, out=o) for x, o in zip(xs, dxs)])}
            x0 = xs[0].double(); rref = torch.rsqrt(x0.pow(2).mean(-1) + 1e-6); xhat = x0 * rref[:, None]
            wdy = dys[0].double() * w.double()
            dxref = (wdy - xhat * (wdy * xhat).mean(-1, keepdim=True)) * rref[:, None]
            dwref = (dys[0].double() * xhat.to(d).double()).sum(0)
            bplan = L.backward_plan(xs[0], di)
            res[f"shipped {bplan.kernel} {bplan.tile_m}x{bplan.tile_n} occ{bplan.hints[0]}"] = tcalls(
                [lambda i=i: L.run_backward(xs[i], dys[i], w, rs[i], dxs[i], dw, 0.0, K.CAST_LLAMA, ef, di, cs())
                 for i in range(sets)])
            for v in VARIANTS[n]:
                if (dt, n, v) not in ok:
                    continue
                cfg, _ = setup(dt, n, v, m)
                plan = C.backward_plan_from(cfg, cfg, m, n, di.num_sms)
                dwp = torch.empty(plan.partial_shape(n), device="cuda")
                half = L.half_code(d)
                call = lambda i: launch_one(plan, xs[i], dys[i], w, rs[i], dxs[i], dw, dwp, half, cs)
                dxs[0].fill_(float("nan")); dw.fill_(float("nan"))
                call(0); torch.cuda.synchronize()
                e1 = ((dxs[0].double() - dxref).abs().max() / dxref.abs().max()).item()
                e2 = ((dw.double() - dwref).abs().max() / dwref.abs().max()).item()
                label = f"packed {v[0]}x{v[1]} occ{v[2]} warps{v[3]} tma{int(v[4])} grid{plan.partial_rows}"
                us = tcalls([lambda i=i: call(i) for i in range(sets)])
                res[label + ("" if e1 < 2e-2 and e2 < 2e-2 else f" WRONG {e1:.1e}/{e2:.1e}")] = us
            copy = res["copy"]
            print(f"== {dt} M={m} N={n}: copy {copy:.2f} us")
            for label, us in sorted(res.items(), key=lambda kv: kv[1]):
                print(f"   {150 * copy / us:6.1f}%  {us:8.2f} us  {label}", flush=True)
            del xs, dys, dxs
            torch.cuda.empty_cache()
    os._exit(0)


if __name__ == "__main__":
    main()
