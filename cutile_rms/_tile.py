"""``tile_kernel`` and ``tile_function``: ``@ct.kernel`` and ``@ct.function`` that remember the
Python function they compile, so that the CPU interpreter (:mod:`cutile_rms.interpret`) and the
launch path's experimental marker can reach it without cuTile's private attributes. The objects
they return are cuTile's own: the compiler sees no difference. Every kernel and tile helper of
the package (and of its tests' interpreter kernels) is defined through them.
"""

import cuda.tile as ct

__all__ = ["python_function", "register_variant", "tile_function", "tile_kernel"]

# kernel or tile-function object -> its Python function: one entry per definition in the
# package and its tests, plus the hint variants the launchers make (bounded: rmsnorm.launch's
# HintVariants), so the table does not grow with calls.
_PYTHON_FUNCTIONS: dict = {}


def _remembered(make, fn, options):
    """make(fn, **options) (ct.kernel or ct.function), remembered; a decorator of options when fn is None."""
    if fn is None:
        return lambda f: _remembered(make, f, options)
    obj = make(fn, **options)
    _PYTHON_FUNCTIONS[obj] = fn
    return obj


def tile_kernel(fn=None, /, **options):
    """``ct.kernel(fn, **options)``, remembered (use as ``@tile_kernel`` or ``@tile_kernel(...)``)."""
    return _remembered(ct.kernel, fn, options)


def tile_function(fn=None, /, **options):
    """``ct.function(fn, **options)``, remembered (use as ``@tile_function``)."""
    return _remembered(ct.function, fn, options)


def register_variant(variant, of) -> None:
    """Remember that ``variant`` (e.g. ``of.replace_hints(...)``) runs of's Python function."""
    _PYTHON_FUNCTIONS[variant] = python_function(of)


def python_function(obj):
    """The Python function of a kernel or tile function defined through this module, else None."""
    try:
        return _PYTHON_FUNCTIONS.get(obj)
    except TypeError:  # unhashable: not one of ours
        return None
