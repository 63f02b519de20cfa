"""A CPU interpreter for the subset of cuTile that cutile_rms's kernels use.

It runs a kernel's own Python function (kernels and tile helpers are defined through
:mod:`cutile_rms._tile`, which remembers it) once per block of the grid, with the name ``ct``
(and every tile helper it calls) rebound to a NumPy emulation
of cuTile's semantics -- not NumPy's:

- ``load``/``store`` address whole tiles (``index`` counts tiles) and tile dims are powers of
  two; out-of-bounds lanes of a load take the padding mode (UNDETERMINED fills floats with NaN,
  so code that relies on it fails), out-of-bounds lanes of a store are dropped, and a tile that
  lies entirely out of bounds raises (undefined behaviour on a GPU);
- ``store`` converts implicitly only when widening;
- dtype promotion: a Python literal or ``Constant`` takes the other operand's dtype within its
  category (float, int, bool); runtime scalar arguments are typed (a float arrives as fp32, an
  int as int32); typed operands promote as cuTile does (bf16 + fp32 -> fp32; fp16 + bf16 is an
  error);
- ``sum`` accumulates in the tile's dtype, by halves as a tree; ``astype`` rounds to nearest
  even (bf16 through ml_dtypes); every arithmetic op rounds to its result dtype;
- ``gather``/``scatter`` with bounds and masks, ``bid``/``num_blocks``, ``Constant``
  parameters, ``range`` and ``while`` loops;
- ``atomic_add``/``atomic_xchg``/``atomic_max`` (index tiles as for gather; every lane in bounds), each
  atomic as a whole under one lock, ``bitcast``, and the bit operators ``& | << >>``.

Any other cuTile operation raises :class:`InterpreterUnsupportedError` naming it.

Blocks run one after another in the order of their ids, so this finds wrong indexing, padding
and rounding, not races. It is also the harshest schedule for kernels that exchange values
through atomics: a block never sees a later block's writes, so a kernel that waited on one
without bound would hang here (a split block polls for its partners a bounded number of
times, then puts the row tile aside and reads the whole row itself later: kernels.SPIN_LIMIT).
Enable it with
``CUTILE_RMS_INTERPRET=1`` (read once, at import) or :func:`enable` / :func:`interpreting`; the
public API then takes CPU tensors.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import math
import os
import threading
import types
import typing

import cuda.tile as ct
import numpy as np

from cutile_rms._device import INTERPRET_DEVICE
from cutile_rms._tile import python_function

__all__ = [
    "INTERPRET_NUM_SMS",
    "InterpreterError",
    "InterpreterUnsupportedError",
    "Tile",
    "enable",
    "interpreting",
    "is_enabled",
    "launch",
    "promote",
]

# The SM count the planners see in interpret mode (see _device.INTERPRET_DEVICE).
INTERPRET_NUM_SMS = INTERPRET_DEVICE.num_sms

ENV_SWITCH = "CUTILE_RMS_INTERPRET"
_enabled = os.environ.get(ENV_SWITCH, "").strip().lower() not in ("", "0", "false", "no")


def is_enabled() -> bool:
    return _enabled


def enable(on: bool = True) -> None:
    """Route every cutile_rms launch through the interpreter (or back to the GPU)."""
    global _enabled
    _enabled = bool(on)


@contextlib.contextmanager
def interpreting(on: bool = True):
    """Context manager form of :func:`enable`."""
    old = _enabled
    enable(on)
    try:
        yield
    finally:
        enable(old)


class InterpreterError(RuntimeError):
    """A kernel did something that is an error (or undefined behaviour) in cuTile."""


class InterpreterUnsupportedError(NotImplementedError):
    """The kernel uses a cuTile operation the interpreter does not emulate."""


# ---------------------------------------------------------------------------------------------
# dtypes


def _np_dtype(dtype) -> np.dtype:
    try:
        return _NP[dtype]
    except KeyError:
        raise InterpreterUnsupportedError(f"dtype {dtype} is not supported by the interpreter") from None


_NP = {
    ct.float32: np.dtype(np.float32),
    ct.float16: np.dtype(np.float16),
    ct.float64: np.dtype(np.float64),
    ct.int32: np.dtype(np.int32),
    ct.int64: np.dtype(np.int64),
    ct.int16: np.dtype(np.int16),
    ct.int8: np.dtype(np.int8),
    ct.bool_: np.dtype(np.bool_),
}
with contextlib.suppress(ImportError):
    import ml_dtypes

    _NP[ct.bfloat16] = np.dtype(ml_dtypes.bfloat16)
    _NP[ct.float8_e4m3fn] = np.dtype(ml_dtypes.float8_e4m3fn)
    _NP[ct.float8_e5m2] = np.dtype(ml_dtypes.float8_e5m2)
_CT = {v: k for k, v in _NP.items()}

_FLOATS = (ct.float8_e4m3fn, ct.float8_e5m2, ct.float16, ct.bfloat16, ct.float32, ct.float64)
_INTS = (ct.int8, ct.int16, ct.int32, ct.int64)
_WIDTH = {ct.float8_e4m3fn: 8, ct.float8_e5m2: 8, ct.float16: 16, ct.bfloat16: 16, ct.float32: 32, ct.float64: 64,
          ct.int8: 8, ct.int16: 16, ct.int32: 32, ct.int64: 64, ct.bool_: 1}  # fmt: skip


def _category(dtype) -> int:
    return 2 if dtype in _FLOATS else 1 if dtype in _INTS else 0


def promote(t1, t2):
    """cuTile's implicit promotion of two typed operands."""
    if t1 == t2:
        return t1
    c1, c2 = _category(t1), _category(t2)
    if c1 != c2:
        return t1 if c1 > c2 else t2
    if {t1, t2} == {ct.float16, ct.bfloat16}:
        raise InterpreterError(f"implicit promotion of {t1} and {t2} is not supported; cast explicitly")
    return t1 if _WIDTH[t1] >= _WIDTH[t2] else t2


def _literal_dtype(value, other):
    """The dtype a Python literal (or Constant) takes next to an operand of dtype `other`."""
    lit = ct.bool_ if isinstance(value, bool) else ct.int32 if isinstance(value, int) else ct.float32
    if _category(lit) == _category(other):
        return other
    return lit if _category(lit) > _category(other) else other


# ---------------------------------------------------------------------------------------------
# Tiles and arrays


class _Shaped:
    """Shape and rank of the NumPy array held in `_a`."""

    __slots__ = ()

    @property
    def shape(self):
        return tuple(self._a.shape)

    @property
    def ndim(self):
        return self._a.ndim


class Tile(_Shaped):
    """An immutable tile: a NumPy array and its cuTile dtype."""

    __slots__ = ("_a", "dtype")

    def __init__(self, a, dtype):
        self._a = np.asarray(a, dtype=_np_dtype(dtype))
        self.dtype = dtype

    def astype(self, dtype):
        return astype(self, dtype)

    def reshape(self, shape):
        return reshape(self, shape)

    def numpy(self) -> np.ndarray:
        return self._a

    def __repr__(self):
        return f"Tile({self.dtype}, {self.shape})"

    def __bool__(self):
        if self._a.ndim:
            raise InterpreterError("the truth value of a non-scalar tile is ambiguous")
        return bool(self._a)

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __index__(self):
        return int(self._a)

    def _binary(self, other, op, reverse=False, out_dtype=None):
        a, b = (other, self) if reverse else (self, other)
        res = _result_dtype(a, b)
        with np.errstate(all="ignore"):
            r = op(_as_np(a, res), _as_np(b, res))
        return Tile(r, out_dtype or res)

    def __neg__(self):
        return Tile(-self._a, self.dtype)

    __hash__ = None


def _binary_method(op, reverse=False, out_dtype=None):
    def method(self, other):
        return self._binary(other, op, reverse, out_dtype)

    return method


# Arithmetic rounds to the promoted dtype; comparisons give bool tiles.
for _name, _op in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply)):
    setattr(Tile, f"__{_name}__", _binary_method(_op))
    setattr(Tile, f"__r{_name}__", _binary_method(_op, reverse=True))
for _name, _op in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                   ("eq", np.equal), ("ne", np.not_equal)):  # fmt: skip
    setattr(Tile, f"__{_name}__", _binary_method(_op, out_dtype=ct.bool_))
for _name, _op in (
    ("floordiv", np.floor_divide),
    ("mod", np.mod),
    ("and", np.bitwise_and),
    ("or", np.bitwise_or),
    ("lshift", np.left_shift),
    ("rshift", np.right_shift),
):  # fmt: skip (rshift: arithmetic on signed)
    setattr(Tile, f"__{_name}__", _binary_method(_op))
    setattr(Tile, f"__r{_name}__", _binary_method(_op, reverse=True))


def _truediv(x, y):
    if not np.issubdtype(x.dtype, np.inexact) and x.dtype.kind != "V":
        raise InterpreterError("'/' on integer tiles; use '//' or cast to a float dtype")
    return np.true_divide(x, y)


Tile.__truediv__ = _binary_method(_truediv)
Tile.__rtruediv__ = _binary_method(_truediv, reverse=True)


def _result_dtype(a, b):
    if isinstance(a, Tile) and isinstance(b, Tile):
        return promote(a.dtype, b.dtype)
    if isinstance(a, Tile):
        return _literal_dtype(b, a.dtype)
    return _literal_dtype(a, b.dtype)


def _as_np(v, dtype):
    if isinstance(v, Tile):
        return v._a.astype(_np_dtype(dtype), copy=False)
    return np.asarray(v, dtype=_np_dtype(dtype))


class Array(_Shaped):
    """A kernel's view of a global-memory array (shares memory with the caller's)."""

    __slots__ = ("_a", "dtype")

    def __init__(self, a: np.ndarray):
        self._a = a
        self.dtype = _CT.get(a.dtype)
        if self.dtype is None:
            raise InterpreterUnsupportedError(f"array dtype {a.dtype} is not supported by the interpreter")

    def __repr__(self):
        return f"Array({self.dtype}, {self.shape})"

    def slice(self, axis, start, stop):
        """The view of [start, stop) along axis (ct.Array.slice; its bounds checked)."""
        axis = int(axis) % self.ndim
        start, stop = int(start), int(stop)
        if not (0 <= start < self.shape[axis] and start <= stop <= self.shape[axis]):
            raise InterpreterError(f"Array.slice: [{start}, {stop}) is out of axis {axis}'s {self.shape[axis]}")
        region = [slice(None)] * self.ndim
        region[axis] = slice(start, stop)
        return Array(self._a[tuple(region)])


def _to_numpy(obj) -> np.ndarray:
    """A NumPy view (no copy) of a CPU torch tensor, a NumPy array, or a CPU DLPack array."""
    if isinstance(obj, np.ndarray):
        return obj
    if type(obj).__module__.startswith("torch"):
        import torch

        if obj.device.type != "cpu":
            raise InterpreterError(f"the interpreter runs on CPU tensors; got one on {obj.device}")
        # Through DLPack, not Tensor.numpy(): .numpy() marks the tensor's storage as not
        # resizable, and FSDP2 frees its unsharded parameters by resizing their storage to 0.
        t = obj.detach()
        if t.dtype == torch.bfloat16:
            return np.from_dlpack(t.view(torch.int16)).view(_np_dtype(ct.bfloat16))
        if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # NumPy has no FP8: ml_dtypes' views
            fp8 = ct.float8_e4m3fn if t.dtype == torch.float8_e4m3fn else ct.float8_e5m2
            return np.from_dlpack(t.view(torch.int8)).view(_np_dtype(fp8))
        return np.from_dlpack(t)
    if hasattr(obj, "__dlpack__"):
        return np.from_dlpack(obj)
    raise InterpreterError(f"cannot pass a {type(obj).__name__} to an interpreted kernel")


def _pow2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def _check_tile_shape(op: str, shape) -> tuple:
    shape = tuple(int(s) for s in shape)
    if not all(_pow2(s) for s in shape):
        raise InterpreterError(f"ct.{op}: tile dimensions must be powers of two, got {shape}")
    return shape


def _tile_region(op: str, array: Array, index, shape):
    """(in-bounds source slices, destination slices) of tile `index` of `array`; raises when
    the tile lies entirely out of bounds."""
    index = tuple(int(i) for i in (index if isinstance(index, tuple) else (index,)))
    if len(index) != array.ndim or len(shape) != array.ndim:
        raise InterpreterError(f"ct.{op}: index {index} and tile shape {shape} must have the array's rank {array.ndim}")
    src, dst = [], []
    for i, s, d in zip(index, shape, array.shape, strict=False):
        start = i * s
        lo, hi = max(start, 0), min(start + s, d)
        if lo >= hi:
            raise InterpreterError(
                f"ct.{op}: tile {index} of shape {shape} lies entirely outside an array of shape "
                f"{array.shape} (undefined behaviour on the GPU)"
            )
        src.append(slice(lo, hi))
        dst.append(slice(lo - start, hi - start))
    return tuple(src), tuple(dst)


def _padding_value(mode, dtype):
    P = ct.PaddingMode
    if dtype in _FLOATS:
        return {P.UNDETERMINED: math.nan, P.ZERO: 0.0, P.NEG_ZERO: -0.0, P.NAN: math.nan,
                P.POS_INF: math.inf, P.NEG_INF: -math.inf}[mode]  # fmt: skip
    if mode in (P.ZERO, P.NEG_ZERO):
        return 0
    if mode == P.UNDETERMINED:  # a value no correct kernel can depend on
        return np.iinfo(_np_dtype(dtype)).min if dtype in _INTS else True
    raise InterpreterError(f"padding mode {mode} has no value for {dtype}")


# ---------------------------------------------------------------------------------------------
# The emulated `ct` namespace


class _Grid(threading.local):
    bid = (0, 0, 0)
    dims = (1, 1, 1)


_grid = _Grid()


def bid(axis):
    return _grid.bid[int(axis)]


def num_blocks(axis):
    return _grid.dims[int(axis)]


def cdiv(x, y):
    return -(-int(x) // int(y))


def _c_order_only(order, op):
    if order != "C":
        raise InterpreterUnsupportedError(f"ct.{op}(order={order!r}) is not supported by the interpreter")


def num_tiles(array, axis, shape, order="C"):
    _c_order_only(order, "num_tiles")
    return cdiv(array.shape[axis], shape[axis])


def load(array, index, shape, *, order="C", padding_mode=ct.PaddingMode.UNDETERMINED, check_bounds=True,
         latency=None, allow_tma=None, memory_order=None, memory_scope=None):  # fmt: skip
    _c_order_only(order, "load")
    shape = _check_tile_shape("load", shape)
    src, dst = _tile_region("load", array, index, shape)
    _require_in_bounds("load", check_bounds, dst, shape)
    out = np.full(shape, _padding_value(padding_mode, array.dtype), dtype=_np_dtype(array.dtype))
    out[dst] = array._a[src]
    return Tile(out, array.dtype)


def _require_in_bounds(op, check_bounds, dst, shape):
    """check_bounds=False promises a tile wholly inside the array (cuTile then skips the bounds
    check; breaking the promise is undefined behaviour there): hold the kernel to it."""
    if not check_bounds and np.empty(shape)[dst].shape != tuple(shape):
        raise InterpreterError(f"ct.{op}(check_bounds=False) on a tile that extends past the array")


def _check_widening(op, src, dst):
    if src != dst and (_category(src) != _category(dst) or _WIDTH[src] > _WIDTH[dst]):
        raise InterpreterError(
            f"ct.{op}: a {src} tile into a {dst} array; cuTile converts implicitly only when widening: "
            "astype() first"
        )


def store(array, index, tile, *, order="C", check_bounds=True, latency=None, allow_tma=None,
          memory_order=None, memory_scope=None):  # fmt: skip
    _c_order_only(order, "store")
    if not isinstance(tile, Tile):
        tile = Tile(np.asarray(tile), _literal_dtype(tile, array.dtype))
    _check_widening("store", tile.dtype, array.dtype)
    shape = _check_tile_shape("store", tile.shape if tile.ndim else (1,) * array.ndim)
    a = tile._a.reshape(shape)
    src, dst = _tile_region("store", array, index, shape)
    _require_in_bounds("store", check_bounds, dst, shape)
    array._a[src] = a[dst].astype(array._a.dtype)


def _index_arrays(op, array, indices, mask):
    if not isinstance(indices, tuple):
        indices = (indices,)
    if len(indices) != array.ndim:
        raise InterpreterError(f"ct.{op}: {len(indices)} index tiles for an array of rank {array.ndim}")
    idx = np.broadcast_arrays(*[i._a.astype(np.int64) if isinstance(i, Tile) else np.asarray(int(i)) for i in indices])
    ok = np.ones(idx[0].shape, dtype=bool)
    for i, d in zip(idx, array.shape, strict=False):
        ok &= (i >= 0) & (i < d)  # out-of-bounds lanes are masked off
    if mask is not None:
        ok &= np.broadcast_to(mask._a if isinstance(mask, Tile) else np.asarray(mask, bool), ok.shape)
    return idx, ok


def gather(array, indices, *, mask=None, padding_value=0, check_bounds=True, latency=None):
    idx, ok = _index_arrays("gather", array, indices, mask)
    out = np.full(ok.shape, padding_value, dtype=_np_dtype(array.dtype))
    out[ok] = array._a[tuple(i[ok] for i in idx)]
    return Tile(out, array.dtype)


def scatter(array, indices, value, *, mask=None, check_bounds=True, latency=None):
    idx, ok = _index_arrays("scatter", array, indices, mask)
    v = value if isinstance(value, Tile) else Tile(np.asarray(value), _literal_dtype(value, array.dtype))
    _check_widening("scatter", v.dtype, array.dtype)
    vals = np.broadcast_to(v._a, ok.shape)
    array._a[tuple(i[ok] for i in idx)] = vals[ok].astype(array._a.dtype)


_ATOMIC_LOCK = threading.Lock()  # launches on several Python threads (the concurrent-callers test)


def _atomic(op, fn):
    def atomic(array, indices, update, *, check_bounds=True, memory_order=None, memory_scope=None):
        idx, ok = _index_arrays(op, array, indices, None)
        if not ok.all():
            raise InterpreterError(f"ct.{op}: an index is out of bounds")
        u = update if isinstance(update, Tile) else Tile(np.asarray(update), _literal_dtype(update, array.dtype))
        at = tuple(idx)
        with _ATOMIC_LOCK:
            old = array._a[at].copy()
            array._a[at] = fn(old, np.broadcast_to(u._a, old.shape).astype(array._a.dtype))
        return Tile(old, array.dtype)

    atomic.__name__ = op
    return atomic


atomic_add = _atomic("atomic_add", lambda old, u: old + u)
atomic_xchg = _atomic("atomic_xchg", lambda old, u: u)
atomic_max = _atomic("atomic_max", np.maximum)


def assume_divisible_by(x, divisor):
    """ct.assume_divisible_by: x, once the claim is checked (the compiler takes it on trust)."""
    if int(x) % int(divisor):
        raise InterpreterError(f"ct.assume_divisible_by: {int(x)} is not divisible by {divisor}")
    return x


def bitcast(x, dtype):
    a = x._a.view(_np_dtype(dtype))
    if a.shape != x._a.shape:
        raise InterpreterError(f"ct.bitcast: {x.dtype} and {dtype} differ in size")
    return Tile(a, dtype)


def _reduce(fn, x, axis, keepdims, name):
    """Reduce over `axis` by halves (every tile dim is a power of two), rounding each step to
    the tile's dtype, like a GPU's tree reduction in that dtype."""
    if not isinstance(x, Tile):
        raise InterpreterError(f"ct.{name} expects a tile")
    nd = x.ndim
    axes = (
        tuple(range(nd)) if axis is None else tuple(int(a) % nd for a in (axis if isinstance(axis, tuple) else (axis,)))
    )
    keep = [d for d in range(nd) if d not in axes]
    a = np.transpose(x._a, keep + list(axes))
    a = a.reshape(a.shape[: len(keep)] + (-1,))
    n = a.shape[-1]
    with np.errstate(all="ignore"):
        while n > 1:
            n //= 2
            a = fn(a[..., :n], a[..., n:]).astype(x._a.dtype, copy=False)
    r = a[..., 0]
    if keepdims:
        r = r.reshape(tuple(1 if d in axes else x.shape[d] for d in range(nd)))
    return Tile(np.asarray(r), x.dtype)


def ct_sum(x, axis=None, *, keepdims=False, rounding_mode=None, flush_to_zero=False):
    """Sum in the tile's dtype: a 16-bit tile accumulates in 16 bits (upcast first)."""
    return _reduce(np.add, x, axis, keepdims, "sum")


def ct_max(x, axis=None, *, keepdims=False, propagate_nan=False, **_):
    """cuTile's max: a NaN loses to any number unless propagate_nan (as PTX max does)."""
    return _reduce(np.maximum if propagate_nan else np.fmax, x, axis, keepdims, "max")


def ct_min(x, axis=None, *, keepdims=False, propagate_nan=False, **_):
    return _reduce(np.minimum if propagate_nan else np.fmin, x, axis, keepdims, "min")


def astype(x, dtype, *, rounding_mode=None):
    if rounding_mode is not None:
        raise InterpreterUnsupportedError("ct.astype(rounding_mode=...) is not supported by the interpreter")
    if not isinstance(x, Tile):
        return Tile(np.asarray(x), dtype)
    return Tile(x._a.astype(_np_dtype(dtype)), dtype)


def _unary(fn, name):
    def op(x, *, flush_to_zero=False):
        if flush_to_zero:
            raise InterpreterUnsupportedError(f"ct.{name}(flush_to_zero=True) is not supported by the interpreter")
        t = x if isinstance(x, Tile) else Tile(np.asarray(x), ct.float32)
        if t.dtype not in _FLOATS:
            raise InterpreterError(f"ct.{name} needs a floating-point tile, got {t.dtype}")
        wide = np.float64 if t.dtype == ct.float64 else np.float32
        with np.errstate(all="ignore"):
            return Tile(fn(t._a.astype(wide)).astype(t._a.dtype), t.dtype)

    op.__name__ = name
    return op


rsqrt = _unary(lambda a: 1.0 / np.sqrt(a), "rsqrt")
sqrt = _unary(np.sqrt, "sqrt")
exp = _unary(np.exp, "exp")
log = _unary(np.log, "log")


def _extremum(x, y, fn):
    if isinstance(x, Tile):
        return x._binary(y, fn)
    if isinstance(y, Tile):
        return y._binary(x, fn, True)
    return type(x + y)(fn(x, y))  # two scalars (e.g. tile indices): a scalar of their promoted type


def maximum(x, y, *, propagate_nan=False):
    return _extremum(x, y, np.maximum if propagate_nan else np.fmax)  # a NaN loses unless propagate_nan, as in ct.max


def minimum(x, y, *, propagate_nan=False):
    return _extremum(x, y, np.minimum if propagate_nan else np.fmin)


def ct_abs(x):
    return Tile(np.abs(x._a), x.dtype) if isinstance(x, Tile) else abs(x)


def where(cond, x, y):
    if isinstance(x, Tile) and isinstance(y, Tile):
        dtype = promote(x.dtype, y.dtype)
    else:
        dtype = x.dtype if isinstance(x, Tile) else y.dtype
    return Tile(np.where(cond._a, _as_np(x, dtype), _as_np(y, dtype)), dtype)


def reshape(x, shape):
    shape = tuple(int(s) for s in shape)
    if -1 not in shape and math.prod(shape) != math.prod(x.shape):
        raise InterpreterError(f"ct.reshape: cannot reshape a tile of shape {x.shape} to {shape}")
    return Tile(x._a.reshape(shape), x.dtype)


def broadcast_to(x, shape):
    return Tile(np.broadcast_to(x._a, tuple(shape)).copy(), x.dtype)


def expand_dims(x, axis):
    return Tile(np.expand_dims(x._a, axis), x.dtype)


def permute(x, axes):
    return Tile(np.transpose(x._a, tuple(int(a) for a in axes)), x.dtype)


def transpose(x, axis0=None, axis1=None):
    """The last two axes swapped (a 2-D tile's transpose), or axis0 and axis1."""
    if axis0 is None and axis1 is None:
        axis0, axis1 = -2, -1
    return Tile(np.swapaxes(x._a, int(axis0), int(axis1)), x.dtype)


def full(shape, fill_value, dtype):
    return Tile(np.full(_check_tile_shape("full", shape), fill_value), dtype)


def zeros(shape, dtype):
    return full(shape, 0, dtype)


def ones(shape, dtype):
    return full(shape, 1, dtype)


def arange(size, *, dtype, start=0, step=1):
    (size,) = _check_tile_shape("arange", (size,))
    return Tile(start + step * np.arange(size), dtype)


_EMULATED = {
    "bid": bid, "num_blocks": num_blocks, "cdiv": cdiv, "num_tiles": num_tiles,
    "load": load, "store": store, "gather": gather, "scatter": scatter,
    "sum": ct_sum, "max": ct_max, "min": ct_min, "abs": ct_abs, "astype": astype,
    "rsqrt": rsqrt, "sqrt": sqrt, "exp": exp, "log": log, "maximum": maximum, "minimum": minimum,
    "where": where, "reshape": reshape, "broadcast_to": broadcast_to, "expand_dims": expand_dims,
    "permute": permute, "transpose": transpose,
    "full": full, "zeros": zeros, "ones": ones, "arange": arange,
    "atomic_add": atomic_add, "atomic_xchg": atomic_xchg, "atomic_max": atomic_max, "bitcast": bitcast,
    "assume_divisible_by": assume_divisible_by,
}  # fmt: skip
# Names that are values, not operations: the real objects serve.
_PASSED_THROUGH = frozenset(("PaddingMode", "MemoryOrder", "MemoryScope", "Constant", "ConstantAnnotation", "DType",
                             "bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
                             "bool_", "float8_e4m3fn", "float8_e5m2"))  # fmt: skip


class _CtNamespace(types.ModuleType):
    """What the name ``ct`` means inside an interpreted kernel."""

    def __getattr__(self, name):
        if name in _PASSED_THROUGH:
            return getattr(ct, name)
        raise InterpreterUnsupportedError(
            f"ct.{name} is not supported by cutile_rms.interpret (supported: {', '.join(sorted(_EMULATED))})"
        )


_ct_emulated = _CtNamespace("cuda.tile (cutile_rms.interpret)")
for _name, _fn in _EMULATED.items():
    setattr(_ct_emulated, _name, _fn)


# ---------------------------------------------------------------------------------------------
# Rebinding kernels, and launching


@functools.lru_cache(maxsize=256)  # one entry per kernel or tile helper ever interpreted
def _rebind(fn: types.FunctionType) -> types.FunctionType:
    """A copy of fn whose globals map `ct` to the emulation, and each tile helper it calls to
    its own rebound copy. The real cuda.tile module is not touched."""
    env = dict(fn.__globals__)
    for name in fn.__code__.co_names:
        value = env.get(name)
        if value is ct:
            env[name] = _ct_emulated
        elif python_function(value) is not None:  # a tile helper or kernel of ours (cutile_rms._tile)
            env[name] = _rebind(python_function(value))
    new = types.FunctionType(fn.__code__, env, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


@functools.lru_cache(maxsize=256)
def _constant_params(fn) -> tuple[bool, ...]:
    hints = typing.get_type_hints(fn, include_extras=True)
    return tuple(
        any(isinstance(m, ct.ConstantAnnotation) for m in getattr(hints.get(p), "__metadata__", ()))
        for p in inspect.signature(fn).parameters
    )


def _kernel_arg(value, is_constant: bool):
    if is_constant:
        return value
    if isinstance(value, bool):
        return Tile(np.asarray(value), ct.bool_)
    if isinstance(value, int):
        return Tile(np.asarray(value), ct.int32)  # a runtime int arrives as int32
    if isinstance(value, float):
        return Tile(np.asarray(value), ct.float32)  # a runtime float arrives as fp32
    return Array(_to_numpy(value))


def launch(grid, kernel, args) -> None:
    """Run ``kernel`` over ``grid`` on the CPU, block after block, on CPU arrays (in place)."""
    if not isinstance(kernel, ct.kernel):
        raise TypeError(f"expected a @ct.kernel, got {type(kernel).__name__}")
    grid = tuple(int(g) for g in (grid if isinstance(grid, tuple) else (grid,)))
    dims = (grid + (1, 1, 1))[:3]
    if len(grid) > 3 or any(d < 1 for d in dims):
        raise InterpreterError(f"a grid has 1 to 3 dimensions, each >= 1; got {grid}")
    pyfunc = python_function(kernel)
    if pyfunc is None:
        raise TypeError("the interpreter runs kernels defined with cutile_rms._tile.tile_kernel (it needs the Python "
                        "function, which cuTile keeps private)")  # fmt: skip
    fn = _rebind(pyfunc)
    consts = _constant_params(pyfunc)
    if len(args) != len(consts):
        raise TypeError(f"{pyfunc.__name__} takes {len(consts)} arguments, got {len(args)}")
    kargs = [_kernel_arg(a, c) for a, c in zip(args, consts, strict=False)]
    blocks = list(itertools.product(range(dims[0]), range(dims[1]), range(dims[2])))
    _grid.dims = dims
    try:
        for b in blocks:
            _grid.bid = b
            fn(*kargs)
    finally:
        _grid.bid, _grid.dims = (0, 0, 0), (1, 1, 1)
