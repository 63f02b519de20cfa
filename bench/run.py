"""The benchmark loop: cases x providers x ops, checked against float64, then timed."""

import datetime
import subprocess

import torch

from bench import cases as C
from bench import timing as T
from bench.providers import all_providers, variant_args

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        out = ""
    return out or "unknown"


def _ref(x, w, dy, offset):
    xd = x.detach().double().requires_grad_()
    wd = None if w is None else w.detach().double().requires_grad_()
    y = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)
    if wd is not None:
        y = y * (offset + wd)
    grads = torch.autograd.grad(y, [t for t in (xd, wd) if t is not None], dy.double())
    return y.detach(), grads[0], (grads[1] if wd is not None else None)


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()


def check(provider, x, w, dy, variant):
    """None if the provider's y, dx, dw are within CHECK_RTOL of float64, else a message (on
    a contiguous copy of x: the layouts themselves are the unit tests' business)."""
    pw, off, casting = variant_args(provider, variant, w)
    xg = x.detach().clone().requires_grad_()
    y = provider.fn(xg, pw, off, casting)
    inputs = [xg] + ([pw] if pw is not None else [])
    grads = torch.autograd.grad(y, inputs, dy)
    yr, dxr, dwr = _ref(x, w, dy, 1.0 if variant == "gemma" else 0.0)
    tol = C.CHECK_RTOL[str(x.dtype).removeprefix("torch.")]
    errs = {"y": _rel(y, yr), "dx": _rel(grads[0], dxr)}
    if dwr is not None:
        errs["dw"] = _rel(grads[1], dwr)
    bad = {k: v for k, v in errs.items() if not v <= tol}
    return None if not bad else "wrong: " + ", ".join(f"{k} rel err {v:.2e} > {tol:g}" for k, v in bad.items())


def make_calls(provider, op, sets, variant):
    """One closure per input set for an op. sets: list of (x, w, dy)."""
    calls = []
    for x, w, dy in sets:
        pw, off, casting = variant_args(provider, variant, w)
        inputs = [x] + ([pw] if pw is not None else [])
        if op == "fwd":
            calls.append(lambda x=x, pw=pw, off=off, c=casting: provider.fn(x, pw, off, c))
        elif op == "fwd_infer":

            def f(x=x, pw=pw, off=off, c=casting):
                with torch.no_grad():
                    return provider.fn(x, pw, off, c)

            calls.append(f)
        elif op == "bwd":
            y = provider.fn(x, pw, off, casting)
            calls.append(lambda y=y, inputs=inputs, dy=dy: torch.autograd.grad(y, inputs, dy, retain_graph=True))
        elif op == "fwd_bwd":

            def f(x=x, pw=pw, off=off, c=casting, inputs=inputs, dy=dy):
                return torch.autograd.grad(provider.fn(x, pw, off, c), inputs, dy)

            calls.append(f)
    return calls


def qkv_view(rnd, m: int, n: int, heads: int):
    """x as QK-norm reads it: the (m / heads, heads, n) view of the first heads x n columns of a
    fused QKV projection's (m / heads, 3 x heads x n) output, which requires grad (x does not own
    its memory: gradients reach it through the view)."""
    qkv = rnd((m // heads, 3 * heads * n)).requires_grad_()
    return qkv[:, : heads * n].view(m // heads, heads, n)


def copy_ceiling_gbps(xs, dtype: str, on_gpu: bool) -> float:
    """The copy ceiling for inputs like xs: an elementwise kernel reading x and writing a tensor
    of x's size, timed as the providers are (graph replay over the same rotated sets)."""
    outs = [torch.empty_like(x) for x in xs]
    calls = [lambda x=x, o=o: torch.neg(x.detach(), out=o) for x, o in zip(xs, outs, strict=True)]
    est = T.eager_us(calls[:1], reps=3)
    us = T.graph_us(calls, est) if on_gpu else est
    n = xs[0].shape[-1]
    m = xs[0].numel() // n
    return C.copy_bytes(m, n, dtype) / (us * 1e-6) / 1e9


def status_rows(row, ops, timings, status: str, note: str):
    """Rows for ops that were not timed (missing provider, failed check)."""
    for op in ops:
        for t in timings:
            yield dict(row, op=op, timing=t, time_us="", gbps="", status=status, note=note)


def timed_rows(row, op, build, timings, nbytes: int, note: str, on_gpu: bool, reps: int):
    """Build an op's calls with build() (on the capture stream on a GPU: see timing.py), time
    them, and yield one row per timing; a failure yields "failed" rows instead."""
    try:
        if on_gpu:
            with torch.cuda.stream(T.capture_stream()):
                calls = build()
            torch.cuda.current_stream().wait_stream(T.capture_stream())
        else:
            calls = build()
        est = T.eager_us(calls, reps=3)
        results = {}
        if "eager" in timings:
            results["eager"] = T.eager_us(calls, reps=reps)
        if "graph" in timings:
            results["graph"] = T.graph_us(calls, est)
        for t, us in results.items():
            gbps = round(nbytes / (us * 1e-6) / 1e9, 1)
            yield dict(row, op=op, timing=t, time_us=round(us, 3), gbps=gbps, status="ok", note=note)
    except Exception as e:
        msg = f"failed: {type(e).__name__}: {e}"[:300].replace("\n", " ")
        yield from status_rows(row, [op], timings, "failed", msg)
    finally:
        T._sync()


def provider_rows(row, ops, timings, check, build, nbytes, note: str, on_gpu: bool, reps: int):
    """Rows for one provider on one case: check() (None, or why it is wrong) first; then for
    each op, build(op) -> calls, timed (timed_rows) and counted as nbytes(op) bytes."""
    try:
        err = check()
    except Exception as e:
        err = f"failed: {type(e).__name__}: {e}"[:300]
    for op in ops:
        if err:
            yield from status_rows(row, [op], timings, err.split(":")[0], err)
        else:
            yield from timed_rows(row, op, lambda op=op: build(op), timings, nbytes(op), note, on_gpu, reps)


def run_context(device: str, timings, sha):
    """(on_gpu, gpu name, timings, timestamp, commit) of a run on device: "cuda", or "cpu" (the
    interpreter: eager timing only)."""
    on_gpu = device == "cuda"
    gpu = torch.cuda.get_device_name() if on_gpu else "cpu (cuTile interpreter)"
    if not on_gpu:
        timings = tuple(t for t in timings if t == "eager")
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return on_gpu, gpu, timings, stamp, sha or commit()


def case_rows(base, provs, ops, timings, copy_gbps: float, nsets: int, on_gpu: bool, reps: int, check, build, nbytes):
    """Rows of every provider on one case. provs: (name, provider, why it is missing or None);
    check(provider), build(provider, op) -> calls, nbytes(op) (see provider_rows)."""
    for name, provider, missing in provs:
        row = dict(base, provider=name, copy_gbps=round(copy_gbps, 1))
        if missing:
            yield from status_rows(row, ops, timings, "missing", missing)
            continue
        yield from provider_rows(
            row, ops, timings,
            check=lambda p=provider: check(p),
            build=lambda op, p=provider: build(p, op),
            nbytes=nbytes, note=f"{nsets} input sets rotated", on_gpu=on_gpu, reps=reps,
        )  # fmt: skip


def run(shapes, dtypes, variants, ops, provider_names=None, timings=("graph", "eager"), progress=None, sha=None,
        device="cuda", qkv_heads=None):  # fmt: skip
    """Yield CSV rows (dicts). shapes: (M, N, label) triples, e.g. from cases.shape_set().

    device="cpu" runs cutile_rms through the cuTile interpreter (interpret mode must be on):
    eager timing only, and providers that need a GPU are reported as missing. qkv_heads H: x is
    the (M / H, H, N) head view of a fused QKV projection (qkv_view), dy contiguous of its shape;
    the label says so.
    """
    on_gpu, gpu, timings, stamp, sha = run_context(device, timings, sha)
    reps = 7 if on_gpu else 3  # the interpreter is slow and its timings only indicative
    providers = [(p.name, p, p.missing) for p in all_providers(provider_names, on_gpu)]
    work = [(d, m, n, lab, v) for d in dtypes for (m, n, lab) in shapes for v in variants]
    for dtype, m, n, label, variant in progress(work) if progress else work:
        tdt = DTYPES[dtype]
        has_w = variant != "noweight"
        if qkv_heads:
            label = f"{label} qkv view, {qkv_heads} heads".strip()
        base = dict(variant=variant, dtype=dtype, M=m, N=n, gpu=gpu, commit=sha, timestamp=stamp, label=label)
        nsets = T.num_sets(C.op_bytes("fwd", m, n, dtype, has_w))
        gen = torch.Generator(device=device).manual_seed(1234 + m + n)

        def rnd(shape, gen=gen, tdt=tdt):
            return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(tdt)

        sets = []
        for _ in range(nsets):
            x = qkv_view(rnd, m, n, qkv_heads) if qkv_heads else rnd((m, n)).requires_grad_()
            w = (1.0 + 0.1 * rnd((n,)).float()).to(tdt).requires_grad_() if has_w else None
            if variant == "gemma" and w is not None:
                w = (0.1 * rnd((n,)).float()).to(tdt).requires_grad_()
            sets.append((x, w, rnd(x.shape)))
        copy_gbps = copy_ceiling_gbps([s[0] for s in sets], dtype, on_gpu)
        yield from case_rows(
            base, providers, ops, timings, copy_gbps, nsets, on_gpu, reps,
            check=lambda p, s0=sets[0], v=variant: check(p, *s0[:2], s0[2], v),
            build=lambda p, op, sets=sets, v=variant: make_calls(p, op, sets, v),
            nbytes=lambda op, m=m, n=n, d=dtype, w=has_w: C.op_bytes(op, m, n, d, w),
        )  # fmt: skip
        del sets
        if on_gpu:
            torch.cuda.empty_cache()


def side_parser(prog: str, description: str, default_sets: list, default_dtypes: list, out: str):
    """The arguments every side benchmark (bench.fused_add, bench.fp8) shares; add its own."""
    import argparse

    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--set", nargs="+", default=default_sets, choices=["training", "decode", "models", "cpu"])
    ap.add_argument("--dtype", nargs="+", default=default_dtypes, choices=C.DTYPE_NAMES)
    ap.add_argument("--provider", nargs="+", default=None)
    ap.add_argument("--timing", nargs="+", default=["graph", "eager"], choices=["graph", "eager"])
    ap.add_argument("--out", default=out)
    ap.add_argument("--commit", default=None)
    return ap


def side_main(prog: str, args, argv, rows_for) -> int:
    """Run a side benchmark: on the GPU, or through the interpreter on the CPU (the "cpu" shape
    set) when there is none; rows_for(shapes, device) yields its CSV rows; writes the results."""
    import shlex
    import sys

    from bench.report import write_results
    from cutile_rms import interpret

    device = "cuda"
    if not torch.cuda.is_available() or interpret.is_enabled():
        print(f"{prog}: no GPU: running through the cuTile interpreter on the CPU (eager timings of the "
              "interpreter, small shapes)")  # fmt: skip
        interpret.enable()
        device = "cpu"
        args.set = ["cpu"]
    shapes = [s for name in args.set for s in C.shape_set(name)]
    command = f"{prog} " + shlex.join(argv if argv is not None else sys.argv[1:])
    print(write_results(args.out, rows_for(shapes, device), command)[1])
    return 0
