"""Candidate plans of the row-tile kernels (cutile_rms.rows) around the rules'
choice, compiled on the CPU with the constraints the JIT derives at launch and kept where they
do not spill registers: rows_candidates.json, the GPU probe's input (rows_probe.py).

    python -m bench.probes.rows_candidates [workers]        # a few minutes on 2 cores
"""

import dataclasses
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

FWD_SHAPES = [(524288, 128), (262144, 256), (131072, 512), (65536, 1024), (32768, 2048), (22369, 3000),
              (16384, 4096), (12483, 5376), (8192, 6144), (8192, 8192), (4096, 12288), (4096, 16384),
              (2048, 18432)]  # fmt: skip
BWD_SHAPES = [(524288, 128), (262144, 256), (131072, 512), (65536, 1024), (16384, 4096), (12483, 5376),
              (8192, 8192)]  # fmt: skip
DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4}
SMS = 132
OUT = os.path.join(os.path.dirname(__file__), "rows_candidates.json")


def space(op, dtype, m, n):
    """The rules' plan, and plans with 2-4x fewer or more rows per tile, 4 or 8 warps, every
    occupancy hint; forward also one padded tile per row (where n takes several pieces)."""
    from cutile_rms.rows.plan import plan

    es = DTYPES[dtype]
    base = plan(op, m, 1, n, es, SMS)
    if base is None:
        return []
    rows = base.tile_a * base.tile_b
    out = []
    for r in sorted({max(1, rows // 2), rows, min(256, rows * 2)}):
        for warps in (4, 8):
            for occ in (1, 2, 4, 8):
                out.append(dict(op=op, dtype=dtype, m=m, n=n, tile_rows=r, warps=warps, occupancy=occ, max_pieces=3))
    if op == "forward" and len([w for w in base.widths if w]) > 1 and plan(op, m, 1, n, es, SMS, max_pieces=1):
        out.append(dict(op=op, dtype=dtype, m=m, n=n, tile_rows=rows, warps=8, occupancy=1, max_pieces=1))
    return out


def plan_of(c, persistent=None):
    """A candidate's plan: the plan keywords it names (the rules' choice for the others), on static
    layouts unless it says "static": false ("force": static layouts where plan.static_fit would not
    take them: row tiles, the lanes kernels and the long forward); a long-row plan where the rules give one or it
    says "long": true (with "chunk", in elements); "lane_elems": the elements a lane of a lanes tile
    holds (the kernels' L; the rules' plan.LANES_ELEMS, or on the rows of plan.vector_lanes the
    elements it returns, sessions 31 and 32); "flat": plan's flat (absent: False, the rows read as
    rows; null: where plan.flat_fit says; true: the flat rows kernels, with "chunk", and the backward's
    "dot_chunk": its row dot's chunk); "loop": false: a row-tile forward on a grid of its tiles
    ("persistent": false) without the grid-stride loop (RowsPlan.loop)."""
    from cutile_rms.rows.kernels import LOADS_PLAIN
    from cutile_rms.rows.plan import plan

    force = c.get("static") == "force"  # static layouts where plan.static_fit would not take them
    p = plan(c["op"], c["m"], 1, c["n"], DTYPES[c["dtype"]], SMS, tile_rows=c.get("tile_rows"), warps=c.get("warps"),
             occupancy=c.get("occupancy"), persistent=persistent, max_pieces=c.get("max_pieces"),
             loads=c.get("loads"), min_piece=c.get("min_piece"), lanes=c.get("lanes"), any_length=True,
             static=not force and c.get("static", True), long=c.get("long"), chunk=c.get("chunk"),
             unroll=c.get("unroll"), onepass=c.get("onepass", False), prefetch=c.get("prefetch"),
             flat=c.get("flat", False), split=c.get("split", False))  # fmt: skip
    if p is not None and p.kind == "flat" and p.op == "backward" and c.get("dot_chunk"):  # the flat row dot's chunk
        p = dataclasses.replace(p, widths=(p.widths[0], c["dot_chunk"], 0))
    if p is not None and p.kind == "tile" and c.get("loop") is False:  # rows_fwd without its loop: a block a tile
        if p.op != "forward" or p.grid != -(-c["m"] // p.tile_a):
            raise ValueError(f"loop false needs a forward on a grid of its tiles, got grid {p.grid}")
        p = dataclasses.replace(p, loop=False)
    # "lane_elems" changes the lanes only: the tile keeps the rules' rows (plan.lanes_tile_rows, which
    # sizes them for the rules' lanes), so name "tile_rows" too where those should not hold
    if p is not None and p.kind == "lanes" and c.get("lane_elems"):
        if p.widths[0] % c["lane_elems"]:
            raise ValueError(f"lane_elems {c['lane_elems']} does not divide the lanes tile's width {p.widths[0]}")
        p = dataclasses.replace(p, lanes=max(1, p.widths[0] // c["lane_elems"]))
    if not (force and p is not None and (p.kind in ("tile", "lanes") or (p.kind, p.op) == ("long", "forward"))):
        return p
    multi_row = p.kind == "tile" and p.op == "forward" and p.tile_a * p.tile_b > 1
    if multi_row and c.get("loads") is None:  # plain loads, as the static rule plans them
        p = dataclasses.replace(p, loads=LOADS_PLAIN)
    unroll = p.unroll if c.get("unroll") is None or p.kind != "long" else c["unroll"]  # the long forward's UNROLL
    return dataclasses.replace(p, static=True, unroll=unroll)


def core_plan(c):
    """A candidate's plan on the core kernels (cutile_rms.rmsnorm), where it names "core": the
    fields of a config.KernelConfig ({"kernel": "split", "tile_m": 1, "tile_n": 4096,
    "blocks_per_sm": 2, "warps": 8, "tma_store": false}, ...); a chunked backward also takes "dot",
    its row-dot kernel's config (absent: the same config). None where it names none."""
    from cutile_rms.rmsnorm import config as C

    if "core" not in c:
        return None
    cfg = C.KernelConfig(**c["core"])
    if c["op"] == "forward":
        return C.forward_plan_from(cfg, c["m"], SMS, "persistent", c["n"])
    dot = C.KernelConfig(**c["dot"]) if "dot" in c else cfg
    return C.backward_plan_from(cfg, dot, c["m"], c["n"], SMS)


def params(c):
    """The kernel's constraint list for a candidate (a 2-D input: B == 1), training flags."""
    import cuda.tile as ct

    from bench.probes.sass import rows_params

    dt = {"bfloat16": ct.bfloat16, "float16": ct.float16, "float32": ct.float32}[c["dtype"]]
    p = plan_of(c)
    kernel, ps, _ = rows_params(p, dt, c["m"], 1, c["n"], casting=c.get("casting"))
    return kernel, ps, p.hints


def report(c):
    os.environ["CUDA_TILE_CACHE_DIR"] = "off"
    from bench.probes.sass import compile_report

    try:
        kernel, ps, (occupancy, warps) = params(c)
        r = compile_report(kernel, ps, occupancy=occupancy, num_worker_warps=warps)
    except Exception as e:
        return dict(c, error=f"{type(e).__name__}: {e}"[:200])
    return dict(c, regs=r["REG"], stack=r.get("STACK", 0))


def main():
    cands = [c for d in DTYPES for m, n in FWD_SHAPES for c in space("forward", d, m, n)]
    cands += [c for d in DTYPES for m, n in BWD_SHAPES for c in space("backward", d, m, n)]
    print(len(cands), "candidates", file=sys.stderr)
    with ProcessPoolExecutor(int(sys.argv[1]) if len(sys.argv) > 1 else 2) as ex:
        res = list(ex.map(report, cands, chunksize=4))
    keep = [r for r in res if "error" not in r and r["stack"] == 0]
    for r in res:
        if "error" in r:
            print("failed:", r, file=sys.stderr)
    with open(OUT, "w") as f:
        json.dump(keep, f)
    print(len(keep), "kept", file=sys.stderr)


if __name__ == "__main__":
    main()
