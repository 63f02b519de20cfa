"""Issue #6 session-6 probe (bf16): prefetching tile/split kernels (scratch/s6_kernels.py) and
the shipped split kernels with 2-row tiles or 16384-wide segments, against the shipped plans
and a copy kernel; graph replay over rotated inputs; every variant checked against float64
(all rows, y and rstd / dx and dW, outputs poisoned first) on two launches before timing."""
import argparse, multiprocessing as mp, sys, time
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, "scratch")
sys.path.insert(0, ".")
SHAPES = {5120: 13107, 7168: 9362, 8192: 8192, 16384: 4096, 32768: 2048, 65536: 1024}


SHAPES[4096] = 16384


SHAPES[4096] = 16384
SHAPES[2048] = 32768
SHAPES[1024] = 65536
SHAPES[512] = 131072
SHIPPED_TILE = {512: (16, 512), 1024: (4, 1024), 2048: (4, 2048), 4096: (4, 4096)}  # backward, from sm_90.json


def variants(n):
    """(op, kind, tile_m, tile_n (elements), occupancy, tma_store, V)"""
    return [("bwd", "packed_split", 1, 16384, 1, tma, 0) for tma in (True, False)] if n >= 32768 else []


def kernel(op, kind, occ):
    import s6_kernels as P
    import s6_k3 as Q
    from cutile_rms.rmsnorm import kernels as K
    k = {("bwd", "tile_pf"): P.bwd_tile_pf, ("bwd", "tile_pf_raw"): P.bwd_tile_pf, ("fwd", "tile_pf"): P.fwd_tile_pf,
         ("bwd", "split"): K.rms_bwd_split, ("fwd", "split"): K.rms_fwd_split, ("bwd", "split_pf"): P.bwd_split_pf,
         ("fwd", "split_pf"): P.fwd_split_pf, ("bwd", "packed_tile"): P.bwd_tile_packed,
         ("bwd", "packed_split"): P.bwd_split_packed, ("fwd", "packed_tile"): P.fwd_tile_packed,
         ("bwd", "r3"): Q.bwd_tile_r3, ("fwd", "r3"): Q.fwd_tile_r3}[op, kind]
    return k.replace_hints(occupancy=occ, num_worker_warps=8)


def make_call(spec, m, n, sms, t):
    """A function(i) launching variant spec on input set i of t (dict of lists/tensors)."""
    import torch, cuda.tile as ct
    from cutile_rms.rmsnorm import kernels as K
    op, kind, tm, tn, occ, tma, V = spec
    k = kernel(op, kind, occ)
    nrt = -(-m // tm)
    split = "split" in kind
    packed = kind.startswith("packed")
    s = -(-n // tn) if split else 1
    sw = 1 << (s - 1).bit_length()
    groups = min(sms * occ // s, nrt)
    grid = groups * s
    dwp = torch.empty(groups, n, device="cuda")
    if packed:
        if kind == "packed_tile" and op == "fwd" and tn < n:
            raise ValueError("packed forward needs a row in one tile")
    cs = torch.cuda.current_stream
    cast = K.CAST_LLAMA

    def call(i):
        x, w, y = t["x"][i], t["w"], t["y"][i]
        r = t["rf"][i] if op == "fwd" else t["rb"][i]
        slots = torch.zeros(nrt * tm, sw, device="cuda", dtype=torch.int64) if split else None
        if kind == "r3":
            if op == "fwd":
                a = (x, w, y, r, 1e-6, tm, tn, tma, V)
            else:
                a = (x, t["dy"][i], w, r, y, dwp, tm, tn, tma, V)
            ct.launch(cs(), (grid,), k, a)
            if op == "bwd":
                ct.launch(cs(), (t["reduce_grid"],), K.dw_reduce, (dwp, t["dw"], 32, 256))
            return
        if packed:
            v = lambda a: a.view(torch.int32)
            dwp3 = dwp.view(groups, 2, n // 2)
            if op == "fwd":
                a = (v(x), v(w), v(y), r, 1e-6, tm, tn // 2, tma)
            elif kind == "packed_tile":
                a = (v(x), v(t["dy"][i]), v(w), r, v(y), dwp3, tm, tn // 2, tma)
            else:
                a = (v(x), v(t["dy"][i]), v(w), r, v(y), dwp3, slots, tm, tn // 2, s, sw, tma)
            ct.launch(cs(), (grid,), k, a)
            if op == "bwd":
                ct.launch(cs(), (t["reduce_grid"],), K.dw_reduce, (dwp, t["dw"], 32, 256))
            return
        if op == "fwd":
            if kind == "tile_pf":
                a = (x, w, y, r, 1e-6, tm, tn, cast, tma)
            elif kind == "split":
                a = (x, w, y, r, slots, 1e-6, 0.0, tm, tn, s, sw, cast, True, tma, 0)
            else:
                a = (x, w, y, r, slots, 1e-6, tm, tn, s, sw, cast, tma)
            ct.launch(cs(), (grid,), k, a)
        else:
            dy = t["dy"][i]
            if kind in ("tile_pf", "tile_pf_raw"):
                a = (x, dy, w, r, y, dwp, tm, tn, True, tma, kind == "tile_pf")
            elif kind == "split":
                a = (x, dy, w, r, y, dwp, slots, 0.0, tm, tn, s, sw, True, True, tma, 0)
            else:
                a = (x, dy, w, r, y, dwp, slots, tm, tn, s, sw, True, tma)
            ct.launch(cs(), (grid,), k, a)
            ct.launch(cs(), (t["reduce_grid"],), K.dw_reduce, (dwp, t["dw"], 32, 256))
    return call, grid


def warm(job):
    import torch
    n, spec = job
    try:
        t0 = time.time()
        m = 64
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        t = {"x": [x], "dy": [torch.randn_like(x)], "y": [torch.empty_like(x)], "rf": [torch.empty(m, device="cuda")], "rb": [torch.rand(m, device="cuda") + .5],
             "w": torch.randn(n, device="cuda", dtype=torch.bfloat16), "dw": torch.empty(n, device="cuda", dtype=torch.bfloat16),
             "reduce_grid": 4}
        call, _ = make_call(spec, m, n, 132, t)
        call(0)
        torch.cuda.synchronize()
        return f"compiled {n} {spec} {time.time() - t0:.1f}s"
    except Exception as e:  # noqa: BLE001
        return f"FAILED {n} {spec}: {type(e).__name__}: {str(e)[-300:]}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, nargs="+", default=[32768, 65536])
    a = p.parse_args()
    jobs = [(n, v) for n in a.n for v in variants(n)]
    t0 = time.time()
    with ProcessPoolExecutor(14, mp_context=mp.get_context("spawn")) as pool:
        for r in pool.map(warm, jobs, timeout=300):
            print(r, flush=True)
    print(f"warm-up {time.time() - t0:.0f}s", flush=True)
    import torch
    from bench import timing as T
    from cutile_rms import _device
    from cutile_rms.rmsnorm import launch as L, kernels as K
    di = _device.device_info(0)
    sms = di.num_sms
    cs = lambda: torch.cuda.current_stream()
    zeros = lambda shape: torch.zeros(shape, device="cuda", dtype=torch.int64)
    ef = lambda shape: torch.empty(shape, device="cuda")
    d = torch.bfloat16

    def tcalls(calls):
        return T.graph_us(calls, T.eager_us(calls[:1], reps=3))

    for n in a.n:
        m = SHAPES[n]
        sets = T.num_sets(3 * m * n * 2)
        xs = [torch.randn(m, n, device="cuda", dtype=d) for _ in range(sets)]
        t = {"x": xs, "dy": [torch.randn_like(x) for x in xs], "y": [torch.empty_like(x) for x in xs],
             "rf": [torch.empty(m, device="cuda") for _ in xs], "w": 1 + 0.1 * torch.randn(n, device="cuda", dtype=d)}
        t["dw"] = torch.empty_like(t["w"])
        t["reduce_grid"] = L.plan_backward(m, n, sms, elem_size=2).reduce_grid
        res = {"copy": tcalls([lambda x=x, o=o: torch.neg(x, out=o) for x, o in zip(xs, t["y"])])}
        x0 = xs[0].double(); rref = torch.rsqrt(x0.pow(2).mean(-1) + 1e-6)
        xhat = x0 * rref[:, None]
        xr = xhat.to(d).double()
        w64 = t["w"].double()
        yref = xr * w64
        wdy = t["dy"][0].double() * w64
        dxref = (wdy - xhat * (wdy * xhat).mean(-1, keepdim=True)) * rref[:, None]
        dwref = (t["dy"][0].double() * xr).sum(0)
        cast = K.CAST_LLAMA
        fwd = lambda i: L.run_forward(xs[i], t["w"], t["y"][i], t["rf"][i], 1e-6, 0.0, cast, None, di, cs(), zeros)
        plan = L.forward_plan(xs[0], None, di)
        res[f"fwd shipped {plan.kernel} {plan.tile_m}x{plan.tile_n} occ{plan.occupancy}"] = tcalls(
            [lambda i=i: fwd(i) for i in range(sets)])
        for i in range(sets):
            fwd(i)
        rtrue = t["rb"] = [r.clone() for r in t["rf"]]
        bplan = L.backward_plan(xs[0], di)
        res[f"bwd shipped {bplan.kernel} {bplan.tile_m}x{bplan.tile_n}"] = tcalls(
            [lambda i=i: L.run_backward(xs[i], t["dy"][i], t["w"], rtrue[i], t["y"][i], t["dw"], 0.0, cast, ef, di,
                                        cs(), zeros) for i in range(sets)])
        for spec in variants(n):
            op = spec[0]
            try:
                call, grid = make_call(spec, m, n, sms, t)
                label = f"{op} {spec[1]} V{spec[6]} {spec[2]}x{spec[3]} occ{spec[4]} tma{int(spec[5])} grid{grid}"
                errs = []
                for rep in range(2):
                    t["y"][0].fill_(float("nan")); t["dw"].fill_(float("nan"))
                    if op == "fwd":
                        t["rf"][0].fill_(float("nan"))
                    call(0); torch.cuda.synchronize()
                    if op == "fwd":
                        e1 = ((t["y"][0].double() - yref).abs().max() / yref.abs().max()).item()
                        e2 = ((t["rf"][0].double() - rref).abs() / rref).max().item()
                    else:
                        e1 = ((t["y"][0].double() - dxref).abs().max() / dxref.abs().max()).item()
                        dwg = t["dw"].view(2, n // 2).t().reshape(n) if spec[1].startswith("packed") else t["dw"]
                        e2 = ((dwg.double() - dwref).abs().max() / dwref.abs().max()).item()
                    errs.append((e1, e2))
                ok = all(e1 < 2e-2 and e2 < 2e-2 for e1, e2 in errs)
                us = tcalls([lambda i=i: call(i) for i in range(sets)])
                res[label + ("" if ok else " WRONG")] = us
                print(f"  N={n} {label}: {us:.2f} us maxrel errs {['%.1e/%.1e' % e for e in errs]}", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"  N={n} {spec}: FAILED {type(e).__name__}: {str(e)[-300:]}", flush=True)
        copy = res["copy"]
        print(f"== bfloat16 M={m} N={n}: copy {copy:.2f} us ({2 * m * n * 2 / copy / 1e3:.0f} GB/s)")
        for label, us in sorted(res.items(), key=lambda kv: (kv[0][:3], kv[1])):
            f = 3 if label.startswith("bwd") else 2
            print(f"   {100 * f * copy / 2 / us:6.1f}%  {us:8.2f} us  {label}")
        sys.stdout.flush()
        del xs, t
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
