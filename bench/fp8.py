"""python -m bench.fp8: RMSNorm with FP8 output, side by side.

Providers: cutile_rms (experimental ``rms_norm_fp8``); ``F.rms_norm`` then the scale and
torch's FP8 cast, eager (``torch``) and under ``torch.compile`` (which fuses them); Liger-Kernel's
RMSNorm then the same cast (``liger``). Variants: ``static`` (one given scale; cutile_rms also
returns amax), ``dynamic`` (a scale per row from its amax, per-token quantization) and
``transpose`` (static, and also y's (N, M) transpose: cutile_rms writes both from one kernel, the
others transpose the FP8 result with a copy). Op:
``fwd_fp8`` (inference: no rstd). Every provider is checked against float64 before it is
timed; timing, the copy ceiling and the CSV/summary are the main benchmark's (bench.timing,
bench.report).
"""

import sys

import torch
import torch.nn.functional as F

from bench import cases as C
from bench import timing as T
from bench.run import DTYPES, case_rows, copy_ceiling_gbps, run_context, side_main, side_parser

EPS = 1e-6
OPS = ("fwd_fp8",)
VARIANTS = ("static", "dynamic", "transpose")
OUT = torch.float8_e4m3fn
FP8_MAX = 448.0
# Dequantized y against the float64 norm, norm-wise: one e4m3 rounding is at most 2^-4 relative.
CHECK_RTOL = 2.0**-4
STATIC_SCALE = 8.0 / FP8_MAX  # puts |rms_norm(x)| ~ 8 at half the range, as the tests do


def op_bytes(op: str, m: int, n: int, dtype: str, variant: str) -> int:
    """Fewest bytes: x read once, y written at one byte (and y_t, transposed), the weight once,
    and the per-row fp32 scales (dynamic) or the 4-byte scale and amax (static)."""
    ex = C.ELEMENT_SIZE[dtype]
    extra = 4 * m if variant == "dynamic" else 8
    outputs = 2 if variant == "transpose" else 1
    return m * n * (ex + outputs) + n * ex + extra


def _ours(x, w, scale, transpose=False):
    from cutile_rms.experimental import rms_norm_fp8

    out = rms_norm_fp8(x, w, EPS, scale=scale, transpose=transpose)
    return out.y, out.scale


def _quantized(y, scale, transpose):
    """The scale and cast (and transpose) every other provider applies to its norm y (fp32)."""
    if scale is None:
        scale = (y.abs().amax(-1, keepdim=True) / FP8_MAX).clamp(min=torch.finfo(torch.float32).tiny)
    q = (y / scale).clamp(-FP8_MAX, FP8_MAX).to(OUT)
    if transpose:
        q.t().contiguous()  # y_t: timed, not returned (the check reads y)
    return q, scale


def _torch(x, w, scale, transpose=False):
    return _quantized(F.rms_norm(x, (x.shape[-1],), w, EPS).float(), scale, transpose)


_compiled = None


def _torch_compiled(x, w, scale, transpose=False):
    global _compiled
    if _compiled is None:
        torch._dynamo.config.cache_size_limit = 1024
        torch._dynamo.config.accumulated_cache_size_limit = 4096
        _compiled = torch.compile(_torch, dynamic=False)
    return _compiled(x, w, scale, transpose)


def _liger():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    def fn(x, w, scale, transpose=False):
        return _quantized(LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False).float(), scale, transpose)

    return fn


def providers(names=None, on_gpu=True):
    """[(name, fn or None, why missing)]."""
    out = [("cutile_rms", _ours, None), ("torch", _torch, None)]
    for name, factory in (("torch_compile", lambda: _torch_compiled), ("liger", _liger)):
        if not on_gpu:
            out.append((name, None, "needs a CUDA GPU (this run uses the cuTile interpreter)"))
            continue
        try:
            out.append((name, factory(), None))
        except Exception as e:
            out.append((name, None, f"{type(e).__name__}: {e}"[:200]))
    return [p for p in out if not names or p[0] in names]


def check(fn, x, w, scale, transpose=False) -> str | None:
    """None if y * scale is within CHECK_RTOL (norm-wise) of the float64 norm, else a message."""
    with torch.no_grad():
        y, s = fn(x, w, scale, transpose)
    xd = x.double()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
    deq = y.double() * (s.double() if s.dim() == 0 or s.numel() == 1 else s.double().reshape(*y.shape[:-1], 1))
    err = ((deq - ref).norm() / ref.norm()).item()
    return None if err <= CHECK_RTOL else f"wrong: y rel err {err:.2e} > {CHECK_RTOL:g}"


def _calls(fn, sets, transpose):
    def call(x, w, s):
        with torch.no_grad():
            return fn(x, w, s, transpose)

    return [lambda x=x, w=w, s=s: call(x, w, s) for x, w, s in sets]


def run(shapes, dtypes, variants, names=None, timings=("graph", "eager"), sha=None, device="cuda", progress=None):
    """Yield CSV rows (bench.report.COLUMNS); the variant column holds the scaling."""
    on_gpu, gpu, timings, stamp, sha = run_context(device, timings, sha)
    provs = providers(names, on_gpu)
    work = [(d, m, n, lab, v) for d in dtypes for (m, n, lab) in shapes for v in variants]
    for dtype, m, n, label, variant in progress(work) if progress else work:
        tdt = DTYPES[dtype]
        base = dict(variant=variant, dtype=dtype, M=m, N=n, gpu=gpu, commit=sha, timestamp=stamp, label=label)
        gen = torch.Generator(device=device).manual_seed(2468 + m + n)

        def rnd(shape, gen=gen):
            return torch.randn(shape, generator=gen, device=device)

        nsets = T.num_sets(op_bytes("fwd_fp8", m, n, dtype, variant))
        scale = None if variant == "dynamic" else torch.full((1,), STATIC_SCALE, device=device)
        transpose = variant == "transpose"
        sets = [(rnd((m, n)).to(tdt), (1.0 + 0.1 * rnd((n,))).to(tdt), scale) for _ in range(nsets)]
        copy_gbps = copy_ceiling_gbps([s[0] for s in sets], dtype, on_gpu)
        yield from case_rows(
            base, provs, OPS, timings, copy_gbps, nsets, on_gpu, 7 if on_gpu else 3,
            check=lambda fn, s0=sets[0], t=transpose: check(fn, *s0, t),
            build=lambda fn, op, sets=sets, t=transpose: _calls(fn, sets, t),
            nbytes=lambda op, m=m, n=n, d=dtype, v=variant: op_bytes(op, m, n, d, v),
        )  # fmt: skip
        del sets
        if on_gpu:
            torch.cuda.empty_cache()


def main(argv=None) -> int:
    prog = "python -m bench.fp8"
    ap = side_parser(prog, __doc__.splitlines()[0], ["training", "models", "decode"], ["bfloat16"],
                     "bench/results/latest-fp8")  # fmt: skip
    ap.add_argument("--variant", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    args = ap.parse_args(argv)
    return side_main(
        prog,
        args,
        argv,
        lambda shapes, device: run(
            shapes, args.dtype, args.variant, args.provider, tuple(args.timing), args.commit, device
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
