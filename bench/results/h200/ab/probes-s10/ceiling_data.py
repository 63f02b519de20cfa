"""Is the copy ceiling data-dependent? torch.neg over N(0,1) data of one 16-bit type, read as
either type (same kernel per type, different bits), and our forward on both."""
import sys; sys.path.insert(0, ".")
import torch
from bench import timing as T
from cutile_rms.rmsnorm import torch_impl as TI, launch as L
casting = L.casting_code("llama", False)
n = 2048; m = (1 << 26) // n
sets = T.num_sets(2 * m * n * 2)
data = {dt: [torch.randn(m, n, device="cuda", dtype=dt) for _ in range(sets)] for dt in (torch.bfloat16, torch.float16)}
data["zeros"] = [torch.zeros(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
data["ones"] = [torch.ones(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
for rnd in range(3):
    for src, xs in data.items():
        for as_dt in (torch.bfloat16, torch.float16):
            xv = [x.view(as_dt) for x in xs]
            outs = [torch.empty_like(x) for x in xv]
            neg = T.graph_us([lambda x=x, o=o: torch.neg(x, out=o) for x, o in zip(xv, outs)], 70)
            fw = T.graph_us([lambda x=x: TI.forward(x, w.view(as_dt), 1e-6, 0.0, casting, None, True) for x in xv], 70)
            print(f"round {rnd} data {str(src).replace('torch.', ''):8s} read as {str(as_dt)[6:]:8s}: neg {neg:6.2f} us  "
                  f"our fwd {fw:6.2f} us  ({100 * neg / fw:.1f}%)", flush=True)
