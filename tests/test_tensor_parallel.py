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


# --- TP=2 training of a Llama-like block (issue #24, item 3) -------------------------------------
# A block as torchtitan shards it: attention (q, k, v column-parallel, o row-parallel) and a SwiGLU
# MLP (w1, w3 column-parallel, w2 row-parallel) between RMSNorms under SequenceParallel, so the
# norms see DTensors sharded on the sequence dim. Against the same model on one device with
# torch.nn.RMSNorm over TP_STEPS SGD steps: per-step losses, every first-step gradient (the norm
# weights' included) and the final parameters. fp32 throughout: the row-parallel projections sum
# their partial products across ranks in another order than one matmul, a few fp32 ulps per step,
# so TP_RTOL (the 1e-4) is far above that and far below any real error.
TP_STEPS = 4
TP_RTOL, TP_ATOL = 1e-4, 1e-6


class _Attention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(dim, dim, bias=False) for _ in range(4))

    def forward(self, h):
        b, s, _ = h.shape
        q, k, v = (w(h).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(a.transpose(1, 2).reshape(b, s, -1))


class _MLP(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1, self.w3 = torch.nn.Linear(dim, hidden, bias=False), torch.nn.Linear(dim, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, h):
        return self.w2(torch.nn.functional.silu(self.w1(h)) * self.w3(h))


class _Block(torch.nn.Module):
    """embed -> (norm, attention, residual) -> (norm, MLP, residual) -> norm -> head."""

    def __init__(self, norm, n_in=16, dim=64, heads=4, hidden=128, n_out=8):
        super().__init__()
        self.embed = torch.nn.Linear(n_in, dim, bias=False)
        self.attention_norm, self.attention = norm(dim), _Attention(dim, heads)
        self.ffn_norm, self.mlp = norm(dim), _MLP(dim, hidden)
        self.norm, self.head = norm(dim), torch.nn.Linear(dim, n_out, bias=False)

    def forward(self, x):
        h = self.embed(x)
        h = h + self.attention(self.attention_norm(h))
        h = h + self.mlp(self.ffn_norm(h))
        return self.head(self.norm(h))


class LlamaRMSNorm(torch.nn.Module):
    """The Hugging Face Llama norm's computation under its class name, which patch_model
    recognises (so that this test needs no transformers)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.variance_epsilon = eps

    def forward(self, h):
        dtype = h.dtype
        h = h.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


def _tp_plan():
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    seq = Shard(1)
    return {
        "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=seq),
        "ffn_norm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
        "mlp.w1": ColwiseParallel(),
        "mlp.w3": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(output_layouts=seq),
        "norm": SequenceParallel(),
        "head": ColwiseParallel(input_layouts=seq, output_layouts=Replicate()),
    }


def _full_tensor(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _tp_train(model, batches):
    """(loss per step, first-step gradients, final parameters), all as full tensors."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, first = [], None
    for x, target in batches:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(_full_tensor(model(x)), target)
        loss.backward()
        losses.append(loss.item())
        if first is None:
            first = {n: _full_tensor(p.grad).clone() for n, p in model.named_parameters()}
        opt.step()
    return losses, first, {n: _full_tensor(p.detach()).clone() for n, p in model.named_parameters()}


def _tp_compare(what, got, ref):
    for step, (a, b) in enumerate(zip(got[0], ref[0], strict=True)):
        assert abs(a - b) <= TP_ATOL + TP_RTOL * abs(b), f"{what}: loss of step {step}: {a} vs {b}"
    for i, kind in ((1, "first-step gradient"), (2, "final value")):
        assert got[i].keys() == ref[i].keys(), what
        for name, ref_t in ref[i].items():
            torch.testing.assert_close(got[i][name], ref_t, rtol=TP_RTOL, atol=TP_ATOL, msg=f"{what}: {kind} of {name}")


def _tp_training(rank, world, device, seed):
    """On each rank: the block under TP, under torch.compile over TP, with Hugging Face-style
    norms swapped by patch_model under TP, and under FSDP2 x TP on a (1, world) mesh, against the
    single-device model with torch.nn.RMSNorm; prints one line per passed check."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    from cutile_rms import RMSNorm

    gen = torch.Generator().manual_seed(seed)  # the same model and batches on every rank
    torch.manual_seed(seed)
    reference_model = _Block(lambda d: torch.nn.RMSNorm(d, eps=EPS)).to(device)
    with torch.no_grad():  # weights that are not all ones, so that a wrong dW shows
        for mod in (reference_model.attention_norm, reference_model.ffn_norm, reference_model.norm):
            mod.weight.add_(0.1 * torch.randn(mod.weight.shape, generator=gen).to(device))
    state = {k: v.clone() for k, v in reference_model.state_dict().items()}
    batches = [(torch.randn(2, 8, 16, generator=gen).to(device), torch.randn(2, 8, 8, generator=gen).to(device))
               for _ in range(TP_STEPS)]  # fmt: skip
    reference = _tp_train(reference_model, batches)

    def ours():
        model = _Block(lambda d: RMSNorm(d, eps=EPS)).to(device)
        model.load_state_dict(state)
        return model

    mesh = init_device_mesh(device, (world,), mesh_dim_names=("tp",))
    tp = parallelize_module(ours(), mesh, _tp_plan())
    _tp_compare("TP", _tp_train(tp, batches), reference)
    print(f"rank {rank}: TP={world} with sequence parallel matches one device over {TP_STEPS} steps", flush=True)

    compiled = torch.compile(parallelize_module(ours(), mesh, _tp_plan()))
    losses, grads, params = _tp_train(compiled, batches)
    unwrap = lambda d: {k.removeprefix("_orig_mod."): v for k, v in d.items()}  # noqa: E731
    _tp_compare("torch.compile over TP", (losses, unwrap(grads), unwrap(params)), reference)
    print(f"rank {rank}: torch.compile over TP={world} matches one device over {TP_STEPS} steps", flush=True)

    from cutile_rms import patch_model

    hf = _Block(lambda d: LlamaRMSNorm(d, EPS)).to(device)
    hf.load_state_dict(state)
    swapped = patch_model(hf)
    assert len(swapped) == 3, swapped
    _tp_compare("patch_model under TP", _tp_train(parallelize_module(hf, mesh, _tp_plan()), batches), reference)
    print(f"rank {rank}: patch_model under TP={world} matches one device over {TP_STEPS} steps", flush=True)

    from torch.distributed.fsdp import fully_shard

    mesh2 = init_device_mesh(device, (1, world), mesh_dim_names=("dp", "tp"))
    model = parallelize_module(ours(), mesh2["tp"], _tp_plan())
    fully_shard(model, mesh=mesh2["dp"])
    _tp_compare("FSDP2 x TP", _tp_train(model, batches), reference)
    print(f"rank {rank}: FSDP2 x TP on a (1, {world}) mesh matches one device over {TP_STEPS} steps", flush=True)


def _tp_spawned(rank, world, port, seed):
    """A CPU rank of mp.spawn: gloo, the kernels through the interpreter."""
    import torch.distributed as dist

    from cutile_rms import interpret

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    interpret.enable()
    try:
        _tp_training(rank, world, "cpu", seed)
    finally:
        dist.destroy_process_group()


def test_tp2_training_matches_one_device_on_two_cpu_ranks():
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    seed = int.from_bytes(os.urandom(4), "little") >> 1
    print(f"seed {seed}")
    mp.spawn(_tp_spawned, args=(WORLD, _free_port(), seed), nprocs=WORLD, join=True)


def _tp_torchrun_body():
    import torch.distributed as dist

    local = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    try:
        seed = torch.tensor([int.from_bytes(os.urandom(4), "little") >> 1], device=device)
        dist.broadcast(seed, src=0)
        print(f"rank {dist.get_rank()} seed {int(seed)}")
        _tp_training(dist.get_rank(), dist.get_world_size(), "cuda", int(seed))
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.distributed
def test_tp2_training_matches_one_gpu():
    """TP=2 (and FSDP2 x TP) on two GPUs through torchrun; skipped with fewer than two."""
    import subprocess
    import sys
    from pathlib import Path

    if "WORLD_SIZE" in os.environ:  # started by torchrun: this process is one rank
        _tp_torchrun_body()
        return
    if torch.cuda.device_count() < 2:
        pytest.skip(f"TP=2 needs two GPUs; {torch.cuda.device_count()} visible")
    root = Path(__file__).resolve().parent.parent
    test_id = f"{Path(__file__).resolve()}::{test_tp2_training_matches_one_gpu.__name__}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "pytest", "-q",
           "-s", "-p", "no:cacheprovider", test_id]  # fmt: skip
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900)
    print(out.stdout[-3000:])
    assert out.returncode == 0, f"torchrun over 2 GPUs failed:\n{out.stdout[-6000:]}\n{out.stderr[-6000:]}"
    assert out.stdout.count("with sequence parallel matches one device") == 2
    assert out.stdout.count("FSDP2 x TP on a (1, 2) mesh matches") == 2
    assert out.stdout.count("torch.compile over TP=2 matches") == 2
    assert out.stdout.count("patch_model under TP=2 matches") == 2
