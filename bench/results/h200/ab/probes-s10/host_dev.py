"""Host cost of the eager path on the device host: sync check, per-call host time, profile."""
import sys, time, cProfile, pstats, io
sys.path.insert(0, ".")
import torch
import cutile_rms

def mk(m, n, dt):
    x = torch.randn(m, n, device="cuda", dtype=dt, requires_grad=True)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dt).requires_grad_()
    dy = torch.randn(m, n, device="cuda", dtype=dt)
    return x, w, dy

def calls(x, w, dy, fn):
    y0 = fn(x, w)
    return {
        "fwd": lambda: fn(x, w),
        "fwd_infer": lambda: fn(x.detach(), w.detach()),
        "bwd": lambda: torch.autograd.grad(y0, (x, w), dy, retain_graph=True),
        "fwd_bwd": lambda: torch.autograd.grad(fn(x, w), (x, w), dy),
    }

ours = lambda x, w: cutile_rms.rms_norm(x, w)
tref = lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)
for m, n, dt in ((1, 4096, torch.bfloat16), (16384, 4096, torch.bfloat16), (4096, 16384, torch.bfloat16),
                 (2048, 32768, torch.bfloat16), (8192, 8192, torch.float32)):
    x, w, dy = mk(m, n, dt)
    for name, fn in (("ours", ours), ("torch", tref)):
        cs = calls(x, w, dy, fn)
        for op, c in cs.items():
            for _ in range(20): c()
            torch.cuda.synchronize()
            if name == "ours":
                torch.cuda.set_sync_debug_mode("warn")
                import warnings
                with warnings.catch_warnings(record=True) as ws:
                    warnings.simplefilter("always")
                    c()
                torch.cuda.set_sync_debug_mode("default")
                syncs = len([w_ for w_ in ws if "synchron" in str(w_.message).lower()])
            else:
                syncs = -1
            torch.cuda.synchronize()
            k = 50
            t0 = time.perf_counter()
            for _ in range(k): c()
            host = (time.perf_counter() - t0) / k * 1e6
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / k * 1e6
            print(f"{m}x{n} {str(dt)[6:]} {name:5s} {op:9s} host {host:7.1f} us  wall {wall:7.1f} us  syncs {syncs}", flush=True)
x, w, dy = mk(1, 4096, torch.bfloat16)
for op in ("fwd", "bwd"):
    c = calls(x, w, dy, ours)[op]
    for _ in range(20): c()
    torch.cuda.synchronize()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(500): c()
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22); print(op, s.getvalue()[-5000:])
