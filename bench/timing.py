"""Timing: kernel time from CUDA-graph replay, and eager call latency.

graph: R input sets are rotated so that consecutive calls never reuse a set (for the training
shapes each set alone is larger than L2); `inner` calls are captured into one CUDA graph; the
graph is replayed `reps` times between CUDA events after warm-up; the result is the median
replay time / inner. Decode-size inputs are rotated over at most MAX_SETS sets and can still
be partly L2-resident (the CSV records the rotated bytes).
eager: the Python call as a user's loop sees it (host overhead included), timed with a host
clock around `inner` calls after a synchronize, median of `reps` loops.
"""

import statistics
import time

import torch

from cutile_rms import interpret

L2_BYTES = 60 * 2**20  # H200; read from the device when torch exposes it
MAX_SETS = 64
TARGET_REPLAY_US = 2000.0


def l2_bytes() -> int:
    if not torch.cuda.is_available():
        return L2_BYTES
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or L2_BYTES)


def _sync():
    if torch.cuda.is_available() and not interpret.is_enabled():
        torch.cuda.synchronize()


def num_sets(bytes_per_call: int) -> int:
    """Enough input sets that their total exceeds twice the L2, at least 2, at most MAX_SETS."""
    return max(2, min(MAX_SETS, -(-2 * l2_bytes() // max(1, bytes_per_call))))


def _inner(est_us: float) -> int:
    return max(5, min(400, int(TARGET_REPLAY_US / max(est_us, 0.5))))


def eager_us(calls, reps: int = 7) -> float:
    """Median per-call host-observed time over `reps` loops; calls rotate over input sets."""
    for c in calls:
        c()
    _sync()
    t0 = time.perf_counter()
    calls[0]()
    _sync()
    inner = _inner((time.perf_counter() - t0) * 1e6)
    samples = []
    for _ in range(reps):
        _sync()
        t0 = time.perf_counter()
        for i in range(inner):
            calls[i % len(calls)]()
        _sync()
        samples.append((time.perf_counter() - t0) * 1e6 / inner)
    return statistics.median(samples)


_capture_stream = None


def capture_stream() -> torch.cuda.Stream:
    """The one side stream graphs are captured on. Work whose backward is captured later must
    run its forward on this stream too: autograd runs each backward op on the stream of its
    forward op, and a backward op on any other stream invalidates the capture (seen on the
    H200 for torch's own F.rms_norm as for ours)."""
    global _capture_stream
    if _capture_stream is None:
        _capture_stream = torch.cuda.Stream()
    return _capture_stream


def _capture(calls, inner):
    s = capture_stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capture stream
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for i in range(inner):
            calls[i % len(calls)]()
    return g


def graph_us(calls, est_us: float, reps: int = 20) -> float:
    """Median per-call device time from CUDA-graph replay (see module docstring)."""
    inner = _inner(est_us)
    g = _capture(calls, inner)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        g.replay()
        end[i].record()
    torch.cuda.synchronize()
    times = [a.elapsed_time(b) * 1000.0 / inner for a, b in zip(start, end, strict=False)]
    del g
    return statistics.median(times)
