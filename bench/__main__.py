"""python -m bench: cutile_rms side by side with the other RMSNorm libraries on one GPU.

Every provider (cutile_rms and its forced modes, torch eager, torch.compile, Liger-Kernel, Quack)
is checked against float64 on each shape before it is timed; kernel time comes from CUDA-graph
replay over input sets larger than L2, beside the copy ceiling measured in the same run. Writes
OUT/results.csv (long format), OUT/summary.md (cutile_rms against the best other provider) and
OUT/plots/*.png. Without a GPU it runs cutile_rms through the cuTile interpreter on a small set.
"""

import argparse
import os
import secrets
import shlex
import sys

DEFAULT_SETS = ["training", "decode"]


def _shape(text):
    from bench import cases as C

    try:
        return C.parse_shape(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


class _Help(argparse.HelpFormatter):
    """Help that ends each option with its default (lists as the words one would type), unless
    the help text already says it or the option is a switch."""

    def _get_help_string(self, action):
        text = action.help or ""
        d = action.default
        if "default" in text or d is None or d is argparse.SUPPRESS or isinstance(d, bool):
            return text
        return f"{text} (default: {' '.join(map(str, d)) if isinstance(d, list) else d})"


def parser() -> argparse.ArgumentParser:
    from bench import cases as C
    from bench.providers import PROVIDER_NAMES

    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__.split("\n\n", 1)[1].strip(),
        formatter_class=_Help,
    )
    ap.add_argument("--set", nargs="+", default=DEFAULT_SETS, choices=C.SETS, metavar="SET",
                    help=f"named shape sets, any of: {', '.join(C.SETS)} (random: {C.RANDOM_COUNT} shapes, N "
                         f"log-uniform in [{C.RANDOM_N_MIN}, {C.RANDOM_N_MAX}], M x N about 64 Mi, drawn from "
                         "--seed); ignored when --shapes is given")  # fmt: skip
    ap.add_argument("--shapes", nargs="+", type=_shape, default=None, metavar="MxN",
                    help="explicit shapes instead of --set, e.g. --shapes 4096x5376 524288x128 "
                         "(default: none, --set decides)")  # fmt: skip
    ap.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the random set (default: a fresh one, printed and recorded in the CSV labels)",
    )
    ap.add_argument("--dtype", nargs="+", default=list(C.DTYPE_NAMES), choices=C.DTYPE_NAMES, metavar="DTYPE",
                    help=f"input dtypes, any of: {', '.join(C.DTYPE_NAMES)}")  # fmt: skip
    ap.add_argument("--variant", nargs="+", default=["llama"], choices=C.VARIANTS, metavar="VARIANT",
                    help="llama (weight, statistics in fp32, xhat rounded to x's dtype), gemma (offset 1, all fp32) "
                         "or noweight")  # fmt: skip
    ap.add_argument(
        "--op",
        nargs="+",
        default=list(C.OPS),
        choices=C.OPS,
        metavar="OP",
        help="fwd (forward that stores rstd), fwd_infer (no grad), bwd (dx and dw), fwd_bwd",
    )
    ap.add_argument("--provider", nargs="+", default=None, choices=PROVIDER_NAMES, metavar="PROVIDER",
                    help=f"providers to run, any of: {', '.join(PROVIDER_NAMES)} (default: all; one that cannot "
                         "be imported is reported as missing)")  # fmt: skip
    ap.add_argument(
        "--timing",
        nargs="+",
        default=["graph", "eager"],
        choices=["graph", "eager"],
        metavar="TIMING",
        help="graph (kernel time, CUDA-graph replay) and/or eager (a Python call, host time included)",
    )
    ap.add_argument("--qkv-heads", type=int, default=None, metavar="H",
                    help="x as QK-norm runs it: the (M / H, H, N) head view of a fused QKV projection "
                         "(rows of 3 x H x N, x its first H x N); M must be a multiple of H (default: contiguous "
                         "(M, N))")  # fmt: skip
    ap.add_argument("--out", default="bench/results/latest", help="output directory")
    ap.add_argument("--no-plots", action="store_true", help="write no PNG plots (default: plots under OUT/plots)")
    ap.add_argument("--commit", default=None, help="commit to record (default: git rev-parse --short HEAD)")
    ap.add_argument("--no-cpu-shapes", dest="cpu_shapes", action="store_false",
                    help="without a GPU, run the requested sets instead of the small 'cpu' set "
                         "(default: the 'cpu' set, bfloat16, cutile_rms and the CPU-capable providers)")  # fmt: skip
    return ap


def main(argv=None) -> int:
    from bench import cases as C

    ap = parser()
    args = ap.parse_args(argv)
    if "random" in args.set and args.shapes is None and args.seed is None:
        args.seed = secrets.randbelow(2**31)
        print(f"python -m bench: random set drawn with --seed {args.seed}")

    import torch

    from cutile_rms import interpret

    device = "cuda"
    if not torch.cuda.is_available() or interpret.is_enabled():
        # One-line notice, then the same pipeline on the CPU: cutile_rms through the cuTile
        # interpreter, torch eager beside it, a small shape set unless one was asked for.
        print("python -m bench: no GPU (or CUTILE_RMS_INTERPRET=1): running cutile_rms through the cuTile "
              "interpreter on the CPU; eager timings only, and they time the interpreter, not a GPU.")  # fmt: skip
        interpret.enable()
        device = "cpu"
        if args.cpu_shapes:  # keep the CPU run to a minute unless asked otherwise
            if args.set == DEFAULT_SETS and args.shapes is None:
                args.set = ["cpu"]
            if args.dtype == list(C.DTYPE_NAMES):
                args.dtype = ["bfloat16"]
            if args.provider is None:
                args.provider = ["cutile_rms", "torch", "torch_compile", "liger", "quack"]
    from bench.report import write_results
    from bench.run import run

    try:
        from tqdm import tqdm

        progress = lambda it: tqdm(it, desc="cases", file=sys.stderr)  # noqa: E731
    except ImportError:

        def progress(it):
            it = list(it)
            for i, x in enumerate(it):
                print(f"[{i + 1}/{len(it)}] {x}", file=sys.stderr, flush=True)
                yield x

    shapes = args.shapes or [s for name in args.set for s in C.shape_set(name, args.seed)]
    if args.qkv_heads is not None:
        bad = [f"{m}x{n}" for m, n, _ in shapes if args.qkv_heads < 1 or m % args.qkv_heads]
        if bad:
            ap.error(f"--qkv-heads {args.qkv_heads} must be positive and divide M; it does not for {' '.join(bad)}")
    results = run(shapes, args.dtype, args.variant, args.op, args.provider, tuple(args.timing), progress, args.commit,
                  device, qkv_heads=args.qkv_heads)  # fmt: skip
    command = "python -m bench " + shlex.join(argv if argv is not None else sys.argv[1:])
    print(write_results(args.out, results, command)[1])
    csv_path = os.path.join(args.out, "results.csv")
    if not args.no_plots:
        try:
            from bench.plot import plot

            plot(csv_path, os.path.join(args.out, "plots"))
        except ImportError as e:
            print(f"plots skipped: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
