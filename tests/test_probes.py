"""CPU tier: the maintained probes under bench/probes run against today's code: the SASS tool
builds the constraints the JIT derives at launch and compiles a row-tile kernel through them,
and every candidate of the GPU probe is a plan of today's planner."""

import csv
import io
import json
import os

import pytest


def test_sass_tool_constraints():
    """The JIT's rule: 16-byte divisibility of strides and dims where it holds, size-1 dims."""
    import cuda.tile as ct

    from bench.probes.sass import array

    a = array(ct.bfloat16, (16384, 4096))
    assert a.shape_divisible_by == (16, 16) and a.stride_divisible_by == (8, 1) and a.base_addr_divisible_by == 16
    b = array(ct.bfloat16, (1, 3001))
    assert b.shape_constant == (1, None) and b.shape_divisible_by == (1, 1) and b.stride_divisible_by == (1, 1)


@pytest.mark.compile
def test_sass_report_of_a_row_tile_kernel(sass):
    """An aligned bf16 row compiles to 128-bit loads and stores (bench/NOTES.md, session 11)."""
    _, kernel, params, hints = sass._rows_case("test", "forward", sass.ct.bfloat16, 16384, 4096)
    r = sass.compile_report(kernel, params, **hints)
    assert r["ops"].get("LDG.128", 0) > 0 and r["ops"].get("STG.128", 0) > 0 and r.get("LOCAL", 0) == 0


def test_probe_candidates_are_plans():
    from bench.probes.rows_candidates import OUT, plan_of

    if not os.path.exists(OUT):
        pytest.skip("rows_candidates.json not generated (python -m bench.probes.rows_candidates)")
    with open(OUT) as f:
        cands = json.load(f)
    assert cands and all(c["stack"] == 0 for c in cands)
    for c in cands:
        p = plan_of(c)
        assert p is not None and p.tile_a * p.tile_b == c["tile_rows"] and p.warps == c["warps"]


def test_core_candidates_are_core_plans():
    """A probe candidate naming "core" (a KernelConfig's fields) plans that config on the core
    kernels, labelled by it; one without keeps the row-tile planner's plan."""
    from bench.probes.rows_candidates import core_plan
    from bench.probes.rows_probe import Recorder, _core_label, _plan

    c = dict(op="forward", dtype="float32", m=1986, n=33786,
             core=dict(kernel="split", tile_m=1, tile_n=4096, blocks_per_sm=2, warps=8, tma_store=False))  # fmt: skip
    p = core_plan(c)
    assert (p.kernel, p.tile_n, p.splits, p.hints) == ("split", 4096, 9, (2, 8)) and _plan(c) == p
    assert _core_label(c) == "core-split-1x4096-o2-w8"
    b = core_plan(dict(c, op="backward"))
    assert (b.kernel, b.num_chunks, b.hints) == ("split", 9, (2, 8))
    plain = dict(op="forward", dtype="bfloat16", m=99, n=4096)
    assert core_plan(plain) is None and _plan(plain) is not None
    out = io.StringIO()  # the probe's CSV row and summary line of a core candidate
    writer = csv.DictWriter(out, Recorder.COLUMNS)
    rec = Recorder(writer, out, "backward", "float32", 1986, 33786, 100.0)
    rec(_core_label(c), 120.0, "", c, b)
    assert "core-split-1x4096-o2-w8 " in rec.line() and "[1x4096 split/9 w8 o2 r]" in rec.line()
    assert ",split/9,8,2,," in out.getvalue()


def test_a_failing_probe_candidate_is_recorded():
    """rows_probe.time_candidate: a candidate that cannot plan, compile or launch is recorded as
    failed (the CSV row and the summary line) and the probe goes on."""
    from bench.probes.rows_probe import Recorder, time_candidate

    def refused():
        raise KeyError("hints (1, 16) outside occupancy 1..8 x warps (None, 4, 8)")

    out = io.StringIO()
    rec = Recorder(csv.DictWriter(out, Recorder.COLUMNS), out, "forward", "float32", 132, 16384, 5.8)
    time_candidate(rec, "rows-noloop", {}, refused, (), (), "float32", 50)
    rec("shipped", 6.8)
    assert "| rows-noloop failed KeyError" in rec.line() and "shipped     6.8" in rec.line()
    assert ",rows-noloop," in out.getvalue() and "failed KeyError" in out.getvalue()


def test_ncu_summary_of_a_raw_report(tmp_path):
    """bench.probes.ncu's summary reads ncu's raw page (units row, per-value units), the case
    column profile() adds, and picks the top stall reasons."""
    from bench.probes.ncu import summarize

    raw = tmp_path / "ncu-raw.csv"
    raw.write_text(
        "case,Kernel Name,gpu__time_duration.sum,dram__bytes_write.sum,sass__inst_executed_register_spilling,"
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,"
        "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,"
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio\n"
        ",,nsecond,Gbyte,inst,,sector,inst,inst\n"
        'ours|fwd,rows_fwd,"70,500",0.112,24,100,1600,2.5,6.0\n'
    )
    line = summarize(str(raw)).splitlines()[-1]
    assert line.startswith("| ours|fwd | rows_fwd | 70.5 |")  # 70,500 ns in us
    assert "| 70.5 |" in line and "| 112.0 |" in line and "| 24 |" in line and "| 512 |" in line
    assert line.rstrip(" |").endswith("long_scoreboard 6.0, barrier 2.5")


@pytest.mark.compile
def test_tma_branch_reproducer_compiles(sass):
    """The hang reproducer (bench/probes/tma_branch_hang.py) compiles in both forms: a TMA store
    where allowed, a plain one where not."""
    from bench.probes.tma_branch_hang import TILE_N, M, N, branch_store

    rows, flags = sass.array(sass.ct.bfloat16, (M, N)), sass.array(sass.ct.int64, (M, 8))
    for tma in (True, False):
        r = sass.compile_report(branch_store, [rows, rows, flags, TILE_N, 8, tma], occupancy=2)
        assert (r["ops"].get("UTMASTG.2D", 0) > 0) == tma and r["ops"].get("ATOMG.ADD.64", 0) > 0


@pytest.mark.compile
def test_store_layout_reproducer(sass):
    """bench/probes/store_layout.py on tileiras 13.4, bf16 rows of 170: the lanes gather stored
    reshaped goes through shared memory with a barrier, at one tile a block and on the loop; the
    same gather scattered at its indices holds neither at one tile a block (rows_fwd_lanes
    without LOOP) but a barrier before each store on the loop (session 17); the plain row tile
    neither. A compiler update that fails this is the signal to re-time the lanes forward's
    layout and its LOOP (bench/NOTES.md, session 54)."""
    from bench.probes.store_layout import sass_report

    r = sass_report(170)
    shared = {k: sum(v for op, v in ops.items() if op.startswith(("STS", "LDS"))) for k, ops in r.items()}
    for tag in ("once", "loop"):
        assert r[f"gather_store-{tag}"]["BAR.SYNC"] >= 1 and shared[f"gather_store-{tag}"] > 0, r
        assert r[f"load_store-{tag}"]["BAR.SYNC"] == 0 and shared[f"load_store-{tag}"] == 0, r
    assert r["gather_scatter-once"]["BAR.SYNC"] == 0 and shared["gather_scatter-once"] == 0, r
    assert r["gather_scatter-loop"]["BAR.SYNC"] >= r["gather_scatter-loop"]["STG"] > 0, r


@pytest.mark.compile
def test_sass_loops_reports_a_backward_candidate(sass, tmp_path, capsys):
    """--loops reports a backward row-tile candidate: the rules' 4 x (512 + 64) tile of bf16 560
    compiles without stack, its 512 piece in 128-bit loads (bench/NOTES.md, session 53, s53d)."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps([{"op": "backward", "dtype": "bfloat16", "m": 4096, "n": 560}]))
    assert sass._loops(str(path)) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("bfloat16 560 backward [rules] tile 4x1x512+64 w4 o4"), line
    assert "stack 0," in line and "LDG.128 x" in line, line


def test_innermost_loop_of_a_listing():
    """The SASS tool's loop finder takes the shortest backward branch's range."""
    from bench.probes.sass import innermost_loop

    listing = "\n".join(
        f"        /*{a:04x}*/                   {t} ;"
        for a, t in ((0x10, "MOV R1, R2"), (0x20, "LDG.E.64 R4, desc[UR4][R2.64]"), (0x30, "FADD R1, R1, R4"),
                     (0x40, "@P0 BRA 0x20"), (0x50, "STG.E [R2.64], R1"), (0x60, "@P1 BRA 0x10"), (0x70, "EXIT"))
    )  # fmt: skip
    assert innermost_loop(listing) == ["LDG.E.64 R4, desc[UR4][R2.64]", "FADD R1, R1, R4", "@P0 BRA 0x20"]
    assert innermost_loop("        /*0010*/    EXIT ;") == []
