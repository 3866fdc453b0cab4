"""linumpy_gpu's settings: one object, read from the environment once, changed per block.

Every setting has a default, a ``LINUMPY_GPU_*`` environment variable that replaces the
default for the whole process (read the first time settings are needed, never again), and
can be changed for a ``with`` block or a single call::

    import linumpy_gpu as lg

    with lg.config.set(io_threads=8, progress=True):
        img = lg.open_ome_zarr("brain.ome.zarr", device="gpu")   # captures these settings

    img = lg.open_ome_zarr("brain.ome.zarr", settings={"pinned_bytes": 2 << 30})

Objects capture the settings current when they are made (an image its reader, a backend its
memory bounds), so a setting changed later applies to what is opened later.
``linumpy-gpu info`` shows the settings in effect and where each came from.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from linumpy_gpu.errors import ConfigError, ConfigWarning, warn

ENV_PREFIX = "LINUMPY_GPU_"


@dataclass(frozen=True)
class Settings:
    """The settings of linumpy_gpu (see the module docs for how to change them)."""

    progress: bool = False
    """Show progress bars on long reads and writes (tqdm; quiet when not on a terminal)."""
    io_threads: int | None = None
    """Threads reading stored bytes from local files (None: chosen per read from the read
    size and the storage's measured speed)."""
    read_ahead_bytes: int = 512 << 20
    """On storage slower than the page cache, how many stored bytes beyond the batch being
    read the operating system is asked to read ahead (0: none)."""
    pinned_bytes: int = 1 << 30
    """Pinned host memory the GPU path stages compressed bytes in, for the whole process."""
    host_threads: int | None = None
    """Host threads that decode small GPU reads faster than one nvCOMP batch would (None:
    one per core; 0: nvCOMP only)."""
    memory: str = "auto"
    """How much device memory a GPU read may hold besides its output: ``"auto"`` takes up
    to half of what is free once the output is allocated (within ``memory_cap``), for
    large nvCOMP batches; ``"tight"`` keeps to ``scratch_fraction`` of the output (at
    least ``scratch_floor``), for a GPU shared with other work. Both refuse a read only
    when the tight bound does not fit, and an ``"auto"`` read that runs out of memory
    midway (other work took it) is done again under the tight bound."""
    memory_cap: int | None = None
    """With ``memory="auto"``, the most device memory a read may hold besides its output,
    in bytes (None: no cap but half of what is free)."""
    scratch_fraction: float = 0.25
    """With ``memory="tight"``, device memory a full-level GPU read may hold besides its
    output, as a fraction of the output."""
    scratch_floor: int = 1 << 30
    """The least device memory a GPU read may hold besides its output, in bytes."""
    region_scratch: int | None = None
    """With ``memory="tight"``, the most device memory a GPU read of part of a level may
    hold besides its output (None: 1/16 of the device's memory, at most 8 GiB), within half
    of what is free."""
    nvcomp_library: str | None = None
    """Path of libnvcomp.so to load (None: the nvidia-libnvcomp wheel, then the system)."""

    def __post_init__(self) -> None:
        # settings made directly (Settings(io_threads=0)) are checked as changes are
        for f in fields(self):
            object.__setattr__(self, f.name, _check(f.name, getattr(self, f.name)))

    def replace(self, **changes: Any) -> Settings:
        """These settings with ``changes`` applied (each checked)."""
        unknown = changes.keys() - {f.name for f in fields(self)}
        if unknown:
            raise ConfigError(f"unknown setting(s) {sorted(unknown)}; known: {names()}")
        checked = {k: _check(k, v) for k, v in changes.items()}
        return dataclasses.replace(self, **checked)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The defaults with every ``LINUMPY_GPU_<NAME>`` variable of ``environ`` applied."""
        environ = os.environ if environ is None else environ
        known = {ENV_PREFIX + name.upper() for name in names()}
        unknown = sorted(v for v in environ if v.startswith(ENV_PREFIX) and v not in known)
        if unknown:
            warn(
                f"{', '.join(unknown)} {'names' if len(unknown) == 1 else 'name'} no setting "
                f"and {'is' if len(unknown) == 1 else 'are'} ignored; the settings' variables "
                f"are {', '.join(sorted(known))}",
                ConfigWarning,
            )
        changes = {}
        for f in fields(cls):
            variable = ENV_PREFIX + f.name.upper()
            raw = environ.get(variable, "").strip()
            if raw:
                try:
                    changes[f.name] = _check(f.name, _parse(f.name, raw))
                except ConfigError as exc:
                    message = str(exc)
                    if not message.startswith(variable):
                        message = f"{variable}={raw!r}: {message}"
                    raise ConfigError(message) from None
        return cls().replace(**changes)


# name -> (kind, minimum): how a value is checked and parsed
_SPEC: dict[str, tuple[str, float]] = {
    "progress": ("bool", 0),
    "io_threads": ("int?", 1),
    "read_ahead_bytes": ("int", 0),
    "pinned_bytes": ("int", 1 << 20),
    "host_threads": ("int?", 0),
    "memory": ("choice", 0),
    "memory_cap": ("int?", 0),
    "scratch_fraction": ("float", 0),
    "scratch_floor": ("int", 0),
    "region_scratch": ("int?", 0),
    "nvcomp_library": ("str?", 0),
}
# the values a "choice" setting takes
_CHOICES: dict[str, tuple[str, ...]] = {"memory": ("auto", "tight")}


def names() -> list[str]:
    """The names of every setting."""
    return [f.name for f in fields(Settings)]


def _parse(name: str, raw: str) -> Any:
    kind, _ = _SPEC[name]
    variable = ENV_PREFIX + name.upper()
    try:
        if kind == "bool":
            if raw.lower() not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(raw)
            return raw.lower() in ("1", "true", "yes", "on")
        if kind.startswith("int"):
            try:
                return int(raw, 0)  # 0x... for byte sizes
            except ValueError:
                return int(raw)  # "08" is eight, not a bad octal number
        if kind == "float":
            return float(raw)
        return raw
    except ValueError:
        noun = {"bool": "0 or 1", "int": "an integer", "float": "a number"}.get(
            kind.rstrip("?"), "text"
        )
        raise ConfigError(f"{variable}={raw!r} is not {noun}") from None


_INT_LIMIT = 1 << 63


def _check(name: str, value: Any) -> Any:
    kind, minimum = _SPEC[name]
    optional = kind.endswith("?")
    kind = kind.rstrip("?")
    if value is None and optional:
        return None
    if isinstance(value, np.integer | np.floating | np.bool_):
        value = value.item()  # numpy numbers count as the Python numbers they hold
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "int":
        # (an int past 2**63 would reach the C code of thread pools and allocators)
        ok = number and isinstance(value, int) and value < _INT_LIMIT
    elif kind == "float":
        ok = number and abs(value) < _INT_LIMIT and math.isfinite(value)
    elif kind == "str":
        ok = isinstance(value, str) and bool(value)
    else:
        ok = value in _CHOICES.get(name, ())
    if ok and kind in ("int", "float") and not value >= minimum:  # also refuses nan
        ok = False
    if not ok:
        bound = {"int": f" >= {int(minimum)}", "float": f" >= {minimum:g} and finite"}.get(kind, "")
        nothing = " or None" if optional else ""
        noun = {"bool": "True or False", "int": "an integer", "float": "a number"}.get(kind, "text")
        if kind == "choice":
            noun = " or ".join(repr(c) for c in _CHOICES[name])
        raise ConfigError(f"setting {name} must be {noun}{bound}{nothing}, got {value!r}")
    return float(value) if kind == "float" else value


_base: Settings | None = None
_base_lock = threading.Lock()


def _fresh_lock_after_fork() -> None:
    global _base_lock
    _base_lock = threading.Lock()  # the parent's other threads may have held it


os.register_at_fork(after_in_child=_fresh_lock_after_fork)
_current: contextvars.ContextVar[Settings | None] = contextvars.ContextVar(
    "linumpy_gpu_settings", default=None
)
# the names the enclosing set() blocks gave (a value equal to the default counts too)
_explicit: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "linumpy_gpu_explicit_settings", default=frozenset()
)


# setting name -> the environment variable its base value came from
_base_from: dict[str, str] = {}


def get() -> Settings:
    """The settings in effect here: those of the innermost :func:`set` block, else the
    defaults with the environment applied (read once per process)."""
    current = _current.get()
    if current is not None:
        return current
    global _base
    with _base_lock:
        if _base is None:
            _base = Settings.from_environment()
            for name in names():  # what sources() reports, as read here once
                variable = ENV_PREFIX + name.upper()
                if os.environ.get(variable, "").strip():
                    _base_from[name] = variable
        return _base


@contextlib.contextmanager
def set(settings: Settings | Mapping[str, Any] | None = None, **changes: Any) -> Iterator[Settings]:  # noqa: A001
    """Change settings for the ``with`` block (and the threads it starts through the
    library's own pools only when objects are made inside it): ``set(io_threads=8)``,
    ``set({"progress": True})`` or ``set(Settings(...))``."""
    if isinstance(settings, Settings):
        new = settings.replace(**changes)
        given = frozenset(names())
    elif settings is None or isinstance(settings, Mapping):
        odd = [key for key in settings or {} if not isinstance(key, str)]
        if odd:
            raise ConfigError(f"setting names are text, got {odd!r}; known: {names()}")
        merged = {**dict(settings or {}), **changes}
        new = get().replace(**merged)
        given = frozenset(merged)
    else:
        raise ConfigError(
            "settings must be a Settings object or a mapping of setting names to values, "
            f"got {type(settings).__name__} {settings!r}"
        )
    token = _current.set(new)
    named = _explicit.set(_explicit.get() | given)
    try:
        yield new
    finally:
        _explicit.reset(named)
        _current.reset(token)


def layered(base: Settings) -> Settings:
    """``base`` (the settings an object was opened with), with what the :func:`set`
    blocks around this call changed laid over it: what objects made from others read with."""
    now = get()
    changed = {k: getattr(now, k) for k, src in sources().items() if src == "set"}
    return base.replace(**changed)


def environment_sets(variable: str) -> bool:
    """Whether the environment gives ``variable`` a value: for the variables of libraries
    underneath (kvikio's ``KVIKIO_NTHREADS``), which the user's choice must win over."""
    return bool(os.environ.get(variable, "").strip())


def sources() -> dict[str, str]:
    """Per setting, where its current value comes from: 'default', the environment
    variable's name, or 'set' (a :func:`set` block)."""
    explicit = _explicit.get()
    get()  # the environment, read once per process
    return {
        name: "set" if name in explicit else _base_from.get(name, "default") for name in names()
    }
