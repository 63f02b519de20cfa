"""``torch.library`` custom ops, so that ``torch.compile`` traces RMSNorm without a graph break.

    torch.ops.cutile_rms.rms_norm_fwd(x, weight, eps, offset, casting, mode) -> (y, rstd)
    torch.ops.cutile_rms.rms_norm_infer(x, weight, eps, offset, casting, mode) -> y
    torch.ops.cutile_rms.rms_norm_bwd(x, dy, weight, rstd, offset, casting, mode) -> (dx, dw)

Each has a fake (meta) implementation that only describes its outputs (shapes may be
symbolic, so a batch or sequence length that changes does not force a recompile per shape);
``rms_norm_fwd`` has an autograd formula that calls ``rms_norm_bwd``. ``casting`` is the
kernel code from :func:`cutile_rms.rmsnorm.launch.casting_code`. ``rms_norm_bwd`` returns an
empty dw (shape (0,)) when weight is None, as an op's outputs cannot be None.

Outside a compiled region the public functions do not go through these ops: they call the
same torch layer directly, which saves the dispatcher's host time on every eager call.
Custom ops have no autocast rule, like ``torch.rms_norm`` on CUDA: under autocast the inputs
keep their dtypes.
"""

import torch

from cutile_rms.rmsnorm import sharding, torch_impl

__all__ = ["rms_norm_bwd", "rms_norm_fwd", "rms_norm_infer"]


def _like(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fake_rstd(x):
    return x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.custom_op(
    "cutile_rms::rms_norm_fwd",
    mutates_args=(),
    schema="(Tensor x, Tensor? weight, float eps, float offset, int casting, str? mode) -> (Tensor, Tensor)",
)
def rms_norm_fwd(x, weight, eps, offset, casting, mode):
    return torch_impl.forward(x, weight, eps, offset, casting, mode, store_rstd=True)


@rms_norm_fwd.register_fake
def _(x, weight, eps, offset, casting, mode):
    return _like(x), _fake_rstd(x)


@torch.library.custom_op(
    "cutile_rms::rms_norm_infer",
    mutates_args=(),
    schema="(Tensor x, Tensor? weight, float eps, float offset, int casting, str? mode) -> Tensor",
)
def rms_norm_infer(x, weight, eps, offset, casting, mode):
    return torch_impl.forward(x, weight, eps, offset, casting, mode, store_rstd=False)[0]


@rms_norm_infer.register_fake
def _(x, weight, eps, offset, casting, mode):
    return _like(x)


@torch.library.custom_op(
    "cutile_rms::rms_norm_bwd",
    mutates_args=(),
    schema="(Tensor x, Tensor dy, Tensor? weight, Tensor rstd, float offset, int casting, str? mode=None) "
    "-> (Tensor, Tensor)",
)
def rms_norm_bwd(x, dy, weight, rstd, offset, casting, mode=None):
    dx, dw = torch_impl.backward(x, dy, weight, rstd, offset, casting, mode=mode)
    return dx, (x.new_empty((0,)) if dw is None else dw)


@rms_norm_bwd.register_fake
def _(x, dy, weight, rstd, offset, casting, mode=None):
    return _like(x), (x.new_empty((0,)) if weight is None else _like(weight))


def _setup_context(ctx, inputs, output):
    x, weight, _eps, offset, casting, mode = inputs
    _y, rstd = output
    ctx.save_for_backward(x, weight, rstd)
    ctx.offset = offset
    ctx.casting = casting
    ctx.mode = mode
    ctx.mark_non_differentiable(rstd)


def _backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = torch.ops.cutile_rms.rms_norm_bwd(x, dy, weight, rstd, ctx.offset, ctx.casting, ctx.mode)
    return (
        dx if ctx.needs_input_grad[0] else None,
        dw if weight is not None and ctx.needs_input_grad[1] else None,
        None,
        None,
        None,
        None,
    )


rms_norm_fwd.register_autograd(_backward, setup_context=_setup_context)


# DTensor sharding rules (tensor / sequence parallelism), where torch has DTensor.
sharding.register()
