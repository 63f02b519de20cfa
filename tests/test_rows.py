"""The row-tile kernels (cutile_rms.rows: the default forward, and the backward of short rows), on
the GPU and through the interpreter: every output (y, rstd, dx, dw) against float64, NaN-poisoned before the launch, on
odd row counts, row lengths that take two or three pieces or overhang their pieces, short rows
many to a tile, and head views of a fused QKV projection read in place."""

import dataclasses
import inspect
import re

import numpy as np
import pytest
import torch

from cutile_rms import interpret, rms_norm, rms_norm_backward, rms_norm_forward
from cutile_rms._device import INTERPRET_DEVICE
from cutile_rms._tile import python_function
from cutile_rms.rmsnorm import kernels as CK
from cutile_rms.rmsnorm.launch import casting_code, forward_casting
from cutile_rms.rmsnorm.torch_impl import _rows_plan, launch_on_device, row_groups, rows3
from cutile_rms.rows import kernels as K
from cutile_rms.rows import launch as RL
from cutile_rms.rows import plan as rows_plan_module
from cutile_rms.rows.plan import (
    FLAT_MAX_ELEMS,
    FLAT_MIN_BYTES,
    FP32_BWD_MIN_BYTES,
    GATHERED_BWD_PAIR_ELEMS,
    LANES_ELEMS,
    LANES_OCCUPANCY,
    LONE_TILES_PER_SM,
    LONE_TMA_HINT,
    LONE_TMA_TILES_PER_SM,
    LONE_TMA_WARPS,
    LONG_PREFETCH_MAX_BLOCKS,
    LONG_PREFETCH_REGS,
    LONG_WARPS,
    LONG_WIDE_CHUNK_BYTES,
    MANY_TILES_WAVES,
    MAX_ROW_ELEMS,
    OPS,
    PADDED_BWD_MIN_SHARE,
    REGISTERS_PER_SM,
    SHORT_BWD_MIN_PIECE,
    SPLIT_BLOCKS,
    SPLIT_WARPS,
    aligned_backward_tile,
    backward_by_default,
    few_rows,
    flat_fit,
    flat_plan,
    lanes_fit,
    lanes_plan,
    lone_tiles,
    lone_tma,
    long_fit,
    long_plan,
    long_static_chunk,
    odd_static,
    pieces,
    plan,
    same_bits,
    short_backward,
    split_fit,
    split_plan,
    static_fit,
    unaligned,
    vector_lanes,
    wide_one_tile,
    word_static,
)
from cutile_rms.rows.plan import (
    LONG_UNROLL_MAX_CHUNKS as UNROLL_CHUNKS,
)
from tests.reference import check_all, dw_term_scale, make_inputs, nan_like, rms_norm_ref_grads, tolerances

EPS = 1e-6
SMS = 132


def test_signatures_are_the_kernels():
    """The launchers' one spelling of each kernel's parameters is the kernel's own."""
    assert {
        K.rows_fwd,
        K.rows_bwd,
        K.rows_fwd_long,
        K.rows_dot_long,
        K.rows_bwd_long,
        K.rows_bwd_long_onepass,
        K.rows_fwd_lanes,
        K.rows_bwd_lanes,
        K.rows_fwd_flat,
        K.rows_weight_shift,
        K.rows_dot_flat,
        K.rows_bwd_flat,
        K.rows_fwd_flat_split,
    } == {k for k, _ in RL.KERNELS.values()}
    for kernel, params in RL.KERNELS.values():
        assert tuple(inspect.signature(python_function(kernel)).parameters) == params


def test_pieces():
    assert pieces(18432) == (16384, 2048) and pieces(5376) == (4096, 1024, 256) and pieces(128) == (128,)
    assert pieces(2880) == (2048, 1024) and pieces(1) == (1,) and pieces(4097) == (4096, 1)
    for n in range(1, 70000, 89):
        p = pieces(n)
        assert 1 <= len(p) <= 3 and list(p) == sorted(p, reverse=True) and all(v & (v - 1) == 0 for v in p)
        assert n <= sum(p) < n + max(p)  # the padding is less than the largest piece


def test_plan_rules():
    """Tiles from bytes, warps from the tile, the occupancy from registers and bytes in flight,
    the grid from the op and the tile; nothing depends on the number of rows but the grid, the
    row check and, for few rows of 2048 elements or more, the forward tile's rows and with them
    its occupancy hint (FILL_TILES_PER_SM)."""
    p = plan("forward", 16384, 1, 4096, 2, SMS)  # two rows of 4096 per 16 KB tile, a block per tile
    assert (p.tile_a, p.tile_b, p.widths, p.warps, p.occupancy, p.grid) == (2, 1, (4096, 0, 0), 4, 4, 8192)
    assert not p.check_a and not p.check_n
    q = plan("forward", 524288, 1, 128, 2, SMS)  # QK-norm: 64 rows of 128 per 16 KB tile
    assert (q.tile_a, q.widths, q.warps, q.grid) == (64, (128, 0, 0), 4, 8192)
    h = plan("backward", 4096, 28, 128, 2, SMS)  # 28 heads: tiles of 4 heads (the largest power of two in 28)
    assert (h.tile_a, h.tile_b) == (8, 4)
    h = plan("forward", 4096, 28, 128, 2, SMS)  # the forward's rows of 256 bytes: tiles of one head
    assert (h.tile_a, h.tile_b, h.grid) == (64, 1, 64 * 28)  # (plan.ONE_HEAD_ROW_BYTES)
    h = plan("forward", 4096, 28, 64, 2, SMS)  # of 128 bytes: 4 heads
    assert (h.tile_a, h.tile_b) == (32, 4)
    g = plan("forward", 4096, 1, 5376, 2, SMS)  # pieces of at least 2 KB; one 16-bit row per tile, persistent
    assert g.widths == (4096, 2048, 0) and g.check_n and not g.check_a and g.tile_a == 1
    assert (g.warps, g.occupancy, g.grid, g.loop) == (4, 4, 4 * SMS, True)
    g = plan("forward", 12483, 1, 5376, 2, SMS)  # ... unless the tiles are many: a block a tile, no loop
    assert (g.widths, g.warps, g.occupancy, g.grid, g.loop) == ((4096, 2048, 0), 4, 4, 12483, False)
    e = plan("forward", 8192, 1, 8192, 2, SMS)  # one piece, 3 blocks per SM (a hint of 3): a block per tile
    assert (e.tile_a, e.warps, e.occupancy, e.grid) == (1, 4, 3, 8192)
    for n, es in ((8192, 4), (7168, 4), (8116, 4)):  # the line's 3 blocks of 4 warps: a hint of 3
        assert plan("forward", 8192, 1, n, es, SMS, any_length=True).hints == (3, 4), (n, es)
    assert plan("forward", 8192, 1, 8116, 2, SMS, long=False).hints == (2, 8)  # 8 warps: 85 registers spilled
    # even unaligned 16-bit rows of 12 KB or more: the static long forward, a block a row (session 29)
    u = plan("forward", 8192, 1, 8116, 2, SMS)
    assert (u.kind, u.static, u.unroll, u.widths[0], u.occupancy, u.grid) == ("long", True, True, 4096, 4, 8192)
    c = plan("forward", 21845, 1, 3072, 2, SMS)  # a 6 KB row per tile, 8 blocks of 4 warps per SM
    assert (c.tile_a, c.widths, c.warps, c.occupancy, c.grid) == (1, (2048, 1024, 0), 4, 8, 21845)
    assert plan("forward", 99, 1, 1536, 2, SMS).widths == (2048, 0, 0)  # a 3 KB row: one piece, 4 rows a tile
    assert plan("forward", 99, 1, 2560, 2, SMS).widths == (2048, 512, 0)  # 5 KB: two pieces down to 1 KB
    assert plan("forward", 99, 1, 3584, 2, SMS).widths == (4096, 0, 0)  # not three: a third piece under 2 KB
    # masked 16-bit multi-row tiles: 32 warps per SM; 8 warps and twice the rows where 4 warps need > 64 registers
    assert plan("forward", 99, 1, 1536, 2, SMS).hints == (8, 4) and plan("forward", 99, 1, 1536, 2, SMS).tile_a == 4
    assert plan("forward", 99, 1, 3584, 2, SMS).hints == (4, 8) and plan("forward", 99, 1, 3584, 2, SMS).tile_a == 4
    f32 = plan("forward", 12483, 1, 5376, 4, SMS)  # fp32 one-row tiles: a block per tile
    assert f32.grid == 12483 and f32.tile_a == 1
    big = plan("forward", 2048, 1, 18432, 2, SMS)  # aligned 16-bit, 12 KB or more, not a power of two: long rows
    want = ("long", (4096, 0, 0), 8, 4, 2048, K.LOADS_PLAIN, True, True)  # one block a row, static, unrolled
    assert (big.kind, big.widths, big.warps, big.occupancy, big.grid, big.loads, big.static, big.unroll) == want
    runtime = plan("forward", 2048, 1, 18432, 2, SMS, static=False)  # runtime layouts: a persistent grid
    assert (runtime.kind, runtime.occupancy, runtime.grid, runtime.static) == ("long", 4, 4 * SMS, False)
    mid = plan("forward", 9362, 1, 10240, 2, SMS)  # 20 KB: 8 blocks an SM keep the rows in flight within L2
    assert (mid.kind, mid.occupancy, mid.grid, mid.static, mid.unroll) == ("long", 8, 9362, True, True)
    assert plan("forward", 9362, 1, 7168, 2, SMS).occupancy == 4  # a last chunk past half a chunk: 4 blocks
    wide = plan("forward", 9, 1, 22528, 2, SMS)  # past five 8 KB chunks: five 16 KB ones, 2 blocks, the lookahead
    assert (wide.kind, wide.widths[0], wide.occupancy, wide.grid, wide.static, wide.unroll, wide.prefetch) == (
        "long", 8192, 2, 9, True, True, True)  # fmt: skip
    assert not plan("forward", 9, 1, 22528, 2, SMS, static=False).static  # runtime layouts: a persistent grid
    assert plan("forward", 2048, 1, 18432, 2, SMS, long=False).widths == (16384, 2048, 0)  # the row tiles' own
    assert plan("forward", 2048, 1, 18432, 2, SMS, tile_rows=1).kind == "tile"  # overrides: the row tiles
    assert plan("forward", 2979, 1, 22528, 2, SMS).kind == "long"  # past the row tiles: the core padded it to 32768
    assert plan("forward", 9, 1, 24576 + 2048, 2, SMS).kind == "long"  # 4 rows an SM overflow half of L2: wide chunks
    assert plan("forward", 9, 1, 24576 + 2048, 2, SMS, static=False) is None  # (runtime layouts: the core)
    assert plan("forward", 9, 1, 40960 + 16, 2, SMS) is None  # past five 16 KB chunks: the core
    assert plan("forward", 9, 1, 40960 + 8, 2, SMS, flat=None).kind == "flat"  # (8 mod 16, contiguous: flat)
    assert plan("forward", 9, 1, 32768, 2, SMS) is None  # a power of two: the core
    assert plan("forward", 9, 1, 5376, 2, SMS).kind == "tile"  # 10.5 KB: the row tiles
    assert plan("forward", 9, 1, 6144, 2, SMS).kind == "long"  # 12 KB: LONG_STATIC_MIN_BYTES
    assert plan("forward", 9, 1, 8192, 2, SMS).kind == "tile"  # a power of two: the row tiles
    assert plan("forward", 9, 1, 10240, 2, SMS, static=False).kind == "tile"  # runtime layouts: under LONG_MIN_BYTES
    assert plan("forward", 9, 1, 12288, 2, SMS, static=False).kind == "long"  # 24 KB: the runtime layouts' shortest
    assert plan("forward", 9, 1, 13288, 2, SMS).static  # a multiple of 8, not 16: static row tiles (16-byte loads)
    assert plan("forward", 9, 1, 13288, 2, SMS, static=False) is None  # runtime layouts load it 2 bytes: the core
    assert plan("forward", 9, 1, 12288, 4, SMS).kind == "tile"  # fp32: the row tiles
    assert plan("backward", 9, 1, 12288, 2, SMS) is None  # the backward: the core
    assert plan("forward", 1024, 1, 16384, 2, SMS) is None  # one block per SM and no padding: the core's tile
    # (from LONE_TILES_PER_SM tiles an SM the row tile without the loop: below)
    # fp32: one block per SM, the core pads 1/7 (from LONE_TMA_TILES_PER_SM tiles an SM plan.lone_tma: below)
    assert plan("forward", 1024, 1, 14336, 4, SMS, core_bits=True) is None
    assert plan("forward", 4096, 1, 14336, 2, SMS, long=False).occupancy == 2  # 16-bit row tiles: two blocks per SM
    assert plan("forward", 2049, 1, 1000, 4, SMS).check_n and plan("forward", 2049, 1, 1000, 4, SMS).check_a
    assert plan("forward", 2049, 1, 3000, 2, SMS, static=False) is None  # 16-bit, not a multiple of 16: the core
    assert plan("forward", 2049, 1, 3000, 2, SMS).widths == (2048, 1024, 0)  # ... unless on static layouts
    assert plan("forward", 2049, 1, 3000, 2, SMS, any_length=True).check_n
    assert plan("forward", 2049, 1, 96, 2, SMS, static=False) is None  # 16-bit, short, not a power of two: the core
    p = plan("forward", 2049, 1, 96, 2, SMS)  # ... unless on static layouts: one padded piece, 8 blocks
    assert (p.static, p.tile_a, p.widths, p.occupancy) == (True, 64, (128, 0, 0), 8)
    assert plan("forward", 2049, 1, 96, 4, SMS).widths == (64, 32, 0)
    b = plan("backward", 524288, 1, 128, 2, SMS)  # persistent: dW partials of grid x N
    assert b.grid == SMS * b.occupancy and b.tile_a == 32
    assert plan("forward", 64, 1, MAX_ROW_ELEMS["forward"] + 16, 2, SMS).kind == "long"  # long_fit
    # fp32: the static long forward up to 5 chunks of 16 KB, but line-aligned rows (session 49), else the core
    assert plan("forward", 64, 1, MAX_ROW_ELEMS["forward"] + 16, 4, SMS).kind == "long"
    for n in (MAX_ROW_ELEMS["forward"] + 32, 20480, 20484, 14592):
        assert plan("forward", 64, 1, n, 4, SMS) is None, n
    assert plan("forward", 64, 1, 14340, 4, SMS).kind == "long"  # (4 | N, the core's at one block an SM)
    assert plan("backward", 64, 1, MAX_ROW_ELEMS["backward"] + 4, 4, SMS) is None  # aligned: the core kernels
    assert plan("backward", 64, 1, MAX_ROW_ELEMS["backward"] + 1, 2, SMS).kind == "long"  # unaligned: long rows
    assert plan("backward", 64, 1, MAX_ROW_ELEMS["backward"] + 1, 4, SMS) is None  # fp32: the core (session 37)
    # few rows, forward: a tile's rows halve while the row tiles are fewer than FILL_TILES_PER_SM an
    # SM (bf16 4096: 2 rows a tile from 527 rows; 2048: 4 from 1055); shorter rows and views keep theirs
    assert [plan("forward", m, 1, 4096, 2, SMS).tile_a for m in (1, 32, 263, 526, 527, 16384)] == [1, 1, 1, 1, 2, 2]
    assert [plan("forward", m, 1, 2048, 2, SMS).tile_a for m in (1, 512, 1024, 1055, 4096)] == [1, 1, 2, 4, 4]
    assert plan("forward", 1, 1, 1024, 2, SMS).tile_a == 8 and plan("forward", 4096, 28, 128, 2, SMS).tile_a == 64
    assert plan("forward", 1, 1, 1024, 4, SMS).tile_a == 4  # fp32 1024 (4 KB rows): not measured, kept
    assert plan("forward", 1, 1, 4096, 2, SMS, fill=False).tile_a == 2  # (the fused add's and FP8's plans)
    assert plan("backward", 1, 1, 2048, 2, SMS).tile_a == 2  # (the backward: not measured)
    # one tile a block without the loop (ONE_TILE_THREAD_BYTES): one unpadded row of plain loads of
    # at most 64 bytes a thread, where the grid is the tiles
    assert [plan("forward", m, 1, 2048, 2, SMS).loop for m in (1, 132, 526, 527, 16384)] == [False] * 3 + [True] * 2
    assert not plan("forward", 256, 1, 2048, 4, SMS).loop and not plan("forward", 256, 1, 4096, 2, SMS).loop
    assert plan("forward", 256, 1, 4096, 4, SMS).loop and plan("forward", 256, 1, 8192, 2, SMS).loop  # 128 B
    assert plan("forward", 132, 1, 3072, 2, SMS).loop  # two pieces
    assert plan("forward", 4, 1, 1536, 2, SMS, tile_rows=1).loop  # a padded piece
    assert plan("forward", 4, 1, 2048, 2, SMS, tile_rows=1, loads=K.LOADS_GATHER).loop  # gathers
    assert plan("forward", 5000, 1, 2048, 2, SMS, tile_rows=1, persistent=True).loop  # fewer blocks than tiles
    assert not plan("forward", 4, 1, 2048, 2, SMS, tile_rows=1).loop
    assert plan("forward", 4, 1, 2048, 2, SMS, tile_rows=1, fill=False).loop  # (the fused add's plans)
    assert plan("forward", 2, 3, 2048, 2, SMS).loop and plan("backward", 1, 1, 4096, 2, SMS).loop  # views: not fill
    # many tiles (MANY_TILES_WAVES): the one-row 16-bit tiles of a persistent grid run a block a tile
    # without the loop from 12 times that grid's tiles on; each condition on its own
    waves = MANY_TILES_WAVES * 4 * SMS  # bf16 4097-6143: 4 blocks an SM
    for n in (5120, 4441, 4642, 5722, 4392, 4804):  # plain; odd, 2 mod 4 (gathered; 5722: a 2048 piece);
        # 8 mod 16, 4 mod 8 (pieces <= 1024)
        below, at = plan("forward", waves - 1, 1, n, 2, SMS), plan("forward", waves, 1, n, 2, SMS)
        assert (below.grid, below.loop) == (4 * SMS, True) and (at.grid, at.loop) == (waves, False), (n, below, at)
        assert (below.tile_a, below.widths, below.warps) == (at.tile_a, at.widths, at.warps)  # the same tile
    f = plan("forward", 2 * waves, 1, 10563, 2, SMS)  # 8192 + 2048 + 512 on 8 warps at 2 blocks
    assert (f.grid, f.loop, f.occupancy) == (2 * waves, False, 2)
    for n in (5528, 5212):  # 8- and 16-byte gathered rows whose last piece is 2048 keep the loop
        f = plan("forward", 2 * waves, 1, n, 2, SMS)
        assert f.loads == K.LOADS_GATHER and f.widths[1] == 2048 and (f.grid, f.loop) == (4 * SMS, True), f
    f = plan("forward", 100000, 1, 2114, 2, SMS)  # 2049-3071: already 8 blocks an SM (MAX_BLOCKS_PER_SM)
    assert (f.occupancy, f.grid, f.loop) == (8, 8 * SMS, True)
    f = plan("forward", waves, 1, 5120, 2, SMS, fill=False)  # (the fused add's plans)
    assert (f.grid, f.loop) == (4 * SMS, True)
    b = plan("backward", 2 * waves, 1, 5120, 2, SMS)  # the backward keeps its persistent grid
    assert b.grid < 2 * waves and b.loop
    f = plan("forward", 2 * waves, 3, 5120, 2, SMS)  # views (B > 1): not measured, persistent
    assert (f.grid, f.loop) == (4 * SMS, True)
    assert plan("forward", waves, 1, 5120, 2, SMS, persistent=True).grid == 4 * SMS  # (probes: asked)
    assert plan("forward", waves, 1, 5120, 4, SMS).loop  # fp32: a block a tile already, with the loop
    # lone tiles (LONE_TILES_PER_SM): one-row tiles of plain loads and unpadded pieces that leave one
    # block an SM run a block a tile without the loop from 8 tiles an SM; each condition on its own
    lone = LONE_TILES_PER_SM * SMS
    assert plan("forward", lone - 1, 1, 16384, 2, SMS) is None  # 16-bit 16384: the core's below (same bits)
    f = plan("forward", lone, 1, 16384, 2, SMS)
    assert (f.kind, f.tile_a, f.widths, f.warps, f.occupancy, f.grid, f.loop) == (
        "tile", 1, (16384, 0, 0), 8, 1, lone, False), f  # fmt: skip
    for n in (17408, 18432):  # fp32 16384 + a piece: a block a tile already, the loop dropped from the threshold
        below, at = plan("forward", lone - 1, 1, n, 4, SMS), plan("forward", lone, 1, n, 4, SMS)
        assert (below.grid, below.loop, at.grid, at.loop) == (lone - 1, True, lone, False), (n, below, at)
        assert (below.tile_a, below.widths, below.warps) == (at.tile_a, at.widths, at.warps)  # the same tile
        assert (at.tile_a, at.warps, sum(at.widths)) == (1, 8, n) and at.widths[1] > 0  # unpadded pieces
    # fp32 rows of one block an SM that the core takes: the core below LONE_TMA_TILES_PER_SM tiles an
    # SM, from there the core's tile as a row tile (TMA loads, one padded piece: the same bits), a
    # block a row without the loop at LONE_TMA_HINT; not for views (B > 1), the fused add's plans
    # (fill=False), an asked persistent grid, nor 16-bit rows (their plain lone tile above)
    tma = LONE_TMA_TILES_PER_SM * SMS
    for n in (16384, 15328, 14336):  # line-aligned (the others: the static long forward at every M, session 49)
        assert plan("forward", tma - 1, 1, n, 4, SMS, core_bits=True) is None, n
        f = plan("forward", tma, 1, n, 4, SMS, core_bits=True)
        assert (f.kind, f.tile_a, f.tile_b, f.widths, f.warps, f.occupancy, f.grid, f.loop, f.loads) == (
            "tile", 1, 1, (16384, 0, 0), LONE_TMA_WARPS, LONE_TMA_HINT, tma, False, K.LOADS_TMA), (n, f)  # fmt: skip
        assert f.check_n == (n != 16384) and not f.check_a and not f.static
        assert plan("forward", 4 * tma, 1, n, 4, SMS) is None, n  # a caller that cannot tell: the core
        for kw in ({"fill": False}, {"persistent": True}):
            assert plan("forward", 4 * tma, 1, n, 4, SMS, core_bits=True, **kw) is None, (n, kw)
        assert plan("forward", 4 * tma, 2, n, 4, SMS, core_bits=True) is None  # views: the core
    for n in (16380, 14340):
        plans = {plan("forward", m, 1, n, 4, SMS, core_bits=bits) for m in (tma - 1, tma, 4 * tma) for bits in (0, 1)}
        assert {(p.kind, p.static, p.prefetch, p.widths[0]) for p in plans} == {("long", True, True, 4096)}, plans
    assert lone_tma("forward", 1, 16384, 4, tma, SMS, True) and not lone_tma("forward", 1, 16384, 4, tma - 1, SMS, True)
    assert not lone_tma("forward", 1, 16384, 4, tma, SMS)  # (core_bits False)
    assert not lone_tma("forward", 1, 32768, 4, tma, SMS, True)  # wider tiles spill at the hint (LONE_TMA_MAX_ELEMS)
    assert not lone_tma("forward", 1, 16384, 2, tma, SMS, True)  # 16-bit: plain loads (lone_tiles)
    assert not lone_tma("backward", 1, 16384, 4, tma, SMS, True) and not lone_tma(
        "forward", 2, 16384, 4, tma, SMS, True
    )
    # the inputs whose bits the tile keeps (same_bits): aligned rows (start and strides of 16 bytes)
    # and a weight of x's dtype or none; a 16-bit weight beside fp32 rows changes the core's bits (s44f)
    assert same_bits(4, 4, 4096, [16384]) and same_bits(4, None, 4096, [16388, 3 * 16388])
    assert not same_bits(4, 2, 4096, [16384]) and not same_bits(4, 4, 4100, [16384])
    assert not same_bits(4, 4, 4096, [16385]) and same_bits(4, 4, 4096, [])  # (one row: no stride)
    assert plan("forward", tma, 1, 16384, 2, SMS).loop is False  # (16-bit lone tiles: any weight, s44f)
    f = plan("forward", 4 * lone, 1, 16385, 4, SMS, static=False)  # runtime layouts: a padded last piece
    assert f.kind == "tile" and f.check_n and f.occupancy == 1 and f.loop, f  # (not measured: the loop)
    assert plan("forward", 4 * lone, 1, 16384, 2, SMS, persistent=True) is None  # (an asked persistent grid)
    f = plan("forward", 4 * lone, 1, 15036, 4, SMS, any_length=True, long=False)  # gathered (4 mod 16): the loop
    assert f.loads == K.LOADS_GATHER and f.loop, f
    assert plan("forward", 4 * lone, 1, 16384, 2, SMS, fill=False) is None  # (the fused add's plans)
    assert plan("forward", 4 * lone, 1, 17408, 4, SMS, fill=False).loop
    assert plan("forward", 4 * lone, 2, 17408, 4, SMS).loop  # views (B > 1): not measured
    one = ("forward", 1, 1, (16384,), 16384, 2, K.LOADS_PLAIN, 1, lone, SMS)  # lone_tiles' arguments
    assert lone_tiles(*one) and not lone_tiles("backward", *one[1:])  # the backward: its own rules
    assert not lone_tiles(*one[:7], 2, *one[8:])  # two blocks an SM by the line: not a lone tile
    assert not lone_tiles(*one[:3], (16384, 2048), 18432, *one[5:])  # 16-bit: one piece (measured)
    assert lone_tiles(*one[:3], (16384, 2048), 18432, 4, *one[6:])  # fp32: unpadded pieces
    for m in (1, 7, 512, 100000):  # batch invariance: the tile of a row does not depend on M
        f = plan("forward", m, 1, 5376, 2, SMS)
        assert (f.tile_a, f.widths, f.warps, f.occupancy) == (1, (4096, 2048, 0), 4, 4)
        assert f.grid == (m if m >= MANY_TILES_WAVES * 4 * SMS else min(m, 4 * SMS))  # (many_tiles)
        f = plan("forward", m, 1, 7168, 2, SMS)  # the long forward: chunks, one block a row
        assert (f.kind, f.widths, f.warps, f.occupancy, f.grid) == ("long", (4096, 0, 0), 8, 4, m)


def test_plan_registers_within_the_compiled_need():
    """The forward plans of the rules ask for no more blocks per SM than their tiles compiled
    for without spilling (bench/probes/rows_candidates.json: the highest spill-free hint of
    each tile around the first rules' choices, compiled at the JIT's runtime constraints)."""
    import json
    from pathlib import Path

    cands = json.loads((Path(__file__).parents[1] / "bench/probes/rows_candidates.json").read_text())
    best = {}
    for c in cands:
        if c["op"] == "forward" and c["max_pieces"] == 3:
            key = (c["dtype"], c["n"], c["tile_rows"], c["warps"], pieces(c["n"]))
            best[key] = max(best.get(key, 0), c["occupancy"])
    checked = 0
    for dtype, n in {(k[0], k[1]) for k in best}:
        p = plan("forward", 4096, 1, n, 2 if dtype == "bfloat16" else 4, SMS)
        if p is None or p.static:  # compiled on runtime layouts; static ones differ (bf16 3000: 8 blocks, no stack)
            continue
        if p.loads == K.LOADS_TMA:  # (fp32 lone_tma: TMA loads without the loop, 80 registers at its hint, s43f)
            continue
        top = best.get((dtype, n, p.tile_a, p.warps, tuple(w for w in p.widths if w)))
        if top is not None:  # the rules' tile was among the compiled ones
            # the candidates hold power-of-two hints only; a hint of 3 (plan.ODD_HINT_MIN_REGS) lies
            # between 2 and 4: compiled at 144-168 registers without spills (session 19, SASS of
            # fp32 7168 and 8192, 16-bit 8192)
            assert p.occupancy <= top or (p.occupancy, top) == (3, 2), (dtype, n, p, top)
            checked += 1
    assert checked >= 12


def test_row_groups():
    qkv = torch.empty(2, 3, 3 * 8 * 16)
    q = qkv[..., : 8 * 16].view(2, 3, 8, 16)  # (batch, seq, heads, head_dim) of a fused projection
    assert row_groups(q) == (6, 8)
    v = rows3(q, 6, 8)
    assert v.data_ptr() == q.data_ptr() and v.stride() == (3 * 8 * 16, 16, 1)  # read in place
    assert row_groups(torch.empty(5, 7, 9)) == (35, 1) and row_groups(torch.empty(9)) == (1, 1)
    assert row_groups(torch.empty(4, 6).t()) is None  # strided rows: copied
    assert row_groups(torch.empty(4, 1, 6).expand(4, 5, 6)) is None  # broadcast rows: copied
    assert row_groups(torch.empty(4, 5, 6, 7).permute(1, 0, 2, 3)) is None  # three groups: copied


CASES = [
    ((37, 296), "one padded piece, odd M"),
    ((9, 5376), "three pieces"),
    ((7, 6144), "two pieces (the forward: long rows, static)"),
    ((257, 128), "short rows, a partial tile"),
    ((3, 2, 5, 64), "4-D, two groups merge"),
    ((2, 3001), "unaligned rows"),
    ((5, 3900), "one checked piece, the whole row"),
    ((11, 1144), "8 | N, not 16: static, four rows a tile"),
    ((3, 6152), "8 | N, not 16: static, three pieces"),
    ((3, 7124), "4 mod 8: the backward's one padded piece (PADDED_BWD_MIN_SHARE)"),
    ((5, 2880), "16 | N: the backward's two-row tiles at 2 blocks (aligned_backward_tile)"),
    ((5, 1280), "16 | N: the backward's two-row tiles at 4 blocks (aligned_backward_tile)"),
    ((5, 1442), "2 mod 4: the backward's two-row gathered tiles at 4 blocks (GATHERED_BWD_PAIR_ELEMS)"),
    ((3, 2830), "6 mod 8: the backward's two-row gathered tiles on 8 warps (GATHERED_BWD_PAIR_ELEMS)"),
    ((9, 560), "16 | N: the backward's 4-row tiles of pieces of 64 (SHORT_BWD_MIN_PIECE)"),
]


def _poisoned_run(x, dy, w, casting_mode, offset, plans=None, **plan_keywords):
    """Forward then backward through the framework-free launchers, all outputs NaN-poisoned
    (plans(device): the (forward, backward) plans to run, else the rules' with plan_keywords,
    rows.plan.plan's overrides)."""
    dev = x.device
    a, b = row_groups(x)
    n = x.shape[-1]
    code = casting_code(casting_mode, x.dtype == torch.float32)
    y = nan_like(x.shape, x.dtype, dev)
    rstd = nan_like(x.shape[:-1], torch.float32, dev)
    dx = nan_like(x.shape, x.dtype, dev)
    dw = None if w is None else nan_like(w.shape, w.dtype, dev)

    def run(device, stream):
        fp = RL.plan("forward", a, b, n, x.element_size(), device.num_sms, any_length=True, **plan_keywords)
        fp = plans(device)[0] if plans else fp
        fcode = forward_casting(code, x, w, y, offset)  # the torch API's choice (native llama where it can)
        shifted = lambda shape: torch.full(shape, float("nan"), dtype=w.dtype, device=dev)  # noqa: E731
        slots = lambda shape, zeroed: torch.zeros(shape, dtype=torch.int64, device=dev)  # noqa: E731
        RL.run_forward(fp, rows3(x, a, b), w, y.view(a, b, n), rstd.view(a, b), EPS, offset, fcode, device, stream,
                       empty=shifted, int64=slots)  # fmt: skip
        bp = RL.plan("backward", a, b, n, x.element_size(), device.num_sms, any_length=True, **plan_keywords)
        bp = plans(device)[1] if plans else bp
        if bp is not None:
            part = lambda shape: torch.full(shape, float("nan"), device=dev)  # noqa: E731
            RL.run_backward(bp, rows3(x, a, b), rows3(dy, a, b), w, rstd.view(a, b), dx.view(a, b, n), dw, offset,
                            code, part, device, stream, empty=shifted)  # fmt: skip

    launch_on_device(x, run)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return {"y": y, "rstd": rstd, "dx": dx, "dw": dw}


def _few_rows(x, dy) -> dict:
    """dW's floor over these cases' few rows (tests.reference.dw_term_scale): one large term can
    outweigh rms(dW) (bf16 (3, 18434), none casting: 1 element of 18434 off by 2u of its term)."""
    return {"dw": dw_term_scale(x, dy, EPS)}


def _check_planned(dev, shape, dtype, casting, has_weight, offset, gen, plan_of):
    """Forward and backward of fresh inputs on plan_of(op, a, b, n, elem_size, num_sms)'s plans,
    every output (NaN-poisoned first) against float64; x and dy are left as they were."""
    x, dy, w = make_inputs(shape, dtype, dev, has_weight=has_weight, offset=offset, generator=gen)
    x0, dy0 = x.clone(), dy.clone()
    a, b = row_groups(x)
    n, es = shape[-1], x.element_size()
    out = _poisoned_run(x, dy, w, casting, offset, lambda d: [plan_of(op, a, b, n, es, d.num_sms) for op in OPS])
    y, rstd, dx, dw = rms_norm_ref_grads(x, dy, w, EPS, offset)
    tol = tolerances(dtype, None if w is None else w.dtype, casting)
    check_all(out, {"y": y, "rstd": rstd, "dx": dx, "dw": dw}, tol, _few_rows(x, dy))
    assert torch.equal(x, x0) and torch.equal(dy, dy0)


# The casting modes are one computation in fp32 (casting_code): fp32 runs one of them.
DTYPE_CASTINGS = [(d, c) for d in (torch.bfloat16, torch.float16) for c in ("llama", "gemma", "none")]
DTYPE_CASTINGS.append((torch.float32, "gemma"))


@pytest.mark.parametrize("shape,what", CASES, ids=[c[1] for c in CASES])
@pytest.mark.parametrize("dtype,casting", DTYPE_CASTINGS, ids=[f"{d}-{c}" for d, c in DTYPE_CASTINGS])
@pytest.mark.parametrize("has_weight,offset", [(True, 0.0), (True, 1.0), (False, 0.0)], ids=["w", "w+1", "no-w"])
def test_rows_kernels(dev, shape, what, casting, dtype, has_weight, offset, gen):
    x, dy, w = make_inputs(shape, dtype, dev, has_weight=has_weight, offset=offset, generator=gen)
    x0, dy0 = x.clone(), dy.clone()
    out = _poisoned_run(x, dy, w, casting, offset)
    y, rstd, dx, dw = rms_norm_ref_grads(x, dy, w, EPS, offset)
    tol = tolerances(dtype, None if w is None else w.dtype, casting)
    check_all(out, {"y": y, "rstd": rstd, "dx": dx, "dw": dw}, tol, _few_rows(x, dy))
    assert torch.equal(x, x0) and torch.equal(dy, dy0)


# The backward that reads each block's next tile before it works on this one (plan.prefetch):
# the first tile read before the loop, the next one clamped to the last tile (to the last whole
# one, and the overhanging tile after the loop, on gathered loads; blocks with no tile at all,
# many tiles a block).
PREFETCH_CASES = [
    ((2, 3001), "one row a tile, one tile a block"),
    ((301, 689), "two-row gathered tiles, the last one overhangs A"),
    ((64, 1407), "three pieces, many tiles a block"),
    ((45, 1144), "static, four rows a tile"),
    ((3, 7, 136), "static short rows, two groups"),
    ((97, 64), "plain loads, tile overhangs A"),
]


@pytest.mark.parametrize("shape,what", PREFETCH_CASES, ids=[c[1] for c in PREFETCH_CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_prefetch_backward(dev, shape, what, dtype, gen):
    """y, rstd, dx and dw (NaN-poisoned first) of the row tiles with the prefetching backward,
    against float64."""
    casting = "gemma" if dtype == torch.float32 else "llama"

    def plan_of(op, a, b, n, es, sms):
        p = RL.plan(op, a, b, n, es, sms, any_length=True, lanes=False, long=False)
        return dataclasses.replace(p, prefetch=True) if op == "backward" else p

    _check_planned(dev, shape, dtype, casting, True, 0.0, gen, plan_of)


# Gathered multi-row backward tiles that overhang A run, with the prefetch, the tiles wholly inside A
# in one loop and the overhanging ones in a checked loop after it (kernels._whole_tiles, _tail_start),
# without it one loop with a branch a tile: grids of 1,
# 2 and 3 blocks and more blocks than tiles, with and without the prefetch; no whole tile at all
# (fewer rows than a tile), one, and many.
SPLIT_CASES = [((1, 689), "no whole tile"), ((3, 689), "one whole tile"), ((23, 689), "many tiles a block")]


@pytest.mark.parametrize("shape,what", SPLIT_CASES, ids=[c[1] for c in SPLIT_CASES])
@pytest.mark.parametrize("grid", [1, 2, 3, 13])
@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "no-prefetch"])
def test_gathered_backward_overhanging_a(dev, shape, what, grid, prefetch, gen):
    """dx and dw (NaN-poisoned first) of 2-row gathered bf16 tiles whose last tile overhangs A."""

    def plan_of(op, a, b, n, es, sms):
        p = RL.plan(op, a, b, n, es, sms, any_length=True, lanes=False, long=False, static=False)
        if op == "forward":
            return p
        p = dataclasses.replace(RL.plan(op, a, b, n, es, sms, tile_rows=2, static=False), grid=grid, prefetch=prefetch)
        assert p.tile_a == 2 and p.check_a and p.loads == K.LOADS_GATHER, p
        return p

    _check_planned(dev, shape, torch.bfloat16, "llama", True, 0.0, gen, plan_of)


# The forward that loads each block's next tile before it reduces and stores this one (rows_fwd's
# PREFETCH, a persistent grid of plain loads): grids of 3 blocks, so that blocks run several tiles,
# and blocks with no tile at all (their prefetch clamped to the last tile).
PREFETCH_FWD_CASES = [
    ((1000, 64), "the last tile overhangs A"),
    ((40, 1024), "many tiles a block"),
    ((9, 5376), "two pieces"),
    ((300, 136), "static padded rows, the last tile overhangs A"),
    ((2, 2048), "fewer tiles than blocks"),
    ((3, 7, 136), "static short rows, two groups"),
]


@pytest.mark.parametrize("shape,what", PREFETCH_FWD_CASES, ids=[c[1] for c in PREFETCH_FWD_CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_prefetch_forward(dev, shape, what, dtype, gen):
    """y and rstd (NaN-poisoned first) of the prefetching forward against float64."""
    casting = "gemma" if dtype == torch.float32 else "llama"

    def plan_of(op, a, b, n, es, sms):
        if op == "backward":
            return RL.plan(op, a, b, n, es, sms, any_length=True, lanes=False, long=False)
        p = RL.plan(op, a, b, n, es, 1, any_length=True, lanes=False, long=False, persistent=True, occupancy=3,
                    loads=K.LOADS_PLAIN, prefetch=True)  # fmt: skip
        tiles = -(-a // p.tile_a) * (b // p.tile_b)
        assert p.kind == "tile" and p.grid == min(3, tiles) and p.prefetch == (tiles > 3), p
        return dataclasses.replace(p, prefetch=True, grid=3, loop=True)

    _check_planned(dev, shape, dtype, casting, True, 0.0, gen, plan_of)


def test_prefetch_forward_has_no_residual():
    """The prefetching forward refuses a residual add before any launch (the fused add asks for
    plans without it)."""
    p = RL.plan("forward", 1 << 16, 1, 1024, 2, 132, persistent=True, prefetch=True)
    assert p.prefetch
    x = torch.zeros(8, 1, 1024, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="prefetch"):
        RL.run_forward(p, x, None, torch.empty_like(x), None, EPS, 0.0, 0, None, 0, residual=x, s=torch.empty_like(x))


@pytest.mark.parametrize("shape", [(37, 98), (5, 3, 71), (300, 149)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_prefetch_lanes_backward(dev, shape, dtype, gen):
    """The lanes backward with PREFETCH (the rule, asked here too) against float64, outputs
    poisoned, beside the forward on one SM (its loop over more tiles than blocks); the lanes
    forward has no prefetch: asking raises."""
    casting = "gemma" if dtype == torch.float32 else "llama"

    def plan_of(op, a, b, n, es, sms):
        if op == "forward":
            with pytest.raises(ValueError, match="no prefetch"):
                RL.plan(op, a, b, n, es, sms, lanes=True, prefetch=True)
            return RL.plan(op, a, b, n, es, 1, lanes=True, persistent=True)
        p = RL.plan(op, a, b, n, es, sms, lanes=True, prefetch=True)
        assert p.kind == "lanes" and p.prefetch
        return p

    _check_planned(dev, shape, dtype, casting, True, 0.0, gen, plan_of)


# Unaligned rows longer than the row tiles take: the long-row kernels (plan kind "long").
LONG_CASES = [
    ((3, 25263), "2-D, odd"),
    ((2, 3, 18433), "3-D, odd"),
    ((3, 18434), "2-D, even"),
    ((3, 20002), "2-D, even, runtime layouts"),
    ((3, 20006), "2-D, even, chunk count at run time"),
    ((3, 24822), "2-D, even, 16 KB chunks, the lookahead"),
]


@pytest.mark.parametrize("shape,what", LONG_CASES, ids=[c[1] for c in LONG_CASES])
@pytest.mark.parametrize("dtype,casting", DTYPE_CASTINGS, ids=[f"{d}-{c}" for d, c in DTYPE_CASTINGS])
@pytest.mark.parametrize("has_weight,offset", [(True, 0.0), (True, 1.0), (False, 0.0)], ids=["w", "w+1", "no-w"])
def test_long_rows(dev, shape, what, casting, dtype, has_weight, offset, gen):
    """y, rstd, dx and dw (NaN-poisoned first) of the long-row kernels against float64; x and dy
    are left as they were. Even 16-bit rows run the forward on static layouts (plan.static_fit),
    unrolled or not (plan.LONG_UNROLL_WORD_ELEMS), and on the runtime ones that a process past
    rows.launch.STATIC_LAYOUTS falls back to."""
    n, es = shape[-1], torch.empty((), dtype=dtype).element_size()
    static = "runtime" not in what
    bwd = plan("backward", 3, 1, n, es, SMS)  # (rows read as rows: flat=False)
    if es == 2:
        assert bwd.kind == "long" and not bwd.static  # the long backward: runtime layouts (session 23)
    else:
        assert bwd is None  # fp32: the core's split kernels (session 37); the long backward on probes' plans
    fwd = plan("forward", 3, 1, n, es, SMS)
    one_row = long_static_chunk(n, es, SMS)  # a block a row, the chunk count compiled in (session 29)
    if es == 2:
        assert (fwd.kind, fwd.static) == ("long", static_fit(n, es))
    else:  # fp32: the static long forward with the lookahead up to 5 chunks of 16 KB (session 49), else the core's
        assert (fwd.kind, fwd.static, fwd.prefetch) == ("long", True, True) if n <= 20480 else fwd is None, fwd
        assert bool(one_row) == (n <= 20480)
    assert es != 2 or fwd.unroll == (fwd.static and (n % 4 == 2 or bool(one_row)))  # else: 32-bit loads
    many = plan("forward", 99999, 1, n, es, SMS)
    assert es != 2 or ((many.grid == 99999) == bool(one_row) and many.widths[0] == (one_row or 4096))

    def plan_of(*args):
        return long_plan(*args, static=static, unroll=False if "run time" in what else None)

    _check_planned(dev, shape, dtype, casting, has_weight, offset, gen, plan_of)


def _with_and_without_lookahead(dev, shape, dtype, gen, plan_of):
    """(x, [(y, rstd) without, (y, rstd) with]) of a llama forward on plan_of(prefetch, a, b, n,
    es, sms)'s plans, NaN-poisoned first, the second checked against float64."""
    x, _, w = make_inputs(shape, dtype, dev, has_weight=True, offset=0.0, generator=gen)
    a, b = row_groups(x)
    n = shape[-1]
    outs = []
    for prefetch in (False, True):
        y, rstd = nan_like(x.shape, dtype, x.device), nan_like(x.shape[:-1], torch.float32, x.device)

        def run(device, stream, prefetch=prefetch, y=y, rstd=rstd):
            p = plan_of(prefetch, a, b, n, x.element_size(), device.num_sms)
            RL.run_forward(p, rows3(x, a, b), w, y.view(a, b, n), rstd.view(a, b), EPS, 0.0, CK.CAST_LLAMA, device,
                           stream, empty=lambda shape: torch.empty(shape, dtype=dtype, device=x.device))  # fmt: skip

        launch_on_device(x, run)
        outs.append((y, rstd))
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    yr, rr, _, _ = rms_norm_ref_grads(x, x, w, EPS)
    check_all({"y": outs[1][0], "rstd": outs[1][1]}, {"y": yr, "rstd": rr}, tolerances(dtype, dtype, "llama"))
    return x, outs


# The long forward's second pass with and without its lookahead (kernels.rows_fwd_long's PREFETCH):
# rows of whole chunks and a last one past N, aligned (plain loads) and not (gathers), a row
# shorter than one chunk (no whole chunk: the plain pass), fp32 at the rules' 16 KB chunks (past the
# row tiles: session 49) and at 8 KB.
LONG_PREFETCH_CASES = [
    ((9, 6144), torch.bfloat16, None, "aligned, a whole chunk and a half"),
    ((7, 20690), torch.float16, None, "2 mod 4, 16 KB chunks"),
    ((5, 12288), torch.bfloat16, 4096, "whole chunks only"),
    ((2, 3, 10001), torch.bfloat16, 2048, "odd, 3-D"),
    ((3, 3000), torch.float16, 4096, "shorter than a chunk"),
    ((5, 9000), torch.float32, None, "fp32, 8 KB chunks"),
    ((5, 18856), torch.float32, None, "fp32, 16 KB chunks"),
    ((3, 25984), torch.bfloat16, None, "16 | N past long_fit, 16 KB chunks"),
    ((3, 27000), torch.float16, None, "8 mod 16 past long_fit, 16 KB chunks"),
]


@pytest.mark.parametrize("shape,dtype,chunk,what", LONG_PREFETCH_CASES, ids=[c[3] for c in LONG_PREFETCH_CASES])
@pytest.mark.parametrize("static", [True, False], ids=["static", "runtime"])
def test_long_forward_prefetch_same_bits(dev, shape, dtype, chunk, what, static, gen):
    """The long forward's second pass with the lookahead (chunk j + 1 loaded before chunk j is
    stored, plan.LONG_PREFETCH_*) gives the bits of the pass without it wherever the two share a
    row's rstd, the chunk count compiled in or at run time, 3 blocks over more rows; y and rstd
    against float64. The rstd itself may differ by an ulp: the two kernels are compiled apart, and
    tileiras may lay the first pass's accumulator out differently, which orders the block's sum
    differently (bf16 6144, static, on the H200: 1 row in 9 by 2 ulp). A plan takes the lookahead by
    N and dtype only, so a row's bits do not depend on the rows beside it."""

    def plan_of(prefetch, a, b, n, es, sms):
        p = long_plan("forward", a, b, n, es, sms, chunk=chunk, static=static, prefetch=prefetch)
        assert (p.kind, p.prefetch) == ("long", prefetch), p
        return dataclasses.replace(p, grid=3, occupancy=2)  # (the lookahead alone: one register cap)

    x, outs = _with_and_without_lookahead(dev, shape, dtype, gen, plan_of)
    es = x.element_size()
    same = outs[0][1].view(torch.int32) == outs[1][1].view(torch.int32)  # rows of one rstd
    assert same.float().mean() >= 0.5, same
    bits = torch.int32 if es == 4 else torch.int16
    assert torch.equal(outs[0][0][same].view(bits), outs[1][0][same].view(bits))


# The flat rows forward (plan kind "flat": rows contiguous end to end, read as one flat array, each
# row's 16-byte aligned interior in chunks, its head and tail element by element): rows of each
# alignment class, 2-D and 3-D, several chunks a row and a last one past the interior, more rows
# than blocks (rows of every residue r N mod 8 in one block).
FLAT_CASES = [
    ((37, 8197), 1024, "odd, 37 rows on 3 blocks"),
    ((2, 5, 6146), 1024, "3-D, 2 mod 4"),
    ((9, 4100), None, "4 mod 8, the rules' chunk"),
    ((11, 2001), 512, "odd, short"),
]


@pytest.mark.parametrize("shape,chunk,what", FLAT_CASES, ids=[c[2] for c in FLAT_CASES])
@pytest.mark.parametrize("dtype,casting", DTYPE_CASTINGS, ids=[f"{d}-{c}" for d, c in DTYPE_CASTINGS])
@pytest.mark.parametrize("has_weight,offset", [(True, 0.0), (True, 1.0), (False, 0.0)], ids=["w", "w+1", "no-w"])
@pytest.mark.parametrize("static", [True, False], ids=["static", "runtime"])
def test_flat_rows(dev, shape, chunk, what, casting, dtype, has_weight, offset, static, gen):
    """Every output of the flat rows forward and backward (their shifted weights NaN-poisoned
    before rows_weight_shift writes them), the forward's row length compiled in or at run time,
    the backward on one or two groups of V rows (rows of every head length in a group; blocks
    with no rows), reading each row's chunk before it works on the last one or not, the
    forward's 16-bit rows at the probes' chunks with the second pass's lookahead (the rules' chunk:
    without, at these lengths), against float64."""

    def plan_of(op, a, b, n, es, sms):
        if op == "backward":
            p = flat_plan(op, a, b, n, es, sms, chunk=chunk, prefetch=static, dot_chunk=chunk and 2 * chunk)
            assert (p.kind, p.lanes, p.grid % p.lanes, p.prefetch) == ("flat", 16 // es, 0, static)
            return dataclasses.replace(p, grid=p.lanes * (1 + static))
        lookahead = chunk is not None and es == 2  # the second pass's lookahead (FLAT_PREFETCH_*: 16-bit)
        p = flat_plan(op, a, b, n, es, sms, chunk=chunk, static=static, prefetch=lookahead)
        whole = (n - 2 * (p.lanes - 1)) // p.widths[0]  # chunks every row's interior holds
        assert (p.kind, p.lanes, p.static, p.prefetch) == ("flat", 16 // es, static and whole >= 2, lookahead)
        return dataclasses.replace(p, grid=3)

    _check_planned(dev, shape, dtype, casting, has_weight, offset, gen, plan_of)


@pytest.mark.parametrize("shape,chunk", [((37, 8197), 1024), ((2, 5, 6146), 1024), ((7, 24577), 4096)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("static", [True, False], ids=["static", "runtime"])
def test_flat_forward_prefetch_same_bits(dev, shape, chunk, dtype, static, gen):
    """The flat forward's second pass with the lookahead (PREFETCH: chunk j + 1 loaded before chunk
    j is stored, plan.FLAT_PREFETCH_*) gives the bits of the pass without it, y and rstd, the row
    length compiled in or at run time, 3 blocks over more rows; y and rstd against float64."""

    def plan_of(prefetch, a, b, n, es, sms):
        p = flat_plan("forward", a, b, n, es, sms, chunk=chunk, static=static, prefetch=prefetch)
        assert (p.kind, p.prefetch, p.static) == ("flat", prefetch, static), p
        return dataclasses.replace(p, grid=3)

    _, outs = _with_and_without_lookahead(dev, shape, dtype, gen, plan_of)
    assert torch.equal(outs[0][1].view(torch.int32), outs[1][1].view(torch.int32))
    assert torch.equal(outs[0][0].view(torch.int16), outs[1][0].view(torch.int16))


def test_long_prefetch_rule():
    """The static long forward (a block a row) takes the second pass's lookahead where it runs at
    LONG_PREFETCH_MAX_BLOCKS blocks an SM, its occupancy capped to the blocks that hold two chunks
    (LONG_PREFETCH_REGS): 16 KB chunks at 2 (16-bit and fp32 rows); never 8 KB chunks (4 or 8
    blocks), runtime layouts, a persistent grid or the backward."""
    cases = {(20690, 2): (8192, 2, True), (24822, 2): (8192, 2, True), (30450, 2): (8192, 2, True),
             (15002, 2): (4096, 4, False), (18432, 2): (4096, 4, False), (12288, 2): (4096, 8, False),
             (15002, 4): (4096, 2, True), (13406, 4): (4096, 2, True), (18856, 4): (4096, 2, True),
             (19001, 4): (4096, 2, True)}  # fmt: skip
    for (n, es), (chunk, blocks, prefetch) in cases.items():
        p = plan("forward", 99999, 1, n, es, SMS)
        assert (p.kind, p.grid, p.widths[0], p.occupancy, p.prefetch) == ("long", 99999, chunk, blocks, prefetch), p
        q = plan("forward", 99999, 1, n, es, SMS, static=False)  # (fp32: the row tiles or the core there)
        assert q is None or not q.prefetch, q
        assert not long_plan("forward", 99999, 1, n, es, SMS, persistent=True).prefetch
        assert not long_plan("forward", 99999, 1, n, es, SMS, occupancy=4).prefetch
        assert not long_plan("backward", 99999, 1, n, es, SMS).prefetch
        hold = REGISTERS_PER_SM // (32 * p.warps * (p.widths[0] * es // (32 * p.warps) + LONG_PREFETCH_REGS))
        assert p.prefetch == (hold <= LONG_PREFETCH_MAX_BLOCKS)
    p = plan("forward", 99999, 1, 30450, 2, SMS)  # a weight or y wider than x: without it (the launcher)
    x, w16, w32 = torch.empty(3, dtype=torch.bfloat16), torch.empty(3, dtype=torch.bfloat16), torch.empty(3)
    assert RL.narrow_lookahead(p, x, w16, x).prefetch and RL.narrow_lookahead(p, x, None, x).prefetch
    assert not RL.narrow_lookahead(p, x, w32, x).prefetch and not RL.narrow_lookahead(p, x, w16, w32).prefetch
    assert not long_plan("forward", 99999, 1, 30450, 2, SMS, persistent=True, static=False).prefetch


def test_flat_rule():
    """The flat forward takes 16-bit odd, 2 mod 4, 4 mod 8 and 8 mod 16 rows of FLAT_MIN_BYTES[2][their
    low bit] or more where the caller allows it (flat=None: rows contiguous end to end); a block a row,
    8 KB chunks at 4 blocks an SM up to 5 chunks, past that 8 KB chunks at 2 with the second pass's
    lookahead (FLAT_PREFETCH_*) up to 128 KB rows, 16 KB chunks at 2 without it beyond, the row
    length compiled in where two whole chunks fit a row's interior (8 mod 16 rows past five 16 KB
    chunks: up to that, the static long forward, test_long_static_chunk); fp32 odd and 2 mod 4
    rows from 64000 bytes while 2 an SM fit FLAT_FP32_L2_SHARE of L2 (16 KB chunks at 2 blocks),
    but those of the split flat forward (past SPLIT_L2_SHARE: test_split_rule); never 16 | N
    16-bit or 4 | N fp32 rows, shorter rows or a caller that did not allow it. The flat backward
    (FLAT_BWD_*) takes 16-bit rows from 16 KB that are not 16-byte aligned, odd ones and even ones
    past CORE_BWD_MAX_ELEMS, where the caller allows it and the one-pass long backward does not run
    them: 4 KB chunks (the row dot's 8 KB) on 4 warps at 4 blocks an SM, row groups a multiple of 8
    whose blocks fit the SMs at once, the prefetch."""
    cases = {12001: (4096, 4, False), 12003: (4096, 4, False), 24577: (4096, 2, True), 57085: (4096, 2, True),
             200001: (8192, 2, False), 32002: (4096, 2, True), 63566: (4096, 2, True), 41000: (4096, 2, True),
             50004: (4096, 2, True), 65535: (4096, 2, True), 65537: (8192, 2, False)}  # fmt: skip
    for n, (chunk, blocks, prefetch) in cases.items():
        assert flat_fit(n, 2, num_sms=SMS) and n * 2 >= FLAT_MIN_BYTES[2][(2 * n) & -(2 * n)]
        p = plan("forward", 1176, 1, n, 2, SMS, flat=None)
        want = ("flat", chunk, blocks, 1176, True, 8, prefetch)
        assert (p.kind, p.widths[0], p.occupancy, p.grid, p.static, p.lanes, p.prefetch) == want, (n, p)
        assert not plan("forward", 1176, 1, n, 2, SMS, flat=None, static=False).static  # runtime layouts
        q = plan("forward", 1176, 1, n, 2, SMS)
        assert q is None or q.kind != "flat"  # flat=False (the default)
    for n in (16001, 17425, 18002, 20481, 22338, 22341):  # fp32 odd and 2 mod 4 from 64000 bytes (past 22341: split)
        # (16 KB chunks; up to 20480 elements on static layouts the static long forward: LONG_FP32_*)
        past = n > UNROLL_CHUNKS * LONG_WIDE_CHUNK_BYTES // 4
        p = plan("forward", 1176, 1, n, 4, SMS, flat=None, static=past)
        assert flat_fit(n, 4, num_sms=SMS) and (p.kind, p.widths[0], p.occupancy, p.static, p.prefetch) == (
            "flat",
            4096,
            2,
            past,
            False,  # (the lookahead's rounded tail square: FLAT_PREFETCH_*)
        ), n
        if not past:
            p = plan("forward", 1176, 1, n, 4, SMS, flat=None)
            assert (p.kind, p.grid, p.static, p.prefetch) == ("long", 1176, True, True), (n, p)
    # fp32 past the rows whose 2 an SM fit 0.7 of L2 (34754 on 132 SMs: 36.7 MB), shorter, aligned
    for n in (34754, 34755, 34758, 37233, 41001, 15999, 14002, 20004):
        p = plan("forward", 1176, 1, n, 4, SMS, flat=None)
        assert not flat_fit(n, 4, num_sms=SMS) and (p is None or p.kind != "flat"), n
    assert flat_fit(41001, 4, num_sms=78) and not flat_fit(63019, 4, num_sms=78)  # fewer SMs: longer rows fit L2
    for n in (8197, 13933, 16387, 16386, 34020, 57085, 200001):
        p = plan("backward", 1176, 1, n, 2, SMS, flat=None)
        chunks = -(-n // 2048)
        want = ("flat", (2048, 4096, 0), 4, 4, 8, True, False, 0)
        assert (p.kind, p.widths, p.warps, p.occupancy, p.lanes, p.prefetch, p.static, p.grid % 8) == want, (n, p)
        # the most groups whose blocks fit the SMs at once (the longest rows: 8 groups, two waves)
        assert (p.grid * chunks <= SMS * 4 < (p.grid + 8) * chunks) or (p.grid == 8 and n == 200001), (n, p)
        assert plan("backward", 1176, 1, n, 2, SMS).kind == "long"  # flat=False: rows read as rows
    assert plan("backward", 5, 1, 34020, 2, SMS, flat=None).grid == 8  # at least the rows, a multiple of 8
    for n in (16444, 20002):  # on 78 SMs the one-pass long backward holds these even rows: it keeps them
        p = plan("backward", 1176, 1, n, 2, 78, flat=None)
        assert flat_fit(n, 2, "backward", num_sms=78) and (p.kind, p.onepass) == ("long", True), (n, p)
    assert plan("backward", 1176, 1, 17001, 2, 78, flat=None).kind == "flat"  # odd: no one-pass
    for n, es in ((8191, 2), (8198, 2), (16382, 2), (16384, 2), (34024, 2), (34020, 4), (27983, 4)):
        p = plan("backward", 1176, 1, n, es, SMS, flat=None)  # short, even to the core's, aligned, fp32
        assert not flat_fit(n, es, "backward", num_sms=SMS) and (p is None or p.kind != "flat"), (n, es, p)
    assert flat_fit(100001, 2, num_sms=SMS)  # (16-bit rows: no L2 bound)
    top = FLAT_MAX_ELEMS // 8  # the longest row a launch's parts hold (rows.launch)
    assert flat_fit(top, 2, num_sms=SMS) and not flat_fit(top + 2, 2, num_sms=SMS)
    with pytest.raises(ValueError, match="at most 16384"):
        flat_plan("forward", 9, 1, 57085, 2, SMS, chunk=2**15)  # past the exact sum's lanes
    small = flat_plan("forward", 99, 1, 8197, 2, SMS)  # a probe's: 8 KB chunks at 4 blocks, N at run time
    assert (small.widths[0], small.occupancy, small.static) == (4096, 4, False)
    for n, es in ((11999, 2), (31998, 2), (29180, 2), (36940, 2), (8197, 2), (8192 + 8, 2), (25992, 2), (32768, 2),
                  (14001, 4), (14002, 4), (41001, 4), (60002, 4), (20004, 4)):  # fmt: skip
        p = plan("forward", 99, 1, n, es, SMS, flat=None)
        assert not flat_fit(n, es, num_sms=SMS) and (p is None or p.kind != "flat"), (n, es)
    assert plan("forward", 99, 1, 24577, 2, SMS, flat=None, tile_rows=1).kind != "flat"  # overridden
    assert plan("forward", 99, 1, 8197, 2, SMS, flat=True, persistent=True).grid == 99  # (at most SMS x 4)
    with pytest.raises(ValueError, match="at least 16"):
        flat_plan("forward", 9, 1, 15, 2, SMS)


@pytest.mark.parametrize("dtype,n", [(torch.bfloat16, 24577), (torch.float16, 30001)], ids=str)
def test_flat_rows_in_parts(dev, monkeypatch, dtype, n, gen):
    """Inputs past rows.launch.FLAT_MAX_ELEMS elements run in parts of a multiple of 16 bytes /
    element rows, forward and backward: the same bits as one launch (but dW, whose partials the
    parts group otherwise: against float64); a row's bits do not depend on the rows beside it
    (batch invariance: the first rows alone, and any rows' count)."""
    x, dy, w = make_inputs((45, n), dtype, dev, generator=gen)
    with torch.no_grad():
        whole = rms_norm_forward(x, w, EPS)
        grads = rms_norm_backward(x, dy, w, whole[1])
        monkeypatch.setattr(RL, "FLAT_MAX_ELEMS", 17 * n)
        parts = rms_norm_forward(x, w, EPS)
        grads_parts = rms_norm_backward(x, dy, w, whole[1])
        alone = rms_norm_forward(x[:13], w, EPS)
        dx_alone, _ = rms_norm_backward(x[:13], dy[:13], w, whole[1][:13])
    assert torch.equal(whole[0], parts[0]) and torch.equal(whole[1], parts[1])
    assert torch.equal(alone[0], whole[0][:13]) and torch.equal(alone[1], whole[1][:13])
    assert torch.equal(grads[0], grads_parts[0]) and torch.equal(dx_alone, grads[0][:13])  # dx
    _, _, _, dwr = rms_norm_ref_grads(x, dy, w, EPS)
    check_all({"dw": grads_parts[1]}, {"dw": dwr}, tolerances(dtype, dtype, "llama"), _few_rows(x, dy))  # 3 parts' dW


@pytest.mark.parametrize("dtype,n", [(torch.bfloat16, 24577), (torch.float16, 33333), (torch.bfloat16, 32770)],
                         ids=str)  # fmt: skip
def test_flat_rows_position_invariance(dev, monkeypatch, dtype, n, gen):
    """A row's bits on the flat forward do not depend on where it sits (batch invariance): its
    loads start where r N mod 8 puts them, and its sum's lanes add exactly (kernels._exact_sum).
    One row copied to 9 consecutive rows (every head length r N mod 8 takes: all 8 for odd N, the
    even ones for 2 mod 4) gives 9 equal outputs; rows k.. of a batch alone (a base off 16 bytes
    on the GPU: narrower loads) give what they give in it."""
    kinds = []
    real = RL.run_forward
    monkeypatch.setattr(RL, "run_forward", lambda p, *a, **k: kinds.append(p.kind) or real(p, *a, **k))
    x, _, w = make_inputs((21, n), dtype, dev, generator=gen)
    x[5:13] = x[4]  # rows 4-12 equal: 9 rows, every residue of r N mod 8 (odd N; the even ones of even N)
    with torch.no_grad():
        y, rstd = rms_norm_forward(x, w, EPS)
        assert kinds[-1] == "flat"
        for r in range(5, 13):
            assert torch.equal(y[r], y[4]) and torch.equal(rstd[r], rstd[4]), r
        for k in (1, 3, 8):
            yk, rk = rms_norm_forward(x[k:], w, EPS)
            assert kinds[-1] == "flat" and torch.equal(yk, y[k:]) and torch.equal(rk, rstd[k:]), k
    yr, rr, _, _ = rms_norm_ref_grads(x, x, w, EPS)
    check_all({"y": y, "rstd": rstd}, {"y": yr, "rstd": rr}, tolerances(dtype, dtype, "llama"))


# The split flat forward (plan kind "split": rows contiguous end to end, each row's segments on
# SPLIT blocks that exchange their sums, each segment's 16-byte interior loaded from the flat array,
# its head and tail element by element): odd and 2 mod 4 rows, 2-D and 3-D, a last segment of a few
# vectors, fewer groups than rows (the loop), the rules' plan.
SPLIT_CASES = [
    ((5, 1001), 256, None, "odd, 4 segments"),
    ((2, 3, 1050), 256, None, "3-D, 2 mod 4, last segment of 26"),
    ((13, 999), 128, 2, "odd, 8 segments, 2 groups over 13 rows"),
    ((3, 29791), None, None, "the rules' plan"),
]


SPLIT_DTYPES = [(torch.float32, "gemma"), (torch.bfloat16, "llama"), (torch.float16, "none")]


@pytest.mark.parametrize("shape,chunk,groups,what", SPLIT_CASES, ids=[c[3] for c in SPLIT_CASES])
@pytest.mark.parametrize("dtype,casting", SPLIT_DTYPES, ids=str)
@pytest.mark.parametrize("has_weight,offset", [(True, 0.0), (True, 1.0), (False, 0.0)], ids=["w", "w+1", "no-w"])
def test_split_flat_forward(dev, shape, chunk, groups, what, dtype, casting, has_weight, offset, gen):
    """y and rstd (NaN-poisoned first) of the split flat forward against float64; the shifted
    weights NaN-poisoned before rows_weight_shift writes them. In the interpreter each block polls
    once (POLLS), so the blocks of a group before its last put their rows aside and finish them
    from the slots or from every segment's partial computed themselves: that path too."""
    if chunk is None and dtype != torch.float32:
        pytest.skip("the rules' plan: fp32 rows only (plan.split_fit)")
    x, dy, w = make_inputs(shape, dtype, dev, has_weight=has_weight, offset=offset, generator=gen)
    x0 = x.clone()
    a, b = row_groups(x)
    n, es = shape[-1], x.element_size()

    def plans(device):
        p = split_plan("forward", a, b, n, es, device.num_sms, chunk=chunk)
        if chunk is None and split_fit(n, es, num_sms=device.num_sms):  # (the interpreter's few SMs: not)
            assert p == plan("forward", a, b, n, es, device.num_sms, flat=None), p
        splits = -(-n // p.widths[0])
        assert (p.kind, p.lanes, p.grid % splits) == ("split", 16 // es, 0), p
        return (dataclasses.replace(p, grid=groups * splits) if groups else p), None

    out = _poisoned_run(x, dy, w, casting, offset, plans)
    y, rstd, _, _ = rms_norm_ref_grads(x, dy, w, EPS, offset)
    tol = tolerances(dtype, None if w is None else w.dtype, casting)
    check_all({"y": out["y"], "rstd": out["rstd"]}, {"y": y, "rstd": rstd}, tol)
    assert torch.equal(x, x0)


def _split_rule_rows(dev, monkeypatch, request, n, n_interpreted):
    """(n, kinds): the row length a split flat forward test runs where the rules plan the split flat
    forward (the interpreter's 4 SMs hold 4 segments at most: n_interpreted, on the rule widened to
    it), and the kinds of the rows plans run_forward runs from here on."""
    kinds = []
    real = RL.run_forward
    monkeypatch.setattr(RL, "run_forward", lambda p, *a, **k: kinds.append(p.kind) or real(p, *a, **k))
    if dev == "cpu":
        rows_plan_module.plan.cache_clear()  # (plans are cached: none made by the rule may serve, and
        request.addfinalizer(rows_plan_module.plan.cache_clear)  # none made with this one may outlive it)
        monkeypatch.setattr(rows_plan_module, "split_fit", lambda n, es, op="forward", *, num_sms: op == "forward")
        n = n_interpreted
    return n, kinds


@pytest.mark.parametrize("n,n_interpreted", [(29791, 12301), (30450, 12302), (42631, 16381)], ids=str)
def test_split_flat_position_invariance(dev, monkeypatch, request, n, n_interpreted, gen):
    """A row's bits on the split flat forward (the rules' plan for fp32 odd and 2 mod 4 rows past
    plan.SPLIT_L2_SHARE) do not depend on where it sits: each segment's partial is the fixed-point
    sum of its own squares, wherever its 16-byte boundaries fall (kernels.split._exact_sum3). One row
    copied to 5 consecutive rows (every residue r N mod 4 of odd N) gives 5 equal outputs; rows k..
    of a batch alone give what they give in it; y and rstd against float64. (The interpreter runs
    shorter rows of the same residues, whose 4 segments its 4 SMs hold, on the rule widened to them.)"""
    n, kinds = _split_rule_rows(dev, monkeypatch, request, n, n_interpreted)
    x, _, w = make_inputs((9, n), torch.float32, dev, generator=gen)
    x[3:8] = x[2]
    with torch.no_grad():
        y, rstd = rms_norm_forward(x, w, EPS)
        assert kinds[-1] == "split"
        for r in range(3, 8):
            assert torch.equal(y[r], y[2]) and torch.equal(rstd[r], rstd[2]), r
        for k in (1, 3):
            yk, rk = rms_norm_forward(x[k:], w, EPS)
            assert kinds[-1] == "split" and torch.equal(yk, y[k:]) and torch.equal(rk, rstd[k:]), k
    yr, rr, _, _ = rms_norm_ref_grads(x, x, w, EPS)
    check_all({"y": y, "rstd": rstd}, {"y": yr, "rstd": rr}, tolerances(torch.float32, torch.float32, "gemma"))


@pytest.mark.parametrize("scale", [1e-18, 1.0, 1e12], ids=str)
def test_split_flat_forward_extreme_scales(dev, monkeypatch, request, scale, gen):
    """The split flat forward's fixed point at both ends of its scale 2^k (kernels.split._exact_scale32:
    k = 48 + 126 - the largest square's exponent, two fp32 factors): rows of 1e-18 (squares near 1e-36,
    k past 127: the second factor not 1) and of 1e12 (squares near 1e24, k below 0) with eps 0, y and
    rstd against float64, one row copied to 5 positions with equal bits. (The interpreter: shorter
    rows on the rule widened to them, as test_split_flat_position_invariance.)"""
    n, kinds = _split_rule_rows(dev, monkeypatch, request, 29791, 12301)
    x, _, w = make_inputs((9, n), torch.float32, dev, generator=gen)
    x = x * scale
    x[3:8] = x[2]
    with torch.no_grad():
        y, rstd = rms_norm_forward(x, w, 0.0)
    assert kinds[-1] == "split"
    for r in range(3, 8):
        assert torch.equal(y[r], y[2]) and torch.equal(rstd[r], rstd[2]), r
    yr, rr, _, _ = rms_norm_ref_grads(x, x, w, 0.0)
    check_all({"y": y, "rstd": rstd}, {"y": yr, "rstd": rr}, tolerances(torch.float32, torch.float32, "gemma"))


def test_split_flat_forward_puts_rows_aside(dev, gen):
    """The split flat forward whose blocks poll once for their partners (POLLS = 1: on the GPU most
    of a row's 16 partners have not published by then) puts rows aside and finishes them after its
    loop, from the slots or from every segment's partial computed itself (kernels.split._own_sum):
    y and rstd against float64; on the GPU some slot is marked put aside and y and rstd are bitwise
    those of the default polls, where no row is put aside. (The interpreter polls once either way:
    every block of a group but its last puts its rows aside there.)"""
    from cutile_rms.rmsnorm.kernels import PUT_ASIDE

    m, n = (64, 65535) if dev == "cuda" else (3, 16381)  # 16 segments (the interpreter: 4, its SMs)
    x, _, w = make_inputs((m, n), torch.float32, dev, generator=gen)
    code = casting_code("gemma", True)
    outs, slots = [], []

    def int64(shape, zeroed):
        slots.append(torch.zeros(shape, dtype=torch.int64, device=dev))
        return slots[-1]

    for polls in (None, 1):
        y = nan_like(x.shape, x.dtype, x.device)
        rstd = nan_like(x.shape[:-1], torch.float32, x.device)

        def run(device, stream, y=y, rstd=rstd, polls=polls):
            p = split_plan("forward", m, 1, n, 4, device.num_sms)
            shifted = lambda shape: torch.full(shape, float("nan"), device=dev)  # noqa: E731
            RL.run_forward(p, x.view(m, 1, n), w, y.view(m, 1, n), rstd.view(m, 1), EPS, 0.0, code, device, stream,
                           empty=shifted, int64=int64, polls=polls)  # fmt: skip

        launch_on_device(x, run)
        outs.append((y, rstd))
    if dev == "cuda":
        torch.cuda.synchronize()
        assert int(((slots[1] & PUT_ASIDE) != 0).sum()) > 0, "no row was put aside"
        assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    yr, rr, _, _ = rms_norm_ref_grads(x, x, w, EPS)
    check_all(
        {"y": outs[1][0], "rstd": outs[1][1]}, {"y": yr, "rstd": rr}, tolerances(torch.float32, torch.float32, "gemma")
    )


def test_split_rule():
    """The split flat forward takes fp32 rows that are not 16-byte aligned (odd, 2 mod 4) where the
    flat forward's rows in flight overflow SPLIT_L2_SHARE of L2 (22342 on 132 SMs) up to
    SPLIT_MAX_BLOCKS segments whose last holds two vectors, where the caller's rows are contiguous
    (flat=None); not aligned fp32 rows (the core's split kernel, 92% of the copy), 16-bit rows, the
    backward, or callers without a flat array."""
    for n in (22342, 22343, 24001, 27002, 29791, 30450, 34755, 42631, 54883, 63990, 65535, 61449):
        p = plan("forward", 999, 1, n, 4, SMS, flat=None)
        assert (p.kind, p.widths[0], p.occupancy, p.warps) == ("split", 4096, SPLIT_BLOCKS, SPLIT_WARPS), n
        assert p.grid == min(999, SMS * SPLIT_BLOCKS // -(-n // 4096)) * -(-n // 4096) and split_fit(n, 4, num_sms=SMS)
        assert plan("forward", 999, 1, n, 4, SMS) is None  # (no flat array: the core)
        q = plan("backward", 999, 1, n, 4, SMS, flat=None)
        assert q is None or q.kind != "split", q
        for keywords in ({"warps": 8}, {"long": True}, {"flat": True}, {"chunk": 2048}):  # overrides: not the rule
            q = plan("forward", 999, 1, n, 4, SMS, flat=keywords.pop("flat", None), **keywords)
            assert q is None or q.kind != "split", (n, keywords, q)
    assert plan("forward", 999, 1, 22341, 4, SMS, flat=None).kind == "flat"  # (22341: 44.998% of L2)
    for n in (29792, 45056, 61441, 61447, 65537, 70001):  # aligned; a last segment of 1 or 7; past 16 segments
        assert not split_fit(n, 4, num_sms=SMS), n
    assert split_fit(61448 + 1, 4, num_sms=SMS)  # a last segment of 2 V + 1
    assert not split_fit(20478, 4, num_sms=400) and split_fit(20490, 4, num_sms=400)  # (the static long forward's)
    assert not split_fit(42631, 2, num_sms=SMS) and not split_fit(63990, 2, num_sms=SMS)


def test_flat_rows_fp32_tail_adds_fused(dev, gen):
    """fp32 rows on the flat forward are batch invariant although an fp32 square is not exact: a
    column of the row's tail adds its square as the chunks do (fused into the add, kernels._flat_tail),
    so a column in the tail at one position and in a chunk at another adds the same bits (session
    35's review: the tail's rounded square gave 1 ulp of rstd in about 1e-5 of random rows). Rows
    built so that it shows: small x (0.001 N(0, 1)) but for the last three columns and the three a
    chunk before them (same lanes), N(0, 1), which then hold most of the sum; each row copied to 4
    consecutive rows (every head and tail length of an odd N) gives 4 equal y and rstd. On the GPU
    the rules' plan (the old tail differed in about 1 row in 7: 9 of 64 on the H200); in the
    interpreter (no FMA) a 64-element chunk; test_flat_plans_compile_without_spills checks the
    fused tail's SASS on the CPU."""
    if dev == "cuda":
        m, n = 64, 21001
        p = plan("forward", 4 * m, 1, n, 4, SMS, flat=None)
        assert p.kind == "flat"
    else:
        m, n = 4, 3 * 64 + 7
        p = dataclasses.replace(flat_plan("forward", 4 * m, 1, n, 4, SMS, chunk=64), grid=3)
    chunk = p.widths[0]
    x, dy, w = make_inputs((m, n), torch.float32, dev, generator=gen)
    x *= 1e-3
    big = torch.randn((m, 6), generator=gen).to(dev)
    x[:, n - 3 :] = big[:, :3]
    x[:, n - 3 - chunk : n - chunk] = big[:, 3:]
    x, dy = x.repeat_interleave(4, dim=0), dy.repeat_interleave(4, dim=0)
    out = _poisoned_run(x, dy, w, "llama", 0.0, lambda device: (p, None))
    for k in ("y", "rstd"):
        groups = out[k].view(m, 4, -1)
        same = (groups == groups[:, :1]).flatten(1).all(1)
        assert same.all(), (k, (~same).sum().item())
    yr, rr, _, _ = rms_norm_ref_grads(x, dy, w, EPS)
    check_all({"y": out["y"], "rstd": out["rstd"]}, {"y": yr, "rstd": rr}, tolerances(torch.float32, torch.float32,
                                                                                        "llama"))  # fmt: skip


def _left_to_right(fn, x, axis, keepdims, name):
    """interpret._reduce in another order: element by element along the axis (a GPU's order is
    the compiler's; the interpreter's own, by halves, happens to give a rotated tile's sum the
    same bits, so a kernel relying on that would pass with it)."""
    nd = x.ndim
    axes = (
        tuple(range(nd)) if axis is None else tuple(int(a) % nd for a in (axis if isinstance(axis, tuple) else (axis,)))
    )
    keep = [d for d in range(nd) if d not in axes]
    a = np.transpose(x.numpy(), keep + list(axes))
    a = a.reshape(a.shape[: len(keep)] + (-1,))
    r = a[..., 0]
    with np.errstate(all="ignore"):
        for k in range(1, a.shape[-1]):
            r = fn(r, a[..., k]).astype(a.dtype, copy=False)
    if keepdims:
        r = r.reshape(tuple(1 if d in axes else x.shape[d] for d in range(nd)))
    return interpret.Tile(np.asarray(r), x.dtype)


@pytest.mark.parametrize("static", [True, False], ids=["static", "runtime"])
def test_flat_rows_position_sweep(static, monkeypatch, gen):
    """Through the interpreter, forced flat plans of small chunks (64 elements) over row lengths
    from the shortest (16) past a chunk, that put the interior's end at, before and past a chunk
    boundary: one row (x and dy) copied to 9 consecutive rows gives 9 equal outputs, y, rstd and
    dx (the backward on 8 or 16 row groups: its c from the same sum), at every
    head length its N allows (all 8 for odd N, 4 for 2 mod 4, 2 for 4 mod 8 as 20 and 148, only
    d = 0 for 136); and every row, the first and the last too, against float64 (the session-33
    review's sweep: the first flat forward failed 640 cases). Reductions run left to right here, so
    that a sum whose order the lanes' rotation changes fails (with the kernel's exact sum replaced
    by ct.sum, some cases do, how many depends on the inputs)."""
    monkeypatch.setattr(interpret, "_reduce", _left_to_right)
    with interpret.interpreting():
        for n in (16, 17, 20, 23, 64 + 7, 64 + 9, 2 * 64 + 8, 148, 3 * 64 - 5, 3 * 64 + 1, 150, 151, 199):
            x, dy, w = make_inputs((13, n), torch.bfloat16, "cpu", generator=gen)
            x[3:12] = x[2]
            dy[3:12] = dy[2]
            p = dataclasses.replace(flat_plan("forward", 13, 1, n, 2, SMS, chunk=64, static=static), grid=3)
            q = flat_plan("backward", 13, 1, n, 2, SMS, chunk=64, dot_chunk=64, prefetch=static)
            q = dataclasses.replace(q, grid=8 * (1 + static))
            out = _poisoned_run(x, dy, w, "llama", 0.0, lambda device, p=p, q=q: (p, q))
            for r in range(3, 12):
                assert all(torch.equal(out[k][r], out[k][2]) for k in ("y", "rstd", "dx")), (n, r)
            yr, rr, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS)
            ref = {"y": yr, "rstd": rr, "dx": dxr, "dw": dwr}
            check_all(out, ref, tolerances(torch.bfloat16, torch.bfloat16, "llama"), _few_rows(x, dy))


def _flat_c(p, x, dy, w, rstd, offset=0.0):
    """The flat backward of plan p on 2-D x, dy (rstd given): its c workspace (rows_dot_flat's
    mean(wdy * xhat) of each row), NaN-poisoned before, on the CPU."""
    m, n = x.shape
    workspaces = []

    def empty_f32(shape):
        workspaces.append(torch.full(shape, float("nan"), device=x.device))
        return workspaces[-1]

    dx, dw = torch.empty_like(x), torch.empty_like(w)
    code = casting_code("llama", x.dtype == torch.float32)
    launch_on_device(x, RL.run_backward, p, x.view(m, 1, n), dy.view(m, 1, n), w, rstd.view(m, 1), dx.view(m, 1, n),
                     dw, offset, code, empty_f32, empty=w.new_empty)  # fmt: skip
    return workspaces[0].cpu()


def _c_ref(x, dy, w, rstd, offset=0.0):
    n = x.shape[-1]
    return ((dy.double() * (w.double() + offset) * x.double()).sum(-1) * rstd.double() / n).float().cpu()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_flat_backward_c_is_position_free(dev, dtype, monkeypatch, gen):
    """rows_dot_flat's c of one row (x and dy) copied to consecutive rows is the same bits at every
    head length its N allows: dx rounds away most of a 1-ulp difference in c, so the workspace
    itself is compared. Rows of 64-element chunks whose interior ends at, before and past a chunk
    boundary; then, on the rules' plan, 96 rows (8 in the interpreter) each copied to 8
    consecutive rows (every head length of an odd N), with an offset (offset + w is not exact):
    fp32, fp16 and offset products
    are not exact in fp32, so on the GPU a tail term rounded before its add where the chunks' fuse
    into an FFMA differs in a few rows in a hundred (session 37's review: a (1, V) tail product,
    FMUL then FADD, at the rules' 4096-lane dot chunk; 64-lane chunks compiled it fused). The
    interpreter adds left to right, so that a sum whose order the lanes' rotation changes differs
    (with ct.sum in place of the exact sum, every dtype fails); it has no FMA: the GPU run checks
    the fusing."""
    monkeypatch.setattr(interpret, "_reduce", _left_to_right)
    es = torch.empty((), dtype=dtype).element_size()
    for n in (17, 23, 64 + 7, 2 * 64 + 10, 3 * 64 - 5, 199):
        x, dy, w = make_inputs((13, n), dtype, dev, generator=gen)
        x[3:12] = x[2]
        dy[3:12] = dy[2]
        with torch.no_grad():
            _, rstd = rms_norm_forward(x, w, EPS)
        p = dataclasses.replace(flat_plan("backward", 13, 1, n, es, SMS, chunk=64, dot_chunk=64), grid=16 // es)
        c = _flat_c(p, x, dy, w, rstd)
        assert c.shape == (13,) and torch.isfinite(c).all()
        assert (c[3:12] == c[2]).all(), (n, c[2:12])
        torch.testing.assert_close(c, _c_ref(x, dy, w, rstd), rtol=1e-5, atol=1e-6)
    n, k = 12001, 96 if dev == "cuda" else 8  # (a few rows in a hundred differed: the GPU's many; the CPU's order)
    x, dy, w = make_inputs((k, n), dtype, dev, generator=gen)
    x, dy = x.repeat_interleave(8, dim=0), dy.repeat_interleave(8, dim=0)
    with torch.no_grad():
        _, rstd = rms_norm_forward(x, w, EPS)
    c = _flat_c(flat_plan("backward", 8 * k, 1, n, es, SMS), x, dy, w, rstd, offset=1.0)
    assert torch.isfinite(c).all()
    groups = c.view(k, 8)
    assert (groups == groups[:, :1]).all(), groups[(groups != groups[:, :1]).any(1)]
    torch.testing.assert_close(c, _c_ref(x, dy, w, rstd, 1.0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_flat_backward_signed_sum(dev, dtype, gen):
    """rows_dot_flat's exact sum takes signed lanes (kernels._exact_sum's SIGNED: its scale from the
    largest magnitude; from the largest value, a dominant negative term overflows the int64s): a
    row whose one product is -9e8 among terms near 1 against float64; a NaN and an inf reach c
    (the plain sum), the rows beside them untouched."""
    n = 8197
    x, dy, w = make_inputs((6, n), dtype, dev, generator=gen)
    x[1, 5], dy[1, 5] = -30000.0, 30000.0  # the row's largest lane: negative
    x[2, 4000], dy[2, 4001] = 200.0, -300.0  # two large lanes of opposite signs
    dy[3, 7] = float("nan")
    x[4, 4099] = float("inf")
    w[4099] = abs(w[4099]) + 0.5
    dy[4, 4099] = 1.0
    rstd = torch.full((6,), 0.5, device=dev)
    p = dataclasses.replace(flat_plan("backward", 6, 1, n, torch.empty((), dtype=dtype).element_size(), SMS), grid=8)
    c = _flat_c(p, x, dy, w, rstd)
    assert torch.isnan(c[3]) and c[4] == float("inf")
    keep = [0, 1, 2, 5]
    torch.testing.assert_close(c[keep], _c_ref(x, dy, w, rstd)[keep], rtol=1e-5, atol=1e-6)


def test_flat_rows_keep_nan_and_inf(dev, gen):
    """A NaN or an inf in a flat row reaches its rstd and y (the exact sum's int64 conversion
    would drop a NaN: kernels._exact_sum falls back to the plain sum)."""
    x, _, w = make_inputs((5, 24577), torch.bfloat16, dev, generator=gen)
    x[1, 100] = x[1, 5000] = float("nan")  # two NaN lanes (their int64s would cancel)
    x[3, 7] = float("inf")
    with torch.no_grad():
        y, rstd = rms_norm_forward(x, w, EPS)
    assert torch.isnan(rstd[1]) and torch.isnan(y[1]).all()
    assert rstd[3] == 0 and torch.isfinite(rstd[[0, 2, 4]]).all() and torch.isfinite(y[[0, 2, 4]]).all()


def test_flat_rows_fp32_weight(dev, gen):
    """The flat forward with an fp32 weight beside 16-bit x (its shifted copies fp32), every
    casting mode, against float64."""
    x, _, w = make_inputs((7, 24577), torch.bfloat16, dev, generator=gen)
    w32 = w.float() + 1e-3 * torch.randn(w.shape, generator=gen).to(w.device)
    for casting, offset in (("llama", 0.0), ("gemma", 1.0), ("none", 0.0)):
        y, rstd = rms_norm_forward(x, w32, EPS, offset=offset, casting_mode=casting)
        yr, rr, _, _ = rms_norm_ref_grads(x, x, w32, EPS, offset)
        check_all({"y": y, "rstd": rstd}, {"y": yr, "rstd": rr}, tolerances(torch.bfloat16, torch.float32, casting))


def test_default_forward_takes_flat_rows_where_contiguous(monkeypatch, gen):
    """mode None: long odd 16-bit rows (FLAT_MIN_BYTES) run the flat forward where x is contiguous,
    the rows' own kernels where it is a strided view (never a copy); the launcher refuses a flat
    plan on rows that are not contiguous, and one with a weight but no workspace allocator."""
    kinds = []
    real = RL.run_forward
    monkeypatch.setattr(RL, "run_forward", lambda p, *a, **k: kinds.append(p.kind) or real(p, *a, **k))
    with interpret.interpreting():
        x, _, w = make_inputs((6, 2 * 24577), torch.bfloat16, "cpu", generator=gen)
        for rows in (x[:, :24577].contiguous(), x[:, :24577]):
            y, rstd = rms_norm_forward(rows, w[:24577], EPS)
            yr, rr, _, _ = rms_norm_ref_grads(rows, rows, w[:24577], EPS)
            check_all(
                {"y": y, "rstd": rstd}, {"y": yr, "rstd": rr}, tolerances(torch.bfloat16, torch.bfloat16, "llama")
            )
        assert kinds[0] == "flat" and kinds[1] != "flat", kinds
        p = flat_plan("forward", 6, 1, 24577, 2, SMS)
        view, y = x[:, :24577].view(6, 1, 24577), torch.empty(6, 1, 24577, dtype=torch.bfloat16)
        with pytest.raises(ValueError, match="C-contiguous"):
            launch_on_device(x, real, p, view, w[:24577], y, None, EPS, 0.0, 0, empty=torch.empty)
        with pytest.raises(ValueError, match="empty"):
            launch_on_device(x, real, p, view.contiguous(), w[:24577], y, None, EPS, 0.0, 0)


# The one-pass long backward (plan.long_plan's onepass; the rules' where 2 blocks an SM fit, session 25):
# unaligned rows on runtime layouts, even 16-bit rows on static ones, a 3-D input, more rows
# than blocks (each block's dW partials stored, then added to).
ONEPASS_CASES = [((300, 25263), "2-D, odd"), ((3, 100, 18434), "3-D, even (static)")]


@pytest.mark.parametrize("shape,what", ONEPASS_CASES, ids=[c[1] for c in ONEPASS_CASES])
@pytest.mark.parametrize("dtype,casting", [(torch.bfloat16, "llama"), (torch.float16, "none"),
                                           (torch.float32, "gemma")], ids=str)  # fmt: skip
@pytest.mark.parametrize("has_weight,offset", [(True, 1.0), (False, 0.0)], ids=["w+1", "no-w"])
def test_long_rows_onepass(dev, shape, what, casting, dtype, has_weight, offset, gen):
    """y, rstd, dx and dw of the long forward and the one-pass long backward against float64."""

    def plan_of(op, a, b, n, es, sms):
        p = long_plan(op, a, b, n, es, sms, onepass=True)
        fp32_static = op == "forward" and es == 4 and bool(long_static_chunk(n, es, sms))  # (session 49)
        assert p.onepass == (op == "backward") and p.static == ((es == 2 and n % 2 == 0) or fp32_static)
        assert op == "forward" or a * b > p.grid  # blocks take several rows: dW partials stored, then added to
        return p

    _check_planned(dev, shape, dtype, casting, has_weight, offset, gen, plan_of)


@pytest.mark.parametrize("shape", [(3, 17284), (2, 3, 28044), (3, 9434)], ids=str)
@pytest.mark.parametrize("dtype,casting", DTYPE_CASTINGS[:6], ids=[f"{d}-{c}" for d, c in DTYPE_CASTINGS[:6]])
def test_long_rows_one_block_a_row(dev, shape, casting, dtype, gen):
    """The static long forward of even unaligned 16-bit rows (plan.long_static_chunk: 8 KB chunks
    up to 5, 16 KB past that, one block a row, the chunk count compiled in), against float64 with
    the backward the rules give those rows."""
    n = shape[-1]
    p = plan("forward", 99999, 1, n, 2, SMS)
    assert (p.kind, p.static, p.unroll, p.grid) == ("long", True, True, 99999)
    assert p.widths[0] == long_static_chunk(n, 2, SMS) == (8192 if n > 5 * 4096 else 4096)
    _check_planned(dev, shape, dtype, casting, True, 0.0, gen, plan)


@pytest.mark.parametrize("shape", [(3, 13406), (2, 3, 14001), (5, 17284)], ids=str)
def test_fp32_rows_one_block_a_row(dev, shape, gen):
    """The static long forward of fp32 rows that the row tiles hold at one block an SM
    (plan.long_static_chunk, session 30: 16 KB chunks, one block a row, the chunk count compiled
    in): 2 mod 4 and odd (gathered) and 4 | N (plain loads), 2-D and 3-D, against float64 with the
    long backward (the rules leave the backward of 16-byte aligned fp32 rows to the core kernels)."""
    n = shape[-1]
    p = plan("forward", 99999, 1, n, 4, SMS)
    assert (p.kind, p.static, p.unroll, p.grid, p.widths[0]) == ("long", True, True, 99999, 4096)
    assert p.loads == (K.LOADS_GATHER if n % 4 else K.LOADS_PLAIN)

    def plan_of(op, *args):
        return plan(op, *args) if op == "forward" else long_plan(op, *args)

    _check_planned(dev, shape, torch.float32, "gemma", True, 0.0, gen, plan_of)


# The long-row kernels on aligned rows (plain loads, the last chunk checked where the chunks
# overhang N), with the rules' chunk and a narrow one.
LONG_ALIGNED_CASES = [((3, 20480), "whole chunks"), ((2, 3, 24584), "3-D, a partial chunk"), ((5, 1040), "one chunk")]


@pytest.mark.parametrize("shape,what", LONG_ALIGNED_CASES, ids=[c[1] for c in LONG_ALIGNED_CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("chunk", [None, 1024], ids=["rules", "chunk1024"])
@pytest.mark.parametrize("static", [False, True], ids=["runtime", "static"])
def test_long_rows_aligned(dev, shape, what, dtype, chunk, static, gen):
    """y, rstd, dx and dw of the long-row kernels on 16-byte aligned rows against float64, on
    runtime layouts, and the forward also on static ones (N and the strides compiled in, as the
    rules take them for even 16-bit rows that are not a multiple of 16, plan.static_fit)."""
    casting = "gemma" if dtype == torch.float32 else "llama"

    def plan_of(op, a, b, n, es, sms):
        p = plan(op, a, b, n, es, sms, long=True, chunk=chunk, onepass=False)  # the two-kernel backward
        chunks = -(-n // p.widths[0])  # the rules' static rows: static_fit, or long_fit in few enough chunks
        static_rows = op == "forward" and (static_fit(n, es) or (long_fit(n, es, sms) and chunks <= UNROLL_CHUNKS))
        assert p.kind == "long" and p.loads == K.LOADS_PLAIN and p.static == static_rows
        on = static and op == "forward"  # (no static two-kernel backward)
        return dataclasses.replace(p, static=on, unroll=p.unroll and on)

    _check_planned(dev, shape, dtype, casting, True, 0.0, gen, plan_of)


@pytest.mark.compile
@pytest.mark.parametrize("op,dtype,n", [("forward", "bfloat16", 18432), ("forward", "float16", 12288),
                                        ("forward", "bfloat16", 7168), ("forward", "float16", 10240),
                                        ("forward", "bfloat16", 28567), ("backward", "bfloat16", 11178),
                                        ("backward", "float32", 16261), ("forward", "bfloat16", 53908),
                                        ("forward", "float16", 64450), ("forward", "bfloat16", 17284),
                                        ("forward", "float16", 28044), ("forward", "bfloat16", 9434),
                                        ("forward", "bfloat16", 24822), ("forward", "float16", 36004),
                                        ("forward", "float32", 13406), ("forward", "float32", 18856),
                                        ("forward", "float32", 19001)])  # fmt: skip
def test_long_plans_compile_without_spills(op, dtype, n, sass):
    """The long-row kernels of the rules' plans hold their registers (no stack): a hint whose
    register cap the unrolled chunk loop overflows spills, and ran 1.2-2x slower on the H200
    (bench/NOTES.md, session 21: bf16 4 KB chunks at 4 blocks, 160 bytes of stack); so did the
    static forward with its chunk count compiled in on rows of 64-bit loads (53908, which the
    rules run with the count at run time; 64450, 32-bit loads, compiled in: session 23). The
    aligned rows of session 28's static long forward (bench/NOTES.md: spills of 16-56 bytes lost)."""
    dt = getattr(sass.ct, dtype)
    p = plan(op, 4099, 1, n, sass.ES[dt], SMS, long=True if sass.ES[dt] == 4 and op == "backward" else None)
    assert p.kind == "long"  # (fp32 backward rows: the core's kernels by the rules; a caller may ask)
    for name, kernel, params, hints in sass.long_params(p, dt, 4099, n):
        r = sass.compile_report(kernel, params, **hints)
        assert "REG" in r and r["instructions"] > 0, (name, r)  # cuobjdump read the cubin
        assert r.get("STACK", 0) == 0 and r.get("LOCAL", 0) == 0, (name, p, r)


def _rounded_squares(sass_text):
    """(square, FADD) pairs of a SASS listing where an FADD reads a square rounded on its own: an
    FMUL of a register by itself, followed in address order through FSEL and MOV copies."""
    ins = [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", sass_text)]
    square, out = {}, []
    for t in ins:
        m = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*(.*)", t)
        op, args = m.group(2), [a.strip() for a in m.group(3).split(",")] if m.group(3) else []
        regs = [re.sub(r"\..*", "", a.lstrip("-|")) for a in args]
        src = [square[r] for r in regs[1:] if r in square]
        if op.startswith("FADD") and src:
            out.append((src[0], t))
        if args and re.fullmatch(r"R\d+", regs[0]):
            square.pop(regs[0], None)
            if op == "FMUL" and len(regs) == 3 and regs[1] == regs[2] and not args[2].startswith("-"):
                square[regs[0]] = t
            elif op in ("FSEL", "MOV", "IMAD.MOV.U32") and src:
                square[regs[0]] = src[0]
    return out


@pytest.mark.compile
@pytest.mark.parametrize("n", [22342, 63990], ids=str)
def test_split_plans_compile_without_spills(n, sass):
    """The split flat forward of the rules' plans (fp32, plan.SPLIT_BLOCKS an SM) fits its registers
    to that many blocks without a stack, its interiors loaded 16 bytes a thread: session 51's 5
    blocks of 4 warps hold 102 registers a thread at most (96 measured, bench/NOTES.md s51d)."""
    p = plan("forward", 999, 1, n, 4, SMS, flat=None)
    assert p.kind == "split" and p.occupancy == SPLIT_BLOCKS, p
    kernel, params, hints = sass.flat_params(p, sass.ct.float32, 999, n, CK.CAST_GEMMA)
    r = sass.compile_report(kernel, params, **hints)
    fits = 65536 // (SPLIT_BLOCKS * SPLIT_WARPS * 32)
    assert r.get("STACK", 0) == 0 and r.get("LOCAL", 0) == 0 and r["REG"] <= fits and r["ops"].get("LDG.128", 0) > 0, r


@pytest.mark.compile
@pytest.mark.parametrize("dtype,n", [("bfloat16", 12001), ("bfloat16", 24577), ("float16", 33333), ("bfloat16", 57085),
                                     ("float16", 63566), ("float16", 200001), ("float32", 21001),
                                     ("float32", 22338)])  # fmt: skip
@pytest.mark.parametrize("casting", [CK.CAST_LLAMA, CK.CAST_LLAMA_NATIVE, CK.CAST_GEMMA], ids=str)
def test_flat_plans_compile_without_spills(dtype, n, casting, sass):
    """The flat forward of the rules' plans holds its registers with 16-byte loads: one whole
    chunk compiled in spilled 264-608 bytes (plan.FLAT_STATIC_MIN_CHUNKS: those rows keep N at run
    time; bench/NOTES.md, session 33). fp32: every square but the first chunk's (an FMUL, then the
    mask's FSEL: the same bits as a fused add onto 0) is fused into its add, the tail's too
    (kernels._flat_tail; session 35's tail rounded its squares first: FMUL, then FADD, which
    made the rows' bits depend on their position): no square rounded on its own reaches an FADD
    (_rounded_squares: 16-32 such pairs in session 35's kernel, none now)."""
    dt = getattr(sass.ct, dtype)
    es = sass.ES[dt]
    if es == 4 and casting == CK.CAST_LLAMA_NATIVE:
        pytest.skip("fp32 rows take no native casting (launch.forward_casting)")
    p = plan("forward", 999, 1, n, es, SMS, flat=None)
    assert p.kind == "flat"
    kernel, params, hints = sass.flat_params(p, dt, 999, n, casting)
    r = sass.compile_report(kernel, params, **hints)
    assert r.get("STACK", 0) == 0 and r.get("LOCAL", 0) == 0 and r["ops"].get("LDG.128", 0) > 0, (p, r)
    if es == 4:
        text = sass.cuobjdump(sass.compile_cubin(kernel, params, **hints), "-sass")
        assert not _rounded_squares(text), _rounded_squares(text)[:4]


@pytest.mark.compile
@pytest.mark.parametrize("op,dtype,n", [("forward", "bfloat16", 65), ("forward", "float16", 135),
                                        ("forward", "bfloat16", 303), ("forward", "bfloat16", 383),
                                        ("forward", "float16", 263),
                                        ("forward", "bfloat16", 1175), ("forward", "bfloat16", 3001),
                                        ("forward", "float32", 405), ("backward", "bfloat16", 135),
                                        ("backward", "bfloat16", 509)])  # fmt: skip
def test_odd_static_plans_hold_their_registers(op, dtype, n, sass):
    """The odd rows' static plans (plan.odd_static) compile with at most 8 bytes of stack (a 16-row
    gathered tile; the 16-bit forward of 257-383 ran on 16 x 512 ones, 8 bytes, until session 46's
    lanes tiles), the lanes kernels (16-bit 257-383 forward: 8 and 16 rows of 512) and the wider
    tiles with none."""
    dt = getattr(sass.ct, dtype)
    p = plan(op, 99999, 1, n, sass.ES[dt], SMS)
    assert p.static and p.kind in ("tile", "lanes"), p
    if p.kind == "lanes":
        kernel, params, hints = sass.lanes_params(p, dt, 99999, n)
    else:
        kernel, params, hints = sass.rows_params(p, dt, 99999, 1, n)
    r = sass.compile_report(kernel, params, **hints)
    assert "REG" in r and r["instructions"] > 0, r
    assert r.get("STACK", 0) <= (8 if p.kind == "tile" and p.tile_a == 16 else 0), (p, r)


@pytest.mark.compile
@pytest.mark.parametrize("n", [16384, 15328])
def test_lone_tma_plans_hold_two_blocks(n, sass):
    """fp32's lone tile on the core's tile (plan.lone_tma: TMA loads, no loop, hint LONE_TMA_HINT)
    compiles without stack and within the registers of LONE_TMA_HINT blocks an SM (s43f: 80; at
    hint 1 the same tile took 168, one block an SM, and lost: 144.3 against 133.9 us)."""
    p = plan("forward", 99999, 1, n, 4, SMS, core_bits=True)
    assert p.loads == K.LOADS_TMA and not p.loop, p
    kernel, params, hints = sass.rows_params(p, sass.ct.float32, 99999, 1, n)
    r = sass.compile_report(kernel, params, **hints)
    assert r.get("STACK", 0) == 0 and r.get("LOCAL", 0) == 0, (p, r)
    assert r["REG"] * 32 * p.warps * LONE_TMA_HINT <= 65536, (p, r)


def _lone_tma_plans(op, a, b, n, es, sms):
    """The forward's lone TMA tile (plan.lone_tma) on any number of rows, the long backward."""
    if op == "backward":
        return long_plan(op, a, b, n, es, sms)
    return dataclasses.replace(plan(op, LONE_TMA_TILES_PER_SM * sms, b, n, es, sms, core_bits=True), grid=a)


@pytest.mark.parametrize("n", [16384, 15328])
@pytest.mark.parametrize("has_weight,offset", [(True, 0.0), (True, 1.0), (False, 0.0)], ids=["w", "w+1", "no-w"])
def test_lone_tma_rows(dev, n, has_weight, offset, gen):
    """y and rstd of fp32's lone TMA tile (one padded piece where N is not a power of two) against
    float64, every output NaN-poisoned first, with each weight variant."""
    p = _lone_tma_plans("forward", 3, 1, n, 4, SMS)
    assert (p.loads, p.loop, p.widths[0], p.check_n) == (K.LOADS_TMA, False, 16384, n != 16384), p
    _check_planned(dev, (3, n), torch.float32, "gemma", has_weight, offset, gen, _lone_tma_plans)


def _lone_tma_inputs(device, n, weight, rows):
    """rows x n fp32 rows (a slice of wider rows for "stride", 16-byte aligned, and "odd", not) and
    the weight of the variant (fp32, fp32 stored as w - 1, bf16 or none) with its offset."""
    g = torch.Generator().manual_seed(n)
    wide = n + {"stride": 4, "odd": 1}.get(weight.split("/")[-1], 0)
    x = torch.randn(rows, wide, generator=g).to(device)[:, :n]
    w = None if weight == "none" else (0.1 * torch.randn(n, generator=g) + (weight != "fp32+1")).to(device)
    return x, w.to(torch.bfloat16) if weight == "bf16" else w, 1.0 if weight == "fp32+1" else 0.0


LONE_TMA_WEIGHTS = ["fp32", "fp32+1", "bf16", "none", "fp32/stride", "fp32/odd"]


@pytest.mark.parametrize("weight", LONE_TMA_WEIGHTS)
def test_lone_tma_takes_the_inputs_that_keep_the_bits(weight):
    """The torch API plans fp32's lone TMA tile (plan.lone_tma) from LONE_TMA_TILES_PER_SM tiles an
    SM only for inputs whose bits it keeps (plan.same_bits): 16-byte aligned rows and a weight of
    x's dtype or none; a bf16 weight and rows of an odd stride keep the core at every M. (The
    interpreter's device, no kernel run.)"""
    sms = INTERPRET_DEVICE.num_sms
    at = LONE_TMA_TILES_PER_SM * sms
    x, w, _ = _lone_tma_inputs("cpu", 16384, weight, at)
    assert _rows_plan("forward", x[: at - 1], weight=w)[0] is None  # the core below
    p = _rows_plan("forward", x, weight=w)[0]
    assert p is None if weight in ("bf16", "fp32/odd") else p.loads == K.LOADS_TMA, p
    assert _rows_plan("backward", x, x)[0] is None or _rows_plan("backward", x, x)[0].loads != K.LOADS_TMA


@pytest.mark.gpu
@pytest.mark.parametrize("n", [16384, 15328])
@pytest.mark.parametrize("weight", LONE_TMA_WEIGHTS)
def test_lone_tma_bits_are_the_cores(n, weight):
    """fp32 rows of the core's one-block tile run that tile as a row tile of TMA loads from
    LONE_TMA_TILES_PER_SM tiles an SM (plan.lone_tma); a row's y and rstd (training) and y
    (inference) are the bits the core gives it below that count (batch invariance across the
    switch), for each weight variant and for rows of a padded stride (the inputs of
    test_lone_tma_takes_the_inputs_that_keep_the_bits: a bf16 weight and an odd stride keep the
    core at every M)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    at = LONE_TMA_TILES_PER_SM * sms
    big, w, offset = _lone_tma_inputs("cuda", n, weight, at + 5)
    p = _rows_plan("forward", big, weight=w)[0]
    assert p is None if weight in ("bf16", "fp32/odd") else p.loads == K.LOADS_TMA, p
    yr, rr, _, _ = rms_norm_ref_grads(big, big, w, EPS, offset)
    with torch.no_grad():
        y, rstd = rms_norm_forward(big, w, EPS, offset=offset)
        check_all({"y": y, "rstd": rstd}, {"y": yr, "rstd": rr}, tolerances(torch.float32, None if w is None else
                                                                               w.dtype, "gemma"))  # fmt: skip
        yi = rms_norm(big, w, EPS, offset=offset)  # inference: no rstd stored (another compile)
        for m in (1, 7, at - 1, at):
            ym, rm = rms_norm_forward(big[:m], w, EPS, offset=offset)
            assert torch.equal(ym, y[:m]) and torch.equal(rm, rstd[:m]), m
            assert torch.equal(rms_norm(big[:m], w, EPS, offset=offset), yi[:m]), m


REGISTER_CASES = [("forward", "bfloat16", 68), ("forward", "bfloat16", 204), ("forward", "float16", 252),
                  ("forward", "bfloat16", 66), ("forward", "bfloat16", 138), ("forward", "float16", 250),
                  ("forward", "bfloat16", 414),
                  ("backward", "bfloat16", 98), ("backward", "float16", 126),
                  ("forward", "bfloat16", 300), ("forward", "float16", 508), ("backward", "bfloat16", 76),
                  ("backward", "float16", 204), ("backward", "bfloat16", 300), ("backward", "bfloat16", 138),
                  ("backward", "float16", 250), ("forward", "float32", 13406), ("forward", "float32", 14001),
                  ("forward", "float32", 18200), ("forward", "bfloat16", 70), ("forward", "float16", 186)]  # fmt: skip


def test_sass_static_is_the_annotation(sass):
    """bench.probes.sass.static (the SASS probes' and the AOT check's static layouts) constrains what
    kernels.RowArray / RowVector annotate, nothing more: N and the strides, not the size-1 row-group
    dim that the JIT specializes for runtime layouts (session 56: with it the probes compiled 77
    registers where the GPU's kernel held 82, ncu, fp32 10000, and missed spills at 10480 and 13080)."""
    x = sass.array(sass.ct.float32, (99, 1, 10000))
    assert x.shape_constant[1] == 1  # runtime layouts: B == 1 compiled in, as the JIT does
    c = sass.static(x, 10000, (10000, 10000, 1))
    assert tuple(c.shape_constant) == (None, None, 10000) and tuple(c.stride_constant) == (10000, 10000, 1), c
    assert tuple(sass.static(sass.array(sass.ct.float32, (10000,)), 10000).shape_constant) == (10000,)


@pytest.mark.parametrize("op,dtype,n", REGISTER_CASES)
@pytest.mark.parametrize("casting", [None, CK.CAST_LLAMA], ids=["api", "llama"])
def test_static_plans_hold_their_registers(sass, op, dtype, n, casting):
    """The vector lanes tiles of 16-bit rows (plan.vector_lanes, sessions 31 and 32) and the static
    long forward of fp32 rows at one block an SM (session 30) compile without stack (their timings
    assume it: plan.lanes_one_tile's 2048-element tiles timed at 31-36 registers), with
    the torch API's casting (native llama for 16-bit rows) and with llama's fp32 multiply (an fp32
    weight or an offset)."""
    dt = getattr(sass.ct, dtype)
    p = plan(op, 99999, 1, n, sass.ES[dt], SMS)
    assert p.static, p
    if p.kind == "long":
        compiled = [(k, params, hints) for _, k, params, hints in sass.long_params(p, dt, 99999, n, casting)]
    else:
        assert p.kind == "lanes" and p.lanes * vector_lanes(n, 2, op) == p.widths[0], p
        compiled = [sass.lanes_params(p, dt, 99999, n, casting)]
    for kernel, params, hints in compiled:
        r = sass.compile_report(kernel, params, **hints)
        assert "REG" in r and r.get("STACK", 0) == 0, (p, r)


# Short unaligned rows: the lanes kernels (plan kind "lanes"), forward and backward.
LANES_CASES = [
    ((37, 191), "2-D, odd M"),
    ((2, 3, 81), "3-D, B = 3"),
    ((5, 4, 65), "3-D, B = 4"),
    ((11, 339), "2-D, W = 512"),
]


@pytest.mark.parametrize("shape,what", LANES_CASES, ids=[c[1] for c in LANES_CASES])
@pytest.mark.parametrize("dtype,casting", DTYPE_CASTINGS, ids=[f"{d}-{c}" for d, c in DTYPE_CASTINGS])
@pytest.mark.parametrize("has_weight,offset", [(True, 0.0), (True, 1.0), (False, 0.0)], ids=["w", "w+1", "no-w"])
@pytest.mark.parametrize("static", [False, True], ids=["runtime", "static"])
def test_lanes_rows(dev, shape, what, casting, dtype, has_weight, offset, static, gen):
    """y, rstd, dx and dw of rows_fwd_lanes and rows_bwd_lanes, NaN-poisoned first, against
    float64, on runtime layouts and on static ones (plan.odd_static; the interpreter runs one
    Python function for both, the GPU tier two compiled kernels); x and dy are left as they were."""

    def plan_of(*args):
        return lanes_plan(*args, static=static)

    _check_planned(dev, shape, dtype, casting, has_weight, offset, gen, plan_of)


VECTOR_LANES_SHAPES = [(37, 204), (5, 3, 100), (11, 292), (300, 252), (300, 68), (9, 4, 204), (40, 138), (3, 5, 250),
                       (300, 66), (7, 3, 98), (9, 8, 70)]  # fmt: skip


@pytest.mark.parametrize("shape", VECTOR_LANES_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("casting,offset", [("llama", 0.0), ("llama", 1.0), ("gemma", 0.0), ("none", 0.0)],
                         ids=["native", "llama+1", "gemma", "none"])  # fmt: skip
def test_vector_lanes_rows(dev, shape, dtype, casting, offset, gen):
    """The rules' plans of 16-bit rows of 4 mod 8 elements (forward and backward) and of 2 mod 4:
    static lanes tiles of 4 elements a lane (plan.vector_lanes, session 31; the forward of 2 mod 4
    rows 8, session 32), rows padded to 128-512, tiles overhanging A, head groups; y, rstd, dx and
    dw against float64, in each casting mode (llama with offset 0 runs the native multiply)."""
    n = shape[-1]
    for op in ("forward", "backward"):
        p = plan(op, 37, 1, n, 2, SMS)
        w = 1 << (n - 1).bit_length()
        assert vector_lanes(n, 2, op) == (4 if n % 8 == 4 or op == "backward" else 8), (op, n)
        assert (p.kind, p.static, p.lanes * vector_lanes(n, 2, op)) == ("lanes", True, w), (op, n, p)
    _check_planned(dev, shape, dtype, casting, True, offset, gen, plan)


WIDE_LANES_SHAPES = [(37, 267), (5, 3, 441), (9, 8, 301), (3, 5, 263)]


@pytest.mark.parametrize("shape", WIDE_LANES_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("casting,offset", [("llama", 0.0), ("llama", 1.0), ("gemma", 0.0), ("none", 0.0)],
                         ids=["native", "llama+1", "gemma", "none"])  # fmt: skip
def test_wide_lanes_rows(dev, shape, dtype, casting, offset, gen):
    """The rules' forward plans of session 46 on the lanes tiles: odd 16-bit rows padded to 512
    (static layouts at 16 and 8 rows a tile, 267, 263 and 301; runtime ones at 4, 441); rows of
    head groups, a tile overhanging A; y, rstd, dx and dw against float64 in each casting mode."""
    n = shape[-1]
    p = plan("forward", 37, 1, n, 2, SMS)
    assert (p.kind, p.widths[0], p.lanes) == ("lanes", 512, 32), p
    _check_planned(dev, shape, dtype, casting, True, offset, gen, plan)


@pytest.mark.parametrize("n", [263, 301], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("casting,offset", [("llama", 0.0), ("gemma", 0.0), ("none", 1.0)],
                         ids=["native", "gemma", "none+1"])  # fmt: skip
def test_wide_lanes_tile_rows_same_bits(dev, n, dtype, casting, offset, gen):
    """A row's y and rstd do not depend on how many rows its lanes tile holds: the rules' static
    512-lane tiles of odd 16-bit rows (16 rows at 263, 8 at 301: plan.lanes_tile_rows) give the
    bits of the same static tile at 4 rows and of the runtime layout's 4-row tile (what rows of
    385-511, and callers without static layouts, run), on fresh inputs and NaN-poisoned outputs,
    with a tile overhanging A in each."""
    m = 37
    x, _, w = make_inputs((m, n), dtype, dev, has_weight=True, offset=offset, generator=gen)
    code = forward_casting(casting_code(casting, False), x, w, x, offset)
    rules = plan("forward", m, 1, n, 2, SMS)
    assert (rules.kind, rules.static, rules.tile_a) == ("lanes", True, 16 if n < 288 else 8), rules
    outs = []
    for static, rows in ((True, None), (True, 4), (False, 4)):
        y, rstd = nan_like(x.shape, dtype, x.device), nan_like((m,), torch.float32, x.device)

        def run(device, stream, static=static, rows=rows, y=y, rstd=rstd):
            p = lanes_plan("forward", m, 1, n, 2, device.num_sms, tile_rows=rows, static=static)
            assert (p.static, p.check_a) == (static, True), p
            RL.run_forward(p, rows3(x, m, 1), w, y.view(m, 1, n), rstd.view(m, 1), EPS, offset, code, device, stream)

        launch_on_device(x, run)
        outs.append((y, rstd))
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    ref_y, ref_rstd, _, _ = rms_norm_ref_grads(x, x, w, EPS, offset)
    tol = tolerances(dtype, w.dtype, casting)
    check_all({"y": outs[0][0], "rstd": outs[0][1]}, {"y": ref_y, "rstd": ref_rstd}, tol)
    for y, rstd in outs[1:]:
        assert torch.equal(rstd.view(torch.int32), outs[0][1].view(torch.int32))
        assert torch.equal(y.view(torch.int16), outs[0][0].view(torch.int16))


@pytest.mark.parametrize("n,dtype", [(170, torch.bfloat16), (97, torch.float16), (301, torch.bfloat16),
                                     (138, torch.float32)], ids=str)  # fmt: skip
@pytest.mark.parametrize("static", [False, True], ids=["runtime", "static"])
def test_lanes_forward_same_bits(dev, n, dtype, static, gen):
    """rows_fwd_lanes on a grid of fewer blocks than tiles (LOOP; one SM: 8 blocks for 38 tiles,
    the last tile overhanging A) gives the bits of the same tile a block a tile (without LOOP: y
    scattered at the gather's indices), on the lanes the rules give static layouts (170: 8
    elements a lane, vector_lanes); and the rules' own plan on one SM (170 static:
    plan.lanes_one_tile, 8 rows a block a tile) the bits of the same tile on the loop's
    persistent grid, and the first 37 rows alone (5 blocks) the bits of the same rows of all
    150, so a row's bits do not depend on M. (These kernels' bits agree at the lengths here;
    the compiler may order a row's sum differently in another kernel, session 55: the loop's and
    the one-tile kernels of 300 did not agree. The tile's rows may change rstd's bits on the GPU
    too: 16 and 4 rows of 170 did, session 54; they are a function of N, lanes_tile_rows.) Fresh
    inputs, NaN-poisoned outputs, y and rstd against float64."""
    m = 150
    x, _, w = make_inputs((m, n), dtype, dev, has_weight=True, offset=0.0, generator=gen)
    code = forward_casting(casting_code("llama", False), x, w, x, 0.0)
    es = x.element_size()
    lane_elems = (vector_lanes(n, es) or LANES_ELEMS) if static else LANES_ELEMS
    plans = [
        lanes_plan(
            "forward",
            m,
            1,
            n,
            es,
            1,
            tile_rows=4,
            static=static,
            persistent=persistent,
            lane_elems=lane_elems,
        )
        for persistent in (True, False)
    ]
    assert [(p.prefetch, p.grid, p.loop) for p in plans] == [(False, 8, True), (False, 38, False)]
    rules = plan("forward", m, 1, n, es, 1, static=static)
    assert rules.kind == "lanes", rules
    _same_forward_bits(x, w, code, plans)
    if static and n == 170:  # the rule's tile a block a tile, on the loop's grid, and for fewer rows
        assert (rules.tile_a, rules.occupancy, rules.grid, rules.prefetch, rules.loop) == (8, 8, 19, False, False)
        looped = lanes_plan("forward", m, 1, n, es, 1, static=True, lane_elems=lane_elems, persistent=True)
        assert (looped.tile_a, looped.grid, looped.prefetch, looped.loop) == (8, 8, False, True), looped
        (y, rstd), _ = _same_forward_bits(x, w, code, [rules, looped])
        k = 37  # the first k rows alone: the same tile, 5 blocks, the same bits (batch invariance)
        few = plan("forward", k, 1, n, es, 1, static=static)
        assert (few.tile_a, few.grid, few.loop) == (8, 5, False), few
        [(y_few, rstd_few)] = _same_forward_bits(x[:k], w, code, [few])
        assert torch.equal(rstd_few.view(torch.int32), rstd[:k].view(torch.int32))
        assert torch.equal(y_few.view(torch.int16), y[:k].view(torch.int16))


def _same_forward_bits(x, w, code, plans):
    """Runs each forward plan on NaN-poisoned outputs and checks y and rstd against float64 and
    the plans' outputs bit for bit against each other; returns [(y, rstd)] a plan."""
    m, n = x.shape
    dtype = x.dtype
    outs = []
    for p in plans:
        y, rstd = nan_like(x.shape, dtype, x.device), nan_like((m,), torch.float32, x.device)

        def run(device, stream, p=p, y=y, rstd=rstd):
            RL.run_forward(p, rows3(x, m, 1), w, y.view(m, 1, n), rstd.view(m, 1), EPS, 0.0, code, device, stream)

        launch_on_device(x, run)
        outs.append((y, rstd))
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    ref_y, ref_rstd, _, _ = rms_norm_ref_grads(x, x, w, EPS, 0.0)
    check_all(
        {"y": outs[0][0], "rstd": outs[0][1]}, {"y": ref_y, "rstd": ref_rstd}, tolerances(dtype, w.dtype, "llama")
    )
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    for p, (y, rstd) in zip(plans[1:], outs[1:], strict=True):
        assert torch.equal(rstd.view(torch.int32), outs[0][1].view(torch.int32)), (plans[0], p)
        assert torch.equal(y.view(bits), outs[0][0].view(bits)), (plans[0], p)
    return outs


def test_vector_lanes_forward_one_tile_rule():
    """plan.lanes_one_tile: the forward of 16-bit rows on their static vector lanes (2 mod 4 and 4
    mod 8 rows padded to 128-512) runs a block a tile of 2048 padded elements without the loop
    and without the prefetch, the same tile at every M; runtime layouts, odd and fp32 rows keep
    the loop's persistent grid; persistent=True asks for the loop."""
    big = 1 << 22
    for n in (66, 68, 82, 116, 138, 170, 250, 300, 354, 494, 500, 510):
        w = 1 << (n - 1).bit_length()
        p = plan("forward", big, 1, n, 2, SMS)
        assert (p.kind, p.static, p.lanes * vector_lanes(n, 2), p.tile_a * w, p.loop, p.prefetch) == (
            "lanes", True, w, 2048, False, False), (n, p)  # fmt: skip
        assert (p.occupancy, p.grid) == (LANES_OCCUPANCY["forward"], -(-big // p.tile_a)), (n, p)
        for m in (1, 37, 4 * SMS * p.tile_a + 1):  # the tile does not depend on M (batch invariance)
            q = plan("forward", m, 1, n, 2, SMS)
            assert (q.tile_a, q.grid, q.loop) == (p.tile_a, -(-m // p.tile_a), False), (n, m, q)
        r = plan("forward", big, 1, n, 2, SMS, static=False)  # runtime layouts: L = 16 (or row tiles), the loop
        assert r.kind != "lanes" or (r.loop and r.grid == SMS * LANES_OCCUPANCY["forward"]), (n, r)
        q = plan("forward", big, 1, n, 2, SMS, lanes=True, persistent=True)
        assert (q.kind, q.tile_a, q.loop, q.grid) == ("lanes", p.tile_a, True, SMS * 8), q
        assert plan("backward", big, 1, n, 2, SMS).loop  # (the backward's tiles: the loop, dW a block)
    for n, es in ((97, 2), (183, 2), (411, 2), (138, 4), (74, 4)):
        p = plan("forward", big, 1, n, es, SMS)
        assert (p.kind, p.loop, p.grid) == ("lanes", True, SMS * LANES_OCCUPANCY["forward"]), (n, es, p)


@pytest.mark.parametrize("shape", [(37, 204), (11, 292)], ids=str)
def test_vector_lanes_fp32_kernels(dev, shape, gen):
    """The lanes kernels of fp32 rows with 4 elements a lane (probes only: the rule leaves fp32
    rows to the rules' lanes, measured slower) against float64."""

    def plan_of(*args):
        return lanes_plan(*args, static=True, lane_elems=4)

    _check_planned(dev, shape, torch.float32, "gemma", True, 0.0, gen, plan_of)


# The native llama multiply (kernels.common.CAST_LLAMA_NATIVE, session 32) on every forward kernel
# kind the rules plan, static layouts and runtime ones: (shape, kinds and loads with static
# layouts, without). Row tiles of one and of two pieces (plain loads), unaligned rows (static plain
# loads; gathered pieces at run time), short odd and 2 mod 4 rows (static and runtime lanes), a
# head view, the long forward (a block a row static; a persistent grid at run time).
NATIVE_CASES = [
    ((37, 1024), ("tile", K.LOADS_PLAIN), ("tile", K.LOADS_PLAIN)),
    ((9, 5120), ("tile", K.LOADS_PLAIN), ("tile", K.LOADS_PLAIN)),
    ((37, 1098), ("tile", K.LOADS_PLAIN), ("tile", K.LOADS_GATHER)),
    ((40, 81), ("lanes", K.LOADS_GATHER), ("lanes", K.LOADS_GATHER)),
    ((300, 138), ("lanes", K.LOADS_GATHER), ("lanes", K.LOADS_GATHER)),
    ((3, 5, 204), ("lanes", K.LOADS_GATHER), ("lanes", K.LOADS_GATHER)),
    ((7, 414), ("lanes", K.LOADS_GATHER), ("tile", K.LOADS_GATHER)),
    ((5, 12500), ("long", K.LOADS_GATHER), ("long", K.LOADS_GATHER)),
    ((3, 12800), ("long", K.LOADS_PLAIN), ("long", K.LOADS_PLAIN)),
]


def _adversarial_weight(n, dtype, device, gen):
    """A weight of x's dtype with every sign and size: +-0, negatives, subnormals, values whose
    products overflow fp16 (about 6e4 times |xhat| up to 4), and the usual 1 +- 0.1."""
    w = 1 + 0.1 * torch.randn(n, generator=gen)
    special = torch.tensor([0.0, -0.0, -1.5, 2.0**-130, -(2.0**-20), 6e4, -3e4, 1e-3])
    k = min(n, 4 * special.numel())
    w[torch.randperm(n, generator=gen)[:k]] = special.repeat(4)[:k]
    return w.to(dtype).to(device)


@pytest.mark.parametrize("shape,with_static,at_runtime", NATIVE_CASES, ids=[str(c[0]) for c in NATIVE_CASES])
@pytest.mark.parametrize("static", [True, False], ids=["static", "runtime"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_native_llama_same_bits(dev, shape, with_static, at_runtime, static, dtype, gen):
    """y and rstd of the native llama multiply (y = xhat * w in x's dtype) are bit for bit those of
    llama's fp32 multiply (the product of two 16-bit values is exact in fp32), but for the sign of
    a zero y where a weight element is -0.0 and, on the one-tile lanes forward, rows whose sum the
    two kernels ordered differently (rstd an ulp apart: y compared there against float64 only); on
    fresh inputs, NaN-poisoned outputs, a weight with
    zeros of both signs, negatives, subnormals and fp16-overflowing values. forward_casting picks
    native only for a weight of x's dtype, y of that dtype too, and offset 0; the launcher refuses
    it otherwise, and the custom ops' raw codes refuse it."""
    x, _, _ = make_inputs(shape, dtype, dev, has_weight=True, offset=0.0, generator=gen)
    w = _adversarial_weight(shape[-1], dtype, x.device, gen)
    n = shape[-1]
    x.view(-1, n)[0, w.float().abs() > 1e4] = 3.0  # |xhat| about 3 there: fp16's y overflows on every draw
    a, b = row_groups(x)
    y32 = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    assert forward_casting(CK.CAST_LLAMA, x, w, x, 0.0) == CK.CAST_LLAMA_NATIVE
    assert forward_casting(CK.CAST_LLAMA, x, w, x, 1.0) == CK.CAST_LLAMA  # offset + w is not w
    assert forward_casting(CK.CAST_LLAMA, x, w.float(), x, 0.0) == CK.CAST_LLAMA  # an fp32 weight
    assert forward_casting(CK.CAST_LLAMA, x, w, y32, 0.0) == CK.CAST_LLAMA  # y of another dtype
    assert forward_casting(CK.CAST_LLAMA, x, None, x, 0.0) == CK.CAST_LLAMA
    assert forward_casting(CK.CAST_GEMMA, x, w, x, 0.0) == CK.CAST_GEMMA
    with pytest.raises(ValueError, match="casting must be one of"):
        torch.ops.cutile_rms.rms_norm_fwd(x, w, EPS, 0.0, CK.CAST_LLAMA_NATIVE, None)
    kind, loads = with_static if static else at_runtime
    outs, plans = [], []
    for code in (CK.CAST_LLAMA, CK.CAST_LLAMA_NATIVE):
        y, rstd = nan_like(x.shape, dtype, x.device), nan_like(x.shape[:-1], torch.float32, x.device)

        def run(device, stream, code=code, y=y, rstd=rstd):
            p = RL.plan("forward", a, b, n, x.element_size(), device.num_sms, any_length=True, static=static)
            assert (p.kind, p.loads, p.static) == (kind, loads, static and p.static), p
            plans.append(p)
            RL.run_forward(p, rows3(x, a, b), w, y.view(a, b, n), rstd.view(a, b), EPS, 0.0, code, device, stream)
            with pytest.raises(ValueError, match="CAST_LLAMA_NATIVE needs"):  # before any launch
                RL.run_forward(p, rows3(x, a, b), w, y.view(a, b, n), rstd.view(a, b), EPS, 1.0,
                               CK.CAST_LLAMA_NATIVE, device, stream)  # fmt: skip

        launch_on_device(x, run)
        outs.append((y, rstd))
    if x.device.type == "cuda":
        torch.cuda.synchronize()
    (y0, r0), (y1, r1) = outs
    assert not r0.isnan().any() and not y0.isnan().any()
    ulps = (r0.view(torch.int32) - r1.view(torch.int32)).abs()
    if plans[0].loop:
        assert not bool(ulps.any())
    else:  # the one-tile lanes forward (plan.lanes_one_tile): each compiled kernel sums a row in an order
        # of its own, so the two castings' rstd may differ by an ulp (session 55, ab/s55e-bits.log:
        # 19-29 of 300 rows at fp16 204, 1-3 of 15 here); y bit for bit on the rows whose rstd agree
        # (at least half of them on every draw there), both against float64 below
        assert int(ulps.max()) <= 1 and float((ulps == 0).float().mean()) >= 0.5, ulps
    same = (y0.view(torch.int16) == y1.view(torch.int16)) | ((y0 == 0) & (y1 == 0)) | (ulps != 0).unsqueeze(-1)
    assert bool(same.all()), (y0[~same][:8], y1[~same][:8])
    assert bool((y1.isinf() == y0.isinf()).all()) and (dtype != torch.float16 or bool(y1.isinf().any()))
    finite = ~y1.isinf()
    ref, ref_rstd, _, _ = rms_norm_ref_grads(x, torch.zeros_like(x), w, EPS, 0.0)
    for yk, rk in ((y0, r0), (y1, r1)):
        check_all({"y": torch.where(finite, yk, 0), "rstd": rk}, {"y": torch.where(finite, ref, 0), "rstd": ref_rstd},
                  tolerances(dtype, w.dtype, "llama"), {})  # fmt: skip


LOADS_CASES = [
    ((37, 1098), "unaligned, plain loads", K.LOADS_PLAIN),
    ((37, 512), "aligned, gathered", K.LOADS_GATHER),
    ((9, 2265), "one-row tiles, plain", K.LOADS_PLAIN),
    ((5, 3, 1000), "3-D, gathered", K.LOADS_GATHER),
]


@pytest.mark.parametrize("shape,what,loads", LOADS_CASES, ids=[c[1] for c in LOADS_CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("static", [True, False], ids=["static", "runtime"])
def test_rows_loads_either_way(dev, shape, what, loads, dtype, static, gen):
    """Either way of reading the row tiles (kernels.LOADS_*) is right wherever the rules do not
    pick it: gathers on aligned rows, plain loads on unaligned ones; on the static-layout kernels
    and on their runtime-layout twins."""
    x, dy, w = make_inputs(shape, dtype, dev, has_weight=True, generator=gen)
    out = _poisoned_run(x, dy, w, "llama", 0.0, loads=loads, static=static)
    y, rstd, dx, dw = rms_norm_ref_grads(x, dy, w, EPS, 0.0)
    check_all(out, {"y": y, "rstd": rstd, "dx": dx, "dw": dw}, tolerances(dtype, w.dtype, "llama"), _few_rows(x, dy))


RUNTIME_CASES = [((37, 1098), "multi-row tiles, gathered"), ((5, 4974), "one-row tiles, two pieces"),
                 ((37, 191), "lanes"), ((3, 25263), "long rows"), ((9, 4096), "aligned")]  # fmt: skip


@pytest.mark.parametrize("shape,what", RUNTIME_CASES, ids=[c[1] for c in RUNTIME_CASES])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_runtime_layouts(dev, shape, what, dtype, gen):
    """The runtime-layout twins (the launchers' fallback past rows.launch.STATIC_LAYOUTS) of every
    kernel kind on the rules' plans for runtime layouts, every output against float64."""
    casting = "gemma" if dtype == torch.float32 else "llama"

    def plan_of(op, a, b, n, es, sms):
        p = plan(op, a, b, n, es, sms, any_length=True, static=False)
        return p if p is not None else long_plan(op, a, b, n, es, sms)

    _check_planned(dev, shape, dtype, casting, True, 0.0, gen, plan_of)


def test_onepass_long_backward_where_two_blocks_fit():
    """The long backward runs in one kernel on even 16-bit rows whose two blocks an SM fit half of
    L2 (10812, 11500 won 1.16-1.63x; 12474 tied, longer rows lost: bench/NOTES.md, session 25),
    on static layouts; odd rows, longer rows and runtime layouts keep the two kernels (fp32 rows
    run the core's)."""
    for n in (8202, 10812, 11500, 11902):
        p = plan("backward", 5000, 1, n, 2, SMS)
        assert (p.kind, p.onepass, p.occupancy, p.static) == ("long", True, 2, True), n
        p = plan("backward", 5000, 1, n, 2, SMS, static=False)
        assert p is None or not p.onepass
    for n in (10813, 21630, 16390, 13933):
        p = plan("backward", 5000, 1, n, 2, SMS)
        assert p.kind == "long" and not p.onepass, n
    for n in (11902, 8202, 12474):  # fp32: the core's kernels (session 37)
        assert plan("backward", 5000, 1, n, 4, SMS) is None, n
    for n in (12474, 13642, 15002, 16382):  # even, past the one-pass: the core kernels (plan.CORE_BWD_MAX_ELEMS)
        assert plan("backward", 5000, 1, n, 2, SMS) is None and backward_by_default(n, 2), n
        assert plan("backward", 5000, 1, n, 2, SMS, long=True).kind == "long"  # a caller may still ask
    assert not plan("forward", 5000, 1, 11500, 2, SMS).onepass


def test_prefetch_rule():
    """The backward's row tiles read their next tile first where the hint leaves a thread 128
    registers or more and the register line's need passes that cap by less than
    PREFETCH_OVER_CAP (bench/NOTES.md, session 26: the lengths it won and lost at); the lanes
    backward always (LANES_BWD_PREFETCH, session 27); forward plans only where asked (persistent grids
    of plain loads), never long plans; an override wins."""
    on = [(689, 2), (1407, 2), (2301, 2), (5555, 2), (128, 2), (256, 2), (1302, 2), (749, 4), (1407, 4), (4999, 4)]
    on.append((3001, 2))  # over the cap on 4 warps: 8 warps, where it prefetches (session 28)
    off = [(5905, 2), (136, 2), (296, 2), (1000, 2), (136, 4)]  # over the cap, or 8 blocks an SM
    for n, es in on + off:
        p = plan("backward", 1 << 20, 1, n, es, SMS)
        assert p.kind == "tile" and p.prefetch == ((n, es) in on), (n, es, p)
        assert not plan("forward", 1 << 20, 1, n, es, SMS).prefetch
    assert plan("backward", 99, 1, 3001, 2, SMS, prefetch=True).prefetch
    assert not plan("backward", 99, 1, 689, 2, SMS, prefetch=False).prefetch
    for n, es in ((98, 2), (71, 2), (241, 2), (149, 4)):  # the lanes kernels
        p = plan("backward", 99, 1, n, es, SMS)
        assert p.kind == "lanes" and p.prefetch, (n, es)
        assert not plan("backward", 99, 1, n, es, SMS, prefetch=False).prefetch
        assert not plan("forward", 99, 1, n, es, SMS).prefetch
        with pytest.raises(ValueError, match="no prefetch"):  # (the lanes forward has none, session 55)
            plan("forward", 99, 1, n, es, SMS, prefetch=True)
    assert not plan("backward", 99, 1, 20001, 2, SMS).prefetch  # the long kernels
    assert plan("forward", 1 << 20, 1, 4096, 2, SMS, persistent=True, prefetch=True).prefetch
    assert not plan("forward", 1 << 20, 1, 4096, 2, SMS, persistent=False, prefetch=True).prefetch  # a tile a block


def test_row_forward_warps_rule():
    """One-row forward tiles of 16-bit rows whose start is 8-byte, not 16-byte, aligned (4 mod 8)
    take 8 warps on static layouts where that gives more warps an SM (plan.ROW_FWD_WARPS: 4100-6140, 4 blocks of 8
    warps; bench/NOTES.md, session 36: 1.12-1.16x); other alignments at those lengths (they tied
    or lost), rows whose 4-warp tiles run 8 blocks (2604), fp32 rows and overrides keep 4."""
    for n in (4100, 4636, 4804, 5212, 5988, 6116, 6140):
        p = plan("forward", 1 << 16, 1, n, 2, SMS)
        assert (p.kind, p.tile_a, p.warps, p.occupancy) == ("tile", 1, 8, 4), (n, p)
    for n, es in ((4441, 2), (4354, 2), (4392, 2), (4464, 2), (5722, 2), (2604, 2), (2092, 2), (4802, 4)):
        p = plan("forward", 1 << 16, 1, n, es, SMS)
        assert p is None or p.kind != "tile" or p.tile_a > 1 or p.warps == 4, (n, es, p)
    assert plan("forward", 1 << 16, 1, 4804, 2, SMS, occupancy=4).warps == 4  # an override keeps the old line
    for n in (4804, 5212, 6116):  # runtime layouts load these rows 2 bytes an element: 8 warps tied or lost
        assert plan("forward", 1 << 16, 1, n, 2, SMS, static=False).warps == 4, n


def test_short_backward_rule():
    """The default backward takes aligned rows that are not a power of two, up to
    SHORT_BWD_MAX_ELEMS, on the row tiles with the PREFETCH rule (bench/NOTES.md, session 27: 1.1-1.9x
    the core at 96-640, 16-bit and fp32); powers of two past DEFAULT_BACKWARD_BYTES, longer rows
    and 16-bit rows that runtime layouts cannot load 16 bytes at a time stay where they were; the
    forward of such 16-bit rows runs on static layouts."""
    for n, es in ((96, 2), (160, 2), (192, 2), (320, 2), (448, 2), (640, 2), (96, 4), (384, 4), (640, 4)):
        assert short_backward(n, es) and backward_by_default(n, es), (n, es)
        p = plan("backward", 1 << 20, 1, n, es, SMS)
        assert p.kind == "tile" and p.prefetch and not p.static and p == plan(
            "backward", 1 << 20, 1, n, es, SMS, any_length=True), (n, es)  # fmt: skip
        if es == 2:
            assert plan("forward", 1 << 20, 1, n, es, SMS).static, n  # plan.STATIC_PADDED_BLOCKS
    for n, es in ((704, 2), (768, 2), (832, 2), (704, 4), (768, 4), (896, 4), (1000, 4)):
        assert not short_backward(n, es) and not backward_by_default(n, es), (n, es)
    for n, es in ((512, 2), (1024, 2), (256, 4), (512, 4), (104, 2), (99, 2), (99, 4)):
        assert not short_backward(n, es), (n, es)  # powers of two, 8 | N not 16, unaligned
    assert not backward_by_default(512, 2) and not backward_by_default(256, 4)


def test_aligned_backward_rule():
    """The default backward takes aligned 16-bit rows that are not a power of two on row tiles of 4
    warps that keep 36 KB of x and dy in flight an SM within their blocks' registers
    (plan.aligned_backward_tile, session 52): the most rows (up to 2) at 4 blocks within 20
    elements a thread, else at 2 blocks within 52; the core keeps powers of two, rows whose tiles
    hold less (1136, 1536: 25 KB, 3584: 29 KB) and longer ones (7168); fp32 and 8 | N rows keep
    their rules."""
    want = {1152: (2, 4), 1280: (2, 4), 2304: (1, 4), 2560: (1, 4), 2880: (2, 2), 3072: (2, 2), 3328: (2, 2),
            4608: (1, 2), 5120: (1, 2), 5376: (1, 2), 6144: (1, 2), 6656: (1, 2)}  # fmt: skip
    for n, (rows, blocks) in want.items():
        assert aligned_backward_tile(n, 2) == (rows, blocks) and backward_by_default(n, 2), n
        p = plan("backward", 99999, 1, n, 2, SMS)
        assert (p.kind, p.tile_a * p.tile_b, p.warps, p.occupancy, p.prefetch) == ("tile", rows, 4, blocks, True), p
        assert n <= sum(p.widths) <= n * 9 // 8, p  # the rules' pieces (2880 pads to 2048 + 1024)
        for a in (1, 7, 133, 4099):  # the tile by N alone, never by the rows (a row's dx bits)
            q = plan("backward", a, 1, n, 2, SMS)
            assert (q.tile_a, q.widths, q.warps, q.occupancy) == (p.tile_a, p.widths, p.warps, p.occupancy), (a, q)
        assert plan("backward", 99, 1, n, 2, SMS, static=False).warps == 4  # runtime layouts too
    # a caller's or probe's keywords stand: the long kernels keep their warps, given warps their own
    assert plan("backward", 99, 1, 5376, 2, SMS, long=True).warps == LONG_WARPS["backward"]
    assert plan("backward", 99, 1, 5376, 2, SMS, warps=8).warps == 8
    assert plan("backward", 99, 1, 3072, 2, SMS, occupancy=4).occupancy == 4
    for n in (1136, 1536, 2048, 3584, 4096, 4352, 6912, 7168, 8192, 5000):  # (5000: 8 | N, its own rule)
        assert aligned_backward_tile(n, 2) is None, n
    assert aligned_backward_tile(5376, 4) is None and not backward_by_default(3584, 2)
    assert not backward_by_default(7168, 2) and not backward_by_default(1536, 2)


def test_gathered_pair_rule():
    """The default backward of unaligned even 16-bit rows whose one-row gathered tiles keep less than
    36 KiB of x and dy in flight an SM takes two rows on the same warps and blocks, with the
    prefetch, where two rows hold at most 24 padded elements a thread (plan.GATHERED_BWD_PAIR_ELEMS,
    session 53): the plans timed in s53a-s53c, by N alone; odd rows, rows past the bound and rows
    whose one-row tiles keep 36 KiB keep one row."""
    want = {1302: (4, 4), 1380: (4, 4), 1442: (4, 4), 1494: (4, 4), 1530: (4, 4),  # (warps, blocks)
            2830: (8, 2), 2850: (8, 2), 2922: (8, 2), 3020: (8, 2), 3066: (8, 2)}  # fmt: skip
    for n, (warps, blocks) in want.items():
        for static in (True, False):
            p = plan("backward", 99999, 1, n, 2, SMS, static=static)
            assert (p.kind, p.tile_a, p.warps, p.occupancy, p.prefetch) == ("tile", 2, warps, blocks, True), p
            assert 2 * sum(p.widths) <= GATHERED_BWD_PAIR_ELEMS * 32 * warps, p
            for a in (1, 7, 133, 4099):  # the tile by N alone, never by the rows (a row's dx bits)
                q = plan("backward", a, 1, n, 2, SMS, static=static)
                assert (q.tile_a, q.widths, q.warps, q.occupancy) == (p.tile_a, p.widths, p.warps, p.occupancy), q
    # odd rows (1333, 2901, fp16 3001 tied or lost) and rows past 24 elements a thread (1667, 3333: 28;
    # 1894, 3850: 32; 2310, 4614: 36, whose one-row tiles also keep 36 KiB) keep one row
    for n in (1333, 2901, 3001, 1667, 3333, 1894, 3850, 2221, 4390, 2310, 4614):
        assert plan("backward", 99999, 1, n, 2, SMS).tile_a == 1, n
    assert plan("backward", 99999, 1, 1442, 4, SMS).tile_a == 1  # fp32: plain loads, its own rules
    # a caller's or probe's keywords stand
    assert plan("backward", 99, 1, 1442, 2, SMS, min_piece=1).tile_a == 1
    assert plan("backward", 99, 1, 2922, 2, SMS, max_pieces=3).tile_a == 1


def test_short_backward_pieces():
    """16-bit rows of 513-640 elements that the default backward runs on 4-row tiles (short_backward)
    take pieces of at least 64 elements (plan.SHORT_BWD_MIN_PIECE, session 53: 560 as 512 + 32 + 16 ran
    at 31% of the copy); shorter rows' 8- and 16-row tiles keep the least-padding pieces."""
    want = {528: (512, 64, 0), 544: (512, 64, 0), 560: (512, 64, 0), 592: (512, 128, 0), 608: (512, 128, 0),
            624: (512, 128, 0), 272: (256, 16, 0), 304: (256, 32, 16), 416: (256, 128, 32)}  # fmt: skip
    for n, widths in want.items():
        for static in (True, False):
            p = plan("backward", 99999, 1, n, 2, SMS, static=static)
            assert p.kind == "tile" and p.widths == widths and p.tile_a == (4 if n > 512 else 8), (n, p)
            assert n <= 512 or min(w for w in p.widths if w) == SHORT_BWD_MIN_PIECE * (1 + (n > 576)), (n, p)
    for kw in ({"min_piece": 1}, {"tile_rows": 4}, {"occupancy": 4}):  # a caller's or probe's keywords stand
        assert plan("backward", 99, 1, 560, 2, SMS, **kw).widths == (512, 32, 16), kw
    assert plan("backward", 99, 1, 560, 4, SMS).widths == (512, 32, 16)  # fp32: unmeasured, unchanged


def test_static_fit():
    """Static layouts for rows of an even length not a multiple of 16: 16-bit rows whose start is
    8-byte aligned (4 | N) at any length, the others of at least 1 KB forward and 2 KB backward
    (short rows of 4-byte aligned starts lost, bench/NOTES.md, sessions 21 and 25); fp32 rows of
    up to 1024 elements forward, 511 backward (session 25). Short static rows take one padded
    piece (plan.py, session 25); the default backward takes 16-bit rows of a multiple of 8, not
    16, elements where the static tiles hold 16 warps an SM (session 22) or more (session 25)."""
    assert static_fit(610, 2) and static_fit(1098, 2, "backward")
    assert static_fit(1144, 2) and static_fit(3000, 2, "backward") and static_fit(13288, 2)  # 8 | N, not 16
    assert not static_fit(510, 2) and not static_fit(610, 2, "backward")  # 4-byte starts, under 1 KB / 2 KB
    assert static_fit(504, 2) and static_fit(1000, 2, "backward") and static_fit(292, 2, "backward")  # 4 | N
    assert not static_fit(1099, 2) and not static_fit(1104, 2) and not static_fit(1097, 4)  # odd, 16 | N, odd
    assert static_fit(292, 4) and static_fit(1022, 4) and static_fit(510, 4, "backward")  # fp32, short
    assert not static_fit(1098, 4) and not static_fit(518, 4, "backward") and not static_fit(3000, 4)
    assert plan("forward", 99, 1, 610, 2, SMS).static and not plan("backward", 99, 1, 610, 2, SMS).static
    for op in OPS:
        assert plan(op, 99, 1, 3000, 2, SMS).static
        assert plan(op, 99, 1, 3000, 2, SMS, static=False) is None  # runtime layouts: the core kernels
        for n, es, width in ((296, 2, 512), (856, 2, 1024), (88, 2, 128), (292, 4, 512)):
            p = plan(op, 99, 1, n, es, SMS)  # one padded piece (4 mod 8 rows: vector lanes, session 31)
            assert p.static and p.kind == "tile" and p.widths == (width, 0, 0), (op, n, es, p)
    assert plan("forward", 99, 1, 3000, 4, SMS).static is False and plan("forward", 99, 1, 518, 4, SMS).static
    assert plan("forward", 99, 1, 7000, 4, SMS).static  # its runtime plan, compiled (plan.word_static)
    assert plan("forward", 99, 1, 856, 2, SMS, static=False) is None  # under 2 KB, not a power of two: the core
    assert plan("forward", 99, 1, 1128, 2, SMS).static  # 2 KB and more: static row tiles
    # the backward's short static tiles: IN_FLIGHT_BYTES of x and dy at 8 blocks an SM
    b = plan("backward", 99999, 1, 296, 2, SMS)
    assert (b.tile_a, b.occupancy, b.warps) == (4, 8, 4) and plan("backward", 99999, 1, 292, 4, SMS).tile_a == 2
    # the default backward: where the static tiles hold 16 warps an SM (1128, 2056, 5000 won), not 8 (3000, 1736)
    assert all(backward_by_default(n, 2) for n in (1128, 1208, 2056, 4104, 5000, 856, 88, 1000))
    assert not any(backward_by_default(n, 2) for n in (1736, 2728, 3000, 6152, 7592, 3000 * 2 + 8))
    assert backward_by_default(292, 4) and not backward_by_default(4096 + 16, 2)


def test_padded_backward_rule():
    """The gathered 16-bit backward on static layouts holds a row as one padded power-of-two piece
    of 4096 or 8192 where the row fills PADDED_BWD_MIN_SHARE of it, several pieces otherwise and on
    runtime layouts."""
    for n in (3076, 6146, 7124, 8188):
        p = plan("backward", 9999, 1, n, 2, SMS)
        assert p.static and p.widths == (1 << (n - 1).bit_length(), 0, 0), (n, p)
        assert n == 8188 or plan("backward", 9999, 1, n, 2, SMS, static=False).widths[1] > 0  # runtime: pieces
    for n in (3002, 4100, 4282, 5002, 6142, 1540, 2052):
        assert plan("backward", 9999, 1, n, 2, SMS).widths[1] > 0, n
    assert PADDED_BWD_MIN_SHARE * 8192 <= 6146 and PADDED_BWD_MIN_SHARE * 4096 > 3002  # the measured sides


def test_fp32_backward_rule():
    """The default backward takes fp32 rows that are not a power of two, past FP32_BWD_MIN_BYTES and
    up to the row tiles' longest, on the row tiles (session 35: 1.0-1.7x the core, which pads them
    to a power of two); shorter ones, powers of two and longer ones stay on the core."""
    for n in (1028, 1128, 1196, 2040, 3076, 5000, 8188):
        assert backward_by_default(n, 4) and plan("backward", 9999, 1, n, 4, SMS).kind == "tile", n
    for n in (516, 804, 1004, 1024, 2048, 4096, 8192, 8196, 8708):
        assert not backward_by_default(n, 4), n
    assert 1004 * 4 <= FP32_BWD_MIN_BYTES < 1196 * 4  # between the measured loss and win (session 35)


def test_word_static():
    """The forward of fp32 rows of 4 | N, not 16 | N, of 5633-8192 elements (the rules' 4096 + 2048
    pieces and up to the widest 4-warp row tiles) keeps its runtime plan, compiled for the row
    layout (sessions 56-57), at every row count (batch invariance); the backward, shorter rows, 16 | N,
    2 mod 4, 16-bit rows and the 8-warp tiles past 8192 do not."""
    for n, es, op, on in ((6148, 4, "forward", True), (6540, 4, "forward", True), (7000, 4, "forward", True),
                          (7944, 4, "forward", True), (8188, 4, "forward", True), (6140, 4, "forward", True),
                          (5636, 4, "forward", True), (5628, 4, "forward", False), (5652, 4, "forward", True),
                          (5000, 4, "forward", False), (1380, 4, "forward", False), (6160, 4, "forward", False),
                          (6146, 4, "forward", False), (8196, 4, "forward", False), (9460, 4, "forward", False),
                          (6540, 4, "backward", False), (6540, 2, "forward", False)):  # fmt: skip
        assert word_static(n, es, op) == on, (n, es, op)
    assert plan("forward", 99, 1, 5636, 4, SMS).widths[:2] == (4096, 2048)  # where the line falls
    assert plan("forward", 99, 1, 5628, 4, SMS).widths[:2] == (4096, 1024)
    for n in (5636, 6148, 6540, 7000, 7944, 8188):
        for a in (1, 7, 132, 4099, 100000):
            p = plan("forward", a, 1, n, 4, SMS)
            runtime = plan("forward", a, 1, n, 4, SMS, static=False)
            assert p.kind == "tile" and p.static and dataclasses.replace(p, static=False) == runtime, (n, a)
        assert not plan("backward", 4099, 1, n, 4, SMS).static, n
    for n in (1380, 5000, 5628, 6160, 8196, 9460, 12712):
        assert not plan("forward", 4099, 1, n, 4, SMS).static, n


@pytest.mark.compile
@pytest.mark.parametrize("n,deferred", [(6156, 4), (6540, None), (7000, 4), (7944, None)], ids=str)
def test_word_static_plans_load_16_bytes(sass, n, deferred):
    """Why plan.word_static holds: on runtime layouts the JIT promises a row stride divisible by 16
    elements or nothing, so fp32 rows of 4 | N, not 16 | N, load and store 4 bytes at a time, and
    from 6145 elements the 4-warp tile so compiled spills (tileiras 13.4: 6156, 6540, 7944) or
    issues x loads after the first use of a loaded value (``deferred`` of them at least, 6156 and
    7000: bench/NOTES.md, session 56); compiled for the row layout the same plan loads and stores
    16 bytes, without stack, and (there) issues every x load first. Should a runtime layout one
    day prove the rows' alignment, this fails and the rule can go."""
    dt = sass.ct.float32
    for static in (True, False):
        p = plan("forward", 99999, 1, n, 4, SMS, static=static)
        assert p.static == static, p
        kernel, params, hints = sass.rows_params(p, dt, 99999, 1, n)
        r = sass.compile_report(kernel, params, **hints)
        ops = r["ops"]  # (y's stores show the rows' layout: the weight's loads could be wide alone)
        wide = ops.get("LDG.128", 0) > 0 and ops.get("STG.128", 0) > 0
        narrow = ops.get("LDG.128", 0) == ops.get("STG.128", 0) == 0 and ops.get("LDG", 0) > 0
        assert (wide and r.get("STACK", 0) == 0) if static else narrow, (p, r)
        if deferred is not None:
            assert (r["deferred"] == 0 and r["x_loads"] > 0) if static else r["deferred"] >= deferred, (p, r)


def test_deferred_loads_reads_the_schedule(sass):
    """bench.probes.sass.deferred_loads on hand-written listings: x loads are the LDGs whose
    registers a square reads, directly or widened from 16-bit halves; one issued after the first
    read of an earlier one is deferred; the weight's load (no square) does not count, nor does a
    trailing branch to itself make a loop."""
    listing = """
        /*0000*/ LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/ LDG.E.128 R20, desc[UR4][R12.64] ;
        /*0020*/ FMUL R8, R4, R4 ;
        /*0030*/ LDG.E.128 R12, desc[UR4][R2.64+0x10] ;
        /*0040*/ FFMA R8, R5, R5, R8 ;
        /*0050*/ FFMA R8, R12, R12, R8 ;
        /*0060*/ FMUL R9, R20, R8 ;
        /*0070*/ EXIT ;
        /*0080*/ BRA 0x80 ;
    """
    assert sass.deferred_loads(listing) == {"x_loads": 2, "x_bytes": 16, "deferred": 1}
    hoisted = listing.replace("/*0020*/ FMUL R8, R4, R4", "/*0020*/ NOP").replace("/*0030*/", "/*0018*/")
    assert sass.deferred_loads(hoisted)["deferred"] == 0
    # bf16: each half is widened to fp32 (SHF.L for the low one, PRMT then SHF.L for the high one)
    # before its square; widening the first load's word already waits for it
    packed = """
        /*0000*/ LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/ SHF.L.U32 R8, R4, 0x10, RZ ;
        /*0020*/ LDG.E.128 R12, desc[UR4][R2.64+0x800] ;
        /*0030*/ FMUL R9, R8, R8 ;
        /*0040*/ PRMT R10, R12, 0x7632, R10 ;
        /*0050*/ SHF.L.U32 R10, R10, 0x10, RZ ;
        /*0060*/ FFMA R9, R10, R10, R9 ;
        /*0070*/ EXIT ;
    """
    assert sass.deferred_loads(packed) == {"x_loads": 2, "x_bytes": 16, "deferred": 1}


WORD_STATIC_SHAPES = [(11, 5652), (37, 6148), (5, 3, 7000), (9, 6540), (3, 7944), (2, 2, 8188)]


@pytest.mark.parametrize("shape", WORD_STATIC_SHAPES, ids=str)
@pytest.mark.parametrize("has_weight,offset", [(True, 0.0), (True, 1.0), (False, 0.0)], ids=["w", "w+1", "no-w"])
def test_word_static_rows(dev, shape, has_weight, offset, gen):
    """The rules' forward plans of fp32 rows of 4 | N, not 16 | N (plan.word_static: static layouts,
    one to three pieces, 7944 and 8188 gathered), contiguous 2-D to 4-D inputs (one row group), with and
    without a weight; y, rstd, dx and dw against float64 (the backward on its runtime plan)."""
    n = shape[-1]
    assert plan("forward", 37, 1, n, 4, SMS).static, n
    _check_planned(dev, shape, torch.float32, "gemma", has_weight, offset, gen, plan)


@pytest.mark.parametrize("hd", [6540, 7944], ids=str)
def test_word_static_head_view(dev, hd, gen, monkeypatch):
    """plan.word_static on a head view of a fused projection (row strides of 3 heads, B = 4):
    the static forward reads it in place; y, dx and dw through autograd against float64, with
    the process's static layouts emptied first so the rule's static plan is the one that runs."""
    monkeypatch.setattr(RL, "_static_layouts", set())
    _check_fp32_head_view(dev, hd, gen, lambda p: p.static)


def _check_fp32_head_view(dev, hd, gen, planned):
    """A fused QKV projection's q view (B = 4 heads of hd, row strides of 3 heads) through the torch
    API with autograd, read in place, on a forward plan that ``planned`` accepts: y, dx and dw
    against float64, k and v's gradient zero."""
    bsz, seq, heads = 2, 3, 4
    qkv = torch.randn(bsz, seq, 3 * heads * hd, generator=gen).to(device=dev).requires_grad_()
    w = (1 + 0.1 * torch.randn(hd, generator=gen)).to(device=dev).requires_grad_()
    q = qkv[..., : heads * hd].view(bsz, seq, heads, hd)
    p, a, b, n = _rows_plan("forward", q, weight=w)
    assert (a, b, n) == (bsz * seq, heads, hd) and p.kind == "tile" and planned(p), p
    y = rms_norm(q, w, EPS, mode="rows")
    dy = torch.randn(y.shape, generator=gen).to(device=dev)
    dqkv, dw = torch.autograd.grad(y, [qkv, w], dy)
    yr, _, dxr, dwr = rms_norm_ref_grads(q, dy, w, EPS)
    tols = tolerances(torch.float32, torch.float32, "gemma")
    check_all({"y": y, "dx": dqkv[..., : heads * hd].reshape(q.shape), "dw": dw}, {"y": yr, "dx": dxr, "dw": dwr}, tols)
    assert torch.count_nonzero(dqkv[..., heads * hd :]) == 0


def test_wide_one_tile():
    """The forward of fp32 rows of 16 | N past the 4-warp tiles (8193-13312) runs its one-row 8-warp
    tile a block a row without the loop, in two pieces (plan.wide_one_tile, session 57), at every
    row count and for views too (the plan ab/s57d measured: the rules' but max_pieces=2 and
    loop=False), so a row of a head view gets the same kernel at M = 1 (planned as 2-D rows,
    torch_impl.row_groups) as at M > 1; 4 | N rows not of 16 | N, 16-bit rows, the backward, rows
    past 13312, callers that pass fill=False or their own plan keywords keep the loop and the rules'
    pieces."""
    for n, es, op, on in ((8208, 4, "forward", True), (9360, 4, "forward", True), (12432, 4, "forward", True),
                          (13312, 4, "forward", True), (8192, 4, "forward", False), (13328, 4, "forward", False),
                          (8264, 4, "forward", False), (9360, 2, "forward", False),
                          (9360, 4, "backward", False)):  # fmt: skip
        assert wide_one_tile(op, n, es) == on, (n, es, op)
    kernel = lambda p: (p.widths, p.warps, p.occupancy, p.loop, p.static, p.loads)  # noqa: E731
    for n in (8208, 8848, 9360, 10304, 10560, 10768, 11040, 12304, 12432, 12896, 13312):
        for a in (1, 7, 132, 4099, 100000):
            p = plan("forward", a, 1, n, 4, SMS)
            measured = plan("forward", a, 1, n, 4, SMS, max_pieces=2, persistent=False)
            assert measured.loop and p == dataclasses.replace(measured, loop=False), (n, a, p)  # (keywords: the loop)
            assert p.warps == 8 and not p.static and len([w for w in p.widths if w]) <= 2 and p.grid == a, p
            kept = plan("forward", a, 1, n, 4, SMS, fill=False)
            assert kept.loop and kept.widths == _three_pieces(a, n), kept
            view = plan("forward", a, 8, n, 4, SMS)  # (a, 8 heads, n); at a = 1: plan(8, 1, n)
            assert kernel(view) == kernel(p) == kernel(plan("forward", 8, 1, n, 4, SMS)) and view.grid == 8 * a, view
    for n in (8264, 8964, 11944, 13276):  # 4-byte loads: the loop and the rules' pieces
        p = plan("forward", 4099, 1, n, 4, SMS)
        assert p.loop and p.widths == _three_pieces(4099, n), (n, p)
    assert plan("forward", 4099, 1, 13328, 4, SMS).kind == "long"  # past 13312: the static long forward


def _three_pieces(a, n):
    """The pieces of the rules' fp32 forward tile without plan.wide_one_tile (max_pieces named)."""
    return plan("forward", a, 1, n, 4, SMS, max_pieces=3, persistent=False).widths


@pytest.mark.compile
def test_wide_one_tile_issues_every_load_first(sass):
    """Why plan.wide_one_tile holds (bench/NOTES.md, sessions 56-57): at 12432 (8192 + 4096 + 512
    pieces) the looped tile issues x loads after the first use of a loaded value; the rule's tile
    (one 16384 piece, no loop) issues every x load first, 16 bytes at a time, without stack.
    tileiras 13.4, sm_90."""
    dt, n = sass.ct.float32, 12432
    rule = plan("forward", 5398, 1, n, 4, SMS)
    loop = plan("forward", 5398, 1, n, 4, SMS, fill=False)
    reports = {}
    for name, p in (("rule", rule), ("loop", loop)):
        kernel, params, hints = sass.rows_params(p, dt, 5398, 1, n)
        reports[name] = sass.compile_report(kernel, params, **hints)
    r, lp = reports["rule"], reports["loop"]
    assert r["deferred"] == 0 and r["x_loads"] > 0 and r["x_bytes"] == 16 and r.get("STACK", 0) == 0, r
    assert lp["deferred"] >= 1, lp


WIDE_ONE_SHAPES = [(7, 8208), (3, 9360), (2, 2, 12432), (3, 13312)]


@pytest.mark.parametrize("shape", WIDE_ONE_SHAPES, ids=str)
@pytest.mark.parametrize("has_weight,offset", [(True, 0.0), (True, 1.0), (False, 0.0)], ids=["w", "w+1", "no-w"])
def test_wide_one_tile_rows(dev, shape, has_weight, offset, gen):
    """The rules' forward plans of fp32 rows of 16 | N, 8193-13312 (plan.wide_one_tile: a block a
    row without the loop, 8192 and a padded power of two, or one padded 16384 piece past 12288),
    contiguous 2-D and 3-D inputs (one row group), with and without a weight; y, rstd, dx and dw
    against float64."""
    n = shape[-1]
    assert not plan("forward", 7, 1, n, 4, SMS).loop, n

    def plan_of(op, *args):  # (the rules leave these rows' backward to the core: the long one here)
        return plan(op, *args) if op == "forward" else long_plan(op, *args)

    _check_planned(dev, shape, torch.float32, "gemma", has_weight, offset, gen, plan_of)


@pytest.mark.parametrize("hd", [9360, 12432], ids=str)
def test_wide_one_tile_head_view(dev, hd, gen):
    """plan.wide_one_tile on a head view of a fused projection (row strides of 3 heads, B = 4), read
    in place without the loop: y, dx and dw through autograd against float64."""
    _check_fp32_head_view(dev, hd, gen, lambda p: not p.loop)


def test_odd_static():
    """Odd rows of 65 elements or more keep their runtime plan, compiled for their layout (session
    29): the 16-bit forward up to the row tiles' longest but 385-511 (static bought 0-1% there, s46b), the
    16-bit backward on the lanes kernels, the fp32 forward up to 512 elements; nothing else changes
    in the plan but the rows of the 16-bit forward's 512-wide lanes tiles (session 46), and a
    backward row tile stays on runtime layouts whatever the keywords."""
    for n, es, op, on in ((135, 2, "forward", True), (303, 2, "forward", True), (16001, 2, "forward", True),
                          (63, 2, "forward", False), (65, 2, "forward", True), (383, 2, "forward", True),
                          (385, 2, "forward", False), (511, 2, "forward", False), (513, 2, "forward", True),
                          (135, 2, "backward", True), (303, 2, "backward", False), (2747, 2, "backward", False),
                          (303, 4, "forward", True), (511, 4, "forward", True), (513, 4, "forward", False),
                          (1023, 4, "forward", False), (135, 4, "backward", False), (63, 4, "forward", False),
                          (1098, 2, "forward", False), (1104, 2, "forward", False)):  # fmt: skip
        assert odd_static(n, es, op) == on, (n, es, op)
        if n % 2:
            p = plan(op, 4099, 1, n, es, SMS)
            runtime = plan(op, 4099, 1, n, es, SMS, static=False)
            if p.kind == "lanes" and p.widths[0] == 512 and op == "forward":  # more rows static (test_odd_lanes_rule)
                runtime = dataclasses.replace(runtime, tile_a=p.tile_a, grid=p.grid)
            assert p.static == on and dataclasses.replace(p, static=False) == runtime, (n, es, op)
    assert not odd_static(18433, 2) and plan("forward", 99, 1, 18433, 2, SMS).kind == "long"
    for kw in (dict(lanes=False), dict(tile_rows=4), dict(warps=8)):  # backward row tiles: runtime
        assert not plan("backward", 4099, 1, 135, 2, SMS, **kw).static, kw
    assert plan("forward", 4099, 1, 135, 2, SMS, lanes=False).static  # the forward's: static


def test_long_static_chunk():
    """The static long forward, a block a row (sessions 28, 29, 35): 16-bit rows of a multiple of 8
    elements (16-byte rows on static layouts: plan.vector_rows) of 12 KB up to 5 chunks of 8 KB and,
    past that, 16 KB chunks up to 5 (session 52: the rows long_fit's L2 share left to the core or the
    flat forward, and its own past 20480); even unaligned ones not a multiple of 8 elements from 12 KB,
    in 8 KB chunks up to 5 and 16 KB chunks up to 5; not shorter or longer ones, nor powers of two,
    nor runtime layouts. fp32 at these
    lengths: its own class (the next test), here 20478 only (past the row tiles, not line-aligned)."""
    for n, chunk in ((6144 + 2, 4096), (9434, 4096), (20478, 4096), (20482, 8192), (40958, 8192), (7168, 4096),
                     (6152, 4096), (9992, 4096), (6142, 0), (5564, 0), (40962, 0), (8192, 0), (20496, 8192),
                     (20488, 8192), (25984, 8192), (27000, 8192), (40960, 8192), (40968, 0), (40976, 0),
                     (32768, 0)):  # fmt: skip
        assert long_static_chunk(n, 2, SMS) == chunk, n
        assert long_static_chunk(n, 2, SMS, static=False) == 0
        assert long_static_chunk(n, 4, SMS) == (4096 if n == 20478 else 0), n
        p = plan("forward", 99999, 1, n, 2, SMS)
        assert (p is not None and p.kind == "long" and p.grid == 99999) == bool(chunk), (n, p)  # (None: the core)
        if chunk:
            assert p.widths[0] == chunk and p.static and p.unroll
            assert n % 8 == 0 or p.occupancy in (2, 4)
    assert plan("forward", 99999, 1, 9434, 2, SMS).occupancy == 4  # unaligned: never 8 (spilled, s29c)
    assert plan("forward", 99999, 1, 33580, 2, SMS).occupancy == 2  # the L2 share
    assert plan("forward", 99999, 1, 5564, 2, SMS).kind == "tile"  # under 12 KB: the row tiles
    q = plan("forward", 99999, 1, 40962, 2, SMS)  # past 5 chunks of 16 KB: the persistent 8 KB grid
    assert (q.kind, q.widths[0], q.grid) == ("long", 4096, SMS * q.occupancy)
    # a probe's chunk on aligned rows: one block a row where the rows fit that many chunks
    r = long_plan("forward", 99999, 1, 24576, 2, SMS, chunk=8192)
    assert r.static and r.unroll and r.grid == 99999


def test_fp32_rows_at_one_block_take_the_long_forward():
    """fp32 rows whose forward row tile holds one block an SM run the static long forward in 16 KB
    chunks, a block a row, 2 blocks an SM (plan.long_static_chunk, session 30), and so do those the
    row tiles leave to the core but line-aligned ones (session 49); rows whose tiles hold more
    blocks, rows past 5 chunks, runtime layouts and the backward keep their plans."""
    taken = []
    for n in range(3001, 21000, 37):
        tile = plan("forward", 99999, 1, n, 4, SMS, static=False, long=False, fill=False)  # (its own tile: not
        core = tile is None and n * 4 % 128 != 0  # plan.wide_one_tile's) (LONG_FP32_CORE_LINE_BYTES)
        one_block = (core or (tile is not None and tile.occupancy == 1 and tile.check_n)) and n * 4 <= 5 * 16384
        p = plan("forward", 99999, 1, n, 4, SMS)
        assert (p is not None and p.kind == "long") == one_block, (n, p)
        assert long_static_chunk(n, 4, SMS) == (4096 if one_block else 0), n
        if one_block:
            taken.append(n)
            assert (p.widths[0], p.occupancy, p.grid, p.static, p.unroll) == (4096, 2, 99999, True, True), (n, p)
            runtime = plan("forward", 99999, 1, n, 4, SMS, static=False)  # (None: the core)
            assert runtime == plan("forward", 99999, 1, n, 4, SMS, static=False, long=False), (n, runtime)
            assert plan("backward", 99999, 1, n, 4, SMS) == plan("backward", 99999, 1, n, 4, SMS, static=False)
    assert min(taken) < 13400 and max(taken) > 18300 and any(n % 2 for n in taken)
    for n in (17408, 17920, 18432):  # pieces without padded lanes: the row tile (s30d)
        assert plan("forward", 99999, 1, n, 4, SMS).kind == "tile" and long_static_chunk(n, 4, SMS) == 0
    # the class's bounds on 132 SMs: 2 blocks a row tile up to 13312, the core's tile for 4 | N of
    # 14336-16384 (at these rows as a row tile of TMA loads: plan.lone_tma; the core below)
    for m, core in ((99999, "tile"), (999, None)):
        lengths = (13312, 13313, 14334, 14336, 14340, 16384, 16388, 18431, 18432, 18433, 18464, 20479, 20484)
        kinds = {n: getattr(plan("forward", m, 1, n, 4, SMS, core_bits=True), "kind", None) for n in lengths}
        assert kinds == {13312: "tile", 13313: "long", 14334: "long", 14336: core, 14340: "long", 16384: core,
                         16388: "long", 18431: "long", 18432: "tile", 18433: "long", 18464: None, 20479: "long",
                         20484: None}, kinds  # fmt: skip
    for n in (13313, 14001, 18431):  # the backward of unaligned rows: the core's kernels (session 37)
        assert plan("backward", 99999, 1, n, 4, SMS) is None, n
    assert plan("backward", 99999, 1, 16388, 4, SMS) is None  # 16-byte aligned: the core backward
    assert plan("forward", 99999, 1, 14001, 4, 78).occupancy == 2  # at most LONG_FP32_MAX_BLOCKS (measured)


def test_vector_lanes_rule():
    """Static lanes tiles of few elements a lane (plan.vector_lanes): the lengths measured
    (bench/NOTES.md, s31a, s31c, s32a, s32d) and their classes: 16-bit rows of 4 mod 8 elements
    padded to 128-512 forward and backward, and the backward of 2 mod 4 rows padded to 128-256, on
    4 elements a lane (session 31); the forward of 2 mod 4 rows padded to 128-512 on 8 (session
    32); at the lanes tiles' 2048 elements and blocks, the forward a block a tile without the loop
    (plan.lanes_one_tile, session 55); on runtime layouts the rules' lanes (or row tiles) as before; never fp32, 8 | N
    rows, odd rows, rows past 512, or the backward of 2 mod 4 rows padded to 512."""
    both = {76, 100, 116, 140, 172, 188, 196, 204, 228, 244, 252, 292, 300, 340, 380, 452, 500, 508}
    two_mod_4 = {66, 70, 86, 98, 110, 122, 126, 138, 154, 186, 202, 226, 242, 250}
    forward_512 = {282, 338, 410, 414, 490}  # 2 mod 4 rows padded to 512: the forward only (s32f)
    never = {64, 200, 256, 296, 512, 135, 265, 511, 513, 514, 610, 620, 1018}  # (514-1022: s46g)
    for n in both | two_mod_4 | forward_512 | never:
        for op in OPS:
            expected = 4 if n in both or (op == "backward" and n in two_mod_4) else 0
            expected = 8 if op == "forward" and n in two_mod_4 | forward_512 else expected
            assert vector_lanes(n, 2, op) == expected, (op, n)
    for n in range(60, 1100):
        w = 1 << (n - 1).bit_length()
        for op, hint in (("forward", 8), ("backward", 4)):
            assert not vector_lanes(n, 4, op)
            p = plan(op, 99999, 1, n, 2, SMS)
            if vector_lanes(n, 2, op):
                assert (p.kind, p.static, p.lanes, p.warps, p.occupancy, p.loop) == (
                    "lanes", True, w // vector_lanes(n, 2, op), 4, hint, op == "backward"), (op, n, p)  # fmt: skip
                assert p.tile_a * w == 2048, (op, n, p)
                r = plan(op, 99999, 1, n, 2, SMS, static=False)  # runtime layouts: the rules' lanes, 2048 a tile
                assert not r.static and (r.kind != "lanes" or (r.lanes, r.tile_a * w) == (w // 16, 2048)), (op, n, r)
            elif p is not None and p.kind == "lanes":
                assert p.lanes == w // 16, (op, n, p)


def test_odd_lanes_rule():
    """The forward of odd 16-bit rows of 257-511 runs on the lanes tiles (512 wide, 16 elements a
    lane), on static layouts (257-383) with the most rows (a power of two) within 36 live
    elements a thread of 4 warps (plan.ODD_LANES_FWD_LIVE_ELEMS: s46a, s46b), on runtime layouts
    (385-511, and wherever static ones are not allowed) with 2048 padded elements (4 rows); the
    backward, fp32 and the rows padded to 128-256 or 1024 keep their plans."""
    rows = {257: 16, 263: 16, 287: 16, 289: 8, 301: 8, 339: 8, 383: 8, 385: 4, 441: 4, 511: 4}
    for n, r in rows.items():
        p = plan("forward", 99999, 1, n, 2, SMS)
        assert (p.kind, p.widths[0], p.lanes, p.tile_a, p.static) == ("lanes", 512, 32, r, n < 385), (n, p)
    for n in range(257, 512, 2):
        for a in (1, 7, 4099, 99999):  # a function of N alone (batch invariance)
            p = plan("forward", a, 1, n, 2, SMS)
            assert p.kind == "lanes" and p.tile_a == rows.get(n, p.tile_a), (n, a, p)
            if p.static:
                assert p.tile_a * n <= 36 * 128 < 2 * p.tile_a * n, (n, p)
            else:
                assert p.tile_a == 4, (n, p)
        r = plan("forward", 99999, 1, n, 2, SMS, static=False)  # runtime layouts: 4 rows
        assert (r.kind, r.tile_a, r.static) == ("lanes", 4, False), (n, r)
        assert plan("forward", 99999, 1, n, 4, SMS).kind == "tile", n  # fp32: the row tiles
        assert plan("backward", 99999, 1, n, 2, SMS).tile_a * 512 == 2048 or not lanes_fit(n, 2, "backward"), n
    for n in (129, 191, 255):  # padded to 256: 2048 padded elements (more rows lost, s46a)
        assert plan("forward", 99999, 1, n, 2, SMS).tile_a == 8, n
    for n in (513, 701, 1023):  # padded to 1024: the gathered row tiles (s46e)
        assert plan("forward", 99999, 1, n, 2, SMS).kind == "tile", n


def test_static_layouts_are_bounded(monkeypatch):
    """The launchers plan a process's first STATIC_LAYOUTS row layouts (B, N) that the rules put on
    static layouts (plan.static_fit, plan.odd_static, plan.word_static, plan.vector_lanes,
    plan.long_static_chunk) on them, later ones
    on runtime layouts (no compile per new length); the interpreter, which compiles nothing, takes
    no place."""
    monkeypatch.setattr(RL, "STATIC_LAYOUTS", 3)
    monkeypatch.setattr(RL, "_static_layouts", set())
    assert not interpret.is_enabled()
    assert [RL.static_layout(1, n) for n in (100, 200, 300, 400)] == [True, True, True, False]
    assert RL.static_layout(1, 100) and not RL.static_layout(2, 100) and len(RL._static_layouts) == 3
    assert RL.plan("forward", 99, 1, 1098, 2, SMS).static is False  # a fourth layout: runtime
    monkeypatch.setattr(RL, "_static_layouts", {(1, 1098)})
    assert RL.plan("forward", 99, 1, 1098, 2, SMS).static is True  # a known one: static
    assert RL.plan("forward", 99, 1, 1104, 2, SMS).static is False  # aligned rows: runtime (plan.static_fit)
    assert RL._static_layouts == {(1, 1098)}  # it took no place
    assert RL.plan("forward", 99, 1, 1097, 2, SMS).static is True  # odd rows (plan.odd_static) take one
    assert RL._static_layouts == {(1, 1098), (1, 1097)}
    with interpret.interpreting():
        assert RL.static_layout(1, 12345)
    assert RL._static_layouts == {(1, 1098), (1, 1097)}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_rows_mode_through_autograd_on_a_qkv_view(dev, dtype, gen):
    """mode="rows" end to end: QK-norm on a head view of a fused projection (read in place,
    not copied), gradients through autograd to the projection, against float64."""
    bsz, seq, heads, hd = 2, 3, 4, 64
    qkv = torch.randn(bsz, seq, 3 * heads * hd, generator=gen).to(device=dev, dtype=dtype).requires_grad_()
    w = (1 + 0.1 * torch.randn(hd, generator=gen)).to(device=dev, dtype=dtype).requires_grad_()
    q = qkv[..., : heads * hd].view(bsz, seq, heads, hd)
    assert row_groups(q) == (bsz * seq, heads)
    y = rms_norm(q, w, EPS, mode="rows")
    dy = torch.randn(y.shape, generator=gen).to(device=dev, dtype=dtype)
    dqkv, dw = torch.autograd.grad(y, [qkv, w], dy)
    yr, _, dxr, dwr = rms_norm_ref_grads(q, dy, w, EPS)
    tols = tolerances(dtype, dtype, "llama")
    check_all({"y": y, "dx": dqkv[..., : heads * hd].reshape(q.shape), "dw": dw}, {"y": yr, "dx": dxr, "dw": dwr}, tols)
    assert torch.count_nonzero(dqkv[..., heads * hd :]) == 0


HEAD_VIEWS = [(32, 64), (32, 96), (32, 128), (16, 128), (8, 256), (32, 32), (64, 64)]


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [512, 301])
@pytest.mark.parametrize("heads,hd", HEAD_VIEWS, ids=[f"{h}x{d}" for h, d in HEAD_VIEWS])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_default_api_on_model_sized_head_views(dtype, heads, hd, tokens, gen):
    """QK-norm as models run it: the default call (mode None) on the (tokens, heads, head dim) view
    of a fused QKV projection at the head counts and dims of real models, forward and backward
    through autograd, against float64, outputs of every op checked. Tiles of several heads met a
    compiler fault here that 4-head views did not (bench/NOTES.md, session 27: bf16 32 x 64
    backward, "misaligned address")."""
    es = torch.empty((), dtype=dtype).element_size()
    assert RL.plan("backward", tokens, heads, hd, es, SMS).tile_b > 1  # the backward's tiles span heads here
    qkv = torch.randn(tokens, 3 * heads * hd, generator=gen).to("cuda", dtype).requires_grad_()
    w = (1 + 0.1 * torch.randn(hd, generator=gen)).to("cuda", dtype).requires_grad_()
    q = qkv[:, : heads * hd].view(tokens, heads, hd)
    q0 = q.detach().clone()
    y = rms_norm(q, w, EPS)
    dy = torch.randn(y.shape, generator=gen).to("cuda", dtype)
    dqkv, dw = torch.autograd.grad(y, [qkv, w], dy)
    torch.cuda.synchronize()
    assert torch.equal(q.detach(), q0)  # the input is not written
    yr, _, dxr, dwr = rms_norm_ref_grads(q0, dy, w.detach(), EPS)
    tols = tolerances(dtype, dtype, "llama")
    check_all({"y": y, "dx": dqkv[:, : heads * hd].reshape(q.shape), "dw": dw}, {"y": yr, "dx": dxr, "dw": dwr},
              tols, {"dw": dw_term_scale(q0, dy, EPS)})  # fmt: skip
    assert torch.count_nonzero(dqkv[:, heads * hd :]) == 0


def test_rows_mode_falls_back_for_long_rows(dev, gen):
    """Rows longer than the row-tile kernels plan run the core kernels, with the same results."""
    n = MAX_ROW_ELEMS["forward"] + 100
    x, dy, w = make_inputs((3, n), torch.float32, dev, generator=gen)
    y, rstd = rms_norm_forward(x, w, EPS, mode="rows")
    yr, rr, _, _ = rms_norm_ref_grads(x, dy, w, EPS)
    check_all({"y": y, "rstd": rstd}, {"y": yr, "rstd": rr}, tolerances(torch.float32, torch.float32, "gemma"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("n", [74, 128, 133, 227, 267, 441, 510, 610, 1024, 2048, 2265, 3072, 4096, 4441, 5376, 7168,
                               10563, 14340, 16384, 17408, 18856, 22338, 25263, 27000])  # fmt: skip
def test_rows_batch_invariance(dtype, n):
    """A row's output bits do not depend on how many rows share the call: the default forward
    on lengths the row-tile rules plan and on those they leave to the core kernels (one tile per
    row tile, a persistent grid or, from MANY_TILES_WAVES times its tiles, a block a tile without
    the loop (4441, 5376, 10563), from LONE_TILES_PER_SM tiles an SM the same (17408: fp32; 16384:
    16-bit, the core's tile below, whose bits are the row tile's; fp32 16384: the core's tile,
    from LONE_TMA_TILES_PER_SM an SM as a row tile, test_lone_tma_bits_are_the_cores), a padded
    piece, gathered tiles whose whole tiles skip the row checks, long rows (fp32 14340, 18856: the
    static long forward with its lookahead, session 49), fp32 rows read as one flat array (22338:
    the flat forward; 25263: the split flat forward, plan.split_fit), few rows on tiles of
    fewer rows: plan.FILL_TILES_PER_SM), y of inference and, of the training forward, rstd (a 1-ulp
    difference of rstd seldom shows in a 16-bit y). torch.equal takes -0.0 for 0.0: the sign of a
    zero y where the weight holds -0.0 may differ across 16384's switch (README, Limitations)."""
    g = torch.Generator().manual_seed(n)
    big = torch.randn(20000, n, generator=g).to("cuda", dtype)
    w = (1 + 0.1 * torch.randn(n, generator=g)).to("cuda", dtype)
    with torch.no_grad():
        full = rms_norm(big, w, EPS)
        _, full_rstd = rms_norm_forward(big, w, EPS)
        for m in (1, 7, 130, 600, 4099):  # (few rows take fewer rows a tile: plan.FILL_TILES_PER_SM)
            assert torch.equal(rms_norm(big[:m], w, EPS), full[:m]), m
            assert torch.equal(rms_norm_forward(big[:m], w, EPS)[1], full_rstd[:m]), m


def test_rows_mode_runs_the_row_tile_kernels(monkeypatch):
    """mode="rows" reaches the row-tile launchers (not a silent fallback to the core path)."""
    calls = []
    for name in ("run_forward", "run_backward"):
        real = getattr(RL, name)
        monkeypatch.setattr(RL, name, lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k))
    with interpret.interpreting():
        x = torch.randn(5, 256, requires_grad=True)
        y = rms_norm(x, None, EPS, mode="rows")
        y.sum().backward()
    assert calls == ["run_forward", "run_backward"]
    ref = x.detach().double() * torch.rsqrt(x.detach().double().pow(2).mean(-1, keepdim=True) + EPS)
    assert ((y.detach().double() - ref).abs().max() < 1e-5).item()


ONE_BLOCK_DTYPES = [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32), (torch.float32, torch.float32),
                    (torch.bfloat16, None)]  # fmt: skip


@pytest.mark.parametrize("dtype,w_dtype", ONE_BLOCK_DTYPES, ids=str)
@pytest.mark.parametrize("n", [2048, 4096, 5120])
def test_one_block_backward_stores_dw_itself(dev, dtype, w_dtype, n, monkeypatch, gen):
    """A backward grid of one block (one row: a decode step) stores its dW terms into dW itself,
    rounded to the weight's dtype, and runs no reduction (rows.launch.run_backward): one launch;
    every output NaN-poisoned first, against float64. 2048's 16-bit rows are planned two a tile,
    so two rows are one block too."""
    reduced = []
    real = RL._reduce_dw
    monkeypatch.setattr(RL, "_reduce_dw", lambda *a, **k: reduced.append(a) or real(*a, **k))
    for m in (1, 2) if n == 2048 and dtype != torch.float32 else (1,):
        x, dy, w = make_inputs((m, n), dtype, dev, w_dtype=w_dtype or dtype, has_weight=w_dtype is not None,
                               generator=gen)  # fmt: skip
        assert plan("backward", m, 1, n, x.element_size(), SMS).grid == 1
        out = _poisoned_run(x, dy, w, "llama", 0.0)
        yr, rr, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS)
        tols = tolerances(dtype, None if w is None else w.dtype, "llama")
        check_all(out, {"y": yr, "rstd": rr, "dx": dxr, "dw": dwr}, tols, _few_rows(x, dy))
    assert reduced == []


# (The rules plan no head view (B > 1) without the loop: the fill rule, which makes one-row tiles of
# few rows, and many_tiles take 2-D rows only.)
ONE_TILE_CASES = [((1, 2048), torch.bfloat16), ((5, 2048), torch.float16), ((3, 4096), torch.bfloat16),
                  ((7, 2048), torch.float32)]  # fmt: skip


@pytest.mark.parametrize("shape,dtype", ONE_TILE_CASES, ids=str)
def test_one_tile_forward_runs_without_a_loop(dev, shape, dtype, gen):
    """The forward of one tile a block (RowsPlan.loop False: rows_fwd without its loop) against
    float64, every output NaN-poisoned; y and rstd bit for bit those of the same plan with the loop
    (a row's bits do not depend on how its block finds it)."""
    _check_without_loop(shape, dtype, dev, gen)


# many_tiles' plans: a plain 16-byte row (two pieces), a gathered odd row, a 2 mod 4 row in fp16, and
# an odd row of three pieces on 8 warps; the rows: MANY_TILES_WAVES times the device's persistent
# grid, plus an odd few
MANY_TILE_CASES = [(5120, torch.bfloat16, 0), (4441, torch.bfloat16, 665), (4642, torch.float16, 64),
                   (10563, torch.bfloat16, 32)]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("n,dtype,extra", MANY_TILE_CASES, ids=str)
def test_many_tiles_forward_runs_without_a_loop(n, dtype, extra, gen):
    """The forward of plan.many_tiles (a block a tile without the loop where a persistent grid
    would take many tiles) against float64, every output NaN-poisoned; y and rstd bit for bit those
    of the same tiles with the loop."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    es = torch.empty((), dtype=dtype).element_size()
    grid = plan("forward", 1 << 20, 1, n, es, sms, persistent=True).grid
    _check_without_loop((MANY_TILES_WAVES * grid + extra, n), dtype, "cuda", gen)


# lone_tiles' plans: 16-bit 16384 and fp32 16384 + 1024 (three pieces: 17920); the rows:
# LONE_TILES_PER_SM times the device's SMs, plus an odd few
LONE_TILE_CASES = [(16384, torch.bfloat16, 0), (16384, torch.float16, 33), (17408, torch.float32, 5),
                   (17920, torch.float32, 0)]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("n,dtype,extra", LONE_TILE_CASES, ids=str)
def test_lone_tiles_forward_runs_without_a_loop(n, dtype, extra, gen):
    """The forward of plan.lone_tiles (one-row tiles that leave one block an SM, a block a tile
    without the loop) against float64, y and rstd NaN-poisoned (these rows' backward is the core's:
    not run here); y and rstd bit for bit those of the same tiles with the loop."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    _check_without_loop((LONE_TILES_PER_SM * sms + extra, n), dtype, "cuda", gen)


def _check_without_loop(shape, dtype, dev, gen):
    """The rules' loop-free forward plan of shape against float64 and against the same plan with
    the loop (test_one_tile_forward_runs_without_a_loop, test_many_tiles_forward_runs_without_a_loop,
    test_lone_tiles_forward_runs_without_a_loop)."""
    casting = "gemma" if dtype == torch.float32 else "llama"
    x, dy, w = make_inputs(shape, dtype, dev, generator=gen)
    a, b = row_groups(x)
    y, rstd, dx, dw = rms_norm_ref_grads(x, dy, w, EPS)
    outs = []
    for loop in (False, True):

        def plan_of(op, a, b, n, es, sms, loop=loop):
            p = RL.plan(op, a, b, n, es, sms)
            if op == "forward":
                assert p.kind == "tile" and not p.loop and p.grid == a * b, p
                p = dataclasses.replace(p, loop=loop)
            return p

        plans = lambda d: [plan_of(op, a, b, shape[-1], x.element_size(), d.num_sms) for op in OPS]  # noqa: E731
        outs.append(_poisoned_run(x, dy, w, casting, 0.0, plans))
        tols = tolerances(dtype, dtype, casting)
        want = {"y": y, "rstd": rstd, "dx": dx, "dw": dw}
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else SMS
        if RL.plan("backward", a, b, shape[-1], x.element_size(), sms) is None:  # (rows the core's backward takes)
            outs[-1] = {k: outs[-1][k] for k in ("y", "rstd")}
            want = {k: want[k] for k in ("y", "rstd")}
        check_all(outs[-1], want, tols, _few_rows(x, dy))
    assert torch.equal(outs[0]["y"], outs[1]["y"]) and torch.equal(outs[0]["rstd"], outs[1]["rstd"])


def test_one_tile_plan_needs_its_grid():
    """A plan without the loop launched on other rows than it was made for is refused before any
    launch: fewer blocks than tiles would leave rows unwritten, more would store past the rows
    (the plan's tiles are unchecked)."""
    p = RL.plan("forward", 4, 1, 2048, 2, SMS)
    assert not p.loop and p.grid == 4 and not p.check_a
    for m in (8, 2):
        x = torch.zeros(m, 1, 2048, dtype=torch.bfloat16)
        with pytest.raises(ValueError, match="a block a tile"):
            RL.run_forward(p, x, None, torch.empty_like(x), None, EPS, 0.0, 0, None, 0)


def test_one_tile_forward_has_no_loop(monkeypatch):
    """Block t of the loop-free forward runs tile t and no other: launched (interpreter) on half
    its tiles' blocks, it leaves the other rows as they were (NaN), where the same plan with the
    loop writes them all."""
    real = RL.launch
    monkeypatch.setattr(RL, "launch", lambda stream, grid, kernel, args: real(stream, (grid[0] // 2,), kernel, args))
    with interpret.interpreting():
        for loop in (False, True):
            p = dataclasses.replace(RL.plan("forward", 4, 1, 2048, 2, 4), loop=loop)
            assert (p.grid, p.tile_a) == (4, 1), p
            x = torch.randn(4, 1, 2048).to(torch.bfloat16)
            y = torch.full_like(x, float("nan"))
            RL.run_forward(p, x, None, y, None, EPS, 0.0, CK.CAST_LLAMA, None, 0)
            written = torch.isfinite(y).all(dim=2).flatten().tolist()
            assert written == ([True, True, False, False] if not loop else [True] * 4), (loop, written)


@pytest.mark.parametrize("m,n", [(132, 2048), (20000, 4441), (4096, 16384)])
def test_one_tile_forward_compiles_no_loop(sass, m, n):
    """The loop-free forward's SASS holds no loop (sass.innermost_loop); the same plan with the
    loop holds one: one_tile's plan (bf16 132 x 2048), many_tiles' (a gathered static row) and
    lone_tiles' (bf16 16384)."""
    p = plan("forward", m, 1, n, 2, SMS)
    assert not p.loop
    bodies = []
    for q in (p, dataclasses.replace(p, loop=True)):
        kernel, params, hints = sass.rows_params(q, sass.ct.bfloat16, m, 1, n)
        bodies.append(sass.innermost_loop(sass.cuobjdump(sass.compile_cubin(kernel, params, **hints), "-sass")))
    assert bodies[0] == [] and len(bodies[1]) > 0


def test_few_rows_take_the_row_tile_backward(monkeypatch):
    """mode None: at most as many rows as SMs (plan.few_rows) of 2048 elements or more take the
    row-tile backward (aligned 4096: the core's past the SMs); shorter rows keep their rules (bf16
    1024: the core), and rows the rules leave to the core stay there (one row of 40000). The
    interpreter's 4 SMs stand for the GPU's."""
    calls = []
    real = RL.run_backward
    monkeypatch.setattr(RL, "run_backward", lambda p, *a, **k: calls.append(p.kind) or real(p, *a, **k))
    assert few_rows(132, 4096, 132) and not few_rows(133, 4096, 132) and not few_rows(1, 1024, 132)
    with interpret.interpreting():
        cases = ((1, 4096, ["tile"]), (4, 4096, ["tile"]), (5, 4096, []), (1, 1024, []), (1, 40000, []))
        for m, n, expected in cases:
            calls.clear()
            x = torch.randn(m, n, dtype=torch.bfloat16, requires_grad=True)
            w = torch.ones(n, dtype=torch.bfloat16, requires_grad=True)
            rms_norm(x, w, EPS).float().sum().backward()
            assert calls == expected, (m, n, calls)
            assert torch.isfinite(x.grad).all() and torch.isfinite(w.grad).all()


def test_default_forward_is_the_row_tile_forward(monkeypatch):
    """mode None: the row-tile forward where the rules plan the row, the core backward; a row the
    rules leave (16-bit 16384: one block an SM, the core's power-of-two tile) and a forced core
    mode run the core forward."""
    from cutile_rms.rmsnorm import torch_impl

    calls = []
    for name in ("run_forward", "run_backward"):
        real = getattr(RL, name)
        monkeypatch.setattr(
            RL, name, lambda *a, real=real, name=name, **k: calls.append("rows_" + name) or real(*a, **k)
        )
        core = getattr(torch_impl, name)
        monkeypatch.setattr(torch_impl, name, lambda *a, core=core, name=name, **k: calls.append(name) or core(*a, **k))
    with interpret.interpreting():
        x = torch.randn(5, 256, requires_grad=True)
        rms_norm(x, None, EPS).sum().backward()
        assert calls == ["rows_run_forward", "run_backward"]
        calls.clear()
        rms_norm_forward(torch.randn(3, 16384, dtype=torch.bfloat16), None, EPS)
        rms_norm_forward(torch.randn(3, 256), None, EPS, mode="persistent")
        assert calls == ["run_forward", "run_forward"]


def test_default_backward_of_short_rows_is_the_row_tile_backward(monkeypatch):
    """mode None: the row-tile backward on power-of-two rows of 128-512 bytes (a QK-norm head
    view read in place; in place too, with the out-of-place bits) and on short aligned rows that
    are not a power of two (plan.short_backward), the core backward on longer power-of-two rows,
    shorter rows and longer lengths."""
    from cutile_rms.rmsnorm import torch_impl

    assert [backward_by_default(n, 2) for n in (32, 64, 96, 128, 256, 512)] == [False, True, True, True, True, False]
    assert [backward_by_default(n, 4) for n in (16, 32, 64, 128, 256)] == [False, True, True, True, False]
    calls = []
    real = RL.run_backward
    monkeypatch.setattr(RL, "run_backward", lambda *a, **k: calls.append("rows") or real(*a, **k))
    core = torch_impl.run_backward
    monkeypatch.setattr(torch_impl, "run_backward", lambda *a, **k: calls.append("core") or core(*a, **k))
    with interpret.interpreting():
        qkv = torch.randn(2, 3, 3 * 4 * 64, dtype=torch.bfloat16, requires_grad=True)
        q = qkv[..., : 4 * 64].view(2, 3, 4, 64)
        w = torch.rand(64, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(q.shape, dtype=torch.bfloat16)
        dqkv, dw = torch.autograd.grad(rms_norm(q, w, EPS), [qkv, w], dy)
        assert calls == ["rows"]
        yr, _, dxr, dwr = rms_norm_ref_grads(q, dy, w, EPS)
        tols = tolerances(torch.bfloat16, torch.bfloat16, "llama")
        check_all({"dx": dqkv[..., : 4 * 64].reshape(q.shape), "dw": dw}, {"dx": dxr, "dw": dwr}, tols)
        for n, dtype in ((512, torch.bfloat16), (768, torch.bfloat16), (16, torch.float32)):
            calls.clear()
            x = torch.randn(5, n, dtype=dtype, requires_grad=True)
            rms_norm(x, None, EPS).sum().backward()
            assert calls == ["core"], n
        for n, dtype in ((96, torch.bfloat16), (320, torch.float32)):
            calls.clear()
            x, dy, w = make_inputs((37, n), dtype, "cpu")
            x.requires_grad_(True)
            w.requires_grad_(True)
            dx, dw = torch.autograd.grad(rms_norm(x, w, EPS), [x, w], dy)
            assert calls == ["rows"], n
            yr, _, dxr, dwr = rms_norm_ref_grads(x.detach(), dy, w.detach(), EPS)
            tols = tolerances(dtype, dtype, "llama")
            check_all({"dx": dx, "dw": dw}, {"dx": dxr, "dw": dwr}, tols)
        calls.clear()
        x, dy, w = make_inputs((5, 128), torch.float32, "cpu")
        rstd = rms_norm_forward(x, w, EPS)[1]
        dx1, dw1 = rms_norm_backward(x, dy, w, rstd)
        dx2, dw2 = rms_norm_backward(x, dy, w, rstd, in_place=True)
        assert calls == ["rows", "rows"] and dx2.data_ptr() == dy.data_ptr()
        assert torch.equal(dx1, dx2) and torch.equal(dw1, dw2)


def test_unaligned_rows_take_the_row_tiles():
    """Rows not a multiple of 16 bytes long (which the core kernels' TMA tiles cannot load) get
    a row-tile plan forward and backward, whatever A (batch invariance), read through gathers
    where a tile holds several rows (and in 16-bit one-row tiles); short 4-byte ones as one
    padded piece, short 16-bit ones as at most two of 32 elements or more; rows that are a
    multiple of 16 bytes keep the earlier rules and plain loads. 16-bit rows of an even length
    run on static layouts (plan.static_fit), where the forward's multi-row tiles take plain loads."""
    for n, es in ((133, 2), (510, 2), (2265, 2), (8686, 2), (74, 4), (133, 4), (2265, 4)):
        assert unaligned(n, es) and backward_by_default(n, es), (n, es)
        plans = {plan("forward", a, 1, n, es, SMS).widths for a in (1, 7, 4099, 100000)}
        assert len(plans) == 1 and None not in plans, (n, es, plans)
        if n <= 8192:
            assert plan("backward", 9, 1, n, es, SMS) is not None, (n, es)
    assert plan("forward", 9, 1, 133, 4, SMS, lanes=False).widths == (256, 0, 0)
    # the row tiles (lanes=False: fused add, FP8, probes): 16-bit rows as two pieces, as measured
    assert {plan(op, 9, 1, 74, 2, SMS, lanes=False).widths for op in OPS} == {(64, 32, 0)}
    assert plan("forward", 9, 1, 133, 2, SMS, lanes=False).widths == (128, 32, 0)
    assert plan("forward", 9, 1, 510, 2, SMS, static=False).loads == K.LOADS_GATHER  # several rows a tile
    assert plan("forward", 9, 1, 511, 2, SMS).loads == K.LOADS_GATHER  # odd: runtime layouts
    assert plan("forward", 9, 1, 1098, 2, SMS).loads == K.LOADS_PLAIN  # even: N and the row stride compiled in
    assert plan("forward", 9, 1, 510, 2, SMS).loads == K.LOADS_GATHER  # 4-byte starts under 1 KB: runtime layouts
    assert plan("forward", 9, 1, 296, 2, SMS).loads == K.LOADS_PLAIN  # 8 | N: static, plain (plan.py, session 25)
    assert plan("forward", 9, 1, 671, 2, SMS).widths == (1024, 0, 0)  # gathered short rows: one piece forward
    assert plan("backward", 9, 1, 671, 2, SMS).widths == (512, 256, 0)  # backward: two
    assert plan("backward", 9, 1, 1098, 2, SMS).loads == K.LOADS_GATHER  # the backward keeps its gathers
    assert plan("forward", 9, 1, 2265, 2, SMS).loads == K.LOADS_GATHER  # 16-bit one-row tiles: the last piece
    assert plan("forward", 9, 1, 2265, 4, SMS).loads == K.LOADS_PLAIN  # fp32 one-row tiles: plain loads
    assert plan("forward", 9, 1, 512, 2, SMS).loads == K.LOADS_PLAIN
    for n, es in ((40, 2), (96, 2), (292, 4), (4096, 2)):
        assert not unaligned(n, es), (n, es)
    assert plan("forward", 9, 1, 48, 2, SMS, static=False) is None  # 96 bytes, 16 | N, not a power of two: the core
    assert plan("forward", 9, 1, 48, 2, SMS).widths == (64, 0, 0)  # ... or one padded piece on static layouts
    assert plan("forward", 9, 1, 40, 2, SMS).static  # 8 | N, not 16: static row tiles (plan.py, session 25)


def test_short_unaligned_rows_take_the_lanes_kernels():
    """Unaligned rows padded to 128 .. 256 elements (odd 16-bit ones 512) run on the lanes kernels
    forward, and padded to 128 elements .. 512 bytes backward: W / 16 lanes of 16 elements a row, 2048 elements a tile,
    8 (forward) or 4 (backward) blocks of 4 warps per SM, the same tile whatever A (batch
    invariance); the backward also rows padded to 2 KB and at most 512 elements (32 lanes, one
    warp), unless the row tiles' pieces pad less than W / 1.4; not longer or aligned rows, not
    where a keyword overrides the rules or a caller says lanes=False."""
    both = ("forward", "backward")
    for n, es, w, lanes, ops in ((65, 2, 128, 8, both), (81, 2, 128, 8, both), (191, 2, 256, 16, both),
                                 (255, 2, 256, 16, both), (81, 4, 128, 8, both), (127, 4, 128, 8, both),
                                 (510, 2, 512, 32, ("backward",)), (338, 2, 512, 32, ("backward",)),
                                 (133, 4, 256, 16, both), (255, 4, 256, 16, both),
                                 (257, 4, 512, 32, ("backward",)), (509, 4, 512, 32, ("backward",)),
                                 (441, 2, 512, 32, ("forward",))):  # fmt: skip
        for op in ops:
            assert lanes_fit(n, es, op), (n, es, op)
            tile, blocks = 2048, {"forward": 8, "backward": 4}[op]
            for a in (1, 7, 4099, 100000):
                p = plan(op, a, 1, n, es, SMS)
                static = odd_static(n, es, op)  # odd rows: compiled for their layout (session 29)
                assert p == lanes_plan(op, a, 1, n, es, SMS, static=static) and p.kind == "lanes", (n, es, a)
                assert (p.widths, p.lanes, p.tile_a * p.tile_b, p.warps, p.occupancy) == ((w, 0, 0), lanes, tile // w,
                                                                                          4, blocks)  # fmt: skip
                assert p.grid == min(-(-a // p.tile_a), blocks * SMS) and p.loads == K.LOADS_GATHER
            assert plan(op, 9, 1, n, es, SMS, lanes=False).kind == "tile"
            assert plan(op, 9, 1, n, es, SMS, loads=K.LOADS_GATHER).kind == "tile"
    h = plan("forward", 4096, 6, 191, 2, SMS)  # head views: TILE_B the largest power of two dividing B
    assert (h.kind, h.tile_a, h.tile_b) == ("lanes", 4, 2)
    # 513 (bf16 and fp32) and 622 (bf16) pad to 1024 elements, 64 lanes: more than one warp
    for n, es, ops in ((63, 2, both), (257, 2, ("backward",)), (282, 2, both), (510, 2, ("forward",)),
                       (128, 2, both), (192, 2, both), (63, 4, both), (257, 4, ("forward",)),
                       (128, 4, both), (513, 2, both), (622, 2, both), (513, 4, both)):  # fmt: skip
        for op in ops:  # (the forward of 2 mod 4 rows padded to 512: static vector lanes, test_vector_lanes_rule)
            assert not lanes_fit(n, es, op), (n, es, op)
            p = plan(op, 9, 1, n, es, SMS)
            assert p is None or p.kind == "tile" or vector_lanes(n, es, op) == p.widths[0] // p.lanes, (n, es, op)


@pytest.mark.parametrize("dtype,n", [(torch.bfloat16, 133), (torch.float16, 510), (torch.float32, 74)], ids=str)
def test_default_api_runs_unaligned_rows_on_the_row_tiles(monkeypatch, dtype, n, gen):
    """The public API (mode None) sends unaligned rows to the row-tile forward and backward, and
    their results match the float64 reference (odd M)."""
    calls = []
    for name in ("run_forward", "run_backward"):
        real = getattr(RL, name)
        monkeypatch.setattr(RL, name, lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k))
    with interpret.interpreting():
        x, dy, w = make_inputs((37, n), dtype, "cpu", generator=gen)
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        y = rms_norm(xg, wg, EPS)
        dx, dw = torch.autograd.grad(y, [xg, wg], dy)
    assert calls == ["run_forward", "run_backward"]
    yr, _, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS)
    check_all({"y": y, "dx": dx, "dw": dw}, {"y": yr, "dx": dxr, "dw": dwr}, tolerances(dtype, dtype, "llama"))


@pytest.mark.parametrize("dtype,n", [(torch.bfloat16, 10002), (torch.float16, 12474), (torch.bfloat16, 13933)],
                         ids=str)  # fmt: skip
def test_default_api_runs_long_unaligned_rows(dev, monkeypatch, dtype, n, gen):
    """The public API (mode None) on unaligned 16-bit rows past the row tiles' 8192 elements: the
    long forward on even rows, odd ones on the row tiles or, past FLAT_MIN_BYTES, the flat
    forward (13933); backward as the rules plan it for
    the device's SMs (on 132: 10002 the one-pass, 12474 the core kernels, 13933 the flat backward,
    test_onepass_long_backward_where_two_blocks_fit, test_flat_rule); every output against float64."""
    from cutile_rms._device import INTERPRET_DEVICE, device_info
    from cutile_rms.rmsnorm import torch_impl

    sms = (device_info(torch.cuda.current_device()) if dev == "cuda" else INTERPRET_DEVICE).num_sms
    want = plan("backward", 9, 1, n, 2, sms, flat=None)
    backward = "core" if want is None else "onepass" if want.onepass else "two kernels"

    plans, calls = [], []
    for name in ("run_forward", "run_backward"):
        real = getattr(RL, name)
        monkeypatch.setattr(RL, name, lambda p, *a, real=real, **k: plans.append(p) or real(p, *a, **k))
    core = torch_impl.run_backward
    monkeypatch.setattr(torch_impl, "run_backward", lambda *a, **k: calls.append("core") or core(*a, **k))
    x, dy, w = make_inputs((9, n), dtype, dev, generator=gen)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = rms_norm(xg, wg, EPS)
    dx, dw = torch.autograd.grad(y, [xg, wg], dy)
    assert plans[0].kind == (
        "flat" if flat_fit(n, 2, num_sms=sms) else "long" if n % 2 == 0 else "tile"
    )  # x contiguous
    if backward == "core":
        assert calls == ["core"] and len(plans) == 1
    else:  # contiguous: the flat backward where it fits (13933)
        kind = "flat" if flat_fit(n, 2, "backward", num_sms=sms) else "long"
        assert not calls and plans[1].kind == kind and plans[1].onepass == (backward == "onepass")
    yr, _, dxr, dwr = rms_norm_ref_grads(x, dy, w, EPS)
    check_all({"y": y, "dx": dx, "dw": dw}, {"y": yr, "dx": dxr, "dw": dwr}, tolerances(dtype, dtype, "llama"))


def test_short_rows_of_a_copied_view_take_the_row_tiles(monkeypatch, gen):
    """mode None: a QK-norm head view of a fused QKV projection whose head dim the row-tile
    rules leave to the core kernels on runtime layouts (bf16 96: short, not a power of two) runs
    on row tiles, forward and backward, read in place instead of copied; the same rows contiguous
    take them too (static layouts forward, plan.short_backward backward)."""
    from cutile_rms.rmsnorm import torch_impl

    calls = []
    for name in ("run_forward", "run_backward"):
        real = getattr(RL, name)
        monkeypatch.setattr(
            RL, name, lambda *a, real=real, name=name, **k: calls.append("rows_" + name) or real(*a, **k)
        )
        core = getattr(torch_impl, name)
        monkeypatch.setattr(torch_impl, name, lambda *a, core=core, name=name, **k: calls.append(name) or core(*a, **k))
    bsz, seq, heads, hd = 2, 3, 4, 96
    with interpret.interpreting():
        qkv = torch.randn(bsz, seq, 3 * heads * hd, generator=gen).to(torch.bfloat16).requires_grad_()
        w = (1 + 0.1 * torch.randn(hd, generator=gen)).to(torch.bfloat16).requires_grad_()
        q = qkv[..., : heads * hd].view(bsz, seq, heads, hd)
        y = rms_norm(q, w, EPS)
        dy = torch.randn(y.shape, generator=gen).to(torch.bfloat16)
        dqkv, dw = torch.autograd.grad(y, [qkv, w], dy)
        assert calls == ["rows_run_forward", "rows_run_backward"]
        yr, _, dxr, dwr = rms_norm_ref_grads(q, dy, w, EPS)
        tols = tolerances(torch.bfloat16, torch.bfloat16, "llama")
        check_all({"y": y, "dx": dqkv[..., : heads * hd].reshape(q.shape), "dw": dw}, {"y": yr, "dx": dxr, "dw": dwr},
                  tols)  # fmt: skip
        calls.clear()
        x = q.detach().contiguous().requires_grad_()
        rms_norm(x, w, EPS).sum().backward()
        assert calls == ["rows_run_forward", "rows_run_backward"]


def test_pieces_checked_element_by_element_are_gathered():
    """A piece checked along N whose row length the JIT cannot prove a multiple of 16 elements
    is gathered (a plain zero-padded load of it branches an element), aligned rows too, where
    unaligned ones are and where the piece is the whole row; one-row tiles of several pieces keep
    plain loads; rows that are a multiple of 16 elements keep plain (vector) loads. On static
    layouts (fp32 rows up to 1024 elements forward, plan.static_fit) N is compiled in: the
    forward's multi-row tiles load plain."""
    for op in OPS:
        for n, es in ((8116, 4), (3900, 4), (1000, 4), (436, 4)):
            assert not unaligned(n, es) and n % 16, (n, es)
            want = K.LOADS_PLAIN if op == "forward" and n <= 1024 else K.LOADS_GATHER
            assert plan(op, 9999, 1, n, es, SMS, any_length=True).loads == want, (op, n)
            assert plan(op, 9999, 1, n, es, SMS, any_length=True, static=False).loads == K.LOADS_GATHER, (op, n)
        assert plan(op, 9999, 1, 5000, 4, SMS, any_length=True).loads == K.LOADS_PLAIN  # 4096 + 1024, one row
        assert plan(op, 9999, 1, 4080, 4, SMS, any_length=True).loads == K.LOADS_PLAIN  # 16 divides 4080


def test_gathered_16bit_tiles_take_16_warps_per_sm():
    """Unaligned 16-bit rows: the backward of rows of 2048 or more takes one-row tiles at 16
    warps per SM (8 warps a block past 4096 elements, and where 4 warps could not prefetch:
    session 28), narrower ones the register line's rows halved until the tile holds 16 warps per
    SM (even rows whose one-row tiles keep under 36 KiB in flight then take two rows: 1302, session 53,
    test_gathered_pair_rule); one-row forward tiles of 8192 take 8 warps; multi-row forward tiles keep
    their rules."""
    for n, warps in ((1974, 4), (2301, 4), (3122, 8), (3900, 8), (8116, 8)):
        p = plan("backward", 9999, 1, n, 2, SMS)
        assert (p.tile_a, p.warps, p.occupancy, p.loads) == (1, warps, 16 // warps, K.LOADS_GATHER), n
    # narrower rows: the register line's rows, halved until the tile holds 16 warps per SM
    for n, rows in ((1074, 2), (1111, 2), (555, 4), (1302, 2), (1501, 1), (890, 2), (655, 2)):
        p = plan("backward", 9999, 1, n, 2, SMS)
        assert (p.tile_a, p.warps, p.occupancy, p.loads) == (rows, 4, 4, K.LOADS_GATHER), n
    assert plan("forward", 9999, 1, 8116, 2, SMS).warps == 8
    assert plan("forward", 9999, 1, 1974, 2, SMS).warps == 4  # 4 x 2048: four warps at 8 blocks
