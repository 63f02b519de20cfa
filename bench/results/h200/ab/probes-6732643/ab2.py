"""Probe 2: store allow_tma and load latency across shapes, forward and backward (tile kernels),
around the shipped plan's config. Graph timing, rotated inputs, % of the copy kernel."""
import argparse
import sys

import torch
import cuda.tile as ct

sys.path.insert(0, "scratch")
from bench import timing as T  # noqa: E402
from cutile_rms import _device  # noqa: E402
from cutile_rms.rmsnorm import launch as L  # noqa: E402
import fwd_ab_kernels as P  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384])
p.add_argument("--dtype", nargs="+", default=["bfloat16"])
p.add_argument("--ops", nargs="+", default=["fwd", "bwd"])
a = p.parse_args()
dev = torch.device("cuda")
di = _device.device_info(0)
sms = di.num_sms
hinted = {}


def kern(base, occ, warps):
    key = (base, occ, warps)
    if key not in hinted:
        kw = {"occupancy": occ}
        if warps:
            kw["num_worker_warps"] = warps
        hinted[key] = base.replace_hints(**kw)
    return hinted[key]


def time_calls(calls):
    return T.graph_us(calls, T.eager_us(calls[:1], reps=3))


def rel(a_, b_):
    return ((a_.float() - b_.float()).norm() / b_.float().norm()).item()


for dname in a.dtype:
    dt = getattr(torch, dname)
    for n in a.n:
        m = 64 * 2**20 // n
        sets = T.num_sets(3 * m * n * dt.itemsize)
        xs = [torch.randn(m, n, device=dev, dtype=dt) for _ in range(sets)]
        w = 1 + 0.1 * torch.randn(n, device=dev, dtype=dt)
        outs = [torch.empty_like(x) for x in xs]
        copy = time_calls([lambda x=x, o=o: torch.neg(x, out=o) for x, o in zip(xs, outs)])
        rs = [torch.empty(m, device=dev, dtype=torch.float32) for _ in xs]
        res = {}
        if "fwd" in a.ops:
            plan = L.forward_plan(xs[0], None, di)
            if plan.kernel == "tile":
                xf = xs[0].float()
                rref = torch.rsqrt(xf.pow(2).mean(-1) + 1e-6)
                yref = ((xf * rref[:, None]).to(dt).float() * w.float()).to(dt)
                res["fwd base"] = time_calls([lambda i=i: L.launch_forward(
                    plan, xs[i], w, outs[i], rs[i], 1e-6, 0.0, L.K.CAST_LLAMA, torch.cuda.current_stream())
                    for i in range(sets)])
                cfgs = [(plan.tile_m, plan.occupancy, plan.warps, plan.grid)]
                for occ in (1, 2, 4, 8):
                    if occ != plan.occupancy:
                        cfgs.append((plan.tile_m, occ, plan.warps, min(sms * occ, m // plan.tile_m)))
                for tm, occ, warps, grid in cfgs:
                    k = kern(P.fwd_probe2, occ, warps)
                    combos = [(st, lat, False) for st in (0, 1) for lat in (0, 1, 2)] + [(1, 1, True)]
                    if (tm, occ) != cfgs[0][:2]:
                        combos = [(1, 0, False), (1, 1, False)]
                    for st, lat, rnt in combos:
                        args = lambda i: (xs[i], w, outs[i], rs[i], 1e-6, tm, n, st, lat, rnt)
                        outs[0].fill_(float("nan"))
                        ct.launch(torch.cuda.current_stream(), (grid,), k, args(0))
                        torch.cuda.synchronize()
                        e = max(rel(outs[0], yref), rel(rs[0], rref))
                        lab = f"fwd tm{tm} occ{occ} w{warps} store{st} lat{lat}{' rstdnt' if rnt else ''}"
                        res[lab] = time_calls([lambda i=i: ct.launch(torch.cuda.current_stream(), (grid,), k, args(i))
                                               for i in range(sets)])
                        if e > 1e-2:
                            res[lab + f" WRONG {e:.1e}"] = res.pop(lab)
        if "bwd" in a.ops:
            plan = L.backward_plan(xs[0], di)
            if plan.kernel == "tile":
                dys = [torch.randn_like(x) for x in xs]
                for i in range(sets):
                    rs[i] = torch.rsqrt(xs[i].float().pow(2).mean(-1) + 1e-6)
                dwp = torch.empty(max(plan.partial_rows, sms * 8), n, device=dev, dtype=torch.float32)
                dw = torch.empty_like(w)
                res["bwd base"] = time_calls([lambda i=i: L.launch_backward(
                    plan, xs[i], dys[i], w, rs[i], outs[i], dw, dwp[:plan.partial_rows], None, 0.0, L.K.CAST_LLAMA,
                    torch.cuda.current_stream()) for i in range(sets)])
                L.launch_backward(plan, xs[0], dys[0], w, rs[0], outs[0], dw, dwp[:plan.partial_rows], None, 0.0,
                                  L.K.CAST_LLAMA, torch.cuda.current_stream())
                dxref = outs[0].clone()
                occ, warps = plan.hints
                cfgs = [(plan.tile_m, occ, warps, plan.partial_rows)]
                for o2 in (1, 2, 4, 8):
                    if o2 != occ:
                        cfgs.append((plan.tile_m, o2, warps, min(sms * o2, m // plan.tile_m)))
                for tm, oc, wa, grid in cfgs:
                    k = kern(P.bwd_probe, oc, wa)
                    combos = [(st, lat) for st in (0, 1) for lat in (0, 1, 2)]
                    if (tm, oc) != cfgs[0][:2]:
                        combos = [(1, 0), (1, 1)]
                    for st, lat in combos:
                        args = lambda i: (xs[i], dys[i], w, rs[i], outs[i], dwp[:grid], tm, n, st, lat)
                        outs[0].fill_(float("nan"))
                        ct.launch(torch.cuda.current_stream(), (grid,), k, args(0))
                        torch.cuda.synchronize()
                        e = rel(outs[0], dxref)
                        lab = f"bwd tm{tm} occ{oc} w{wa} store{st} lat{lat} (+reduce)"
                        res[lab] = time_calls([lambda i=i: (ct.launch(torch.cuda.current_stream(), (grid,), k, args(i)),
                                                            torch.sum(dwp[:grid], 0, out=None))
                                               for i in range(sets)])
                        if e > 1e-2:
                            res[lab + f" WRONG {e:.1e}"] = res.pop(lab)
                del dys
        print(f"== {dname} N={n} M={m}: copy {copy:.2f} us ({2 * m * n * dt.itemsize / copy / 1e3:.0f} GB/s)")
        for lab, us in sorted(res.items(), key=lambda kv: (kv[0][:3], kv[1])):
            nb = (2 if lab.startswith("fwd") else 3) * m * n * dt.itemsize
            print(f"   {100 * nb / us / (2 * m * n * dt.itemsize / copy):6.1f}%  {us:8.2f} us  {lab}")
        sys.stdout.flush()
        del xs, outs, rs
        torch.cuda.empty_cache()
