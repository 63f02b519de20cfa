"""The compile-ahead launcher's parts (cutile_rms._cubin, issue 21): the promises derived from an
array (CPU), the cubin cache and its key (compile tier: tileiras, no GPU), and the driver launch
against ct.launch, bitwise (GPU)."""

import os

import cuda.tile as ct
import pytest
import torch
from cuda.tile.compilation import ScalarConstraint

from cutile_rms import _abi, _cubin
from cutile_rms.rmsnorm import kernels as CK
from cutile_rms.rows import launch as RL
from cutile_rms.rows.plan import plan

BF = ct.bfloat16
F32 = ScalarConstraint(ct.float32)
BASE = 0x7F0000000000  # a 256-byte aligned device address (only packed, never dereferenced on the CPU)


def test_array_constraint_keeps_only_what_the_array_promises():
    """Base alignment, stride and dim divisibility, unit strides and dims of 1 are read off the
    array; whatever the array does not keep is not promised."""
    c = _cubin.array_constraint(_cubin.Array(BASE, BF, (4099, 1, 4096), (4096, 4096, 1)))
    assert c.base_addr_divisible_by == 16 and c.stride_divisible_by == (8, 8, 1)
    assert c.shape_divisible_by == (1, 1, 16) and c.stride_constant == (None, None, 1)
    assert c.shape_constant == (None, 1, None) and c.index_dtype == ct.int32
    # a view one element in: 2-byte aligned; rows of 4098 (not a 16-byte multiple); 4097 wide
    c = _cubin.array_constraint(_cubin.Array(BASE + 2, BF, (7, 4097), (4098, 1)))
    assert c.base_addr_divisible_by == 2 and c.stride_divisible_by == (1, 1)
    assert c.shape_divisible_by == (1, 1) and c.shape_constant == (None, None)
    c = _cubin.array_constraint(_cubin.Array(BASE, ct.float32, (32, 12), (12, 1)), int64=True)
    assert c.stride_divisible_by == (4, 1) and c.index_dtype == ct.int64


def _rows_forward(a=4099, n=4096, ptrs=(BASE, BASE + 0x1000000, BASE + 0x2000000, BASE + 0x3000000)):
    """(kernel, params, hints) of the rules' row-tile forward of an (a, 1, n) bf16 input: params
    as _cubin takes them (Arrays, (ScalarConstraint, value) pairs, constants)."""
    p = plan("forward", a, 1, n, 2, 132, long=False, lanes=False, static=False)
    values = RL.constants(p, CK.CAST_LLAMA, True, True)
    x = _cubin.Array(ptrs[0], BF, (a, 1, n), (n, n, 1))
    y = _cubin.Array(ptrs[2], BF, (a, 1, n), (n, n, 1))
    rstd = _cubin.Array(ptrs[3], ct.float32, (a, 1), (1, 1))
    values.update(x=x, r=x, s_out=x, y=y, w=_cubin.Array(ptrs[1], BF, (n,), (1,)), rstd_out=rstd, eps=(F32, 1e-6),
                  offset=(F32, 0.0))  # fmt: skip
    params = [values[k] for k in RL.KERNELS["forward"][1]]
    return RL._VARIANTS["forward", False].kernel, params, {"occupancy": p.occupancy, "num_worker_warps": p.warps}


def test_runtime_values_fill_the_parameter_layout():
    """One value per slot of the signature's layout: each array's pointer, shape and strides, each
    runtime scalar, no constant."""
    _, params, _ = _rows_forward(a=33, n=256)
    layout = _abi.parameter_layout(_cubin.signature(params).parameters)
    values = _cubin.runtime_values(params)
    assert len(values) == len(layout)
    assert values[:7] == [BASE, 33, 1, 256, 256, 256, 1]  # x: pointer, 3 dims, 3 strides
    assert values[-2:] == [1e-6, 0.0]  # eps, offset
    _abi.pack(layout, values)  # every value fits its slot


@pytest.mark.compile
def test_cubin_cache_compiles_once_and_keys_on_the_compiler(tmp_path):
    """A miss compiles and writes one file (no temporary left), a hit reads it back; the key
    changes with the tileiras version, the architecture and the hints; the cubin holds the
    signature's symbol."""
    kernel, params, hints = _rows_forward(a=33, n=256)
    sig = _cubin.signature(params)
    cache = _cubin.CubinCache(str(tmp_path))
    symbol, cubin = cache.get("cutile_rms.rows.kernels.rows_fwd", kernel, sig, hints, "sm_90")
    assert cache.compiles == 1 and symbol.startswith("rows_fwd") and symbol.encode() in cubin
    assert cache.get("cutile_rms.rows.kernels.rows_fwd", kernel, sig, hints, "sm_90") == (symbol, cubin)
    assert cache.compiles == 1 and [f for f in os.listdir(tmp_path) if not f.endswith(".cubin")] == []
    key = cache.digest("k", sig, hints, "sm_90")
    assert key != _cubin.CubinCache(str(tmp_path), compiler_version="13.5.0").digest("k", sig, hints, "sm_90")
    assert key != cache.digest("k", sig, hints, "sm_100") != cache.digest("k", sig, {**hints, "occupancy": 1}, "sm_90")
    assert _cubin.tileiras_version().count(".") == 2


_CT = {torch.bfloat16: ct.bfloat16, torch.float16: ct.float16, torch.float32: ct.float32}


def _array_of(t: torch.Tensor) -> _cubin.Array:
    return _cubin.Array(t.data_ptr(), _CT[t.dtype], tuple(t.shape), tuple(t.stride()))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("n", [4096, 689, 1000])
def test_cubin_launch_is_bitwise_ct_launch(tmp_path, dtype, n):
    """The row-tile forward and backward (runtime layouts: plain, gathered and multi-row tiles) of
    fresh inputs launched from cached cubins through the driver give the same bits as ct.launch
    (y, rstd, dx, dW partials), outputs poisoned first."""
    torch.manual_seed(n)
    a, es = 1031, torch.tensor([], dtype=dtype).element_size()
    x = torch.randn(a, 1, n, device="cuda", dtype=dtype)
    dy = torch.randn(a, 1, n, device="cuda", dtype=dtype)
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dtype)
    casting = CK.CAST_GEMMA if dtype == torch.float32 else CK.CAST_LLAMA
    props = torch.cuda.get_device_properties(0)
    arch, sms = f"sm_{props.major}{props.minor}", props.multi_processor_count
    cache = _cubin.CubinCache(str(tmp_path))
    stream = torch.cuda.current_stream()
    outs = {}
    for how in ("ct.launch", "cubin"):
        fp, bp = (
            plan(op, a, 1, n, es, sms, long=False, lanes=False, static=False, any_length=True)
            for op in ("forward", "backward")
        )
        y, dx = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
        rstd = torch.full((a, 1), float("nan"), device="cuda")
        part = torch.full((bp.grid, n), float("nan"), device="cuda")
        for op, p, values in (
            ("forward", fp, dict(x=x, r=x, s_out=x, y=y, w=w, rstd_out=rstd, eps=1e-6, offset=0.0)),
            ("backward", bp, dict(x=x, dy=dy, w=w, rstd_in=rstd, dx=dx, dw_partial=part, offset=0.0)),
        ):
            values.update(RL.constants(p, casting, True, True))
            kernel = RL._VARIANTS[op, p.static]
            if how == "ct.launch":
                ct.launch(stream, (p.grid,), kernel[p.hints], RL.arguments(op, values))
                continue
            params = [_array_of(v) if isinstance(v, torch.Tensor) else (F32, v) if isinstance(v, float) else v
                      for v in RL.arguments(op, values)]  # fmt: skip
            sig = _cubin.signature(params)
            hints = {"occupancy": p.occupancy, "num_worker_warps": p.warps}
            symbol, cubin = cache.get(f"rows.{op}", kernel.kernel, sig, hints, arch)
            _cubin.CubinKernel(cubin, symbol, sig).launch(stream.cuda_stream, (p.grid,), _cubin.runtime_values(params))
        torch.cuda.synchronize()
        outs[how] = (y, rstd, dx, part)
    for name, ours, theirs in zip(("y", "rstd", "dx", "dw partials"), outs["cubin"], outs["ct.launch"], strict=True):
        assert not ours.isnan().any(), name
        assert torch.equal(ours.view(torch.uint8), theirs.view(torch.uint8)), name
