"""Build OME-NGFF attribute blocks (0.4, 0.5 and 0.6) for writing. Pure Python.

What these build is read back by this package's parsers (the writers check that before
touching a store) and by other readers: ome-zarr-models validates the 0.4 and 0.5 blocks,
ngff-zarr reads the 0.6 ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from linumpy_gpu.errors import InvalidArgumentError
from linumpy_gpu.ngff.model import Axis, Channel

DEFAULT_AXIS_TYPES = {"t": "time", "c": "channel", "z": "space", "y": "space", "x": "space"}
WRITABLE_VERSIONS = ("0.4", "0.5", "0.6")
# The name of the coordinate system that 0.6 levels map into, as the spec's examples call it.
DEFAULT_COORDINATE_SYSTEM = "physical"


def make_axes(names: Sequence[str], units: Sequence[str | None] | None = None) -> list[Axis]:
    """Axes for ``names`` ('t', 'c', 'z', 'y', 'x' get their NGFF types) with ``units`` per
    axis where given (none is invented: a store that states no unit says so); channel and
    custom axes carry no unit."""
    units = list(units) if units is not None else [None] * len(names)
    if len(units) != len(names):
        raise InvalidArgumentError(f"{len(units)} units for {len(names)} axes")
    axes = []
    for n, u in zip(names, units, strict=True):
        kind = DEFAULT_AXIS_TYPES.get(n)
        axes.append(Axis(n, kind, u if kind in ("space", "time") else None))
    return axes


def axes_block(axes: Sequence[Axis]) -> list[dict[str, Any]]:
    """The JSON of ``axes``: name, then type and unit when set."""
    return [
        {k: v for k, v in (("name", a.name), ("type", a.type), ("unit", a.unit)) if v is not None}
        for a in axes
    ]


def multiscales_block(
    *,
    version: str,
    axes: Sequence[Axis],
    paths: Sequence[str],
    scales: Sequence[Sequence[float]],
    translations: Sequence[Sequence[float]],
    name: str | None = None,
    method: str | None = None,
    coordinate_system: str = DEFAULT_COORDINATE_SYSTEM,
) -> dict[str, Any]:
    """One ``multiscales`` entry: a level per path with its scale and translation (left out
    when all zeros).

    0.4 and 0.5: ``axes`` and, per level, a ``scale`` then a ``translation``. 0.6: one
    coordinate system named ``coordinate_system`` holding the axes and, per level, one
    transformation from the level's array into it: a ``scale``, or a ``sequence`` of the
    scale then the translation.
    """
    if version not in WRITABLE_VERSIONS:
        raise InvalidArgumentError(
            f"cannot build NGFF {version!r} metadata; use one of {WRITABLE_VERSIONS}"
        )
    datasets = []
    for path, scale, translation in zip(paths, scales, translations, strict=True):
        scale_t: dict[str, Any] = {"type": "scale", "scale": [float(s) for s in scale]}
        translation_t: dict[str, Any] | None = None
        if any(t != 0 for t in translation):
            translation_t = {"type": "translation", "translation": [float(t) for t in translation]}
        if version == "0.6":
            ends = {"input": {"path": path}, "output": {"name": coordinate_system}}
            if translation_t is None:
                transform = {**scale_t, **ends}
            else:
                transform = {
                    "type": "sequence",
                    **ends,
                    "transformations": [scale_t, translation_t],
                }
            transforms = [transform]
        else:
            transforms = [scale_t] if translation_t is None else [scale_t, translation_t]
        datasets.append({"path": path, "coordinateTransformations": transforms})
    ms: dict[str, Any] = {}
    if version == "0.6":
        ms["coordinateSystems"] = [{"name": coordinate_system, "axes": axes_block(axes)}]
    else:
        ms["axes"] = axes_block(axes)
    ms["datasets"] = datasets
    if name:
        ms["name"] = name
    if method:
        ms["type"] = method
        ms["metadata"] = {"method": f"linumpy_gpu.pyramid.{method}"}
    if version == "0.4":
        ms["version"] = "0.4"
    return ms


def omero_block(channels: Sequence[Channel]) -> dict[str, Any]:
    """The transitional ``omero`` block for ``channels`` (fields left out when None)."""
    out = []
    for ch in channels:
        entry: dict[str, Any] = {}
        if ch.label is not None:
            entry["label"] = ch.label
        if ch.color is not None:
            entry["color"] = ch.color
        if ch.window is not None:
            entry["window"] = dict(ch.window)
        if ch.active is not None:
            entry["active"] = ch.active
        out.append(entry)
    return {"channels": out}


def wrap(version: str, block: dict[str, Any]) -> dict[str, Any]:
    """Group attributes for ``version``: from 0.5 on, nested under ``ome`` with one
    ``version``; 0.4 blocks are the attributes themselves."""
    if version in ("0.5", "0.6"):
        return {"ome": {"version": version, **block}}
    return dict(block)
