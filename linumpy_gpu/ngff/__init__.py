"""OME-NGFF metadata: parse and validate (0.1 to 0.5). Pure Python: no array access."""

from .model import (
    Acquisition,
    Axis,
    Channel,
    DatasetMeta,
    FieldRef,
    ImageLabelMeta,
    LabelColor,
    MultiscaleMeta,
    PlateMeta,
    WellMeta,
    WellRef,
)
from .parse import (
    SUPPORTED_VERSIONS,
    kind_of,
    ome_block,
    parse_bioformats2raw,
    parse_labels_group,
    parse_multiscales,
    parse_plate,
    parse_well,
    require_ome,
)

__all__ = [
    "SUPPORTED_VERSIONS",
    "Acquisition",
    "Axis",
    "Channel",
    "DatasetMeta",
    "FieldRef",
    "ImageLabelMeta",
    "LabelColor",
    "MultiscaleMeta",
    "PlateMeta",
    "WellMeta",
    "WellRef",
    "kind_of",
    "ome_block",
    "parse_bioformats2raw",
    "parse_labels_group",
    "parse_multiscales",
    "parse_plate",
    "parse_well",
    "require_ome",
]
