"""RMSNorm providers compared by the benchmark, behind one interface.

Each provider turns (x, weight, variant) into a differentiable ``y``. Variants: llama (weight,
offset 0), gemma (offset 1, fp32 math) and noweight. Providers without an offset argument
(torch, torch.compile, Quack) get ``1 + w`` computed once outside the timed region, which is
the same function. A provider that cannot be imported is reported as missing, with the reason.
"""

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

EPS = 1e-6


@dataclass
class Provider:
    name: str
    fn: object = None  # (x, w, offset, casting) -> y
    native_offset: bool = True
    missing: str | None = None  # why it is unavailable
    unsupported: set = field(default_factory=set)  # variants it cannot run


def _cutile(mode):
    def fn(x, w, offset, casting):
        from cutile_rms import rms_norm

        return rms_norm(x, w, EPS, offset=offset, casting_mode=casting, mode=mode)

    return fn


def _liger():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    def fn(x, w, offset, casting):
        # in_place=False: Liger's default writes dx into dy's storage; ours never modifies inputs.
        return LigerRMSNormFunction.apply(x, w, EPS, offset, casting, False)

    return fn


def _torch(x, w, offset, casting):
    return F.rms_norm(x, (x.shape[-1],), w, EPS)


_compiled = None


def _torch_compile(x, w, offset, casting):
    global _compiled
    if _compiled is None:
        torch._dynamo.config.cache_size_limit = 1024  # every shape really compiles
        torch._dynamo.config.accumulated_cache_size_limit = 4096
        # The benchmark replays backward with retain_graph=True, which donated buffers forbid.
        torch._functorch.config.donated_buffer = False
        _compiled = torch.compile(_torch, dynamic=False)
    return _compiled(x, w, offset, casting)


def _quack():
    from quack.rmsnorm import rmsnorm

    def fn(x, w, offset, casting):
        return rmsnorm(x, w, eps=EPS)

    return fn


# Every provider the benchmark knows, in the order it runs them.
PROVIDER_NAMES = (
    "cutile_rms",
    "cutile_rms:persistent",
    "cutile_rms:gather",
    "cutile_rms:rows",
    "torch",
    "torch_compile",
    "liger",
    "quack",
)


def all_providers(names=None, on_gpu: bool = True) -> list[Provider]:
    out = [
        Provider("cutile_rms", _cutile(None)),
        Provider("cutile_rms:persistent", _cutile("persistent")),
        Provider("cutile_rms:gather", _cutile("gather")),
        Provider("cutile_rms:rows", _cutile("rows")),  # the row-tile forward and the experimental backward
        Provider("torch", _torch, native_offset=False),
    ]
    gpu_only = (("torch_compile", lambda: _torch_compile, False), ("liger", _liger, True), ("quack", _quack, False))
    for name, factory, native in gpu_only:
        if not on_gpu:
            out.append(Provider(name, missing="needs a CUDA GPU (this run uses the cuTile interpreter on the CPU)"))
            continue
        try:
            out.append(Provider(name, factory(), native_offset=native))
        except Exception as e:  # ImportError, or a broken install
            out.append(Provider(name, missing=f"{type(e).__name__}: {e}"[:200]))
    assert tuple(p.name for p in out) == PROVIDER_NAMES
    if names:
        known = {p.name for p in out}
        unknown = set(names) - known
        if unknown:
            raise ValueError(f"unknown providers {sorted(unknown)}; known: {sorted(known)}")
        out = [p for p in out if p.name in names]
    return out


def variant_args(provider: Provider, variant: str, w):
    """(weight, offset, casting) to pass a provider for a variant; w is the raw weight."""
    if variant == "noweight":
        return None, 0.0, "llama"
    if variant == "gemma":
        if provider.native_offset:
            return w, 1.0, "gemma"
        return (1.0 + w.float()).to(w.dtype).detach().requires_grad_(w.requires_grad), 0.0, "gemma"
    return w, 0.0, "llama"
