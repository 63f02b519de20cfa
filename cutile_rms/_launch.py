"""The package's one launch path, and the ``experimental_kernel`` marker.

Every kernel launch in cutile_rms goes through :func:`launch`. It adds two things to
``ct.launch``: the first launch of a kernel marked ``@experimental_kernel`` emits an
:class:`ExperimentalKernelWarning` (once per kernel per process), and in interpret mode
(:mod:`cutile_rms.interpret`) the kernel runs on the CPU instead. ``ct.launch`` itself is
left alone.
"""

import threading
import warnings

import cuda.tile as ct

from cutile_rms import interpret
from cutile_rms._tile import python_function, register_variant

__all__ = ["ExperimentalKernelWarning", "experimental_kernel", "is_experimental", "launch", "with_hints"]

_MARK = "_cutile_rms_experimental"
_warned: set[str] = set()  # bounded: one name per experimental kernel defined in the package
_warned_lock = threading.Lock()


class ExperimentalKernelWarning(UserWarning):
    """Issued once, on the first launch of a kernel that has not been promoted out of experimental/."""


def experimental_kernel(kernel):
    """Mark a ``@ct.kernel`` as experimental. Use it above ``@ct.kernel``::

        @experimental_kernel
        @ct.kernel
        def my_new_kernel(...): ...

    The kernel runs as usual; its first launch through :func:`launch` warns once.
    """
    if not isinstance(kernel, ct.kernel):
        raise TypeError(f"experimental_kernel expects a @ct.kernel object, got {type(kernel).__name__}")
    setattr(kernel, _MARK, _kernel_name(kernel))
    return kernel


def is_experimental(kernel) -> bool:
    return getattr(kernel, _MARK, None) is not None


def with_hints(kernel, **hints):
    """``kernel.replace_hints(**hints)``, keeping the experimental mark. Call at import time
    only: each call makes a new kernel object with its own JIT cache."""
    new = kernel.replace_hints(**hints)
    register_variant(new, kernel)
    name = getattr(kernel, _MARK, None)
    if name is not None:
        setattr(new, _MARK, name)
    return new


def _kernel_name(kernel) -> str:
    fn = python_function(kernel)
    if fn is None:
        raise TypeError("experimental_kernel marks kernels defined with cutile_rms._tile.tile_kernel")
    return f"{fn.__module__}.{fn.__qualname__}"


def warn_if_experimental(kernel) -> None:
    name = getattr(kernel, _MARK, None)
    if name is None or name in _warned:
        return
    with _warned_lock:
        if name in _warned:
            return
        _warned.add(name)
    warnings.warn(
        f"cutile_rms: kernel {name} is experimental (it lives in experimental/ and has not met the "
        "promotion bar in CONTRIBUTING.md); check its results for your shapes.",
        ExperimentalKernelWarning,
        stacklevel=3,
    )


def launch(stream, grid, kernel, args) -> None:
    """Launch ``kernel`` over ``grid`` on ``stream`` (any stream ``ct.launch`` accepts), or run
    it through the interpreter when interpret mode is on (the stream is then ignored)."""
    warn_if_experimental(kernel)
    if interpret.is_enabled():
        interpret.launch(grid, kernel, args)
    else:
        ct.launch(stream, grid, kernel, args)
