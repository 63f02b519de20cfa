"""Issue #6 probe: thread-block clusters (num_ctas) for long rows. One-tile forward/backward
kernels with TILE_N = N and num_ctas 1/2/4, against the shipped plan and a copy kernel, graph
replay over rotated inputs. Compiles run first, in parallel worker processes sharing the
cuTile disk cache."""
import argparse, math, multiprocessing as mp, os, sys, time
from concurrent.futures import ProcessPoolExecutor

DT = {"bfloat16": 2, "float32": 4}


def cands(dtypes):
    out = []  # (op, dtype, n, nctas, warps)
    for dt in dtypes:
        for n, ctas in ((65536, (1, 2, 4)), (32768, (2, 4)), (16384, (2,))):
            if dt == "float32" and n == 65536:
                ctas = (2, 4)
            for c in ctas:
                out.append(("fwd", dt, n, c, 8))
        for n, ctas in ((32768, (2, 4)), (16384, (2, 4))):
            for c in ctas:
                out.append(("bwd", dt, n, c, 8))
    return out


def kernel_for(op, nctas, warps):
    from cutile_rms._launch import with_hints
    from cutile_rms.rmsnorm import kernels as K
    k = K.rms_fwd_tile if op == "fwd" else K.rms_bwd_tile
    hints = {"occupancy": 1, "num_worker_warps": warps}
    if nctas > 1:
        hints["num_ctas"] = nctas
    return with_hints(k, **hints)


def args_for(op, x, w, out, rstd, aux, n, dt):
    from cutile_rms.rmsnorm import kernels as K
    if op == "fwd":
        cast = K.CAST_GEMMA if dt == "float32" else K.CAST_LLAMA
        return (x, w, out, rstd, 1e-6, 0.0, 1, n, cast, True, False, 0)
    dy, dwp = aux
    return (x, dy, w, rstd, out, dwp, 0.0, 1, n, True, dt != "float32", False, 0)


def warm(c):
    import torch, cuda.tile as ct
    op, dt, n, nctas, warps = c
    try:
        t0 = time.time()
        d = getattr(torch, dt)
        x = torch.randn(16, n, device="cuda", dtype=d)
        w = torch.randn(n, device="cuda", dtype=d)
        out = torch.empty_like(x)
        rstd = torch.rand(16, device="cuda") + 0.5
        aux = (torch.randn_like(x), torch.empty(16, n, device="cuda")) if op == "bwd" else None
        ct.launch(torch.cuda.current_stream(), (4,), kernel_for(op, nctas, warps), args_for(op, x, w, out, rstd, aux, n, dt))
        torch.cuda.synchronize()
        return f"compiled {c} in {time.time() - t0:.1f}s"
    except Exception as e:  # noqa: BLE001
        return f"FAILED {c}: {type(e).__name__}: {str(e)[-300:]}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"])
    p.add_argument("--workers", type=int, default=12)
    a = p.parse_args()
    cs = cands(a.dtype)
    t0 = time.time()
    with ProcessPoolExecutor(a.workers, mp_context=mp.get_context("spawn")) as pool:
        for r in pool.map(warm, cs):
            print(r, flush=True)
    print(f"warm-up {time.time() - t0:.0f}s", flush=True)
    failed = set()
    import torch, cuda.tile as ct
    sys.path.insert(0, ".")
    from bench import timing as T
    from cutile_rms import _device
    from cutile_rms.rmsnorm import launch as L, kernels as K
    di = _device.device_info(0)
    sms = di.num_sms
    stream = torch.cuda.current_stream()

    # what is a block with num_ctas > 1? store bid and num_blocks per block
    @ct.kernel
    def who(out):
        ct.store(out, (ct.bid(0),), ct.full((1,), ct.num_blocks(0), dtype=ct.int32))
    o = torch.full((64,), -1, device="cuda", dtype=torch.int32)
    ct.launch(stream, (8,), who.replace_hints(num_ctas=2), (o,))
    torch.cuda.synchronize()
    print("num_ctas=2, grid 8: out", o[:16].tolist(), flush=True)

    def tcalls(calls):
        return T.graph_us(calls, T.eager_us(calls[:1], reps=3))

    for dt in a.dtype:
        d = getattr(torch, dt)
        for n in (65536, 32768, 16384):
            m = 64 * 2**20 // n
            sets = T.num_sets(3 * m * n * DT[dt])
            xs = [torch.randn(m, n, device="cuda", dtype=d) for _ in range(sets)]
            dys = [torch.randn_like(x) for x in xs]
            w = 1 + 0.1 * torch.randn(n, device="cuda", dtype=d)
            outs = [torch.empty_like(x) for x in xs]
            rs = [torch.empty(m, device="cuda") for _ in xs]
            res = {}
            res["copy"] = tcalls([lambda x=x, o=o: torch.neg(x, out=o) for x, o in zip(xs, outs)])
            cast = K.CAST_GEMMA if dt == "float32" else K.CAST_LLAMA
            # reference (float64) and shipped plan
            x0 = xs[0].double(); rref = torch.rsqrt(x0.pow(2).mean(-1) + 1e-6)
            xhat = x0 * rref[:, None]
            if dt != "float32":
                yref = (xhat.to(d).double() * w.double())
            else:
                yref = xhat * w.double()
            wdy = dys[0].double() * w.double()
            c = (wdy * xhat).mean(-1, keepdim=True)
            dxref = (wdy - xhat * c) * rref[:, None]
            dwref = (dys[0].double() * (xhat.to(d).double() if dt != "float32" else xhat)).sum(0)
            plan = L.forward_plan(xs[0], None, di)
            res[f"fwd shipped {plan.kernel} {plan.tile_m}x{plan.tile_n} g{plan.grid}"] = tcalls(
                [lambda i=i: L.launch_forward(plan, xs[i], w, outs[i], rs[i], 1e-6, 0.0, cast, torch.cuda.current_stream()) for i in range(sets)])
            L.launch_forward(plan, xs[0], w, outs[0], rs[0], 1e-6, 0.0, cast, stream)
            rstd_true = [r.clone() for r in rs]
            for i in range(sets):
                L.launch_forward(plan, xs[i], w, outs[i], rs[i], 1e-6, 0.0, cast, stream)
            rstd_true = [r.clone() for r in rs]
            dw = torch.empty_like(w)
            bplan = L.backward_plan(xs[0], di)
            ef = lambda shape: torch.empty(shape, device="cuda")
            res[f"bwd shipped {bplan.kernel} {bplan.tile_m}x{bplan.tile_n}"] = tcalls(
                [lambda i=i: L.run_backward(xs[i], dys[i], w, rstd_true[i], outs[i], dw, 0.0, cast, ef, di, torch.cuda.current_stream()) for i in range(sets)])
            for op, cdt, cn, nctas, warps in cs:
                if cdt != dt or cn != n:
                    continue
                k = kernel_for(op, nctas, warps)
                for grid in sorted({sms, sms // nctas, 2 * sms // nctas} if nctas > 1 else {sms}):
                    grid = min(grid, m)
                    label = f"{op} ctas{nctas} w{warps} grid{grid}"
                    try:
                        dwp = torch.empty(grid, n, device="cuda")
                        def call(i):
                            ct.launch(torch.cuda.current_stream(), (grid,), k, args_for(op, xs[i], w, outs[i], rs[i] if op == "fwd" else rstd_true[i], (dys[i], dwp), n, dt))
                            if op == "bwd":
                                ct.launch(torch.cuda.current_stream(), (L.plan_backward(m, n, sms, elem_size=DT[dt]).reduce_grid,), K.dw_reduce, (dwp, dw, 8, 512))
                        outs[0].fill_(float("nan")); rs[0].fill_(float("nan")); dw.fill_(float("nan")); dwp.fill_(float("nan"))
                        call(0); torch.cuda.synchronize()
                        if op == "bwd":
                            nanrows = dwp.isnan().any(1).sum().item()
                            e3 = ((dwp.double().sum(0) - dwref).norm() / dwref.norm()).item()
                            print(f"    dwp nan rows {nanrows}/{grid}, nan cols {dwp.isnan().any(0).sum().item()}, torch-sum err {e3:.1e}, dw nan {dw.isnan().sum().item()}", flush=True)
                        if op == "fwd":
                            err = ((outs[0].double() - yref).norm() / yref.norm()).item()
                            err2 = ((rs[0].double() - rref).abs() / rref).max().item()
                        else:
                            err = ((outs[0].double() - dxref).norm() / dxref.norm()).item()
                            err2 = ((dw.double() - dwref).norm() / dwref.norm()).item()
                        us = tcalls([lambda i=i: call(i) for i in range(sets)])
                        ok = err < 1e-2 and err2 < 1e-2
                        res[label + ("" if ok else " WRONG")] = us
                        print(f"  {dt} N={n} {label}: {us:.2f} us err {err:.1e} {err2:.1e}", flush=True)
                    except Exception as e:  # noqa: BLE001
                        print(f"  {dt} N={n} {label}: FAILED {type(e).__name__}: {str(e)[-200:]}", flush=True)
            copy = res["copy"]
            print(f"== {dt} M={m} N={n}: copy {copy:.2f} us ({2 * m * n * DT[dt] / copy / 1e3:.0f} GB/s)")
            for label, us in sorted(res.items(), key=lambda kv: kv[1]):
                f = 3 if label.startswith("bwd") else 2
                print(f"   {100 * f * copy / 2 / us:6.1f}%  {us:8.2f} us  {label}")
            sys.stdout.flush()
            del xs, dys, outs, rs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
