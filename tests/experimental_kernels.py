"""Kernels used by test_experimental.py (cuTile reads kernel source from a .py file)."""

import cuda.tile as ct

from cutile_rms import experimental_kernel
from cutile_rms._tile import tile_kernel


@experimental_kernel
@tile_kernel
def scale_kernel(x, y, TILE: ct.Constant[int]):
    for i in range(ct.bid(0), ct.cdiv(x.shape[0], TILE), ct.num_blocks(0)):
        ct.store(y, (i,), ct.load(x, (i,), (TILE,)) * 2.0)


@experimental_kernel
@tile_kernel
def warn_once_kernel(x):
    pass


@tile_kernel
def plain_kernel(x):
    pass
