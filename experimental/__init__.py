"""Experimental kernels: importable as ``cutile_rms.experimental``.

New kernel families start here, each kernel marked ``@experimental_kernel`` (its first launch
warns once), and are tested in the experimental tier (``pytest -m experimental``) until they
meet the promotion bar in CONTRIBUTING.md and move into ``cutile_rms/``. Empty for now.
"""

__all__: list[str] = []
