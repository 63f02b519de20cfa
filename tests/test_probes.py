"""CPU tier: the maintained probes under bench/probes run against today's code: the row-tile
probe kernels match float64 through the interpreter, the candidate rule covers a row, and the
SASS tool builds the constraints the JIT derives at launch."""

import pytest
import torch


def _ref(x, w, dy):
    xd = x.double().requires_grad_()
    wd = w.double().requires_grad_()
    rstd = torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6)
    y = xd * rstd * wd
    dx, dw = torch.autograd.grad(y, [xd, wd], dy.double())
    return y.detach(), rstd.detach().squeeze(-1), dx, dw


def _rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


@pytest.mark.parametrize(
    ("m", "n", "tm", "pieces", "dtype"),
    [(37, 300, 4, (256, 64), torch.float32), (5, 5376, 1, (4096, 1024, 256), torch.bfloat16),
     (10, 128, 4, (128,), torch.float32), (9, 3000, 2, (2048, 1024), torch.float32)],
)  # fmt: skip
def test_row_tile_probe_kernels(gen, m, n, tm, pieces, dtype):
    """Forward (one block per row tile and a grid that strides) and backward of the probe
    kernels against float64: every output written, rows and pieces that overhang checked."""
    from bench.probes import rows_kernels as R
    from cutile_rms import interpret

    x = torch.randn(m, n, generator=gen).to(dtype)
    w = (1 + 0.1 * torch.randn(n, generator=gen)).to(dtype)
    dy = torch.randn(m, n, generator=gen).to(dtype)
    yr, rr, dxr, dwr = _ref(x, w, dy)
    W = list(pieces) + [0] * (3 - len(pieces))
    cm, cn = m % tm != 0, sum(pieces) != n
    tol = 1e-6 if dtype == torch.float32 else 8e-3  # fp32 arithmetic; a few bf16 roundings of y / dx
    for grid in (-(-m // tm), 2):
        y = torch.full_like(x, float("nan"))
        r = torch.full((m,), float("nan"))
        interpret.launch((grid,), R.fwd_rows, (x, w, y, r, 1e-6, 0.0, tm, *W, dtype != torch.float32, True, True, cm,
                                               cn, False))  # fmt: skip
        assert _rel(y, yr) < tol and _rel(r, rr) < 1e-6
    dx = torch.full_like(x, float("nan"))
    part = torch.full((3, n), float("nan"))
    interpret.launch((3,), R.bwd_rows, (x, dy, w, r, dx, part, 0.0, tm, *W, True, dtype != torch.float32, cm, cn,
                                        False))  # fmt: skip
    assert _rel(dx, dxr) < tol and _rel(part.sum(0), dwr) < tol


def test_piece_rule():
    """At most three power-of-two pieces, largest first, covering n with the least padding."""
    from bench.probes.rows_candidates import pieces

    assert pieces(18432) == [16384, 2048] and pieces(5376) == [4096, 1024, 256] and pieces(128) == [128]
    assert pieces(2880) == [2048, 1024]  # 2048 + 512 + 256 + 64 needs four: a 1024 piece, 192 lanes padded
    for n in range(1, 70000, 97):
        p = pieces(n)
        assert len(p) <= 3 and p == sorted(p, reverse=True) and all(v & (v - 1) == 0 for v in p)
        assert n <= sum(p) and sum(p) - n < max(p) // 2 + 1


def test_sass_tool_constraints():
    """The JIT's rule: 16-byte divisibility of strides and dims where it holds, size-1 dims."""
    import cuda.tile as ct

    from bench.probes.sass import array

    a = array(ct.bfloat16, (16384, 4096))
    assert a.shape_divisible_by == (16, 16) and a.stride_divisible_by == (8, 1) and a.base_addr_divisible_by == 16
    b = array(ct.bfloat16, (1, 3001))
    assert b.shape_constant == (1, None) and b.shape_divisible_by == (1, 1) and b.stride_divisible_by == (1, 1)
