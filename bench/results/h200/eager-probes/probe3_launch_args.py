import sys, time, torch
sys.path.insert(0, "scratch")
import cuda.tile as ct
from kprobe import k1, k2, k4, k4c
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
a = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
b, c, d = a.clone(), a.clone(), a.clone()
raw = torch.cuda.current_stream().cuda_stream
print("k1", tm(lambda: ct.launch(raw, (1,), k1, (a, 64))))
print("k2", tm(lambda: ct.launch(raw, (1,), k2, (a, b, 64))))
print("k4", tm(lambda: ct.launch(raw, (1,), k4, (a, b, c, d, 64))))
print("k4 same tensor", tm(lambda: ct.launch(raw, (1,), k4, (a, a, a, d, 64))))
print("k4c", tm(lambda: ct.launch(raw, (1,), k4c, (a, b, c, d, 1e-6, 0.0, 64, 1, 0, True, False))))
print("_to_dlpack", tm(lambda: torch._C._to_dlpack(a)))
print("a.__dlpack__()", tm(lambda: a.__dlpack__()))
import cupy
ca = cupy.asarray(a); cb = cupy.asarray(b); cs = cupy.cuda.get_current_stream()
print("k2 cupy", tm(lambda: ct.launch(cs, (1,), k2, (ca, cb, 64))))
print("F.rms_norm", tm(lambda: torch.nn.functional.rms_norm(a.view(1, 4096), (4096,), a, 1e-6)))
