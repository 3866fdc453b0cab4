"""Build OME-NGFF attribute blocks (0.4 and 0.5) for writing. Pure Python."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .model import Axis, Channel

DEFAULT_AXIS_TYPES = {"t": "time", "c": "channel", "z": "space", "y": "space", "x": "space"}


def make_axes(names: Sequence[str], units: Sequence[str | None] | None = None) -> list[Axis]:
    units = list(units) if units is not None else [None] * len(names)
    if len(units) != len(names):
        raise ValueError(f"{len(units)} units for {len(names)} axes")
    axes = []
    for n, u in zip(names, units, strict=True):
        kind = DEFAULT_AXIS_TYPES.get(n)
        if u is None and kind == "space":
            u = "micrometer"
        axes.append(Axis(n, kind, u if kind in ("space", "time") else None))
    return axes


def multiscales_block(
    *,
    version: str,
    axes: Sequence[Axis],
    paths: Sequence[str],
    scales: Sequence[Sequence[float]],
    translations: Sequence[Sequence[float]],
    name: str | None = None,
    method: str | None = None,
) -> dict[str, Any]:
    datasets = []
    for path, scale, translation in zip(paths, scales, translations, strict=True):
        transforms: list[dict[str, Any]] = [{"type": "scale", "scale": [float(s) for s in scale]}]
        if any(t != 0 for t in translation):
            transforms.append(
                {"type": "translation", "translation": [float(t) for t in translation]}
            )
        datasets.append({"path": path, "coordinateTransformations": transforms})
    ms: dict[str, Any] = {
        "axes": [
            {
                k: v
                for k, v in (("name", a.name), ("type", a.type), ("unit", a.unit))
                if v is not None
            }
            for a in axes
        ],
        "datasets": datasets,
    }
    if name:
        ms["name"] = name
    if method:
        ms["type"] = method
        ms["metadata"] = {"method": f"linumpy_gpu.pyramid.{method}"}
    if version == "0.4":
        ms["version"] = "0.4"
    return ms


def omero_block(channels: Sequence[Channel]) -> dict[str, Any]:
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
    """Group attributes for ``version``: 0.5 nests under ``ome`` with one ``version``."""
    if version == "0.5":
        return {"ome": {"version": "0.5", **block}}
    return dict(block)
