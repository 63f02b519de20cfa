"""Plots from a benchmark CSV (separate from the run):

    python -m bench.plot results.csv [outdir] [--timing graph] [--variant llama ...]

One PNG per (op, dtype, variant, timing): GB/s against the shape (M x N, in the run's order of
N) for every provider, with the copy ceiling measured in the same run as a dashed line. A run
without a GPU (the cuTile interpreter) is titled so, and plots time instead of GB/s.
"""

import os
from collections import defaultdict

from bench.report import INTERPRETER_GPU, read_csv


def _to_palette(path: str) -> None:
    """Rewrite a PNG with a 64-colour palette: a quarter of the bytes, the same picture for line
    plots (committed plots travel to the GPU machine, whose transfers are capped)."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


def plot(csv_path: str, out_dir: str, timings=None, variants=None) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        r
        for r in read_csv(csv_path)
        if r["status"] == "ok"
        and (not timings or r["timing"] in timings)
        and (not variants or r["variant"] in variants)
    ]
    groups = defaultdict(list)
    for r in rows:
        groups[(r["op"], r["dtype"], r["variant"], r["timing"])].append(r)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for (op, dtype, variant, timing), rs in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        interpreter = rs[0]["gpu"] == INTERPRETER_GPU
        shapes = sorted({(int(r["N"]), int(r["M"])) for r in rs})
        labels = [f"{m}x{n}" for n, m in shapes]
        by_p = defaultdict(dict)
        for r in rs:
            by_p[r["provider"]][(int(r["N"]), int(r["M"]))] = float(r["time_us"] if interpreter else r["gbps"])
        for p, pts in sorted(by_p.items()):
            xs = [i for i, s in enumerate(shapes) if s in pts]
            ax.plot(xs, [pts[shapes[i]] for i in xs], marker="o", label=p, linewidth=2.5 if p == "cutile_rms" else 1.2)
        if not interpreter:
            ceil = {(int(r["N"]), int(r["M"])): float(r["copy_gbps"]) for r in rs}
            ax.plot(range(len(shapes)), [ceil[s] for s in shapes], "k--", label="copy ceiling")
        ax.set_xticks(range(len(shapes)), labels, rotation=30, ha="right", fontsize=7)
        where = "cuTile interpreter on the CPU, not a GPU" if interpreter else f"{timing} timing"
        ax.set_title(f"RMSNorm {op} ({variant}, {dtype}, {where})")
        ax.set_xlabel("shape M x N (rows x hidden size)")
        ax.set_ylabel("us per call (interpreter)" if interpreter else "GB/s")
        if interpreter:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{op}_{dtype}_{variant}_{timing}.png")
        fig.savefig(path, dpi=72)
        plt.close(fig)
        _to_palette(path)
        paths.append(path)
    return paths


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.plot")
    ap.add_argument("csv")
    ap.add_argument("out", nargs="?", default=None)
    ap.add_argument("--timing", nargs="+", default=None)
    ap.add_argument("--variant", nargs="+", default=None)
    a = ap.parse_args()
    out = a.out or os.path.join(os.path.dirname(a.csv) or ".", "plots")
    for p in plot(a.csv, out, a.timing, a.variant):
        print(p)
