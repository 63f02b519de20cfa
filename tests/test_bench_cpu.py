"""CPU tier: the benchmark's byte counts, CSV schema, ratio table and plotting script."""

import pytest

from bench import cases as C
from bench.report import COLUMNS, ratio_table, read_csv, summary_markdown, write_csv


def test_byte_counts():
    m, n = 1000, 4096
    es = 2
    assert C.op_bytes("fwd_infer", m, n, "bfloat16") == 2 * m * n * es + n * es
    assert C.op_bytes("fwd", m, n, "bfloat16") == 2 * m * n * es + n * es + 4 * m
    assert C.op_bytes("bwd", m, n, "bfloat16") == 3 * m * n * es + 2 * n * es + 4 * m
    assert C.op_bytes("fwd_bwd", m, n, "float32") == C.op_bytes("fwd", m, n, "float32") + C.op_bytes(
        "bwd", m, n, "float32")  # fmt: skip
    assert C.op_bytes("fwd", m, n, "bfloat16", has_weight=False) == 2 * m * n * es + 4 * m
    assert C.op_bytes("fwd_infer", m, n, "bfloat16", w_dtype="float32") == 2 * m * n * es + 4 * n
    assert C.copy_bytes(m, n, "float32") == 2 * m * n * 4
    # The anchors file's formulas (shared/reference/h200-anchors.md): 2*M*N*es + N*es + 4*M.
    assert C.op_bytes("fwd", 16384, 4096, "bfloat16") == 2 * 16384 * 4096 * 2 + 4096 * 2 + 4 * 16384


def test_shape_sets():
    training = C.shape_set("training")
    assert [n for _, n, _ in training] == C.TRAINING_N
    assert all(m * n <= C.TRAINING_ELEMS and (m + 1) * n > C.TRAINING_ELEMS for m, n, _ in training)
    assert (13107, 5120, "") in training and (9362, 7168, "") in training  # as in the anchors
    assert len(C.shape_set("decode")) == 6
    models = C.shape_set("models")
    assert [lab for _, _, lab in models] == [lab for lab, _, _ in C.MODELS] and len({lab for *_, lab in models}) == len(
        models
    )
    assert (524288, 128) in {(m, n) for m, n, _ in models}  # QK-norm: tokens x heads rows of head_dim
    assert any(n & (n - 1) and n % 1024 for _, n, _ in models)  # hidden sizes that are not powers of two
    with pytest.raises(ValueError):
        C.shape_set("huge")
    with pytest.raises(ValueError, match="seed"):
        C.shape_set("random")


def test_random_set():
    """12 shapes per seed, the same for the same seed, N log-uniform in [64, 65536] and not rounded,
    M x N about 64 Mi elements."""
    a, b, c = C.shape_set("random", 7), C.shape_set("random", 7), C.shape_set("random", 8)
    assert a == b and a != c and len(a) == C.RANDOM_COUNT
    many = [s for seed in range(40) for s in C.shape_set("random", seed)]
    ns = [n for _, n, _ in many]
    assert all(C.RANDOM_N_MIN <= n <= C.RANDOM_N_MAX for n in ns)
    assert sum(n % 16 != 0 for n in ns) > len(ns) // 2  # not rounded to anything
    assert sum(n < 1024 for n in ns) > len(ns) // 5 and sum(n > 8192 for n in ns) > len(ns) // 5  # log-uniform
    assert all(abs(m * n - C.TRAINING_ELEMS) <= n for m, n, _ in many)
    assert {lab for *_, lab in a} == {"random seed 7"}


def test_parse_shape():
    assert C.parse_shape("4096x5376") == (4096, 5376, "") and C.parse_shape("524288X128") == (524288, 128, "")
    for bad in ("4096", "12x", "x5", "0x8", "-1x8", "axb", "2x3x4"):
        with pytest.raises(ValueError, match="MxN"):
            C.parse_shape(bad)


def test_bench_cli_help_and_errors(capsys):
    """--help gives every option a help text and a default, lists the providers; mistakes are
    argparse errors (exit 2 with a message), not tracebacks."""
    from bench.__main__ import main, parser
    from bench.providers import PROVIDER_NAMES

    ap = parser()
    for action in ap._actions:
        if action.dest != "help":
            assert action.help, action.dest
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "default: bench/results/latest" in text and "default: training decode" in text
    assert all(p in text for p in PROVIDER_NAMES)
    assert not text.rstrip().endswith(("the", "a", ",")) and "Without a GPU" in text
    for argv, what in ((["--provider", "foo"], "invalid choice: 'foo'"), (["--shapes", "12x"], "MxN"),
                       (["--set", "huge"], "invalid choice"), (["--seed", "x"], "invalid int")):  # fmt: skip
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert what in capsys.readouterr().err


def _row(provider, op, us, gbps, timing="graph", status="ok", n=4096):
    return dict(provider=provider, op=op, variant="llama", dtype="bfloat16", M=1024, N=n, timing=timing,
                time_us=us, gbps=gbps, copy_gbps=4000.0, gpu="TestGPU", commit="abc", timestamp="t",
                status=status, label="", note="")  # fmt: skip


def _synthetic():
    return [
        _row("cutile_rms", "fwd", 10.0, 3800.0),
        _row("cutile_rms:gather", "fwd", 12.0, 3100.0),
        _row("liger", "fwd", 12.5, 3000.0),
        _row("torch", "fwd", 20.0, 1900.0),
        _row("quack", "fwd", "", "", status="missing"),
        _row("cutile_rms", "bwd", 30.0, 2000.0),
        _row("torch_compile", "bwd", 24.0, 2500.0),
        _row("cutile_rms", "fwd", 15.0, 2600.0, timing="eager"),
        _row("torch", "fwd", 30.0, 1300.0, timing="eager"),
    ]


def test_csv_schema_roundtrip(tmp_path):
    path = tmp_path / "r.csv"
    write_csv(path, _synthetic())
    rows = read_csv(path)
    assert list(rows[0].keys()) == COLUMNS
    required = {"provider", "op", "variant", "dtype", "M", "N", "timing", "time_us", "gbps", "copy_gbps", "gpu",
                "commit", "timestamp"}  # fmt: skip
    assert required <= set(COLUMNS)
    assert len(rows) == len(_synthetic())


def test_ratio_table(tmp_path):
    path = tmp_path / "r.csv"
    write_csv(path, _synthetic())
    rows = read_csv(path)
    t = {e["op"]: e for e in ratio_table(rows, "graph")}
    # Forced cutile modes are ours, never the "best other"; missing providers are skipped.
    assert t["fwd"]["best"] == "liger" and t["fwd"]["ratio"] == pytest.approx(1.25)
    assert t["bwd"]["best"] == "torch_compile" and t["bwd"]["ratio"] == pytest.approx(0.8)
    e = ratio_table(rows, "eager")
    assert len(e) == 1 and e[0]["ratio"] == pytest.approx(2.0)
    md = summary_markdown(rows, "python -m bench --set training")
    assert (
        "provider `quack` missing" in md and "| fwd | llama | bfloat16 | 1024 | 4096 | 10.00 | 3800 | 95 | liger" in md
    )


def test_headline_table(tmp_path):
    """The README's headline table: geometric means per set, op and dtype, linked to the CSV."""
    from bench.report import headline_markdown

    rows = _synthetic()
    rows += [_row("cutile_rms", "fwd", 20.0, 3000.0, n=8192), _row("liger", "fwd", 10.0, 3500.0, n=8192)]
    write_csv(tmp_path / "training.csv", rows)
    md = headline_markdown([str(tmp_path / "training.csv")], link_prefix="res/")
    lines = md.splitlines()
    fwd = next(line for line in lines if "| forward |" in line)
    # forward: ratios 1.25 (4096) and 0.5 (8192): geomean 0.79, worst 0.50, one of two ahead
    assert "[training](res/training.csv)" in fwd and "| 0.79x, 0.50x | 1 of 2 |" in fwd
    assert f"| {100 * (3800 / 4000 * 3000 / 4000) ** 0.5:.1f}% |" in fwd
    assert any("| backward (dx, dw) |" in line and "0.80x, 0.80x | 0 of 1" in line for line in lines)


def test_plot_script(tmp_path):
    pytest.importorskip("matplotlib")
    from bench.plot import plot

    path = tmp_path / "r.csv"
    rows = _synthetic() + [_row("cutile_rms", "fwd", 40.0, 3900.0, n=8192), _row("liger", "fwd", 44.0, 3500.0, n=8192)]
    write_csv(path, rows)
    out = plot(str(path), str(tmp_path / "plots"))
    names = sorted(p.split("/")[-1] for p in out)
    assert "fwd_bfloat16_llama_graph.png" in names and "bwd_bfloat16_llama_graph.png" in names
    for p in out:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bench_runs_through_the_interpreter():
    """Without a GPU the benchmark pipeline runs cutile_rms through the cuTile interpreter."""
    from bench.run import run
    from cutile_rms import interpret

    with interpret.interpreting():
        rows = list(run([(8, 256, "")], ["bfloat16"], ["llama", "noweight"], ["fwd", "bwd"],
                        ["cutile_rms", "torch", "liger"], device="cpu"))  # fmt: skip
    by = {(r["provider"], r["op"], r["variant"], r["timing"]): r for r in rows}
    assert {r["timing"] for r in rows} == {"eager"}
    for v in ("llama", "noweight"):
        for op in ("fwd", "bwd"):
            for p in ("cutile_rms", "torch"):
                r = by[(p, op, v, "eager")]
                assert r["status"] == "ok" and float(r["time_us"]) > 0, r
            assert by[("liger", op, v, "eager")]["status"] == "missing"


def test_main_job_without_gpu(tmp_path, capsys):
    """`python -m bench` on a machine without a GPU: a one-line notice, then the CSV and the
    summary from the interpreter."""
    import torch

    from bench.__main__ import main
    from cutile_rms import interpret

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the main job times it instead")
    with interpret.interpreting(False):  # main() must switch the interpreter on by itself
        assert (
            main(["--op", "fwd_infer", "--provider", "cutile_rms", "torch", "--out", str(tmp_path), "--no-plots"]) == 0
        )
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("python -m bench: no GPU")
    rows = read_csv(tmp_path / "results.csv")
    assert {r["provider"] for r in rows} == {"cutile_rms", "torch"} and all(r["status"] == "ok" for r in rows)
    summary = (tmp_path / "summary.md").read_text()
    assert "| fwd_infer | llama | bfloat16 |" in summary
    assert "no bandwidth or copy-ceiling figures" in summary and "% copy" not in summary


def test_main_job_explicit_shapes_without_gpu(tmp_path):
    """--shapes runs exactly the shapes given, here through the interpreter."""
    import torch

    from bench.__main__ import main
    from cutile_rms import interpret

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the main job times it instead")
    with interpret.interpreting(False):
        argv = ["--shapes", "3x200", "5x64", "--op", "fwd", "--provider", "cutile_rms", "--timing", "eager",
                "--out", str(tmp_path), "--no-plots"]  # fmt: skip
        assert main(argv) == 0
    rows = read_csv(tmp_path / "results.csv")
    assert sorted({(int(r["M"]), int(r["N"])) for r in rows}) == [(3, 200), (5, 64)]
    assert all(r["status"] == "ok" for r in rows)


def test_fused_add_byte_counts():
    from bench.fused_add import op_bytes

    m, n = 1000, 4096
    # bf16 everywhere: x, residual in; y, residual_out out (+ weight); rstd for training.
    assert op_bytes("fwd_infer", m, n, "bfloat16", "same") == 4 * m * n * 2 + n * 2
    assert op_bytes("fwd", m, n, "bfloat16", "same") == 4 * m * n * 2 + n * 2 + 4 * m
    assert op_bytes("fwd_post", m, n, "bfloat16", "same") == 3 * m * n * 2 + n * 2  # no residual_out
    # bwd reads residual_out, dy, d residual_out and writes dx once (= d residual).
    assert op_bytes("bwd", m, n, "bfloat16", "same") == 4 * m * n * 2 + 4 * m + 2 * n * 2
    # fp32 stream: residual, residual_out, their gradients in fp32; d residual written apart.
    assert op_bytes("fwd_infer", m, n, "bfloat16", "fp32") == m * n * (2 * 2 + 2 * 4) + n * 2
    assert op_bytes("bwd", m, n, "bfloat16", "fp32") == m * n * (3 * 4 + 2 * 2) + 4 * m + 2 * n * 2


def test_fused_add_bench_runs_through_the_interpreter(tmp_path):
    """python -m bench.fused_add without a GPU: every row is checked and timed (or missing)."""
    from bench import fused_add

    argv = ["--dtype", "bfloat16", "--op", "fwd", "fwd_post", "bwd", "--out", str(tmp_path)]
    rows = read_csv_after(fused_add.main, argv, tmp_path)
    assert {r["op"] for r in rows} == {"fwd", "fwd_post", "bwd"}
    ours = [r for r in rows if r["provider"] == "cutile_rms"]
    assert ours and all(r["status"] == "ok" and float(r["time_us"]) > 0 for r in ours)
    assert {r["variant"] for r in ours} == {"same", "fp32"}
    assert all(r["status"] == "missing" for r in rows if r["provider"] in ("liger", "torch_compile"))


def test_fp8_byte_counts():
    from bench.fp8 import op_bytes

    m, n = 1000, 4096
    # bf16 x read, FP8 y written, the weight; per-row fp32 scales (dynamic) or scale + amax.
    assert op_bytes("fwd_fp8", m, n, "bfloat16", "dynamic") == m * n * 3 + n * 2 + 4 * m
    assert op_bytes("fwd_fp8", m, n, "bfloat16", "static") == m * n * 3 + n * 2 + 8
    assert op_bytes("fwd_fp8", m, n, "bfloat16", "transpose") == m * n * 4 + n * 2 + 8  # y and y_t


def test_fp8_bench_runs_through_the_interpreter(tmp_path):
    """python -m bench.fp8 without a GPU: cutile_rms and torch are checked and timed."""
    from bench import fp8

    rows = read_csv_after(fp8.main, ["--out", str(tmp_path)], tmp_path)
    ours = [r for r in rows if r["provider"] in ("cutile_rms", "torch")]
    assert ours and all(r["status"] == "ok" and float(r["time_us"]) > 0 for r in ours)
    assert {r["variant"] for r in ours} == {"static", "dynamic", "transpose"}
    assert all(r["status"] == "missing" for r in rows if r["provider"] in ("liger", "torch_compile"))


def read_csv_after(main, argv, out):
    from cutile_rms import interpret

    with interpret.interpreting():
        assert main(argv) == 0
    return read_csv(out / "results.csv")


def test_host_bench_runs_without_gpu(tmp_path):
    """python -m bench.host writes one row per provider and op with the documented columns
    (on the CPU: the interpreter, a smoke test, not a measurement)."""
    import csv

    from bench import host

    assert host.main(["--shapes", "2x64", "--calls", "1", "--provider", "cutile_rms", "torch", "--out",
                      str(tmp_path)]) == 0  # fmt: skip
    with open(tmp_path / "host.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["provider"], r["op"]) for r in rows] == [(p, o) for p in ("cutile_rms", "torch") for o in host.OPS]
    assert all(float(r["host_us"]) > 0 and r["M"] == "2" and r["N"] == "64" for r in rows)
    assert rows[0]["command"].startswith("python -m bench.host --shapes 2x64")


def test_main_job_on_qkv_views_without_gpu(tmp_path):
    """--qkv-heads H: every provider is timed on the (M / H, H, N) head view of a fused QKV
    projection (after the usual float64 check); the label says so; M must be a multiple of H."""
    import csv

    import torch

    from bench.__main__ import main
    from cutile_rms import interpret

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the main job times it instead")
    out = tmp_path / "qkv"
    with interpret.interpreting(False):  # main() switches the interpreter on; this restores the state after
        assert main(["--shapes", "24x64", "--qkv-heads", "4", "--op", "fwd", "bwd", "--provider", "cutile_rms",
                     "torch", "--no-plots", "--out", str(out)]) == 0  # fmt: skip
        with pytest.raises(SystemExit):
            main(["--shapes", "25x64", "--qkv-heads", "4", "--out", str(out)])
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["status"] == "ok" and "qkv view, 4 heads" in r["label"] for r in rows)
