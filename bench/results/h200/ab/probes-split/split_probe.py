"""Issue #6 probe: split-row forward/backward (scratch/split_kernels.py) against the shipped
plan and a copy kernel; graph replay over rotated inputs; every variant checked against a
float64 reference (all rows) on three launches before timing."""
import argparse, multiprocessing as mp, sys, time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, "scratch")
ES = {"bfloat16": 2, "float32": 4}
SHAPES = (65536, 32768, 16384)


def variants(dt, n):
    """(op, S, SEG, TILE_M, occupancy, tma_store)"""
    v = []
    for seg in (16384, 8192, 4096):
        s = n // seg
        if 2 <= s <= 16:
            for occ in ((1, 2) if seg <= 8192 else (1,)):
                v.append(("fwd", s, seg, 1, occ, False))
    for seg in (8192, 4096):
        s = n // seg
        if 2 <= s <= 16:
            for occ in ((1, 2) if seg <= 4096 or dt == "bfloat16" else (1,)):
                v.append(("bwd", s, seg, 1, occ, False))
    return v


def kern(op, occ):
    import split_kernels as P
    return (P.fwd_split if op == "fwd" else P.bwd_split).replace_hints(occupancy=occ, num_worker_warps=8)


def warm(job):
    import torch, cuda.tile as ct
    dt, n, (op, s, seg, tm, occ, tma) = job
    try:
        t0 = time.time()
        d = getattr(torch, dt)
        m = 16
        x = torch.randn(m, n, device="cuda", dtype=d); w = torch.randn(n, device="cuda", dtype=d)
        out = torch.empty_like(x); r = torch.rand(m, device="cuda") + 0.5
        parts = torch.empty(m, s, device="cuda"); cnt = torch.zeros(m, device="cuda", dtype=torch.int32)
        if op == "fwd":
            a = (x, w, out, r, parts, cnt, 1e-6, tm, seg, s, 0 if dt != "float32" else 1, tma)
        else:
            a = (x, torch.randn_like(x), w, r, out, torch.empty(4, n, device="cuda"), parts, cnt, tm, seg, s, dt != "float32", tma)
        ct.launch(torch.cuda.current_stream(), (4 * s,), kern(op, occ), a)
        torch.cuda.synchronize()
        return f"compiled {job} {time.time() - t0:.1f}s"
    except Exception as e:  # noqa: BLE001
        return f"FAILED {job}: {type(e).__name__}: {str(e)[-300:]}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"])
    a = p.parse_args()
    jobs = [(dt, n, v) for dt in a.dtype for n in SHAPES for v in variants(dt, n)]
    t0 = time.time()
    with ProcessPoolExecutor(12, mp_context=mp.get_context("spawn")) as pool:
        for r in pool.map(warm, jobs):
            print(r, flush=True)
    print(f"warm-up {time.time() - t0:.0f}s", flush=True)
    import torch, cuda.tile as ct
    sys.path.insert(0, ".")
    from bench import timing as T
    from cutile_rms import _device
    from cutile_rms.rmsnorm import launch as L, kernels as K
    di = _device.device_info(0)
    sms = di.num_sms
    cs = lambda: torch.cuda.current_stream()

    def tcalls(calls):
        return T.graph_us(calls, T.eager_us(calls[:1], reps=3))

    for dt in a.dtype:
        d = getattr(torch, dt)
        cast = K.CAST_GEMMA if dt == "float32" else K.CAST_LLAMA
        for n in SHAPES:
            m = 64 * 2**20 // n
            sets = T.num_sets(3 * m * n * ES[dt])
            xs = [torch.randn(m, n, device="cuda", dtype=d) for _ in range(sets)]
            dys = [torch.randn_like(x) for x in xs]
            w = 1 + 0.1 * torch.randn(n, device="cuda", dtype=d)
            outs = [torch.empty_like(x) for x in xs]
            rs = [torch.empty(m, device="cuda") for _ in xs]
            res = {"copy": tcalls([lambda x=x, o=o: torch.neg(x, out=o) for x, o in zip(xs, outs)])}
            x0 = xs[0].double(); rref = torch.rsqrt(x0.pow(2).mean(-1) + 1e-6)
            xhat = x0 * rref[:, None]
            xr = xhat.to(d).double() if dt != "float32" else xhat
            yref = xr * w.double()
            wdy = dys[0].double() * w.double()
            dxref = (wdy - xhat * (wdy * xhat).mean(-1, keepdim=True)) * rref[:, None]
            dwref = (dys[0].double() * xr).sum(0)
            plan = L.forward_plan(xs[0], None, di)
            res[f"fwd shipped {plan.kernel} {plan.tile_m}x{plan.tile_n} occ{plan.occupancy}"] = tcalls(
                [lambda i=i: L.launch_forward(plan, xs[i], w, outs[i], rs[i], 1e-6, 0.0, cast, cs()) for i in range(sets)])
            for i in range(sets):
                L.launch_forward(plan, xs[i], w, outs[i], rs[i], 1e-6, 0.0, cast, cs())
            rtrue = [r.clone() for r in rs]
            dw = torch.empty_like(w)
            ef = lambda shape: torch.empty(shape, device="cuda")
            bplan = L.backward_plan(xs[0], di)
            res[f"bwd shipped {bplan.kernel} {bplan.tile_m}x{bplan.tile_n}"] = tcalls(
                [lambda i=i: L.run_backward(xs[i], dys[i], w, rtrue[i], outs[i], dw, 0.0, cast, ef, di, cs()) for i in range(sets)])
            reduce_grid = L.plan_backward(m, n, sms, elem_size=ES[dt]).reduce_grid
            for op, s, seg, tm, occ, tma in variants(dt, n):
                grid = (sms * occ // s) * s
                label = f"{op} split S{s} seg{seg} tm{tm} occ{occ} grid{grid}"
                k = kern(op, occ)
                dwp = torch.empty(grid // s, n, device="cuda")
                parts = torch.empty(m, s, device="cuda")

                def call(i):
                    cnt = torch.zeros(-(-m // tm), device="cuda", dtype=torch.int32)
                    if op == "fwd":
                        ct.launch(cs(), (grid,), k, (xs[i], w, outs[i], rs[i], parts, cnt, 1e-6, tm, seg, s, cast, tma))
                    else:
                        ct.launch(cs(), (grid,), k, (xs[i], dys[i], w, rtrue[i], outs[i], dwp, parts, cnt, tm, seg, s,
                                                     dt != "float32", tma))
                        ct.launch(cs(), (reduce_grid,), K.dw_reduce, (dwp, dw, 32, 256))
                try:
                    errs = []
                    for rep in range(3):
                        outs[0].fill_(float("nan")); rs[0].fill_(float("nan")); dw.fill_(float("nan"))
                        t1 = time.time(); call(0); torch.cuda.synchronize()
                        if op == "fwd":
                            e1 = ((outs[0].double() - yref).abs().max() / yref.abs().max()).item()
                            e2 = ((rs[0].double() - rref).abs() / rref).max().item()
                        else:
                            e1 = ((outs[0].double() - dxref).abs().max() / dxref.abs().max()).item()
                            e2 = ((dw.double() - dwref).abs().max() / dwref.abs().max()).item()
                        errs.append((e1, e2))
                    ok = all(e1 < 2e-2 and e2 < 2e-2 for e1, e2 in errs)
                    us = tcalls([lambda i=i: call(i) for i in range(sets)])
                    res[label + ("" if ok else " WRONG")] = us
                    print(f"  {dt} N={n} {label}: {us:.2f} us maxrel errs {['%.1e/%.1e' % e for e in errs]}", flush=True)
                except Exception as e:  # noqa: BLE001
                    print(f"  {dt} N={n} {label}: FAILED {type(e).__name__}: {str(e)[-300:]}", flush=True)
            copy = res["copy"]
            print(f"== {dt} M={m} N={n}: copy {copy:.2f} us ({2 * m * n * ES[dt] / copy / 1e3:.0f} GB/s)")
            for label, us in sorted(res.items(), key=lambda kv: (kv[0][:3], kv[1])):
                f = 3 if label.startswith("bwd") else 2
                print(f"   {100 * f * copy / 2 / us:6.1f}%  {us:8.2f} us  {label}")
            sys.stdout.flush()
            del xs, dys, outs, rs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
