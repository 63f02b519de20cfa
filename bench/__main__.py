"""python -m bench [--set training decode models] [--dtype bfloat16 ...] [--out DIR]

Runs every provider side by side on one GPU and writes DIR/results.csv (long format),
DIR/summary.md (cutile_rms vs best other provider) and DIR/plots/*.png.
"""

import argparse
import os
import shlex
import sys

DEFAULT_SETS = ["training", "decode"]


def main(argv=None) -> int:
    from bench import cases as C

    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[2])
    ap.add_argument("--set", nargs="+", default=DEFAULT_SETS, choices=["training", "decode", "models", "cpu"])
    ap.add_argument("--dtype", nargs="+", default=list(C.DTYPE_NAMES), choices=C.DTYPE_NAMES)
    ap.add_argument("--variant", nargs="+", default=["llama"], choices=C.VARIANTS)
    ap.add_argument("--op", nargs="+", default=list(C.OPS), choices=C.OPS)
    ap.add_argument("--provider", nargs="+", default=None, help="subset of providers (default: all)")
    ap.add_argument("--timing", nargs="+", default=["graph", "eager"], choices=["graph", "eager"])
    ap.add_argument("--out", default="bench/results/latest")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--commit", default=None, help="commit to record (default: git rev-parse HEAD)")
    ap.add_argument("--no-cpu-shapes", dest="cpu_shapes", action="store_false",
                    help="without a GPU, run the requested sets instead of the small 'cpu' set")  # fmt: skip
    args = ap.parse_args(argv)

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
            if args.set == DEFAULT_SETS:
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

    shapes = [s for name in args.set for s in C.shape_set(name)]
    results = run(shapes, args.dtype, args.variant, args.op, args.provider, tuple(args.timing), progress, args.commit,
                  device)  # fmt: skip
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
