import time, torch, torch.nn.functional as F
import cuda.tile as ct
from cutile_rms.rmsnorm.functional import rms_norm
from cutile_rms.rmsnorm import launch as L, config as C

dev = "cuda"
# --- autocast behaviour of torch's RMSNorm
for xdt in (torch.float32, torch.bfloat16, torch.float16):
    m = torch.nn.RMSNorm(64, device=dev)  # fp32 weight
    x = torch.randn(4, 64, device=dev, dtype=xdt)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = m(x)
        y2 = F.rms_norm(x, (64,), m.weight)
        lin = torch.nn.Linear(64, 64, device=dev)(x)
        y3 = m(lin)
    print("autocast x", xdt, "->", y.dtype, y2.dtype, "linear out", lin.dtype, "->", y3.dtype)
    ref = (x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + torch.finfo(xdt).eps) * m.weight.double())
    print("   err vs f64", (y.double() - ref).abs().max().item())
print("nograd mixed", F.rms_norm(torch.randn(4, 64, device=dev, dtype=torch.bfloat16), (64,), torch.randn(64, device=dev)).dtype)

# --- host overhead pieces
def tm(f, n=2000):
    for _ in range(50): f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n): f()
    e = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return e
x = torch.randn(8, 4096, device=dev, dtype=torch.bfloat16)
w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
y = torch.empty_like(x)
plan = C.plan_forward(8, 4096, 132, None)
kern = L.forward_kernel(plan)
args = (x, w, y, x, 1e-6, 0.0, plan.tile_m, plan.tile_n, 0, True, False)
s = torch.cuda.current_stream()
raw = s.cuda_stream
res = {}
res["F.rms_norm"] = tm(lambda: F.rms_norm(x, (4096,), w, 1e-6))
res["torch.add"] = tm(lambda: torch.add(x, x))
res["ours rms_norm"] = tm(lambda: rms_norm(x, w))
res["ct.launch stream obj"] = tm(lambda: ct.launch(s, (plan.grid,), kern, args))
res["ct.launch raw int"] = tm(lambda: ct.launch(raw, (plan.grid,), kern, args))
res["current_stream()"] = tm(lambda: torch.cuda.current_stream(x.device))
res["_cuda_getCurrentRawStream"] = tm(lambda: torch._C._cuda_getCurrentRawStream(0))
res["empty_like"] = tm(lambda: torch.empty_like(x))
res["empty"] = tm(lambda: torch.empty((8, 4096), dtype=x.dtype, device=x.device))
res["x.device"] = tm(lambda: x.device)
res["reshape"] = tm(lambda: x.reshape(-1, 4096))
res["view"] = tm(lambda: x.view(8, 4096))
res["detach"] = tm(lambda: x.detach())
res["current_device"] = tm(lambda: torch.cuda.current_device())
res["is_grad_enabled"] = tm(lambda: torch.is_grad_enabled())
res["is_compiling"] = tm(lambda: torch.compiler.is_compiling())
res["is_autocast_enabled"] = tm(lambda: torch.is_autocast_enabled("cuda"))
res["plan_forward"] = tm(lambda: C.plan_forward(8, 4096, 132, None))
for k, v in res.items():
    print(f"{k:32s} {v:7.2f} us")
