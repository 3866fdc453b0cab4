"""A napari reader for OME-Zarr images (the ``linumpy-gpu`` plugin, see ``napari.yaml``).

napari calls :func:`napari_get_reader` with a path; for an OME-Zarr image (or a
bioformats2raw collection of images, or a label image) it returns a reader that gives one
multiscale image layer per image, lazy (a dask array per pyramid level, read through
linumpy_gpu on the CPU), placed by the level-0 scale and translation, split into channels
with their ``omero`` colours, windows and visibility, and one labels layer per label image.
Plates, wells and anything that is not OME-Zarr are left to other readers (None).

napari itself is not imported here: layer data tuples are plain ``(data, metadata,
layer_type)``.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from linumpy_gpu.errors import LinumpyGpuError
from linumpy_gpu.image import Labels, MultiscaleImage, SeriesCollection, open_ome_zarr
from linumpy_gpu.image.repr import channel_axis

LayerData = tuple[Any, dict[str, Any], str]
"""napari's layer data tuple: (data, keyword arguments of the layer, layer type)."""
ReaderFunction = Callable[[Any], list[LayerData]]


def napari_get_reader(path: str | Sequence[str]) -> ReaderFunction | None:
    """The reader for ``path`` when it is an OME-Zarr image, label image or bioformats2raw
    collection that linumpy_gpu opens; None otherwise (plates, wells, other files: not
    ours). Opening reads metadata only."""
    if not isinstance(path, str | os.PathLike):
        if len(path) != 1:
            return None
        path = path[0]
    opened = _open(path)
    if opened is None:
        return None
    return _reader(opened)


def _open(path: Any) -> MultiscaleImage | SeriesCollection | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opened = open_ome_zarr(path)
    except (LinumpyGpuError, OSError, ValueError):
        return None
    if isinstance(opened, MultiscaleImage | SeriesCollection):
        return opened
    return None


def _reader(opened: MultiscaleImage | SeriesCollection) -> ReaderFunction:
    def read(path: Any) -> list[LayerData]:
        """The layers of the store napari asked for (metadata already read)."""
        return layer_data(opened)

    return read


def layer_data(opened: MultiscaleImage | SeriesCollection) -> list[LayerData]:
    """napari layer data tuples for an image (its image layer, then a labels layer per
    label image), a label image (one labels layer) or a bioformats2raw collection (the
    layers of each of its images). A series or label image that does not open is left
    out with a warning: it does not hide the others."""
    if isinstance(opened, SeriesCollection):
        layers: list[LayerData] = []
        for i in range(len(opened)):
            series = _opened(functools.partial(opened.__getitem__, i), f"series {i}")
            if series is not None:
                layers += layer_data(series)
        return layers
    if opened.image_label is not None:
        return [labels_layer(opened, opened.name or os.path.basename(opened.path))]
    layers = [image_layer(opened)]
    labels: Labels = opened.labels
    for name in labels.names:
        label = _opened(functools.partial(labels.__getitem__, name), f"label image {name!r}")
        if label is not None:
            layers.append(labels_layer(label, name))
    return layers


def _opened(open_one: Callable[[], MultiscaleImage], what: str) -> MultiscaleImage | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return open_one()
    except LinumpyGpuError as exc:
        warnings.warn(f"{what} not shown: {exc}", stacklevel=3)
        return None


def image_layer(image: MultiscaleImage) -> LayerData:
    """One multiscale image layer: the levels as dask arrays, level-0 scale and translation
    (without the channel axis, which napari splits on), channel names, colours, contrast
    limits and visibility from ``omero``."""
    data = [lv.to_dask() for lv in image.levels]
    ic = channel_axis(image)
    keep = [i for i in range(len(image.axes)) if i != ic]
    name = image.name or os.path.basename(image.path.rstrip("/")) or image.path
    meta: dict[str, Any] = {
        "multiscale": True,
        "scale": [image.scale(0)[i] for i in keep],
        "translate": [image.translation(0)[i] for i in keep],
        "name": name,
        "axis_labels": [image.axis_names[i] for i in keep],
    }
    units = [image.axes[i].unit for i in keep]
    if all(units):
        meta["units"] = units
    channels = list(image.channels)
    if ic is not None:
        n = image.levels[0].shape[ic]
        meta["channel_axis"] = ic
        meta["blending"] = "additive"
        if len(channels) == n:
            meta["name"] = [c.label or f"{name} [{i}]" for i, c in enumerate(channels)]
            meta["colormap"] = [_colormap(c.color) for c in channels]
            windows = [_window(c.window) for c in channels]
            if any(w is not None for w in windows):
                meta["contrast_limits"] = windows  # None: napari picks that channel's own
            meta["visible"] = [c.active is not False for c in channels]
        else:
            meta["name"] = [f"{name} [{i}]" for i in range(n)]
    elif len(channels) == 1:
        meta["colormap"] = _colormap(channels[0].color)
        window = _window(channels[0].window)
        if window is not None:
            meta["contrast_limits"] = window
    return data, meta, "image"


def labels_layer(label: MultiscaleImage, name: str) -> LayerData:
    """One multiscale labels layer for a label image: its levels as dask arrays, placed by
    its level-0 scale and translation, with the colours (``colormap``: label value ->
    RGBA) and the properties (``features``, a row per label value in ``index``) that its
    ``image-label`` metadata gives."""
    data = [lv.to_dask() for lv in label.levels]
    meta: dict[str, Any] = {
        "multiscale": True,
        "scale": list(label.scale(0)),
        "translate": list(label.translation(0)),
        "name": name,
        "axis_labels": list(label.axis_names),
    }
    image_label = label.image_label
    if image_label is not None and image_label.colors:
        colors: dict[int | float | None, Any] = {None: _UNLISTED, 0: _BACKGROUND}
        for c in image_label.colors:
            if c.rgba is not None:
                colors[c.label_value] = [v / 255 for v in c.rgba]
        meta["colormap"] = colors
    if image_label is not None and image_label.properties:
        rows = [p for p in image_label.properties if "label-value" in p]
        columns = sorted({k for p in rows for k in p} - {"label-value"})
        features: dict[str, list[Any]] = {"index": [p["label-value"] for p in rows]}
        features.update({k: [p.get(k) for p in rows] for k in columns})
        meta["features"] = features
    return data, meta, "labels"


# Labels the metadata gives no colour: gray; the background (0), unless listed: none.
_UNLISTED = [0.5, 0.5, 0.5, 1.0]
_BACKGROUND = [0.0, 0.0, 0.0, 0.0]


def _colormap(color: str | None) -> Any:
    """A napari colormap for an ``omero`` colour: a (name, [black, colour]) ramp, or gray."""
    if not color or len(color) != 6:
        return "gray"
    try:
        rgb = [int(color[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    except ValueError:
        return "gray"
    return (f"#{color.upper()}", [[0.0, 0.0, 0.0, 1.0], [*rgb, 1.0]])


def _window(window: dict[str, float] | None) -> list[float] | None:
    if not isinstance(window, dict) or "start" not in window or "end" not in window:
        return None
    lo, hi = float(window["start"]), float(window["end"])
    return [lo, hi] if hi > lo else None


__all__ = ["image_layer", "labels_layer", "layer_data", "napari_get_reader"]
