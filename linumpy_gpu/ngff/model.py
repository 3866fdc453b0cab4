"""Plain, immutable descriptions of OME-NGFF metadata (0.1 to 0.6). No I/O, no arrays.

Every version's parser produces these same classes, so callers never branch on the version
of the file they read. Coordinate transformations (NGFF 0.6, RFC-5) are a small family of
frozen dataclasses; :mod:`.transforms` turns them into matrices and loads parameters that a
store keeps in arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

SPACE_UNITS = frozenset(
    [
        "angstrom",
        "attometer",
        "centimeter",
        "decimeter",
        "exameter",
        "femtometer",
        "foot",
        "gigameter",
        "hectometer",
        "inch",
        "kilometer",
        "megameter",
        "meter",
        "micrometer",
        "mile",
        "millimeter",
        "nanometer",
        "parsec",
        "petameter",
        "picometer",
        "terameter",
        "yard",
        "yoctometer",
        "yottameter",
        "zeptometer",
        "zettameter",
    ]
)
TIME_UNITS = frozenset(
    [
        "attosecond",
        "centisecond",
        "day",
        "decisecond",
        "exasecond",
        "femtosecond",
        "gigasecond",
        "hectosecond",
        "hour",
        "kilosecond",
        "megasecond",
        "microsecond",
        "millisecond",
        "minute",
        "nanosecond",
        "petasecond",
        "picosecond",
        "second",
        "terasecond",
        "yoctosecond",
        "yottasecond",
        "zeptosecond",
        "zettasecond",
    ]
)

# NGFF 0.1 and 0.2 images carry no axes: they are always 5-D, in this order.
IMPLICIT_AXES = ("t", "c", "z", "y", "x")


@dataclass(frozen=True)
class Axis:
    """One axis of an image or coordinate system: its name, type ('space', 'time',
    'channel', a custom type or None) and unit. ``discrete`` and ``long_name`` come from
    NGFF 0.6 and are None for earlier versions."""

    name: str
    type: str | None = None
    unit: str | None = None
    discrete: bool | None = None
    long_name: str | None = None


# -- coordinate systems and transformations (NGFF 0.6, RFC-5) --------------------------------


@dataclass(frozen=True)
class CoordinateSystemRef:
    """The ``input`` or ``output`` of a transformation: a coordinate system ``name``, and a
    ``path`` to the group (or, for a dataset's transformation, the array) it belongs to.
    A missing ``path`` means the group holding the metadata."""

    name: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class CoordinateSystem:
    """A named coordinate system and its axes, in the order of point coordinates."""

    name: str
    axes: tuple[Axis, ...]

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The names of the axes, in order."""
        return tuple(a.name for a in self.axes)


@dataclass(frozen=True, kw_only=True)
class Transformation:
    """Base of the coordinate transformations. ``input`` and ``output`` are set on a
    top-level transformation and usually left out inside a wrapper (sequence, byDimension,
    bijection). ``type`` is the JSON ``type`` of each subclass."""

    input: CoordinateSystemRef | None = None
    output: CoordinateSystemRef | None = None
    name: str | None = None
    type: ClassVar[str] = ""


@dataclass(frozen=True, kw_only=True)
class Identity(Transformation):
    """Maps every coordinate to itself."""

    type: ClassVar[str] = "identity"


@dataclass(frozen=True, kw_only=True)
class MapAxis(Transformation):
    """An axis permutation: output axis ``i`` takes the value of input axis ``map_axis[i]``."""

    map_axis: tuple[int, ...]
    type: ClassVar[str] = "mapAxis"


@dataclass(frozen=True, kw_only=True)
class ProjectAxis(Transformation):
    """Drops the input axes at ``dropped_inputs`` and inserts zero-valued output axes at
    ``created_outputs``."""

    dropped_inputs: tuple[int, ...] = ()
    created_outputs: tuple[int, ...] = ()
    type: ClassVar[str] = "projectAxis"


@dataclass(frozen=True, kw_only=True)
class Scale(Transformation):
    """Multiplies coordinate ``i`` by ``scale[i]``."""

    scale: tuple[float, ...]
    type: ClassVar[str] = "scale"


@dataclass(frozen=True, kw_only=True)
class Translation(Transformation):
    """Adds ``translation[i]`` to coordinate ``i``."""

    translation: tuple[float, ...]
    type: ClassVar[str] = "translation"


@dataclass(frozen=True, kw_only=True)
class Affine(Transformation):
    """An affine map from N to M dimensions: the upper M x (N+1) rows of its homogeneous
    matrix, inline (``matrix``, rows of numbers) or in a zarr array at ``path`` (then
    ``matrix`` is None until :func:`~linumpy_gpu.ngff.resolve_parameters` loads it)."""

    matrix: tuple[tuple[float, ...], ...] | None = None
    path: str | None = None
    type: ClassVar[str] = "affine"


@dataclass(frozen=True, kw_only=True)
class Rotation(Transformation):
    """An N x N rotation matrix (orthonormal, determinant 1), inline (``matrix``) or in a
    zarr array at ``path`` (``matrix`` None until loaded)."""

    matrix: tuple[tuple[float, ...], ...] | None = None
    path: str | None = None
    type: ClassVar[str] = "rotation"


@dataclass(frozen=True, kw_only=True)
class TransformSequence(Transformation):
    """``transformations`` applied in order: the first one to the input point, each next
    one to the result of the previous."""

    transformations: tuple[Transformation, ...]
    type: ClassVar[str] = "sequence"


@dataclass(frozen=True)
class ByDimensionItem:
    """One part of a :class:`ByDimension`: ``transformation`` maps the input axes at
    ``input_axes`` to the output axes at ``output_axes`` (indices into the parent's input
    and output coordinate systems)."""

    transformation: Transformation
    input_axes: tuple[int, ...]
    output_axes: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class ByDimension(Transformation):
    """A transformation built from lower-dimensional ones on subsets of the axes; every
    output axis is produced by exactly one item."""

    transformations: tuple[ByDimensionItem, ...]
    type: ClassVar[str] = "byDimension"


@dataclass(frozen=True, kw_only=True)
class Bijection(Transformation):
    """An invertible transformation given as an explicit ``forward`` and ``inverse``."""

    forward: Transformation
    inverse: Transformation
    type: ClassVar[str] = "bijection"


@dataclass(frozen=True, kw_only=True)
class Displacements(Transformation):
    """A displacement field (relative shifts) stored as a multiscale image at ``path``."""

    path: str
    interpolation: str | None = None
    type: ClassVar[str] = "displacements"


@dataclass(frozen=True, kw_only=True)
class Coordinates(Transformation):
    """A coordinate field (absolute positions) stored as a multiscale image at ``path``."""

    path: str
    interpolation: str | None = None
    type: ClassVar[str] = "coordinates"


# -- images ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetMeta:
    """One pyramid level: its array path and where its voxels lie in the image's axes.

    ``transform`` is the full transformation from the array's indices to the image's axes
    (the "intrinsic" coordinate system in NGFF 0.6; for earlier versions the scale and
    translation, multiscale-level ones composed in). ``scale`` and ``translation`` are the
    same mapping as per-axis numbers: exact when ``exact`` is true. When the transformation
    is more than a scale and a translation (a rotation, an affine with shear, a displacement
    field, parameters stored in an array), ``exact`` is false, ``translation`` is where voxel
    0 lands when that is known (else zeros) and ``scale`` is the voxel size along each array
    axis when the linear part is a rotation times a scale (else ones).
    """

    path: str
    scale: tuple[float, ...]
    translation: tuple[float, ...]
    transform: Transformation | None = None
    exact: bool = True


@dataclass(frozen=True)
class Channel:
    """One entry of the transitional ``omero.channels`` list."""

    label: str | None
    color: str | None
    window: dict[str, float] | None
    active: bool | None

    @property
    def rgb(self) -> tuple[int, int, int] | None:
        """The channel color as an (r, g, b) tuple of 0-255 integers."""
        if not self.color or len(self.color) != 6:
            return None
        return tuple(int(self.color[i : i + 2], 16) for i in (0, 2, 4))  # type: ignore[return-value]


@dataclass(frozen=True)
class LabelColor:
    """The display color of one label value (``rgba`` four 0-255 integers, or None)."""

    label_value: int | float
    rgba: tuple[int, int, int, int] | None


@dataclass(frozen=True)
class ImageLabelMeta:
    """The ``image-label`` block of a label image."""

    version: str | None
    colors: tuple[LabelColor, ...] = ()
    properties: tuple[dict, ...] = ()
    source_image: str | None = None


@dataclass(frozen=True)
class MultiscaleMeta:
    """One multiscale image: its axes, its pyramid levels and its display metadata.

    ``axes`` are the axes of the coordinate system the levels map into. For NGFF 0.6,
    ``coordinate_systems`` lists every coordinate system of the image, ``coordinate_system``
    names the one the levels map into (the "intrinsic" one) and ``transformations`` holds the
    multiscale-level transformations between coordinate systems (from the intrinsic one to
    others, or to label images). Earlier versions leave those empty: their multiscale-level
    scale and translation are composed into each level.
    """

    version: str
    axes: tuple[Axis, ...]
    datasets: tuple[DatasetMeta, ...]
    name: str | None = None
    type: str | None = None
    metadata: dict = field(default_factory=dict)
    channels: tuple[Channel, ...] = ()
    image_label: ImageLabelMeta | None = None
    coordinate_systems: tuple[CoordinateSystem, ...] = ()
    coordinate_system: str | None = None
    transformations: tuple[Transformation, ...] = ()

    @property
    def axis_names(self) -> tuple[str, ...]:
        """The names of the axes, in order."""
        return tuple(a.name for a in self.axes)

    @property
    def exact(self) -> bool:
        """Whether every level's ``scale`` and ``translation`` describe its transformation
        exactly (see :class:`DatasetMeta`)."""
        return all(ds.exact for ds in self.datasets)


# -- scenes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SceneImage:
    """An image a scene refers to, and the transformation from its coordinate system into
    the scene's reference coordinate system (None when no chain of transformations with
    known inverses links them)."""

    path: str
    coordinate_system: str
    transform: Transformation | None


@dataclass(frozen=True)
class Scene:
    """The ``scene`` block (NGFF 0.6): coordinate systems of its own and transformations
    between them and the coordinate systems of the images below the scene group."""

    version: str
    coordinate_systems: tuple[CoordinateSystem, ...] = ()
    transformations: tuple[Transformation, ...] = ()

    @property
    def reference(self) -> CoordinateSystemRef | None:
        """The default coordinate system to show the scene in: the scene's first
        coordinate system, else the output of its first transformation."""
        if self.coordinate_systems:
            return CoordinateSystemRef(self.coordinate_systems[0].name)
        for t in self.transformations:
            if t.output is not None:
                return t.output
        return None

    @property
    def image_paths(self) -> tuple[str, ...]:
        """The paths of the images the transformations refer to, in order of appearance."""
        seen: dict[str, None] = {}
        for t in self.transformations:
            for ref in (t.input, t.output):
                if ref is not None and ref.path:
                    seen.setdefault(ref.path)
        return tuple(seen)


# -- high-content screening -----------------------------------------------------------------


@dataclass(frozen=True)
class WellRef:
    """One well of a plate: its path and its row and column (names and indices)."""

    path: str
    row: str
    column: str
    row_index: int
    column_index: int


@dataclass(frozen=True)
class Acquisition:
    """One acquisition of a plate."""

    id: int
    name: str | None = None
    maximum_field_count: int | None = None


@dataclass(frozen=True)
class PlateMeta:
    """The ``plate`` block: rows, columns, wells and acquisitions."""

    version: str
    name: str | None
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    wells: tuple[WellRef, ...]
    acquisitions: tuple[Acquisition, ...] = ()
    field_count: int | None = None


@dataclass(frozen=True)
class FieldRef:
    """One field of view of a well: its image group's path and its acquisition."""

    path: str
    acquisition: int | None = None


@dataclass(frozen=True)
class WellMeta:
    """The ``well`` block: the fields of view of one well."""

    version: str
    images: tuple[FieldRef, ...]
