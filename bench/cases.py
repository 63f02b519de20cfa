"""Benchmark cases, byte counts and the correctness check run before timing."""

from dataclasses import dataclass

TRAINING_ELEMS = 64 * 2**20  # x holds 64 Mi elements: 128 MiB in bf16, twice the H200's 60 MB L2 and more
TRAINING_N = [512, 1024, 2048, 4096, 5120, 7168, 8192, 16384, 32768, 65536]
DECODE_M = [1, 32, 256]
DECODE_N = [4096, 8192]
# Hidden sizes of real model families, at typical token counts per step.
MODEL_HIDDEN = {
    "llama3-8b": 4096,
    "llama3-70b": 8192,
    "qwen2.5-7b": 3584,
    "qwen3-32b": 5120,
    "gemma2-9b": 3584,
    "gemma3-27b": 5376,
    "deepseek-v3": 7168,
}
MODEL_TOKENS = [4096, 16384]

CPU_SHAPES = [(64, 4096), (256, 1024), (8, 20000)]

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


def shape_set(name: str) -> list[tuple[int, int, str]]:
    """(M, N, label) of a named set."""
    if name == "training":
        return [(TRAINING_ELEMS // n, n, "") for n in TRAINING_N]
    if name == "decode":
        return [(m, n, "") for n in DECODE_N for m in DECODE_M]
    if name == "cpu":  # what the interpreter runs in seconds on a machine without a GPU
        return [(m, n, "") for m, n in CPU_SHAPES]
    if name == "models":
        return [(t, h, model) for model, h in MODEL_HIDDEN.items() for t in MODEL_TOKENS]
    raise ValueError(f"unknown shape set {name!r}; choose training, decode or models")


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
