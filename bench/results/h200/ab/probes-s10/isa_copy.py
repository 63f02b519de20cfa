# Ran on a later form of s10_kernels.py that had copy_fwd with nested loops (row tile, then chunk)
# and this file's flat copy_fwd as copy_fwd_flat: both printed only ld.global.b16 / st.global.b16.
import sys, time; sys.path.insert(0, "scratch"); sys.path.insert(0, "probe10"); sys.path.insert(0, ".")
from isa import ptx_of, A, hist
import s10_kernels as S
from cutile_rms.rmsnorm import kernels as K, config as C
for k in (S.copy_fwd, S.copy_fwd_flat):
    for tm, tn in ((16, 512), (1, 4096)):
        p = [A.arr("bfloat16", 2), A.arr("bfloat16", 2), tm, tn, True]
        info = ptx_of(k, p, 1, 8)
        print(k._pyfunc.__name__, tm, tn, hist(info["ptx"].replace("\x00", "\n")))
mem = C.tile(16, 512, 1, 8, tma_store=True).memory
p = A._fwd_params("bfloat16", "bfloat16", 16, 512, K.CAST_LLAMA, True, mem, tail=0)
print("norm 16x512", hist(ptx_of(K.rms_fwd_tile, p, 1, 8)["ptx"].replace("\x00", "\n")))
