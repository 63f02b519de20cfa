"""Benchmark cases, byte counts and the correctness check run before timing."""

import math
import random
from dataclasses import dataclass

TRAINING_ELEMS = 64 * 2**20  # x holds 64 Mi elements: 128 MiB in bf16, twice the H200's 60 MB L2 and more
TRAINING_N = [512, 1024, 2048, 4096, 5120, 7168, 8192, 16384, 32768, 65536]
DECODE_M = [1, 32, 256]
DECODE_N = [4096, 8192]

# Norms of real models, (label, M, N) at one training step of 16384 tokens unless noted. Hidden
# sizes (the norm around attention and MLP) and QK-norm (an RMSNorm over each attention head:
# M = tokens x heads, N = head_dim; Qwen3, Gemma 3 and OLMo 2 run one on q and one on k in
# every layer, usually on a view of the fused QKV projection).
MODELS = [
    ("llama3-8b", 16384, 4096),
    ("llama3-70b", 16384, 8192),
    ("llama3-405b", 8192, 16384),
    ("qwen2.5-7b", 16384, 3584),
    ("qwen3-32b", 16384, 5120),
    ("gemma2-2b", 16384, 2304),
    ("gemma3-27b", 16384, 5376),
    ("gpt-oss-120b", 16384, 2880),
    ("starcoder2-15b", 8192, 6144),
    ("deepseek-v3", 16384, 7168),
    ("nemotron4-340b", 2048, 18432),
    ("qwen3-8b q-norm (32 heads)", 16384 * 32, 128),
    ("qwen3-8b k-norm (8 heads)", 16384 * 8, 128),
    ("gemma3-4b q-norm (8 heads)", 32768 * 8, 256),
    ("deepseek-v3 q lora-norm", 16384, 1536),
    ("deepseek-v3 kv lora-norm", 16384, 512),
]

# The random set: N log-uniform in [RANDOM_N_MIN, RANDOM_N_MAX], not rounded, M such that M x N
# is about TRAINING_ELEMS; drawn from --seed, so a run names the shapes it checked.
RANDOM_COUNT = 12
RANDOM_N_MIN, RANDOM_N_MAX = 64, 65536

CPU_SHAPES = [(64, 4096), (256, 1024), (8, 20000)]
SETS = ("training", "decode", "models", "random", "cpu")

OPS = ("fwd", "fwd_infer", "bwd", "fwd_bwd")
VARIANTS = ("llama", "gemma", "noweight")
DTYPE_NAMES = ("bfloat16", "float16", "float32")
ELEMENT_SIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class Case:
    dtype: str
    m: int
    n: int
    variant: str
    label: str = ""


def random_shapes(seed: int, count: int = RANDOM_COUNT) -> list[tuple[int, int, str]]:
    """(M, N, label) of the random set for a seed: N log-uniform in [RANDOM_N_MIN, RANDOM_N_MAX]
    (any integer, not rounded to a multiple of anything), M = round(TRAINING_ELEMS / N)."""
    rng = random.Random(seed)
    lo, hi = math.log(RANDOM_N_MIN), math.log(RANDOM_N_MAX)
    out = []
    for _ in range(count):
        n = min(RANDOM_N_MAX, max(RANDOM_N_MIN, round(math.exp(rng.uniform(lo, hi)))))
        out.append((max(1, round(TRAINING_ELEMS / n)), n, f"random seed {seed}"))
    return out


def shape_set(name: str, seed: int | None = None) -> list[tuple[int, int, str]]:
    """(M, N, label) of a named set (SETS); "random" needs a seed."""
    if name == "training":
        return [(TRAINING_ELEMS // n, n, "") for n in TRAINING_N]
    if name == "decode":
        return [(m, n, "") for n in DECODE_N for m in DECODE_M]
    if name == "cpu":  # what the interpreter runs in seconds on a machine without a GPU
        return [(m, n, "") for m, n in CPU_SHAPES]
    if name == "models":
        return [(m, n, label) for label, m, n in MODELS]
    if name == "random":
        if seed is None:
            raise ValueError("the random set needs a seed")
        return random_shapes(seed)
    raise ValueError(f"unknown shape set {name!r}; choose one of {', '.join(SETS)}")


def parse_shape(text: str) -> tuple[int, int, str]:
    """(M, N, "") from "MxN" (e.g. "4096x5376"); ValueError otherwise."""
    parts = text.lower().replace("*", "x").split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"a shape is MxN with two positive integers, e.g. 4096x5376; got {text!r}")
    m, n = (int(p) for p in parts)
    if m < 1 or n < 1:
        raise ValueError(f"a shape MxN needs M >= 1 and N >= 1, got {text!r}")
    return m, n, ""


def op_bytes(op: str, m: int, n: int, dtype: str, has_weight: bool = True, w_dtype: str | None = None) -> int:
    """Fewest bytes an op must move: each input read once, each output written once.

    es = element size of x (and y, dy, dx); ws = element size of the weight (0 without one).
      fwd       = M*N*es (x) + N*ws (w) + M*N*es (y) + 4*M (rstd, fp32)
      fwd_infer = M*N*es (x) + N*ws (w) + M*N*es (y)
      bwd       = 2*M*N*es (x, dy) + N*ws (w) + 4*M (rstd) + M*N*es (dx) + N*ws (dw)
      fwd_bwd   = fwd + bwd
    """
    es = ELEMENT_SIZE[dtype]
    ws = ELEMENT_SIZE[w_dtype or dtype] if has_weight else 0
    fwd_infer = 2 * m * n * es + n * ws
    fwd = fwd_infer + 4 * m
    bwd = 3 * m * n * es + 2 * n * ws + 4 * m
    return {"fwd": fwd, "fwd_infer": fwd_infer, "bwd": bwd, "fwd_bwd": fwd + bwd}[op]


def copy_bytes(m: int, n: int, dtype: str) -> int:
    """Bytes of the copy ceiling's kernel: read x once, write a tensor of x's size once."""
    return 2 * m * n * ELEMENT_SIZE[dtype]


# Relative (norm-wise) error a provider may have against float64 before it is marked wrong
# and not timed: a few 16-bit roundings (2^-8 per rounding for bf16), or fp32 arithmetic.
CHECK_RTOL = {"bfloat16": 2e-2, "float16": 4e-3, "float32": 1e-4}
