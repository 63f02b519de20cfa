"""GPU tier: one tiny benchmark case through every importable provider."""

import pytest

pytestmark = pytest.mark.gpu


def test_bench_smoke():
    from bench import cases as C
    from bench.run import run

    rows = list(run([(256, 1024, "")], ["bfloat16"], ["llama", "gemma", "noweight"], list(C.OPS)))
    providers = {r["provider"] for r in rows}
    assert {"cutile_rms", "cutile_rms:persistent", "cutile_rms:gather", "torch", "torch_compile"} <= providers
    for r in rows:
        if r["provider"].startswith("cutile_rms") or r["provider"] in ("torch", "torch_compile"):
            assert r["status"] == "ok", r
            assert float(r["time_us"]) > 0 and float(r["gbps"]) > 0 and float(r["copy_gbps"]) > 0
        else:
            assert r["status"] in ("ok", "missing"), r
