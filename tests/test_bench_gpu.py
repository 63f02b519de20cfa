"""GPU tier: one tiny benchmark case through every importable provider."""

import pytest

pytestmark = pytest.mark.gpu


def test_bench_smoke():
    from bench import cases as C
    from bench.run import run

    rows = list(run([(256, 1024, "")], ["bfloat16"], ["llama", "gemma", "noweight"], list(C.OPS)))
    providers = {r["provider"] for r in rows}
    assert {"cutile_rms", "cutile_rms:persistent", "cutile_rms:gather", "cutile_rms:rows", "torch",
            "torch_compile"} <= providers  # fmt: skip
    must_run = [
        r for r in rows if r["provider"].startswith("cutile_rms") or r["provider"] in ("torch", "torch_compile")
    ]
    bad = [(r["provider"], r["op"], r["variant"], r["timing"], r["note"]) for r in must_run if r["status"] != "ok"]
    assert not bad, bad
    for r in must_run:
        assert float(r["time_us"]) > 0 and float(r["gbps"]) > 0 and float(r["copy_gbps"]) > 0
    others = [(r["provider"], r["status"], r["note"]) for r in rows if r not in must_run and r["status"] != "ok"]
    assert all(status == "missing" for _, status, _ in others), others
