"""Tuning tables: the checked-in ones (one per GPU architecture) and the per-device cache.

Both are JSON files of the same format, written by :mod:`cutile_rms.tune`::

    {"format": 1, "device": "NVIDIA H200", "arch": "sm_90", "cuda_tile": "1.7.0", "tileiras": "13.4.92",
     "made_by": "python -m cutile_rms.tune --table ...",
     "entries": [{"op": "forward", "elem_size": 2, "bucket": 4096, "kernel": "tile",
                  "tile_m": 1, "tile_n": 4096, "blocks_per_sm": 4, "warps": null,
                  "tma_store": false, "latency": null, "us": 66.2, "m": 16384}, ...]}

- ``cutile_rms/rmsnorm/tuned/<arch>.json`` ships with the package (sm_90: measured on an H200).
- ``<cache dir>/<arch>-<device name>-cutile<version>-tileiras<version>.json`` holds what
  ``cutile_rms.tune`` found on this machine's GPU; its entries take precedence. The cache dir is
  ``$CUTILE_RMS_CACHE_DIR``, else ``$XDG_CACHE_HOME/cutile_rms``, else ``~/.cache/cutile_rms``
  (read once, at import). A new cuda-tile or tileiras version starts a new cache file: tuned
  configs are compiler-specific (the project's reference notes, shared/reference/cutile-facts.md,
  record tileiras 13.5 running this sm_90 table's forward slower than 13.4, which it was tuned
  with; not a measurement committed here).

A device key is ``"<arch>:<device name>"`` (``DeviceInfo.key``). Lookups happen only when a plan
is not cached yet (config.py caches plans), never per launch.
"""

import functools
import importlib.metadata
import json
import os
import re
import threading
import warnings
from pathlib import Path

__all__ = ["CACHE_DIR", "TABLE_DIR", "cache_path", "checked_in", "checked_in_configs", "lookup", "record"]

FORMAT = 1
TABLE_DIR = Path(__file__).with_name("tuned")
CACHE_DIR = Path(
    os.environ.get("CUTILE_RMS_CACHE_DIR")
    or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cutile_rms")
)
# "bucket" is a power of two (the row bucket): an entry for an exact row length is rejected, so
# that a held-out length is planned as the tuned ones are (config.fit_to_row adapts buckets).
# Required entry fields; optional ones: "warps" (null: the compiler's choice), "tma_store" (default
# true; false for a split entry, which must not be true: kernels/split.py), "latency" (null: no
# hint), "tail" (default 0; config.py, Tails) and "schedule" (default "stride"; config.SCHEDULES).
# Tables written before the optional ones existed stay valid.
_FIELDS = ("kernel", "tile_m", "tile_n", "blocks_per_sm")

# device key -> {(op, elem_size, bucket): (kernel, tile_m, tile_n, blocks_per_sm)}. One entry per
# GPU model seen by the process (a handful at most); _MAX_DEVICES bounds it regardless.
_device_tables: dict[str, dict] = {}
_checked_in: dict[str, dict] = {}
_MAX_DEVICES = 16
_lock = threading.Lock()


def _cuda_tile_version() -> str:
    from cuda.tile import __version__

    return __version__


@functools.cache  # one value per process: the installed compiler
def tileiras_version() -> str:
    """The installed tileiras compiler's version (its wheel's), or "unknown"."""
    try:
        return importlib.metadata.version("nvidia-cuda-tileiras")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def arch_of(device_key: str) -> str:
    return device_key.split(":", 1)[0]


def cache_path(device_key: str) -> Path:
    """The tuning cache file of a device (it may not exist yet)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", device_key.replace(":", "-"))
    return CACHE_DIR / f"{safe}-cutile{_cuda_tile_version()}-tileiras{tileiras_version()}.json"


def parse(doc: dict, source: str) -> dict:
    """{(op, elem_size, bucket): config tuple} from a table document; ValueError if malformed."""
    if doc.get("format") != FORMAT:
        raise ValueError(f"{source}: unknown tuning table format {doc.get('format')!r}")
    out = {}
    for e in doc["entries"]:
        kernel, blocks = str(e["kernel"]), int(e["blocks_per_sm"])
        warps, latency, tma_store = e.get("warps"), e.get("latency"), e.get("tma_store", kernel != "split")
        schedule = e.get("schedule", "stride")
        if schedule == "claim":  # removed in session 12 (config.SCHEDULES): such entries stride
            schedule = "stride"
        if not isinstance(tma_store, bool) or (kernel == "split" and tma_store):
            raise ValueError(f"{source}: tma_store must be true or false (false for split), got {tma_store!r}")
        if not isinstance(schedule, str) or (schedule != "stride" and not e["op"].startswith("forward")):
            raise ValueError(f"{source}: schedule must be a string, and stride for a backward, got {schedule!r}")
        if int(e["bucket"]) < 1 or int(e["bucket"]) & (int(e["bucket"]) - 1):
            raise ValueError(f"{source}: bucket must be a power of two (no exact row lengths), got {e['bucket']!r}")
        if kernel == "row":  # removed in session 12 (config.KERNELS): its tile fallback
            if not e["op"].startswith("forward"):
                raise ValueError(f"{source}: the row kernel is a forward, not a {e['op']!r} entry")
            kernel, blocks, tma_store, latency = "tile", 4, False, None
        out[(e["op"], int(e["elem_size"]), int(e["bucket"]))] = (
            kernel, int(e["tile_m"]), int(e["tile_n"]), blocks,
            None if warps is None else int(warps), tma_store, None if latency is None else int(latency),
            int(e.get("tail", 0)), schedule,
        )  # fmt: skip
    return out


def _read(path: Path) -> dict:
    try:
        with open(path) as f:
            return parse(json.load(f), str(path))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as e:  # a damaged cache must not break a forward pass
        warnings.warn(f"cutile_rms: ignoring unreadable tuning table {path}: {e}", stacklevel=3)
        return {}


def checked_in(arch: str) -> dict:
    """The shipped table of an architecture ({} if there is none)."""
    table = _checked_in.get(arch)
    if table is None:
        path = TABLE_DIR / f"{arch}.json"
        table = _read(path) if re.fullmatch(r"sm_\d+", arch) else {}
        if table:
            _warn_if_other_compiler(path)
        _checked_in[arch] = table
    return table


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _warn_if_other_compiler(path: Path) -> None:
    """Warns once per table when the installed tileiras is not the major.minor release the
    table was tuned with (its plans may then be slower: tables.py docstring)."""
    try:
        tuned_with = json.loads(path.read_text()).get("tileiras")
    except (OSError, ValueError):
        return
    installed = tileiras_version()
    if tuned_with and installed != "unknown" and _minor(tuned_with) != _minor(installed):
        warnings.warn(
            f"cutile_rms: {path.name} was tuned with tileiras {tuned_with}, but {installed} is installed; "
            "its plans may be slower with this compiler (python -m cutile_rms.tune re-tunes for it)",
            stacklevel=3,
        )


def checked_in_configs(arch: str | None = None):
    """(op, element size, config tuple) for every entry of the shipped table of arch, or of
    every shipped table (arch None)."""
    archs = [arch] if arch else sorted(path.stem for path in TABLE_DIR.glob("sm_*.json"))
    for a in archs:
        for (op, elem_size, _), cfg in checked_in(a).items():
            yield op, elem_size, cfg


def _device_table(device_key: str) -> dict:
    table = _device_tables.get(device_key)
    if table is None:
        with _lock:
            table = _device_tables.get(device_key)
            if table is None:
                if len(_device_tables) >= _MAX_DEVICES:
                    _device_tables.clear()
                table = _device_tables[device_key] = _read(cache_path(device_key))
    return table


def lookup(op: str, elem_size: int, bucket: int, device_key: str | None):
    """Config tuple for (op, elem_size, bucket) on a device: its tuning cache first, then its
    architecture's shipped table; None if neither has one (or device_key is None)."""
    if device_key is None:
        return None
    key = (op, elem_size, bucket)
    return _device_table(device_key).get(key) or checked_in(arch_of(device_key)).get(key)


def document(entries: list[dict], device_name: str, arch: str, made_by: str) -> dict:
    for e in entries:
        missing = {"op", "elem_size", "bucket", *_FIELDS} - set(e)
        if missing:
            raise ValueError(f"tuning entry {e} lacks {sorted(missing)}")
    return {
        "format": FORMAT,
        "device": device_name,
        "arch": arch,
        "cuda_tile": _cuda_tile_version(),
        "tileiras": tileiras_version(),
        "made_by": made_by,
        "entries": sorted(entries, key=lambda e: (e["op"], e["elem_size"], e["bucket"])),
    }


def write(path: Path, doc: dict) -> None:
    """Write a table atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def record(device_key: str, device_name: str, entries: list[dict], made_by: str) -> Path:
    """Merge entries into a device's tuning cache, on disk and in memory; returns the file."""
    path = cache_path(device_key)
    with _lock:
        old = []
        try:
            with open(path) as f:
                old = json.load(f).get("entries", [])
        except (OSError, ValueError):
            pass
        merged = {(e["op"], e["elem_size"], e["bucket"]): e for e in (*old, *entries)}
        doc = document(list(merged.values()), device_name, arch_of(device_key), made_by)
        write(path, doc)
        _device_tables[device_key] = parse(doc, str(path))
    return path
