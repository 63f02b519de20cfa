"""CPU tier: every kernel specialization the dispatcher can pick compiles through tileiras
ahead of time for Hopper (sm_90), and one of each stratum of them (a kernel variant with its
parameter kinds, array dtypes and alignment) for Blackwell (sm_100). No GPU needed (see tests/aot.py)."""

import cuda.tile as ct
import pytest

from cutile_rms._tile import python_function
from cutile_rms.experimental.fp8 import kernels as F8K
from cutile_rms.experimental.fused_add import kernels as FK
from cutile_rms.rmsnorm import kernels as K
from cutile_rms.rows import kernels as RK
from tests.aot import compile_all, jobs


def test_job_list_covers_every_kernel():
    """Every @ct.kernel defined in the package (core and experimental) has compile jobs."""
    compiled = {python_function(kernel).__name__ for _, kernel, _ in jobs()}
    defined = {name for mod in (K, FK, RK, F8K) for name, obj in vars(mod).items() if isinstance(obj, ct.kernel)}
    assert len(defined) == 37  # 12 core (3 of them split-row, 2 packed) + 9 fused add + 13 row-tile + 3 FP8
    assert defined <= compiled, f"no compile job for {sorted(defined - compiled)}"


@pytest.mark.compile
@pytest.mark.parametrize("arch", ["sm_90", "sm_100"])
def test_aot_compile(arch, monkeypatch):
    """tests.aot.jobs(arch): every specialization for sm_90, one of each stratum for sm_100."""
    monkeypatch.setenv("CUDA_TILE_CACHE_DIR", "off")  # real compiles in the spawned workers, not cache hits
    n, failures = compile_all(arch)
    assert n > 100
    assert not failures, "\n".join(failures)


def test_other_architectures_compile_every_stratum():
    """Another architecture's jobs hold one job of every stratum of its full list (each kernel
    variant with each set of parameter kinds, array element dtypes and alignment), and fewer
    jobs than the full list."""
    from tests.aot import FULL_ARCH, every_job, stratum

    assert jobs(FULL_ARCH) == every_job(FULL_ARCH)
    full, sample = every_job("sm_100"), jobs("sm_100")
    assert {stratum(k, p) for _, k, p in full} == {stratum(k, p) for _, k, p in sample}
    assert len({stratum(k, p) for _, k, p in sample}) == len(sample)  # one job a stratum
    assert all(job in full for job in sample)
    assert len(sample) < len(full) * 2 // 3
