"""Benchmark harness (python -m bench): cutile_rms against Liger (Triton), torch, torch.compile and Quack."""
