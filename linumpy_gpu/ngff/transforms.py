"""Arithmetic on coordinate transformations: matrices, inverses, parameters kept in arrays.

Points are column vectors ordered like the axes of their coordinate system. A
transformation that is affine has a homogeneous matrix ``H`` of shape
``(n_out + 1, n_in + 1)`` with ``[0, ..., 0, 1]`` as its last row; a sequence
``[f0, f1, f2]`` has the matrix ``H2 @ H1 @ H0``. Displacement and coordinate fields have no
matrix. Nothing here reads a store: parameters kept in arrays are loaded by
:func:`resolve_parameters` through a callable the caller supplies.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from linumpy_gpu.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    UnresolvedParametersError,
)
from linumpy_gpu.ngff.model import (
    Affine,
    Bijection,
    ByDimension,
    ByDimensionItem,
    CoordinateSystemRef,
    Identity,
    MapAxis,
    ProjectAxis,
    Rotation,
    Scale,
    Scene,
    SceneImage,
    Transformation,
    TransformSequence,
    Translation,
)

# Tolerance for the checks of a rotation matrix and of orthogonal columns: float32 matrices
# stored in arrays are orthonormal to about 1e-7.
ORTHO_TOLERANCE = 1e-6


class _DimensionMismatch(Exception):
    """Parameters whose lengths do not fit the dimensionality asked for."""


def to_matrix(transformation: Transformation, ndim: int) -> np.ndarray | None:
    """The ``(ndim + 1) x (ndim + 1)`` homogeneous matrix of ``transformation`` applied to
    ``ndim``-dimensional points, or None where it has none (displacement and coordinate
    fields, or a transformation that changes the number of dimensions).

    Raises :class:`UnresolvedParametersError` when a matrix is kept in an array that
    :func:`resolve_parameters` has not loaded, and :class:`InvalidArgumentError` when the
    parameters do not have ``ndim`` dimensions.
    """
    if isinstance(ndim, bool) or not isinstance(ndim, int) or ndim < 1:
        raise InvalidArgumentError(f"ndim must be a positive integer, got {ndim!r}")
    try:
        h = _homogeneous(transformation, ndim)
    except _DimensionMismatch as exc:
        raise InvalidArgumentError(
            f"a '{transformation.type}' transformation does not apply to {ndim}-D points: {exc}"
        ) from None
    if h is None or h.shape != (ndim + 1, ndim + 1):
        return None
    return h


def affine_parts(
    transformation: Transformation, ndim: int
) -> tuple[tuple[float, ...], tuple[float, ...], bool]:
    """``(scale, translation, exact)`` of a transformation of ``ndim``-D points.

    ``exact`` is true when the transformation amounts to a positive scale followed by a
    translation (its matrix is diagonal apart from the translation). Otherwise ``translation`` is where the origin lands (zeros when unknown)
    and ``scale`` the length of each input axis's unit step when the linear part is a
    rotation times a scale (ones otherwise). A sequence with no matrix of its own (one
    holding a displacement field, say) gives the parts of its longest leading run that has
    one.
    """
    ones, zeros = (1.0,) * ndim, (0.0,) * ndim
    h = _matrix_or_none(transformation, ndim)
    whole = h is not None
    if h is None and isinstance(transformation, TransformSequence):
        for end in range(len(transformation.transformations) - 1, 0, -1):
            prefix = TransformSequence(transformations=transformation.transformations[:end])
            h = _matrix_or_none(prefix, ndim)
            if h is not None:
                break
    if h is None:
        return ones, zeros, False
    linear, offset = h[:ndim, :ndim], h[:ndim, ndim]
    translation = tuple(float(v) for v in offset)
    diagonal = np.diag(linear)
    if np.count_nonzero(linear - np.diag(diagonal)) == 0 and bool(np.all(diagonal > 0)):
        return tuple(float(v) for v in diagonal), translation, whole
    norms = np.linalg.norm(linear, axis=0)
    gram = linear.T @ linear
    off_diagonal = gram - np.diag(np.diag(gram))
    if bool(np.all(norms > 0)) and bool(
        np.all(np.abs(off_diagonal) <= ORTHO_TOLERANCE * float(np.max(norms)) ** 2)
    ):
        return tuple(float(v) for v in norms), translation, False
    return ones, translation, False


def resolve_parameters(
    transformation: Transformation,
    read_array: Callable[[str], np.ndarray],
    *,
    where: str = "",
    ndim: int | None = None,
) -> Transformation:
    """``transformation`` with every matrix kept in an array loaded: ``read_array(path)``
    returns the array at ``path`` (relative to the group holding the metadata). Nested
    transformations are resolved too; the rest is returned unchanged. ``where`` names the
    store in errors: :class:`~linumpy_gpu.errors.InvalidMetadataError` when an array does
    not have the shape the spec requires. ``ndim``: where known (a level's transformation
    maps its N axes to N), an affine must be N x (N+1)."""
    if isinstance(transformation, Affine | Rotation) and transformation.matrix is None:
        path = transformation.path or ""
        array = np.asarray(read_array(path), dtype=float)
        label = f"{transformation.type}.path"
        if array.ndim != 2 or not np.all(np.isfinite(array)):
            raise InvalidMetadataError(
                where, label, f"a 2-D array of finite numbers at '{path}'", array.shape
            )
        if isinstance(transformation, Rotation):
            if array.shape[0] != array.shape[1]:
                raise InvalidMetadataError(where, label, "a square N x N array", array.shape)
            if not is_rotation(array):
                raise InvalidMetadataError(
                    where, label, "an orthonormal matrix with determinant 1", array.tolist()
                )
        elif array.shape[1] < 2:
            raise InvalidMetadataError(where, label, "an M x (N+1) array", array.shape)
        elif ndim is not None and array.shape != (ndim, ndim + 1):
            raise InvalidMetadataError(
                where, label, f"a {ndim} x {ndim + 1} array (one row per axis)", array.shape
            )
        matrix = tuple(tuple(float(v) for v in row) for row in array)
        return replace(transformation, matrix=matrix)
    if isinstance(transformation, TransformSequence):
        return replace(
            transformation,
            transformations=tuple(
                resolve_parameters(t, read_array, where=where, ndim=ndim)
                for t in transformation.transformations
            ),
        )
    if isinstance(transformation, ByDimension):
        return replace(
            transformation,
            transformations=tuple(
                replace(
                    item,
                    transformation=resolve_parameters(item.transformation, read_array, where=where),
                )
                for item in transformation.transformations
            ),
        )
    if isinstance(transformation, Bijection):
        return replace(
            transformation,
            forward=resolve_parameters(transformation.forward, read_array, where=where),
            inverse=resolve_parameters(transformation.inverse, read_array, where=where),
        )
    return transformation


def inverse(transformation: Transformation) -> Transformation | None:
    """The inverse transformation in closed form (input and output swapped), or None where
    there is none: fields, projections, singular matrices, parameters not loaded."""
    t = transformation
    swapped: dict[str, Any] = {"input": t.output, "output": t.input, "name": None}
    if isinstance(t, Identity):
        return Identity(**swapped)
    if isinstance(t, Scale):
        if any(v == 0 for v in t.scale):
            return None
        return Scale(scale=tuple(1.0 / v for v in t.scale), **swapped)
    if isinstance(t, Translation):
        return Translation(translation=tuple(0.0 - v for v in t.translation), **swapped)
    if isinstance(t, MapAxis):
        inv = [0] * len(t.map_axis)
        for i, j in enumerate(t.map_axis):
            inv[j] = i
        return MapAxis(map_axis=tuple(inv), **swapped)
    if isinstance(t, Rotation):
        if t.matrix is None:
            return None
        return Rotation(matrix=tuple(zip(*t.matrix, strict=True)), **swapped)
    if isinstance(t, Affine):
        if t.matrix is None:
            return None
        rows = len(t.matrix)
        if any(len(r) != rows + 1 for r in t.matrix):
            return None
        h = np.vstack([np.array(t.matrix, dtype=float), np.eye(1, rows + 1, rows)])
        if abs(np.linalg.det(h)) < 1e-12:
            return None
        inv_h = np.linalg.inv(h)
        return Affine(matrix=tuple(tuple(float(v) for v in r) for r in inv_h[:rows]), **swapped)
    if isinstance(t, TransformSequence):
        parts = [inverse(c) for c in reversed(t.transformations)]
        if any(p is None for p in parts):
            return None
        return TransformSequence(transformations=tuple(parts), **swapped)  # type: ignore[arg-type]
    if isinstance(t, Bijection):
        return Bijection(forward=t.inverse, inverse=t.forward, **swapped)
    if isinstance(t, ByDimension):
        items = []
        for item in t.transformations:
            inv_item = inverse(item.transformation)
            if inv_item is None:
                return None
            items.append(ByDimensionItem(inv_item, item.output_axes, item.input_axes))
        return ByDimension(transformations=tuple(items), **swapped)
    return None


def scene_images(scene: Scene, target: CoordinateSystemRef | None = None) -> tuple[SceneImage, ...]:
    """Every image coordinate system ``scene`` refers to, each with the transformation
    that maps it into ``target`` (default the scene's reference system), composed along the
    scene's transformations and the inverses of those that have one."""
    target = target or scene.reference
    if target is None:
        return ()
    target = _node(target)
    edges: dict[CoordinateSystemRef, list[tuple[CoordinateSystemRef, Transformation]]] = {}
    images: dict[CoordinateSystemRef, None] = {}
    for t in scene.transformations:
        if t.input is None or t.output is None:
            continue
        a, b = _node(t.input), _node(t.output)
        for ref in (a, b):
            if ref.path:
                images.setdefault(ref)
        edges.setdefault(a, []).append((b, t))
        back = inverse(t)
        if back is not None:
            edges.setdefault(b, []).append((a, back))
    out = []
    for start in images:
        chain = _shortest_chain(start, target, edges)
        transform: Transformation | None
        if chain is None:
            transform = None
        elif not chain:
            transform = Identity(input=start, output=target)
        elif len(chain) == 1:
            transform = chain[0]
        else:
            transform = TransformSequence(transformations=tuple(chain), input=start, output=target)
        out.append(SceneImage(start.path or "", start.name or "", transform))
    return tuple(out)


def is_rotation(matrix: np.ndarray) -> bool:
    """Whether ``matrix`` is square, orthonormal and of determinant 1 (within
    :data:`ORTHO_TOLERANCE`)."""
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        return False
    n = m.shape[0]
    return bool(
        np.allclose(m @ m.T, np.eye(n), atol=ORTHO_TOLERANCE)
        and math.isclose(float(np.linalg.det(m)), 1.0, abs_tol=ORTHO_TOLERANCE)
    )


# -- internals --------------------------------------------------------------------------------


def _node(ref: CoordinateSystemRef) -> CoordinateSystemRef:
    """A graph node: an empty path and a missing one mean the same group."""
    return CoordinateSystemRef(ref.name, ref.path or None)


def _shortest_chain(
    start: CoordinateSystemRef,
    target: CoordinateSystemRef,
    edges: dict[CoordinateSystemRef, list[tuple[CoordinateSystemRef, Transformation]]],
) -> list[Transformation] | None:
    previous: dict[CoordinateSystemRef, tuple[CoordinateSystemRef, Transformation] | None] = {
        start: None
    }
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == target:
            chain: list[Transformation] = []
            while previous[node] is not None:
                node, step = previous[node]  # type: ignore[misc]
                chain.append(step)
            return chain[::-1]
        for nxt, step in edges.get(node, []):
            if nxt not in previous:
                previous[nxt] = (node, step)
                queue.append(nxt)
    return None


def _matrix_or_none(transformation: Transformation, ndim: int) -> np.ndarray | None:
    try:
        h = _homogeneous(transformation, ndim)
    except (_DimensionMismatch, UnresolvedParametersError):
        return None
    if h is None or h.shape != (ndim + 1, ndim + 1):
        return None
    return h


def _homogeneous(t: Transformation, n_in: int) -> np.ndarray | None:
    """The ``(n_out + 1) x (n_in + 1)`` homogeneous matrix of ``t``, or None."""
    if isinstance(t, Identity):
        return np.eye(n_in + 1)
    if isinstance(t, Scale | Translation):
        values = t.scale if isinstance(t, Scale) else t.translation
        if len(values) != n_in:
            raise _DimensionMismatch(f"{len(values)} {t.type} values")
        h = np.eye(n_in + 1)
        if isinstance(t, Scale):
            h[np.arange(n_in), np.arange(n_in)] = values
        else:
            h[:n_in, n_in] = values
        return h
    if isinstance(t, MapAxis):
        if len(t.map_axis) != n_in:
            raise _DimensionMismatch(f"a permutation of {len(t.map_axis)} axes")
        h = np.zeros((n_in + 1, n_in + 1))
        h[np.arange(n_in), list(t.map_axis)] = 1.0
        h[n_in, n_in] = 1.0
        return h
    if isinstance(t, ProjectAxis):
        if any(i >= n_in for i in t.dropped_inputs):
            raise _DimensionMismatch(f"dropped inputs {list(t.dropped_inputs)}")
        kept = [i for i in range(n_in) if i not in t.dropped_inputs]
        n_out = len(kept) + len(t.created_outputs)
        if any(i >= n_out for i in t.created_outputs):
            raise _DimensionMismatch(f"created outputs {list(t.created_outputs)}")
        h = np.zeros((n_out + 1, n_in + 1))
        source = iter(kept)
        for j in range(n_out):
            if j not in t.created_outputs:
                h[j, next(source)] = 1.0
        h[n_out, n_in] = 1.0
        return h
    if isinstance(t, Affine | Rotation):
        if t.matrix is None:
            raise UnresolvedParametersError(
                f"the '{t.type}' matrix is stored at '{t.path}': load it with "
                "resolve_parameters(transformation, read_array) first"
            )
        m = np.array(t.matrix, dtype=float)
        cols = n_in + 1 if isinstance(t, Affine) else n_in
        if m.ndim != 2 or m.shape[1] != cols:
            raise _DimensionMismatch(f"a {t.type} matrix of shape {m.shape}")
        if isinstance(t, Rotation):
            if m.shape[0] != n_in:
                raise _DimensionMismatch(f"a rotation matrix of shape {m.shape}")
            m = np.hstack([m, np.zeros((n_in, 1))])
        return np.vstack([m, np.eye(1, n_in + 1, n_in)])
    if isinstance(t, TransformSequence):
        h = np.eye(n_in + 1)
        for child in t.transformations:
            step = _homogeneous(child, h.shape[0] - 1)
            if step is None:
                return None
            h = step @ h
        return h
    if isinstance(t, ByDimension):
        outputs = [o for item in t.transformations for o in item.output_axes]
        n_out = len(outputs)
        if sorted(outputs) != list(range(n_out)):
            raise _DimensionMismatch(f"output axes {outputs}")
        h = np.zeros((n_out + 1, n_in + 1))
        h[n_out, n_in] = 1.0
        for item in t.transformations:
            if any(i >= n_in for i in item.input_axes):
                raise _DimensionMismatch(f"input axes {list(item.input_axes)}")
            part = _homogeneous(item.transformation, len(item.input_axes))
            if part is None:
                return None
            if part.shape[0] - 1 != len(item.output_axes):
                raise _DimensionMismatch(f"output axes {list(item.output_axes)}")
            for a, out_axis in enumerate(item.output_axes):
                for b, in_axis in enumerate(item.input_axes):
                    h[out_axis, in_axis] = part[a, b]
                h[out_axis, n_in] = part[a, -1]
        return h
    if isinstance(t, Bijection):
        return _homogeneous(t.forward, n_in)
    return None  # displacement and coordinate fields have no matrix
