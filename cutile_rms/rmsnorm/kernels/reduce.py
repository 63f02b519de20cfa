"""The dW reduction: the fixed-order sum of the per-block fp32 partials."""

import cuda.tile as ct

from cutile_rms._tile import tile_kernel
from cutile_rms.rmsnorm.kernels.common import ZERO


@tile_kernel
def dw_reduce(dw_partial, dw, TILE_G: ct.Constant[int], TILE_N: ct.Constant[int]):
    """dw[n] = sum over g of dw_partial[g, n], in fp32, in a fixed order; stored in dw's dtype.

    Blocks stride over TILE_N column chunks and walk the G partial rows TILE_G at a time.
    """
    num_g_tiles = ct.cdiv(dw_partial.shape[0], TILE_G)
    num_chunks = ct.cdiv(dw_partial.shape[1], TILE_N)
    for j in range(ct.bid(0), num_chunks, ct.num_blocks(0)):
        acc = ct.zeros((1, TILE_N), dtype=ct.float32)
        for g in range(num_g_tiles):
            acc += ct.sum(ct.load(dw_partial, (g, j), (TILE_G, TILE_N), padding_mode=ZERO), axis=0, keepdims=True)
        ct.store(dw, (j,), ct.astype(ct.reshape(acc, (TILE_N,)), dw.dtype))
