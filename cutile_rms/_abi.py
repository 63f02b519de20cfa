"""The kernel parameter buffer of cuTile's calling convention ``cutile_python_v2``.

What a launcher of our own (issue 21) writes for ``cuLaunchKernel``, spelled from the convention
that ``cuda.tile.compilation`` documents: compile-time constants take no space; an array is its
data pointer (8 bytes), then its shape, then its strides in elements, one int32 each (int64 for
an array indexed with int64), whatever the constraint proves constant; an int or bool scalar is
an int32, a float scalar a float32; every value naturally aligned, in parameter order. The
compile tier checks this against the parameter table of every distinct signature's cubin
(tests/aot.py). Not yet used by a launch path.
"""

import struct
from typing import NamedTuple

from cuda.tile import bool_, float32, int32, int64
from cuda.tile.compilation import ArrayConstraint, ScalarConstraint

__all__ = ["Slot", "buffer_size", "pack", "packer", "parameter_layout"]


class Slot(NamedTuple):
    """One value of the parameter buffer: its byte offset, size and struct format."""

    offset: int
    size: int
    fmt: str


_POINTER = "Q"


# Scalar types the convention spells (int64 for a scalar annotated so); no kernel takes others.
_SCALARS = {bool_: "i", int32: "i", int64: "q", float32: "f"}


def _scalar_format(dtype) -> str:
    if dtype not in _SCALARS:
        raise ValueError(f"no parameter layout for a {dtype} scalar (the convention spells int32, int64 and float32)")
    return _SCALARS[dtype]


def parameter_layout(params) -> tuple:
    """The Slots of a kernel signature's runtime values, in order: for each ArrayConstraint a
    pointer and 2 x ndim index values, for each ScalarConstraint one value; anything else (a
    compile-time constant) takes none."""
    formats = []
    for p in params:
        if isinstance(p, ArrayConstraint):
            index = "q" if p.index_dtype == int64 else "i"
            formats += [_POINTER] + [index] * (2 * p.ndim)
        elif isinstance(p, ScalarConstraint):
            formats.append(_scalar_format(p.dtype))
    slots, offset = [], 0
    for fmt in formats:
        size = struct.calcsize(fmt)
        offset = -(-offset // size) * size  # natural alignment
        slots.append(Slot(offset, size, fmt))
        offset += size
    return tuple(slots)


def buffer_size(layout) -> int:
    """Bytes of the parameter buffer (8-byte multiple)."""
    end = max((s.offset + s.size for s in layout), default=0)
    return -(-end // 8) * 8


def packer(layout) -> struct.Struct:
    """One struct for the whole buffer of layout: each slot's format at its offset, pad bytes
    between, the end padded to buffer_size; its pack / pack_into take the runtime values in
    order (pointers and index values as ints, floats as floats) in one call."""
    fmt, end = "<", 0
    for slot in layout:
        fmt += "x" * (slot.offset - end) + slot.fmt
        end = slot.offset + slot.size
    return struct.Struct(fmt + "x" * (buffer_size(layout) - end))


def pack(layout, values) -> bytes:
    """The parameter buffer of ``values``, one per slot (pointers and index values as ints,
    bools as ints, floats as floats)."""
    if len(values) != len(layout):
        raise ValueError(f"{len(values)} values for {len(layout)} parameter slots")
    return packer(layout).pack(*(int(v) if s.fmt in "iqQ" else float(v) for s, v in zip(layout, values, strict=True)))
