"""Plots from a benchmark CSV (separate from the run):

    python -m bench.plot results.csv [outdir] [--timing graph] [--variant llama ...]

One PNG per (op, dtype, variant, timing): GB/s against N for every provider, with the copy
ceiling measured in the same run as a dashed line.
"""

import os
from collections import defaultdict

from bench.report import read_csv


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
        by_p = defaultdict(list)
        for r in rs:
            by_p[r["provider"]].append((int(r["N"]), int(r["M"]), float(r["gbps"])))
        for p, pts in sorted(by_p.items()):
            pts.sort()
            ax.plot([f"{n}" if len({q[1] for q in pts}) == len(pts) else f"{m}x{n}" for n, m, _ in pts],
                    [g for _, _, g in pts], marker="o", label=p,
                    linewidth=2.5 if p == "cutile_rms" else 1.2)  # fmt: skip
        ceil = sorted({(int(r["N"]), float(r["copy_gbps"])) for r in rs})
        if ceil:
            ax.plot([str(n) for n, _ in ceil], [c for _, c in ceil], "k--", label="copy ceiling")
        ax.set_title(f"RMSNorm {op} ({variant}, {dtype}, {timing} timing)")
        ax.set_xlabel("N (hidden size)")
        ax.set_ylabel("GB/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out_dir, f"{op}_{dtype}_{variant}_{timing}.png")
        fig.savefig(path, dpi=72)
        plt.close(fig)
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
