"""PTX instruction histogram of compiled kernels (embedded PTX of the cubin; no GPU needed)."""
import io, re, struct, sys, collections
sys.path.insert(0, ".")
from tests import aot as A
from cuda.tile.compilation import export_kernel, KernelSignature, CallingConvention
from cutile_rms.rmsnorm import kernels as K

def ptx_of(kernel, params, occ=1, warps=8, arch="sm_90"):
    k = kernel.replace_hints(occupancy=occ, num_worker_warps=warps)
    buf = io.BytesIO()
    export_kernel(k, [KernelSignature(params, calling_convention=CallingConvention.cutile_python_v1())], buf,
                  gpu_code=arch, output_format="cubin")
    b = buf.getvalue()
    shoff = struct.unpack_from("<Q", b, 0x28)[0]; shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    stro = secs[shstrndx][4]
    info = {}
    for s in secs:
        nm = b[stro + s[0]: b.index(b"\0", stro + s[0])].decode()
        if nm == ".nv_debug_ptx_txt":
            info["ptx"] = b[s[4]:s[4] + s[5]].decode(errors="replace")
        if nm.startswith(".nv.shared.") and "reserved" not in nm:
            info["smem"] = s[5]
        if nm.startswith(".nv.local."):
            info["local"] = s[5]
    return info

def hist(ptx):
    body = ptx.split(".nv_intermediate_source_section")[0]
    c = collections.Counter(re.findall(r"\b((?:ld|st|cp|red|atom|mbarrier|fence)\.[a-z0-9_.:]*)", body))
    return {k: v for k, v in c.most_common() if not k.startswith("ld.param")}

def aligned(orig):
    import cuda.tile as ct
    from cuda.tile.compilation import ArrayConstraint
    def arr(dtype_name, ndim):
        return ArrayConstraint(A.ARRAY_DTYPES[dtype_name], ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
            alias_groups=[], may_alias_internally=False, stride_constant=[None] * (ndim - 1) + [1],
            stride_divisible_by=[16] * (ndim - 1) + [1], shape_divisible_by=1, base_addr_divisible_by=16)
    return arr

A.arr = aligned(A.arr)

if __name__ == "__main__":
    M = (False, 0)
    cases = [
        ("bf16 bwd tile 2x8192", K.rms_bwd_tile, A._bwd_tile_params("bfloat16", "bfloat16", 2, 8192, True, M)),
        ("bf16 bwd tile 4x4096", K.rms_bwd_tile, A._bwd_tile_params("bfloat16", "bfloat16", 4, 4096, True, M)),
        ("f32 bwd tile 1x8192", K.rms_bwd_tile, A._bwd_tile_params("float32", "float32", 1, 8192, False, M)),
        ("bf16 fwd tile 1x8192", K.rms_fwd_tile, A._fwd_params("bfloat16", "bfloat16", 1, 8192, K.CAST_LLAMA, True, M)),
        ("bf16 fwd tile 16x512", K.rms_fwd_tile, A._fwd_params("bfloat16", "bfloat16", 16, 512, K.CAST_LLAMA, True, M)),
    ]
    for label, k, p in cases:
        info = ptx_of(k, p)
        print(label, "smem", info.get("smem"), "local", info.get("local"), hist(info["ptx"]), flush=True)
