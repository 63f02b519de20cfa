"""python -m bench.host: the host time of an eager call, ours beside torch's, in one process.

Each provider's call runs ``--calls`` times back to back without synchronizing, after a warm-up;
the host time per call is the loop's wall time over the calls, taken before the one final
synchronization (so it counts what Python, the dispatcher, autograd, allocations and the launch
cost, not the GPU's time, which is far shorter at these sizes). Ops: ``infer`` (the module's
forward under no_grad) and ``fwd_bwd`` (forward and backward through autograd, dx and dW).
Providers: ``cutile_rms`` (``cutile_rms.RMSNorm``), ``torch`` (``torch.nn.RMSNorm``, i.e.
F.rms_norm) and ``liger`` (``LigerRMSNorm``) where installed. Writes OUT/host.csv (provider, op,
M, N, dtype, host_us, device, commit, command) and prints one line per row.

    python -m bench.host                       # 8 x 4096 and 32 x 4096, bf16, on the GPU
    python -m bench.host --shapes 1x4096 --calls 2000 --out DIR

Without a GPU it runs on the CPU (cutile_rms through the cuTile interpreter): a smoke test of the
script, not a measurement.
"""

import argparse
import csv
import os
import shlex
import sys
import time

import torch

from bench import cases as C
from bench import run as R

OPS = ("infer", "fwd_bwd")
PROVIDERS = ("cutile_rms", "torch", "liger")
EPS = 1e-6


def _module(provider: str, n: int, dtype, device):
    """The provider's RMSNorm module over n, or None where it is not installed."""
    if provider == "cutile_rms":
        from cutile_rms import RMSNorm

        return RMSNorm(n, eps=EPS, device=device, dtype=dtype)
    if provider == "torch":
        return torch.nn.RMSNorm(n, eps=EPS, device=device, dtype=dtype)
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
    except Exception:  # not installed, or a broken install
        return None
    return LigerRMSNorm(n, eps=EPS).to(device=device, dtype=dtype)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def host_us(step, calls: int, device) -> float:
    """Host microseconds per call of step() over calls back-to-back calls (after 3 warm-ups)."""
    for _ in range(3):
        step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        step()
    t1 = time.perf_counter()
    _sync(device)
    return (t1 - t0) / calls * 1e6


def _step(op: str, mod, x, dy):
    if op == "infer":

        def step():
            with torch.no_grad():
                mod(x)

    else:
        xg = x.detach().requires_grad_()

        def step():
            mod(xg).backward(dy)
            xg.grad = None
            mod.weight.grad = None

    return step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.host", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["8x4096", "32x4096"], metavar="MxN")
    ap.add_argument("--dtype", nargs="+", default=["bfloat16"], choices=C.DTYPE_NAMES)
    ap.add_argument("--op", nargs="+", default=list(OPS), choices=OPS)
    ap.add_argument("--provider", nargs="+", default=list(PROVIDERS), choices=PROVIDERS)
    ap.add_argument("--calls", type=int, default=1000, help="calls timed per row (default 1000)")
    ap.add_argument("--out", default="bench/results/latest")
    ap.add_argument("--commit", default=None)
    args = ap.parse_args(argv)
    if args.calls < 1:
        ap.error("--calls must be at least 1")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        from cutile_rms import interpret

        with interpret.interpreting():  # the kernels on CPU tensors, through the interpreter
            return _run(args, argv, device)
    return _run(args, argv, device)


def _run(args, argv, device) -> int:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (interpreter)"
    sha = args.commit or R.commit()
    command = "python -m bench.host " + shlex.join(argv if argv is not None else sys.argv[1:])
    rows = []
    g = torch.Generator().manual_seed(0)
    for text in args.shapes:
        m, n, _ = C.parse_shape(text)
        for dtype_name in args.dtype:
            dtype = getattr(torch, dtype_name)
            x = torch.randn(m, n, generator=g).to(device, dtype)
            dy = torch.randn(m, n, generator=g).to(device, dtype)
            for provider in args.provider:
                mod = _module(provider, n, dtype, device)
                if mod is None:
                    print(f"{provider}: not installed", flush=True)
                    continue
                for op in args.op:
                    us = host_us(_step(op, mod, x, dy), args.calls, device)
                    rows.append(dict(provider=provider, op=op, M=m, N=n, dtype=dtype_name, host_us=f"{us:.2f}",
                                     device=name, commit=sha, command=command))  # fmt: skip
                    print(f"{provider:11s} {op:8s} {m}x{n} {dtype_name:9s} {us:9.2f} us per call", flush=True)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "host.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, ["provider", "op", "M", "N", "dtype", "host_us", "device", "commit", "command"])
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
