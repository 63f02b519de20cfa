"""Side-by-side Nsight Compute profiles of the providers' kernels on the same shapes.

    python -m bench.probes.ncu --shapes 16384x4096 524288x128 --op fwd_infer \\
        --provider cutile_rms liger [--dtype bfloat16] [--ncu PATH] [--out DIR]
    python -m bench.probes.ncu --summarize DIR/ncu-raw.csv     # the summary again, no GPU
    python -m bench.probes.ncu --candidates FILE.json [--provider torch_compile] [--out DIR]

--candidates profiles row-kernel plans of a rows_probe candidate list (bench/probes/rows_probe.py:
the plan keywords a candidate names, the rules' choice for the others; "persistent" picks the
forward's grid, absent: the rules'), each as its own case, beside the providers' calls (of
--op) on the candidates' shapes; a candidate the rules leave to the core kernels is reported
missing.

For every (shape, provider) the op runs once between cudaProfilerStart/Stop in a child process
under ``ncu --profile-from-start off`` (inputs of the benchmark's sizes, larger than L2; each
case warmed up first, so compiles and autotuning stay outside the profiled range). The parent
first runs each case once under torch.profiler to learn which kernels one call launches, so the
report's kernels can be matched to their case. Writes DIR/ncu-raw.csv (every metric of the
sections, one row per kernel, the case in its first column) and DIR/ncu-summary.md, and
prints the summary: time, DRAM throughput and bytes, launch shape, registers, spill
instructions, occupancy, global load and store bytes per warp request (512: 16 bytes a
thread), and the top warp stall reasons.

Nsight Compute locks clocks and flushes caches per kernel by default: its times are not the
benchmark's. Compare metrics between providers of the same run, not times with bench results.
Under locked clocks (about 1.46 GHz on H200, against the benchmark's boost) a kernel near the issue
limit looks memory-latency-bound; ``--clock-control none`` profiles at the clocks the benchmark runs.
"""

import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile

import torch

from bench import cases as C
from bench import providers as P
from bench import run as R
from bench.probes import rows_probe as RP

NCU = "/opt/nvidia/nsight-compute/2025.3.1/ncu"
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis")
METRICS = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "smsp__inst_executed.sum",
    "sm__cycles_active.avg",
    "sm__cycles_elapsed.avg",
    "lts__t_sectors_op_read.sum",
    "lts__t_sectors_op_write.sum",
)
# (summary column, raw metric); missing metrics show as "".
COLUMNS = (
    ("us", "gpu__time_duration.sum"),
    ("dram_%", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("dram_MB_rd", "dram__bytes_read.sum"),
    ("dram_MB_wr", "dram__bytes_write.sum"),
    ("grid", "launch__grid_size"),
    ("block", "launch__block_size"),
    ("regs", "launch__registers_per_thread"),
    ("spill_inst", "sass__inst_executed_register_spilling"),
    ("smem_KB", None),
    ("occ_theory_%", "sm__maximum_warps_per_active_cycle_pct"),
    ("occ_achieved_%", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    ("issue_%", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("inst_M", "smsp__inst_executed.sum"),
    ("ld_B/req", None),
    ("st_B/req", None),
)
# Unit conversions to the summary's units (ncu picks its unit per value).
SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0,
         "Gbyte": 1e3}  # fmt: skip


def _candidates(args) -> list[dict]:
    if not args.candidates:
        return []
    with open(args.candidates) as f:
        return json.load(f)


def _cases(args):
    """(label, provider name or candidate, m, n, dtype) of every case."""
    shapes = [(*C.parse_shape(t)[:2], args.dtype) for t in args.shapes or ()]
    for i, c in enumerate(_candidates(args)):
        yield f"cand{i}{RP._loads_label(c)}|{c['op']}|{c['dtype']}|{c['m']}x{c['n']}|{_knobs(c)}", c, c["m"], c["n"], c[
            "dtype"]  # fmt: skip
        if (c["m"], c["n"], c["dtype"]) not in shapes:
            shapes.append((c["m"], c["n"], c["dtype"]))
    for m, n, dtype in shapes:
        for name in args.provider:
            yield f"{name}|{args.op}|{dtype}|{m}x{n}", name, m, n, dtype


def _knobs(c: dict) -> str:
    """A candidate's plan keywords, for its label."""
    skip = ("op", "dtype", "m", "n", "static", "lanes", "long", "unroll", "onepass", "prefetch", "loads", "lane_elems")
    return " ".join(f"{k}={v}" for k, v in c.items() if k not in skip)


def _candidate_call(c: dict):
    """A closure running one launch of a candidate plan (rows_probe's calls) on fresh inputs."""
    m, n = c["m"], c["n"]
    x, w, dy = RP.make_inputs(torch, c["dtype"], m, n, 1, 0)[0]
    if c["op"] == "forward":
        y, rstd = torch.empty_like(x), torch.empty(m, device="cuda")
        return RP.forward_call(torch, c, x, w, y, rstd, c.get("persistent"))[1]
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + RP.EPS)
    return RP.backward_call(torch, c, x, dy, w, rstd, torch.empty_like(x), torch.empty_like(w))[1]


def _case_call(provs, who, op, m, n, dtype):
    """(closure, None) of a case, or (None, why it is missing)."""
    if isinstance(who, dict):
        if RP._plan(who, who.get("persistent")) is None:
            return None, "no row-kernel plan: the rules leave these rows to the core kernels"
        return _candidate_call(who), None
    if provs[who].missing:
        return None, provs[who].missing
    return _call(provs[who], op, m, n, dtype), None


def _call(provider, op: str, m: int, n: int, dtype: str):
    """A closure running one call of the op on fresh inputs of the benchmark's kind."""
    dt = getattr(torch, dtype)
    x = torch.randn(m, n, device="cuda", dtype=dt)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dt)
    dy = torch.randn(m, n, device="cuda", dtype=dt)
    if op in ("bwd", "fwd_bwd"):
        x.requires_grad_()
        w.requires_grad_()
    return R.make_calls(provider, op, [(x, w, dy)], "llama")[0]


def _kernels_per_call(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return [k for k in names if not re.match(r"(?i)mem(cpy|set)", k)]


def target(args):
    """Run inside ncu: warm every case up, then profile one call of each."""
    provs = {p.name: p for p in P.all_providers(args.provider)}
    calls = []
    for _label, who, m, n, dtype in _cases(args):
        fn, _missing = _case_call(provs, who, args.op, m, n, dtype)
        if fn is None:
            continue
        for _ in range(3):
            fn()
        calls.append(fn)
    torch.cuda.synchronize()
    for fn in calls:
        torch.cuda.cudart().cudaProfilerStart()
        fn()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


def _num(v):
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return None


def _summary_row(raw: dict, units: dict) -> dict:
    out = {}
    for col, metric in COLUMNS:
        v = _num(raw.get(metric, "")) if metric else None
        if v is not None and col in ("us", "dram_MB_rd", "dram_MB_wr"):
            v *= SCALE.get(units.get(metric, ""), 1.0)
        if v is not None and col == "inst_M":
            v /= 1e6
        out[col] = "" if v is None else (f"{v:.1f}" if col.endswith(("us", "%", "_rd", "_wr", "_M")) else f"{v:g}")
    smem = sum(_num(raw.get(f"launch__shared_mem_per_block_{k}")) or 0 for k in ("static", "dynamic"))
    out["smem_KB"] = f"{smem / 1024:.1f}"
    for kind in ("ld", "st"):
        req = _num(raw.get(f"l1tex__t_requests_pipe_lsu_mem_global_op_{kind}.sum"))
        sec = _num(raw.get(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{kind}.sum"))
        out[f"{kind}_B/req"] = f"{32 * sec / req:.0f}" if req and sec is not None else ""
    stalls = {}
    for k, v in raw.items():
        mt = re.match(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$", k)
        if mt and _num(v) is not None:
            stalls[mt.group(1)] = _num(v)
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:4]
    out["top_stalls"] = ", ".join(f"{k} {v:.1f}" for k, v in top)
    return out


def profile(args) -> int:
    ncu = args.ncu
    manifest = []
    provs = {p.name: p for p in P.all_providers(args.provider)}
    for label, who, m, n, dtype in _cases(args):
        fn, missing = _case_call(provs, who, args.op, m, n, dtype)
        if fn is None:
            print(f"{label}: missing ({missing})", flush=True)
            continue
        fn()
        manifest.append((label, _kernels_per_call(fn)))
        del fn
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    rep = os.path.join(tempfile.mkdtemp(), "ncu-report")
    child = [sys.executable, "-m", "bench.probes.ncu", "--target", *sys.argv[1:]]
    base = [ncu, "--profile-from-start", "off", "--target-processes", "all", "-f", "-o", rep]
    base += ["--clock-control", args.clock_control]
    for s in SECTIONS:
        base += ["--section", s]
    r = subprocess.run([*base, "--metrics", ",".join(METRICS), *child])
    if r.returncode != 0:
        print("ncu failed with the extra metrics; again with the sections alone", flush=True)
        r = subprocess.run([*base, *child])
        if r.returncode != 0:
            return r.returncode
    text = subprocess.run([ncu, "--import", rep + ".ncu-rep", "--csv", "--page", "raw"], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    cases = [label for label, kernels in manifest for _ in kernels]
    raw_path = os.path.join(args.out, "ncu-raw.csv")
    with open(raw_path, "w", newline="") as f:
        wr = csv.writer(f)
        table = list(csv.reader(io.StringIO(text))) or [[]]
        for j, r in enumerate(table):
            wr.writerow([("case", "")[j] if j < 2 else (cases[j - 2] if j - 2 < len(cases) else "?"), *r])
    if len(table) - 2 != len(cases):
        print(f"the report holds {len(table) - 2} kernels, the manifest {len(cases)}: check the cases", flush=True)
    summary = summarize(raw_path)
    with open(os.path.join(args.out, "ncu-summary.md"), "w") as f:
        f.write(summary + "\n")
    print(summary, flush=True)
    return 0


def summarize(raw_path: str) -> str:
    """The markdown summary of a case-labelled raw CSV that profile() wrote."""
    with open(raw_path, newline="") as f:
        rows = list(csv.DictReader(f))
    units, rows = (rows[0], rows[1:]) if rows else ({}, [])  # the first row holds units
    lines = ["| case | kernel | " + " | ".join(c for c, _ in COLUMNS) + " | top stalls (cycles per issue) |",
             "|---" * (len(COLUMNS) + 3) + "|"]  # fmt: skip
    for raw in rows:
        s = _summary_row(raw, units)
        name = raw.get("Kernel Name", "")[:40]
        lines.append(f"| {raw['case']} | {name} | " + " | ".join(s[c] for c, _ in COLUMNS) + f" | {s['top_stalls']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.probes.ncu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", metavar="MxN")
    ap.add_argument("--summarize", metavar="RAW_CSV", help="print the summary of an earlier run's ncu-raw.csv")
    ap.add_argument("--provider", nargs="+", default=["cutile_rms", "liger"])
    ap.add_argument("--op", default="fwd_infer", choices=C.OPS)
    ap.add_argument("--dtype", default="bfloat16", choices=C.DTYPE_NAMES)
    ap.add_argument("--ncu", default=NCU)
    ap.add_argument(
        "--clock-control",
        default="base",
        choices=("base", "none"),
        help="ncu's clocks: base (locked, its default) or none (the boost clocks the benchmark runs at)",
    )
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results/latest"))
    ap.add_argument("--candidates", metavar="JSON", help="row-kernel plans to profile (rows_probe's candidate list)")
    ap.add_argument("--target", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.summarize:
        print(summarize(args.summarize))
        return 0
    if not args.shapes and not args.candidates:
        ap.error("--shapes or --candidates is required")
    if args.target:
        target(args)
        return 0
    return profile(args)


if __name__ == "__main__":
    sys.exit(main())
