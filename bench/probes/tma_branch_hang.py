"""A minimal reproducer of the hang that keeps TMA stores out of the split kernels.

A grid-stride loop reads a (1, W) int64 tile with a relaxed atomic add of zero and stores the row
tile it loaded only where every value read is non-negative (always, here). With the store allowed
to use TMA and an occupancy hint of 2, tileiras 13.4 code never finished on the H200 at W = 8;
with a plain store, occupancy 1 or W = 1 each case ran in under a second (bench/NOTES.md,
session 24). The split kernels have this shape (the "all partners published" branch), so they
store without TMA (cutile_rms/rmsnorm/kernels/split.py). Rerun this after a compiler update
before giving them TMA stores back:

    python -m bench.probes.tma_branch_hang       # one process per case, CASE_SECONDS each (20)
"""

import os
import subprocess
import sys

import cuda.tile as ct

CASE_SECONDS = float(os.environ.get("CASE_SECONDS", "20"))
# (TMA store allowed, occupancy hint, atomic tile width): the hang, then one change at a time.
CASES = [(True, 2, 8), (False, 2, 8), (True, 1, 8), (True, 2, 1)]
M, N, TILE_N, GRID = 301, 1000, 128, 264


@ct.kernel
def branch_store(x, y, flags, TILE_N: ct.Constant[int], W: ct.Constant[int], TMA: ct.Constant[bool]):
    for i in range(ct.bid(0), x.shape[0], ct.num_blocks(0)):
        t = ct.load(x, (i, 0), (1, TILE_N), padding_mode=ct.PaddingMode.ZERO)
        rows = ct.reshape(ct.arange(1, dtype=ct.int32) + i, (1, 1))
        cols = ct.reshape(ct.arange(W, dtype=ct.int32), (1, W))
        got = ct.atomic_add(flags, (rows, cols), ct.zeros((1, W), dtype=ct.int64),
                            memory_order=ct.MemoryOrder.RELAXED, memory_scope=ct.MemoryScope.DEVICE)  # fmt: skip
        if ct.min(got) >= 0:
            if TMA:
                ct.store(y, (i, 0), t * 2)
            else:
                ct.store(y, (i, 0), t * 2, allow_tma=False)
        else:
            ct.atomic_add(flags, (rows, cols), ct.full((1, W), 1, dtype=ct.int64),
                          memory_order=ct.MemoryOrder.RELAXED, memory_scope=ct.MemoryScope.DEVICE)  # fmt: skip


def run_case(tma: bool, occupancy: int, width: int) -> str:
    """Launches branch_store once and checks y ("ok" or "wrong"); may never return (the hang)."""
    import torch

    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    flags = torch.zeros(M, width, device="cuda", dtype=torch.int64)
    kernel = branch_store.replace_hints(occupancy=occupancy)
    ct.launch(torch.cuda.current_stream(), (GRID,), kernel, (x, y, flags, TILE_N, width, tma))
    torch.cuda.synchronize()
    return "ok" if torch.equal(y[:, :TILE_N], x[:, :TILE_N] * 2) else "wrong"


def main():
    if len(sys.argv) == 4:  # one case, in its own process
        print(run_case(sys.argv[1] == "1", int(sys.argv[2]), int(sys.argv[3])))
        return
    for tma, occupancy, width in CASES:
        args = [sys.executable, "-m", "bench.probes.tma_branch_hang", str(int(tma)), str(occupancy), str(width)]
        try:
            out = subprocess.run(args, capture_output=True, text=True, timeout=CASE_SECONDS)
            result = (out.stdout.strip().splitlines() or [f"failed: {out.stderr.strip()[-200:]}"])[-1]
        except subprocess.TimeoutExpired:
            result = f"HANG (no result in {CASE_SECONDS:.0f} s, compile included)"
        print(f"tma_store={tma} occupancy={occupancy} atomic tile (1, {width}): {result}", flush=True)


if __name__ == "__main__":
    main()
