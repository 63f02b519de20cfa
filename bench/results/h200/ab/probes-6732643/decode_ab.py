"""Decode probe: TMA-free loads for few-row forwards (inference, no rstd). Graph replay over 64
rotated input sets, as bench/timing.py does for decode shapes."""
import sys

import torch
import cuda.tile as ct

sys.path.insert(0, "scratch")
from bench import timing as T  # noqa: E402
from cutile_rms import _device  # noqa: E402
from cutile_rms.rmsnorm import launch as L  # noqa: E402
import fwd_ab_kernels as P  # noqa: E402

dev = torch.device("cuda")
di = _device.device_info(0)
hinted = {}


def kern(occ, warps):
    if (occ, warps) not in hinted:
        kw = {"occupancy": occ}
        if warps:
            kw["num_worker_warps"] = warps
        hinted[occ, warps] = P.fwd_probe_decode.replace_hints(**kw)
    return hinted[occ, warps]


for dname in ("bfloat16", "float32"):
    dt = getattr(torch, dname)
    for m, n in [(1, 4096), (1, 8192), (32, 4096), (32, 8192), (256, 4096), (256, 8192)]:
        sets = T.num_sets(2 * m * n * dt.itemsize)
        xs = [torch.randn(m, n, device=dev, dtype=dt) for _ in range(sets)]
        w = 1 + 0.1 * torch.randn(n, device=dev, dtype=dt)
        ys = [torch.empty_like(x) for x in xs]
        xf = xs[0].float()
        yref = ((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dt).float() * w.float()).to(dt)
        plan = L.forward_plan(xs[0], None, di)
        res = {}
        res[f"base {plan.tile_m}x{plan.tile_n} g{plan.grid} occ{plan.occupancy} w{plan.warps} mem{plan.memory}"] = T.graph_us(
            [lambda i=i: L.launch_forward(plan, xs[i], w, ys[i], None, 1e-6, 0.0, L.K.CAST_LLAMA,
                                          torch.cuda.current_stream()) for i in range(sets)], 3.0)
        tms = sorted({plan.tile_m, 1, min(m, 4)})
        for tm in tms:
            for occ, warps in [(plan.occupancy, plan.warps), (4, None), (8, None)]:
                grid = -(-m // tm)
                for lt in (True, False):
                    for st in (False,):
                        k = kern(occ, warps)
                        args = lambda i: (xs[i], w, ys[i], 1e-6, tm, n, lt, st, False)
                        ys[0].fill_(float("nan"))
                        ct.launch(torch.cuda.current_stream(), (grid,), k, args(0))
                        torch.cuda.synchronize()
                        e = ((ys[0].float() - yref.float()).norm() / yref.float().norm()).item()
                        lab = f"tm{tm} g{grid} occ{occ} w{warps} load_tma={lt} store_tma={st}"
                        if e > 1e-2:
                            lab += f" WRONG {e:.1e}"
                        res[lab] = T.graph_us([lambda i=i: ct.launch(torch.cuda.current_stream(), (grid,), k, args(i))
                                               for i in range(sets)], 3.0)
        print(f"== {dname} {m}x{n} ({sets} sets)")
        for lab, us in sorted(res.items(), key=lambda kv: kv[1])[:8]:
            print(f"   {us:7.2f} us  {lab}")
        sys.stdout.flush()
