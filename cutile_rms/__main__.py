"""Demo: ``python -m cutile_rms`` normalizes a Llama-sized bf16 activation with ``RMSNorm``,
forward and backward, and prints its error against float64 and torch's own RMSNorm. Without a
GPU (or with ``CUTILE_RMS_INTERPRET=1``) it runs the same kernels through the cuTile
interpreter on the CPU, on a small shape. Exit status 0 when every error is within the bf16
bound below. (The benchmark is ``python -m bench``.)"""

import sys

# Relative (norm-wise) error of a bf16 result against float64 that the demo accepts: a few bf16
# roundings of the output (unit roundoff 2^-8 = 3.9e-3 each).
BF16_RTOL = 2e-2


def main() -> int:
    import torch

    import cutile_rms
    from cutile_rms import interpret

    if torch.cuda.is_available() and not interpret.is_enabled():
        device, m, n = "cuda", 8192, 4096
        where = torch.cuda.get_device_name()
    else:
        interpret.enable()
        device, m, n = "cpu", 64, 1024
        where = "the CPU"
        print("cutile_rms demo: no CUDA GPU (or CUTILE_RMS_INTERPRET=1): running the kernels through the cuTile "
              "interpreter on the CPU, on a small shape.")  # fmt: skip
    torch.manual_seed(0)
    x = torch.randn(m, n, device=device, dtype=torch.bfloat16, requires_grad=True)
    norm = cutile_rms.RMSNorm(n, eps=1e-6, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.1)
    y = norm(x)
    dy = torch.randn_like(y)
    y.backward(dy)

    xd = x.detach().double().requires_grad_()
    wd = norm.weight.detach().double().requires_grad_()
    yd = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd
    yd.backward(dy.double())

    def rel(a, b):
        return ((a.double() - b).norm() / b.norm()).item()

    errs = {"y": rel(y, yd), "dx": rel(x.grad, xd.grad), "dw": rel(norm.weight.grad, wd.grad)}
    y_torch = torch.nn.functional.rms_norm(x.detach(), (n,), norm.weight.detach(), 1e-6)
    print(f"cutile_rms {cutile_rms.__version__} on {where}: RMSNorm of ({m}, {n}) bf16, forward and backward")
    print("  relative error vs float64:  " + "  ".join(f"{k} {v:.2e}" for k, v in errs.items()))
    print(f"  torch.nn.functional.rms_norm (bf16) vs float64: y {rel(y_torch, yd):.2e}")
    bad = [k for k, v in errs.items() if not v <= BF16_RTOL]
    if bad:
        print(f"  FAILED: {', '.join(bad)} above {BF16_RTOL:g}")
        return 1
    print(f"  ok (each within {BF16_RTOL:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
