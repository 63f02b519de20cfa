"""CPU tier: the parameter buffer of cuTile's calling convention (cutile_rms._abi). The compile
tier checks the same layout against the cubin of every distinct kernel signature (tests/aot.py,
the EIATTR_KPARAM_INFO table); these tests pin the rule itself."""

import struct

import cuda.tile as ct
import pytest
from cuda.tile.compilation import ArrayConstraint, ScalarConstraint

from cutile_rms import _abi


def _array(ndim, index=ct.int32, **known):
    return ArrayConstraint(ct.bfloat16, ndim, index_dtype=index, stride_lower_bound_incl=0, alias_groups=[],
                           may_alias_internally=False, **known)  # fmt: skip


def test_layout_follows_the_documented_convention():
    """Arrays: pointer, shapes, strides (int32; int64 when indexed with int64), also where the
    constraint makes them constants; scalars 4 bytes; constants nothing; natural alignment."""
    params = [_array(2, stride_constant=[None, 1]), _array(1), ScalarConstraint(ct.float32), 4096, True,
              _array(3, ct.int64), ScalarConstraint(ct.int32)]  # fmt: skip
    layout = _abi.parameter_layout(params)
    assert [(s.offset, s.size) for s in layout] == [
        (0, 8), (8, 4), (12, 4), (16, 4), (20, 4),  # 2-D: pointer, 2 shapes, 2 strides (the unit one too)
        (24, 8), (32, 4), (36, 4),  # 1-D
        (40, 4),  # a float32 scalar; the two constants take nothing
        (48, 8), (56, 8), (64, 8), (72, 8), (80, 8), (88, 8), (96, 8),  # 3-D, int64 index, 8-byte aligned
        (104, 4),  # an int32 scalar
    ]  # fmt: skip
    assert _abi.buffer_size(layout) == 112
    with pytest.raises(ValueError, match="float64 scalar"):
        _abi.parameter_layout([ScalarConstraint(ct.float64)])


def test_packer_writes_the_same_bytes_as_pack_over_a_poisoned_buffer():
    """The one-struct packer CubinKernel writes into its kept buffer: pad bytes between slots (a
    pointer after an odd count of 4-byte values) and at the end are written too, as pack writes."""
    layout = _abi.parameter_layout([_array(2), ScalarConstraint(ct.float32), _array(1), ScalarConstraint(ct.int32)])
    assert any(b.offset > a.offset + a.size for a, b in zip(layout, layout[1:], strict=False))  # a gap
    values = [0x7F0012345600, 3, 4096, 8192, 1, 1e-6, 0x7F0000001000, 5, 1, 11]
    packer = _abi.packer(layout)
    buf = bytearray(b"\xff" * packer.size)
    packer.pack_into(buf, 0, *values)
    assert packer.size == _abi.buffer_size(layout) and bytes(buf) == _abi.pack(layout, values)


def test_pack_writes_each_value_at_its_slot():
    layout = _abi.parameter_layout([_array(2), ScalarConstraint(ct.float32), ScalarConstraint(ct.int32)])
    values = [0x7F0012345600, 3, 4096, 8192, 1, 1e-6, -7]
    buf = _abi.pack(layout, values)
    assert len(buf) == _abi.buffer_size(layout) == 32
    assert struct.unpack_from("<Q", buf, 0)[0] == values[0]
    assert struct.unpack_from("<4i", buf, 8) == tuple(values[1:5])
    assert struct.unpack_from("<f", buf, 24)[0] == pytest.approx(1e-6)
    assert struct.unpack_from("<i", buf, 28)[0] == -7
    with pytest.raises(ValueError, match="7 values for 6"):
        _abi.pack(layout[:-1], values)
