"""Tile sweep for the single-tile and chunked kernels:  python -m bench.sweep [--dtype bfloat16] [--out F]

For each training-set row length it times, by CUDA-graph replay, every candidate (rows per tile,
blocks per SM) of the forward and backward kernels through the framework-free launchers, and
the chunked paths' (chunk width, blocks per SM), after checking each candidate's output against
a float64 reference. Writes one CSV row per candidate; the copy ceiling of the same size is
measured in the same run. This is what the tables in cutile_rms/rmsnorm/config.py are set from.
"""

import argparse
import csv
import dataclasses
import sys

import torch

from bench import cases as C
from bench import timing as T
from cutile_rms._device import device_info
from cutile_rms.rmsnorm import config as CFG
from cutile_rms.rmsnorm.launch import casting_code, launch_backward, launch_forward

OCCUPANCIES = (1, 2, 4)
MAX_TILE_ELEMS = 16384  # the sweep in cutile-facts.md found nothing better above 32 x 512
CHUNKS = (2048, 4096, 8192)
CHUNK_BLOCKS_PER_SM = (1, 2, 4)
SWEEP_N = [512, 1024, 2048, 4096, 7168, 16384, 32768]


def _ref(x, w, dy):
    xd, wd = x.double(), w.double()
    r = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)
    y = xd * r * wd
    xhat = xd * r
    wdy = dy.double() * wd
    dx = r * (wdy - xhat * (wdy * xhat).mean(-1, keepdim=True))
    return y, dx


def cur():
    """The current stream at call time: inside a graph capture, the capture stream."""
    return torch.cuda.current_stream()


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def candidates_tile(n):
    tile_n = CFG.next_pow2(n)
    for tm in (1, 2, 4, 8, 16, 32):
        if tm * tile_n <= MAX_TILE_ELEMS:
            for occ in OCCUPANCIES:
                yield tm, tile_n, occ


def _sweep_n(n, dtype_name, dt, w, f, num_sms, casting):
    m = C.TRAINING_ELEMS // n
    g = torch.Generator(device="cuda").manual_seed(n)
    sets = []
    for _ in range(2):
        x = torch.randn(m, n, device="cuda", generator=g).to(dt)
        wt = (1 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(dt)
        dy = torch.randn(m, n, device="cuda", generator=g).to(dt)
        sets.append((x, wt, dy))
    yref, dxref = _ref(*sets[0])
    y = [torch.empty_like(s[0]) for s in sets]
    rstd = [torch.empty(m, device="cuda") for _ in sets]
    dx = [torch.empty_like(s[0]) for s in sets]
    dw = [torch.empty_like(s[1]) for s in sets]
    copy_calls = [lambda s=s, o=o: torch.neg(s[0], out=o) for s, o in zip(sets, y, strict=False)]
    copy_gbps = C.copy_bytes(m, n, dtype_name) / (T.graph_us(copy_calls, 50.0) * 1e-6) / 1e9
    fwd_bytes, bwd_bytes = C.op_bytes("fwd", m, n, dtype_name), C.op_bytes("bwd", m, n, dtype_name)

    def emit(op, path, tm, tn, per_sm, calls, check, nbytes):
        try:
            for c in calls[:1]:
                c()
            torch.cuda.synchronize()
            err = check()
            us = T.graph_us(calls, 100.0, reps=10)
            row = dict(time_us=round(us, 2), gbps=round(nbytes / us / 1e3, 1), rel_err=f"{err:.1e}")
        except Exception as e:  # a candidate that fails to compile or run is recorded, not fatal
            row = dict(time_us="", gbps="", rel_err=f"{type(e).__name__}: {e}"[:120])
        w.writerow(dict(dtype=dtype_name, M=m, N=n, op=op, path=path, tile_m=tm, tile_n=tn, per_sm=per_sm,
                        copy_gbps=round(copy_gbps, 1), **row))  # fmt: skip
        f.flush()

    def fwd_calls(plan):
        def call(i):
            return lambda: launch_forward(plan, sets[i][0], sets[i][1], y[i], rstd[i], 1e-6, 0.0, casting, cur())

        return [call(0), call(1)]

    def bwd_calls(plan, dots=False):
        part = [torch.empty((plan.partial_rows, n), device="cuda") for _ in range(2)]
        rd = [torch.empty((m,), device="cuda") if dots else None for _ in range(2)]

        def call(i):
            x, wt, d = sets[i]
            outs = (dx[i], dw[i], part[i], rd[i])
            return lambda: launch_backward(plan, x, d, wt, rstd[i], *outs, 0.0, casting, cur())

        return [call(0), call(1)]

    for tm, tn, occ in candidates_tile(n) if n <= CFG.FWD_MAX_TILE_N else ():
        plan = CFG.ForwardPlan("persistent", "tile", tm, tn, max(1, min(-(-m // tm), num_sms * occ)), occ)
        emit("fwd", "tile", tm, tn, occ, fwd_calls(plan), lambda: _rel(y[0], yref), fwd_bytes)
    for chunk in CHUNKS if n >= 16384 else ():
        for per_sm in CHUNK_BLOCKS_PER_SM:
            plan = CFG.ForwardPlan("gather", "chunked", 1, chunk, max(1, min(m, num_sms * per_sm)), None)
            emit("fwd", "chunked", 1, chunk, per_sm, fwd_calls(plan), lambda: _rel(y[0], yref), fwd_bytes)
    # Backward: single tile (as planned for n, at each candidate), then chunked paths.
    base = CFG.plan_backward(m, n, num_sms)
    for tm, tn, occ in candidates_tile(n) if n <= 16384 else ():
        grid = max(1, min(-(-m // tm), num_sms * occ))
        plan = dataclasses.replace(base, kernel="tile", tile_m=tm, tile_n=tn, num_chunks=1, occupancy=occ,
                                   partial_rows=grid)  # fmt: skip
        emit("bwd", "tile", tm, tn, occ, bwd_calls(plan), lambda: _rel(dx[0], dxref), bwd_bytes)
    for chunk in CHUNKS if n > 4096 else ():
        for per_sm in CHUNK_BLOCKS_PER_SM:
            nch = -(-n // chunk)
            groups = max(1, min(m, (num_sms * per_sm) // nch))
            dot_grid = max(1, min(m, num_sms * 4))
            plan = dataclasses.replace(base, kernel="chunked", tile_m=1, tile_n=chunk, num_chunks=nch,
                                       partial_rows=groups, occupancy=None, dot_grid=dot_grid)  # fmt: skip
            emit("bwd", "chunked", 1, chunk, per_sm, bwd_calls(plan, dots=True), lambda: _rel(dx[0], dxref),
                 bwd_bytes)  # fmt: skip
    print(f"N={n} done", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sweep")
    ap.add_argument("--dtype", default="bfloat16", choices=C.DTYPE_NAMES)
    ap.add_argument("--n", nargs="+", type=int, default=SWEEP_N)
    ap.add_argument("--out", default="sweep.csv")
    args = ap.parse_args(argv)
    dt = getattr(torch, args.dtype)
    num_sms = device_info(torch.cuda.current_device()).num_sms
    casting = casting_code("llama", dt == torch.float32)
    f = open(args.out, "w", newline="")  # noqa: SIM115 - rows are flushed as they come
    w = csv.DictWriter(f, ["dtype", "M", "N", "op", "path", "tile_m", "tile_n", "per_sm", "time_us", "gbps",
                           "copy_gbps", "rel_err"])  # fmt: skip
    w.writeheader()
    for n in args.n:
        _sweep_n(n, args.dtype, dt, w, f, num_sms, casting)
        torch.cuda.empty_cache()
    f.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
