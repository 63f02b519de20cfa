"""RMSNorm in the PyTorch ecosystem: custom ops under torch.compile (fullgraph, dynamic
shapes), strided inputs and gradients, the in_place backward, CUDA graphs, several devices and
autocast.

Tests that take the ``dev`` fixture run twice: on the GPU (``gpu`` tier, compiled with
inductor) and on the CPU through the cuTile interpreter (compiled with the aot_eager backend,
which traces exactly as inductor does up to code generation).
"""

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from cutile_rms import RMSNorm, rms_norm, rms_norm_backward, rms_norm_forward
from cutile_rms.rmsnorm import torch_impl
from tests.reference import check_all, make_inputs, rms_norm_ref, rms_norm_ref_grads, tolerances

OPS = torch.ops.cutile_rms


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _backend(dev):
    return "inductor" if dev == "cuda" else "aot_eager"


def _sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------------------
# Custom ops and torch.compile


@pytest.mark.parametrize("mode", [None, "rows"])
@pytest.mark.parametrize("has_weight", [True, False], ids=["w", "no-w"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_opcheck(dev, dtype, has_weight, mode, gen):
    """torch.library.opcheck: schema, fake (meta) implementations against the real ones,
    autograd registration, and AOT dispatch with dynamic shapes; both kernel families."""
    x, dy, w = make_inputs((3, 5, 96), dtype, dev, has_weight=has_weight, generator=gen)
    fwd_args = (x, w, 1e-6, 0.0, 0, mode)
    torch.library.opcheck(OPS.rms_norm_fwd.default, fwd_args)
    torch.library.opcheck(OPS.rms_norm_infer.default, fwd_args)
    xg = x.clone().requires_grad_()
    wg = None if w is None else w.clone().requires_grad_()
    torch.library.opcheck(OPS.rms_norm_fwd.default, (xg, wg, 1e-6, 0.0, 0, mode))
    _, rstd = OPS.rms_norm_fwd(*fwd_args)
    torch.library.opcheck(OPS.rms_norm_bwd.default, (x, dy, w, rstd, 0.0, 0, mode))


def test_ops_refuse_cpu_tensors_outside_interpret_mode():
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="CUDA tensors"):
        OPS.rms_norm_infer(x, None, 1e-6, 0.0, 0, None)


def _graph_ops(gm):
    """Names of the ops a traced graph calls, without the overload suffix."""
    return {str(node.target).removesuffix(".default") for node in gm.graph.nodes if node.op == "call_function"}


@pytest.mark.parametrize("offset,casting", [(0.0, "llama"), (1.0, "gemma")])
def test_compile_fullgraph_matches_eager(dev, offset, casting, gen):
    """rms_norm under torch.compile(fullgraph=True) traces to our custom ops and gives results
    bitwise equal to eager (the same kernels run)."""
    x, dy, w = make_inputs((4, 37, 768), torch.bfloat16, dev, offset=offset, generator=gen)
    seen = []

    def capture(gm, example_inputs):
        seen.append(_graph_ops(gm))
        return gm

    def f(x, w):
        return rms_norm(x, w, offset=offset, casting_mode=casting)

    compiled = torch.compile(f, backend=capture, fullgraph=True)
    results = []
    for fn in (f, compiled, torch.compile(f, backend=_backend(dev), fullgraph=True)):
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = fn(xg, wg)
        y.backward(dy)
        results.append((y.detach(), xg.grad, wg.grad))
    _sync(dev)
    assert any("cutile_rms.rms_norm_fwd" in ops for ops in seen), seen
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert torch.equal(a, b)
    # ... and those results are right.
    ry, _, rdx, rdw = rms_norm_ref_grads(x, dy, w, 1e-6, offset)
    tols = tolerances(x.dtype, w.dtype, casting)
    check_all({"y": results[0][0], "dx": results[0][1], "dw": results[0][2]}, {"y": ry, "dx": rdx, "dw": rdw}, tols)


def test_compile_inference_uses_the_no_rstd_op(dev, gen):
    x, _, w = make_inputs((8, 256), torch.float16, dev, generator=gen)
    seen = []

    def capture(gm, example_inputs):
        seen.append(_graph_ops(gm))
        return gm

    with torch.no_grad():
        y = torch.compile(lambda x: rms_norm(x, w), backend=capture, fullgraph=True)(x)
    assert len(seen) == 1 and {op for op in seen[0] if "cutile_rms" in op} == {"cutile_rms.rms_norm_infer"}
    assert torch.equal(y, rms_norm(x, w))


def test_compile_dynamic_shapes_do_not_recompile_per_shape(dev, gen):
    """A module compiled once: the second batch/sequence shape makes torch mark those dims
    dynamic (one recompile); later shapes reuse that graph. (Sizes 0 and 1 are specialized by
    torch itself, so the shapes here start at 2.) A compile that dynamo restarts counts twice
    in the counter; the test compares counts instead of assuming one per compile."""
    n = 512
    module = RMSNorm(n, device=dev, dtype=torch.bfloat16)
    counter = CompileCounterWithBackend(_backend(dev))
    step = torch.compile(lambda t: module(t), backend=counter, fullgraph=True)
    counts = []
    for batch, seq in [(2, 7), (3, 11), (5, 2), (4, 33), (6, 19)]:
        x, dy, _ = make_inputs((batch, seq, n), torch.bfloat16, dev, generator=gen)
        xg = x.clone().requires_grad_()
        y = step(xg)
        y.backward(dy)
        counts.append(counter.frame_count)
        ry, _, rdx, _ = rms_norm_ref_grads(x, dy, module.weight.detach())
        check_all({"y": y, "dx": xg.grad}, {"y": ry, "dx": rdx}, tolerances(x.dtype, x.dtype, "llama"))
    assert counts[1] == counts[2] == counts[3] == counts[4], counts


def test_compile_dynamic_true_compiles_once(dev, gen):
    counter = CompileCounterWithBackend(_backend(dev))
    f = torch.compile(lambda x, w: rms_norm(x, w), backend=counter, fullgraph=True, dynamic=True)
    counts = []
    for m in (3, 17, 64):
        x, _, w = make_inputs((m, 320), torch.float32, dev, generator=gen)
        assert torch.equal(f(x, w), rms_norm(x, w))
        counts.append(counter.frame_count)
    assert counts[0] == counts[1] == counts[2], counts


def test_double_backward_refused(dev, gen):
    x, dy, w = make_inputs((4, 64), torch.float32, dev, generator=gen)
    x.requires_grad_()
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(rms_norm(x, w), x, dy, create_graph=True)


# ------------------------------------------------------------------------------------------
# Strided inputs and gradients


def test_padded_rows_are_read_in_place(dev, gen):
    """Rows with unit column stride and a padded row stride need no copy (2-D and 3-D)."""
    wide, _, _ = make_inputs((6, 10, 640), torch.bfloat16, dev, generator=gen)
    for x in (wide[0, :, :512], wide[:, :, :512]):
        x2 = torch_impl.rows_view(x, 512)
        assert x2.data_ptr() == x.data_ptr() and x2.stride() == (640, 1)


@pytest.mark.parametrize("layout", ["padded_rows_2d", "padded_rows_3d", "transposed", "column_step", "expanded_batch"])
def test_strided_inputs(dev, layout, gen):
    """Every layout gives the reference result; y and dx come back contiguous."""
    n = 384
    base, _, w = make_inputs((8, 12, 2 * n), torch.float16, dev, generator=gen)
    x = {
        "padded_rows_2d": base[0, :, :n],
        "padded_rows_3d": base[:, :, :n],
        "transposed": base[0, :, :12].t(),  # (12, 12): unit stride along rows, not columns
        "column_step": base[:, :, ::2],  # last-dim stride 2: copied once
        "expanded_batch": base[:1, :5, :n].expand(3, 5, n),  # stride 0 along the batch
    }[layout]
    snapshot = base.clone()
    wn = w[: x.shape[-1]].contiguous()
    dy = torch.randn(x.shape, generator=gen).to(device=dev, dtype=x.dtype)
    xg = x.detach().requires_grad_()
    y = rms_norm(xg, wn)
    y.backward(dy)
    ry, _, rdx, _ = rms_norm_ref_grads(x, dy, wn)
    check_all({"y": y, "dx": xg.grad}, {"y": ry, "dx": rdx}, tolerances(x.dtype, x.dtype, "llama"))
    assert y.is_contiguous() and xg.grad.is_contiguous()
    assert torch.equal(base, snapshot)  # the input's storage is untouched


@pytest.mark.parametrize("grad_layout", ["expanded", "transposed", "sliced"])
def test_non_contiguous_gradients(dev, grad_layout, gen):
    x, dy, w = make_inputs((64, 64), torch.bfloat16, dev, generator=gen)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = rms_norm(xg, wg)
    if grad_layout == "expanded":
        y.sum().backward()  # dy = ones, expanded from a scalar (all strides 0)
        dy = torch.ones_like(x)
    elif grad_layout == "transposed":
        y.backward(dy.t().contiguous().t())
    else:
        wide = torch.randn(64, 128, generator=gen).to(device=dev, dtype=x.dtype)
        dy = wide[:, ::2]
        y.backward(dy)
    _, _, rdx, rdw = rms_norm_ref_grads(x, dy, w)
    check_all({"dx": xg.grad, "dw": wg.grad}, {"dx": rdx, "dw": rdw}, tolerances(x.dtype, w.dtype, "llama"))


# ------------------------------------------------------------------------------------------
# in_place backward


class _GradientFrom(torch.autograd.Function):
    """Identity whose backward hands the given buffer on as y's gradient, holding no reference
    to it afterwards: the test knows dy's address without keeping dy alive."""

    @staticmethod
    def forward(ctx, y, buf):
        ctx.buf = buf
        return y.clone()

    @staticmethod
    def backward(ctx, _grad):
        buf, ctx.buf = ctx.buf, None
        return buf, None


@pytest.mark.parametrize("shape", [(33, 1000), (5, 20000), (33, 4, 128)], ids=["tile-bwd", "chunked-bwd", "rows-bwd"])
def test_in_place_backward_writes_dx_into_dy(dev, shape, gen):
    """dx lands in the incoming gradient's memory and equals the out-of-place dx bitwise."""
    x, dy, w = make_inputs(shape, torch.bfloat16, dev, generator=gen)
    grads = {}
    for in_place in (False, True):
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        buf = dy.clone()
        dy_address = buf.data_ptr()
        out = _GradientFrom.apply(rms_norm(xg, wg, in_place=in_place), buf)
        del buf
        out.sum().backward()
        grads[in_place] = (xg.grad, wg.grad, dy_address)
    assert grads[True][0].data_ptr() == grads[True][2]  # dx is dy's memory
    assert grads[False][0].data_ptr() != grads[False][2]
    assert torch.equal(grads[True][0], grads[False][0]) and torch.equal(grads[True][1], grads[False][1])
    _, _, rdx, rdw = rms_norm_ref_grads(x, dy, w)
    tols = tolerances(x.dtype, w.dtype, "llama")
    check_all({"dx": grads[True][0], "dw": grads[True][1]}, {"dx": rdx, "dw": rdw}, tols)


def _residual(x, w):
    h = x * 2.0
    return (rms_norm(h, w, in_place=True) + h).pow(2).sum()


def _kept_by_hook(x, w):
    y = rms_norm(x, w, in_place=True)
    kept = []
    y.register_hook(kept.append)
    return (y * 3.0).sum()


@pytest.mark.parametrize(
    "make_loss,why",
    [
        (lambda x, w: rms_norm(x, w, in_place=True).sum(), "view"),  # dy is expanded from a scalar
        (lambda x, w: torch.cat([rms_norm(x, w, in_place=True), x]).pow(2).sum(), "view"),  # dy is a slice
        (_residual, "another part of the autograd graph"),  # the add passes one gradient to both branches
        (_kept_by_hook, "referenced from Python"),
    ],
    ids=["sum", "cat", "residual", "hook"],
)
def test_in_place_refuses_when_dy_is_needed_elsewhere(dev, make_loss, why, gen):
    x, _, w = make_inputs((16, 256), torch.float32, dev, generator=gen)
    with pytest.raises(RuntimeError, match=why):
        make_loss(x.clone().requires_grad_(), w).backward()


def test_in_place_standalone_backward(dev, gen):
    x, dy, w = make_inputs((40, 3000), torch.float16, dev, generator=gen)
    _, rstd = rms_norm_forward(x, w)
    dx_ref, dw_ref = rms_norm_backward(x, dy, w, rstd)
    buf = dy.clone()
    dx, dw = rms_norm_backward(x, buf, w, rstd, in_place=True)
    assert dx.data_ptr() == buf.data_ptr()
    assert torch.equal(dx, dx_ref) and torch.equal(dw, dw_ref)
    with pytest.raises(ValueError, match="contiguous"):
        rms_norm_backward(x, dy.t().contiguous().t(), w, rstd, in_place=True)


# ------------------------------------------------------------------------------------------
# GPU only: CUDA graphs, devices and streams, autocast


def _warm_up(fn, *args):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1024, 20000], ids=["tile", "chunked"])
def test_cuda_graph_forward_backward(n, gen):
    """Capture forward + backward (autograd) in one graph; replays on new data match eager.
    Capture runs in the default 'global' error mode, which fails on any host synchronization
    or allocation outside torch's graph pool."""
    x0, dy0, w0 = make_inputs((64, n), torch.bfloat16, "cuda", generator=gen)
    x = x0.clone().requires_grad_()
    w = torch.nn.Parameter(w0.clone())
    dy = dy0.clone()

    def step():
        x.grad = None
        w.grad = None
        y = rms_norm(x, w)
        y.backward(dy)
        return y

    _warm_up(step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_static = step()
    for _ in range(3):
        xn, dyn, _ = make_inputs((64, n), torch.bfloat16, "cuda", generator=gen)
        with torch.no_grad():
            x.copy_(xn)
            dy.copy_(dyn)
        graph.replay()
        torch.cuda.synchronize()
        xe = xn.clone().requires_grad_()
        we = w0.clone().requires_grad_()
        ye = rms_norm(xe, we)
        ye.backward(dyn)
        assert torch.equal(y_static, ye) and torch.equal(x.grad, xe.grad) and torch.equal(w.grad, we.grad)


@pytest.mark.gpu
def test_cuda_graph_inference_and_standalone_backward(gen):
    x, dy, w = make_inputs((300, 4096), torch.float16, "cuda", generator=gen)
    _, rstd = rms_norm_forward(x, w)

    def work():
        y = rms_norm(x, w)
        dx, dw = rms_norm_backward(x, dy, w, rstd)
        return y, dx, dw

    _warm_up(work)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = work()
    x.copy_(torch.randn(x.shape, generator=gen).to("cuda", x.dtype))
    _, rstd_new = rms_norm_forward(x, w)
    rstd.copy_(rstd_new)
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(static, work(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_compile_reduce_overhead_matches_eager(gen):
    """torch.compile(mode="reduce-overhead") runs the step through CUDA graphs (cudagraph trees)."""
    n = 2048
    model = torch.nn.Sequential(
        torch.nn.Linear(n, n, bias=False), RMSNorm(n), torch.nn.Linear(n, n, bias=False), RMSNorm(n, offset=1.0)
    ).to("cuda", torch.bfloat16)
    ref = torch.nn.Sequential(*[m for m in model])  # same parameters, eager

    def loss_fn(m, x):
        return m(x).float().pow(2).mean()

    compiled = torch.compile(lambda x: loss_fn(model, x), mode="reduce-overhead", fullgraph=True)
    for _ in range(4):
        x = torch.randn(8, 16, n, generator=gen).to("cuda", torch.bfloat16)
        model.zero_grad(set_to_none=True)
        torch.compiler.cudagraph_mark_step_begin()
        loss = compiled(x)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        loss_ref = loss_fn(ref, x)
        loss_ref.backward()
        torch.testing.assert_close(loss, loss_ref, rtol=2e-2, atol=1e-3)  # inductor reorders fp32 math
        for g, p in zip(grads, ref.parameters(), strict=True):
            torch.testing.assert_close(g, p.grad, rtol=2e-2, atol=1e-3)


@pytest.mark.gpu
def test_runs_on_the_current_stream(gen):
    """The launch goes to the current stream: work queued before it on a side stream (a sleep,
    then the write of x) is seen by the kernel."""
    x_new, _, w = make_inputs((512, 4096), torch.bfloat16, "cuda", generator=gen)
    x = torch.full_like(x_new, float("nan"))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # ~10 ms: anything not ordered after it runs first
        x.copy_(x_new)
        y = rms_norm(x, w)
    side.synchronize()
    check_all({"y": y}, {"y": rms_norm_ref(x_new, w)[0]}, tolerances(x.dtype, w.dtype, "llama"))


def _two_gpus():
    return pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA devices"
    )


@pytest.mark.gpu
@_two_gpus()
def test_second_device_and_its_current_stream(gen):
    """Tensors on cuda:1 run on cuda:1, on cuda:1's current stream, while cuda:0 is current."""
    x_new, dy, w = make_inputs((256, 2048), torch.bfloat16, "cuda:1", generator=gen)
    x = torch.full_like(x_new, float("nan"))
    side = torch.cuda.Stream(device="cuda:1")
    side.wait_stream(torch.cuda.current_stream("cuda:1"))
    with torch.cuda.stream(side):  # `side` becomes cuda:1's current stream (streams are per device)
        torch.cuda._sleep(20_000_000)  # ~10 ms: anything not ordered after it runs first
        x.copy_(x_new)
        with torch.cuda.device(0):  # cuda:0 current; cuda:1's current stream is still `side`
            xg, wg = x.requires_grad_(), w.clone().requires_grad_()
            y = rms_norm(xg, wg)
            y.backward(dy)
            assert torch.cuda.current_device() == 0
    side.synchronize()
    assert y.device == xg.grad.device == wg.grad.device == torch.device("cuda:1")
    ry, _, rdx, rdw = rms_norm_ref_grads(x_new, dy, w)
    check_all(
        {"y": y, "dx": xg.grad, "dw": wg.grad}, {"y": ry, "dx": rdx, "dw": rdw}, tolerances(x.dtype, w.dtype, "llama")
    )


@pytest.mark.gpu
@_two_gpus()
def test_tensors_on_two_devices_are_refused():
    x = torch.randn(4, 64, device="cuda:0")
    with pytest.raises(ValueError, match="weight is on cuda:1 but x is on cuda:0"):
        rms_norm(x, torch.ones(64, device="cuda:1"))
    _, rstd = rms_norm_forward(x)
    with pytest.raises(ValueError, match="dy is on cuda:1"):
        rms_norm_backward(x, torch.randn(4, 64, device="cuda:1"), None, rstd)


@pytest.mark.gpu
@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_autocast_matches_torch_rmsnorm(x_dtype, gen):
    """Under autocast(bf16) with fp32 weights, our module returns the dtype torch.nn.RMSNorm
    returns (rms_norm has no autocast rule in torch: inputs keep their dtype), with the
    precision of that dtype; also fed from an autocast matmul (bf16 activations)."""
    n = 1024
    ours = RMSNorm(n, eps=1e-6, device="cuda")
    theirs = torch.nn.RMSNorm(n, eps=1e-6, device="cuda")
    with torch.no_grad():
        w = 1.0 + 0.1 * torch.randn(n, generator=gen).cuda()
        ours.weight.copy_(w)
        theirs.weight.copy_(w)
    lin = torch.nn.Linear(n, n, device="cuda")
    x = torch.randn(6, 50, n, generator=gen).to("cuda", x_dtype)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for inp in (x, lin(x)):
            y, y_torch = ours(inp), theirs(inp)
            assert y.dtype == y_torch.dtype == inp.dtype
            ref = rms_norm_ref(inp.float(), w)[0]
            tol = tolerances(inp.dtype, torch.float32, "llama")
            check_all({"y": y}, {"y": ref}, tol)
            check_all({"y": y_torch}, {"y": ref}, tol)  # torch itself meets the same bound
    # Gradients flow in autocast too.
    xg = x.clone().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ours(xg).float().sum().backward()
    assert xg.grad.dtype == x_dtype and ours.weight.grad.dtype == torch.float32
