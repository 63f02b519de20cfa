"""DTensor sharding rules for the RMSNorm custom ops (tensor and sequence parallelism).

Without them, a DTensor reaching ``torch.ops.cutile_rms.*`` fails with "Operator
cutile_rms.rms_norm_infer.default does not have a sharding strategy registered". The rules,
registered through torch's public ``register_sharding``:

- x (and dy) sharded on a leading dim, or replicated: the op runs on each rank's rows as they
  are; y, rstd and dx keep that placement.
- the weight is replicated.
- dW is a ``Partial`` sum over the ranks' rows when x is sharded (DTensor reduces it when it
  is needed), replicated when x is.
- x sharded on the normalized (last) dim has no rule here, so DTensor redistributes it to one
  of the placements above first (a row must be whole on one rank), as it does for torch's own
  ``rms_norm``.

Imported by ops.py when ``torch.distributed`` offers DTensor; a no-op otherwise.
"""

import torch

__all__ = ["register"]


def _leading_dims(x) -> range:
    return range(x.ndim - 1)


def register() -> bool:
    """Registers the rules; False where this torch has no DTensor."""
    try:
        from torch.distributed.tensor import Partial, Replicate, Shard
        from torch.distributed.tensor.experimental import register_sharding
    except ImportError:  # torch without distributed support
        return False
    ops = torch.ops.cutile_rms
    w_place = Replicate()

    def weight(w):
        return None if w is None else w_place

    @register_sharding(ops.rms_norm_fwd.default)
    def _fwd(x, w, eps, offset, casting, mode):
        rules = [([Replicate(), Replicate()], [Replicate(), weight(w), None, None, None, None])]
        for d in _leading_dims(x):
            rules.append(([Shard(d), Shard(d)], [Shard(d), weight(w), None, None, None, None]))
        return rules

    @register_sharding(ops.rms_norm_infer.default)
    def _infer(x, w, eps, offset, casting, mode):
        rules = [([Replicate()], [Replicate(), weight(w), None, None, None, None])]
        for d in _leading_dims(x):
            rules.append(([Shard(d)], [Shard(d), weight(w), None, None, None, None]))
        return rules

    @register_sharding(ops.rms_norm_bwd.default)
    def _bwd(x, dy, w, rstd, offset, casting, mode=None):
        rest = [None, None, None]
        rules = [([Replicate(), Replicate()], [Replicate(), Replicate(), weight(w), Replicate(), *rest])]
        for d in _leading_dims(x):
            # dW sums over rows: each rank holds its rows' share (an empty tensor without a weight)
            dw = Partial("sum") if w is not None else Replicate()
            rules.append(([Shard(d), dw], [Shard(d), Shard(d), weight(w), Shard(d), *rest]))
        return rules

    return True
