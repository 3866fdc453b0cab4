"""HTML summaries of images, levels, labels, plates and wells for Jupyter (``_repr_html_``).

An image's summary lists its levels (shapes, dtypes, chunks, shards, codecs, sizes,
scales, translations), axes, channels with their colours, label images, and shows a
thumbnail: a maximum projection over every axis but y, x (and channels, each coloured by
its ``omero`` colour and window) of a small level, as an inline PNG. Only a level small
enough to read in a blink is read (see :func:`thumbnail_level`); level 0 only when it is
that small itself. Every text that comes from a store's metadata is escaped.

Nothing here raises on a strange store: what cannot be shown is said in the summary.
"""

from __future__ import annotations

import base64
import html
import math
import re
import struct
import warnings
import zlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from linumpy_gpu.image._common import dtype_text, format_bytes

if TYPE_CHECKING:
    from linumpy_gpu.image.collections import Plate, SeriesCollection, Well
    from linumpy_gpu.image.level import Level
    from linumpy_gpu.image.multiscale import Labels, MultiscaleImage

THUMBNAIL_MAX_YX = 512
"""A level is read for a thumbnail only when its y and x are each at most this long..."""
THUMBNAIL_MAX_BYTES = 64 << 20
"""...and the whole level is at most this many bytes."""
THUMBNAIL_MIN_YX = 128
"""The coarsest level that fits is used, unless its longer y/x side is shorter than this:
then the finest level that fits (a legible thumbnail from a small read)."""
DISPLAY_PX = 256
"""The longer side of the thumbnail as shown, in CSS pixels."""

_HEX = re.compile(r"[0-9A-Fa-f]{6}")
_MUTED = 'class="lgpu-muted"'
# One style block per summary, every rule scoped to the summary's own class.
_STYLE = (
    "<style>"
    ".lgpu-repr{font-family:sans-serif;font-size:13px;line-height:1.35}"
    ".lgpu-repr table{border-collapse:collapse;margin:2px 0 6px 0;font-size:12px}"
    ".lgpu-repr th,.lgpu-repr td{padding:1px 8px;text-align:left}"
    ".lgpu-repr th{border-bottom:1px solid #888}"
    ".lgpu-repr td{border-bottom:1px solid #ddd}"
    ".lgpu-repr .lgpu-muted{color:#888}"
    ".lgpu-repr summary{cursor:pointer}"
    ".lgpu-repr .lgpu-swatch{display:inline-block;width:0.9em;height:0.9em;"
    "vertical-align:middle;border:1px solid #888}"
    "</style>"
)


# -- public entry points ----------------------------------------------------------------------


def image_html(image: MultiscaleImage, *, with_thumbnail: bool = True) -> str:
    """The HTML summary of a multiscale image (or label image)."""
    kind = "label image" if image.image_label is not None else "MultiscaleImage"
    title = f"<b>{_e(kind)}</b> " + (f"<code>{_e(image.name)}</code> " if image.name else "")
    header = (
        f"{title}<span {_MUTED}>NGFF {_e(image.version)} &middot; {len(image.levels)} level(s)"
        f" &middot; device {_e(image.device)}</span><br>"
        f"<span {_MUTED}>{_e(image.path)}</span>"
    )
    parts = [
        header,
        _section("levels", _levels_table(image)),
        _section("axes", _axes_table(image)),
    ]
    if image.channels:
        parts.append(_section("channels", _channels_table(image)))
    if image.image_label is not None and image.image_label.colors:
        parts.append(_section("label colours", _color_list(image.image_label.colors)))
    labels = _labels_rows(image)
    if labels:
        parts.append(_section("labels", labels))
    if not image.meta.exact:
        parts.append(
            f"<div {_MUTED}>the levels' transformations are more than a scale and a "
            "translation: scales and translations shown are approximate</div>"
        )
    body = "".join(parts)
    side = _thumbnail_block(image) if with_thumbnail else ""
    return _box(
        f'<div style="display:flex;gap:16px;align-items:flex-start"><div>{body}</div>{side}</div>'
    )


def level_html(level: Level) -> str:
    """The HTML summary of one level."""
    image = level.image
    header = (
        f"<b>Level</b> {level.index} <span {_MUTED}>(path '{_e(level.path)}') of "
        f"{_e(image.name or image.path)} &middot; NGFF {_e(image.version)} &middot; device "
        f"{_e(level.device)}</span>"
    )
    return _box(header + _levels_table(image, only=level.index))


def labels_html(labels: Labels) -> str:
    """The HTML summary of an image's label images (names and colours)."""
    image = labels._image
    header = f"<b>Labels</b> <span {_MUTED}>of {_e(image.name or image.path)}</span>"
    rows = _labels_rows(image)
    return _box(header + (rows or f"<div {_MUTED}>no label images</div>"))


def plate_html(plate: Plate) -> str:
    """The HTML summary of an HCS plate: its rows, columns and which wells are present."""
    header = (
        f"<b>Plate</b> {('<code>' + _e(plate.name) + '</code> ') if plate.name else ''}"
        f"<span {_MUTED}>NGFF {_e(plate.meta.version)} &middot; {len(plate.rows)} rows x "
        f"{len(plate.columns)} columns &middot; {len(plate.wells)} wells</span><br>"
        f"<span {_MUTED}>{_e(plate.path)}</span>"
    )
    present = {(w.row_index, w.column_index) for w in plate.wells}
    if len(plate.rows) * len(plate.columns) > 4096:
        grid = f"<div {_MUTED}>(plate too large to draw)</div>"
    else:
        head = "<tr><th></th>" + "".join(f"<th>{_e(c)}</th>" for c in plate.columns)
        rows = []
        for i, r in enumerate(plate.rows):
            cells = "".join(
                f'<td style="text-align:center;padding:0 3px">'
                f"{'&#9679;' if (i, j) in present else '&middot;'}</td>"
                for j in range(len(plate.columns))
            )
            rows.append(f"<tr><th>{_e(r)}</th>{cells}</tr>")
        grid = f"<table>{head}{''.join(rows)}</table>"
    acq = ""
    if plate.meta.acquisitions:
        acq = _section(
            "acquisitions",
            _table(
                ["id", "name", "max fields"],
                [
                    [
                        a.id,
                        a.name or "",
                        "" if a.maximum_field_count is None else a.maximum_field_count,
                    ]
                    for a in plate.meta.acquisitions
                ],
            ),
        )
    return _box(header + _section("wells", grid) + acq)


def well_html(well: Well) -> str:
    """The HTML summary of a well: its fields of view."""
    header = (
        f"<b>Well</b> <span {_MUTED}>NGFF {_e(well.meta.version)} &middot; {len(well)} "
        f"field(s)</span><br><span {_MUTED}>{_e(well.path)}</span>"
    )
    rows = [
        [i, f.path, "" if f.acquisition is None else f.acquisition]
        for i, f in enumerate(well.fields)
    ]
    return _box(header + _section("fields", _table(["field", "path", "acquisition"], rows)))


def series_html(series: SeriesCollection) -> str:
    """The HTML summary of a bioformats2raw collection: its series' paths."""
    header = (
        f"<b>SeriesCollection</b> <span {_MUTED}>bioformats2raw &middot; {len(series)} "
        f"series</span><br><span {_MUTED}>{_e(series.path)}</span>"
    )
    rows = [[i, p] for i, p in enumerate(series.series_paths[:200])]
    more = len(series.series_paths) - len(rows)
    extra = f"<div {_MUTED}>... and {more} more</div>" if more > 0 else ""
    return _box(header + _section("series", _table(["index", "path"], rows) + extra))


# -- thumbnail ----------------------------------------------------------------------------------


def yx_axes(image: MultiscaleImage) -> tuple[int, int]:
    """The indices of the y and x axes (by name; else the last two axes)."""
    names = list(image.axis_names)
    if "y" in names and "x" in names:
        return names.index("y"), names.index("x")
    return len(names) - 2, len(names) - 1


def channel_axis(image: MultiscaleImage) -> int | None:
    """The index of the channel axis (type 'channel', else named 'c'), or None."""
    for i, a in enumerate(image.axes):
        if a.type == "channel":
            return i
    names = list(image.axis_names)
    return names.index("c") if "c" in names else None


def thumbnail_level(
    image: MultiscaleImage,
    max_yx: int = THUMBNAIL_MAX_YX,
    max_bytes: int = THUMBNAIL_MAX_BYTES,
) -> tuple[int | None, str]:
    """The level to draw a thumbnail from and why: the coarsest level whose y and x are at
    most ``max_yx`` and whose bytes are at most ``max_bytes``, unless its longer y/x side
    is under :data:`THUMBNAIL_MIN_YX` (then the finest level that fits). None, with the
    reason, when no level fits."""
    iy, ix = yx_axes(image)
    fits = [
        lv.index
        for lv in image.levels
        if lv.shape[iy] <= max_yx and lv.shape[ix] <= max_yx and _decoded_bytes(lv) <= max_bytes
    ]
    if not fits:
        coarsest = image.levels[-1]
        return None, (
            f"no thumbnail: the coarsest level ({coarsest.index}, y/x "
            f"{coarsest.shape[iy]}x{coarsest.shape[ix]}, {format_bytes(coarsest.nbytes)}) is "
            f"larger than {max_yx}x{max_yx} or {format_bytes(max_bytes)}"
        )
    legible = [
        i
        for i in fits
        if max(image.levels[i].shape[iy], image.levels[i].shape[ix]) >= THUMBNAIL_MIN_YX
    ]
    chosen = max(legible) if legible else min(fits)
    return chosen, f"maximum projection of level {chosen}"


def _decoded_bytes(level: Any) -> int:
    """Bytes a whole read of ``level`` decodes: its chunks whole, which a writer that keeps
    one chunk shape on every level makes far larger than the level."""
    chunks = level.chunks
    count = math.prod(-(-n // c) for n, c in zip(level.shape, chunks, strict=True))
    return max(level.nbytes, count * math.prod(chunks) * level.dtype.itemsize)


def thumbnail(
    image: MultiscaleImage,
    max_yx: int = THUMBNAIL_MAX_YX,
    max_bytes: int = THUMBNAIL_MAX_BYTES,
) -> tuple[np.ndarray | None, str]:
    """An RGB uint8 thumbnail of ``image`` (y, x, 3) and what it shows; None and the
    reason when there is none. The level of :func:`thumbnail_level` is read (damaged
    chunks read as fill), projected by maximum over every axis but y, x and channels, and
    each channel coloured by its ``omero`` colour and window (grey without)."""
    index, why = thumbnail_level(image, max_yx, max_bytes)
    if index is None:
        return None, why
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = image.levels[index].read(progress=False, on_damaged="fill")
        iy, ix = yx_axes(image)
        ic = channel_axis(image)
        keep = [iy, ix] if ic is None or ic in (iy, ix) else [ic, iy, ix]
        others = tuple(i for i in range(data.ndim) if i not in keep)
        if others:
            data = data.max(axis=others)
        if hasattr(data, "get"):  # cupy
            data = data.get()
        proj = np.asarray(data)
        # the kept axes in their original order; put them as (channels, y, x)
        order = sorted(keep)
        proj = np.moveaxis(proj, [order.index(k) for k in keep], list(range(len(keep))))
        if len(keep) == 2:
            proj = proj[None]
        if image.image_label is not None:
            rgb = _label_rgb(proj[0], image)
        else:
            rgb = composite(proj, image.channels)
    except Exception as exc:  # a thumbnail never breaks a repr
        return None, f"no thumbnail: reading level {index} failed ({type(exc).__name__}: {exc})"
    return rgb, why


def composite(proj: np.ndarray, channels: Sequence[Any] = ()) -> np.ndarray:
    """Channels (c, y, x) blended additively into RGB uint8 (y, x, 3): channel ``i`` scaled
    by its window (``channels[i].window`` start/end, else its 0.5-99.8 percentiles),
    coloured by ``channels[i].color`` (grey without) and left out when ``active`` is
    False (unless no channel is active)."""
    n = proj.shape[0]
    chans = list(channels) if len(channels) == n else [None] * n
    active = [i for i, ch in enumerate(chans) if ch is None or ch.active is not False]
    if not active:
        active = list(range(n))
    out = np.zeros((*proj.shape[1:], 3), dtype=np.float32)
    for i in active:
        plane = np.asarray(proj[i], dtype=np.float64)
        ch = chans[i]
        lo, hi = _window(plane, getattr(ch, "window", None))
        scaled = np.clip((plane - lo) / (hi - lo), 0.0, 1.0)
        scaled = np.nan_to_num(scaled, nan=0.0)
        rgb = getattr(ch, "rgb", None) if ch is not None else None
        color = np.array(rgb if rgb is not None else (255, 255, 255), dtype=np.float32) / 255
        out += scaled[..., None].astype(np.float32) * color
    return (np.clip(out, 0.0, 1.0) * 255 + 0.5).astype(np.uint8)


def _window(plane: np.ndarray, window: Any) -> tuple[float, float]:
    if isinstance(window, dict) and "start" in window and "end" in window:
        lo, hi = float(window["start"]), float(window["end"])
    else:
        finite = plane[np.isfinite(plane)]
        if finite.size == 0:
            return 0.0, 1.0
        lo, hi = (float(v) for v in np.percentile(finite, [0.5, 99.8]))
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        hi = lo + 1.0 if math.isfinite(lo) else 1.0
        lo = lo if math.isfinite(lo) else 0.0
    return lo, hi


def _label_rgb(plane: np.ndarray, image: MultiscaleImage) -> np.ndarray:
    """A label plane coloured by its ``image-label`` colours, else by a hash of the value
    (0 stays black)."""
    values = np.asarray(plane)
    if values.dtype.kind not in "iub":
        values = np.nan_to_num(values).astype(np.int64)
    values = values.astype(np.int64)
    uniq, inverse = np.unique(values, return_inverse=True)
    known = {}
    if image.image_label is not None:
        for c in image.image_label.colors:
            if c.rgba is not None:
                known[c.label_value] = c.rgba[:3]
    palette = np.zeros((len(uniq), 3), dtype=np.uint8)
    for k, v in enumerate(uniq.tolist()):
        if v in known:
            palette[k] = known[v]
        elif v != 0:
            h = (v * 2654435761) & 0xFFFFFF
            palette[k] = (64 + (h & 0xBF), 64 + ((h >> 8) & 0xBF), 64 + ((h >> 16) & 0xBF))
    return palette[inverse.reshape(values.shape)]


def encode_png(rgb: np.ndarray) -> bytes:
    """PNG bytes of an 8-bit grey (y, x) or RGB (y, x, 3) image: one IDAT chunk of
    zlib-compressed rows, each with filter type 0 (thumbnails are small; no imaging
    library is needed)."""
    pixels = np.ascontiguousarray(rgb, dtype=np.uint8)
    if pixels.ndim == 2:
        color_type, channels = 0, 1
    elif pixels.ndim == 3 and pixels.shape[2] == 3:
        color_type, channels = 2, 3
    else:
        raise ValueError(f"expected a (y, x) or (y, x, 3) image, got shape {pixels.shape}")
    height, width = pixels.shape[:2]
    raw = np.zeros((height, width * channels + 1), dtype=np.uint8)
    raw[:, 1:] = pixels.reshape(height, width * channels)

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6))
        + chunk(b"IEND", b"")
    )


def png_data_uri(rgb: np.ndarray) -> str:
    """``data:image/png;base64,...`` for an 8-bit grey or RGB image."""
    return "data:image/png;base64," + base64.b64encode(encode_png(rgb)).decode("ascii")


def _thumbnail_block(image: MultiscaleImage) -> str:
    rgb, why = thumbnail(image)
    if rgb is None:
        return f'<div style="max-width:220px" {_MUTED}>{_e(why)}</div>'
    iy, ix = yx_axes(image)
    height, width = rgb.shape[:2]
    # shown with square physical pixels when the scales say so
    index, _ = thumbnail_level(image)
    scale = image.scale(index or 0)
    aspect = abs(scale[iy] / scale[ix]) if scale[ix] else 1.0
    if not (math.isfinite(aspect) and 1e-3 <= aspect <= 1e3):
        aspect = 1.0  # scales a display cannot follow: square pixels
    phys_h, phys_w = height * aspect, float(width)
    zoom = DISPLAY_PX / max(phys_h, phys_w)
    h_px, w_px = max(1, round(phys_h * zoom)), max(1, round(phys_w * zoom))
    return (
        '<figure style="margin:0">'
        f'<img class="lgpu-thumbnail" src="{png_data_uri(rgb)}" width="{w_px}" height="{h_px}"'
        f' alt="{_e(why)}" style="image-rendering:pixelated;border:1px solid #ccc">'
        f'<figcaption style="font-size:11px;color:#888">{_e(why)}</figcaption></figure>'
    )


# -- tables -------------------------------------------------------------------------------------


def _levels_table(image: MultiscaleImage, only: int | None = None) -> str:
    rows = []
    for lv in image.levels:
        if only is not None and lv.index != only:
            continue
        rows.append(
            [
                lv.index,
                lv.path,
                _tuple(lv.shape),
                dtype_text(lv),
                _tuple(lv.chunks),
                _tuple(lv.shards) if lv.shards else "-",
                ", ".join(lv.codecs) or "raw",
                format_bytes(lv.nbytes),
                _tuple(lv.scale, "g"),
                _tuple(lv.translation, "g"),
            ]
        )
    head = [
        "level",
        "path",
        "shape",
        "dtype",
        "chunks",
        "shards",
        "codecs",
        "size",
        "scale",
        "translation",
    ]
    return _table(head, rows, css_class="lgpu-levels")


def _axes_table(image: MultiscaleImage) -> str:
    has_units = any(a.unit for a in image.axes)
    head = ["axis", "type", *(["unit"] if has_units else []), "level-0 scale", "translation"]
    scale, translation = image.scale(0), image.translation(0)
    rows = []
    for a, s, t in zip(image.axes, scale, translation, strict=False):
        rows.append(
            [a.name, a.type or "", *([a.unit or ""] if has_units else []), f"{s:g}", f"{t:g}"]
        )
    return _table(head, rows, css_class="lgpu-axes")


def _channels_table(image: MultiscaleImage) -> str:
    rows = []
    for i, ch in enumerate(image.channels):
        window = ""
        if isinstance(ch.window, dict):
            window = ", ".join(f"{k} {v:g}" for k, v in ch.window.items())
        rows.append(
            [
                i,
                _Raw(_swatch(ch.color) + " " + _e(ch.label or "")),
                f"#{ch.color}" if ch.color else "",
                window,
                "" if ch.active is None else ("yes" if ch.active else "no"),
            ]
        )
    return _table(["", "label", "colour", "window", "active"], rows, css_class="lgpu-channels")


def _color_list(colors: Iterable[Any], limit: int = 24) -> str:
    items = []
    colors = list(colors)
    for c in colors[:limit]:
        hexed = "".join(f"{v:02X}" for v in c.rgba[:3]) if c.rgba is not None else None
        items.append(f"{_swatch(hexed)}&nbsp;{_e(c.label_value)}")
    more = f" <span {_MUTED}>... {len(colors) - limit} more</span>" if len(colors) > limit else ""
    return " &nbsp;".join(items) + more


def _labels_rows(image: MultiscaleImage) -> str:
    try:
        labels = image.labels
        names = list(labels.names)
    except Exception as exc:
        return f"<div {_MUTED}>labels cannot be listed: {_e(exc)}</div>"
    if not names:
        return ""
    rows = []
    for name in names:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                label = labels[name]
            colors = _color_list(label.image_label.colors) if label.image_label else ""
            rows.append(
                [
                    name,
                    _tuple(label.levels[0].shape),
                    str(label.levels[0].dtype),
                    len(label.levels),
                    _Raw(colors),
                ]
            )
        except Exception as exc:
            rows.append([name, _Raw(f"<span {_MUTED}>cannot open: {_e(exc)}</span>"), "", "", ""])
    return _table(["name", "shape", "dtype", "levels", "colours"], rows, css_class="lgpu-labels")


# -- small pieces ---------------------------------------------------------------------------------


class _Raw(str):
    """Text that is already HTML (built from escaped pieces)."""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _cell(value: Any) -> str:
    return value if isinstance(value, _Raw) else _e(value)


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]], css_class: str = "") -> str:
    cls = f' class="{css_class}"' if css_class else ""
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table{cls}><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"


def _section(title: str, content: str) -> str:
    return f"<details open><summary>{_e(title)}</summary>{content}</details>"


def _box(content: str) -> str:
    return f'{_STYLE}<div class="lgpu-repr">{content}</div>'


def _swatch(color: str | None) -> str:
    if not color or not _HEX.fullmatch(color):
        return ""
    return f'<span class="lgpu-swatch" style="background:#{color}"></span>'


def _tuple(values: Iterable[Any] | None, fmt: str = "") -> str:
    if values is None:
        return "-"
    return "(" + ", ".join(format(v, fmt) for v in values) + ")"


__all__ = [
    "channel_axis",
    "composite",
    "encode_png",
    "image_html",
    "labels_html",
    "level_html",
    "plate_html",
    "png_data_uri",
    "series_html",
    "thumbnail",
    "thumbnail_level",
    "well_html",
    "yx_axes",
]
