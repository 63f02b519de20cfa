import sys, time; sys.path.insert(0, "scratch"); sys.path.insert(0, "probe10"); sys.path.insert(0, ".")
from isa import ptx_of, A, hist
import s10_kernels as S
for dt in ("bfloat16",):
    for tn, occ in ((4096, 2), (8192, 1), (16384, 1)):
        p = [A.arr(dt, 2), A.arr(dt, 2), A.arr(dt, 1), A.arr("float32", 1), A.arr(dt, 2), A.arr("float32", 2), tn, True, True]
        t0 = time.time(); info = ptx_of(S.bwd_twopass, p, occ, 8)
        print(dt, tn, occ, f"{time.time()-t0:.1f}s", "local", info.get("local"), "smem", info.get("smem"), hist(info["ptx"].replace("\x00", "\n")))
