"""``patch_model`` on tiny, randomly initialized transformers models (no hub download).

Each model is built twice from one seed; one copy is patched. Logits, loss and every
parameter's gradient must match the unpatched copy, the state dict and ``save_pretrained``
output must be unchanged, and no transformers class may change. The CPU tier runs the
patched norms through the interpreter in fp32; the GPU tier runs bf16 models on the GPU.
"""

import copy

import pytest
import torch

from cutile_rms import patch_model
from cutile_rms.patching import HF_RMSNORM_CLASSES, HFRMSNorm

transformers = pytest.importorskip("transformers")

# family -> (config class, model class, norm class)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", "LlamaRMSNorm"),
    "mistral": ("MistralConfig", "MistralForCausalLM", "MistralRMSNorm"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "Qwen2RMSNorm"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "Qwen3RMSNorm"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", "GemmaRMSNorm"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", "Gemma2RMSNorm"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", "Gemma3RMSNorm"),
}
TINY = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=64,
)

# Relative error of the whole tensor, ||out - ref|| / ||ref||, allowed between the patched and
# the unpatched model. fp32: the two compute the same math with sums in a different order
# (~1e-7 per norm), grown by two layers of attention and MLP; 1e-5 keeps a 10x+ margin.
# bf16: both round at the same places, but a different fp32 sum order can move one rounding
# by one ulp (2^-8 relative), which the following layers spread, most in small gradients that
# cancel (a k_proj bias reached 2.1e-2 on the H200). So bf16 is not compared with the other bf16
# model directly: each is compared with the fp32 run of the same weights (the unpatched model
# upcast), and ours may be at most BF16_FACTOR times as far from it as torch's, plus half a bf16
# ulp (both err by similar amounts; the factor covers which of the two a sum order favours).
MODEL_RTOL = {torch.float32: 1e-5}
BF16_FACTOR = 2.0
BF16_FLOOR = 2.0**-9


def _rel_err(out, ref):
    out, ref = out.detach().double(), ref.detach().double()
    return ((out - ref).norm() / ref.norm()).item()


def _tiny_model(family, device, dtype, seed):
    cfg_name, model_name, _ = FAMILIES[family]
    cfg = getattr(transformers, cfg_name)(**TINY)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, model_name)(cfg)
        # transformers starts norm weights at identity (ones, or zeros for Gemma): perturb them
        # so that a wrong weight or offset shows.
        with torch.no_grad():
            for module in model.modules():
                if type(module).__name__ in HF_RMSNORM_CLASSES:
                    module.weight.add_(0.2 * torch.randn_like(module.weight))
    return model.to(device=device, dtype=dtype).eval()


def _run(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), out.loss.detach(), grads


@pytest.fixture(params=[pytest.param("cuda", marks=pytest.mark.gpu), "interpret"])
def target(request):
    """(device, dtype): bf16 on the GPU, fp32 on the CPU through the interpreter."""
    if request.param == "interpret":
        from cutile_rms import interpret

        with interpret.interpreting():
            yield "cpu", torch.float32
    else:
        yield "cuda", torch.bfloat16


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_patched_model_matches_unpatched(family, target, gen, tmp_path):
    device, dtype = target
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    norm_cls = getattr(getattr(transformers.models, family), f"modeling_{family}").__dict__[FAMILIES[family][2]]
    forward_before = norm_cls.forward
    ref = _tiny_model(family, device, dtype, seed)
    model = copy.deepcopy(ref)
    names = {n for n, m in model.named_modules() if type(m) is norm_cls}
    state_before = {k: v.clone() for k, v in model.state_dict().items()}
    weights_before = {n: model.get_submodule(n).weight for n in names}

    replaced = patch_model(model)

    assert set(replaced) == names and names
    for name in names:
        new = model.get_submodule(name)
        assert isinstance(new, HFRMSNorm)
        assert new.weight is weights_before[name]  # the same Parameter object
        assert type(replaced[name]) is norm_cls
    assert norm_cls.forward is forward_before  # no class was changed...
    assert all(type(ref.get_submodule(n)) is norm_cls for n in names)  # ...nor any other instance
    assert patch_model(model) == {}  # patched modules are not matched again

    # The state dict is unchanged, key for key and value for value, and so is save_pretrained.
    state_after = model.state_dict()
    assert state_after.keys() == state_before.keys()
    assert all(torch.equal(state_after[k], v) for k, v in state_before.items())
    ref.save_pretrained(tmp_path / "ref")
    model.save_pretrained(tmp_path / "patched")
    from safetensors.torch import load_file

    saved_ref = load_file(tmp_path / "ref" / "model.safetensors")
    saved = load_file(tmp_path / "patched" / "model.safetensors")
    assert saved.keys() == saved_ref.keys() and all(torch.equal(saved[k], saved_ref[k]) for k in saved_ref)

    ids = torch.randint(0, TINY["vocab_size"], (2, 12), generator=gen).to(device)
    truth = copy.deepcopy(ref).float() if dtype != torch.float32 else None
    logits_ref, loss_ref, grads_ref = _run(ref, ids)
    logits, loss, grads = _run(model, ids)
    assert logits.dtype == logits_ref.dtype
    assert grads.keys() == grads_ref.keys()
    if truth is None:
        rtol = MODEL_RTOL[dtype]
        assert _rel_err(logits, logits_ref) <= rtol
        assert abs(loss.item() - loss_ref.item()) <= rtol * abs(loss_ref.item())
        for name, g in grads_ref.items():
            assert _rel_err(grads[name], g) <= rtol, name
    else:
        logits_t, loss_t, grads_t = _run(truth, ids)

        def close(ours, theirs, exact, what):
            e_ours, e_theirs = _rel_err(ours, exact), _rel_err(theirs, exact)
            assert e_ours <= BF16_FACTOR * e_theirs + BF16_FLOOR, f"{what}: {e_ours:.3g} vs torch's {e_theirs:.3g}"

        close(logits, logits_ref, logits_t, "logits")
        close(loss.reshape(1), loss_ref.reshape(1), loss_t.reshape(1), "loss")
        for name, g in grads_t.items():
            close(grads[name], grads_ref[name], g, name)


def test_patch_model_leaves_unknown_modules_alone():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.RMSNorm(8), torch.nn.LayerNorm(8))
    assert patch_model(model) == {}
    assert isinstance(model[1], torch.nn.RMSNorm)
    with pytest.raises(TypeError, match="nn.Module"):
        patch_model(object())


def test_promoted_output_dtype_follows_transformers(gen):
    """Llama-family norms return weight * xhat with torch's type promotion: a bf16 input with
    an fp32 weight gives fp32, as in transformers."""
    from cutile_rms import interpret

    norm_cls = transformers.models.llama.modeling_llama.LlamaRMSNorm
    hf = norm_cls(64, eps=1e-5)
    with torch.no_grad():
        hf.weight.add_(0.2 * torch.randn(64, generator=gen))
    holder = torch.nn.Module()
    holder.norm = hf
    patch_model(holder)
    x = torch.randn(3, 64, generator=gen).to(torch.bfloat16)
    with interpret.interpreting():
        y = holder.norm(x)
    y_ref = hf(x)
    assert y.dtype == y_ref.dtype == torch.float32
    # The kernel rounds y to x's dtype once more than transformers does: within one bf16 ulp.
    assert torch.allclose(y, y_ref, rtol=2.0**-8, atol=0)
