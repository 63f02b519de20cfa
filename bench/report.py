"""Long-format CSV and the markdown summary with cutile_rms / best-other ratios."""

import csv
import os
from collections import defaultdict

COLUMNS = ["provider", "op", "variant", "dtype", "M", "N", "timing", "time_us", "gbps", "copy_gbps",
           "gpu", "commit", "timestamp", "status", "label", "note"]  # fmt: skip
OURS = "cutile_rms"


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
    for timing in ("graph", "eager"):
        t = ratio_table(rows, timing)
        if not t:
            continue
        lines.append(f"\n## {timing} timing: cutile_rms vs the best other provider\n")
        lines.append("ratio = best other time / cutile_rms time (> 1: cutile_rms faster); "
                     "% copy = cutile_rms GB/s over the copy ceiling measured in the same run.\n")  # fmt: skip
        lines.append("| op | variant | dtype | M | N | cutile_rms us | GB/s | % copy | best other | its us | ratio |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for e in t:
            pct = 100.0 * e["ours_gbps"] / e["copy_gbps"] if e["copy_gbps"] else float("nan")
            lines.append(
                f"| {e['op']} | {e['variant']} | {e['dtype']} | {e['M']} | {e['N']} | {e['ours_us']:.2f} | "
                f"{e['ours_gbps']:.0f} | {pct:.0f} | {e.get('best', '-')} | "
                f"{e.get('best_us', float('nan')):.2f} | {e.get('ratio', float('nan')):.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """python -m bench.report OUT.md RESULTS.csv [...]: the summary of one or more runs' CSVs."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m bench.report", description=main.__doc__)
    ap.add_argument("out")
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--command", default="", help="the command(s) that produced the CSVs, for the record")
    args = ap.parse_args(argv)
    rows = [r for path in args.csv for r in read_csv(path)]
    with open(args.out, "w") as f:
        f.write(summary_markdown(rows, args.command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
