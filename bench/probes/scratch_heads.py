"""Scratch (not committed): head-view tile orientation A/B, forward and backward."""

import dataclasses

import torch

import cutile_rms
from bench.timing import graph_us
from cutile_rms._device import device_info
from cutile_rms.rows import launch as RL
from cutile_rms.rows.plan import plan

info = device_info(0)
EPS = 1e-6
for dt in (torch.bfloat16, torch.float16):
    for n, heads in ((128, 32), (128, 8), (64, 32), (256, 8), (96, 32)):
        a = 524288 * 128 // (n * heads)
        sets = []
        for s in range(2):
            qkv = torch.randn(a, 3 * heads * n, device="cuda", dtype=dt)
            x = qkv[:, : heads * n].view(a, heads, n)
            w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dt)
            dy = torch.randn(a, heads, n, device="cuda", dtype=dt)
            y = torch.empty(a, heads, n, device="cuda", dtype=dt)
            rstd = torch.empty(a, heads, device="cuda")
            dx = torch.empty_like(y)
            dw = torch.empty_like(w)
            sets.append((qkv, x, w, dy, y, rstd, dx, dw))
        res = []
        for op in ("forward", "backward"):
            p = plan(op, a, heads, n, 2, info.num_sms, any_length=True, persistent=True if n == 96 else None)
            flips = [("rule", p)]
            if p.tile_b > 1:
                flips.append(("a-first", dataclasses.replace(p, tile_a=p.tile_a * p.tile_b, tile_b=1)))
            for label, q in flips:
                bufs = {}

                def f32(shape):
                    return bufs.setdefault(tuple(shape), torch.empty(shape, device="cuda"))

                calls = []
                for qkv, x, w, dy, y, rstd, dx, dw in sets:
                    if op == "forward":
                        calls.append(
                            lambda x=x, w=w, y=y, rstd=rstd, q=q: RL.run_forward(
                                q, x, w, y, rstd, EPS, 0.0, 0, info, torch.cuda.current_stream().cuda_stream
                            )
                        )
                    else:
                        calls.append(
                            lambda x=x, w=w, dy=dy, rstd=rstd, dx=dx, dw=dw, q=q: RL.run_backward(
                                q, x, dy, w, rstd, dx, dw, 0.0, 0, f32, info, torch.cuda.current_stream().cuda_stream
                            )
                        )
                # correctness vs torch
                qkv, x, w, dy, y, rstd, dx, dw = sets[0]
                calls[0]()
                torch.cuda.synchronize()
                if op == "forward":
                    ref = torch.nn.functional.rms_norm(x.float(), (n,), w.float(), EPS)
                    err = ((y.float() - ref).abs().max()).item()
                else:
                    err = float("nan")
                t = graph_us(calls, 100.0)
                res.append(
                    f"{op} {label} {q.tile_a}x{q.tile_b} o{q.occupancy} pf{int(q.prefetch)} {t:.1f}us err{err:.3g}"
                )

            # shipped through the API
            def api(x=sets[0][1], w=sets[0][2], dy=sets[0][3], op=op):
                if op == "forward":
                    with torch.no_grad():
                        cutile_rms.rms_norm(x, w, EPS)
                else:
                    xx = x.detach().requires_grad_()
                    torch.autograd.grad(cutile_rms.rms_norm(xx, w, EPS), [xx], dy)

            # contiguous 2-D baseline through the API
        cont = torch.randn(a * heads, n, device="cuda", dtype=dt)
        wc = sets[0][2]

        def c2():
            with torch.no_grad():
                cutile_rms.rms_norm(cont, wc, EPS)

        def cp():
            cont.clone()

        res.append(f"2-D contiguous api fwd_infer {graph_us([c2], 100.0):.1f}us; copy {graph_us([cp], 100.0):.1f}us")
        print(dt, f"{a}x{heads}x{n}", " | ".join(res), flush=True)
