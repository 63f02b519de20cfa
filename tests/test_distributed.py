"""DDP and FSDP2 (``fully_shard``) training of a small model with RMSNorm layers on every
visible GPU: per-step losses, first-step gradients and final parameters match a single-GPU
run over the same global batches.

    pytest -m distributed                                       # spawns torchrun over all GPUs
    torchrun --standalone --nproc_per_node=2 -m pytest tests/test_distributed.py   # directly

The world size comes from the environment (torchrun's WORLD_SIZE); one GPU works too (a world
of one process).
"""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from cutile_rms import RMSNorm

STEPS = 4
ROWS_PER_RANK = 24
# fp32 throughout. The distributed runs sum the same per-sample gradients in another order
# (NCCL's all-reduce or reduce-scatter across ranks, against one matmul over the global batch),
# so results differ by fp32 rounding, ~1e-7 relative per step; 1e-4 is far above that and far
# below any real error (a wrong RMSNorm gradient changes the results at order 1).
RTOL, ATOL = 1e-4, 1e-6


def _model(n_in=64, hidden=256, n_out=16):
    return nn.Sequential(
        nn.Linear(n_in, hidden),
        RMSNorm(hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden),
        RMSNorm(hidden, offset=1.0, casting_mode="gemma"),
        nn.Linear(hidden, n_out),
    )


def _full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t  # FSDP2 holds DTensor shards


def _train(model, batches, world):
    """SGD steps; returns (global loss per step, first-step gradients, final parameters)."""
    import torch.distributed as dist

    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, first_grads = [], None
    for x, target in batches:
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        if world > 1:
            loss = loss.detach().clone()
            dist.all_reduce(loss)
            loss /= world
        losses.append(loss.item())
        if first_grads is None:
            first_grads = {n.removeprefix("module."): _full(p.grad).clone() for n, p in model.named_parameters()}
        opt.step()
    params = {n.removeprefix("module."): _full(p.detach()).clone() for n, p in model.named_parameters()}
    return losses, first_grads, params


def _compare(what, got, ref):
    losses, grads, params = got
    ref_losses, ref_grads, ref_params = ref
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=RTOL, atol=ATOL, msg=what)
    for name in ref_params:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=RTOL, atol=ATOL, msg=f"{what} grad {name}")
        torch.testing.assert_close(params[name], ref_params[name], rtol=RTOL, atol=ATOL, msg=f"{what} {name}")


def _distributed_body():
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    local = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        # One fresh seed for the run, the same on every rank.
        seed = torch.tensor([int.from_bytes(os.urandom(4), "little") >> 1], device=device)
        dist.broadcast(seed, src=0)
        print(f"rank {rank}/{world} seed {int(seed)}")
        gen = torch.Generator().manual_seed(int(seed))
        with torch.random.fork_rng(devices=[device]):
            torch.manual_seed(int(seed))
            base = _model().to(device)
        rows = ROWS_PER_RANK * world
        batches = [
            (torch.randn(rows, 64, generator=gen).to(device), torch.randn(rows, 16, generator=gen).to(device))
            for _ in range(STEPS)
        ]
        mine = slice(rank * ROWS_PER_RANK, (rank + 1) * ROWS_PER_RANK)
        local_batches = [(x[mine], t[mine]) for x, t in batches]

        reference = _train(copy.deepcopy(base), batches, world=1)  # one GPU, the global batch

        ddp = DistributedDataParallel(copy.deepcopy(base), device_ids=[local])
        _compare("DDP", _train(ddp, local_batches, world), reference)

        sharded = copy.deepcopy(base)
        for layer in sharded:
            if any(True for _ in layer.parameters()):
                fully_shard(layer)
        fully_shard(sharded)
        _compare("FSDP2", _train(sharded, local_batches, world), reference)
        print(f"rank {rank}: DDP and FSDP2 match the single-GPU run over {STEPS} steps")
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.distributed
def test_ddp_and_fsdp2_match_single_gpu():
    if "WORLD_SIZE" in os.environ:  # started by torchrun: this process is one rank
        _distributed_body()
        return
    n = torch.cuda.device_count()
    root = Path(__file__).resolve().parent.parent
    test_id = f"{Path(__file__).resolve()}::{test_ddp_and_fsdp2_match_single_gpu.__name__}"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
        "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", test_id,
    ]  # fmt: skip
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900)
    print(out.stdout[-3000:])
    assert out.returncode == 0, f"torchrun over {n} GPU(s) failed:\n{out.stdout[-6000:]}\n{out.stderr[-6000:]}"
    assert out.stdout.count("DDP and FSDP2 match") == n
