"""Long-format CSV and the markdown summary with cutile_rms / best-other ratios."""

import csv
import math
import os
from collections import defaultdict

COLUMNS = ["provider", "op", "variant", "dtype", "M", "N", "timing", "time_us", "gbps", "copy_gbps",
           "gpu", "commit", "timestamp", "status", "label", "note"]  # fmt: skip
OURS = "cutile_rms"
INTERPRETER_GPU = "cpu (cuTile interpreter)"  # the gpu column of a run without a GPU (bench/run.py)


def write_csv(path, rows):
    """Write rows (any iterable) to a new CSV, flushing each row, and return them as a list:
    a run cut short still leaves every finished row on disk."""
    done = []
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in COLUMNS})
            f.flush()
            done.append(r)
    return done


def write_results(out_dir, rows, command: str):
    """out_dir/results.csv (rows written as they come) and out_dir/summary.md; returns
    (the rows as a list, the summary text)."""
    os.makedirs(out_dir, exist_ok=True)
    done = write_csv(os.path.join(out_dir, "results.csv"), rows)
    summary = summary_markdown(done, command)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(summary)
    return done, summary


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def ratio_table(rows, timing="graph"):
    """One entry per (op, variant, dtype, M, N): our time, the best other provider and the
    ratio best_other_time / our_time (> 1: cutile_rms is faster)."""
    groups = defaultdict(dict)
    for r in rows:
        if r["timing"] != timing or r["status"] != "ok":
            continue
        key = (r["op"], r["variant"], r["dtype"], int(r["M"]), int(r["N"]))
        groups[key][r["provider"]] = r
    table = []
    for key in sorted(groups):
        g = groups[key]
        if OURS not in g:
            continue
        others = {p: r for p, r in g.items() if not p.startswith(OURS)}
        ours = g[OURS]
        entry = dict(zip(("op", "variant", "dtype", "M", "N"), key, strict=False))
        entry.update(ours_us=float(ours["time_us"]), ours_gbps=float(ours["gbps"]),
                     copy_gbps=float(ours["copy_gbps"]))  # fmt: skip
        if others:
            best = min(others.values(), key=lambda r: float(r["time_us"]))
            entry.update(best=best["provider"], best_us=float(best["time_us"]),
                         ratio=float(best["time_us"]) / float(ours["time_us"]))  # fmt: skip
        table.append(entry)
    return table


def summary_markdown(rows, command: str = "") -> str:
    lines = []
    gpu = next((r["gpu"] for r in rows), "?")
    sha = next((r["commit"] for r in rows), "?")
    lines.append(f"# RMSNorm benchmark on {gpu} (commit {sha})\n")
    if command:
        lines.append(f"Command: `{command}`\n")
    missing = sorted({(r["provider"], r["note"]) for r in rows if r["status"] == "missing"})
    for p, why in missing:
        lines.append(f"- provider `{p}` missing: {why}")
    bad = sorted({(r["provider"], r["dtype"], r["M"], r["N"], r["variant"], r["note"]) for r in rows
                  if r["status"] not in ("ok", "missing")})  # fmt: skip
    for b in bad:
        lines.append(f"- `{b[0]}` {b[1]} {b[2]}x{b[3]} {b[4]}: {b[5]}")
    interpreter = gpu == INTERPRETER_GPU
    if interpreter:
        lines.append("\nNo GPU: cutile_rms ran through the cuTile interpreter (NumPy on the CPU). Its times measure "
                     "the interpreter, not a kernel, so no bandwidth or copy-ceiling figures are given, and the "
                     "ratios say nothing about GPU speed; they show that the pipeline runs.")  # fmt: skip
    for timing in ("graph", "eager"):
        t = ratio_table(rows, timing)
        if not t:
            continue
        lines.append(f"\n## {timing} timing: cutile_rms vs the best other provider\n")
        if interpreter:
            lines.append("ratio = best other time / cutile_rms time.\n")
            lines.append("| op | variant | dtype | M | N | cutile_rms us | best other | its us | ratio |")
            lines.append("|---|---|---|---|---|---|---|---|---|")
        else:
            lines.append("ratio = best other time / cutile_rms time (> 1: cutile_rms faster); "
                         "% copy = cutile_rms GB/s over the copy ceiling measured in the same run.\n")  # fmt: skip
            lines.append(
                "| op | variant | dtype | M | N | cutile_rms us | GB/s | % copy | best other | its us | ratio |"
            )
            lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for e in t:
            pct = 100.0 * e["ours_gbps"] / e["copy_gbps"] if e["copy_gbps"] else float("nan")
            bw = "" if interpreter else f"{e['ours_gbps']:.0f} | {pct:.0f} | "
            best_us, ratio = e.get("best_us", float("nan")), e.get("ratio", float("nan"))
            lines.append(
                f"| {e['op']} | {e['variant']} | {e['dtype']} | {e['M']} | {e['N']} | {e['ours_us']:.2f} | "
                f"{bw}{e.get('best', '-')} | {best_us:.2f} | {ratio:.2f} |"
            )
    return "\n".join(lines) + "\n"


def _geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


# The README's headline rows: the ops of a bandwidth-bound set, and of a decode-sized one.
HEADLINE_TITLES = {"fwd": "forward", "bwd": "backward (dx, dw)", "fwd_infer": "inference forward"}


def headline_markdown(csv_paths, timing="graph", link_prefix="") -> str:
    """One table for the README: per CSV (a benchmark set), op and dtype, cutile_rms's geometric
    mean % of the copy ceiling and its time ratio to the best other provider (geometric mean,
    worst shape, shapes at or ahead), each linked to its CSV. A CSV of decode-sized shapes
    (M <= 512) reports the inference forward and backward only, without % copy (L2-resident)."""
    lines = [
        "| set | op | dtype | shapes | % of copy ceiling (geomean) | vs best other (geomean, worst) | at or ahead |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in csv_paths:
        rows = read_csv(path)
        name = os.path.splitext(os.path.basename(path))[0]
        table = ratio_table(rows, timing)
        decode = all(e["M"] <= 512 for e in table)
        for op in ("fwd_infer", "bwd") if decode else ("fwd", "bwd"):
            title = HEADLINE_TITLES[op]
            for dtype in ("bfloat16", "float16", "float32"):
                es = [e for e in table if e["op"] == op and e["dtype"] == dtype and "ratio" in e]
                if not es:
                    continue
                ratios = [e["ratio"] for e in es]
                pct = "-" if decode else f"{100 * _geomean([e['ours_gbps'] / e['copy_gbps'] for e in es]):.1f}%"
                ahead = sum(r >= 1.0 for r in ratios)
                link = f"[{name}]({link_prefix}{os.path.basename(path)})"
                lines.append(f"| {link} | {title} | {dtype} | {len(es)} | {pct} "
                             f"| {_geomean(ratios):.2f}x, {min(ratios):.2f}x | {ahead} of {len(es)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """python -m bench.report OUT.md RESULTS.csv [...]: the summary of one or more runs' CSVs
    (--headline: the README's headline table instead)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.report", description=main.__doc__)
    ap.add_argument("out", help="the markdown file to write")
    ap.add_argument("csv", nargs="+", help="benchmark CSVs (python -m bench's results.csv)")
    ap.add_argument("--command", default="", help="the command(s) that produced the CSVs, for the record")
    ap.add_argument("--headline", action="store_true", help="write the README's headline table")
    ap.add_argument("--link-prefix", default="", help="prefix of the CSV links in the headline table")
    args = ap.parse_args(argv)
    if args.headline:
        text = headline_markdown(args.csv, link_prefix=args.link_prefix)
    else:
        text = summary_markdown([r for path in args.csv for r in read_csv(path)], args.command)
    with open(args.out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
