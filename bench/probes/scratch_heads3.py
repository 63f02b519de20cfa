"""Scratch (not committed): which (tile_a, tile_b, n) backward head-view tiles fault; one per process."""

import dataclasses
import sys

import torch

from cutile_rms._device import device_info
from cutile_rms.rows import launch as RL
from cutile_rms.rows.plan import plan

info = device_info(0)
EPS = 1e-6
dtname, n, heads, ta, tb, pf, op = (
    sys.argv[1],
    int(sys.argv[2]),
    int(sys.argv[3]),
    int(sys.argv[4]),
    int(sys.argv[5]),
    sys.argv[6] == "1",
    sys.argv[7],
)
dt = getattr(torch, dtname)
a = 512
p = plan(op, a, heads, n, dt.itemsize, info.num_sms, any_length=True)
p = dataclasses.replace(p, tile_a=ta, tile_b=tb, check_a=a % ta != 0, prefetch=pf and op == "backward")
qkv = torch.randn(a, 3 * heads * n, device="cuda", dtype=dt)
x = qkv[:, : heads * n].view(a, heads, n)
w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dt)
dy = torch.randn(a, heads, n, device="cuda", dtype=dt)
rstd = torch.rsqrt(x.float().pow(2).mean(-1) + EPS)
out = torch.full((a, heads, n), float("nan"), device="cuda", dtype=dt)
dw = torch.empty(n, device="cuda", dtype=dt)
try:
    if op == "backward":
        RL.run_backward(
            p,
            x,
            dy,
            w,
            rstd,
            out,
            dw,
            0.0,
            0,
            lambda s: torch.empty(s, device="cuda"),
            info,
            torch.cuda.current_stream().cuda_stream,
        )
    else:
        RL.run_forward(p, x, w, out, torch.empty_like(rstd), EPS, 0.0, 0, info, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    print(f"{op} {dtname} n={n} heads={heads} tile {ta}x{tb} pf={int(pf)}: ok", flush=True)
except Exception as e:
    print(f"{op} {dtname} n={n} heads={heads} tile {ta}x{tb} pf={int(pf)}: FAIL {str(e)[:60]}", flush=True)
