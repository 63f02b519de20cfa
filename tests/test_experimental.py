"""The experimental_kernel marker and its one-time warning (CPU tier), and a real launch of
a marked kernel (experimental tier, on a GPU)."""

import warnings

import pytest
import torch

import cutile_rms
from cutile_rms import ExperimentalKernelWarning, experimental_kernel
from cutile_rms._launch import is_experimental, warn_if_experimental, with_hints
from tests import experimental_kernels as EK


def test_marker_and_hints_keep_the_mark():
    assert is_experimental(EK.scale_kernel)
    assert is_experimental(with_hints(EK.scale_kernel, occupancy=2))
    assert not is_experimental(EK.plain_kernel)
    with pytest.raises(TypeError, match="@ct.kernel"):
        experimental_kernel(lambda x: x)


def test_warns_once_per_kernel():
    k = EK.warn_once_kernel
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warn_if_experimental(k)
        warn_if_experimental(k)
        warn_if_experimental(with_hints(k, occupancy=2))  # same kernel, other hints
        warn_if_experimental(EK.plain_kernel)
    hits = [r for r in rec if issubclass(r.category, ExperimentalKernelWarning)]
    assert len(hits) == 1 and "warn_once_kernel" in str(hits[0].message)


def test_experimental_package_imports():
    import cutile_rms.experimental as exp

    assert exp.__name__ == "cutile_rms.experimental"
    assert cutile_rms.experimental_kernel is experimental_kernel


@pytest.mark.experimental
@pytest.mark.parametrize("target", [pytest.param("cuda", marks=pytest.mark.gpu), "interpret"])
def test_experimental_kernel_launches_and_warns(target):
    from cutile_rms import _launch, interpret

    _launch._warned.discard(_launch._kernel_name(EK.scale_kernel))  # as in a fresh process
    device = "cuda" if target == "cuda" else "cpu"
    x = torch.randn(1000, device=device)
    y = torch.full_like(x, float("nan"))
    stream = torch.cuda.current_stream() if target == "cuda" else None
    with interpret.interpreting(target == "interpret"), warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for _ in range(2):
            _launch.launch(stream, (8,), EK.scale_kernel, (x, y, 256))
    if target == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(y, 2 * x)
    assert sum(issubclass(r.category, ExperimentalKernelWarning) for r in rec) == 1
