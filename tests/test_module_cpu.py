"""CPU tier: RMSNorm's constructor and state_dict match torch.nn.RMSNorm."""

import pytest
import torch

from cutile_rms import RMSNorm


@pytest.mark.parametrize("shape", [64, (4, 16)])
@pytest.mark.parametrize("affine", [True, False])
def test_state_dict_compatible(shape, affine):
    ours = RMSNorm(shape, eps=1e-5, elementwise_affine=affine, dtype=torch.bfloat16)
    ref = torch.nn.RMSNorm(shape, eps=1e-5, elementwise_affine=affine, dtype=torch.bfloat16)
    assert ours.state_dict().keys() == ref.state_dict().keys()
    assert ours.normalized_shape == ref.normalized_shape and ours.eps == ref.eps
    if affine:
        assert torch.equal(ours.weight, ref.weight)  # both start at ones
        with torch.no_grad():
            ref.weight.normal_()
        ours.load_state_dict(ref.state_dict())
        assert torch.equal(ours.weight, ref.weight) and ours.weight.dtype == torch.bfloat16


def test_gemma_offset_starts_at_identity():
    m = RMSNorm(8, offset=1.0)
    assert torch.equal(m.weight, torch.zeros(8))
    assert "offset=1.0" in repr(m)
