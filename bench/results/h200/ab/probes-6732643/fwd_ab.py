"""Forward A/B probe (issue #6): occupancy 16/32, non-persistent grid, unroll 2, store without
TMA, prefetch reproducers. bf16 llama with weight, M = 64 Mi / N. Graph timing, rotated inputs."""
import argparse
import statistics
import sys
import time

import torch
import cuda.tile as ct

sys.path.insert(0, "scratch")
from bench import timing as T  # noqa: E402
from cutile_rms import _device  # noqa: E402
from cutile_rms.rmsnorm import launch as L  # noqa: E402
import fwd_ab_kernels as P  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, nargs="+", default=[1024, 4096, 8192, 16384])
p.add_argument("--dtype", default="bfloat16")
p.add_argument("--quick", action="store_true")
a = p.parse_args()
dt = getattr(torch, a.dtype)
dev = torch.device("cuda")
di = _device.device_info(0)
sms = torch.cuda.get_device_properties(0).multi_processor_count
stream = torch.cuda.current_stream()
print("SMs", sms, flush=True)

# --- reproducers of the prefetch miscompile
t, n = 4096, 1024
x = torch.randn(t, n, device=dev, dtype=dt)
for name, k, grid in [("prefetch_min", P.copy_prefetch_min, 264), ("min_index", P.copy_min_index, 264)]:
    y = torch.full_like(x, float("nan"))
    ct.launch(stream, (grid,), k, (x, y, n))
    torch.cuda.synchronize()
    ref = x if name == "prefetch_min" else torch.cat([x[1:], x[-1:]])
    bad = (y != ref).any(dim=1).nonzero().flatten()
    print(f"repro {name}: wrong rows {bad.numel()} of {t}; first {bad[:8].tolist()}", flush=True)
grid = 256
xp = torch.randn(t + grid, n, device=dev, dtype=dt)
y = torch.full((t, n), float("nan"), device=dev, dtype=dt)
ct.launch(stream, (grid,), P.copy_prefetch_divisible, (xp, y, n))
torch.cuda.synchronize()
bad = (y != xp[:t]).any(dim=1).nonzero().flatten()
print(f"repro prefetch_divisible: wrong rows {bad.numel()} of {t}; first {bad[:8].tolist()}", flush=True)

hinted = {}


def kern(base, occ, warps):
    key = (base, occ, warps)
    if key not in hinted:
        kw = {"occupancy": occ}
        if warps:
            kw["num_worker_warps"] = warps
        hinted[key] = base.replace_hints(**kw)
    return hinted[key]


def ref_fwd(x, w, eps=1e-6):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return ((xf * rstd).to(x.dtype).float() * w.float()).to(x.dtype), rstd.squeeze(-1)


def time_calls(calls):
    est = T.eager_us(calls[:1], reps=3)
    return T.graph_us(calls, est)


for n in a.n:
    m = 64 * 2**20 // n
    nbytes = 2 * m * n * dt.itemsize + 4 * m
    sets = T.num_sets(nbytes)
    xs = [torch.randn(m, n, device=dev, dtype=dt) for _ in range(sets)]
    w = 1 + 0.1 * torch.randn(n, device=dev, dtype=dt)
    ys = [torch.empty_like(x) for x in xs]
    rs = [torch.empty(m, device=dev, dtype=torch.float32) for _ in xs]
    res = {}
    outs = [torch.empty_like(x) for x in xs]
    res["copy(neg)"] = time_calls([lambda x=x, o=o: torch.neg(x, out=o) for x, o in zip(xs, outs)])
    del outs
    yref, rref = ref_fwd(xs[0], w)
    # baseline: the shipped plan
    plan = L.forward_plan(xs[0], None, di)
    print(n, "plan", plan, flush=True)

    def base_call(i):
        L.launch_forward(plan, xs[i], w, ys[i], rs[i], 1e-6, 0.0, L.K.CAST_LLAMA, torch.cuda.current_stream())
    res[f"base {plan.tile_m}x{plan.tile_n} occ{plan.occupancy} w{plan.warps} g{plan.grid}"] = time_calls(
        [lambda i=i: base_call(i) for i in range(sets)])

    tm0 = plan.tile_m
    variants = []  # (label, tm, occ, warps, grid, unroll, store_no_tma, lat)
    for tm in sorted({tm0, tm0 * 2}):
        tiles = m // tm
        for occ in (4, 8, 16, 32):
            for warps in (None, 4, 8):
                if a.quick and warps == 4:
                    continue
                variants.append((f"full tm{tm} occ{occ} w{warps}", tm, occ, warps, tiles, 1, False, 0))
        for occ in (16, 32):
            variants.append((f"pers tm{tm} occ{occ}", tm, occ, None, sms * occ, 1, False, 0))
    g2 = 1 << ((sms * plan.occupancy).bit_length() - 1)
    for occ in sorted({plan.occupancy, plan.occupancy * 2}):
        variants.append((f"unroll2 tm{tm0} occ{occ} w{plan.warps} g{g2}", tm0, occ, plan.warps, g2, 2, False, 0))
        variants.append((f"unroll1 tm{tm0} occ{occ} w{plan.warps} g{g2}", tm0, occ, plan.warps, g2, 1, False, 0))
    variants.append((f"store_no_tma tm{tm0}", tm0, plan.occupancy, plan.warps, plan.grid, 1, True, 0))
    for lat in (1, 3, 6):
        variants.append((f"lat{lat} tm{tm0}", tm0, plan.occupancy, plan.warps, plan.grid, 1, False, lat))

    for label, tm, occ, warps, grid, unroll, snt, lat in variants:
        if unroll == 2 and (m // tm) % (2 * grid):
            continue
        k = kern(P.fwd_probe, occ, warps)
        args = lambda i: (xs[i], w, ys[i], rs[i], 1e-6, tm, n, unroll, snt, lat)
        try:
            t0 = time.perf_counter()
            ys[0].fill_(float("nan"))
            ct.launch(torch.cuda.current_stream(), (grid,), k, args(0))
            torch.cuda.synchronize()
            ct_s = time.perf_counter() - t0
            err = ((ys[0].float() - yref.float()).norm() / yref.float().norm()).item()
            rerr = ((rs[0] - rref).abs().max()).item()
            us = time_calls([lambda i=i: ct.launch(torch.cuda.current_stream(), (grid,), k, args(i)) for i in range(sets)])
            res[label] = us
            print(f"  {label}: {us:.2f} us err {err:.1e} rstd {rerr:.1e} (first launch {ct_s:.1f}s)", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"  {label}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
    copy = res["copy(neg)"]
    cbytes = 2 * m * n * dt.itemsize
    print(f"== N={n} M={m} {a.dtype}: copy {copy:.2f} us ({cbytes / copy / 1e3:.0f} GB/s)")
    for label, us in sorted(res.items(), key=lambda kv: kv[1]):
        print(f"   {100 * copy / us:6.1f}%  {us:8.2f} us  {label}")
    sys.stdout.flush()
    del xs, ys, rs
    torch.cuda.empty_cache()
