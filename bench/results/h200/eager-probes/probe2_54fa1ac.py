import time, torch, torch.nn.functional as F
import cuda.tile as ct
import cutile_rms.rmsnorm.torch_impl as TI
from cutile_rms.rmsnorm import launch as L, config as C, functional as FN
from cutile_rms import rms_norm
def tm(f, n=3000):
    for _ in range(200): f()
    torch.cuda.synchronize()
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n): f()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    torch.cuda.synchronize()
    return best
x = torch.randn(32, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x)
plan = C.plan_forward(32, 4096, 132, None)
kern = L.forward_kernel(plan)
raw = torch.cuda.current_stream().cuda_stream
r = torch.empty(32, device="cuda")
args = (x, w, y, r, 1e-6, 0.0, plan.tile_m, plan.tile_n, 0, True)
kern_i = L.forward_kernel(plan, False)
args_i = (x, w, y, 1e-6, 0.0, plan.tile_m, plan.tile_n, 0, True)
res = {}
res["F.rms_norm"] = tm(lambda: F.rms_norm(x, (4096,), w, 1e-6))
res["ours rms_norm infer"] = tm(lambda: rms_norm(x, w))
xg = x.clone().requires_grad_()
res["ours rms_norm train fwd"] = tm(lambda: rms_norm(xg, w))
res["F.rms_norm train fwd"] = tm(lambda: F.rms_norm(xg, (4096,), w, 1e-6))
res["TI.forward"] = tm(lambda: TI.forward(x, w, 1e-6, 0.0, 0, None, False))
res["validate"] = tm(lambda: TI.validate_x_weight(x, w, 1e-6, 0.0, "llama"))
res["check_device"] = tm(lambda: TI.check_device(x, weight=w))
res["ct.launch train kernel"] = tm(lambda: ct.launch(raw, (plan.grid,), kern, args))
res["ct.launch infer kernel"] = tm(lambda: ct.launch(raw, (plan.grid,), kern_i, args_i))
res["run_forward"] = tm(lambda: L.run_forward(x, w, y, None, 1e-6, 0.0, 0, None, 132, raw))
res["_launch+run_forward"] = tm(lambda: TI._launch(x, L.run_forward, x, w, y, None, 1e-6, 0.0, 0, None))
res["empty_like"] = tm(lambda: torch.empty_like(x, memory_format=torch.contiguous_format))
res["empty_like plain"] = tm(lambda: torch.empty_like(x))
res["new_empty"] = tm(lambda: x.new_empty((32,), dtype=torch.float32))
res["raw stream"] = tm(lambda: TI._raw_stream(0))
res["current_device"] = tm(lambda: torch.cuda.current_device())
res["get_device"] = tm(lambda: x.get_device())
res["is_compiling"] = tm(lambda: torch.compiler.is_compiling())
res["Function.apply empty"] = None
class Idt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a): return a
    @staticmethod
    def backward(ctx, g): return g
res["Function.apply"] = tm(lambda: Idt.apply(xg))
for k, v in res.items():
    if v is not None: print(f"{k:32s} {v:7.2f} us")
