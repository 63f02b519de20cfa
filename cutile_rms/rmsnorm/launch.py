"""Framework-free launchers for the RMSNorm kernels.

They take DLPack-capable arrays (torch tensors, CuPy arrays, ...) that the caller has already
validated and allocated, plus a stream that ``ct.launch`` accepts, and enqueue the kernels of a
plan from :mod:`cutile_rms.rmsnorm.config`. Nothing here allocates or synchronizes.

Absent optional arrays (no weight, no rstd to store, no dW workspace) are replaced by ``x`` as
a placeholder: the kernels' compile-time flags remove every access to them.

Workspaces come from the caller: ``empty_f32(shape)`` (fp32, contents ignored) for the
backward's dW partials and row dots, ``int64(shape, zeroed)`` (int64, new for every launch;
zero-filled when ``zeroed``) for the split kernels' slots. The packed backward takes int32
views of 16-bit arrays, made by the caller's ``as_words(array)`` (None where the layout allows
no such view).
"""

import threading

from cutile_rms import interpret
from cutile_rms._launch import launch, with_hints
from cutile_rms.rmsnorm import kernels as K
from cutile_rms.rmsnorm.config import (
    OCCUPANCIES,
    REDUCE_TILE_G,
    REDUCE_TILE_N,
    WARPS,
    BackwardPlan,
    ForwardPlan,
    plan_backward,
    plan_forward,
)

__all__ = [
    "CASTING_MODES",
    "casting_code",
    "check_arguments",
    "launch_backward",
    "launch_forward",
    "run_backward",
    "run_forward",
]

CASTING_MODES = {"llama": K.CAST_LLAMA, "gemma": K.CAST_GEMMA, "none": K.CAST_NONE}


class HintVariants:
    """One kernel's objects by compiler hints: ``variants[occupancy, warps]``. Each object is
    made on first use and kept (each replace_hints() object has its own JIT cache); the keys
    are bounded by config.OCCUPANCIES x config.WARPS."""

    def __init__(self, kernel):
        self.kernel = kernel
        self._made = {}
        self._lock = threading.Lock()

    def __getitem__(self, hints: tuple):
        k = self._made.get(hints)
        if k is None:
            occupancy, warps = hints
            if occupancy not in OCCUPANCIES or warps not in WARPS:
                raise KeyError(f"hints {hints} outside occupancy {OCCUPANCIES} x warps {WARPS}")
            with self._lock:
                k = self._made.get(hints)
                if k is None:
                    k = self._made[hints] = with_hints(self.kernel, occupancy=occupancy, num_worker_warps=warps)
        return k


# (kind, store rstd) -> variants
_FORWARD = {
    ("tile", True): HintVariants(K.rms_fwd_tile),
    ("tile", False): HintVariants(K.rms_fwd_tile_infer),
    ("chunked", True): HintVariants(K.rms_fwd_chunked),
    ("chunked", False): HintVariants(K.rms_fwd_chunked_infer),
    ("split", True): HintVariants(K.rms_fwd_split),
    ("split", False): HintVariants(K.rms_fwd_split_infer),
}
_BACKWARD = {
    "tile": HintVariants(K.rms_bwd_tile),
    "chunked": HintVariants(K.rms_bwd_chunked),
    "row_dot": HintVariants(K.rms_bwd_row_dot),
    "split": HintVariants(K.rms_bwd_split),
    "packed": HintVariants(K.rms_bwd_packed),
}


def half_code(dtype) -> int:
    """The packed kernels' HALF constant of a 16-bit dtype (torch, NumPy or CuPy: named
    ...bfloat16 or ...float16)."""
    return K.HALF_BF16 if str(dtype).endswith("bfloat16") else K.HALF_FP16


def casting_code(casting_mode: str, is_fp32_input: bool) -> int:
    """Kernel constant for a casting mode. With fp32 input all three modes compute the same
    thing, so they share the gemma (all-fp32) specialization."""
    try:
        code = CASTING_MODES[casting_mode]
    except KeyError:
        raise ValueError(f"casting_mode must be one of {tuple(CASTING_MODES)}, got {casting_mode!r}") from None
    return K.CAST_GEMMA if is_fp32_input else code


_INT32_MAX = 2**31 - 1


def check_arguments(x_shape, weight_shape, eps, offset) -> None:
    """The checks every front end (torch, CuPy) shares: x's shape, weight's shape (None: no
    weight), eps and offset. ValueError on the first violation."""
    if len(x_shape) == 0:
        raise ValueError("x must have at least one dimension (the normalized one)")
    n = x_shape[-1]
    if n == 0:
        raise ValueError("x has an empty last dimension: the RMS of zero elements is undefined")
    if n > _INT32_MAX:
        raise ValueError(f"the last dimension of x ({n}) exceeds 2**31 - 1")
    if weight_shape is not None:
        if tuple(weight_shape) != (n,):
            raise ValueError(f"weight must have shape ({n},) to match x's last dimension, got {tuple(weight_shape)}")
    elif offset != 0.0:
        raise ValueError("offset applies to the weight; it has no meaning with weight=None")
    if not isinstance(eps, (int, float)) or not eps >= 0.0:  # noqa: UP038 (a tuple is faster here)
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")


def forward_kernel(kind: str, hints: tuple, store_rstd: bool = True):
    """The forward kernel object of a kind ("tile", "chunked" or "split") and hints
    (occupancy, warps), with or without the rstd store."""
    return _FORWARD[kind, store_rstd][hints]


def backward_kernel(kind: str, hints: tuple):
    """The backward kernel object of a kind ("tile", "chunked", "row_dot" or "split") and
    hints."""
    return _BACKWARD[kind][hints]


def _split_consts(splits: int, slots_shape: tuple, polls: int | None) -> tuple:
    """The split kernels' SPLIT, SLOTS_W and POLLS constants. POLLS (how many times a block
    polls for its partners before it puts a row tile aside, kernels.SPIN_LIMIT): polls, else
    SPIN_LIMIT, or 1 in the CPU interpreter, where no partner publishes while a block polls."""
    if polls is None:
        polls = 1 if interpret.is_enabled() else K.SPIN_LIMIT
    if not 1 <= polls <= K.SPIN_LIMIT:
        raise ValueError(f"polls must be in [1, {K.SPIN_LIMIT}], got {polls}")
    return (splits, slots_shape[1], polls)


def launch_forward(plan: ForwardPlan, x, weight, y, rstd, eps: float, offset: float, casting: int, stream, slots=None,
                   polls: int | None = None):  # fmt: skip
    """y = rms_norm(x) * (offset + weight); rstd (m,) fp32 is stored unless it is None.

    x, y: (m, n) arrays with unit stride along n; weight: (n,) or None; slots: for a split
    plan, a zero-filled int64 array of shape plan.slots (ignored otherwise); polls: the split
    kernels' poll bound (_split_consts; tests lower it to make blocks put row tiles aside).
    """
    args = forward_args(plan, x, weight, y, rstd, eps, offset, casting, slots, polls)
    launch(stream, (plan.grid,), forward_kernel(plan.kernel, plan.hints, rstd is not None), args)


def forward_args(plan: ForwardPlan, x, weight, y, rstd, eps: float, offset: float, casting: int, slots=None,
                 polls: int | None = None) -> tuple:  # fmt: skip
    """The arguments of plan's forward kernel (launch_forward; the tuner times them too)."""
    has_weight = weight is not None
    w = weight if has_weight else x
    tiles = (plan.tile_m, plan.tile_n)
    if plan.kernel == "split":
        tiles += _split_consts(plan.splits, plan.slots, polls)
    elif plan.kernel == "tile":
        tiles += (plan.tail,)
    consts = (*tiles, casting, has_weight, *plan.memory)
    extra = (slots,) if plan.kernel == "split" else ()
    if rstd is None:
        return (x, w, y, *extra, float(eps), float(offset), *consts)
    return (x, w, y, rstd, *extra, float(eps), float(offset), *consts)


def launch_backward(
    plan: BackwardPlan,
    x,
    dy,
    weight,
    rstd,
    dx,
    dw,
    dw_partial,
    row_dot,
    offset: float,
    casting: int,
    stream,
    slots=None,
    half=K.HALF_BF16,
    polls: int | None = None,
):
    """dx (and dw unless weight is None) of y = rms_norm(x) * (offset + weight).

    Workspaces (allocated by the caller): dw_partial (fp32, contents ignored) of shape
    plan.partial_shape(n) when there is a weight, row_dot (fp32) of shape (m,) when
    plan.needs_row_dot, slots (int64, zero-filled) of shape plan.slots for a split plan
    (polls: see launch_forward).
    dw has weight's shape and dtype. For a packed plan x, dy, weight, dx and dw are int32 word
    views (n / 2 words per row) and half names their 16-bit type (half_code).
    """
    has_weight = weight is not None
    w = weight if has_weight else x
    partial = dw_partial if has_weight else x
    round_xhat = has_weight and casting != K.CAST_GEMMA
    packed = plan.kernel == "packed"
    if plan.kernel in ("tile", "packed"):  # packed: widths in words, then the tail and the 16-bit type
        tiles = (plan.tile_m, plan.tile_n // 2, plan.tail // 2, half) if packed else (plan.tile_m, plan.tile_n)
        args = (x, dy, w, rstd, dx, partial, float(offset), *tiles, has_weight, round_xhat, *plan.memory)
        launch(stream, (plan.partial_rows,), _BACKWARD[plan.kernel][plan.hints], args)
    elif plan.kernel == "split":
        args = (x, dy, w, rstd, dx, partial, slots, float(offset), plan.tile_m, plan.tile_n,
                *_split_consts(plan.num_chunks, plan.slots, polls), has_weight, round_xhat, *plan.memory)  # fmt: skip
        launch(stream, (plan.partial_rows * plan.num_chunks,), _BACKWARD["split"][plan.hints], args)
    else:
        dot_args = (x, dy, w, rstd, row_dot, float(offset), plan.dot_tile_m, plan.dot_tile_n, has_weight)
        launch(stream, (plan.dot_grid,), _BACKWARD["row_dot"][plan.dot_hints], dot_args)
        args = (x, dy, w, rstd, row_dot, dx, partial, float(offset), plan.tile_m, plan.tile_n, has_weight, round_xhat,
                *plan.memory)  # fmt: skip
        launch(stream, (plan.partial_rows, plan.num_chunks), _BACKWARD["chunked"][plan.hints], args)
    if has_weight and packed:
        launch(
            stream, (plan.reduce_grid,), K.dw_reduce_packed, (dw_partial, dw, REDUCE_TILE_G, REDUCE_TILE_N // 2, half)
        )
    elif has_weight:
        launch(stream, (plan.reduce_grid,), K.dw_reduce, (dw_partial, dw, REDUCE_TILE_G, REDUCE_TILE_N))


def forward_plan(x, mode, device, allow_split: bool = True) -> ForwardPlan:
    """The forward plan for an (m, n) array x on a device (a _device.DeviceInfo)."""
    m, n = x.shape
    key = device.key
    return plan_forward(m, n, device.num_sms, mode, elem_size=x.dtype.itemsize, device_key=key, allow_split=allow_split)


def backward_plan(x, device, allow_split: bool = True, allow_packed: bool = False) -> BackwardPlan:
    m, n = x.shape
    key = device.key
    return plan_backward(m, n, device.num_sms, elem_size=x.dtype.itemsize, device_key=key, allow_split=allow_split,
                         allow_packed=allow_packed)  # fmt: skip


def _slots(plan, int64):
    """A split plan's zeroed workspace, or None (plans are split only when int64 was given)."""
    if plan.kernel == "split":
        return int64(plan.slots, True)
    return None


def run_forward(x, weight, y, rstd, eps: float, offset: float, casting: int, mode, device, stream, int64=None):
    """Plan and launch the forward for (m, n) arrays x and y (m > 0) on a device (a
    _device.DeviceInfo); see :func:`launch_forward`. int64(shape, zeroed) allocates the split
    plans' workspaces on x's device (None: plans that need one fall back to others)."""
    plan = forward_plan(x, mode, device, allow_split=int64 is not None)
    launch_forward(plan, x, weight, y, rstd, eps, offset, casting, stream, _slots(plan, int64))


def run_backward(x, dy, weight, rstd, dx, dw, offset: float, casting: int, empty_f32, device, stream, int64=None,
                 as_words=None):  # fmt: skip
    """Plan the backward for (m, n) arrays (m > 0) on a device, allocate its fp32 workspaces
    with ``empty_f32(shape)`` (the caller's framework, on x's device) and launch it; see
    :func:`launch_backward`. as_words(array): an int32 view of a 16-bit array, or None (the
    packed kernel is planned only when it is given and every view can be made)."""
    m, n = x.shape
    packable = as_words is not None and (weight is None or weight.dtype == x.dtype)
    plan = backward_plan(x, device, allow_split=int64 is not None, allow_packed=packable)
    arrays = (x, dy, weight, dx, dw)
    half = K.HALF_BF16  # unused unless packed
    if plan.kernel == "packed":
        half = half_code(x.dtype)
        words = [None if a is None else as_words(a) for a in arrays]
        if any(v is None for a, v in zip(arrays, words, strict=False) if a is not None):  # an odd offset or row stride
            plan = backward_plan(x, device, allow_split=int64 is not None)
        else:
            arrays = words
    dw_partial = None if weight is None else empty_f32(plan.partial_shape(n))
    row_dot = empty_f32((m,)) if plan.needs_row_dot else None
    x, dy, weight, dx, dw = arrays
    launch_backward(plan, x, dy, weight, rstd, dx, dw, dw_partial, row_dot, offset, casting, stream,
                    _slots(plan, int64), half)  # fmt: skip
