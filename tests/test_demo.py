"""CPU tier: the first command a newcomer runs, ``python -m cutile_rms``, works without a GPU."""

import os
import subprocess
import sys


def test_demo_runs_through_the_interpreter():
    """With CUTILE_RMS_INTERPRET=1 (as on a machine without a GPU) the demo says so in its first
    line, checks forward and backward against float64 and exits 0."""
    env = dict(os.environ, CUTILE_RMS_INTERPRET="1")
    done = subprocess.run([sys.executable, "-m", "cutile_rms"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("cutile_rms demo: no CUDA GPU (or CUTILE_RMS_INTERPRET=1)")
    errors = next(line for line in lines if "relative error vs float64" in line).split(":", 1)[1].split()
    values = dict(zip(errors[::2], map(float, errors[1::2]), strict=True))
    assert set(values) == {"y", "dx", "dw"} and all(0 < v < 2e-2 for v in values.values()), values
    assert lines[-1].strip().startswith("ok")
