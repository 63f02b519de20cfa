import os

import pytest
import torch


def _gpu_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device: the gpu tier runs on a machine with an NVIDIA GPU (CONTRIBUTING.md)"
    major, _ = torch.cuda.get_device_capability()
    if major < 9:
        return f"cuTile kernels need compute capability >= 9.0, this GPU has {major}.x"
    try:
        import cuda.tile  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the machine
        return f"cuda.tile does not import: {e}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def gen():
    """A fresh generator per test, seeded from the OS: inputs differ from run to run. The seed
    is printed (shown on failure); CUTILE_RMS_TEST_SEED=<seed> replays it."""
    seed = int(os.environ.get("CUTILE_RMS_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
    g = torch.Generator().manual_seed(seed)
    print(f"input seed {seed}")
    return g


@pytest.fixture
def sass(monkeypatch):
    """bench/probes/sass.py with real compiles (no disk cache); skipped without cuobjdump."""
    pytest.importorskip("cuda.tile.compilation")
    from bench.probes import sass

    try:
        sass._tool("cuobjdump")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    monkeypatch.setenv("CUDA_TILE_CACHE_DIR", "off")
    return sass


@pytest.fixture(params=[pytest.param("cuda", marks=pytest.mark.gpu), "interpret"])
def dev(request):
    """The device tensors live on: "cuda" (kernels on the GPU) or "cpu" with the kernels run
    by the cuTile interpreter."""
    from cutile_rms import interpret

    if request.param == "interpret":
        with interpret.interpreting():
            yield "cpu"
    else:
        yield "cuda"


# Time per test file (setup + call + teardown), printed at the end of every run: CI must stay
# under 30 minutes on 2 cores, and this shows where the time goes.
_file_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _file_seconds[path] = _file_seconds.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _file_seconds:
        return
    total = sum(_file_seconds.values())
    terminalreporter.write_sep("=", f"slowest test files ({total / 60:.1f} min in tests)")
    for path, secs in sorted(_file_seconds.items(), key=lambda kv: -kv[1])[:10]:
        terminalreporter.write_line(f"{secs:8.1f} s  {path}")
