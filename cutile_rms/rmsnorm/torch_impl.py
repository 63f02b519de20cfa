"""Torch layer under the public API: validation, allocation with torch's allocator, and the
launch on the tensors' device and current stream. No autograd here (functional.py), no custom
op registration (ops.py): both call :func:`forward` and :func:`backward`.

This is the eager hot path: every call on a small (decode-sized) tensor pays for what runs
here, so it avoids torch calls that cost host time without changing the result (measured on
the H200 host, see bench/NOTES.md: a ``torch.cuda.Stream`` object costs 3 us, the raw stream
handle 0.1 us; a ``view`` costs 2 us and is skipped when x is already 2-D).
"""

import torch

from cutile_rms import interpret
from cutile_rms._device import INTERPRET_DEVICE, device_info
from cutile_rms.rmsnorm.launch import (
    casting_code,
    check_arguments,
    check_casting,
    forward_casting,
    run_backward,
    run_forward,
)
from cutile_rms.rows import launch as RL
from cutile_rms.rows.plan import backward_by_default, few_rows, same_bits, short_view_rows

__all__ = [
    "SUPPORTED_DTYPES",
    "as_rows",
    "as_words",
    "backward",
    "check_device",
    "check_tensor",
    "check_x_weight",
    "forward",
    "int64_workspace",
    "launch_on_device",
    "launch_target",
    "rows_view",
    "unit_stride",
    "validate_x_weight",
]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_tensor(name: str, t) -> None:
    """Type and dtype. The device is checked last (check_device), so that every other
    mistake is reported the same way with or without a GPU."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        kind = "floating-point" if t.dtype.is_floating_point else "non-floating"
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {kind} dtype {t.dtype}")


def check_device(x: torch.Tensor, **others) -> None:
    """x on a CUDA device (a CPU tensor in interpret mode), every other tensor on x's device."""
    if x.is_cuda:
        if interpret.is_enabled():
            raise ValueError(f"interpret mode (CUTILE_RMS_INTERPRET) runs on CPU tensors; x is on {x.device}")
    elif not (x.is_cpu and interpret.is_enabled()):
        hint = (
            " (or run the kernels on the CPU through the cuTile interpreter: cutile_rms.interpret.enable(), or "
            "CUTILE_RMS_INTERPRET=1 set before cutile_rms is imported)"
            if x.is_cpu
            else ""
        )
        raise ValueError(f"x must be on a CUDA device, got {x.device}{hint}")
    dev = x.device
    for name, t in others.items():
        if t is not None and t.device != dev:
            raise ValueError(f"{name} is on {t.device} but x is on {dev}; put them on one device")


def check_x_weight(x, weight, eps, offset) -> None:
    """Checks x, weight, eps and offset as every torch front end needs them."""
    check_tensor("x", x)
    if weight is not None:
        check_tensor("weight", weight)
    check_arguments(x.shape, None if weight is None else weight.shape, eps, offset)


def validate_x_weight(x, weight, eps, offset, casting_mode) -> int:
    """Checks what rms_norm's arguments must satisfy; returns the kernel's casting code."""
    check_x_weight(x, weight, eps, offset)
    return casting_code(casting_mode, x.dtype == torch.float32)


# The current stream of a CUDA device as a raw handle (what ct.launch takes). torch's own
# compiler calls the same private function; the public spelling is the fallback.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream
)
_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def _target(index: int):
    """(stream, DeviceInfo) for device ordinal ``index``: its current stream; for -1 (a CPU
    tensor in interpret mode) no stream and the interpreter's pseudo-device."""
    if index < 0:
        return None, INTERPRET_DEVICE
    return _raw_stream(index), device_info(index)


def launch_target(device: torch.device):
    """(stream, DeviceInfo) for launching on ``device`` (see _target); a CUDA device without
    an index means the current one."""
    if device.type == "cpu":
        return _target(-1)
    return _target(_current_device() if device.index is None else device.index)


def launch_on_device(x: torch.Tensor, run, *args, **kwargs) -> None:
    """``run(*args, device_info, stream, **kwargs)`` on x's device and its current stream, with
    that device made current if it is not (ct.launch launches into the current context)."""
    index = x.get_device()  # -1 on the CPU (interpret mode)
    if index < 0 and not interpret.is_enabled():  # reached only by calling torch.ops.cutile_rms.* directly
        raise ValueError(f"cutile_rms kernels run on CUDA tensors (or CPU ones in interpret mode), got {x.device}")
    stream, info = _target(index)
    if index < 0 or index == _current_device():
        run(*args, info, stream, **kwargs)
    else:
        with torch.cuda.device(index):
            run(*args, info, stream, **kwargs)


def rows_view(t: torch.Tensor, n: int) -> torch.Tensor:
    """Detached (M, N) view of t with unit stride along N. Rows may be padded (a row stride
    larger than N, as in a slice of a wider tensor): that is passed as it is. Any other layout
    (last-dim stride != 1, leading dims that do not merge) is copied once."""
    if t.is_contiguous():  # the common case, and the cheapest test
        t2 = t if t.dim() == 2 else t.view(-1, n)
    else:
        t2 = t.reshape(-1, n)
        if t2.stride(1) != 1:
            t2 = t2.contiguous()
    return t2.detach() if t2.requires_grad else t2


def unit_stride(w):
    if w is None:
        return None
    if w.requires_grad:
        w = w.detach()
    return w if w.is_contiguous() else w.contiguous()


def as_rows(t: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """(m, n) view of a contiguous tensor (free when it is 2-D already)."""
    return t if t.dim() == 2 else t.view(m, n)


def int64_workspace(x):
    """The launchers' int64 workspace allocator on x's device (launch.py: the split kernels'
    zeroed slots); each call returns new memory, so no two launches
    share a workspace (the caching allocator reuses it only in stream order)."""

    def int64(shape, zeroed):
        return (torch.zeros if zeroed else torch.empty)(shape, dtype=torch.int64, device=x.device)

    return int64


def as_words(t: torch.Tensor):
    """int32 view of a 16-bit tensor with unit last stride (two elements per word), for the
    packed backward; None where an odd offset, row stride or row length allows no view."""
    if t.element_size() != 2 or t.storage_offset() % 2 or t.shape[-1] % 2 or any(s % 2 for s in t.stride()[:-1]):
        return None
    if t.data_ptr() % 4:  # a storage that itself starts at an odd element
        return None
    return t.view(torch.int32)


def row_groups(t: torch.Tensor) -> tuple[int, int] | None:
    """(A, B): t's leading dims as at most two groups of dims that each merge into one stride,
    outer first (a contiguous tensor is one group: (M, 1); a head view (tokens, heads, head_dim)
    of a fused QKV projection is two). None when that takes three groups or more, a leading
    stride is 0 (broadcast rows) or the last stride is not 1: such tensors are copied."""
    if t.dim() and t.stride(-1) != 1 and t.shape[-1] != 1:
        return None
    groups: list[list[int]] = []  # [size, stride]
    for size, stride in zip(t.shape[:-1], t.stride()[:-1], strict=True):
        if size == 1:
            continue
        if stride == 0:
            return None
        if groups and groups[-1][1] == size * stride:
            groups[-1] = [groups[-1][0] * size, stride]
        else:
            groups.append([size, stride])
    if len(groups) > 2:
        return None
    sizes = [g[0] for g in groups] + [1, 1]
    return sizes[0], sizes[1]


def rows3(t: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """Detached (a, b, N) view of t (its rows in their logical order), or a contiguous copy
    viewed so when t's layout allows no such view."""
    t = t.detach() if t.requires_grad else t
    try:
        return t.view(a, b, t.shape[-1])
    except RuntimeError:
        return t.contiguous().view(a, b, t.shape[-1])


def _device_of(x: torch.Tensor):
    """x's DeviceInfo (the interpreter's on the CPU)."""
    index = x.get_device()  # -1 on the CPU (interpret mode); the launch looks up the stream itself
    return INTERPRET_DEVICE if index < 0 else device_info(index)


def _rows_plan(op: str, x: torch.Tensor, *others: torch.Tensor, weight: torch.Tensor | None = None):
    """(plan or None, A, B, N) of the row-tile kernels for x (A x B == 0: no rows, no plan
    needed). A plan of None with rows: the rules leave them to the core kernels. Short rows of
    a view the core kernels would copy take the row tiles anyway (plan.short_view_rows); where x
    and the others (the backward's dy and rstd) are contiguous the flat rows kernels may run
    (plan.flat_fit); the forward's weight and x's alignment take part in plan.lone_tma
    (plan.same_bits)."""
    groups = row_groups(x)
    a, b = groups if groups else (x.numel() // max(1, x.shape[-1]), 1)
    n, es = x.shape[-1], x.element_size()
    if a * b == 0:
        return None, a, b, n
    info = _device_of(x)
    # the flat rows kernels read rows contiguous end to end as one flat array (plan.flat_fit)
    flat = all(t.is_contiguous() for t in (x, *others))
    bits = False  # (plan.lone_tma: fp32 forward rows only; not worked out for others, the eager path's cost)
    if op == "forward" and es == 4:
        w_es = None if weight is None else weight.element_size()
        strides = [s for s, d in zip(x.stride()[:-1], x.shape[:-1], strict=True) if d > 1]
        bits = same_bits(es, w_es, x.data_ptr(), strides)
    p = RL.plan(op, a, b, n, es, info.num_sms, flat=None if flat else False, core_bits=bits)
    if p is None and b > 1 and short_view_rows(n, es):
        p = RL.plan(op, a, b, n, es, info.num_sms, any_length=True, persistent=True)
    return p, a, b, n


def _rows_forward(x, weight, eps, offset, casting, store_rstd):
    """forward() on the row-tile kernels, or None when their rules (cutile_rms.rows.plan) leave
    x's rows to the core plan."""
    p, a, b, n = _rows_plan("forward", x, weight=weight)
    if p is None and a * b:
        return None
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    rstd = x.new_empty(x.shape[:-1], dtype=torch.float32) if store_rstd else None
    if a * b:
        casting = forward_casting(casting, x, weight, y, offset)
        args = (p, rows3(x, a, b), unit_stride(weight), y.view(a, b, n), None if rstd is None else rstd.view(a, b), eps,
                offset, casting)  # fmt: skip
        launch_on_device(
            x, RL.run_forward, *args, empty=lambda shape: weight.new_empty(shape), int64=int64_workspace(x)
        )
    return y, rstd


def _rows_backward(x, dy, weight, rstd, offset, casting, dx_out, default: bool, few: bool = False):
    """backward() on the row-tile kernels, or None when their rules leave x's rows to the core
    plan; with default (mode None) only for the rows the default backward gives them: those
    backward_by_default names, the short rows of a view (B > 1) that the core would copy, and
    few rows (few: the caller's plan.few_rows)."""
    p, a, b, n = _rows_plan("backward", x, dy, rstd)
    if p is None and a * b:
        return None
    if default and not (backward_by_default(n, x.element_size()) or b > 1 or few):
        return None
    dx = torch.empty_like(x, memory_format=torch.contiguous_format) if dx_out is None else dx_out
    dw = None if weight is None else torch.empty_like(weight, memory_format=torch.contiguous_format)
    if a * b == 0:
        if dw is not None:
            dw.zero_()  # the sum over no rows
        return dx, dw

    def empty_f32(shape):  # the dW partials
        return x.new_empty(shape, dtype=torch.float32)

    r = rstd.detach()
    r = r.view(a, b) if r.is_contiguous() else r.reshape(a, b)
    args = (p, rows3(x, a, b), rows3(dy, a, b), unit_stride(weight), r, dx.view(a, b, n), dw, offset, casting,
            empty_f32)  # fmt: skip
    launch_on_device(x, RL.run_backward, *args, empty=None if weight is None else weight.new_empty)
    return dx, dw


def forward(x, weight, eps, offset, casting, mode, store_rstd):
    """Allocates and computes ``(y, rstd)``; y is contiguous with x's shape and dtype, rstd is
    fp32 with shape x.shape[:-1], or None when ``store_rstd`` is False. mode None or "rows" runs
    the row-tile forward where its rules plan the row (cutile_rms.rows.plan), the core plan
    elsewhere; "persistent" and "gather" force a core kernel."""
    check_casting(casting)
    if mode is None or mode == "rows":
        done = _rows_forward(x, weight, eps, offset, casting, store_rstd)
        if done is not None:
            return done
        mode = None
    n = x.shape[-1]
    x2 = rows_view(x, n)
    m = x2.shape[0]
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    rstd = x.new_empty(x.shape[:-1], dtype=torch.float32) if store_rstd else None
    if m:
        r = None if rstd is None else (rstd if rstd.dim() == 1 else rstd.view(m))
        launch_on_device(x, run_forward, x2, unit_stride(weight), as_rows(y, m, n), r, eps, offset, casting, mode,
                         int64=int64_workspace(x))  # fmt: skip
    return y, rstd


def backward(x, dy, weight, rstd, offset, casting, dx_out=None, mode=None):
    """Allocates and computes ``(dx, dw)``; dx is contiguous with x's shape and dtype (written
    into ``dx_out``, a contiguous tensor of x's shape and dtype, when given), dw has weight's
    shape and dtype (None when weight is None). mode None runs the row-tile backward on the rows
    that ``backward_by_default`` names (short power-of-two rows, the aligned 16-bit rows of
    ``aligned_backward_tile`` and the others it lists; the short rows of a view the core kernels
    would copy: plan.short_view_rows, and few rows: plan.few_rows; in
    place too, so that dx and dw have the out-of-place bits: each row tile reads its dy before it
    writes dx there, as the core tile kernels do), "rows" wherever the row-tile rules plan the
    row, the core kernels elsewhere."""
    check_casting(casting)
    n, es = x.shape[-1], x.element_size()
    by_rule = mode is None and (backward_by_default(n, es) or short_view_rows(n, es))  # cheap tests first
    few = mode is None and not by_rule and few_rows(x.numel() // max(1, n), n, _device_of(x).num_sms)
    default = by_rule or few
    if mode == "rows" or default:
        done = _rows_backward(x, dy, weight, rstd, offset, casting, dx_out, default, few)
        if done is not None:
            return done
    n = x.shape[-1]
    x2 = rows_view(x, n)
    m = x2.shape[0]
    dx = torch.empty_like(x, memory_format=torch.contiguous_format) if dx_out is None else dx_out
    dw = None if weight is None else torch.empty_like(weight, memory_format=torch.contiguous_format)
    if m == 0:
        if dw is not None:
            dw.zero_()  # the sum over no rows
        return dx, dw

    def empty_f32(shape):  # the backward's fp32 workspaces
        return x2.new_empty(shape, dtype=torch.float32)

    r = rstd.detach().reshape(m)
    args = (x2, rows_view(dy, n), unit_stride(weight), r, as_rows(dx, m, n), dw, offset, casting)
    # dx written over dy (in place): no split kernels, whose blocks may read a partner's dy
    # segment after that partner has written its dx there (a row tile put aside, kernels/split.py).
    int64 = None if dx_out is not None else int64_workspace(x)
    launch_on_device(x, run_backward, *args, empty_f32, int64=int64, as_words=as_words)
    return dx, dw
