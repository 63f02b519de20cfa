"""python -m bench.fused_add: the fused residual-add RMSNorm, side by side.

Providers: cutile_rms (experimental ``fused_add_rms_norm``), Liger-Kernel's
``LigerFusedAddRMSNormFunction`` and an unfused ``x + residual`` then ``F.rms_norm``, eager
(``torch``) and under ``torch.compile``. Streams: ``same`` (the residual has x's dtype) and
``fp32`` (an fp32 residual stream beside bf16/fp16 activations; Liger has no such mode).
Ops: fwd (forward that keeps what backward needs), fwd_infer, fwd_post (post-norm inference:
y only, the sum not written; providers that cannot skip it still pay for it), bwd (the
gradients of x, residual and weight from those of y and residual_out). Every provider is checked against
float64 before it is timed; timing, the copy ceiling and the CSV/summary are the main
benchmark's (bench.timing, bench.report).
"""

import sys

import torch
import torch.nn.functional as F

from bench import cases as C
from bench import timing as T
from bench.run import DTYPES, case_rows, copy_ceiling_gbps, run_context, side_main, side_parser

EPS = 1e-6
OPS = ("fwd", "fwd_infer", "fwd_post", "bwd")
STREAMS = ("same", "fp32")


def op_bytes(op: str, m: int, n: int, dtype: str, stream: str) -> int:
    """Fewest bytes an op must move: each input read once, each output written once.

    ex = element size of x, y, dy, dx; es = of the residual, residual_out, its gradients;
    ew = of the weight (x's dtype). When the residual has x's dtype, the gradients of x and of
    the residual are equal and written once.
      fwd_infer = M*N*(ex (x) + es (residual) + ex (y) + es (residual_out)) + N*ew
      fwd_post  = fwd_infer - M*N*es (no residual_out)
      fwd       = fwd_infer + 4*M (rstd)
      bwd       = M*N*(es (residual_out) + ex (dy) + es (d residual_out) + ex (dx)
                  [+ es (d residual) if its dtype differs]) + 4*M (rstd) + 2*N*ew (w, dw)
    """
    ex = C.ELEMENT_SIZE[dtype]
    es = 4 if stream == "fp32" else ex
    fwd_infer = m * n * (2 * ex + 2 * es) + n * ex
    if op == "fwd_infer":
        return fwd_infer
    if op == "fwd_post":
        return fwd_infer - m * n * es
    if op == "fwd":
        return fwd_infer + 4 * m
    return m * n * (2 * es + 2 * ex + (es if es != ex else 0)) + 4 * m + 2 * n * ex


def _ours(x, r, w, store_residual=True):
    from cutile_rms.experimental import fused_add_rms_norm

    return fused_add_rms_norm(x, r, w, EPS, store_residual=store_residual)


def _unfused(x, r, w):
    s = x + r  # promotes to fp32 with an fp32 residual stream
    return F.rms_norm(s, (s.shape[-1],), w, EPS).to(x.dtype), s


_compiled = None


def _unfused_compiled(x, r, w):
    global _compiled
    if _compiled is None:
        torch._dynamo.config.cache_size_limit = 1024
        torch._dynamo.config.accumulated_cache_size_limit = 4096
        torch._functorch.config.donated_buffer = False  # backward is replayed with retain_graph
        _compiled = torch.compile(_unfused, dynamic=False)
    return _compiled(x, r, w)


def _liger():
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    def fn(x, r, w):
        return LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)

    return fn


def providers(names=None, on_gpu=True):
    """[(name, fn or None, why missing, streams it runs)]."""
    out = [("cutile_rms", _ours, None, STREAMS), ("torch", _unfused, None, STREAMS)]
    for name, factory, streams in (
        ("torch_compile", lambda: _unfused_compiled, STREAMS),
        ("liger", _liger, ("same",)),
    ):
        if not on_gpu:
            out.append((name, None, "needs a CUDA GPU (this run uses the cuTile interpreter)", streams))
            continue
        try:
            out.append((name, factory(), None, streams))
        except Exception as e:
            out.append((name, None, f"{type(e).__name__}: {e}"[:200], streams))
    return [p for p in out if not names or p[0] in names]


def check(fn, x, r, w, dy, ds) -> str | None:
    """None if y, residual_out and the three gradients are within the main benchmark's
    CHECK_RTOL (norm-wise, against float64) of the reference, else a message."""
    xg, rg, wg = (t.detach().clone().requires_grad_() for t in (x, r, w))
    y, s = fn(xg, rg, wg)
    gx, gr, gw = torch.autograd.grad([y, s], [xg, rg, wg], [dy, ds])
    sd = (x.double() + r.double()).requires_grad_()
    wd = w.detach().double().requires_grad_()
    yd = sd * torch.rsqrt(sd.pow(2).mean(-1, keepdim=True) + EPS) * wd
    gsd, gwd = torch.autograd.grad([yd, sd], [sd, wd], [dy.double(), ds.double()])
    tol = C.CHECK_RTOL[str(x.dtype).removeprefix("torch.")]
    pairs = {"y": (y, yd), "residual_out": (s, sd), "dx": (gx, gsd), "dresidual": (gr, gsd), "dw": (gw, gwd)}
    errs = {k: ((a.double() - b).norm() / b.norm()).item() for k, (a, b) in pairs.items()}
    bad = {k: v for k, v in errs.items() if not v <= tol}
    return None if not bad else "wrong: " + ", ".join(f"{k} rel err {v:.2e} > {tol:g}" for k, v in bad.items())


def _calls(fn, op, sets):
    calls = []
    for x, r, w, dy, ds in sets:
        if op == "fwd":
            calls.append(lambda x=x, r=r, w=w: fn(x, r, w))
        elif op in ("fwd_infer", "fwd_post"):
            post = op == "fwd_post" and fn is _ours

            def f(x=x, r=r, w=w, post=post):
                with torch.no_grad():
                    return _ours(x, r, w, store_residual=False) if post else fn(x, r, w)

            calls.append(f)
        else:
            y, s = fn(x, r, w)
            calls.append(
                lambda y=y, s=s, inp=(x, r, w), g=(dy, ds): torch.autograd.grad([y, s], inp, g, retain_graph=True)
            )
    return calls


def run(shapes, dtypes, streams, ops, names=None, timings=("graph", "eager"), sha=None, device="cuda", progress=None):
    """Yield CSV rows (bench.report.COLUMNS); the variant column holds the stream."""
    on_gpu, gpu, timings, stamp, sha = run_context(device, timings, sha)
    provs = providers(names, on_gpu)
    # An fp32 stream beside fp32 activations is the "same" stream.
    work = [(d, m, n, st) for d in dtypes for st in streams for (m, n, _) in shapes if (st, d) != ("fp32", "float32")]
    for dtype, m, n, stream in progress(work) if progress else work:
        tdt = DTYPES[dtype]
        sdt = torch.float32 if stream == "fp32" else tdt
        base = dict(variant=stream, dtype=dtype, M=m, N=n, gpu=gpu, commit=sha, timestamp=stamp, label="")
        gen = torch.Generator(device=device).manual_seed(4321 + m + n)

        def rnd(shape, dt, gen=gen):
            return torch.randn(shape, generator=gen, device=device).to(dt)

        nsets = T.num_sets(op_bytes("fwd", m, n, dtype, stream))
        sets = []
        for _ in range(nsets):
            w = (1.0 + 0.1 * rnd((n,), torch.float32)).to(tdt).requires_grad_()
            sets.append((rnd((m, n), tdt).requires_grad_(), rnd((m, n), sdt).requires_grad_(), w, rnd((m, n), tdt),
                         rnd((m, n), sdt)))  # fmt: skip
        copy_gbps = copy_ceiling_gbps([s[0] for s in sets], dtype, on_gpu)
        case = [(name, fn, missing or (None if stream in runs else f"no {stream} residual stream"))
                for name, fn, missing, runs in provs]  # fmt: skip
        yield from case_rows(
            base, case, ops, timings, copy_gbps, nsets, on_gpu, 7 if on_gpu else 3,
            check=lambda fn, s0=sets[0]: check(fn, *s0),
            build=lambda fn, op, sets=sets: _calls(fn, op, sets),
            nbytes=lambda op, m=m, n=n, d=dtype, st=stream: op_bytes(op, m, n, d, st),
        )  # fmt: skip
        del sets
        if on_gpu:
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    prog = "python -m bench.fused_add"
    ap = side_parser(prog, __doc__.splitlines()[0], ["training"], ["bfloat16", "float16"],
                     "bench/results/latest-fused-add")  # fmt: skip
    ap.add_argument("--stream", nargs="+", default=list(STREAMS), choices=STREAMS)
    ap.add_argument("--op", nargs="+", default=list(OPS), choices=OPS)
    args = ap.parse_args(argv)
    return side_main(
        prog,
        args,
        argv,
        lambda shapes, device: run(
            shapes, args.dtype, args.stream, args.op, args.provider, tuple(args.timing), args.commit, device
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
