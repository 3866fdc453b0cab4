"""Plain, immutable descriptions of OME-NGFF metadata. No I/O, no arrays."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    name: str
    type: str | None = None
    unit: str | None = None


@dataclass(frozen=True)
class DatasetMeta:
    """One pyramid level: its array path and physical transform (already composed)."""

    path: str
    scale: tuple[float, ...]
    translation: tuple[float, ...]


@dataclass(frozen=True)
class Channel:
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
    version: str
    axes: tuple[Axis, ...]
    datasets: tuple[DatasetMeta, ...]
    name: str | None = None
    type: str | None = None
    metadata: dict = field(default_factory=dict)
    channels: tuple[Channel, ...] = ()
    image_label: ImageLabelMeta | None = None

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)


@dataclass(frozen=True)
class WellRef:
    path: str
    row: str
    column: str
    row_index: int
    column_index: int


@dataclass(frozen=True)
class Acquisition:
    id: int
    name: str | None = None
    maximum_field_count: int | None = None


@dataclass(frozen=True)
class PlateMeta:
    version: str
    name: str | None
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    wells: tuple[WellRef, ...]
    acquisitions: tuple[Acquisition, ...] = ()
    field_count: int | None = None


@dataclass(frozen=True)
class FieldRef:
    path: str
    acquisition: int | None = None


@dataclass(frozen=True)
class WellMeta:
    version: str
    images: tuple[FieldRef, ...]
