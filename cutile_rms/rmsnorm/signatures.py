"""The host-side signature of every core RMSNorm kernel, spelled once.

A kernel's arguments are built as named values and put in order by :func:`arguments`. The
launchers (launch.py), the tuner (autotune.py), the ahead-of-time compile check (tests/aot.py)
and the tests read these tuples; tests/test_config.py checks each against the kernel's own
parameters. An absent optional array (no weight, no rstd, no workspace) is given a
placeholder that the kernel's compile-time flags never touch (launch.py).
"""

_FWD_ARRAYS = ("x", "w", "y")
_FWD_TAIL = ("CASTING", "HAS_WEIGHT", "TMA_STORE", "LATENCY")
_BWD_TAIL = ("HAS_WEIGHT", "ROUND_XHAT", "TMA_STORE", "LATENCY")
_SPLIT = ("SPLIT", "SLOTS_W", "POLLS")


def _plain(tail: tuple) -> tuple:
    """A tail without TMA_STORE: the split kernels always store without TMA (kernels/split.py)."""
    return tuple(name for name in tail if name != "TMA_STORE")


def _forward(rstd: bool, workspace: tuple, tiles: tuple, tail: tuple = _FWD_TAIL) -> tuple:
    return _FWD_ARRAYS + (("rstd_out",) if rstd else ()) + workspace + ("eps", "offset") + tiles + tail


PARAMS = {
    "rms_fwd_tile": _forward(True, (), ("TILE_M", "TILE_N", "TAIL")),
    "rms_fwd_tile_infer": _forward(False, (), ("TILE_M", "TILE_N", "TAIL")),
    "rms_fwd_chunked": _forward(True, (), ("TILE_M", "TILE_N")),
    "rms_fwd_chunked_infer": _forward(False, (), ("TILE_M", "TILE_N")),
    "rms_fwd_split": _forward(True, ("slots",), ("TILE_M", "TILE_N") + _SPLIT, _plain(_FWD_TAIL)),
    "rms_fwd_split_infer": _forward(False, ("slots",), ("TILE_M", "TILE_N") + _SPLIT, _plain(_FWD_TAIL)),
    "rms_bwd_tile": ("x", "dy", "w", "rstd_in", "dx", "dw_partial", "offset", "TILE_M", "TILE_N") + _BWD_TAIL,
    "rms_bwd_row_dot": ("x", "dy", "w", "rstd_in", "c_out", "offset", "TILE_M", "TILE_N", "HAS_WEIGHT"),
    "rms_bwd_chunked": ("x", "dy", "w", "rstd_in", "c_in", "dx", "dw_partial", "offset", "TILE_M", "TILE_N")
    + _BWD_TAIL,
    "rms_bwd_split": ("x", "dy", "w", "rstd_in", "dx", "dw_partial", "slots", "offset", "TILE_M", "TILE_N")
    + _SPLIT
    + _plain(_BWD_TAIL),
    "rms_bwd_packed": ("x", "dy", "w", "rstd_in", "dx", "dw_partial", "offset", "TILE_M", "TILE_W", "TAIL_W", "HALF")
    + _BWD_TAIL,
    "dw_reduce": ("dw_partial", "dw", "TILE_G", "TILE_N"),
    "dw_reduce_packed": ("dw_partial", "dw", "TILE_G", "TILE_W", "HALF"),
}

# The forward kernel of a kind, with or without the rstd store; the backward kernel of a kind.
FORWARD = {
    ("tile", True): "rms_fwd_tile",
    ("tile", False): "rms_fwd_tile_infer",
    ("chunked", True): "rms_fwd_chunked",
    ("chunked", False): "rms_fwd_chunked_infer",
    ("split", True): "rms_fwd_split",
    ("split", False): "rms_fwd_split_infer",
}
BACKWARD = {
    "tile": "rms_bwd_tile",
    "chunked": "rms_bwd_chunked",
    "row_dot": "rms_bwd_row_dot",
    "split": "rms_bwd_split",
    "packed": "rms_bwd_packed",
}


def arguments(kernel: str, values: dict) -> tuple:
    """The argument tuple of the kernel named ``kernel`` from named values (extra names are
    ignored; a missing one raises KeyError naming it)."""
    return tuple(values[name] for name in PARAMS[kernel])
