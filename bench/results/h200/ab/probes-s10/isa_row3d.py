import sys; sys.path.insert(0, "scratch"); sys.path.insert(0, "probe10"); sys.path.insert(0, ".")
from isa import ptx_of, A, hist
import s10_kernels as S
from cutile_rms.rmsnorm import kernels as K
F32 = A.F32
for dt in ("float32", "bfloat16"):
    for V in (4, 8):
        n = 8192
        p = [A.arr(dt, 3), A.arr(dt, 2), A.arr(dt, 3), F32, n // V, V]
        info = ptx_of(S.row3d, p, 1, 8)
        print(dt, V, "lines", info["ptx"].count("\n") + info["ptx"].count("\x00"), hist(info["ptx"].replace("\x00", "\n")))
    p = A._fwd_row_params(dt, dt, 1, 8192, K.CAST_LLAMA, False, False)
    info = ptx_of(K.rms_fwd_row_infer, p, 1, 8)
    print(dt, "shipped row", hist(info["ptx"].replace("\x00", "\n")))
