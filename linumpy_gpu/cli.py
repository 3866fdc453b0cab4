"""The ``linumpy-gpu`` command: validate, inspect, convert, bench, demo, info.

Every failure the library reports on purpose (a missing store, invalid metadata, an
existing destination, a missing GPU, ...) is printed as one line
``linumpy-gpu: error: ...`` with exit code 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from linumpy_gpu import __version__
from linumpy_gpu.io.files import INCOMPLETE_MARKER

if TYPE_CHECKING:
    from linumpy_gpu.image import MultiscaleImage

# convert's default layout, the one GPU reads are fastest on: 64^3 chunks in shards of
# 256 x 512 x 512 along the last three spatial axes (1 along time and channels).
CONVERT_CHUNKS_3D = (64, 64, 64)
CONVERT_SHARDS_3D = (256, 512, 512)
CONVERT_CHUNKS_2D = (256, 256)
CONVERT_SHARDS_2D = (2048, 2048)
# convert reads and writes in blocks of whole storage units of about this many bytes
COPY_BLOCK_BYTES = 256 << 20
DASK_BLOCK_LIMIT = 1 << 30
# bench reads level 0, or a region of it of at most this many bytes
BENCH_LIMIT = 2 << 30


def main(argv: list[str] | None = None) -> int:
    """Run the ``linumpy-gpu`` command with ``argv`` (default: the process's arguments); returns
    the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    from linumpy_gpu.errors import LinumpyGpuError

    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            return int(_COMMANDS[args.command](args))
        except LinumpyGpuError as exc:
            print(f"linumpy-gpu: error: {_one_line(exc)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("linumpy-gpu: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            # the reader of our output stopped early (| head): stop quietly, as Unix tools
            # do, with stdout pointed away so that Python's flush at exit does not fail too
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="linumpy-gpu", description=__doc__)
    parser.add_argument("--version", action="version", version=f"linumpy-gpu {__version__}")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bars for convert, drawn only when stderr is a terminal (default: the "
        "LINUMPY_GPU_PROGRESS setting when set, else on)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser(
        "validate",
        help="check a store: metadata (ours and ome-zarr-models'), levels, labels",
        description="Check an OME-Zarr store: its metadata as linumpy_gpu parses it and as "
        "ome-zarr-models validates it, that every level opens and reads, that level shapes "
        "match the scales between levels, that the dtype is the same on every level, that "
        "label images open. Prints one line per problem (ERROR: / WARNING:). Exit code 0: "
        "no errors; 1: errors (or warnings with --strict); 2: the store cannot be opened.",
    )
    validate.add_argument("path", help="the store: a local path or a URL")
    validate.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")

    inspect = sub.add_parser("inspect", help="print the structure of an OME-Zarr store")
    inspect.add_argument("path")
    inspect.add_argument(
        "--json",
        action="store_true",
        help="as JSON: levels (shapes, dtypes, chunks, shards, codecs, scales, translations), "
        "axes and units, channels, labels; plates' rows, columns and wells; wells' fields",
    )

    convert = sub.add_parser(
        "convert",
        help="rewrite a store as NGFF 0.5 in the layout the GPU reads fastest",
        description="Rewrite the image at SRC (any store linumpy_gpu reads) as an OME-Zarr "
        "image at DST: NGFF 0.5 with 64^3 zstd chunks in shards of 256x512x512 (clipped to "
        "the shape) by default. Axes, units, scales, translations, channels and label images "
        "are carried over. Level 0 is read block by block, so memory stays bounded. DST is "
        "never replaced without --overwrite.",
    )
    convert.add_argument("src", help="the source store")
    convert.add_argument("dst", help="the new store")
    convert.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    convert.add_argument(
        "--chunks", type=_int_list, help="chunk shape, e.g. 64,64,64 (one number per axis)"
    )
    convert.add_argument(
        "--shards",
        type=_shards_arg,
        help="shard shape, e.g. 256,512,512, or 'none' for no shards (multiples of --chunks)",
    )
    convert.add_argument(
        "--levels",
        type=int,
        help="number of pyramid levels (default: as many as the source has)",
    )
    convert.add_argument(
        "--scale-translation-only",
        action="store_true",
        help="convert an image placed by more than a scale and a translation (an affine, "
        "a rotation: NGFF 0.6) keeping only those two; without it such an image is refused",
    )
    convert.add_argument(
        "--pyramid",
        choices=("copy", "recompute"),
        default="copy",
        help="copy: the source's lower levels as they are (default, where the source has "
        "them); recompute: lower levels computed from level 0",
    )
    convert.add_argument(
        "--version",
        dest="ngff_version",
        choices=("0.4", "0.5"),
        default="0.5",
        help="NGFF version to write (0.5: zarr v3, sharded; 0.4: zarr v2, no shards)",
    )
    convert.add_argument(
        "--device",
        default="auto",
        help="where data is read, downsampled and compressed: auto (default), cpu, gpu",
    )
    convert.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=argparse.SUPPRESS,
        help="progress bars (see linumpy-gpu --progress)",
    )

    bench = sub.add_parser(
        "bench",
        help="how fast this store's level 0 reads here, on the GPU and the CPU",
        description="Time reads of level 0 (or of a region of it of at most 2 GiB) of a "
        "store: best of --repeat runs per device, and with --peers by zarr-python and "
        "tensorstore (where installed) too.",
    )
    bench.add_argument("path")
    bench.add_argument(
        "--device",
        help="comma-separated devices to time: cpu, gpu (default: cpu, and gpu where usable)",
    )
    bench.add_argument("--peers", action="store_true", help="also time zarr-python, tensorstore")
    bench.add_argument("--repeat", type=int, default=3, help="runs per reader (default 3)")
    bench.add_argument("--json", action="store_true", help="print the results as JSON")

    demo = sub.add_parser("demo", help="write a sample OME-Zarr pyramid, read it back, report")
    demo.add_argument(
        "--out",
        help="folder to write the sample into, as OUT/sample.ome.zarr (default: a temporary "
        "folder, removed afterwards)",
    )
    demo.add_argument("--device", default="auto", help="auto (default), gpu or cpu")
    sub.add_parser("info", help="versions, GPU, nvCOMP and GDS status")
    return parser


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers such as 64,64,64, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _shards_arg(text: str) -> tuple[int, ...] | str:
    return "none" if text.strip().lower() == "none" else _int_list(text)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    from linumpy_gpu.errors import DeviceFallbackWarning

    kind = "note" if issubclass(category, DeviceFallbackWarning) else "warning"
    print(f"linumpy-gpu: {kind}: {_one_line(message)}", file=sys.stderr)


def _one_line(value: Any) -> str:
    return " ".join(str(value).split())


def _note(text: str) -> None:
    print(f"linumpy-gpu: note: {text}", file=sys.stderr)


def _progress(args: argparse.Namespace) -> bool:
    """Progress bars: the --progress/--no-progress flag, else the ``progress`` setting
    where it is set (a ``config.set`` block, or LINUMPY_GPU_PROGRESS in the environment),
    else whether stderr is a terminal."""
    if getattr(args, "progress", None) is not None:
        return bool(args.progress)
    from linumpy_gpu import config

    if config.sources()["progress"] == "set":
        return config.get().progress
    if config.environment_sets(config.ENV_PREFIX + "PROGRESS"):  # read now, not cached
        return config.Settings.from_environment().progress
    return sys.stderr.isatty()


# -- validate -----------------------------------------------------------------------------------


@dataclass
class _Report:
    """Problems found by validate, in the order found, without repeats."""

    lines: list[tuple[str, str]] = field(default_factory=list)

    def add(self, severity: str, message: str) -> None:
        entry = (severity, _one_line(message))
        if entry not in self.lines:
            self.lines.append(entry)

    def error(self, message: str) -> None:
        self.add("ERROR", message)

    def warning(self, message: str) -> None:
        self.add("WARNING", message)

    def count(self, severity: str) -> int:
        return sum(1 for s, _ in self.lines if s == severity)


def _validate(args: argparse.Namespace) -> int:
    from linumpy_gpu import ngff
    from linumpy_gpu.image import open_ome_zarr
    from linumpy_gpu.io.stores import translated_errors

    group, where = _open_group(args.path)
    with translated_errors(where, metadata=True):
        attrs = dict(group.attrs)
    block, _ = ngff.ome_block(attrs, group.metadata.zarr_format)
    ngff.require_ome(block, where)  # not OME-Zarr at all: exit 2
    report = _Report()
    _models(group, where, report)
    opened = _parsed(lambda: open_ome_zarr(group), report)
    if opened is not None:
        _check_opened(opened, report)
    for severity, message in report.lines:
        print(f"{severity}: {message}")
    errors, warns = report.count("ERROR"), report.count("WARNING")
    kind = type(opened).__name__ if opened is not None else "store"
    if not report.lines:
        print(f"OK: {where}: {_describe_short(opened)}; no problems found")
    else:
        print(f"{where}: {kind}: {errors} error(s), {warns} warning(s)")
    return 1 if errors or (args.strict and warns) else 0


def _open_group(path: str) -> tuple[Any, str]:
    """The zarr group at ``path`` (a store that cannot be opened raises: exit 2)."""
    import zarr

    from linumpy_gpu.errors import NotOmeZarrError
    from linumpy_gpu.io.stores import locate, translated_errors

    location = locate(path, mode="r")
    with translated_errors(location.where, metadata=True):
        try:
            group = zarr.open_group(store=location.store, mode="r", use_consolidated=False)
        except zarr.errors.ContainsArrayError:
            raise NotOmeZarrError(
                location.where, "zarr.json / .zgroup", "an OME-Zarr group", "a zarr array"
            ) from None
    return group, location.where


def _models(group: Any, where: str, report: _Report, inherit: str | None = None) -> None:
    """ome-zarr-models' opinion of one group's attributes. ``inherit``: the NGFF version of
    the image a labels group belongs to, assumed (with a warning) where the group declares
    none."""
    from linumpy_gpu import ngff

    try:
        attrs = dict(group.attrs)
    except Exception as exc:
        report.error(f"{where}: attributes cannot be read ({type(exc).__name__}: {exc})")
        return
    zarr_format = group.metadata.zarr_format
    ome = attrs.get("ome")
    if inherit is not None and isinstance(ome, dict) and "version" not in ome:
        report.warning(f"{where}: no NGFF version is declared; checked as the image's {inherit}")
        attrs = {**attrs, "ome": {"version": inherit, **ome}}
    for problem in ngff.validate_with_ome_zarr_models(attrs, zarr_format, where):
        tail = problem[len(where) :] if problem.startswith(where) else problem
        cannot = "ome-zarr-models" in tail and ("not installed" in tail or "has no " in tail)
        report.add("WARNING" if cannot else "ERROR", problem)


def _parsed(call: Any, report: _Report) -> Any:
    """``call()`` with the library's warnings reported as WARNING lines and its errors as
    ERROR lines (then None)."""
    from linumpy_gpu.errors import LinumpyGpuError

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call()
        except LinumpyGpuError as exc:
            report.error(str(exc))
            result = None
    for w in caught:
        text = str(w.message)
        if "different dtypes" in text or "contradict their scales" in text:
            continue  # reported by the dtype and shape checks
        report.warning(text)
    return result


def _check_opened(opened: Any, report: _Report) -> None:
    from linumpy_gpu.image import MultiscaleImage, Plate, SeriesCollection, Well

    if isinstance(opened, MultiscaleImage):
        _check_image(opened, report)
    elif isinstance(opened, Plate):
        for ref in opened.wells:
            well = _parsed(lambda ref=ref: opened[ref.path], report)
            if well is not None:
                _models(well.group, well.path, report)
                _check_acquisitions(well, opened, report)
                _check_well(well, report)
    elif isinstance(opened, Well):
        _check_well(opened, report)
    elif isinstance(opened, SeriesCollection):
        for i in range(len(opened)):
            _check_member(lambda i=i: opened[i], report)
    else:  # a scene: its images
        for path in getattr(getattr(opened, "meta", None), "image_paths", ()):
            _check_member(lambda path=path: opened[path], report)


def _check_acquisitions(well: Any, plate: Any, report: _Report) -> None:
    """Each field's acquisition is one the plate lists (where the plate lists any)."""
    listed = {a.id for a in plate.meta.acquisitions}
    for ref in well.fields:
        if ref.acquisition is not None and listed and ref.acquisition not in listed:
            report.error(
                f"{well.path}: field '{ref.path}' names acquisition {ref.acquisition}, "
                f"which the plate does not list (it lists {sorted(listed)})"
            )


def _check_well(well: Any, report: _Report) -> None:
    for i in range(len(well)):
        _check_member(lambda i=i: well.image(i), report)


def _check_member(open_member: Any, report: _Report) -> None:
    """The image ``open_member()`` opens (a field, a series, a scene's image), where it
    opens: its metadata by ome-zarr-models, then as :func:`_check_image` checks."""
    image = _parsed(open_member, report)
    if image is not None:
        _models(image.group, image.path, report)
        _check_image(image, report)


def _check_image(image: MultiscaleImage, report: _Report, parent: Any = None) -> None:
    """Levels read, shapes follow the scales, one dtype, channels match, labels open."""
    from linumpy_gpu.image.repr import channel_axis

    where = image.path
    for lv in image.levels:
        first = tuple(slice(0, min(c, n)) for c, n in zip(lv.chunks, lv.shape, strict=True))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lv.read(first, progress=False)
        except Exception as exc:
            report.error(
                f"{where}: level {lv.index} ('{lv.path}') does not read: "
                f"{type(exc).__name__}: {exc}"
            )
    dtypes = [str(lv.dtype) for lv in image.levels]
    if len(set(dtypes)) > 1:
        # the spec asks for one dtype (SHOULD), so readers cope: a warning, as on opening
        report.warning(f"{where}: levels have different dtypes {dtypes}; NGFF expects one dtype")
    _check_dimension_names(image, report)
    _check_shapes(image, report)
    ic = channel_axis(image)
    if image.channels:
        n = 1 if ic is None else image.levels[0].shape[ic]
        if len(image.channels) != n:
            axis = "no channel axis" if ic is None else f"a channel axis of length {n}"
            report.warning(f"{where}: omero lists {len(image.channels)} channel(s) for {axis}")
    if parent is not None or image.image_label is not None:
        if image.levels[0].dtype.kind not in "iu":
            report.error(f"{where}: label images need an integer dtype, not {dtypes[0]}")
        if parent is not None:
            _check_label_shape(image, parent, report)
        return
    labels = _parsed(lambda: image.labels, report)
    if labels is None or not labels.names:
        return
    lgroup = image.group["labels"]
    _models(lgroup, f"{where}/labels", report, inherit=image.version)
    for name in labels.names:
        label = _parsed(lambda name=name: labels[name], report)
        if label is None:
            continue
        _models(label.group, label.path, report)
        _check_image(label, report, parent=image)


def _check_dimension_names(image: MultiscaleImage, report: _Report) -> None:
    """From NGFF 0.5, each level array's ``dimension_names`` are the axes' names."""
    if image.version in ("0.1", "0.2", "0.3", "0.4"):
        return
    axes = list(image.axis_names)
    for lv in image.levels:
        names = getattr(lv.zarr_array.metadata, "dimension_names", None)
        if names is None:
            report.error(
                f"{image.path}: level {lv.index} ('{lv.path}') has no dimension_names; "
                f"NGFF {image.version} needs the axes' names {axes} there"
            )
        elif list(names) != axes:
            report.error(
                f"{image.path}: level {lv.index} ('{lv.path}') has dimension_names "
                f"{list(names)}, the axes are {axes}"
            )


def _check_shapes(image: MultiscaleImage, report: _Report) -> None:
    """Each level's shape is the previous level's divided by the ratio of their scales
    (within rounding), and no level is larger than the one before."""
    if not image.meta.exact:
        report.warning(
            f"{image.path}: levels are placed by more than a scale and a translation; level "
            "shapes were not checked against the scales"
        )
        return
    for problem in image.shape_scale_mismatches():
        report.error(problem)


def _check_label_shape(label: MultiscaleImage, parent: MultiscaleImage, report: _Report) -> None:
    from linumpy_gpu.image.repr import channel_axis

    if len(label.levels) != len(parent.levels):
        report.error(
            f"{label.path}: {len(label.levels)} level(s), the image has "
            f"{len(parent.levels)}; NGFF needs a label image to have as many as its image"
        )
    mine = dict(zip(label.axis_names, label.levels[0].shape, strict=True))
    theirs = dict(zip(parent.axis_names, parent.levels[0].shape, strict=True))
    ic = channel_axis(parent)
    skip = parent.axis_names[ic] if ic is not None else None
    differ = [
        f"{a}: {mine[a]} vs {theirs[a]}"
        for a in mine
        if a in theirs and a != skip and mine[a] != theirs[a]
    ]
    if differ:
        report.warning(
            f"{label.path}: level 0 differs in shape from the image's level 0 ({', '.join(differ)})"
        )


def _describe_short(opened: Any) -> str:
    from linumpy_gpu.image import MultiscaleImage, Plate, SeriesCollection, Well

    if isinstance(opened, MultiscaleImage):
        n = len(opened.labels.names) if opened.image_label is None else 0
        return f"NGFF {opened.version} image, {len(opened.levels)} level(s)" + (
            f", {n} label image(s)" if n else ""
        )
    if isinstance(opened, Plate):
        return f"NGFF {opened.meta.version} plate, {len(opened.wells)} well(s)"
    if isinstance(opened, Well):
        return f"NGFF {opened.meta.version} well, {len(opened)} field(s)"
    if isinstance(opened, SeriesCollection):
        return f"bioformats2raw collection, {len(opened)} series"
    return type(opened).__name__


# -- inspect ------------------------------------------------------------------------------------


def _inspect(args: argparse.Namespace) -> int:
    from linumpy_gpu.image import open_ome_zarr

    opened = open_ome_zarr(args.path)
    if not args.json:
        print(opened)
        for line in _members(opened):
            print(f"  {line}")
        return 0
    print(to_json(describe(opened)))
    return 0


def _members(opened: Any) -> Iterator[str]:
    """One line per well of a plate (its fields), field of a well or series of a
    collection (what it holds); a member that does not open says why."""
    from linumpy_gpu.errors import LinumpyGpuError
    from linumpy_gpu.image import Plate, SeriesCollection, Well

    if isinstance(opened, Plate):
        for path in opened:
            try:
                fields = [f.path for f in opened[path].fields]
            except LinumpyGpuError as exc:
                yield f"{path}: {type(exc).__name__}: {exc}"
                continue
            yield f"{path}: {len(fields)} field(s): {', '.join(fields)}"
    elif isinstance(opened, Well | SeriesCollection):
        names = [f.path for f in opened.fields] if isinstance(opened, Well) else range(len(opened))
        for i, name in enumerate(names):
            try:
                yield f"{name}: {_describe_short(opened[i])}"
            except LinumpyGpuError as exc:
                yield f"{name}: {type(exc).__name__}: {exc}"


def describe(opened: Any) -> dict[str, Any]:
    """A JSON-ready description of what :func:`~linumpy_gpu.open_ome_zarr` returned: an
    image (levels, axes, units, channels, labels), a plate (rows, columns, wells), a well
    (fields), a bioformats2raw collection (series) or a scene (images)."""
    from linumpy_gpu.image import MultiscaleImage, Plate, SeriesCollection, Well

    if isinstance(opened, MultiscaleImage):
        return _image_dict(opened)
    if isinstance(opened, Plate):
        meta = opened.meta
        return {
            "kind": "plate",
            "path": opened.path,
            "ngff_version": meta.version,
            "name": meta.name,
            "rows": list(meta.rows),
            "columns": list(meta.columns),
            "wells": [{"path": w.path, "row": w.row, "column": w.column} for w in meta.wells],
            "acquisitions": [
                {"id": a.id, "name": a.name, "maximum_field_count": a.maximum_field_count}
                for a in meta.acquisitions
            ],
            "field_count": meta.field_count,
        }
    if isinstance(opened, Well):
        return {
            "kind": "well",
            "path": opened.path,
            "ngff_version": opened.meta.version,
            "fields": [{"path": f.path, "acquisition": f.acquisition} for f in opened.fields],
        }
    if isinstance(opened, SeriesCollection):
        return {"kind": "series", "path": opened.path, "series": list(opened.series_paths)}
    scene: Any = getattr(opened, "meta", None)
    return {
        "kind": type(opened).__name__.lower(),
        "path": getattr(opened, "path", None),
        "ngff_version": getattr(scene, "version", None),
        "images": list(getattr(scene, "image_paths", ())),
        "coordinate_systems": [cs.name for cs in getattr(scene, "coordinate_systems", ())],
    }


def _image_dict(image: MultiscaleImage, with_labels: bool = True) -> dict[str, Any]:
    from linumpy_gpu.errors import LinumpyGpuError

    levels = [
        {
            "index": lv.index,
            "path": lv.path,
            "shape": list(lv.shape),
            "dtype": str(lv.dtype),
            "stored_dtype": lv.stored_dtype.str,
            "chunks": list(lv.chunks),
            "shards": list(lv.shards) if lv.shards else None,
            "codecs": list(lv.codecs),
            "nbytes": lv.nbytes,
            "scale": list(lv.scale),
            "translation": list(lv.translation),
        }
        for lv in image.levels
    ]
    out: dict[str, Any] = {
        "kind": "label image" if image.image_label is not None else "image",
        "path": image.path,
        "name": image.name,
        "ngff_version": image.version,
        "dtype": str(image.levels[0].dtype),
        "shape": list(image.levels[0].shape),
        "axes": [{"name": a.name, "type": a.type, "unit": a.unit} for a in image.axes],
        "units": {a.name: a.unit for a in image.axes if a.unit},
        "scales": [lv["scale"] for lv in levels],
        "translations": [lv["translation"] for lv in levels],
        "exact_transforms": image.meta.exact,
        "pyramid_type": image.meta.type,
        "levels": levels,
        "channels": [
            {"label": c.label, "color": c.color, "window": c.window, "active": c.active}
            for c in image.channels
        ],
    }
    if image.image_label is not None:
        meta = image.image_label
        out["image_label"] = {
            "colors": [{"label_value": c.label_value, "rgba": c.rgba} for c in meta.colors],
            "properties": list(meta.properties),
            "source_image": meta.source_image,
        }
    elif with_labels:
        labels = image.labels
        out["labels"] = []
        for name in labels.names:
            try:
                entry = _image_dict(labels[name], with_labels=False)
            except LinumpyGpuError as exc:  # one broken label image hides nothing else
                entry = {"name": name, "error": _one_line(exc)}
            out["labels"].append({**entry, "label_name": name})
    return out


def to_json(value: Any, indent: int = 0) -> str:
    """``value`` as JSON: objects one key a line, lists of plain values on one line. NaN
    and infinities (in metadata zarr-python writes as bare ``NaN``) become the strings
    "NaN", "Infinity" and "-Infinity": strict JSON has no such numbers."""
    if indent == 0:
        value = _strict(value)
    pad, inner = "  " * indent, "  " * (indent + 1)
    flat = json.dumps(value, default=_json_default)
    if len(flat) <= 72 and not (
        isinstance(value, dict) and any(isinstance(v, dict | list | tuple) for v in value.values())
    ):
        return flat
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(str(k))}: {to_json(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list | tuple) and any(isinstance(v, dict | list | tuple) for v in value):
        items = [f"{inner}{to_json(v, indent + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return flat


def _strict(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    return str(value)


# -- convert ------------------------------------------------------------------------------------


def _convert(args: argparse.Namespace) -> int:
    from linumpy_gpu.errors import (
        InvalidArgumentError,
        LinumpyGpuError,
        StoreExistsError,
        UnsupportedWriteError,
        WriteError,
    )
    from linumpy_gpu.image import MultiscaleImage, open_ome_zarr
    from linumpy_gpu.image._common import format_bytes
    from linumpy_gpu.io.files import built_beside, check_replaceable, refresh_consolidated
    from linumpy_gpu.io.stores import local_path, overlapping

    progress = _progress(args)
    if args.levels is not None and args.levels < 1:
        raise InvalidArgumentError(f"--levels must be at least 1, got {args.levels}")
    if overlapping(args.src, args.dst):
        # however either is spelled: writing DST would destroy the source while it is read
        raise InvalidArgumentError(
            f"DST '{args.dst}' is the source '{args.src}' or inside or around it; write to "
            "another path"
        )
    local_target = local_path(args.dst)
    local = local_target is not None
    target = local_target if local_target is not None else args.dst
    if local and os.path.lexists(target):
        if not args.overwrite:
            raise StoreExistsError(f"'{args.dst}' exists; pass --overwrite to replace it")
        check_replaceable(target)
    src = open_ome_zarr(args.src, device=args.device)
    if not isinstance(src, MultiscaleImage):
        raise UnsupportedWriteError(
            f"convert rewrites one multiscale image; '{args.src}' holds a "
            f"{type(src).__name__}: convert its images one by one (see linumpy-gpu inspect)"
        )
    if src.image_label is not None:
        raise UnsupportedWriteError(
            f"'{args.src}' is a label image: convert the image it belongs to"
        )
    if 0 in src.levels[0].shape:
        raise UnsupportedWriteError(
            f"'{args.src}' holds no voxels (level 0 has shape {src.levels[0].shape}): there "
            "is nothing to convert"
        )
    if not src.meta.exact:
        if not args.scale_translation_only:
            # the new image would place every voxel elsewhere (a rotation, a shear, a
            # displacement field dropped), while reading as exactly placed
            raise UnsupportedWriteError(
                f"'{src.path}' places its levels by more than a scale and a translation, "
                "which NGFF 0.4 and 0.5 cannot hold; pass --scale-translation-only to "
                "convert it with only its scale and translation (its voxels then lie "
                "elsewhere in space)"
            )
        _note(
            f"'{src.path}' places its levels by more than a scale and a translation; only "
            "the scale and translation are carried over"
        )
    # progress bars name DST as the user gave it, not the folder it is built in
    name = os.path.basename(target.rstrip("/")) or target
    t0 = time.perf_counter()
    try:
        if local:
            # built whole beside DST and swapped in at the end: DST stays as it was until
            # the new store is complete, and a failed convert leaves nothing behind
            with built_beside(target, args.overwrite) as staging:
                copy, n_labels = _convert_into(staging, True, src, args, progress, name)
            refresh_consolidated(target)
        else:
            copy, n_labels = _convert_into(target, args.overwrite, src, args, progress, name)
    except LinumpyGpuError:
        raise
    except Exception as exc:
        raise WriteError(
            f"converting '{args.src}' failed ({type(exc).__name__}: {exc}); "
            + (f"'{args.dst}' was not changed" if local else f"'{args.dst}' may be incomplete")
        ) from exc
    result = open_ome_zarr(target)
    assert isinstance(result, MultiscaleImage)
    dt = time.perf_counter() - t0
    how = "copied" if copy else "computed from level 0"
    shards = result.levels[0].shards
    print(
        f"converted {src.path} -> {result.path}: NGFF {result.version}, {len(result.levels)} "
        f"level(s) (lower levels {how}), chunks {_dims(result.levels[0].chunks)}, shards "
        f"{_dims(shards) if shards else 'none'}, {n_labels} label image(s); "
        f"{format_bytes(src.levels[0].nbytes)} at level 0 in {dt:.1f} s"
    )
    return 0


def _convert_into(
    dst: str,
    overwrite: bool,
    src: MultiscaleImage,
    args: argparse.Namespace,
    progress: bool,
    store_name: str,
) -> tuple[bool, int]:
    """Write ``src`` as the image at ``dst``; returns whether the lower levels were
    copied, and the number of label images. ``store_name`` labels the progress bars."""
    from linumpy_gpu.errors import InvalidArgumentError
    from linumpy_gpu.write import write_labels, write_ome_zarr
    from linumpy_gpu.write.plan import METHODS

    chunks, shards = _layout(src, args.chunks, args.shards, args.ngff_version)
    n_src = len(src.levels)
    n = args.levels or n_src
    copy = args.pyramid == "copy" and n <= n_src
    if args.pyramid == "copy" and n > n_src:
        _note(f"the source has {n_src} level(s): all {n} levels are computed from level 0")
    labels = _convertible_labels(src)
    images = [src, *(label for _, label in labels)]
    mixed = [i.path for i in images if len({str(level.dtype) for level in i.levels}) > 1]
    unreduced = [i.path for i in images if not _reduces(i)]
    # a lower level cast into level 0's dtype would change its values; copied as they are,
    # levels whose shapes contradict their scales (a level larger than the one before,
    # level 0 listed again) would make an image that is not a pyramid, and a level that
    # claims a huge shape would be copied block by block
    for paths, why in (
        (mixed, "levels of different dtypes; the lower levels are"),
        (unreduced, "lower levels that are not reductions of the level before; they are"),
    ):
        if copy and paths:
            _note(f"{', '.join(paths)}: {why} computed from level 0 instead of copied")
            copy = False
    levels: int | list[tuple[int, ...]] = 1
    if not copy:
        factors = _source_factors(src)
        if n > n_src and factors:
            # the source's own reductions (an anisotropic pyramid keeps z), then its last,
            # on the axes still longer than one voxel
            levels = list(factors)
            shape = src.levels[-1].shape
            for _ in range(n - n_src):
                step = tuple(
                    f if size > 1 else 1 for f, size in zip(factors[-1], shape, strict=True)
                )
                if all(f == 1 for f in step):  # one voxel along every reduced axis
                    raise InvalidArgumentError(
                        f"--levels {n}: level 0 of shape {src.levels[0].shape} reduces to "
                        f"{shape} in {len(levels) + 1} levels; at most that many"
                    )
                levels.append(step)
                shape = tuple(-(-size // f) for size, f in zip(shape, step, strict=True))
            _note(f"levels beyond the source's are reduced by its last factors {factors[-1]}")
        else:
            levels = factors[: n - 1] if n <= n_src else n
        if not levels:
            levels = 1
    unit = _write_unit(src.levels[0].shape, chunks, shards)
    data = src.levels[0].to_dask(chunks=_dask_chunks(src.levels[0], unit))
    out = write_ome_zarr(
        dst,
        data,
        fill_value=src.levels[0].fill_value,
        axes=src.axes,
        scale=src.scale(0),
        translation=src.translation(0),
        channels=_channels_for(src, args.ngff_version),
        version=args.ngff_version,
        chunks=chunks,
        shards=shards,
        levels=levels,
        method=src.meta.type if src.meta.type in METHODS else "mean",
        name=src.name,
        overwrite=overwrite,
        device=args.device,
        progress=progress,
        _progress_label=store_name,
        _unfinished=True,
    )
    # labels and lower levels copied (image and labels) while the image is still marked
    # unfinished, its metadata last: a convert cut short leaves an image that does not
    # open, rather than one that opens as finished without them
    group = _writable_group(out)
    written = []
    for name, label in labels:
        lv0 = label.levels[0]
        label_chunks = _label_chunks(src, label, chunks)
        label_data = lv0.to_dask(chunks=_dask_chunks(lv0, label_chunks))
        placed_as_image = (label.scale(0), label.translation(0)) == (
            src.scale(0),
            src.translation(0),
        )
        if lv0.shape == src.levels[0].shape and placed_as_image:
            out_label = write_labels(
                out,
                name,
                label_data,
                colors=_label_colors(label),
                properties=_label_properties(label, name),
                chunks=label_chunks,
                overwrite=False,
                device=args.device,
                _unfinished=True,  # until its levels are copied and its metadata final
            )
        else:  # labels of another shape (no channel axis, say) or placement: as they are
            label_levels = 1 if copy else (_factors_for(label, out) or 1)
            out_label = _write_label_image(
                out,
                name,
                label,
                label_data,
                label_chunks,
                args.ngff_version,
                label_levels,
                args.device,
            )
        written.append((name, label, label_chunks, _writable_group(out_label), out_label.path))
    for name, label, label_chunks, label_group, where in written:
        n_label = min(n, len(label.levels))
        if len(label.levels) > n:
            _note(
                f"label image '{name}' has {len(label.levels)} levels; written with the image's {n}"
            )
        if copy and n_label > 1:
            _copy_levels(
                label,
                label_group,
                label_chunks,
                None,
                progress,
                f"{store_name}/labels/{name}",
                n_label,
            )
        _finish_metadata(label_group, where, label, args.ngff_version, copy, n_label)
    if copy and n > 1:
        _copy_levels(src, group, chunks, shards, progress, store_name, n)
    _finish_metadata(group, out.path, src, args.ngff_version, copy, n)
    return copy, len(written)


def _factors_for(label: MultiscaleImage, image: MultiscaleImage) -> list[tuple[int, ...]]:
    """The written image's reductions, per level, on the axes of ``label`` (by name; 1 on
    axes the image lacks): a label image has as many levels as its image, each matching."""
    factors = image.reduction_factors("convert")
    names = list(image.axis_names)
    return [
        tuple(f[names.index(a)] if a in names else 1 for a in label.axis_names) for f in factors
    ]


def _dims(values: Sequence[int] | None) -> str:
    return "x".join(str(v) for v in values or ())


def _layout(
    src: MultiscaleImage,
    chunks: tuple[int, ...] | None,
    shards: tuple[int, ...] | str | None,
    version: str,
) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The chunk and shard shapes to write: the arguments, else the GPU-friendly default
    (64^3 chunks in 256x512x512 shards along the last three spatial axes), clipped to the
    shape; no shards for NGFF 0.4."""
    from linumpy_gpu.errors import InvalidArgumentError

    shape = src.levels[0].shape
    ndim = len(shape)
    spatial = [
        i
        for i, a in enumerate(src.axes)
        if a.type == "space" or (a.type is None and a.name in ("z", "y", "x"))
    ]
    default_c, default_s = [1] * ndim, [1] * ndim
    if len(spatial) >= 3:
        for i, c, s in zip(spatial[-3:], CONVERT_CHUNKS_3D, CONVERT_SHARDS_3D, strict=True):
            default_c[i], default_s[i] = c, s
    else:
        tail = spatial[-2:] if spatial else list(range(max(0, ndim - 2), ndim))
        for i, c, s in zip(tail, CONVERT_CHUNKS_2D[-len(tail) :], CONVERT_SHARDS_2D, strict=False):
            default_c[i], default_s[i] = c, s
    if chunks is not None and len(chunks) != ndim:
        raise InvalidArgumentError(
            f"--chunks has {len(chunks)} values for the {ndim} axes {list(src.axis_names)}"
        )
    if isinstance(shards, tuple) and version == "0.4":
        raise InvalidArgumentError("--shards needs zarr v3: --version 0.5")
    if isinstance(shards, tuple) and len(shards) != ndim:
        raise InvalidArgumentError(
            f"--shards has {len(shards)} values for the {ndim} axes {list(src.axis_names)}"
        )
    want_c = chunks or tuple(default_c)
    out_c = tuple(min(c, n) for c, n in zip(want_c, shape, strict=True))
    if shards == "none" or (version == "0.4" and shards is None):
        return out_c, None
    if isinstance(shards, tuple):
        if any(s % c for s, c in zip(shards, want_c, strict=True)):
            raise InvalidArgumentError(
                f"--shards {list(shards)} must be multiples of the chunks {list(want_c)}"
            )
        # clipped as the chunks are: to the shape, rounded up to whole chunks
        return out_c, _write_unit(shape, want_c, shards)
    # default shards, rounded up to whole chunks and clipped to the (chunk-rounded) shape
    out_s = tuple(
        min(-(-s // c) * c, -(-n // c) * c) for s, c, n in zip(default_s, out_c, shape, strict=True)
    )
    return out_c, (None if out_s == out_c else out_s)  # a shard of one chunk: no shards


def _write_unit(
    shape: Sequence[int], chunks: Sequence[int], shards: Sequence[int] | None
) -> tuple[int, ...]:
    """The storage unit (shard, else chunk) a level of ``shape`` gets, as the writer clips
    it."""
    clipped = tuple(min(c, n) for c, n in zip(chunks, shape, strict=True))
    if shards is None:
        return clipped
    return tuple(
        max(c, min(s, -(-n // c) * c)) for s, c, n in zip(shards, clipped, shape, strict=True)
    )


def _dask_chunks(level: Any, unit: Sequence[int]) -> tuple[int, ...]:
    """Blocks to read the source in: whole output units, grown to cover whole source units
    where that stays under 1 GiB (so no source chunk is decoded many times)."""
    source_unit = level.shards or level.chunks
    grown = tuple(
        min(-(-n // u) * u, u * -(-s // u))
        for u, s, n in zip(unit, source_unit, level.shape, strict=True)
    )
    if math.prod(grown) * level.dtype.itemsize <= DASK_BLOCK_LIMIT:
        return grown
    return tuple(unit)


def _channels_for(src: MultiscaleImage, version: str) -> list[Any] | None:
    """The source's channels; for NGFF 0.4, which needs a window on every channel, the
    dtype's range where the source gives none (with a note)."""
    import dataclasses

    import numpy as np

    channels = list(src.channels)
    kinds = [a.type for a in src.axes]
    if len(channels) > 1 and "channel" not in kinds:
        _note(f"the source lists {len(channels)} channels but has no channel axis: not copied")
        return None
    if "channel" in kinds and channels:
        length = src.levels[0].shape[kinds.index("channel")]
        if len(channels) != length:
            _note(
                f"the source lists {len(channels)} channels for a channel axis of {length}: "
                "not copied"
            )
            return None
    if version != "0.4" or not channels:
        return channels or None
    if any(c.window is None for c in channels):
        dtype = src.levels[0].dtype
        if dtype.kind in "iu":
            lo, hi = float(np.iinfo(dtype).min), float(np.iinfo(dtype).max)
        else:
            lo, hi = 0.0, 1.0
        window = {"start": lo, "end": hi, "min": lo, "max": hi}
        _note(f"NGFF 0.4 needs a window per channel: channels without one get {lo:g}..{hi:g}")
        channels = [
            c if c.window is not None else dataclasses.replace(c, window=dict(window))
            for c in channels
        ]
    if any(c.color is None for c in channels):
        _note("NGFF 0.4 needs a color per channel: channels without one get white (FFFFFF)")
        channels = [
            c if c.color is not None else dataclasses.replace(c, color="FFFFFF") for c in channels
        ]
    return channels


def _reduces(image: MultiscaleImage) -> bool:
    """Whether each level of ``image`` is a whole-factor reduction of the level before."""
    from linumpy_gpu.errors import WriteError

    try:
        image.reduction_factors("convert")
    except WriteError:
        return False
    return True


def _source_factors(src: MultiscaleImage) -> list[tuple[int, ...]]:
    """The source pyramid's factors, to compute the same pyramid again; for levels that
    are not whole-factor reductions, the nearest whole factors, with a note: those of the
    scales where the image is placed by them (a level's shape may be what is wrong),
    else of the shapes."""
    from linumpy_gpu.errors import WriteError

    try:
        return src.reduction_factors("convert")
    except WriteError:
        factors = []
        for i in range(1, len(src.levels)):
            if src.exact:
                scales = zip(src.scale(i - 1), src.scale(i), strict=True)
                ratios = [b / a if a > 0 else 1.0 for a, b in scales]
            else:
                shapes = zip(src.levels[i - 1].shape, src.levels[i].shape, strict=True)
                ratios = [a / b if b else 1.0 for a, b in shapes]
            factors.append(tuple(max(1, round(r)) for r in ratios))
        _note(
            f"'{src.path}': its levels are not whole-factor reductions of each other; the "
            f"pyramid is computed with the nearest whole factors {factors}"
        )
        return factors


def _convertible_labels(src: MultiscaleImage) -> list[tuple[str, MultiscaleImage]]:
    """The source's label images that can be written (integer data); a note for each one
    that cannot."""
    out = []
    for name in src.labels.names:
        label = src.labels[name]
        dtype = label.levels[0].dtype
        if dtype.kind not in "iu":
            _note(f"label image '{name}' is skipped: its dtype {dtype} is not an integer")
        else:
            out.append((name, label))
    return out


def _label_chunks(
    src: MultiscaleImage, label: MultiscaleImage, chunks: Sequence[int]
) -> tuple[int, ...]:
    """The image's chunk shape for the label image's axes (matched by name), clipped."""
    by_name = dict(zip(src.axis_names, chunks, strict=True))
    return tuple(
        min(by_name.get(a, 64), n)
        for a, n in zip(label.axis_names, label.levels[0].shape, strict=True)
    )


def _write_label_image(
    out: MultiscaleImage,
    name: str,
    label: MultiscaleImage,
    data: Any,
    chunks: Sequence[int],
    version: str,
    levels: int | list[tuple[int, ...]],
    device: str,
) -> MultiscaleImage:
    """A label image whose shape is not the image's (no channel axis, say), written with
    its own axes, scale and translation under ``labels/name``, and listed in the labels
    group."""
    import zarr

    from linumpy_gpu import ngff
    from linumpy_gpu.image._common import join
    from linumpy_gpu.io.stores import translated_errors
    from linumpy_gpu.ngff import build
    from linumpy_gpu.write import write_ome_zarr
    from linumpy_gpu.write.plan import label_colors

    image_label: dict[str, Any] = {"source": {"image": "../../"}}
    colors = _label_colors(label)
    properties = _label_properties(label, name)
    if colors:
        image_label["colors"] = label_colors(colors)
    if properties:
        image_label["properties"] = properties
    if version == "0.4":
        image_label["version"] = "0.4"
    written = write_ome_zarr(
        join(out.path, "labels", name),
        data,
        axes=label.axes,
        scale=label.scale(0),
        translation=label.translation(0),
        version=version,
        chunks=chunks,
        levels=levels,
        method="nearest",
        name=label.name or name,
        overwrite=False,
        device=device,
        _extra_block={"image-label": image_label},
        _unfinished=True,  # until convert writes its final metadata
    )
    group = _writable_group(out)
    where = join(out.path, "labels")
    with translated_errors(where):
        labels_group = zarr.open_group(
            store=group.store,
            path=f"{group.path}/labels" if group.path else "labels",
            mode="a",
            zarr_format=group.metadata.zarr_format,
        )
        block, _ = ngff.ome_block(dict(labels_group.attrs), labels_group.metadata.zarr_format)
        names = [x for x in block.get("labels", []) if x != name] + [name]
        labels_group.attrs.put(build.wrap(version, {"labels": names}))
    return written


def _label_colors(label: MultiscaleImage) -> list[dict[str, Any]] | None:
    meta = label.image_label
    if meta is None:
        return None
    colors = [
        {"label-value": int(c.label_value), "rgba": list(c.rgba)}
        for c in meta.colors
        if c.rgba is not None and float(c.label_value).is_integer()
    ]
    return colors or None


def _label_properties(label: MultiscaleImage, name: str) -> list[dict[str, Any]] | None:
    """The label properties, made to describe the same values as the colours (as the
    writer needs): values with a colour but no properties get an empty entry; properties
    of values without a colour are dropped, with a note."""
    meta = label.image_label
    if meta is None or not meta.properties:
        return None
    from linumpy_gpu.ngff._common import is_integral

    props = [
        {**p, "label-value": int(p["label-value"])}
        for p in meta.properties
        if is_integral(p.get("label-value"))
    ]
    if len(props) < len(meta.properties):
        _note(
            f"label image '{name}': properties of label values that are not integers are "
            "not carried over (label images hold integers)"
        )
    colors = _label_colors(label)
    if not colors:
        return props or None
    color_values = {c["label-value"] for c in colors}
    kept = [p for p in props if p["label-value"] in color_values]
    dropped = sorted({p["label-value"] for p in props} - color_values)
    if dropped:
        _note(
            f"label image '{name}': properties of values {dropped} are not carried over "
            "(they have no colour; NGFF lists the same values in both)"
        )
    have = {p["label-value"] for p in kept}
    kept += [{"label-value": v} for v in sorted(color_values - have)]
    return kept


def _writable_group(image: MultiscaleImage) -> Any:
    import zarr

    store = image.group.store
    if getattr(store, "read_only", False):
        store = store.with_read_only(False)
    return zarr.open_group(store=store, path=image.group.path, mode="r+")


def _copy_levels(
    src: MultiscaleImage,
    group: Any,
    chunks: Sequence[int],
    shards: Sequence[int] | None,
    progress: bool,
    label: str,
    n: int,
) -> None:
    """Levels 1..n-1 of ``src`` as they are, into new arrays of ``group`` laid out like its
    level 0 (codecs, chunks and shards clipped to each level's shape), block by block."""
    from linumpy_gpu.engine.writer import ChunkedArrayWriter

    first = group["0"]
    extra: dict[str, Any] = {}
    if first.metadata.zarr_format == 3:
        extra = {"serializer": first.serializer, "dimension_names": first.metadata.dimension_names}
    backend = src.backend
    plans = []
    for i in range(1, n):
        lv = src.levels[i]
        c = tuple(min(a, b) for a, b in zip(chunks, lv.shape, strict=True))
        s = _write_unit(lv.shape, chunks, shards) if shards is not None else None
        array = group.create_array(
            str(i),
            shape=lv.shape,
            dtype=first.dtype,
            chunks=c,
            shards=s,
            filters=first.filters,
            compressors=first.compressors,
            fill_value=first.fill_value,
            overwrite=True,
            attributes=dict(first.attrs),  # the write's id on object stores, as level 0's
            **extra,
        )
        writer = ChunkedArrayWriter(array, backend, name=str(array.store_path), locking=False)
        plans.append((lv, writer, list(_blocks(lv.shape, s or c, lv.dtype.itemsize))))
    from linumpy_gpu.progress import progress_bar

    total = sum(len(p[2]) for p in plans)
    bar = progress_bar(progress, f"copying {label}", total=total, unit="block")
    try:
        for lv, writer, regions in plans:
            for region in regions:
                block = lv.read(region, progress=False)
                if block.dtype != writer.layout.dtype:
                    block = block.astype(writer.layout.dtype)
                writer.write(region, block)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _blocks(
    shape: Sequence[int], unit: Sequence[int], itemsize: int
) -> Iterator[tuple[slice, ...]]:
    """Regions covering ``shape`` made of whole storage units, each of about
    :data:`COPY_BLOCK_BYTES` (grown along the leading axes first)."""
    block = [min(u, n) for u, n in zip(unit, shape, strict=True)]
    for i in range(len(block)):
        while block[i] < shape[i] and math.prod(block) * itemsize * 2 <= COPY_BLOCK_BYTES:
            block[i] = min(block[i] * 2, -(-shape[i] // unit[i]) * unit[i])
    grid = [
        [slice(start, min(start + b, n)) for start in range(0, n, b)]
        for n, b in zip(shape, block, strict=True)
    ]
    return itertools.product(*grid)


def _finish_metadata(
    group: Any,
    where: str,
    src: MultiscaleImage,
    version: str,
    copied: bool,
    n: int,
) -> None:
    """The written image's final metadata: the source's axes as the source gives them
    (units only where it has them) and, for copied levels, the source's scale and
    translation of every level; the write-in-progress mark removed. Checked as a reader
    reads it before it is written; where the source's axes would not pass, the writer's
    are kept (with a note)."""
    from linumpy_gpu import ngff
    from linumpy_gpu.errors import InvalidMetadataError
    from linumpy_gpu.ngff import build

    zarr_format = group.metadata.zarr_format
    attrs = dict(group.attrs)
    attrs.pop(INCOMPLETE_MARKER, None)
    block, _ = ngff.ome_block(attrs, zarr_format)
    written = dict(block["multiscales"][0])
    _keep_source_omero(block, src)
    if copied:
        entry = build.multiscales_block(
            version=version,
            axes=src.axes,
            paths=[str(i) for i in range(n)],
            scales=[src.scale(i) for i in range(n)],
            translations=[src.translation(i) for i in range(n)],
            name=src.name,
        )
        if src.meta.type:
            entry["type"] = src.meta.type
        if src.meta.metadata:
            entry["metadata"] = dict(src.meta.metadata)
    else:
        entry = {**written, "axes": build.axes_block(src.axes)}
    root_extra, block_extra, entry_extra = _source_extras(src, where)
    entry = {**entry_extra, **entry}
    block = {**block_extra, **block}
    for candidate in (entry, {**entry, "axes": written["axes"]}):
        new = {**root_extra, **build.wrap(version, {**block, "multiscales": [candidate]})}
        try:
            ome, declared = ngff.ome_block(new, zarr_format)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ngff.parse_multiscales(ome, declared, where)
        except InvalidMetadataError as exc:
            if candidate is not entry:
                raise
            _note(
                f"{where}: the source's axes do not fit NGFF {version} ({exc}); kept the "
                "writer's axes"
            )
            continue
        group.attrs.put(new)
        return


# Keys of an image's attributes that convert writes itself; the source's others are kept
_MODELLED_KEYS = {"ome", "multiscales", "omero", "version", "_creator", "image-label"}
_MODELLED_ENTRY_KEYS = {
    "coordinateSystems",  # NGFF 0.6: written as axes and transformations for 0.4 and 0.5
    "version",
    "name",
    "axes",
    "datasets",
    "coordinateTransformations",
    "type",
    "metadata",
}


def _source_extras(
    src: MultiscaleImage, where: str
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """What the source's attributes hold beside what convert writes: user attributes at the
    group's top level, other keys of its OME block (NGFF 0.5: inside ``ome``) and other
    keys of its multiscales entry (``@type``, a lab's own), all carried over as they are.
    Other multiscales entries are not (their datasets are not converted): a note says so."""
    from linumpy_gpu import ngff

    attrs = dict(src.group.attrs)
    attrs.pop(INCOMPLETE_MARKER, None)
    block, _ = ngff.ome_block(attrs, src.group.metadata.zarr_format)
    nested = isinstance(attrs.get("ome"), dict)
    root = {k: v for k, v in attrs.items() if k not in _MODELLED_KEYS}
    inner = {k: v for k, v in block.items() if k not in _MODELLED_KEYS} if nested else {}
    entries = block.get("multiscales")
    entries = entries if isinstance(entries, list) else []
    # convert opens the first multiscales entry
    chosen = entries[0] if entries and isinstance(entries[0], dict) else {}
    entry = {k: v for k, v in chosen.items() if k not in _MODELLED_ENTRY_KEYS}
    if len(entries) > 1:
        from linumpy_gpu.io.files import destination_of

        _note(
            f"{destination_of(where)}: the source lists {len(entries)} multiscales; only the "
            "first is converted and written"
        )
    return root, inner, entry


def _keep_source_omero(block: dict[str, Any], src: MultiscaleImage) -> None:
    """The source's ``omero`` keys the writer does not model (``rdefs``, ``name``, ``id``;
    per channel ``family``, ``coefficient``, ``inverted``, ...) carried into the written
    ``omero`` of ``block``, beside the channels it wrote."""
    from linumpy_gpu import ngff

    written = block.get("omero")
    source = ngff.ome_block(dict(src.group.attrs), src.group.metadata.zarr_format)[0].get("omero")
    if not isinstance(written, dict) or not isinstance(source, dict):
        return
    channels = written.get("channels", [])
    old = source.get("channels")
    if isinstance(old, list) and len(old) == len(channels):
        channels = [
            {**o, **c} if isinstance(o, dict) else c for o, c in zip(old, channels, strict=True)
        ]
    extra = {k: v for k, v in source.items() if k not in ("channels", "version")}
    block["omero"] = {**extra, **written, "channels": channels}


# -- bench --------------------------------------------------------------------------------------


def _bench(args: argparse.Namespace) -> int:
    from linumpy_gpu.errors import InvalidArgumentError
    from linumpy_gpu.gpu.deps import missing_pieces
    from linumpy_gpu.image import open_image
    from linumpy_gpu.image._common import format_bytes

    if args.repeat < 1:
        raise InvalidArgumentError(f"--repeat must be at least 1, got {args.repeat}")
    if args.device:
        devices = [d.strip() for d in args.device.split(",") if d.strip()]
        unknown = [d for d in devices if d not in ("cpu", "gpu")]
        if unknown:
            raise InvalidArgumentError(f"--device takes cpu and/or gpu, got {unknown}")
        skipped: list[str] = []
    else:
        missing = missing_pieces()
        devices = ["cpu"] if missing else ["cpu", "gpu"]
        skipped = [f"gpu: not usable here (needs {'; '.join(missing)})"] if missing else []
    image = open_image(args.path)
    level = image.levels[0]
    region = _bench_region(level.shape, level.shards or level.chunks, level.dtype.itemsize)
    nbytes = math.prod(s.stop - s.start for s in region) * level.dtype.itemsize
    results = []
    for device in devices:
        lv = open_image(args.path, device=device).levels[0]

        def read(lv: Any = lv) -> None:
            _sync(lv.read(region, progress=False))

        results.append(_timed("linumpy_gpu", lv.device, read, args.repeat, nbytes))
    if args.peers:
        peers, why = _peer_readers(image, level, region)
        skipped += why
        for name, call in peers:
            results.append(_timed(name, "cpu", call, args.repeat, nbytes))
    report = {
        "store": image.path,
        "level": level.path,
        "shape": list(level.shape),
        "dtype": str(level.dtype),
        "chunks": list(level.chunks),
        "shards": list(level.shards) if level.shards else None,
        "codecs": list(level.codecs),
        "region": [[s.start, s.stop] for s in region],
        "whole_level": nbytes == level.nbytes,
        "nbytes": nbytes,
        "repeat": args.repeat,
        "results": results,
        "skipped": skipped,
    }
    if args.json:
        print(to_json(report))
        return 0
    what = "the whole level" if report["whole_level"] else "a region of it"
    print(
        f"{image.path}: level 0 ('{level.path}') {level.shape} {level.dtype}, "
        f"{', '.join(level.codecs) or 'raw'}; read {what}: "
        f"[{', '.join(f'{s.start}:{s.stop}' for s in region)}] = {format_bytes(nbytes)}"
    )
    rows = [("reader", "device", "best s", "GB/s", f"runs (s), best of {args.repeat}")]
    for r in results:
        rows.append(
            (
                r["reader"],
                r["device"],
                f"{r['best_s']:.4f}",
                f"{r['gb_per_s']:.2f}",
                " ".join(f"{t:.4f}" for t in r["times_s"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for s in skipped:
        print(f"  skipped {s}")
    return 0


def _bench_region(
    shape: Sequence[int], unit: Sequence[int], itemsize: int, limit: int = BENCH_LIMIT
) -> tuple[slice, ...]:
    """The whole level, or a region from its origin, halved along the leading axes (in
    whole storage units) until it holds at most ``limit`` bytes."""
    extent = list(shape)
    while math.prod(extent) * itemsize > limit:
        for i in range(len(extent)):
            if extent[i] > unit[i]:
                half = max(unit[i], -(-(extent[i] // 2) // unit[i]) * unit[i])
                extent[i] = half if half < extent[i] else unit[i]
                break
        else:
            break
    return tuple(slice(0, n) for n in extent)


def _timed(reader: str, device: str, call: Any, repeat: int, nbytes: int) -> dict[str, Any]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    best = min(times)
    return {
        "reader": reader,
        "device": device,
        "times_s": times,
        "best_s": best,
        "gb_per_s": nbytes / best / 1e9 if best > 0 else float("inf"),
    }


def _peer_readers(
    image: Any, level: Any, region: tuple[slice, ...]
) -> tuple[list[tuple[str, Any]], list[str]]:
    """zarr-python's and tensorstore's reads of the same region (local stores only)."""
    import importlib.util

    import zarr

    root = getattr(image.group.store, "root", None)
    if root is None:
        return [], ["peers: only local stores are timed with zarr-python and tensorstore"]
    path = os.path.join(os.fspath(root), *f"{image.group.path}/{level.path}".strip("/").split("/"))
    array = zarr.open_array(path, mode="r")

    def zarr_read() -> None:
        array[region]

    peers: list[tuple[str, Any]] = [("zarr-python", zarr_read)]
    skipped = []
    if importlib.util.find_spec("tensorstore") is None:
        skipped.append("tensorstore: not installed")
    else:
        import tensorstore as ts

        driver = "zarr3" if array.metadata.zarr_format == 3 else "zarr"
        store = ts.open(
            {"driver": driver, "kvstore": {"driver": "file", "path": path}}, read=True
        ).result()

        def ts_read() -> None:
            store[region].read().result()

        peers.append(("tensorstore", ts_read))
    return peers, skipped


# -- demo, info ---------------------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    import numpy as np
    import zarr

    from linumpy_gpu.backends import resolve_backend
    from linumpy_gpu.errors import DeviceFallbackWarning, StoreExistsError
    from linumpy_gpu.image import open_image
    from linumpy_gpu.sample import write_sample

    out = args.out
    # the device is settled before the sample is written: a bad --device writes nothing
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeviceFallbackWarning)
        device = resolve_backend(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        # the sample goes into a new folder of its own: files already in --out are never touched
        path = os.path.join(os.path.abspath(out) if out else tmp, "sample.ome.zarr")
        if os.path.lexists(path):
            raise StoreExistsError(
                f"'{path}' exists; remove it or give --out a folder without a sample in it"
            )
        t0 = time.perf_counter()
        write_sample(path, overwrite=False)
        print(f"wrote a sample OME-Zarr pyramid to {path} in {time.perf_counter() - t0:.2f} s")
        img = open_image(path, device=device)
        for w in caught:
            print(f"note: {w.message}")
        print(img)
        for level in img.levels:
            t0 = time.perf_counter()
            data = level.read()
            _sync(data)
            dt = time.perf_counter() - t0
            host = data if isinstance(data, np.ndarray) else data.get()
            reference = zarr.open_array(os.path.join(path, level.path), mode="r")[...]
            same = np.array_equal(host, reference)
            print(
                f"level {level.index}: read {level.nbytes / 2**20:.1f} MiB as "
                f"{type(data).__module__.split('.')[0]}.{type(data).__name__} on {level.device} in "
                f"{dt * 1e3:.1f} ms ({level.nbytes / dt / 1e9:.2f} GB/s); "
                f"{'equal to' if same else 'DIFFERENT FROM'} zarr-python's read"
            )
            if not same:
                return 1
        tile = img[0][10:42, 100:164, ::2]
        print(
            f"a strided tile img[0][10:42, 100:164, ::2] -> shape {tile.shape}, mean {float(tile.mean()):.1f}"
        )
        print(
            f"physical voxel size of level 0: {dict(zip(img.axis_names, img.scale(0), strict=True))} "
            f"({img.axes[0].unit}), origin {img.translation(0)}"
        )
    return 0


def _sync(data: Any) -> None:
    if not hasattr(data, "__array_interface__"):
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _info(args: argparse.Namespace) -> int:
    import numpy
    import zarr

    print(
        f"linumpy-gpu {__version__}; zarr {zarr.__version__}; numpy {numpy.__version__}; "
        f"python {sys.version.split()[0]}"
    )
    from linumpy_gpu import config
    from linumpy_gpu.gpu.deps import missing_pieces

    settings, sources = config.get(), config.sources()
    print("settings (change with LINUMPY_GPU_<NAME> or linumpy_gpu.config.set):")
    for name in config.names():
        print(f"  {name} = {getattr(settings, name)!r}  ({sources[name]})")
    from linumpy_gpu.codecs.deflate import decoder_name

    decoder = decoder_name()
    print(
        f"gzip/zlib decoder: {decoder}"
        + ("" if decoder == "libdeflate" else " (install the deflate package: reads 2.5x faster)")
    )
    missing = missing_pieces()
    if missing:
        print("GPU path unavailable: needs " + "; ".join(missing))
        return 0
    from linumpy_gpu.gpu.report import info

    for key, value in info().items():
        print(f"{key}: {value}")
    return 0


_COMMANDS = {
    "validate": _validate,
    "inspect": _inspect,
    "convert": _convert,
    "bench": _bench,
    "demo": _demo,
    "info": _info,
}


if __name__ == "__main__":
    sys.exit(main())
