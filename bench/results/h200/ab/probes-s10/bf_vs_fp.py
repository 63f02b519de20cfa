"""Same bytes, both 16-bit kernels: is the bf16 forward's deficit the bytes or the code?"""
import sys; sys.path.insert(0, ".")
import torch
from bench import timing as T
from cutile_rms.rmsnorm import torch_impl as TI, launch as L
casting = L.casting_code("llama", False)
for n in (512, 2048, 8192, 16384):
    m = (1 << 26) // n
    sets = T.num_sets(2 * m * n * 2)
    xs = [torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
    res = {}
    copy = T.graph_us([lambda x=x: torch.neg(x) for x in xs], 70)
    for rnd in range(3):
        for label, dt in (("bf16 kernel", torch.bfloat16), ("fp16 kernel", torch.float16)):
            xv = [x.view(dt) for x in xs]; wv = w.view(dt)
            for store in (True, False):
                calls = [lambda x=x: TI.forward(x, wv, 1e-6, 0.0, casting, None, store) for x in xv]
                us = T.graph_us(calls, T.eager_us(calls[:1], reps=3))
                res.setdefault((label, store), []).append(us)
    print(f"N={n} M={m} torch neg {copy:.2f} us", flush=True)
    for k, v in res.items():
        print(f"   {k[0]} rstd={k[1]}: {' '.join(f'{u:.2f}' for u in v)} us  -> {100 * copy / min(v):.1f}%", flush=True)
