"""CPU tier: bad input gets a clear Python exception before any launch.

Every check except the device one runs the same with or without a GPU, so these use CPU
tensors; the CPU tensor itself is refused last, with its own message.
"""

import pytest
import torch

from cutile_rms import RMSNorm, rms_norm, rms_norm_backward, rms_norm_forward


def test_cpu_tensor_is_refused():
    with pytest.raises(ValueError, match="x must be on a CUDA device, got cpu") as e:
        rms_norm(torch.randn(4, 8))
    # the hint names the call that works at any time, not only the variable read at import
    assert "cutile_rms.interpret.enable()" in str(e.value) and "CUTILE_RMS_INTERPRET=1" in str(e.value)
    with pytest.raises(ValueError, match="CUDA device"):
        rms_norm_forward(torch.randn(4, 8), torch.ones(8))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.uint8])
def test_non_floating_is_refused(dtype):
    with pytest.raises(TypeError, match="non-floating dtype"):
        rms_norm(torch.zeros(4, 8, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float8_e4m3fn])
def test_unsupported_float_is_refused(dtype):
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        rms_norm(torch.zeros(4, 8).to(dtype))


def test_weight_checks():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        rms_norm(x, torch.ones(7))
    with pytest.raises(ValueError, match="shape"):
        rms_norm(x, torch.ones(2, 4))
    with pytest.raises(TypeError, match="weight must be"):
        rms_norm(x, torch.ones(8, dtype=torch.int32))
    with pytest.raises(TypeError, match="torch.Tensor"):
        rms_norm(x, [1.0] * 8)


def test_argument_checks():
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        rms_norm([[1.0]])
    with pytest.raises(ValueError, match="at least one dimension"):
        rms_norm(torch.tensor(1.0))
    with pytest.raises(ValueError, match="empty last dimension"):
        rms_norm(torch.randn(4, 0))
    with pytest.raises(ValueError, match="casting_mode"):
        rms_norm(x, casting_mode="bf16")
    with pytest.raises(ValueError, match="eps"):
        rms_norm(x, eps=-1.0)
    with pytest.raises(ValueError, match="eps"):
        rms_norm(x, eps=float("nan"))
    with pytest.raises(ValueError, match="offset"):
        rms_norm(x, None, offset=1.0)


def test_backward_checks():
    x, w = torch.randn(4, 8), torch.ones(8)
    rstd = torch.ones(4)
    with pytest.raises(ValueError, match="dy must have x's shape"):
        rms_norm_backward(x, torch.randn(4, 9), w, rstd)
    with pytest.raises(TypeError, match="dy must have x's dtype"):
        rms_norm_backward(x, torch.randn(4, 8, dtype=torch.bfloat16), w, rstd)
    with pytest.raises(TypeError, match="rstd must be float32"):
        rms_norm_backward(x, torch.randn(4, 8), w, rstd.half())
    with pytest.raises(ValueError, match=r"rstd must have shape \(4,\)"):
        rms_norm_backward(x, torch.randn(4, 8), w, torch.ones(4, 1))
    with pytest.raises(ValueError, match="CUDA device"):
        rms_norm_backward(x, torch.randn(4, 8), w, rstd)


def test_inputs_untouched_by_failed_calls():
    x = torch.randn(4, 8)
    x0 = x.clone()
    with pytest.raises(ValueError):
        rms_norm(x)
    assert torch.equal(x, x0)


def test_module_checks_trailing_shape():
    m = RMSNorm((4, 8))
    with pytest.raises(ValueError, match="trailing shape"):
        m(torch.randn(3, 8, 4))


@pytest.mark.parametrize("code", [3, 7, -1], ids=["native", "7", "-1"])
def test_custom_ops_refuse_unknown_casting_codes(code):
    """The custom ops take the public casting codes (launch.casting_code) only: CAST_LLAMA_NATIVE
    (3) is the row-tile launchers' own choice, and would drop an offset or an fp32 weight, so a raw
    code outside them is a ValueError before anything runs (the forward, inference, backward and
    FP8 ops)."""
    from cutile_rms.experimental import rms_norm_fp8  # noqa: F401 (registers the FP8 ops)

    x, w = torch.randn(4, 64, dtype=torch.bfloat16), torch.ones(64, dtype=torch.bfloat16)
    ops = torch.ops.cutile_rms
    calls = [
        lambda: ops.rms_norm_fwd(x, w, 1e-6, 1.0, code, None),
        lambda: ops.rms_norm_infer(x, w, 1e-6, 0.0, code, None),
        lambda: ops.rms_norm_bwd(x, x, w, torch.ones(4), 0.0, code),
        lambda: ops.rms_norm_fp8(x, None, w, None, 1e-6, 0.0, code, 0, True),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="casting must be one of"):
            call()
