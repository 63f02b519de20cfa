"""Every kernel path against the float64 reference (y, rstd, dx, dw), on two targets: the GPU
(`gpu` tier) and the cuTile interpreter on the CPU (CPU tier, so CI runs the real kernels).

The launcher-level tests poison every output and workspace with NaN before the launch, so an
element a kernel fails to write shows up as non-finite. API-level tests go through the public
torch functions and autograd.
"""

import dataclasses

import pytest
import torch

from cutile_rms import RMSNorm, interpret, rms_norm, rms_norm_backward, rms_norm_forward
from cutile_rms._device import DeviceInfo
from cutile_rms.rmsnorm import config as C
from cutile_rms.rmsnorm import kernels as K
from cutile_rms.rmsnorm.config import kernel_config, plan_forward
from cutile_rms.rmsnorm.launch import (
    _slots,
    backward_plan,
    casting_code,
    forward_plan,
    half_code,
    launch_backward,
    launch_forward,
    run_backward,
    run_forward,
)
from cutile_rms.rmsnorm.torch_impl import as_words, int64_workspace, launch_target
from tests.reference import Tol, check_all, dw_term_scale, make_inputs, nan_like, rms_norm_ref_grads, tolerances

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
MODES = ["persistent", "gather"]
CASTINGS = ["llama", "gemma", "none"]
# (has_weight, offset)
AFFINE = [(True, 0.0), (True, 1.0), (False, 0.0)]
EPS = 1e-6


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def forward_workspace(fplan, device):
    """The launcher's workspace for a forward plan (zeroed slots for split, or None)."""

    def int64(shape, zeroed):
        return torch.zeros(shape, dtype=torch.int64, device=device)

    return _slots(fplan, int64)


def run_poisoned(x, dy, w, *, mode, casting, offset, eps=EPS, info=None, plans=None, polls=None):
    """Forward then backward through the framework-free launchers, all outputs NaN-poisoned,
    planned for x's device (or for ``info``, a DeviceInfo), or run with ``plans`` (forward
    plan, backward plan) when given; polls: the split kernels' poll bound (launch_forward)."""
    dev = x.device
    m, n = x.shape
    stream, dev_info = launch_target(dev)
    info = info or dev_info
    code = casting_code(casting, x.dtype == torch.float32)

    y = nan_like((m, n), x.dtype, dev)
    rstd = nan_like((m,), torch.float32, dev)
    fplan, plan = plans or (forward_plan(x, mode, info), backward_plan(x, info))
    zeros = lambda shape: torch.zeros(shape, dtype=torch.int64, device=dev)  # noqa: E731
    launch_forward(fplan, x, w, y, rstd, eps, offset, code, stream, forward_workspace(fplan, dev), polls)

    dx = nan_like((m, n), x.dtype, dev)
    dw = None if w is None else nan_like(w.shape, w.dtype, dev)
    partial = None if w is None else nan_like(plan.partial_shape(n), torch.float32, dev)
    row_dot = nan_like((m,), torch.float32, dev) if plan.needs_row_dot else None
    slots = zeros(plan.slots) if plan.slots else None
    arrays = (x, dy, w, dx, dw)
    if plan.kernel == "packed":  # int32 word views, as run_backward passes them
        arrays = tuple(None if a is None else as_words(a) for a in arrays)
    bx, bdy, bw, bdx, bdw = arrays
    launch_backward(plan, bx, bdy, bw, rstd, bdx, bdw, partial, row_dot, offset, code, stream, slots,
                    half_code(x.dtype), polls)  # fmt: skip
    _sync(dev)
    return {"y": y, "rstd": rstd, "dx": dx, "dw": dw}


def check_variant(dev, shape, dtype, mode, casting, has_weight, offset, gen, w_dtype=None, plans=None, polls=None):
    x, dy, w = make_inputs(shape, dtype, dev, w_dtype=w_dtype, has_weight=has_weight, offset=offset, generator=gen)
    x0, dy0, w0 = x.clone(), dy.clone(), (None if w is None else w.clone())
    out = run_poisoned(x, dy, w, mode=mode, casting=casting, offset=offset, plans=plans, polls=polls)
    y, rstd, dx, dw = rms_norm_ref_grads(x, dy, w, EPS, offset)
    tols = tolerances(dtype, None if w is None else w.dtype, casting)
    check_all(out, {"y": y, "rstd": rstd, "dx": dx, "dw": dw}, tols, {"dw": dw_term_scale(x, dy, EPS)})
    # Inputs are never modified.
    assert torch.equal(x, x0) and torch.equal(dy, dy0)
    assert w is None or torch.equal(w, w0)


@pytest.mark.parametrize("shape", [(1, 123), (2003, 760), (37, 5120)], ids=str)
@pytest.mark.parametrize("has_weight,offset", AFFINE, ids=["w", "w+1", "no-w"])
@pytest.mark.parametrize("casting", CASTINGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_variants(dev, mode, dtype, casting, has_weight, offset, shape, gen):
    check_variant(dev, shape, dtype, mode, casting, has_weight, offset, gen)


SHAPES = [
    (1, 4096),  # a single row
    (2003, 760),  # odd M, N not a power of two
    (1001, 1024),  # M not divisible by any TILE_M > 1
    (64, 7168),
    (16, 5120),
    (4099, 512),
    (300, 64),  # short rows: many rows per tile
    (9, 16384),  # the longest single-tile row
    (5, 16385),  # one past it: chunked, with a 1-element last chunk
    (17, 65536),
    (3, 262144),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_shapes(dev, mode, dtype, shape, gen):
    check_variant(dev, shape, dtype, mode, "llama", True, 0.0, gen)


@pytest.mark.parametrize(
    "dtype,w_dtype", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32), (torch.float32, torch.bfloat16)]
)
@pytest.mark.parametrize("casting", CASTINGS)
@pytest.mark.parametrize("mode", MODES)
def test_mixed_weight_dtype(dev, mode, casting, dtype, w_dtype, gen):
    check_variant(dev, (333, 2048), dtype, mode, casting, True, 0.0, gen, w_dtype=w_dtype)


@pytest.mark.parametrize("n", [1000, 20000])
@pytest.mark.parametrize("mode", MODES)
def test_forced_modes_take_their_paths(mode, n):
    plan = plan_forward(64, n, 132, mode)
    assert plan.mode == mode
    # gather always walks column chunks; persistent takes the table's kernel for the row
    # (the defaults: one tile up to 16384, chunked above).
    assert plan.kernel == ("chunked" if mode == "gather" or n > 16384 else "tile")
    assert kernel_config("forward", n, 2, None).kernel == ("tile" if n <= 16384 else "chunked")


# Every kind of config a tuning table may hold, with several rows per tile where the defaults
# have one, explicit worker warps, and the memory knobs (stores without TMA, a load latency
# hint): (forward, backward, row-dot). Rows (301) and columns (1000) divide none of the tiles.
CONFIG_KINDS = [
    (C.tile(4, 1024, 2, 8), C.tile(2, 1024, 4, 8), C.chunked(1, 1024, 1)),
    (C.chunked(2, 256, 2), C.chunked(2, 256, 1), C.chunked(4, 128, 2)),
    (C.chunked(4, 512, 8, 4), C.chunked(4, 128, 2, 8), C.chunked(2, 512, 1, 8)),
    (C.tile(1, 1024, 2, tma_store=False, latency=1), C.tile(2, 1024, 1, 8, tma_store=False), C.chunked(1, 1024, 1)),
    (C.chunked(1, 256, 2, tma_store=False), C.chunked(2, 256, 1, tma_store=False, latency=2), C.chunked(2, 256, 1)),
    (C.split(2, 256, 1), C.split(1, 512, 2, 8), C.chunked(1, 1024, 1)),
    (C.split(1, 128, 2, latency=1), C.split(4, 128, 1), C.chunked(1, 1024, 1)),
]
CONFIG_KIND_IDS = ["tile", "chunked-2rows", "chunked-4rows", "tile-no-tma-store", "chunked-no-tma-store", "split",
                   "split-8-ways"]  # fmt: skip


@pytest.mark.parametrize("cfgs", CONFIG_KINDS, ids=CONFIG_KIND_IDS)
@pytest.mark.parametrize("has_weight,offset", AFFINE, ids=["w", "w+1", "no-w"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tunable_configs(dev, dtype, has_weight, offset, cfgs, gen):
    m, n = 301, 1000
    sms = launch_target(torch.device(dev))[1].num_sms
    fcfg, bcfg, dot = cfgs
    plans = (C.forward_plan_from(fcfg, m, sms, "persistent", n), C.backward_plan_from(bcfg, dot, m, n, sms))
    check_variant(dev, (m, n), dtype, None, "llama", has_weight, offset, gen, plans=plans)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_rows_with_a_partial_last_segment(dev, dtype, gen):
    """700-wide rows in 256-wide segments: 3 blocks per row (slots 4 wide, one unused), the
    last segment 188 wide; 45 rows in 2-row tiles leave the last tile half empty."""
    m, n = 45, 700
    sms = launch_target(torch.device(dev))[1].num_sms
    cfg = C.split(2, 256, 1)
    plans = (C.forward_plan_from(cfg, m, sms, "persistent", n), C.backward_plan_from(cfg, cfg, m, n, sms))
    assert plans[0].splits == plans[1].num_chunks == 3 and plans[0].slots[1] == 4
    check_variant(dev, (m, n), dtype, None, "llama", True, 0.0, gen, plans=plans)


@pytest.mark.parametrize("has_weight,offset", AFFINE, ids=["w", "w+1", "no-w"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_blocks_put_aside_what_their_partners_have_not_published(dev, dtype, has_weight, offset, gen):
    """No split block waits for a partner without bound (issue #20). With one poll, a block
    whose partners have not published a row tile puts it aside and, after its other row tiles,
    finishes it by reading the whole rows itself; forward and backward still match the
    reference. The interpreter runs blocks one at a time, so there every partner but the last
    of a group finds the others missing at every row tile (its slots carry the mark), and the
    last finds them all published: both paths in one launch, and no wait on a block that is
    not running. On a GPU, one poll makes blocks put aside whatever a partner has not yet
    published: the hardware path of the same code."""
    m, n = 37, 1000  # 4 segments of 256 (the last 232 wide); 19 row tiles of 2 rows
    sms = launch_target(torch.device(dev))[1].num_sms
    cfg = C.split(2, 256, 1)
    plans = (C.forward_plan_from(cfg, m, sms, "persistent", n), C.backward_plan_from(cfg, cfg, m, n, sms))
    assert plans[0].splits == plans[1].num_chunks == 4
    check_variant(dev, (m, n), dtype, None, "llama", has_weight, offset, gen, plans=plans, polls=1)
    if dev != "cpu":
        return
    x, _, w = make_inputs((m, n), dtype, dev, has_weight=has_weight, offset=offset, generator=gen)
    stream, _ = launch_target(x.device)
    slots = forward_workspace(plans[0], dev)
    y = nan_like((m, n), dtype, dev)
    launch_forward(plans[0], x, w, y, None, EPS, offset, casting_code("llama", dtype == torch.float32), stream, slots)
    rows = plans[0].tile_m * -(-m // plans[0].tile_m)
    assert torch.all(slots[:rows, :3] >= K.PUT_ASIDE) and torch.all(slots[:rows, 3] < K.PUT_ASIDE)
    assert torch.all(slots[:rows, :4] & K.SLOT_FLAG != 0)  # every partial was published all the same


@pytest.mark.parametrize("casting", CASTINGS)
@pytest.mark.parametrize("has_weight,offset", AFFINE, ids=["w", "w+1", "no-w"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("bcfg", [C.packed(2, 1024, 1, 8), C.packed(1, 1024, 2, tma_store=False, latency=1)],
                         ids=["2rows", "1row-no-tma-store"])  # fmt: skip
def test_packed_backward(dev, dtype, has_weight, offset, casting, bcfg, gen):
    """The backward on 16-bit words (two columns per int32), 1000-wide rows in 1024-wide
    tiles, 301 rows (the last row tile partial): dx and the interleaved dW."""
    m, n = 301, 1000
    sms = launch_target(torch.device(dev))[1].num_sms
    fcfg = C.tile(2, 1024, 1)
    plans = (C.forward_plan_from(fcfg, m, sms, "persistent", n), C.backward_plan_from(bcfg, bcfg, m, n, sms))
    assert plans[1].kernel == "packed"
    check_variant(dev, (m, n), dtype, None, casting, has_weight, offset, gen, plans=plans)


@pytest.mark.parametrize("casting", CASTINGS)
@pytest.mark.parametrize("has_weight,offset", AFFINE, ids=["w", "w+1", "no-w"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("tile_m", [1, 2])
def test_tail_tiles(dev, dtype, has_weight, offset, casting, tile_m, gen):
    """Rows of 1280 = a 1024-wide tile and a 256-wide tail, 301 rows (the last row tile partial):
    the forward's two tiles, and for 16-bit the packed backward's two word tiles (fp32: the
    one-tile backward), against the reference."""
    m, n = 301, 1280
    sms = launch_target(torch.device(dev))[1].num_sms
    fplan = C.forward_plan_from(C.tile(tile_m, 1024, 1, tail=256), m, sms, "persistent", n)
    if dtype == torch.float32:
        bcfg = C.tile(tile_m, 2048, 1)
    else:
        bcfg = C.packed(tile_m, 1024, 1, 8, tail=256, tma_store=tile_m == 1)
    bplan = C.backward_plan_from(bcfg, bcfg, m, n, sms)
    assert fplan.tail == 256 and bplan.tail == bcfg.tail
    check_variant(dev, (m, n), dtype, None, casting, has_weight, offset, gen, plans=(fplan, bplan))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_block_per_row_tile(dev, dtype, gen):
    """A forward launched with one block per row tile (schedule per_tile; 301 rows, 2-row tiles:
    151 blocks, the last tile partial), then the persistent backward."""
    m, n = 301, 1000
    sms = launch_target(torch.device(dev))[1].num_sms
    fplan = C.forward_plan_from(C.tile(2, 1024, 2, schedule="per_tile"), m, sms, "persistent", n)
    assert fplan.grid == 151
    bplan = C.backward_plan_from(C.tile(2, 1024, 1), C.tile(2, 1024, 1), m, n, sms)
    check_variant(dev, (m, n), dtype, None, "llama", True, 0.0, gen, plans=(fplan, bplan))


def test_tail_rule_plans_run(dev, gen):
    """Rows of p + p / 4 (5120) planned by the tail rule from the sm_90 buckets (config.fit_to_row:
    a 4096 tile and a 1024 tail), 16-bit and fp32, through the core run_forward with the torch
    front end's workspace allocator: training and inference forwards against the reference."""
    stream, dev_info = launch_target(torch.device(dev))
    info = dataclasses.replace(H200_INFO, num_sms=dev_info.num_sms)  # the H200 table, this target's SMs
    for n, dtype in ((5120, torch.bfloat16), (5120, torch.float32)):
        m = 4 * C.FEW_ROWS + 9  # past the few-row class
        x, _, w = make_inputs((m, n), dtype, dev, generator=gen)
        p = forward_plan(x, None, info)
        assert (p.kernel, p.tile_n, p.tail) == ("tile", 4096, 1024)
        check_run_forward(x, w, info, stream)


def check_run_forward(x, w, info, stream):
    """Training and inference forwards of x through run_forward (planned for info, with the torch
    front end's workspace allocator), NaN-poisoned, against the reference."""
    (m, n), dtype, dev = x.shape, x.dtype, x.device
    yr, rstd_r, _, _ = rms_norm_ref_grads(x, x, w, EPS, 0.0)
    y, y2, rstd = nan_like((m, n), dtype, dev), nan_like((m, n), dtype, dev), nan_like((m,), torch.float32, dev)
    code = casting_code("llama", dtype == torch.float32)
    run_forward(x, w, y, rstd, EPS, 0.0, code, None, info, stream, int64=int64_workspace(x))
    run_forward(x, w, y2, None, EPS, 0.0, code, None, info, stream, int64=int64_workspace(x))
    _sync(dev)
    tols = tolerances(dtype, dtype, "llama")
    check_all({"y": y, "rstd": rstd}, {"y": yr, "rstd": rstd_r}, tols)
    check_all({"y": y2}, {"y": yr}, tols)  # the inference kernel


H200_INFO = DeviceInfo(0, 132, (9, 0), "NVIDIA H200")  # plans from the shipped sm_90 table


def test_run_given_a_plan(dev, gen):
    """run_forward / run_backward run a plan they are given (probes: bench.probes.rows_candidates
    core_plan) instead of the planner's: a split config of 3 blocks a row, forward and backward,
    against the reference; a split plan without the int64 allocator is refused before a launch."""
    stream, info = launch_target(torch.device(dev))
    m, n = 7, 700
    x, dy, w = make_inputs((m, n), torch.bfloat16, dev, generator=gen)
    cfg = C.split(1, 256, 1, 4)
    fplan = C.forward_plan_from(cfg, m, info.num_sms, "persistent", n)
    bplan = C.backward_plan_from(cfg, cfg, m, n, info.num_sms)
    assert (fplan.kernel, fplan.splits, bplan.kernel, bplan.num_chunks) == ("split", 3, "split", 3)
    yr, rstd_r, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS, 0.0)
    y, rstd = nan_like((m, n), x.dtype, dev), nan_like((m,), torch.float32, dev)
    dx, dw = nan_like((m, n), x.dtype, dev), nan_like((n,), w.dtype, dev)
    code = casting_code("llama", False)
    with pytest.raises(ValueError, match="int64"):
        run_forward(x, w, y, rstd, EPS, 0.0, code, None, info, stream, plan=fplan)
    run_forward(x, w, y, rstd, EPS, 0.0, code, None, info, stream, int64=int64_workspace(x), plan=fplan)

    def empty_f32(shape):
        return torch.full(shape, float("nan"), dtype=torch.float32, device=x.device)

    run_backward(x, dy, w, rstd, dx, dw, 0.0, code, empty_f32, info, stream, int64=int64_workspace(x), plan=bplan)
    _sync(dev)
    tols = tolerances(x.dtype, w.dtype, "llama")
    check_all({"y": y, "rstd": rstd, "dx": dx, "dw": dw}, {"y": yr, "rstd": rstd_r, "dx": dxr, "dw": dwr}, tols)


def test_shipped_few_row_entries_run(dev, gen):
    """The shipped sm_90 few-row forward entries (tile configs, plain stores) through the core
    run_forward: training and inference forwards of decode-sized problems against the reference."""
    stream, dev_info = launch_target(torch.device(dev))
    info = dataclasses.replace(H200_INFO, num_sms=dev_info.num_sms)
    for m, n, dtype in ((1, 4096, torch.bfloat16), (3, 8192, torch.float16), (2, 4096, torch.float32)):
        x, _, w = make_inputs((m, n), dtype, dev, generator=gen)
        p = forward_plan(x, None, info)
        assert (p.kernel, p.tile_n, p.memory[0]) == ("tile", n, False)
        check_run_forward(x, w, info, stream)


@pytest.mark.parametrize("layout", ["contiguous", "odd-row-stride"])
def test_run_backward_packs_where_it_can(dev, layout, gen):
    """run_backward plans the shipped packed entry (16-bit, N = 8192) with word views, and the
    tile kernel where a view cannot be made (rows of a tensor with an odd row stride): both
    agree with the reference."""
    m, n = C.FEW_ROWS + 9, 8192  # more rows than the few-row entries take
    x, dy, w = make_inputs((m, n + (layout != "contiguous")), torch.bfloat16, dev, generator=gen)
    x, dy, w = x[:, :n], dy[:, :n], w[:n].contiguous()
    assert backward_plan(x, H200_INFO, C.Provides(words=True)).kernel == "packed"
    stream, dev_info = launch_target(x.device)
    info = dataclasses.replace(H200_INFO, num_sms=dev_info.num_sms)  # the H200 table, this target's SMs
    _, rstd, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS, 0.0)
    dx = nan_like((m, n), x.dtype, dev)
    dw = nan_like((n,), w.dtype, dev)
    seen = []

    def words(a):
        v = as_words(a)
        seen.append(v is not None)
        return v

    def empty_f32(shape):
        return torch.full(shape, float("nan"), dtype=torch.float32, device=x.device)

    code = casting_code("llama", False)
    run_backward(x, dy, w, rstd.float(), dx, dw, 0.0, code, empty_f32, info, stream, as_words=words)
    _sync(dev)
    assert all(seen) == (layout == "contiguous")
    check_all({"dx": dx, "dw": dw}, {"dx": dxr, "dw": dwr}, tolerances(x.dtype, w.dtype, "llama"))


def test_shipped_tail_entries_run(dev, gen):
    """The planning path of the shipped sm_90 tail entries (16-bit rows of exactly 5120 past the
    few-row class): run_forward and run_backward plan two tiles, forward and packed backward,
    and agree with the reference."""
    m, n = C.FEW_ROWS + 9, 5120
    x, dy, w = make_inputs((m, n), torch.float16, dev, generator=gen)
    stream, dev_info = launch_target(x.device)
    info = dataclasses.replace(H200_INFO, num_sms=dev_info.num_sms)  # the H200 table, this target's SMs
    assert forward_plan(x, None, info).tail == 1024 and backward_plan(x, info, C.Provides(words=True)).tail == 1024
    yr, rstd_r, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS, 0.0)
    y, rstd = nan_like((m, n), x.dtype, dev), nan_like((m,), torch.float32, dev)
    code = casting_code("llama", False)
    run_forward(x, w, y, rstd, EPS, 0.0, code, None, info, stream)
    dx, dw = nan_like((m, n), x.dtype, dev), nan_like((n,), w.dtype, dev)

    def empty_f32(shape):
        return torch.full(shape, float("nan"), dtype=torch.float32, device=x.device)

    run_backward(x, dy, w, rstd, dx, dw, 0.0, code, empty_f32, info, stream, as_words=as_words)
    _sync(dev)
    check_all({"y": y, "rstd": rstd, "dx": dx, "dw": dw}, {"y": yr, "rstd": rstd_r, "dx": dxr, "dw": dwr},
              tolerances(x.dtype, w.dtype, "llama"))  # fmt: skip


# ------------------------------------------------------------------------------------------
# Public torch API


@pytest.mark.parametrize("shape", [(2, 3, 1536), (5, 1, 7, 760), (4100,)], ids=str)
@pytest.mark.parametrize("casting", CASTINGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("has_weight,offset", AFFINE, ids=["w", "w+1", "no-w"])
def test_autograd_matches_reference(dev, has_weight, offset, dtype, casting, shape, gen):
    x, dy, w = make_inputs(shape, dtype, dev, has_weight=has_weight, offset=offset, generator=gen)
    xg = x.clone().requires_grad_()
    wg = None if w is None else w.clone().requires_grad_()
    y = rms_norm(xg, wg, EPS, offset=offset, casting_mode=casting)
    assert y.shape == x.shape and y.dtype == x.dtype
    y.backward(dy)
    yr, _, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS, offset)
    tols = tolerances(dtype, None if w is None else w.dtype, casting)
    check_all({"y": y, "dx": xg.grad, "dw": None if wg is None else wg.grad}, {"y": yr, "dx": dxr, "dw": dwr}, tols,
              {"dw": dw_term_scale(x, dy, EPS)})  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("n", [16384, 65536])
def test_in_place_backward_on_split_row_lengths(n, gen):
    """fp32 rows that the H200 table gives split backward kernels: dx written over dy (in
    place) plans no split kernel (whose put-aside blocks may read a partner's dy segment after
    the partner wrote dx there), and equals the out-of-place dx, within the reference."""
    x, dy, w = make_inputs((96, n), torch.float32, "cuda", generator=gen)
    y, rstd = rms_norm_forward(x, w, EPS)
    dx, dw = rms_norm_backward(x, dy, w, rstd)
    dy2 = dy.clone()
    dx2, dw2 = rms_norm_backward(x, dy2, w, rstd, in_place=True)
    assert dx2.data_ptr() == dy2.data_ptr()
    tols = tolerances(x.dtype, w.dtype, "llama")
    _, _, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS)
    check_all({"dx": dx2, "dw": dw2}, {"dx": dxr, "dw": dwr}, tols)
    check_all({"dx": dx, "dw": dw}, {"dx": dxr, "dw": dwr}, tols)


@pytest.mark.parametrize("n", [4096, 65536])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_standalone_backward_matches_autograd(dev, dtype, n, gen):
    x, dy, w = make_inputs((129, n), dtype, dev, generator=gen)
    y, rstd = rms_norm_forward(x, w, EPS)
    assert rstd.dtype == torch.float32 and rstd.shape == x.shape[:-1]
    dx, dw = rms_norm_backward(x, dy, w, rstd)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    rms_norm(xg, wg, EPS).backward(dy)
    # Same kernels, same inputs: the autograd path and the standalone pair agree bitwise.
    assert torch.equal(dx, xg.grad) and torch.equal(dw, wg.grad)
    yr, rr, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS)
    check_all({"y": y, "rstd": rstd, "dx": dx, "dw": dw}, {"y": yr, "rstd": rr, "dx": dxr, "dw": dwr},
              tolerances(dtype, dtype, "llama"))  # fmt: skip


def test_only_weight_requires_grad(dev, gen):
    x, dy, w = make_inputs((300, 1024), torch.bfloat16, dev, generator=gen)
    wg = w.clone().requires_grad_()
    rms_norm(x, wg).backward(dy)
    _, _, _, dwr = rms_norm_ref_grads(x, dy, w)
    check_all({"dw": wg.grad}, {"dw": dwr}, tolerances(x.dtype, w.dtype, "llama"))


@pytest.mark.parametrize("shape", [(4096, 4096), (64, 65536)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_backward_is_deterministic(dev, dtype, shape, gen):
    x, dy, w = make_inputs(shape, dtype, dev, generator=gen)
    _, rstd = rms_norm_forward(x, w)
    dx1, dw1 = rms_norm_backward(x, dy, w, rstd)
    dx2, dw2 = rms_norm_backward(x, dy, w, rstd)
    assert torch.equal(dx1, dx2) and torch.equal(dw1, dw2)


@pytest.mark.gpu
def test_inference_stores_no_rstd(gen):
    m, n = 8192, 1024
    x, _, w = make_inputs((m, n), torch.bfloat16, "cuda", generator=gen)
    torch.cuda.synchronize()
    wg = w.clone().requires_grad_()
    # Training path allocates y and rstd; inference (no grad) only y.
    for grad_enabled, expected_extra in ((False, 0), (True, m * 4)):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.set_grad_enabled(grad_enabled):
            y = rms_norm(x, wg)
        torch.cuda.synchronize()
        grew = torch.cuda.max_memory_allocated() - base
        assert grew == x.numel() * x.element_size() + expected_extra, (grad_enabled, grew)
        assert (y.grad_fn is not None) == grad_enabled
        del y
    _, rstd = rms_norm_forward(x, w, store_rstd=False)
    assert rstd is None


def test_empty_rows(dev):
    x = torch.empty((0, 4, 256), device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(256, device=dev, dtype=torch.bfloat16, requires_grad=True)
    y = rms_norm(x, w)
    assert y.shape == x.shape
    y.backward(torch.empty_like(y))
    assert x.grad.shape == x.shape and torch.equal(w.grad, torch.zeros_like(w))
    y2, rstd = rms_norm_forward(x, w)
    assert y2.shape == x.shape and rstd.shape == (0, 4)


def test_strided_rows_without_copy(dev, gen):
    base, dy, w = make_inputs((500, 2 * 1024), torch.float16, dev, generator=gen)
    x = base[:, :1024]  # row stride 2048, unit column stride
    y, rstd = rms_norm_forward(x, w[:1024].contiguous())
    yr, rr = rms_norm_ref_grads(x, dy[:, :1024], w[:1024])[:2]
    check_all({"y": y, "rstd": rstd}, {"y": yr, "rstd": rr}, tolerances(x.dtype, x.dtype, "llama"))


@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_module_matches_torch_nn(dev, offset, gen):
    n = 2048
    ours = RMSNorm(n, eps=1e-5, device=dev, dtype=torch.float32, offset=offset)
    ref = torch.nn.RMSNorm(n, eps=1e-5, device=dev, dtype=torch.float32)
    with torch.no_grad():
        w = 0.1 * torch.randn(n, generator=gen).to(dev)
        ours.weight.copy_(w + (1 - offset))
        ref.weight.copy_(w + 1)
    x = torch.randn(4, 33, n, generator=gen).to(dev)
    assert torch.allclose(ours(x), ref(x), rtol=1e-5, atol=1e-5)
    assert ours.state_dict().keys() == ref.state_dict().keys()


@pytest.mark.gpu
def test_validation_on_gpu():
    x = torch.randn(4, 64, device="cuda")
    with pytest.raises(TypeError, match="non-floating"):
        rms_norm(torch.ones(4, 64, device="cuda", dtype=torch.int32))
    with pytest.raises(ValueError, match="weight is on cpu"):
        rms_norm(x, torch.ones(64))
    with pytest.raises(ValueError, match="shape"):
        rms_norm(x, torch.ones(32, device="cuda"))
    _, rstd = rms_norm_forward(x)
    with pytest.raises(ValueError, match="dy must have"):
        rms_norm_backward(x, torch.randn(4, 32, device="cuda"), None, rstd)
    with pytest.raises(ValueError, match="rstd must have shape"):
        rms_norm_backward(x, torch.randn_like(x), None, rstd[:2])
    with pytest.raises(ValueError, match="rstd is on cpu"):
        rms_norm_backward(x, torch.randn_like(x), None, rstd.cpu())


# ------------------------------------------------------------------------------------------
# The interpreter against the GPU, kernel by kernel, on the same inputs


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape,mode",
    [((300, 760), "persistent"), ((37, 760), "gather"), ((9, 20000), "persistent"), ((5, 20000), "gather")],
    ids=["fwd_tile+bwd_tile", "fwd_chunked+bwd_tile", "fwd_chunked+bwd_chunked", "gather+bwd_chunked"],
)
@pytest.mark.parametrize("casting", CASTINGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_interpreter_matches_gpu(dtype, casting, shape, mode, gen):
    """Both plan for the GPU, so they run the same tiles, grids and dW partitions."""
    x, dy, w = make_inputs(shape, dtype, "cpu", offset=1.0, generator=gen)
    info = launch_target(x.cuda().device)[1]
    gpu = run_poisoned(x.cuda(), dy.cuda(), w.cuda(), mode=mode, casting=casting, offset=1.0, info=info)
    with interpret.interpreting():
        cpu = run_poisoned(x, dy, w, mode=mode, casting=casting, offset=1.0, info=info)
    # Each side is within tol of the exact result, so they are within 2 * tol of each other
    # (seen: one fp16 element one ulp apart, where the GPU's and NumPy's fp32 rsqrt differ in
    # the last bit and the final rounding falls on either side).
    tols = {k: Tol(2 * t.rtol) for k, t in tolerances(dtype, dtype, casting).items()}
    check_all(cpu, {k: v.cpu().double() for k, v in gpu.items()}, tols)
