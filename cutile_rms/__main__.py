"""Demo: ``python -m cutile_rms`` normalizes a Llama-sized activation on the GPU, forward and
backward, and prints its error against a float64 computation and against torch's RMSNorm.
(The benchmark is ``python -m bench``.)"""

import sys


def main() -> int:
    import torch

    import cutile_rms

    if not torch.cuda.is_available():
        print("cutile_rms demo: no CUDA GPU found; the kernels need an NVIDIA GPU (sm_90 or newer).")
        return 2
    torch.manual_seed(0)
    m, n = 8192, 4096
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    norm = cutile_rms.RMSNorm(n, eps=1e-6, device="cuda", dtype=torch.bfloat16)
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

    y_torch = torch.nn.functional.rms_norm(x.detach(), (n,), norm.weight.detach(), 1e-6)
    print(f"cutile_rms {cutile_rms.__version__} on {torch.cuda.get_device_name()}: RMSNorm of ({m}, {n}) bf16")
    errs = f"y {rel(y, yd):.2e}  dx {rel(x.grad, xd.grad):.2e}  dw {rel(norm.weight.grad, wd.grad):.2e}"
    print(f"  relative error vs float64:  {errs}")
    print(f"  torch.nn.functional.rms_norm (bf16) vs float64: y {rel(y_torch, yd):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
