"""Tensor and sequence parallelism (issue #24): the custom ops' DTensor sharding rules.

Two ranks on the CPU (gloo), the kernels run by the interpreter on each rank's local rows:
x sharded on the batch or the sequence dim, replicated, or sharded on the normalized dim
(which DTensor must redistribute first); y, dx and dW (a Partial sum) against the float64
reference on the full tensors; and the ``RMSNorm`` module under ``parallelize_module`` with
``SequenceParallel``. The two-GPU runs of the issue (TP=2 training) need two GPUs.
"""

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

WORLD = 2
EPS = 1e-6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks(rank, world, port, device):
    import torch.distributed as dist
    from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

    from cutile_rms import RMSNorm, interpret, rms_norm, rms_norm_backward, rms_norm_forward
    from tests.reference import check_all, rms_norm_ref_grads, tolerances

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    if device == "cpu":
        dist.init_process_group("gloo", rank=rank, world_size=world)
        interpret.enable()
    else:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        mesh = DeviceMesh(device, list(range(world)))
        g = torch.Generator().manual_seed(1234)  # the same full tensors on every rank
        b, s, n = 2, 6, 96
        x = torch.randn(b, s, n, generator=g).to(device)
        dy = torch.randn(b, s, n, generator=g).to(device)
        w = (1.0 + 0.1 * torch.randn(n, generator=g)).to(device)
        tols = tolerances(torch.float32, torch.float32, "llama")
        yr, rr, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS)
        for placement in (Shard(0), Shard(1), Replicate(), Shard(2)):
            xd = distribute_tensor(x, mesh, [placement]).requires_grad_()
            wd = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
            y = rms_norm(xd, wd, EPS)
            y.backward(distribute_tensor(dy, mesh, y.placements))
            got = {"y": y.full_tensor(), "dx": xd.grad.full_tensor(), "dw": wd.grad.full_tensor()}
            check_all(got, {"y": yr, "dx": dxr, "dw": dwr}, tols)
            if placement != Shard(2):  # a row-preserving placement runs in place, as it came
                assert y.placements == (placement,), (placement, y.placements)
        # the standalone pair: rstd keeps x's placement, dW comes back as a Partial sum
        xd = distribute_tensor(x, mesh, [Shard(1)])
        wd = distribute_tensor(w, mesh, [Replicate()])
        y, rstd = rms_norm_forward(xd, wd, EPS)
        assert rstd.placements == (Shard(1),)
        dx, dw = rms_norm_backward(xd, distribute_tensor(dy, mesh, [Shard(1)]), wd, rstd)
        assert dw.placements[0].is_partial()
        check_all({"rstd": rstd.full_tensor(), "dx": dx.full_tensor(), "dw": dw.full_tensor()},
                  {"rstd": rr, "dx": dxr, "dw": dwr}, tols)  # fmt: skip
        # the module under sequence parallelism
        model = torch.nn.Sequential(RMSNorm(n, eps=EPS))
        with torch.no_grad():
            model[0].weight.copy_(w)
        parallelize_module(model, mesh, {"0": SequenceParallel()})
        local = x.chunk(world, dim=1)[rank].clone().requires_grad_()  # SequenceParallel's input: the local shard
        out = model(local)
        out.backward(distribute_tensor(dy, mesh, [Shard(1)]))
        check_all({"y": out.full_tensor(), "dw": model[0].weight.grad.full_tensor()}, {"y": yr, "dw": dwr}, tols)
        check_all({"dx": local.grad}, {"dx": dxr.chunk(world, dim=1)[rank]}, tols)
    finally:
        dist.destroy_process_group()


def test_dtensor_sharding_rules_on_two_cpu_ranks():
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    mp.spawn(_ranks, args=(WORLD, _free_port(), "cpu"), nprocs=WORLD, join=True)


@pytest.mark.gpu
def test_dtensor_sharding_rules_on_the_gpus():
    """The same on the GPU kernels: a world of one GPU, or of two where two are visible."""
    world = min(2, torch.cuda.device_count())
    mp.spawn(_ranks, args=(world, _free_port(), "cuda"), nprocs=world, join=True)
