"""CPU tier: mode and tile selection."""

import pytest

from cutile_rms.rmsnorm import config as C


def _pow2(v):
    return v > 0 and v & (v - 1) == 0


@pytest.mark.parametrize("n", [1, 15, 16, 123, 512, 760, 1024, 4096, 5120, 7168, 16384])
@pytest.mark.parametrize("m", [1, 7, 2003, 1 << 20])
def test_auto_mode_is_persistent_single_tile_when_row_fits(m, n):
    p = C.plan_forward(m, n, 132)
    assert (p.mode, p.kernel) == ("persistent", "tile")
    assert p.tile_n >= n and _pow2(p.tile_n) and _pow2(p.tile_m)
    assert p.tile_n < 2 * max(n, 16)  # the smallest power of two that holds the row
    assert 1 <= p.grid <= min(-(-m // p.tile_m), 132 * p.occupancy)
    assert p.tile_m * p.tile_n <= C.FWD_SHORT_ROW_TILE_ELEMS * 2


@pytest.mark.parametrize("n", [16385, 65536, 262144, 1_000_003])
def test_auto_mode_is_gather_for_long_rows(n):
    p = C.plan_forward(100, n, 132)
    assert (p.mode, p.kernel, p.tile_m) == ("gather", "chunked", 1)
    assert p.tile_n == C.FWD_CHUNK_N and p.grid == 100


@pytest.mark.parametrize("n", [64, 4096, 16384, 65536])
def test_forced_modes(n):
    g = C.plan_forward(10_000, n, 132, "gather")
    assert (g.mode, g.kernel, g.tile_m) == ("gather", "chunked", 1)
    assert g.grid == 132 * C.GATHER_BLOCKS_PER_SM
    p = C.plan_forward(10_000, n, 132, "persistent")
    assert p.mode == "persistent"
    assert p.kernel == ("tile" if n <= C.FWD_MAX_TILE_N else "chunked")


def test_unknown_mode():
    with pytest.raises(ValueError, match="mode must be one of"):
        C.plan_forward(4, 4, 132, "fast")


@pytest.mark.parametrize("n", [1, 100, 512, 4096, 8192])
def test_backward_single_tile(n):
    p = C.plan_backward(5000, n, 132)
    assert p.kernel == "tile" and not p.needs_row_dot
    assert p.tile_n >= n and _pow2(p.tile_n) and _pow2(p.tile_m)
    assert 1 <= p.partial_rows <= 132 * p.occupancy
    assert p.num_chunks == 1


@pytest.mark.parametrize("m", [1, 3, 1000, 100_000])
@pytest.mark.parametrize("n", [8193, 65536, 262144])
def test_backward_chunked(m, n):
    p = C.plan_backward(m, n, 132)
    assert p.kernel == "chunked" and p.needs_row_dot
    assert p.num_chunks * p.tile_n >= n > (p.num_chunks - 1) * p.tile_n
    assert 1 <= p.partial_rows <= m
    # The 2-D grid stays near the persistent budget unless one row group alone exceeds it.
    assert p.partial_rows * p.num_chunks <= max(132 * C.BWD_CHUNKED_BLOCKS_PER_SM, p.num_chunks)


def test_tables_are_consistent():
    for table in (C.FWD_TILE_TABLE, C.BWD_TILE_TABLE):
        for tile_n, s in table.items():
            assert s.tile_n == tile_n and _pow2(s.tile_m) and _pow2(s.tile_n) and s.blocks_per_sm >= 1
    assert max(C.FWD_TILE_TABLE) == C.FWD_MAX_TILE_N
    assert max(C.BWD_TILE_TABLE) == C.BWD_MAX_TILE_N
    assert C.forward_tile_shapes()[-1].tile_n == C.FWD_MAX_TILE_N


def test_plans_are_frozen():
    p = C.plan_forward(10, 10, 132)
    with pytest.raises(AttributeError):
        p.grid = 3
