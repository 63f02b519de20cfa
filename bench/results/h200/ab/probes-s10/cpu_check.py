import sys; sys.path.insert(0, "probe10"); sys.path.insert(0, ".")
import torch, numpy as np
from cutile_rms import interpret as I
import s10_kernels as S
torch.manual_seed(0)
for dt in (torch.bfloat16, torch.float16):
    m, n = 5, 512
    x = torch.randn(m, n, dtype=dt); dy = torch.randn(m, n, dtype=dt); w = (1 + 0.1 * torch.randn(n)).to(dt)
    y = torch.full_like(x, float("nan")); I.launch((3,), S.copy_fwd, (x, y, 2, 128, True)); assert torch.equal(y, x)
    dx = torch.full_like(x, float("nan")); I.launch((3,), S.copy_bwd, (x, dy, dx, 2, 128, False))
    assert torch.equal(dx, (x.float() + dy.float()).to(dt))
    rstd = torch.rsqrt(x.double().pow(2).mean(-1) + 1e-6)
    xh = x.double() * rstd[:, None]; wdy = dy.double() * w.double()
    dxr = (wdy - xh * (wdy * xh).mean(-1, keepdim=True)) * rstd[:, None]
    dwr = (dy.double() * xh.to(dt).double()).sum(0)
    for rev in (False, True):
        dx.fill_(float("nan")); part = torch.full((3, n), float("nan"))
        I.launch((3,), S.bwd_twopass, (x, dy, w, rstd.float(), dx, part, 128, True, rev))
        e1 = ((dx.double() - dxr).abs().max() / dxr.abs().max()).item()
        e2 = ((part.double().sum(0) - dwr).abs().max() / dwr.abs().max()).item()
        print(dt, rev, e1, e2)
    for V in (4, 8):
        x3 = x.view(m, n // V, V); y3 = torch.full_like(x3, float("nan"))
        I.launch((m,), S.row3d, (x3, w.view(n // V, V), y3, 1e-6, n // V, V))
        yr = (xh.to(dt).double() * w.double())
        print("row3d", V, ((y3.reshape(m, n).double() - yr).abs().max() / yr.abs().max()).item())
