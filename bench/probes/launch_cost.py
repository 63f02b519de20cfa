"""GPU probe of issue 21's launch path: the host cost of one row-tile forward launched by
ct.launch against the same specialization's cubin launched through the driver (cutile_rms._cubin),
and the parts of the latter (runtime values, packing, cuLaunchKernel). One process; each loop runs
CALLS launches back to back and synchronizes once after taking its wall time.

    python -m bench.probes.launch_cost            # bf16 8 x 4096 (the issue's shape); CALLS=5000

Prints one line per path (host us per launch) and checks first that both paths give the same bits.
"""

import os
import tempfile
import time

import cuda.tile as ct
import torch
from cuda.bindings import driver
from cuda.tile.compilation import ScalarConstraint

from cutile_rms import _abi, _cubin
from cutile_rms.rmsnorm import kernels as CK
from cutile_rms.rows import launch as RL
from cutile_rms.rows.plan import plan

CALLS = int(os.environ.get("CALLS", "5000"))
_CT = {torch.bfloat16: ct.bfloat16, torch.float16: ct.float16, torch.float32: ct.float32}


def per_call_us(step) -> float:
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        step()
    t = time.perf_counter() - t0
    torch.cuda.synchronize()
    return 1e6 * t / CALLS


def main(m=8, n=4096, dtype=torch.bfloat16):
    props = torch.cuda.get_device_properties(0)
    arch, sms = f"sm_{props.major}{props.minor}", props.multi_processor_count
    es = torch.tensor([], dtype=dtype).element_size()
    x = torch.randn(m, 1, n, device="cuda", dtype=dtype)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dtype)
    y, rstd = torch.empty_like(x), torch.empty(m, 1, device="cuda")
    p = plan("forward", m, 1, n, es, sms, long=False, lanes=False, static=False, any_length=True)
    values = dict(x=x, r=x, s_out=x, y=y, w=w, rstd_out=rstd, eps=1e-6, offset=0.0)
    values.update(RL.constants(p, CK.CAST_LLAMA, True, True))
    kernel = RL._VARIANTS["forward", p.static]
    args = RL.arguments("forward", values)
    stream = torch.cuda.current_stream()
    hinted = kernel[p.hints]

    f32 = ScalarConstraint(ct.float32)
    params = [
        _cubin.Array(v.data_ptr(), _CT[v.dtype], tuple(v.shape), tuple(v.stride()))
        if isinstance(v, torch.Tensor)
        else (f32, v)
        if isinstance(v, float)
        else v
        for v in args
    ]
    sig = _cubin.signature(params)
    hints = {"occupancy": p.occupancy, "num_worker_warps": p.warps}
    with tempfile.TemporaryDirectory() as d:
        symbol, cubin = _cubin.CubinCache(d).get("rows.forward", kernel.kernel, sig, hints, arch)
    k = _cubin.CubinKernel(cubin, symbol, sig)
    runtime = _cubin.runtime_values(params)
    handle = stream.cuda_stream
    packer = _abi.packer(k.layout)

    ct.launch(stream, (p.grid,), hinted, args)
    torch.cuda.synchronize()
    ref = y.clone()
    y.fill_(float("nan"))
    k.launch(handle, (p.grid,), runtime)
    torch.cuda.synchronize()
    assert torch.equal(y.view(torch.uint8), ref.view(torch.uint8)), "cubin launch differs from ct.launch"

    rows = [
        ("ct.launch (args prepared)", lambda: ct.launch(stream, (p.grid,), hinted, args)),
        ("cubin: values+pack+launch", lambda: k.launch(handle, (p.grid,), _cubin.runtime_values(params))),
        ("cubin: pack+launch", lambda: k.launch(handle, (p.grid,), runtime)),
        (
            "cubin: cuda.bindings launch",
            lambda: driver.cuLaunchKernel(k._function, p.grid, 1, 1, 1, 1, 1, 0, handle, k._params, 0),
        ),  # the wrapper's own cost
        ("runtime_values only", lambda: _cubin.runtime_values(params)),
        ("pack only (one struct)", lambda: packer.pack(*runtime)),
        ("torch.cuda.current_stream()", lambda: torch.cuda.current_stream().cuda_stream),
    ]
    print(f"{props.name}, {dtype} {m} x {n}, grid {p.grid}, {CALLS} calls per row", flush=True)
    for name, step in rows:
        print(f"{name:32s} {per_call_us(step):8.2f} us", flush=True)


if __name__ == "__main__":
    main()
