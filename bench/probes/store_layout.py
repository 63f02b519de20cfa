"""A minimal reproducer of where the short rows' lanes forward spends its barriers.

The lanes forward (cutile_rms/rows/kernels/lanes.py) gathers a tile of short unaligned rows as
(R, L, K), column l * K + k, and stores it reshaped to (R, L * K). tileiras 13.4 moves such a
tile through shared memory with a block barrier before its stores, where torch.compile's
warp-a-row kernel needs none (bench/NOTES.md, session 54). Here the same layouts without any
arithmetic, on bf16 rows of N (2 mod 4 elements: 4-byte aligned rows):

- ``gather_store`` (``gather_copy``, SCATTER false): the lanes gather, then ct.store of the reshaped
  tile (the lanes forward's y);
- ``gather_scatter`` (SCATTER true): the same gather, then ct.scatter at the gather's indices;
- ``load_store``: an (R, W) ct.load and ct.store of the padded row tile (the row tiles' layout);

each with one tile a block (LOOP false) or on a grid-stride loop over a persistent grid (LOOP true:
the loop orders a scatter after the previous iteration's stores, session 17).

    python -m bench.probes.store_layout --sass    # CPU: memory instructions and barriers a kernel
    python -m bench.probes.store_layout           # GPU: graph replay beside a copy kernel (torch.neg)

Rerun both after a compiler update: the lanes forward's layout choices (plan.lanes_one_tile,
rows_fwd_lanes' LOOP) rest on what they print beside the whole kernel's timings (s54d, s55d).
"""

import argparse
import collections
import dataclasses
import re
import sys
from typing import Annotated

import cuda.tile as ct

C_INT = ct.Constant[int]
C_BOOL = ct.Constant[bool]
LENGTHS = (170, 338)  # bf16 rows of 2 mod 4 elements the lanes forward runs (s54a-c)
ROWS, L = 16, 8  # the loop rule's tile of 170 until session 55 (s55b ran it; plan.lanes_one_tile's: 8 rows)
BLOCKS_PER_SM = 8
ELEMS = 64 << 20  # about 64 Mi elements a call, beyond L2
# (m, n) rows whose n and strides are compile-time constants, as the lanes kernels take them
# (cutile_rms.rows.kernels.common.RowArray): without it a launch compiles runtime strides whose
# alignment the JIT cannot prove, and the GPU mode would time other code than --sass reports.
Rows2 = Annotated[ct.Array, ct.ArrayAnnotation(static_shape_dims=(-1,), static_stride_dims=(0, 1))]


@ct.function
def _rows(t, R: C_INT):
    return ct.reshape(ct.arange(R, dtype=ct.int32) + t * R, (R, 1, 1))


@ct.function
def _cols(L: C_INT, K: C_INT):
    return ct.reshape(ct.arange(L, dtype=ct.int32) * K, (1, L, 1)) + ct.reshape(ct.arange(K, dtype=ct.int32), (1, 1, K))


@ct.function
def _lanes_copy(x, y, t, c, R: C_INT, L: C_INT, K: C_INT, SCATTER: C_BOOL):
    """Tile t of x into y through the lanes layout: stored reshaped, or scattered at its indices."""
    idx = (_rows(t, R), c)
    v = ct.gather(x, idx, padding_value=0)
    if SCATTER:
        ct.scatter(y, idx, v)
    else:
        ct.store(y, (t, 0), ct.reshape(v, (R, L * K)), allow_tma=False)


@ct.kernel
def gather_copy(x: Rows2, y: Rows2, R: C_INT, L: C_INT, K: C_INT, SCATTER: C_BOOL, LOOP: C_BOOL):
    """y = x through the lanes layout: stored reshaped as the lanes forward stores y, or scattered
    at the gather's indices."""
    c = _cols(L, K)
    if LOOP:
        for t in range(ct.bid(0), ct.cdiv(x.shape[0], R), ct.num_blocks(0)):
            _lanes_copy(x, y, t, c, R, L, K, SCATTER)
    else:
        _lanes_copy(x, y, ct.bid(0), c, R, L, K, SCATTER)


@ct.function
def _tile_copy(x, y, t, R: C_INT, W: C_INT):
    ct.store(y, (t, 0), ct.load(x, (t, 0), (R, W), padding_mode=ct.PaddingMode.ZERO, allow_tma=False),
             allow_tma=False)  # fmt: skip


@ct.kernel
def load_store(x: Rows2, y: Rows2, R: C_INT, W: C_INT, LOOP: C_BOOL):
    """y = x as (R, W) row tiles, loaded and stored."""
    if LOOP:
        for t in range(ct.bid(0), ct.cdiv(x.shape[0], R), ct.num_blocks(0)):
            _tile_copy(x, y, t, R, W)
    else:
        _tile_copy(x, y, ct.bid(0), R, W)


def cases(n: int):
    """(label, kernel, constants) of the three kernels, each with and without the loop."""
    w = 1 << (n - 1).bit_length()
    out = []
    for loop in (False, True):
        tag = "loop" if loop else "once"
        out += [(f"gather_store-{tag}", gather_copy, (ROWS, L, w // L, False, loop)),
                (f"gather_scatter-{tag}", gather_copy, (ROWS, L, w // L, True, loop)),
                (f"load_store-{tag}", load_store, (ROWS, w, loop))]  # fmt: skip
    return out


def _array(n: int):
    """The constraint of a C-contiguous bf16 (m, n) array at a 16-byte aligned base with n and
    the row stride compiled in, as the lanes kernels' static layouts take them."""
    from bench.probes.sass import array

    a = array(ct.bfloat16, (ELEMS // n, n))
    return dataclasses.replace(a, stride_divisible_by=(1, 1), shape_divisible_by=(1, 1), shape_constant=(None, n),
                               stride_constant=(n, 1))  # fmt: skip


def sass_report(n: int) -> dict:
    """{label: Counter of the kernel's global and shared memory instructions and barriers} (CPU)."""
    from bench.probes import sass as S

    a = _array(n)
    out = {}
    for label, kernel, consts in cases(n):
        cubin = S.compile_cubin(kernel, [a, a, *consts], occupancy=BLOCKS_PER_SM, num_worker_warps=4)
        ops = collections.Counter()
        for t in re.findall(r"/\*[0-9a-f]{4}\*/\s+(.*?);", S.cuobjdump(cubin, "-sass")):
            op = re.sub(r"^@!?U?P\w+ ", "", t.strip()).split()[0]
            if op.startswith(("LDG", "STG", "STS", "LDS", "BAR", "STSM", "LDSM")):
                ops[re.sub(r"\.(E|DEFER_BLOCKING)\b", "", op)] += 1
        out[label] = ops
    return out


def time_gpu(n: int) -> dict:
    """{label: us} by graph replay at about ELEMS elements, beside the copy ("copy": torch.neg)."""
    import torch

    from bench import timing as Tm

    m = ELEMS // n
    sets = Tm.num_sets(4 * m * n)
    xs = [torch.randn(m, n, device="cuda").to(torch.bfloat16) for _ in range(sets)]
    ys = [torch.empty_like(x) for x in xs]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = {"copy": Tm.graph_us([lambda x=x, y=y: torch.neg(x, out=y) for x, y in zip(xs, ys, strict=True)], 50)}
    for label, kernel, consts in cases(n):
        tiles = -(-m // ROWS)
        grid = min(tiles, sms * BLOCKS_PER_SM) if consts[-1] else tiles
        k = kernel.replace_hints(occupancy=BLOCKS_PER_SM, num_worker_warps=4)

        def call(x, y, k=k, grid=grid, consts=consts):
            ct.launch(torch.cuda.current_stream(), (grid,), k, (x, y, *consts))

        call(xs[0], ys[0])
        torch.cuda.synchronize()
        if not torch.equal(ys[0], xs[0]):
            out[label] = float("nan")  # (wrong: reported, not timed)
            continue
        out[label] = Tm.graph_us([lambda x=x, y=y: call(x, y) for x, y in zip(xs, ys, strict=True)], 50)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.probes.store_layout", description=__doc__.split("\n\n")[0])
    p.add_argument("--sass", action="store_true", help="CPU: the SASS's memory instructions and barriers")
    p.add_argument("--n", type=int, nargs="+", default=list(LENGTHS))
    args = p.parse_args(argv)
    for n in args.n:
        if args.sass:
            for label, ops in sass_report(n).items():
                print(f"n={n} {label:22s} " + " ".join(f"{k} {v}" for k, v in sorted(ops.items())), flush=True)
        else:
            t = time_gpu(n)
            copy = t.pop("copy")
            print(f"n={n} copy {copy:.1f} us", flush=True)
            for label, us in t.items():
                print(f"n={n} {label:22s} {us:7.1f} us ({100 * copy / us:5.1f}% of the copy)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
