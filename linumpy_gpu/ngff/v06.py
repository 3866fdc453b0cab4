"""NGFF 0.6 (zarr v3): coordinate systems and coordinate transformations (RFC-5).

A multiscale image declares ``coordinateSystems``; each level's single transformation maps
its array (``input: {"path": <dataset path>}``) into one named coordinate system
(``output: {"name": ...}``), the same for every level: the image's "intrinsic" coordinate
system, whose axes are the image's axes. Multiscale-level ``coordinateTransformations``
link the intrinsic system to other systems of the image or of its label images. A
``scene`` group links the coordinate systems of several images.

Parsing is pure: parameters kept in zarr arrays (``path``) stay paths here, see
:func:`.transforms.resolve_parameters`. The spec allows a level only a ``scale``, an
``identity`` or a ``sequence`` of one scale and one translation; other transformations
there are read with a :class:`~linumpy_gpu.errors.MetadataWarning` and their levels are
marked inexact (:attr:`.model.DatasetMeta.exact`), so nothing is dropped unnoticed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from linumpy_gpu.errors import InvalidMetadataError, MetadataWarning, warn
from linumpy_gpu.ngff import _common as c
from linumpy_gpu.ngff.model import (
    Affine,
    Bijection,
    ByDimension,
    ByDimensionItem,
    Channel,
    Coordinates,
    CoordinateSystem,
    CoordinateSystemRef,
    DatasetMeta,
    Displacements,
    Identity,
    ImageLabelMeta,
    MapAxis,
    MultiscaleMeta,
    PlateMeta,
    ProjectAxis,
    Rotation,
    Scale,
    Scene,
    Transformation,
    TransformSequence,
    Translation,
    WellMeta,
)
from linumpy_gpu.ngff.transforms import affine_parts, is_rotation

VERSION = "0.6"
TYPES = (
    "identity",
    "mapAxis",
    "projectAxis",
    "scale",
    "translation",
    "affine",
    "rotation",
    "sequence",
    "byDimension",
    "bijection",
    "displacements",
    "coordinates",
)
# A transformation and the number of dimensions it outputs, where known.
_Parsed = tuple[Transformation, int | None]
# Transformations that may link an image to one of its label images.
LABEL_LINK_TYPES = ("identity", "scale", "translation", "sequence")


# -- images -------------------------------------------------------------------------------------


def parse_multiscales(block: Mapping[str, Any], where: str, index: int = 0) -> MultiscaleMeta:
    """``multiscales[index]`` of an image's ``ome`` block (with ``omero`` and
    ``image-label``)."""
    ms, prefix = c.multiscale_entry(block, where, index)
    systems = parse_coordinate_systems(
        ms.get("coordinateSystems"), where, f"{prefix}.coordinateSystems", image=True
    )
    by_name = {cs.name: cs for cs in systems}
    datasets = c.dataset_entries(ms, where, prefix)

    raws = []
    intrinsic = ""
    for field, ds, path in datasets:
        ct_field = f"{field}.coordinateTransformations"
        raw_list = ds.get("coordinateTransformations")
        if not isinstance(raw_list, list) or len(raw_list) != 1:
            raise InvalidMetadataError(
                where, ct_field, "a list holding one transformation", raw_list
            )
        raw = c.mapping(raw_list[0], where, f"{ct_field}[0]")
        t_field = f"{ct_field}[0]"
        source = _ref(raw.get("input"), where, f"{t_field}.input")
        if source.path != path:
            raise InvalidMetadataError(
                where, f"{t_field}.input.path", f"'{path}', the path of the dataset", source.path
            )
        target = _ref(raw.get("output"), where, f"{t_field}.output")
        if target.name is None or target.name not in by_name:
            raise InvalidMetadataError(
                where,
                f"{t_field}.output.name",
                f"the name of one of the coordinateSystems {sorted(by_name)}",
                target.name,
            )
        if not intrinsic:
            intrinsic = target.name
        elif target.name != intrinsic:
            raise InvalidMetadataError(
                where,
                f"{t_field}.output.name",
                f"'{intrinsic}', the coordinate system of every level",
                target.name,
            )
        raws.append((t_field, raw, path, source, target))

    axes = by_name[intrinsic].axes
    ndim = len(axes)
    levels = []
    for t_field, raw, path, source, target in raws:
        t, _ = parse_transformation(raw, where, t_field, n_in=ndim, n_out=ndim)
        t = _with_refs(t, source, target)
        if not _is_level_form(t):
            warn(
                f"{where}: {t_field} has type '{t.type}'; NGFF 0.6 allows a level only a "
                "scale, an identity or a sequence of one scale and one translation. It is "
                "read anyway: DatasetMeta.exact says whether the level's scale and "
                "translation describe it",
                MetadataWarning,
            )
        scale, translation, exact = affine_parts(t, ndim)
        levels.append(DatasetMeta(path, scale, translation, t, exact))
    c.check_scales_grow(
        [ds.scale if ds.exact else None for ds in levels], where, prefix, strict=True
    )
    extra = _multiscale_transformations(
        ms.get("coordinateTransformations"), where, prefix, by_name, intrinsic
    )
    _warn_unlinked(systems, extra, intrinsic, where, prefix)
    return MultiscaleMeta(
        version=VERSION,
        axes=axes,
        datasets=tuple(levels),
        name=c.as_str(ms.get("name")),
        type=c.as_str(ms.get("type")),
        metadata=c.method_metadata(ms.get("metadata"), where, f"{prefix}.metadata"),
        channels=parse_omero(block.get("omero"), where),
        image_label=parse_image_label(block.get("image-label"), where),
        coordinate_systems=systems,
        coordinate_system=intrinsic,
        transformations=extra,
    )


def parse_coordinate_systems(
    raw: Any, where: str, field: str, *, image: bool
) -> tuple[CoordinateSystem, ...]:
    """A non-empty list of coordinate systems with unique non-empty names. Every system's
    axes follow the 0.6 axes rules; inside a multiscale image (``image``) they also follow
    the image layout rules (2 to 5 axes, ordered time, channel or custom, space)."""
    raw = c.non_empty_list(raw, where, field, "a non-empty list of coordinate systems")
    out: list[CoordinateSystem] = []
    for i, cs in enumerate(raw):
        cs_field = f"{field}[{i}]"
        cs = c.mapping(cs, where, cs_field)
        name = cs.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidMetadataError(where, f"{cs_field}.name", "a non-empty string", name)
        if any(other.name == name for other in out):
            raise InvalidMetadataError(
                where, f"{cs_field}.name", "a name no other coordinate system uses", name
            )
        axes_raw = c.non_empty_list(
            cs.get("axes"), where, f"{cs_field}.axes", "a non-empty list of axes"
        )
        axes = tuple(
            c.parse_axis(a, where, f"{cs_field}.axes[{k}]", rfc5=True)
            for k, a in enumerate(axes_raw)
        )
        if image:
            c.check_image_axes(axes, where, f"{cs_field}.axes", rfc5=True)
        else:
            c.check_coordinate_system_axes(axes, where, f"{cs_field}.axes")
        out.append(CoordinateSystem(name, axes))
    return tuple(out)


def _multiscale_transformations(
    raw: Any,
    where: str,
    prefix: str,
    systems: Mapping[str, CoordinateSystem],
    intrinsic: str,
) -> tuple[Transformation, ...]:
    """Multiscale-level transformations: each links the intrinsic coordinate system (by
    name, no path) to another system of the image, or (with a path) to a coordinate system
    of a label image, then only by an identity, scale, translation or a sequence of those."""
    if raw is None:
        return ()
    field = f"{prefix}.coordinateTransformations"
    raw = c.non_empty_list(raw, where, field, "a non-empty list of transformations")
    out = []
    for k, item in enumerate(raw):
        t_field = f"{field}[{k}]"
        item = c.mapping(item, where, t_field)
        source = _ref(item.get("input"), where, f"{t_field}.input", named=True)
        target = _ref(item.get("output"), where, f"{t_field}.output", named=True)
        ends = {"input": source, "output": target}
        own = [side for side, ref in ends.items() if ref.name == intrinsic and not ref.path]
        if not own:
            raise InvalidMetadataError(
                where,
                t_field,
                f"an input or output naming the intrinsic coordinate system '{intrinsic}'",
                {side: ref.name for side, ref in ends.items()},
            )
        other_side = "output" if own[0] == "input" else "input"
        other = ends[other_side]
        kind = item.get("type")
        if other.path:
            if kind not in LABEL_LINK_TYPES:
                raise InvalidMetadataError(
                    where,
                    f"{t_field}.type",
                    "an identity, scale, translation or sequence of those to link a label image",
                    kind,
                )
        elif other.name not in systems:
            raise InvalidMetadataError(
                where,
                f"{t_field}.{other_side}.name",
                f"the name of one of the coordinateSystems {sorted(systems)}",
                other.name,
            )
        n_own = len(systems[intrinsic].axes)
        dims = {
            side: n_own if ref.path else len(systems[ref.name].axes)  # type: ignore[index]
            for side, ref in ends.items()
        }
        t, _ = parse_transformation(item, where, t_field, n_in=dims["input"], n_out=dims["output"])
        if other.path and not _is_label_link(t):
            raise InvalidMetadataError(
                where,
                t_field,
                "an identity, scale, translation or sequence of those to link a label image",
                t.type,
            )
        out.append(_with_refs(t, source, target))
    return tuple(out)


def _warn_unlinked(
    systems: tuple[CoordinateSystem, ...],
    transformations: tuple[Transformation, ...],
    intrinsic: str,
    where: str,
    prefix: str,
) -> None:
    """The spec wants the coordinate systems linked into one graph; a system no
    transformation of the image reaches may be linked by a scene above it, so this is a
    warning."""
    linked = {intrinsic}
    changed = True
    while changed:
        changed = False
        for t in transformations:
            ends = {r.name for r in (t.input, t.output) if r is not None and not r.path and r.name}
            if ends & linked and not ends <= linked:
                linked |= ends
                changed = True
    for i, cs in enumerate(systems):
        if cs.name not in linked:
            warn(
                f"{where}: {prefix}.coordinateSystems[{i}] ('{cs.name}') is not linked to "
                f"'{intrinsic}' by any of the image's coordinateTransformations",
                MetadataWarning,
            )


def _is_level_form(t: Transformation) -> bool:
    """What NGFF 0.6 allows a level: scale, identity, or sequence of a scale then a
    translation."""
    if isinstance(t, Scale | Identity):
        return True
    return (
        isinstance(t, TransformSequence)
        and len(t.transformations) == 2
        and isinstance(t.transformations[0], Scale)
        and isinstance(t.transformations[1], Translation)
    )


def _is_label_link(t: Transformation) -> bool:
    if isinstance(t, Identity | Scale | Translation):
        return True
    return isinstance(t, TransformSequence) and all(
        isinstance(x, Scale | Translation) for x in t.transformations
    )


# -- transformations ----------------------------------------------------------------------------


def parse_transformation(
    raw: Any,
    where: str,
    field: str,
    *,
    n_in: int | None = None,
    n_out: int | None = None,
) -> tuple[Transformation, int | None]:
    """One transformation object and the number of dimensions it outputs (None where its
    parameters do not tell and ``n_out`` was not given).

    ``n_in`` / ``n_out``: the dimensionality of its input and output coordinate systems
    where known; parameters must fit them. ``input`` and ``output``, when present, are
    objects with a string ``name`` and/or ``path``.
    """
    raw = c.mapping(raw, where, field)
    kind = raw.get("type")
    if kind not in TYPES:
        raise InvalidMetadataError(where, f"{field}.type", f"one of {', '.join(TYPES)}", kind)
    common: dict[str, Any] = {
        "name": c.optional_str(raw, "name", where, field),
        "input": _optional_ref(raw.get("input"), where, f"{field}.input"),
        "output": _optional_ref(raw.get("output"), where, f"{field}.output"),
    }
    parser = _PARSERS[kind]
    t, out_dims = parser(raw, where, field, n_in, n_out, common)
    if n_out is not None and out_dims is not None and out_dims != n_out:
        raise InvalidMetadataError(
            where,
            field,
            f"a '{kind}' transformation with {n_out} output dimensions",
            f"{out_dims} output dimensions",
        )
    return t, out_dims if out_dims is not None else n_out


def _ref(raw: Any, where: str, field: str, *, named: bool = False) -> CoordinateSystemRef:
    """A required ``input`` / ``output`` object: optional string ``name`` and ``path``
    (``named``: the name is required)."""
    ref = _optional_ref(raw, where, field, named=named)
    if ref is None:
        raise InvalidMetadataError(where, field, _ref_expected(field, named), raw)
    return ref


def _ref_expected(field: str, named: bool) -> str:
    example = "{'name': ...}" if named or field.endswith("output") else "{'path': ...}"
    return f"an object such as {example}"


def _optional_ref(
    raw: Any, where: str, field: str, *, named: bool = False
) -> CoordinateSystemRef | None:
    """An optional ``input`` / ``output`` object (None when absent)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InvalidMetadataError(where, field, _ref_expected(field, named), raw)
    name = c.optional_str(raw, "name", where, field)
    path = c.optional_str(raw, "path", where, field)
    if named and not name:
        raise InvalidMetadataError(where, f"{field}.name", "the name of a coordinate system", name)
    return CoordinateSystemRef(name, path)


def _with_refs(
    t: Transformation, source: CoordinateSystemRef, target: CoordinateSystemRef
) -> Transformation:
    return replace(t, input=source, output=target)


def _check_dims(
    n: int, expected: int | None, where: str, field: str, what: str, found: Any
) -> None:
    if expected is not None and n != expected:
        raise InvalidMetadataError(where, field, f"{expected} {what}", found)


def _same_dims(n_in: int | None, n_out: int | None, where: str, field: str) -> int | None:
    """The dimensionality of a transformation that keeps it (identity, bijection,
    displacements): that of its input and output, which must agree where both are known."""
    if n_in is not None and n_out is not None and n_in != n_out:
        raise InvalidMetadataError(
            where, field, "input and output coordinate systems with as many axes", (n_in, n_out)
        )
    return n_in if n_in is not None else n_out


def _parse_identity(
    raw: Mapping[str, Any],
    where: str,
    field: str,
    n_in: int | None,
    n_out: int | None,
    common: dict[str, Any],
) -> _Parsed:
    return Identity(**common), _same_dims(n_in, n_out, where, field)


def _parse_vector(
    raw: Mapping[str, Any],
    where: str,
    field: str,
    n_in: int | None,
    n_out: int | None,
    common: dict[str, Any],
) -> _Parsed:
    kind = raw["type"]
    if kind not in raw and "path" in raw:
        raise InvalidMetadataError(
            where, f"{field}.{kind}", f"an inline '{kind}' list (0.6 has no path-stored {kind})"
        )
    values = c.numbers(raw.get(kind), where, f"{field}.{kind}", positive=kind == "scale")
    _check_dims(
        len(values), n_in, where, f"{field}.{kind}", "values, one per input axis", len(values)
    )
    if kind == "scale":
        return Scale(scale=values, **common), len(values)
    return Translation(translation=values, **common), len(values)


def _parse_map_axis(
    raw: Mapping[str, Any],
    where: str,
    field: str,
    n_in: int | None,
    n_out: int | None,
    common: dict[str, Any],
) -> _Parsed:
    perm = raw.get("mapAxis")
    if not (
        isinstance(perm, list)
        and 2 <= len(perm) <= 5
        and all(c.is_int(v) for v in perm)
        and sorted(perm) == list(range(len(perm)))
    ):
        raise InvalidMetadataError(
            where, f"{field}.mapAxis", "a permutation of 0..N-1 for N of 2 to 5 axes", perm
        )
    _check_dims(len(perm), n_in, where, f"{field}.mapAxis", "indices, one per input axis", perm)
    return MapAxis(map_axis=tuple(perm), **common), len(perm)


def _parse_project_axis(
    raw: Mapping[str, Any],
    where: str,
    field: str,
    n_in: int | None,
    n_out: int | None,
    common: dict[str, Any],
) -> _Parsed:
    if "droppedInputs" not in raw and "createdOutputs" not in raw:
        raise InvalidMetadataError(where, field, "'droppedInputs' or 'createdOutputs'")
    lists: dict[str, tuple[int, ...]] = {}
    for key in ("droppedInputs", "createdOutputs"):
        value = raw.get(key)
        if value is None:
            lists[key] = ()
            continue
        lists[key] = c.indices(value, where, f"{field}.{key}")
        if not 1 <= len(lists[key]) <= 3:
            raise InvalidMetadataError(where, f"{field}.{key}", "1 to 3 indices", value)
    dropped, created = lists["droppedInputs"], lists["createdOutputs"]
    if n_in is not None and any(i >= n_in for i in dropped):
        raise InvalidMetadataError(
            where, f"{field}.droppedInputs", f"indices below {n_in}, the input axis count", dropped
        )
    out = n_in - len(dropped) + len(created) if n_in is not None else n_out
    if out is not None and any(i >= out for i in created):
        raise InvalidMetadataError(
            where, f"{field}.createdOutputs", f"indices below {out}, the output axis count", created
        )
    t = ProjectAxis(dropped_inputs=dropped, created_outputs=created, **common)
    return t, out


def _matrix(raw: Any, where: str, field: str) -> tuple[tuple[float, ...], ...]:
    if not (
        isinstance(raw, list)
        and raw
        and all(isinstance(r, list) and r and all(c.is_number(v) for v in r) for r in raw)
        and len({len(r) for r in raw}) == 1
    ):
        raise InvalidMetadataError(
            where, field, "a matrix: a list of equally long rows of numbers", raw
        )
    return tuple(tuple(float(v) for v in r) for r in raw)


def _matrix_source(
    raw: Mapping[str, Any], where: str, field: str, key: str
) -> tuple[tuple[tuple[float, ...], ...] | None, str | None]:
    if (key in raw) == ("path" in raw):
        raise InvalidMetadataError(
            where, field, f"either an inline '{key}' matrix or a 'path' to one, not both"
        )
    if "path" in raw:
        path = raw["path"]
        if not isinstance(path, str) or not path:
            raise InvalidMetadataError(where, f"{field}.path", "a non-empty string", path)
        return None, path
    return _matrix(raw[key], where, f"{field}.{key}"), None


def _parse_affine(
    raw: Mapping[str, Any],
    where: str,
    field: str,
    n_in: int | None,
    n_out: int | None,
    common: dict[str, Any],
) -> _Parsed:
    matrix, path = _matrix_source(raw, where, field, "affine")
    if matrix is None:
        return Affine(path=path, **common), n_out
    rows, cols = len(matrix), len(matrix[0])
    if cols < 2:
        raise InvalidMetadataError(where, f"{field}.affine", "rows of N+1 numbers", matrix)
    _check_dims(
        cols,
        None if n_in is None else n_in + 1,
        where,
        f"{field}.affine",
        "numbers per row (N+1 for N input axes)",
        cols,
    )
    _check_dims(rows, n_out, where, f"{field}.affine", "rows, one per output axis", rows)
    return Affine(matrix=matrix, **common), rows


def _parse_rotation(
    raw: Mapping[str, Any],
    where: str,
    field: str,
    n_in: int | None,
    n_out: int | None,
    common: dict[str, Any],
) -> _Parsed:
    matrix, path = _matrix_source(raw, where, field, "rotation")
    if matrix is None:
        return Rotation(path=path, **common), n_in if n_in is not None else n_out
    n = len(matrix)
    if len(matrix[0]) != n or not 2 <= n <= 5:
        raise InvalidMetadataError(
            where, f"{field}.rotation", "a square N x N matrix, N of 2 to 5", matrix
        )
    _check_dims(n, n_in, where, f"{field}.rotation", "rows and columns, one per axis", n)
    _check_dims(n, n_out, where, f"{field}.rotation", "rows and columns, one per axis", n)
    if not is_rotation(np.array(matrix)):
        raise InvalidMetadataError(
            where, f"{field}.rotation", "an orthonormal matrix with determinant 1", matrix
        )
    return Rotation(matrix=matrix, **common), n


def _parse_sequence(
    raw: Mapping[str, Any],
    where: str,
    field: str,
    n_in: int | None,
    n_out: int | None,
    common: dict[str, Any],
) -> _Parsed:
    items = c.non_empty_list(raw.get("transformations"), where, f"{field}.transformations")
    parts = []
    dims = n_in
    for i, item in enumerate(items):
        last = i == len(items) - 1
        t, dims = parse_transformation(
            item, where, f"{field}.transformations[{i}]", n_in=dims, n_out=n_out if last else None
        )
        parts.append(t)
    return TransformSequence(transformations=tuple(parts), **common), dims


def _parse_by_dimension(
    raw: Mapping[str, Any],
    where: str,
    field: str,
    n_in: int | None,
    n_out: int | None,
    common: dict[str, Any],
) -> _Parsed:
    items = c.non_empty_list(raw.get("transformations"), where, f"{field}.transformations")
    parts = []
    outputs: list[int] = []
    for i, item in enumerate(items):
        i_field = f"{field}.transformations[{i}]"
        item = c.mapping(item, where, i_field)
        axes = {}
        # Some writers spelled the keys in snake case; the spec's camel case wins.
        for key, legacy in (("inputAxes", "input_axes"), ("outputAxes", "output_axes")):
            value = item.get(key, item.get(legacy))
            if value is None:
                raise InvalidMetadataError(where, f"{i_field}.{key}", "a list of axis indices")
            axes[key] = c.indices(value, where, f"{i_field}.{key}")
        ins, outs = axes["inputAxes"], axes["outputAxes"]
        if n_in is not None and any(a >= n_in for a in ins):
            raise InvalidMetadataError(
                where, f"{i_field}.inputAxes", f"indices below {n_in}, the input axis count", ins
            )
        if "transformation" not in item:
            raise InvalidMetadataError(where, f"{i_field}.transformation", "a transformation")
        t, _ = parse_transformation(
            item["transformation"],
            where,
            f"{i_field}.transformation",
            n_in=len(ins),
            n_out=len(outs),
        )
        parts.append(ByDimensionItem(t, ins, outs))
        outputs.extend(outs)
    count = n_out if n_out is not None else len(outputs)
    if sorted(outputs) != list(range(count)):
        raise InvalidMetadataError(
            where,
            f"{field}.transformations",
            f"items whose outputAxes name each of the {count} output axes exactly once",
            outputs,
        )
    return ByDimension(transformations=tuple(parts), **common), count


def _parse_bijection(
    raw: Mapping[str, Any],
    where: str,
    field: str,
    n_in: int | None,
    n_out: int | None,
    common: dict[str, Any],
) -> _Parsed:
    n = _same_dims(n_in, n_out, where, field)
    for key in ("forward", "inverse"):
        if key not in raw:
            raise InvalidMetadataError(where, f"{field}.{key}", "a transformation")
    forward, dims = parse_transformation(raw["forward"], where, f"{field}.forward", n_in=n, n_out=n)
    inverse, _ = parse_transformation(raw["inverse"], where, f"{field}.inverse", n_in=dims, n_out=n)
    return Bijection(forward=forward, inverse=inverse, **common), dims


def _parse_field(
    raw: Mapping[str, Any],
    where: str,
    field: str,
    n_in: int | None,
    n_out: int | None,
    common: dict[str, Any],
) -> _Parsed:
    path = raw.get("path")
    if not isinstance(path, str) or not path:
        raise InvalidMetadataError(where, f"{field}.path", "the path of a zarr group", path)
    interpolation = c.optional_str(raw, "interpolation", where, field)
    if raw["type"] == "displacements":
        n = _same_dims(n_in, n_out, where, field)
        return Displacements(path=path, interpolation=interpolation, **common), n
    return Coordinates(path=path, interpolation=interpolation, **common), n_out


_PARSERS = {
    "identity": _parse_identity,
    "scale": _parse_vector,
    "translation": _parse_vector,
    "mapAxis": _parse_map_axis,
    "projectAxis": _parse_project_axis,
    "affine": _parse_affine,
    "rotation": _parse_rotation,
    "sequence": _parse_sequence,
    "byDimension": _parse_by_dimension,
    "bijection": _parse_bijection,
    "displacements": _parse_field,
    "coordinates": _parse_field,
}


# -- scenes -------------------------------------------------------------------------------------


def parse_scene(block: Mapping[str, Any], where: str) -> Scene:
    """The ``scene`` block: a non-empty list of transformations whose input and output name
    a coordinate system, either the scene's own (no path) or one of the image at ``path``;
    optional coordinate systems of the scene."""
    scene = c.mapping(block.get("scene"), where, "scene")
    systems: tuple[CoordinateSystem, ...] = ()
    if scene.get("coordinateSystems") is not None:
        systems = parse_coordinate_systems(
            scene["coordinateSystems"], where, "scene.coordinateSystems", image=False
        )
    by_name = {cs.name: cs for cs in systems}
    field = "scene.coordinateTransformations"
    raw = c.non_empty_list(
        scene.get("coordinateTransformations"), where, field, "a non-empty list of transformations"
    )
    out = []
    for k, item in enumerate(raw):
        t_field = f"{field}[{k}]"
        item = c.mapping(item, where, t_field)
        ends = {}
        for side in ("input", "output"):
            ref = _ref(item.get(side), where, f"{t_field}.{side}", named=True)
            if not ref.path and ref.name not in by_name:
                raise InvalidMetadataError(
                    where,
                    f"{t_field}.{side}.name",
                    "a coordinate system of the scene, or a 'path' to the image that has it",
                    ref.name,
                )
            ends[side] = ref
        dims = {
            side: None if ref.path else len(by_name[ref.name].axes)  # type: ignore[index]
            for side, ref in ends.items()
        }
        t, _ = parse_transformation(item, where, t_field, n_in=dims["input"], n_out=dims["output"])
        out.append(_with_refs(t, ends["input"], ends["output"]))
    return Scene(VERSION, systems, tuple(out))


# -- display, labels, plates ----------------------------------------------------------------------


def parse_omero(raw: Any, where: str) -> tuple[Channel, ...]:
    """The ``omero`` block; color and window optional, a window complete when present."""
    return c.parse_omero(raw, where, mode="typed")


def parse_image_label(raw: Any, where: str) -> ImageLabelMeta | None:
    """The ``image-label`` block: integer label values, unique among the colors, and the
    colors and properties lists non-empty when present."""
    return c.parse_image_label(raw, VERSION, where, integers=True, non_empty=True)


def parse_plate(block: Mapping[str, Any], where: str) -> PlateMeta:
    """The ``plate`` block: 0.4 rules, with non-empty rows, columns and wells."""
    return c.parse_plate(block, VERSION, where, strict=True, non_empty=True)


def parse_well(block: Mapping[str, Any], where: str) -> WellMeta:
    """The ``well`` block: unique field paths that are zarr node names."""
    return c.parse_well(block, VERSION, where, path_rule="node-name")
