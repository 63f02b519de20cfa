"""CPU tier: kernel and tile selection, tuning tables and the per-device cache."""

import dataclasses
import inspect
import json

import pytest

from cutile_rms._tile import python_function
from cutile_rms.rmsnorm import autotune as A
from cutile_rms.rmsnorm import config as C
from cutile_rms.rmsnorm import kernels as K
from cutile_rms.rmsnorm import signatures as S
from cutile_rms.rmsnorm import tables as T

H200 = "sm_90:NVIDIA H200"


def _pow2(v):
    return v > 0 and v & (v - 1) == 0


@pytest.mark.parametrize("n", [1, 15, 16, 123, 512, 760, 1024, 4096, 5120, 7168, 16384])
@pytest.mark.parametrize("m", [1, 7, 2003, 1 << 20])
def test_default_forward_is_persistent_single_tile_when_row_fits(m, n):
    p = C.plan_forward(m, n, 132)
    assert (p.mode, p.kernel) == ("persistent", "tile")
    assert p.tile_n + p.tail >= n and _pow2(p.tile_n) and _pow2(p.tile_m)
    if p.tail:  # a row of p + p / 4: two tiles that hold it exactly (Tails)
        assert p.tile_n + p.tail == n and p.tail == p.tile_n // 4
    else:
        assert p.tile_n < 2 * max(n, 16)  # the smallest power of two that holds the row
    assert 1 <= p.grid <= min(-(-m // p.tile_m), 132 * p.occupancy)
    assert p.tile_m * p.tile_n <= C.SHORT_ROW_TILE_ELEMS["forward"] * 2


@pytest.mark.parametrize("n", [16385, 65536, 262144, 1_000_003])
def test_default_forward_walks_chunks_for_long_rows(n):
    p = C.plan_forward(100, n, 132)
    assert (p.mode, p.kernel) == ("gather", "chunked")
    cfg = C.DEFAULT_TABLE["forward"][C.bucket(n)]
    assert (p.tile_m, p.tile_n, p.occupancy) == (cfg.tile_m, cfg.tile_n, cfg.blocks_per_sm)
    assert p.grid == 100  # one row tile per block: fewer rows than blocks


@pytest.mark.parametrize("n", [64, 4096, 16384, 65536])
def test_forced_modes(n):
    g = C.plan_forward(10_000, n, 132, "gather")
    assert (g.mode, g.kernel, g.tile_m) == ("gather", "chunked", 1)
    assert g.grid == 132 * C.GATHER.blocks_per_sm and g.tile_n == min(C.GATHER.tile_n, max(16, n))
    p = C.plan_forward(10_000, n, 132, "persistent")
    assert p.mode == "persistent"
    assert p.kernel == C.DEFAULT_TABLE["forward"][C.bucket(n)].kernel


def test_unknown_mode():
    with pytest.raises(ValueError, match="mode must be one of"):
        C.plan_forward(4, 4, 132, "fast")


@pytest.mark.parametrize("m,tile_m", [(1, 1), (32, 1), (500, 2), (132 * 8, 8), (132 * 32, 32), (10**6, 32)])
def test_few_rows_spread_over_every_sm(m, tile_m):
    """The 512 bucket's 32-row tile shrinks until the row tiles cover the SMs (FILL_SMS)."""
    assert C.DEFAULT_TABLE["forward"][512].tile_m == 32
    p = C.plan_forward(m, 512, 132)
    assert p.tile_m == tile_m
    assert p.grid == min(-(-m // tile_m), 132 * p.occupancy)


@pytest.mark.parametrize("n", [1, 100, 512, 4096, 8192])
def test_backward_single_tile(n):
    p = C.plan_backward(5000, n, 132)
    assert p.kernel == "tile" and not p.needs_row_dot
    assert p.tile_n >= n and _pow2(p.tile_n) and _pow2(p.tile_m)
    assert 1 <= p.partial_rows <= 132 * p.hints[0]
    assert p.num_chunks == 1


@pytest.mark.parametrize("m", [1, 3, 1000, 100_000])
@pytest.mark.parametrize("n", [8193, 65536, 262144])
def test_backward_chunked(m, n):
    p = C.plan_backward(m, n, 132)
    assert p.kernel == "chunked" and p.needs_row_dot
    assert p.num_chunks * p.tile_n >= n > (p.num_chunks - 1) * p.tile_n
    assert 1 <= p.partial_rows <= m
    # The 2-D grid stays near the persistent budget unless one row group alone exceeds it.
    assert p.partial_rows * p.num_chunks <= max(132 * p.hints[0], p.num_chunks)
    assert p.dot_tile_n >= 16 and 1 <= p.dot_grid <= m


def test_default_tables_are_consistent():
    for op, table in C.DEFAULT_TABLE.items():
        assert sorted(table) == [1 << k for k in range(9, C.LARGEST_BUCKET.bit_length())], op
        for b, cfg in table.items():
            if cfg.kernel == "tile":
                assert cfg.tile_n == b
            else:
                assert cfg.tile_n <= b
        assert table[C.LARGEST_BUCKET].kernel == "chunked"  # rows beyond the last bucket walk chunks


@pytest.mark.parametrize(
    "bad",
    [
        ("wide", 1, 512, 1), ("tile", 3, 512, 1), ("tile", 1, 500, 1), ("tile", 1, 512, 3), ("tile", 1, 512, 1, 6),
        ("tile", 1, 512, 1, None, "no"), ("tile", 1, 512, 1, None, True, 0), ("tile", 1, 512, 1, None, True, 11),
    ],
)  # fmt: skip
def test_kernel_config_validates(bad):
    with pytest.raises(ValueError):
        C.KernelConfig(*bad)


def test_plans_are_frozen():
    p = C.plan_forward(10, 10, 132)
    with pytest.raises(AttributeError):
        p.grid = 3


# ------------------------------------------------------------------------------------------
# Tables: shipped sm_90 table, per-device cache, lookup order


def test_shipped_sm90_table_covers_every_bucket_and_size():
    table = T.checked_in("sm_90")
    for op in ("forward", "backward"):
        for es in (2, 4):
            for b in C.DEFAULT_TABLE[op]:
                assert (op, es, b) in table, (op, es, b)
                cfg = C.KernelConfig(*table[op, es, b])  # validates
                assert cfg.tile_n == b if cfg.kernel in ("tile", "packed") else cfg.tile_n < b
    for (_, _, n), entry in table.items():  # buckets only, each a tile that holds the row (issue #19)
        cfg = C.KernelConfig(*entry)
        assert C.bucket(n) == n and not cfg.tail
        assert cfg.tile_n == n if cfg.kernel in ("tile", "packed") else cfg.tile_n < n
    assert T.checked_in("sm_1000") == {} and T.checked_in("../x") == {}


def test_h200_plans_come_from_the_shipped_table():
    for es in (2, 4):
        for n in (512, 4096, 65536):
            entry = T.checked_in("sm_90")["forward", es, C.bucket(n)]
            p = C.plan_forward(1 << 20, n, 132, elem_size=es, device_key=H200)
            cfg = C.KernelConfig(*entry)
            assert (p.kernel, p.tile_m, p.tile_n, p.occupancy, p.warps, p.memory) == (
                cfg.kernel, cfg.tile_m, cfg.tile_n, cfg.blocks_per_sm, cfg.warps, cfg.memory
            )  # fmt: skip


def test_split_plans_on_the_h200():
    """fp32 long rows take the shipped split entries: the grid is whole groups of `splits`
    blocks, no more groups than row tiles nor blocks than SMs x blocks per SM, and the slots
    cover whole row tiles with a power-of-two width."""
    for m, n in ((1024, 65536), (100, 20000), (3, 65536), (4096, 32768)):
        p = C.plan_forward(m, n, 132, elem_size=4, device_key=H200)
        assert p.kernel == "split" and p.mode == "persistent"
        assert p.splits == -(-n // p.tile_n) >= 2
        groups, rem = divmod(p.grid, p.splits)
        assert rem == 0 and 1 <= groups <= -(-m // p.tile_m) and p.grid <= 132 * p.occupancy
        assert p.slots == (-(-m // p.tile_m) * p.tile_m, C.next_pow2(p.splits))
    assert C.plan_forward(100, 20000, 132, elem_size=4, device_key=H200).slots[1] == 4  # 3 segments
    b = C.plan_backward(4096, 16384, 132, elem_size=4, device_key=H200)  # narrow_split: 8 x 2048 at 4 blocks
    assert (b.kernel, b.tile_n, b.num_chunks, b.slots, b.hints) == ("split", 2048, 8, (4096, 8), (4, 4))
    assert b.partial_rows * b.num_chunks <= 132 * b.hints[0] and not b.needs_row_dot


def test_narrow_split():
    """The backward's split rows take the narrowest width from SPLIT_MIN_WIDTH whose blocks a row
    stay within the blocks that can run at once, at the table's bytes in flight an SM and
    SPLIT_THREAD_ELEMS elements a thread; the forward keeps the table's width."""
    table = C.split(1, 8192, 1, 8)
    for n, most, want in ((9016, 16, (2048, 4, 4)), (32768, 16, (2048, 4, 4)), (32772, 16, (4096, 2, 8)),
                          (65536, 16, (4096, 2, 8)), (100000, 16, (8192, 1, 8)), (9016, 4, (4096, 2, 8)),
                          (9016, 0, (8192, 1, 8))):  # fmt: skip
        cfg = C.narrow_split(table, n, most)
        assert (cfg.tile_n, cfg.blocks_per_sm, cfg.warps) == want, (n, most, cfg)
        assert cfg.tile_n * cfg.blocks_per_sm == 8192  # the table's bytes in flight an SM
        assert cfg == table or cfg.tile_n // (32 * cfg.warps) == C.SPLIT_THREAD_ELEMS
    assert C.narrow_split(C.tile(1, 8192, 1, 8), 9016, 16) == C.tile(1, 8192, 1, 8)  # other kernels as they are
    assert C.plan_forward(1986, 33784, 132, elem_size=4, device_key=H200).tile_n == 8192  # the forward: the table's
    assert C.plan_backward(7443, 9016, 132, elem_size=4, device_key=H200).tile_n == 2048
    splits = {c.tile_n for c in C.planned_configs("sm_90")["backward"] if c.kernel == "split"}
    assert splits == {2048, 4096, 8192}  # every width a plan can take is compiled ahead of time


def test_split_falls_back_where_it_cannot_run():
    """No split plan for callers without the split kernels, nor on a GPU with fewer SMs than
    blocks per row (more than can run at once): the bucket's default serves. A row that fits
    one segment takes the tile kernel."""
    default = C.DEFAULT_TABLE["forward"][65536]
    for p in (C.plan_forward(1024, 65536, 132, elem_size=4, device_key=H200, provides=C.ONLY_ARRAYS),
              C.plan_forward(1024, 65536, 4, elem_size=4, device_key=H200)):  # fmt: skip
        assert (p.kernel, p.tile_n) == (default.kernel, default.tile_n)
    p = C.plan_backward(1024, 65536, 132, elem_size=4, device_key=H200, provides=C.ONLY_ARRAYS)
    assert p.kernel == C.DEFAULT_TABLE["backward"][65536].kernel
    assert C.fit_to_row(C.split(1, 8192, 2), 6000, "forward") == C.tile(1, 8192, 2, tma_store=False)
    assert C.split_count(65536, 8192) == 8 and C.split_count(20000, 8192) == 3


def test_split_forward_needs_rows_of_16_element_multiples():
    """The forward's split plan takes 16-bit rows only of a multiple of SPLIT_VECTOR_ELEMS
    elements (others loaded 2 bytes at a time ran 1.3-1.6x slower than the default chunked plan:
    session 23); fp32 rows and the aligned bf16 rows of the same bucket keep it."""
    default = C.DEFAULT_TABLE["forward"][65536]
    for n in (34360, 44392, 44391):  # a multiple of 8, not 16; odd (the core's forced modes)
        p = C.plan_forward(1953, n, 132, elem_size=2, device_key=H200)
        assert (p.kernel, p.tile_n) == (default.kernel, default.tile_n), n
    assert C.plan_forward(1953, 34368, 132, elem_size=2, device_key=H200).kernel == "split"
    assert C.plan_forward(1953, 34360, 132, elem_size=4, device_key=H200).kernel == "split"


def test_reduce_tiles_rule():
    """dw_reduce's chunks spread N over the SMs (config.reduce_tiles: 16 to 256 columns, 16 KB
    tiles of at least REDUCE_TILE_G rows; bench/NOTES.md, session 36): every pair is one the
    compile-ahead check compiles, and the grid covers N within REDUCE_BLOCKS_PER_SM blocks an SM."""
    assert C.reduce_tiles(678, 528, 132) == (256, 16) and C.reduce_tiles(4804, 264, 132) == (64, 64)
    assert C.reduce_tiles(65536, 132, 132) == C.reduce_tiles(678, 32, 132) == (C.REDUCE_TILE_G, C.REDUCE_TILE_N)
    for n in (1, 64, 128, 600, 678, 2048, 4804, 8192, 16384, 65535, 262144):
        tile_g, tile_n = C.reduce_tiles(n, 528, 132)
        assert (tile_g, tile_n) in C.reduce_tile_pairs(), n
        grid = C.reduce_grid(n, tile_n, 132)
        assert 1 <= grid <= 132 * C.REDUCE_BLOCKS_PER_SM and (
            grid * tile_n >= n or grid == 132 * C.REDUCE_BLOCKS_PER_SM
        )
        assert tile_n in (C.REDUCE_TILE_N, C.REDUCE_MIN_TILE_N) or -(-n // (tile_n // 2)) > 132, n  # the narrowest


def test_packed_backward_plans_on_the_h200():
    """16-bit backward rows of 7168-8192 take the shipped packed entries when the caller can
    make word views; otherwise, and for fp32, odd row lengths or the forward, the same tile
    config runs as "tile". Its dW partials are (rows, 2, n / 2): even columns, then odd."""
    for n in (7168, 8192):
        p = C.plan_backward(1 << 16, n, 132, elem_size=2, device_key=H200, provides=C.Provides(words=True))
        assert p.kernel == "packed" and p.tile_n == 8192 and p.partial_shape(n) == (p.partial_rows, 2, n // 2)
        q = C.plan_backward(1 << 16, n, 132, elem_size=2, device_key=H200)
        assert p.reduce_tiles == (C.REDUCE_TILE_G, C.REDUCE_TILE_N)  # the packed reduction's (config.reduce_tiles)
        assert dataclasses.replace(p, kernel="tile", reduce_tiles=q.reduce_tiles, reduce_grid=q.reduce_grid) == q
        assert q.partial_shape(n) == (q.partial_rows, n)
    words = C.Provides(words=True)
    assert C.plan_backward(1 << 16, 8191, 132, elem_size=2, device_key=H200, provides=words).kernel == "tile"
    assert C.plan_backward(1 << 16, 8192, 132, elem_size=4, device_key=H200, provides=words).kernel == "tile"
    assert C.kernel_config("forward", 8192, 2, None, provides=words).kernel != "packed"
    assert C.kernel_config("forward", 8192, 2, None).kernel == "tile"
    assert C.fit_to_row(C.packed(1, 512, 1), 100, "backward") == C.packed(C.SHORT_ROW_TILE_ELEMS["backward"] // 128,
                                                                          128, 1)  # fmt: skip


def test_tail_plans_on_the_h200():
    """Rows of p + p / 4 elements (5120) get two tiles (4096 and a 1024 tail) at twice their
    bucket's blocks per SM, by rule (Tails): 16-bit forward and packed backward, and the fp32
    forward; any other length, the fp32 backward, and a backward without word views (the tile
    kernel has no tail) get one tile that holds the row, at the bucket's blocks."""
    m = 13107
    f = C.plan_forward(m, 5120, 132, elem_size=2, device_key=H200)
    assert (f.kernel, f.tile_n, f.tail) == ("tile", 4096, 1024)
    b = C.plan_backward(m, 5120, 132, elem_size=2, device_key=H200, provides=C.Provides(words=True))
    assert (b.kernel, b.tile_n, b.tail) == ("packed", 4096, 1024) and b.partial_shape(5120) == (b.partial_rows, 2, 2560)
    t = C.plan_backward(m, 5120, 132, elem_size=2, device_key=H200)
    bucket = C.KernelConfig(*T.checked_in("sm_90")["backward", 2, 8192])
    assert (t.kernel, t.tile_n, t.tail, t.tile_m) == ("tile", 8192, 0, b.tile_m)
    assert b.hints[0] == 2 * bucket.blocks_per_sm and t.hints[0] == bucket.blocks_per_sm
    assert C.quarter_tail(5120) == 1024 and C.quarter_tail(2560) == 512 and C.quarter_tail(6144) == 0
    assert C.quarter_tail(4096) == 0 and C.quarter_tail(5) == 1 and C.quarter_tail(3) == 0
    assert C.fit_to_row(C.tile(1, 16384, 1), 10240, "forward") == C.tile(1, 8192, 1, tail=2048)  # p > 4096: same blocks
    assert C.fit_to_row(C.tile(2, 8192, 4), 5120, "forward") == C.tile(2, 4096, 8, tail=1024)
    assert C.plan_forward(m, 5120, 132, elem_size=4, device_key=H200).tail == 1024
    assert C.plan_backward(m, 5120, 132, elem_size=4, device_key=H200).tail == 0
    for n, es in ((5000, 2), (5122, 2), (5000, 4)):
        p = C.plan_forward(m, n, 132, elem_size=es, device_key=H200)
        assert p.tail == 0 and p.tile_n >= n
    assert C.fit_to_row(C.tile(2, 4096, 2, tail=1024), 5000, "forward") == C.tile(2, 8192, 2)
    assert C.fit_to_row(C.tile(2, 4096, 2, tail=1024), 5120, "backward") == C.tile(2, 8192, 2)  # no tail kernel
    assert C.fit_to_row(C.tile(2, 4096, 2, tail=1024), 5120, "forward").tail == 1024
    short = C.fit_to_row(C.tile(1, 256, 2, tail=128), 384, "forward")  # a short row: one tile of many rows
    assert short.tail == 0 and short.tile_n == 512 and short.tile_m > 1
    for bad in (dict(kernel="chunked", tail=1024), dict(tail=1000), dict(tail=4096)):
        with pytest.raises(ValueError, match="tail"):
            dataclasses.replace(C.tile(2, 4096, 2), **bad)


def test_row_tile_schedules():
    """schedule "per_tile" (the shipped fp32 forward of 1024- and 4096-wide rows): the grid is every
    row tile. The forward elsewhere and the backward stride; only the tile kernel takes another
    schedule, and tables give it as a string (never for a backward). The removed "claim"
    schedule (it waited on block 0) reads as "stride" from old tables."""
    p = C.plan_forward(65536, 1024, 132, elem_size=4, device_key=H200)
    assert (p.kernel, p.tile_m, p.grid, p.schedule) == ("tile", 1, 65536, "per_tile")
    assert C.plan_forward(16384, 4096, 132, elem_size=4, device_key=H200).grid == 16384
    assert C.plan_forward(65536, 1024, 132, elem_size=2, device_key=H200).grid <= 132 * max(C.OCCUPANCIES)
    assert C.plan_backward(65536, 1024, 132, elem_size=4, device_key=H200).partial_rows <= 132 * max(C.OCCUPANCIES)
    assert C.forward_plan_from(C.tile(4, 1024, 2, schedule="per_tile"), 1001, 132, "persistent", 1024).grid == 251
    strided = C.plan_forward(16384, 4096, 132, elem_size=2, device_key=H200)
    assert (strided.schedule, strided.tile_m, strided.grid) == ("stride", 2, 264)
    assert "claim" not in C.SCHEDULES
    for bad in (
        dict(kernel="chunked", schedule="per_tile"),
        dict(schedule="claim"),
        dict(kernel="split", schedule="per_tile", tma_store=False),
        dict(schedule="x"),
    ):
        with pytest.raises(ValueError, match="schedule"):
            dataclasses.replace(C.tile(2, 4096, 2), **bad)
    entry = {"op": "forward", "elem_size": 4, "bucket": 1024, "kernel": "tile", "tile_m": 1, "tile_n": 1024,
             "blocks_per_sm": 8, "schedule": 0}  # fmt: skip
    with pytest.raises(ValueError, match="schedule"):
        T.parse({"format": T.FORMAT, "entries": [entry]}, "test")
    with pytest.raises(ValueError, match="schedule"):
        T.parse({"format": T.FORMAT, "entries": [{**entry, "op": "backward", "schedule": "per_tile"}]}, "test")
    parsed = T.parse({"format": T.FORMAT, "entries": [{**entry, "op": "forward_few", "schedule": "claim"}]}, "test")
    assert C.KernelConfig(*parsed["forward_few", 4, 1024]).schedule == "stride"  # a table of before session 12


def test_few_row_forward_entries_and_old_row_entries():
    """The shipped few-row forward entries of 4096 and 8192 (sm_90) are tile configs with plain
    stores at 4 blocks per SM (the tile fallback of the removed "row" kind); past FEW_ROWS the
    bulk entries serve. A table entry that names the row kind reads as that fallback, and never
    in a backward table."""
    for m, n, es in ((1, 4096, 2), (32, 8192, 2), (256, 4096, 4), (C.FEW_ROWS, 8192, 4)):
        cfg = C.kernel_config("forward", n, es, H200, m=m)
        assert (cfg.kernel, cfg.tile_m, cfg.tile_n, cfg.blocks_per_sm, cfg.tma_store) == ("tile", 1, n, 4, False)
    assert "row" not in C.KERNELS
    entry = {"op": "forward_few", "elem_size": 2, "bucket": 4096, "kernel": "row", "tile_m": 1, "tile_n": 4096,
             "blocks_per_sm": 1, "warps": 8, "tma_store": False}  # fmt: skip
    parsed = T.parse({"format": T.FORMAT, "entries": [entry]}, "test")
    assert C.KernelConfig(*parsed["forward_few", 2, 4096]) == C.tile(1, 4096, 4, 8, tma_store=False)
    with pytest.raises(ValueError, match="row kernel"):
        T.parse({"format": T.FORMAT, "entries": [{**entry, "op": "backward_few"}]}, "test")


def test_balanced_backward_grid():
    """The one-tile backward's grid: the fewest blocks that need as many rounds of row tiles as
    SMs x blocks per SM do (4096 row tiles on 132 SMs: 32 rounds on 128 blocks, not 31.03 on
    132); the forward keeps SMs x blocks per SM."""
    for m, tm, bps in ((16384, 4, 1), (4096, 1, 1), (131072, 16, 1), (13107, 1, 2), (5, 1, 1), (9362, 1, 1)):
        tiles, grid = -(-m // tm), C.grid_size(m, tm, bps, 132)
        g = C.balanced_grid(m, tm, bps, 132)
        assert g <= grid and -(-tiles // g) == -(-tiles // grid)
        assert g == 1 or -(-tiles // (g - 1)) > -(-tiles // grid)  # no fewer blocks take as many rounds
    assert C.balanced_grid(16384, 4, 1, 132) == 128
    p = C.plan_backward(16384, 4096, 132, elem_size=2, device_key=H200, provides=C.Provides(words=True))
    assert (p.tile_m, p.partial_rows) == (4, 128)
    assert C.plan_forward(16384, 1024, 132, elem_size=2, device_key=H200).grid == 132  # the forward's: SMs x 1


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(T, "_device_tables", {})
    C.clear_plan_caches()
    yield tmp_path
    C.clear_plan_caches()


def _entry(op, es, b, cfg):
    return {"op": op, "elem_size": es, "bucket": b, "kernel": cfg.kernel, "tile_m": cfg.tile_m,
            "tile_n": cfg.tile_n, "blocks_per_sm": cfg.blocks_per_sm, "warps": cfg.warps, "tma_store": cfg.tma_store,
            "latency": cfg.latency, "us": 1.0}  # fmt: skip


def test_device_cache_takes_precedence_and_persists(cache_dir):
    mine = C.tile(2, 4096, 8)
    path = T.record(H200, "NVIDIA H200", [_entry("forward", 2, 4096, mine)], made_by="test")
    assert path.parent == cache_dir and path.exists()
    C.clear_plan_caches()
    p = C.plan_forward(1 << 20, 4000, 132, elem_size=2, device_key=H200)
    assert (p.kernel, p.tile_m, p.tile_n, p.occupancy) == ("tile", 2, 4096, 8)
    # Other sizes and other GPUs of the same architecture still use the shipped table.
    assert (
        C.plan_forward(1 << 20, 4000, 132, elem_size=4, device_key=H200).tile_m
        == T.checked_in("sm_90")["forward", 4, 4096][1]
    )
    assert T.lookup("forward", 2, 4096, "sm_90:NVIDIA H100") == T.checked_in("sm_90")["forward", 2, 4096]
    # A fresh process (empty memory) reads the same entry back from disk.
    T._device_tables.clear()
    assert T.lookup("forward", 2, 4096, H200) == ("tile", 2, 4096, 8, None, True, None, 0, "stride")
    # Merging keeps earlier entries.
    T.record(H200, "NVIDIA H200", [_entry("backward", 2, 512, C.tile(4, 512, 2))], made_by="test")
    doc = json.loads(path.read_text())
    assert {(e["op"], e["bucket"]) for e in doc["entries"]} == {("forward", 4096), ("backward", 512)}


def test_tables_hold_buckets_only(cache_dir):
    """A table entry for a row length that is not a power of two is rejected (issue #19: an
    exact-length entry hides how a held-out length is planned); lengths of a bucket take its
    entry, adapted by rules (5120: two tiles; 6000: the bucket's tile)."""
    entry = _entry("forward", 2, 5120, C.tile(2, 8192, 1))
    with pytest.raises(ValueError, match="power of two"):
        T.parse({"format": T.FORMAT, "entries": [entry]}, "test")
    T.record(H200, "NVIDIA H200", [_entry("forward", 2, 8192, C.tile(2, 8192, 1))], "test")
    C.clear_plan_caches()
    p = C.plan_forward(1 << 16, 6000, 132, elem_size=2, device_key=H200, mode="persistent")
    assert (p.tile_m, p.tile_n, p.tail, p.occupancy) == (2, 8192, 0, 1)
    p = C.plan_forward(1 << 16, 5120, 132, elem_size=2, device_key=H200, mode="persistent")
    assert (p.tile_m, p.tile_n, p.tail, p.occupancy) == (2, 4096, 1024, 2)


def test_memory_knobs_reach_the_plans(cache_dir):
    """tma_store and latency go from a table entry into both plans' kernel constants; entries
    written before these fields existed mean TMA stores allowed and no latency hint."""
    fwd = C.tile(1, 8192, 2, tma_store=False, latency=1)
    bwd = C.chunked(1, 4096, 2, 8, tma_store=False)
    old = {k: v for k, v in _entry("forward", 4, 8192, C.tile(2, 8192, 4)).items() if k not in ("tma_store", "latency")}
    T.record(H200, "NVIDIA H200", [_entry("forward", 2, 8192, fwd), _entry("backward", 2, 32768, bwd), old], "test")
    C.clear_plan_caches()
    assert C.plan_forward(1 << 16, 8192, 132, elem_size=2, device_key=H200).memory == (False, 1)
    assert C.plan_forward(1 << 16, 8192, 132, elem_size=4, device_key=H200).memory == (True, 0)
    assert C.plan_backward(1 << 16, 32768, 132, elem_size=2, device_key=H200).memory == (False, 0)
    with pytest.raises(ValueError, match="tma_store"):
        T.parse({"format": 1, "entries": [dict(old, tma_store="yes")]}, "x")


def test_split_configs_store_without_tma():
    """The split kernels have no TMA store (kernels/split.py: with one, tileiras 13.4 code hung on
    the H200): split() defaults to plain stores, a split config or table entry asking for TMA
    stores is refused, and a split entry without the field reads as plain stores."""
    assert C.split(1, 8192, 2).memory == (False, 0)
    with pytest.raises(ValueError, match="split kernels store without TMA"):
        C.split(1, 8192, 2, tma_store=True)
    entry = {k: v for k, v in _entry("forward", 4, 65536, C.split(1, 8192, 2)).items() if k != "tma_store"}
    assert C.KernelConfig(*T.parse({"format": 1, "entries": [entry]}, "x")["forward", 4, 65536]).tma_store is False
    with pytest.raises(ValueError, match="false for split"):
        T.parse({"format": 1, "entries": [dict(entry, tma_store=True)]}, "x")
    assert "TMA_STORE" not in S.PARAMS["rms_fwd_split"] + S.PARAMS["rms_bwd_split"]


def test_damaged_cache_warns_and_falls_back(cache_dir):
    T.cache_path(H200).write_text("{not json")
    with pytest.warns(UserWarning, match="ignoring unreadable tuning table"):
        entry = T.lookup("forward", 2, 4096, H200)
    assert entry == T.checked_in("sm_90")["forward", 2, 4096]


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="format"):
        T.parse({"format": 99, "entries": []}, "x")


def test_interpreter_and_unknown_arch_use_defaults(cache_dir):
    assert T.lookup("forward", 2, 4096, None) is None
    assert T.lookup("forward", 2, 4096, "sm_75:Some GPU") is None
    p = C.plan_forward(1 << 20, 4096, 132, device_key="sm_75:Some GPU")
    d = C.DEFAULT_TABLE["forward"][4096]
    assert (p.tile_m, p.occupancy) == (d.tile_m, d.blocks_per_sm)


# ------------------------------------------------------------------------------------------
# Search space


@pytest.mark.parametrize("n", [100, 512, 4096, 7168, 32768, 65536, 200_000])
def test_search_space_is_valid(n):
    fwd, bwd, dot = A.forward_candidates(n), A.backward_candidates(n), A.row_dot_candidates(n)
    for cfg in (*fwd, *bwd, *dot):
        assert cfg.tile_m * cfg.tile_n <= A.MAX_TILE_ELEMS or cfg.tile_m == 1
    tiles = [c for c in fwd if c.kernel == "tile"]
    assert all(c.tile_n == C.next_pow2(max(n, 16)) for c in tiles)
    assert bool(tiles) == (C.next_pow2(n) <= A.MAX_ROW_TILE_N["forward"])
    assert all(c.tile_n < C.next_pow2(n) for c in fwd if c.kernel == "chunked")
    assert len(set(fwd)) == len(fwd) and dot
    # Each layout is searched with and without TMA stores; the row-dot kernel has no row-tile
    # store, and latency hints are only tried on the fastest candidates (not in the space).
    for space in (fwd, bwd):
        assert {c.tma_store for c in space} == set(A.TMA_STORE_CHOICES)
        assert len(space) == len(A.TMA_STORE_CHOICES) * len({dataclasses.replace(c, tma_store=True) for c in space})
    assert all(c.tma_store and c.latency is None for c in dot) and all(c.latency is None for c in fwd + bwd)
    # Few rows search the same space (the row kind is gone).
    assert A.forward_candidates(n, C.FEW_ROWS) == A.forward_candidates(n, C.FEW_ROWS + 1) == fwd


def test_tuner_searches_every_table_entry():
    """One tuner command can rebuild the checked-in table (issue 19, item 6): every entry's config
    (its latency hint aside: tried on the fastest only) is in the search space of its op, element
    size and bucket, the kinds only graph replay times included (autotune.graph_candidates: split,
    packed; before session 53, 15 of 72 entries were not)."""
    kinds = set()
    for (op, elem_size, bucket), entry in T.checked_in("sm_90").items():
        cfg = dataclasses.replace(C.KernelConfig(*entry), latency=None)
        base = op.removesuffix(C.FEW_ROWS_SUFFIX)
        if base == "backward_dot":
            space = A.row_dot_candidates(bucket)
        else:
            searched = A.forward_candidates(bucket) if base == "forward" else A.backward_candidates(bucket)
            space = searched + A.graph_candidates(base, bucket, elem_size)
        assert cfg in space, (op, elem_size, bucket, cfg)
        kinds.add(cfg.kernel)
    assert kinds == set(C.KERNELS)  # (the test covers every kind the planner plans)


@pytest.mark.parametrize("n", [500, 4096, 16384, 65536])
def test_graph_candidates_are_valid(n):
    """The split configs give 2 to MAX_SPLIT blocks a row and store without TMA; the packed ones
    are the 16-bit backward's one-tile configs of PACKED_MIN_TILE_N or more; fp32 and the forward
    get no packed config; the single-launch search holds neither kind."""
    for op in ("forward", "backward"):
        for elem_size in (2, 4):
            space = A.graph_candidates(op, n, elem_size)
            assert len(set(space)) == len(space)
            for cfg in space:
                assert cfg.kernel in ("split", "packed"), cfg
                if cfg.kernel == "split":
                    assert 2 <= C.split_count(n, cfg.tile_n) <= C.MAX_SPLIT and not cfg.tma_store, cfg
                else:
                    assert (op, elem_size) == ("backward", 2) and cfg.tile_n == C.next_pow2(n) >= 4096, cfg
                    assert dataclasses.replace(cfg, kernel="tile") in A.backward_candidates(n), cfg
    searched = A.forward_candidates(n) + A.backward_candidates(n)
    assert not {c.kernel for c in searched} & {"split", "packed"}
    packed = A.PACKED_MIN_TILE_N <= n <= A.MAX_ROW_TILE_N["backward"]  # (one tile a row: the packed kernel's)
    split = bool(A.split_candidates(n))
    kinds = ({"split"} if split else set()) | ({"packed"} if packed else set())
    assert {c.kernel for c in A.graph_candidates("backward", n, 2)} == kinds
    # where the planner would not run them: odd rows packed, the split forward of 16-bit rows not of 16 | N
    assert not [c for c in A.graph_candidates("backward", n + 1, 2) if c.kernel == "packed"]
    assert not A.graph_candidates("forward", n + 8, 2) and A.graph_candidates("forward", n + 8, 4) == (
        A.split_candidates(n + 8))  # fmt: skip


def test_planned_configs_include_every_table_entry():
    planned = C.planned_configs()
    for (op, _, _), entry in T.checked_in("sm_90").items():
        assert C.KernelConfig(*entry) in planned[op.removesuffix(C.FEW_ROWS_SUFFIX)]
    assert C.GATHER in planned["forward"]


def test_few_rows_have_their_own_entries(cache_dir):
    """Decode-sized problems (m <= FEW_ROWS) take the "_few" entry of their bucket where a
    table has one, and the bulk entry otherwise."""
    bulk, few = C.tile(4, 4096, 8), C.tile(1, 4096, 2)
    T.record(H200, "NVIDIA H200", [_entry("forward", 2, 4096, bulk), _entry("forward_few", 2, 4096, few)], "test")
    C.clear_plan_caches()
    p_few = C.plan_forward(C.FEW_ROWS, 4096, 132, elem_size=2, device_key=H200)
    p_bulk = C.plan_forward(C.FEW_ROWS + 1, 4096, 132, elem_size=2, device_key=H200)
    assert (p_few.tile_m, p_few.occupancy) == (1, 2)
    assert p_bulk.occupancy == 8
    assert C.table_op("backward", 1) == "backward_few" and C.table_op("backward", None) == "backward"
    # Where no table has a "_few" entry (the 512 bucket), few rows fall back to the bulk entry.
    assert ("forward_few", 4, 512) not in T.checked_in("sm_90")
    assert C.kernel_config("forward", 512, 4, H200, m=8) == C.kernel_config("forward", 512, 4, H200, m=10**6)


@pytest.mark.gpu
def test_tune_stores_a_config_that_plans_then_use(cache_dir, gen):
    """End to end on the GPU: a search over the 512 bucket's forward candidates stores the
    winner in this GPU's cache (not the shipped table), later plans take it, and rms_norm with
    it matches float64 (forward and backward)."""
    import torch

    from cutile_rms import rms_norm
    from cutile_rms import tune as tuner
    from cutile_rms.rmsnorm.torch_impl import launch_target
    from tests.reference import check_all, make_inputs, rms_norm_ref_grads, tolerances

    (r,) = tuner.tune([(8192, 500)], torch.bfloat16, ops=("forward",))
    assert (r.op, r.bucket, r.elem_size, r.m) == ("forward", 512, 2, 8192)
    # Every candidate, then the fastest few again with a latency hint; the winner is the
    # fastest of the runners-up re-timed by graph replay.
    space = len(A.forward_candidates(500))
    assert space <= r.timed + r.failed <= space + A.LATENCY_TOP_K * len(A.LATENCY_CHOICES)
    assert r.config == r.ranked[0][0] and r.us == r.ranked[0][1] > 0 and len(r.ranked) == A.RUNNERS_UP
    info = launch_target(torch.device("cuda"))[1]
    doc = json.loads(T.cache_path(info.key).read_text())
    assert [(e["op"], e["bucket"], e["tile_m"], e["blocks_per_sm"]) for e in doc["entries"]] == [
        ("forward", 512, r.config.tile_m, r.config.blocks_per_sm)
    ]
    p = C.plan_forward(8192, 500, info.num_sms, elem_size=2, device_key=info.key)
    assert (p.kernel, p.tile_n, p.occupancy, p.warps, p.memory) == (
        r.config.kernel, r.config.tile_n, r.config.blocks_per_sm, r.config.warps, r.config.memory
    )  # fmt: skip
    x, dy, w = make_inputs((8192, 500), torch.bfloat16, "cuda", generator=gen)
    x.requires_grad_(True)
    w.requires_grad_(True)
    y = rms_norm(x, w)
    y.backward(dy)
    y_ref, _, dx_ref, dw_ref = rms_norm_ref_grads(x, dy, w)
    tols = tolerances(torch.bfloat16, torch.bfloat16, "llama")
    check_all({"y": y.detach(), "dx": x.grad, "dw": w.grad}, {"y": y_ref, "dx": dx_ref, "dw": dw_ref}, tols)


@pytest.mark.gpu
def test_graph_timed_kinds(monkeypatch):
    """The kinds only graph replay times (autotune.graph_candidates: split, packed) are timed by
    tune._rerank through the torch API's launchers beside the runners-up, and each config it
    timed computes y, rstd, dx and dw as float64 does (bf16 2048 x 4096: a tile runner-up, a split
    forward and backward, the backward's split as the planner narrows it, a packed backward;
    outputs poisoned)."""
    import torch

    from cutile_rms import tune as tuner
    from cutile_rms.rmsnorm.launch import casting_code, run_backward, run_forward
    from cutile_rms.rmsnorm.torch_impl import as_words, int64_workspace, launch_target
    from tests.reference import check_all, nan_like, rms_norm_ref_grads, tolerances

    m, n, dev = 2048, 4096, torch.device("cuda")
    tile, split, packed = C.tile(1, n, 2), C.split(1, 2048, 2, 4), C.packed(1, n, 1, 8)
    monkeypatch.setattr(A, "graph_candidates", lambda op, _n, _es: [split, packed] if op == "backward" else [split])
    info = launch_target(dev)[1]
    x, w, dy = tuner._inputs(m, n, torch.bfloat16, dev, seed=7)
    casting = casting_code("llama", False)

    def empty_f32(shape):
        return torch.empty(shape, device=dev, dtype=torch.float32)

    ranked = ((tile, 50.0),)
    results = [A.Result(op, n, 2, tile, 50.0, m, 1, 0, ranked) for op in ("forward", "backward")]
    fwd, bwd = tuner._rerank(results, x, w, dy, casting, info, empty_f32)
    narrow = C.narrow_split(split, n, C.split_blocks(info.num_sms))
    assert {c for c, _ in fwd.ranked} == {tile, split} and {c for c, _ in bwd.ranked} == {tile, narrow, packed}
    assert (fwd.timed, fwd.failed, bwd.timed, bwd.failed) == (2, 0, 3, 0)
    assert as_words(x) is not None  # (the packed config ran as packed: _rerank refuses a failed view)
    y_ref, rstd_ref, dx_ref, dw_ref = rms_norm_ref_grads(x, dy, w)
    tols = tolerances(torch.bfloat16, torch.bfloat16, "llama")
    stream = launch_target(dev)[0]
    rstds = {}
    for cfg in (tile, split):
        y, rstd = nan_like(x.shape, x.dtype, dev), nan_like((m,), torch.float32, dev)
        plan = C.forward_plan_from(cfg, m, info.num_sms, "persistent", n)
        run_forward(x, w, y, rstd, 1e-6, 0.0, casting, None, info, stream, int64_workspace(x), plan)
        torch.cuda.synchronize()
        check_all({"y": y, "rstd": rstd}, {"y": y_ref, "rstd": rstd_ref}, tols)
        rstds[cfg] = rstd
    rstd = rstds[tile]
    for cfg in (tile, narrow, packed):
        dx, dw = nan_like(x.shape, x.dtype, dev), nan_like(w.shape, w.dtype, dev)
        plan = C.backward_plan_from(cfg, cfg, m, n, info.num_sms)
        run_backward(x, dy, w, rstd, dx, dw, 0.0, casting, empty_f32, info, stream, int64_workspace(x), as_words, plan)
        torch.cuda.synchronize()
        check_all({"dx": dx, "dw": dw}, {"dx": dx_ref, "dw": dw_ref}, tols)


def test_signatures_are_the_kernels():
    """signatures.PARAMS, the one spelling of each core kernel's parameters that launchers,
    tuner and AOT check read, is each kernel's own; every core kernel has one."""
    import cuda.tile as ct

    kernels = {name: obj for name, obj in vars(K).items() if isinstance(obj, ct.kernel)}
    assert set(kernels) == set(S.PARAMS)
    for name, kernel in kernels.items():
        assert tuple(inspect.signature(python_function(kernel)).parameters) == S.PARAMS[name], name
    assert set(S.FORWARD.values()) | set(S.BACKWARD.values()) <= set(S.PARAMS)
    with pytest.raises(KeyError, match="rstd_out"):
        S.arguments("rms_fwd_tile", {"x": 0, "w": 0, "y": 0})


def test_tables_are_keyed_by_compiler(tmp_path):
    """Tuned configs are compiler-specific: the tuning cache's file name carries the cuda-tile
    and tileiras versions, the shipped table records the tileiras it was tuned with, and a
    table tuned with another tileiras release warns when it is loaded."""
    import warnings

    assert f"tileiras{T.tileiras_version()}" in T.cache_path(H200).name
    assert json.loads((T.TABLE_DIR / "sm_90.json").read_text())["tileiras"]
    other = tmp_path / "sm_00.json"
    other.write_text(json.dumps({"tileiras": "99.1.0"}))
    if T.tileiras_version() != "unknown":
        with pytest.warns(UserWarning, match="tuned with tileiras 99.1.0"):
            T._warn_if_other_compiler(other)
    same = tmp_path / "sm_01.json"
    same.write_text(json.dumps({"tileiras": T.tileiras_version()}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        T._warn_if_other_compiler(same)
