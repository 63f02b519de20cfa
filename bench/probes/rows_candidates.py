"""Candidate configs of the row-tile kernels, pre-filtered on the CPU by their
compiled register use (no spills), written to rows_candidates.json for the GPU probe."""

import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

FWD_SHAPES = [(524288, 128), (262144, 256), (131072, 512), (65536, 1024), (32768, 2048), (22369, 3000),
              (16384, 4096), (12483, 5376), (8192, 6144), (8192, 8192), (4096, 12288), (4096, 16384),
              (2048, 18432), (2048, 32768), (1024, 65536)]  # fmt: skip
BWD_SHAPES = [(524288, 128), (262144, 256), (131072, 512), (65536, 1024), (16384, 4096), (12483, 5376),
              (8192, 8192), (4096, 16384), (2048, 18432)]  # fmt: skip
DTYPES = ("bfloat16", "float32")
ES = {"bfloat16": 2, "float32": 4}


def next_pow2(n):
    return 1 << max(0, n - 1).bit_length()


def pieces(n, max_pieces=3):
    """Powers of two, largest first, covering n with the least padding in at most max_pieces."""
    g = 1
    while True:
        c = -(-n // g) * g
        bits = [1 << b for b in range(c.bit_length() - 1, -1, -1) if c >> b & 1]
        if len(bits) <= max_pieces:
            return bits
        g *= 2


def fwd_space(dtype, m, n):
    es = ES[dtype]
    p = pieces(n)
    npad = sum(p)
    max_elems = 32768 // es  # 32 KB tiles at most
    out = []
    tms = [t for t in (1, 2, 4, 8, 16, 32, 64, 128, 256) if t * next_pow2(npad) <= max_elems and t * npad * es >= 1024]
    tms = tms[-3:] or [1]
    for tm in tms:
        for warps in (4, 8):
            for occ in (None, 1, 2, 4, 8):
                out.append(dict(op="fwd", dtype=dtype, m=m, n=n, tm=tm, pieces=p, warps=warps, occ=occ))
    if len(p) > 1:  # one padded tile, for comparison
        out.append(dict(op="fwd", dtype=dtype, m=m, n=n, tm=1, pieces=[next_pow2(n)], warps=8, occ=None))
    return out


def bwd_space(dtype, m, n):
    es = ES[dtype]
    p = pieces(n)
    npad = sum(p)
    max_elems = 16384 // es
    out = []
    tms = [t for t in (1, 2, 4, 8, 16, 32, 64, 128) if t * next_pow2(npad) <= max_elems and t * npad * es >= 512]
    tms = tms[-3:] or [1]
    for tm in tms:
        for warps in (4, 8):
            for occ in (None, 1, 2, 4):
                out.append(dict(op="bwd", dtype=dtype, m=m, n=n, tm=tm, pieces=p, warps=warps, occ=occ))
    return out


def params(c):
    import cuda.tile as ct

    from bench.probes.sass import F32, array

    dt = {"bfloat16": ct.bfloat16, "float32": ct.float32}[c["dtype"]]
    m, n, tm = c["m"], c["n"], c["tm"]
    w = list(c["pieces"]) + [0] * (3 - len(c["pieces"]))
    cm = m % tm != 0
    cn = sum(c["pieces"]) != n
    if c["op"] == "fwd":
        return [array(dt, (m, n)), array(dt, (n,)), array(dt, (m, n)), array(ct.float32, (m,)), F32, F32, tm, *w,
                dt != ct.float32, True, True, cm, cn, False]  # fmt: skip
    return [array(dt, (m, n)), array(dt, (m, n)), array(dt, (n,)), array(ct.float32, (m,)), array(dt, (m, n)),
            array(ct.float32, (264, n)), F32, tm, *w, True, dt != ct.float32, cm, cn, False]  # fmt: skip


def report(c):
    os.environ["CUDA_TILE_CACHE_DIR"] = "off"
    from bench.probes import rows_kernels as R
    from bench.probes.sass import compile_report

    hints = {"num_worker_warps": c["warps"]}
    if c["occ"]:
        hints["occupancy"] = c["occ"]
    k = R.fwd_rows if c["op"] == "fwd" else R.bwd_rows
    try:
        r = compile_report(k, params(c), **hints)
    except Exception as e:
        return dict(c, error=f"{type(e).__name__}: {e}"[:200])
    return dict(c, regs=r["REG"], stack=r.get("STACK", 0), ops=r["ops"])


def main():
    cands = []
    for d in DTYPES:
        for m, n in FWD_SHAPES:
            cands += fwd_space(d, m, n)
        for m, n in BWD_SHAPES:
            cands += bwd_space(d, m, n)
    # one compile per distinct specialization (m only matters through m % tm and m % 16)
    print(len(cands), "candidates", file=sys.stderr)
    with ProcessPoolExecutor(int(sys.argv[1]) if len(sys.argv) > 1 else 2) as ex:
        res = list(ex.map(report, cands, chunksize=4))
    keep, seen = [], set()
    for r in res:
        if "error" in r or r["stack"] > 0:
            continue
        key = (r["op"], r["dtype"], r["m"], r["n"], r["tm"], tuple(r["pieces"]), r["warps"], r["regs"])
        if key in seen:  # an occupancy hint that did not change the registers: same kernel, for this purpose
            continue
        seen.add(key)
        keep.append(r)
    with open(os.path.join(os.path.dirname(__file__), "rows_candidates.json"), "w") as f:
        json.dump(keep, f)
    print(len(keep), "kept", file=sys.stderr)


if __name__ == "__main__":
    main()
