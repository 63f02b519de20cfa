"""Scratch (not committed): one head-view plan per process: checked against torch, then timed."""

import dataclasses
import sys

import torch

from bench.timing import graph_us
from cutile_rms._device import device_info
from cutile_rms.rows import launch as RL
from cutile_rms.rows.plan import plan

info = device_info(0)
EPS = 1e-6
dtname, n, heads, op, label = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
dt = getattr(torch, dtname)
a = int(sys.argv[6]) if len(sys.argv) > 6 else 524288 * 128 // (n * heads)
p = plan(op, a, heads, n, 2, info.num_sms)
if label == "nopf":
    p = dataclasses.replace(p, prefetch=False)
if label == "api":
    import cutile_rms

    qkv = torch.randn(a, 3 * heads * n, device="cuda", dtype=dt, requires_grad=True)
    x = qkv[:, : heads * n].view(a, heads, n)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dt).requires_grad_()
    y = cutile_rms.rms_norm(x, w, EPS)
    g = torch.autograd.grad(y, [qkv, w], torch.randn_like(y))
    torch.cuda.synchronize()
    print("api ok", a, heads, n, flush=True)
    sys.exit(0)
if label == "a-first":
    p = dataclasses.replace(p, tile_a=p.tile_a * p.tile_b, tile_b=1, check_a=a % (p.tile_a * p.tile_b) != 0)
sets = []
for s in range(2):
    qkv = torch.randn(a, 3 * heads * n, device="cuda", dtype=dt)
    x = qkv[:, : heads * n].view(a, heads, n)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dt)
    dy = torch.randn(a, heads, n, device="cuda", dtype=dt)
    rstd = (
        torch.rsqrt(x.float().pow(2).mean(-1) + EPS)
        if op == "backward"
        else torch.full((a, heads), float("nan"), device="cuda")
    )
    sets.append((x, w, dy, torch.full((a, heads, n), float("nan"), device="cuda", dtype=dt), rstd))
bufs = {}


def f32(shape):
    return bufs.setdefault(tuple(shape), torch.empty(shape, device="cuda"))


dw = torch.empty(n, device="cuda", dtype=dt)
calls = []
for x, w, dy, out, rstd in sets:
    if op == "forward":
        calls.append(
            lambda x=x, w=w, out=out, rstd=rstd: RL.run_forward(
                p, x, w, out, rstd, EPS, 0.0, 0, info, torch.cuda.current_stream().cuda_stream
            )
        )
    else:
        calls.append(
            lambda x=x, w=w, dy=dy, out=out, rstd=rstd: RL.run_backward(
                p, x, dy, w, rstd, out, dw, 0.0, 0, f32, info, torch.cuda.current_stream().cuda_stream
            )
        )
x, w, dy, out, rstd = sets[0]
calls[0]()
torch.cuda.synchronize()
if op == "forward":
    ref = torch.nn.functional.rms_norm(x.float(), (n,), w.float(), EPS)
else:
    xx = x.float().requires_grad_()
    ref = torch.autograd.grad(torch.nn.functional.rms_norm(xx, (n,), w.float(), EPS), [xx], dy.float())[0]
err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
t = graph_us(calls, 100.0)
print(
    f"{dtname} {a}x{heads}x{n} {op} {label} {p.tile_a}x{p.tile_b} w{p.warps} o{p.occupancy} pf{int(p.prefetch)} {t:.1f} us, rel err {err:.2g}",
    flush=True,
)
