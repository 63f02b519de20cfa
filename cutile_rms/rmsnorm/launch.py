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
from cutile_rms.rmsnorm import signatures as S
from cutile_rms.rmsnorm.config import (
    OCCUPANCIES,
    WARPS,
    BackwardPlan,
    ForwardPlan,
    Provides,
    plan_backward,
    plan_forward,
)

__all__ = [
    "CASTING_MODES",
    "casting_code",
    "check_arguments",
    "check_casting",
    "forward_casting",
    "launch_backward",
    "launch_forward",
    "native_fits",
    "run_backward",
    "run_forward",
]

CASTING_MODES = {"llama": K.CAST_LLAMA, "gemma": K.CAST_GEMMA, "none": K.CAST_NONE}


class HintVariants:
    """One kernel's objects by compiler hints: ``variants[occupancy, warps]``. Each object is
    made on first use and kept (each replace_hints() object has its own JIT cache); the keys
    are bounded by occupancies 1..max(config.OCCUPANCIES) x config.WARPS: the planners hint
    powers of two, probes (bench.probes.rows_probe) any block count up to the largest."""

    def __init__(self, kernel):
        self.kernel = kernel
        self._made = {}
        self._lock = threading.Lock()

    def __getitem__(self, hints: tuple):
        k = self._made.get(hints)
        if k is None:
            occupancy, warps = hints
            if not (isinstance(occupancy, int) and 1 <= occupancy <= max(OCCUPANCIES)) or warps not in WARPS:
                raise KeyError(f"hints {hints} outside occupancy 1..{max(OCCUPANCIES)} x warps {WARPS}")
            with self._lock:
                k = self._made.get(hints)
                if k is None:
                    k = self._made[hints] = with_hints(self.kernel, occupancy=occupancy, num_worker_warps=warps)
        return k


# Every core kernel's objects by compiler hints, keyed by its name (signatures.PARAMS).
_VARIANTS = {name: HintVariants(getattr(K, name)) for name in S.PARAMS}


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


def check_casting(casting) -> None:
    """ValueError unless casting is one of the public codes (CASTING_MODES: what casting_code
    returns and the custom ops take); CAST_LLAMA_NATIVE is the launchers' own choice
    (forward_casting), never a caller's."""
    if casting not in CASTING_MODES.values():
        raise ValueError(
            f"casting must be one of the codes {sorted(CASTING_MODES.values())} (casting_code), got {casting!r}"
        )


def native_fits(x, weight, y, offset: float) -> bool:
    """Whether CAST_LLAMA_NATIVE computes llama's y for these arrays: a weight of x's dtype, y of
    that dtype too, and offset 0."""
    return weight is not None and offset == 0.0 and weight.dtype == x.dtype == y.dtype


def forward_casting(casting: int, x, weight, y, offset: float) -> int:
    """The casting code of a forward on the row-tile kernels: CAST_LLAMA_NATIVE (kernels.common:
    y = xhat * w multiplied in x's dtype, the same bits but for the sign of a zero y where a
    weight element is -0.0) where llama casting meets ``native_fits``; casting itself otherwise.
    Measured in bench/NOTES.md, session 32."""
    return K.CAST_LLAMA_NATIVE if casting == K.CAST_LLAMA and native_fits(x, weight, y, offset) else casting


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
    return _VARIANTS[S.FORWARD[kind, store_rstd]][hints]


def backward_kernel(kind: str, hints: tuple):
    """The backward kernel object of a kind ("tile", "chunked", "row_dot", "split" or
    "packed") and hints."""
    return _VARIANTS[S.BACKWARD[kind]][hints]


def split_values(splits: int, slots_shape: tuple, polls: int | None) -> dict:
    """The split kernels' SPLIT, SLOTS_W and POLLS constants. POLLS (how many times a block
    polls for its partners before it puts a row tile aside, kernels.SPIN_LIMIT): polls, else
    SPIN_LIMIT, or 1 in the CPU interpreter, where no partner publishes while a block polls."""
    if polls is None:
        polls = 1 if interpret.is_enabled() else K.SPIN_LIMIT
    if not 1 <= polls <= K.SPIN_LIMIT:
        raise ValueError(f"polls must be in [1, {K.SPIN_LIMIT}], got {polls}")
    return dict(SPLIT=splits, SLOTS_W=slots_shape[1], POLLS=polls)


def launch_forward(plan: ForwardPlan, x, weight, y, rstd, eps: float, offset: float, casting: int, stream, slots=None,
                   polls: int | None = None):  # fmt: skip
    """y = rms_norm(x) * (offset + weight); rstd (m,) fp32 is stored unless it is None.

    x, y: (m, n) arrays with unit stride along n; weight: (n,) or None; slots: for a split
    plan, a zero-filled int64 array of shape plan.slots (ignored otherwise); polls: the split
    kernels' poll bound (split_values; tests lower it to make blocks put row tiles aside).
    """
    args = forward_args(plan, x, weight, y, rstd, eps, offset, casting, slots, polls)
    launch(stream, (plan.grid,), forward_kernel(plan.kernel, plan.hints, rstd is not None), args)


def forward_values(plan: ForwardPlan, x, weight, y, rstd, eps: float, offset: float, casting: int, slots=None,
                   polls: int | None = None) -> dict:  # fmt: skip
    """Plan's forward kernel's named values (signatures.PARAMS), placeholders included."""
    has_weight = weight is not None
    tma_store, latency = plan.memory
    values = dict(x=x, w=weight if has_weight else x, y=y, rstd_out=rstd, slots=slots, eps=float(eps),
                  offset=float(offset), TILE_M=plan.tile_m, TILE_N=plan.tile_n, TAIL=plan.tail, CASTING=casting,
                  HAS_WEIGHT=has_weight, TMA_STORE=tma_store, LATENCY=latency)  # fmt: skip
    if plan.kernel == "split":
        values.update(split_values(plan.splits, plan.slots, polls))
    return values


def forward_args(plan: ForwardPlan, x, weight, y, rstd, eps: float, offset: float, casting: int, slots=None,
                 polls: int | None = None) -> tuple:  # fmt: skip
    """The arguments of plan's forward kernel (launch_forward; the tuner times them too)."""
    name = S.FORWARD[plan.kernel, rstd is not None]
    return S.arguments(name, forward_values(plan, x, weight, y, rstd, eps, offset, casting, slots, polls))


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
    values = backward_values(plan, x, dy, weight, rstd, dx, dw, dw_partial, row_dot, offset, casting, slots, half,
                             polls)  # fmt: skip
    if plan.kernel in ("tile", "packed"):
        launch(stream, (plan.partial_rows,), backward_kernel(plan.kernel, plan.hints), _args(plan.kernel, values))
    elif plan.kernel == "split":
        launch(stream, (plan.partial_rows * plan.num_chunks,), backward_kernel("split", plan.hints),
               _args("split", values))  # fmt: skip
    else:
        dot = dict(values, TILE_M=plan.dot_tile_m, TILE_N=plan.dot_tile_n)
        launch(stream, (plan.dot_grid,), backward_kernel("row_dot", plan.dot_hints), _args("row_dot", dot))
        launch(stream, (plan.partial_rows, plan.num_chunks), backward_kernel("chunked", plan.hints),
               _args("chunked", values))  # fmt: skip
    if has_weight:  # the fixed-order sum of the fp32 partials (TILE_W: in words)
        reduce = "dw_reduce_packed" if plan.kernel == "packed" else "dw_reduce"
        tile_g, tile_n = plan.reduce_tiles
        rv = dict(dw_partial=dw_partial, dw=dw, TILE_G=tile_g, TILE_N=tile_n, TILE_W=tile_n // 2, HALF=half)
        launch(stream, (plan.reduce_grid,), _VARIANTS[reduce].kernel, S.arguments(reduce, rv))


def _args(kind: str, values: dict) -> tuple:
    return S.arguments(S.BACKWARD[kind], values)


def backward_values(plan: BackwardPlan, x, dy, weight, rstd, dx, dw, dw_partial, row_dot, offset: float,
                    casting: int, slots=None, half=K.HALF_BF16, polls: int | None = None) -> dict:  # fmt: skip
    """Named values (signatures.PARAMS) of plan's backward kernels and the dW reduction: tile
    widths in words for a packed plan, placeholders for absent arrays."""
    has_weight = weight is not None
    tma_store, latency = plan.memory
    values = dict(x=x, dy=dy, w=weight if has_weight else x, rstd_in=rstd, dx=dx,
                  dw_partial=dw_partial if has_weight else x, dw=dw, c_out=row_dot, c_in=row_dot, slots=slots,
                  offset=float(offset), TILE_M=plan.tile_m, TILE_N=plan.tile_n, HAS_WEIGHT=has_weight,
                  ROUND_XHAT=has_weight and casting != K.CAST_GEMMA, TMA_STORE=tma_store,
                  LATENCY=latency)  # fmt: skip
    if plan.kernel == "packed":  # widths in words, then the tail and the 16-bit type
        values.update(TILE_W=plan.tile_n // 2, TAIL_W=plan.tail // 2, HALF=half)
    if plan.kernel == "split":
        values.update(split_values(plan.num_chunks, plan.slots, polls))
    return values


def forward_plan(x, mode, device, provides: Provides = Provides()) -> ForwardPlan:  # noqa: B008 (frozen)
    """The forward plan for an (m, n) array x on a device (a _device.DeviceInfo)."""
    m, n = x.shape
    key = device.key
    return plan_forward(m, n, device.num_sms, mode, elem_size=x.dtype.itemsize, device_key=key, provides=provides)


def backward_plan(x, device, provides: Provides = Provides()) -> BackwardPlan:  # noqa: B008 (frozen)
    m, n = x.shape
    key = device.key
    return plan_backward(m, n, device.num_sms, elem_size=x.dtype.itemsize, device_key=key, provides=provides)


def _slots(plan, int64):
    """A split plan's zeroed workspace, or None (plans are split only when int64 was given)."""
    if plan.kernel == "split":
        if int64 is None:  # (a plan given to run_*; the planner plans no split without int64)
            raise ValueError("a split plan needs int64(shape, zeroed) for its slots")
        return int64(plan.slots, True)
    return None


def run_forward(x, weight, y, rstd, eps: float, offset: float, casting: int, mode, device, stream, int64=None,
                plan: ForwardPlan | None = None):  # fmt: skip
    """Plan and launch the forward for (m, n) arrays x and y (m > 0) on a device (a
    _device.DeviceInfo); see :func:`launch_forward`. int64(shape, zeroed) allocates the split
    plans' workspaces on x's device (None: plans that need one fall back to others). plan: run
    this plan instead of the planner's (probes: config.forward_plan_from; a split plan needs
    int64)."""
    plan = plan or forward_plan(x, mode, device, Provides(slots=int64 is not None))
    launch_forward(plan, x, weight, y, rstd, eps, offset, casting, stream, _slots(plan, int64))


def run_backward(x, dy, weight, rstd, dx, dw, offset: float, casting: int, empty_f32, device, stream, int64=None,
                 as_words=None, plan: BackwardPlan | None = None):  # fmt: skip
    """Plan the backward for (m, n) arrays (m > 0) on a device, allocate its fp32 workspaces
    with ``empty_f32(shape)`` (the caller's framework, on x's device) and launch it; see
    :func:`launch_backward`. as_words(array): an int32 view of a 16-bit array, or None (the
    packed kernel is planned only when it is given and every view can be made). plan: run this
    plan instead of the planner's (probes: config.backward_plan_from; a split plan needs int64,
    a packed one as_words)."""
    m, n = x.shape
    packable = as_words is not None and (weight is None or weight.dtype == x.dtype)
    plan = plan or backward_plan(x, device, Provides(slots=int64 is not None, words=packable))
    arrays = (x, dy, weight, dx, dw)
    half = K.HALF_BF16  # unused unless packed
    if plan.kernel == "packed":
        if as_words is None:  # (a plan given; the planner plans no packed kernel without it)
            raise ValueError("a packed plan needs as_words(array)")
        half = half_code(x.dtype)
        words = [None if a is None else as_words(a) for a in arrays]
        if any(v is None for a, v in zip(arrays, words, strict=False) if a is not None):  # an odd offset or row stride
            plan = backward_plan(x, device, Provides(slots=int64 is not None))
        else:
            arrays = words
    dw_partial = None if weight is None else empty_f32(plan.partial_shape(n))
    row_dot = empty_f32((m,)) if plan.needs_row_dot else None
    x, dy, weight, dx, dw = arrays
    launch_backward(plan, x, dy, weight, rstd, dx, dw, dw_partial, row_dot, offset, casting, stream,
                    _slots(plan, int64), half)  # fmt: skip
