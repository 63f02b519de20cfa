"""CPU tier: every kernel specialization the dispatcher can pick compiles through tileiras
ahead of time, for Hopper (sm_90) and Blackwell (sm_100). No GPU needed (see tests/aot.py)."""

import pytest

from tests.aot import compile_all, jobs


def test_job_list_covers_every_kernel():
    labels = {label.split()[0] for label, _, _ in jobs()}
    assert labels == {"fwd_tile", "fwd_chunked", "bwd_tile", "bwd_row_dot", "bwd_chunked", "dw_reduce"}


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_aot_compile_every_specialization(arch, monkeypatch):
    monkeypatch.setenv("CUDA_TILE_CACHE_DIR", "off")  # real compiles in the spawned workers, not cache hits
    n, failures = compile_all(arch)
    assert n > 100
    assert not failures, "\n".join(failures)
