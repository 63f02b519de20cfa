"""Framework-free launchers for the fused residual-add RMSNorm kernels: DLPack arrays plus a
stream, planned with the core RMSNorm tables (cutile_rms.rmsnorm.config). Absent optional
arrays are replaced by placeholders that the kernels' compile-time flags never touch."""

from cutile_rms._launch import launch
from cutile_rms.experimental.fused_add import kernels as K
from cutile_rms.rmsnorm import kernels as RK
from cutile_rms.rmsnorm.config import ONLY_ARRAYS, REDUCE_TILE_G, REDUCE_TILE_N
from cutile_rms.rmsnorm.launch import HintVariants, backward_kernel, backward_plan, forward_plan

__all__ = ["run_fused_backward", "run_fused_forward", "run_fused_forward_inplace"]

# (tile kernels, chunked kernels), each by compiler hints, per forward flavour.
_FORWARD = {
    "train": (HintVariants(K.fused_add_fwd_tile), HintVariants(K.fused_add_fwd_chunked)),
    "infer": (HintVariants(K.fused_add_fwd_tile_infer), HintVariants(K.fused_add_fwd_chunked_infer)),
    "inplace": (HintVariants(K.fused_add_fwd_tile_inplace), HintVariants(K.fused_add_fwd_chunked_inplace)),
}
_BWD_TILE = HintVariants(K.fused_add_bwd_tile)
_BWD_CHUNKED = HintVariants(K.fused_add_bwd_chunked)


def _forward(flavour, arrays, weight, eps, offset, casting, mode, device, stream):
    x = arrays[0]
    m, n = x.shape
    plan = forward_plan(x, mode, device, ONLY_ARRAYS)  # no split kernels here
    tiles, chunked = _FORWARD[flavour]
    has_weight = weight is not None
    args = (*arrays[:2], weight if has_weight else x, *arrays[2:], float(eps), float(offset), plan.tile_m,
            plan.tile_n)  # fmt: skip
    if plan.kernel == "tile":
        # No-mask fast path: rows fill the tile exactly and row tiles divide M, so every load
        # and store is in bounds and the kernel may skip the checks.
        aligned = n == plan.tile_n and m % plan.tile_m == 0
        launch(stream, (plan.grid,), tiles[plan.hints], (*args, plan.tail, casting, has_weight, not aligned,
                                                         *plan.memory))  # fmt: skip
    else:
        launch(stream, (plan.grid,), chunked[plan.hints], (*args, casting, has_weight, *plan.memory))


def run_fused_forward(x, r, weight, y, s, rstd, eps, offset, casting, mode, device, stream):
    """s = x + r (in s's dtype) and y = rms_norm(s) * (offset + weight) for (m, n) arrays
    (m > 0); rstd (m,) fp32 is stored unless it is None."""
    if rstd is None:
        _forward("infer", (x, r, y, s), weight, eps, offset, casting, mode, device, stream)
    else:
        _forward("train", (x, r, y, s, rstd), weight, eps, offset, casting, mode, device, stream)


def run_fused_forward_inplace(x, r, weight, eps, offset, casting, mode, device, stream):
    """In place: r <- x + r, x <- rms_norm(r) * (offset + weight); no rstd."""
    _forward("inplace", (x, r), weight, eps, offset, casting, mode, device, stream)


def run_fused_backward(s, dy, dres, weight, rstd, dx, dr, dw, offset, casting, empty_f32, device, stream):
    """dx = d(rms_norm(s))/ds + dres (dres may be None), also stored to dr unless dr is None,
    and dw (unless weight is None) through fp32 per-block partials reduced in a fixed order.
    empty_f32(shape) allocates the fp32 workspaces on s's device."""
    m, n = s.shape
    plan = backward_plan(s, device, ONLY_ARRAYS)
    has_weight = weight is not None
    w = weight if has_weight else s
    partial = empty_f32((plan.partial_rows, n)) if has_weight else s
    round_xhat = has_weight and casting != RK.CAST_GEMMA
    flags = (has_weight, round_xhat, dres is not None, dr is not None, *plan.memory)
    dres = dy if dres is None else dres
    dr = dx if dr is None else dr
    if plan.kernel == "tile":
        args = (s, dy, dres, w, rstd, dx, dr, partial, float(offset), plan.tile_m, plan.tile_n, *flags)
        launch(stream, (plan.partial_rows,), _BWD_TILE[plan.hints], args)
    else:
        row_dot = empty_f32((m,))
        dot_args = (s, dy, w, rstd, row_dot, float(offset), plan.dot_tile_m, plan.dot_tile_n, has_weight)
        launch(stream, (plan.dot_grid,), backward_kernel("row_dot", plan.dot_hints), dot_args)
        args = (s, dy, dres, w, rstd, row_dot, dx, dr, partial, float(offset), plan.tile_m, plan.tile_n, *flags)
        launch(stream, (plan.partial_rows, plan.num_chunks), _BWD_CHUNKED[plan.hints], args)
    if has_weight:
        launch(stream, (plan.reduce_grid,), RK.dw_reduce, (partial, dw, REDUCE_TILE_G, REDUCE_TILE_N))
