"""NGFF 0.5 (zarr v3): the 0.4 model under the ``ome`` key with one ``version``.

The image, labels, plate and well rules are those of 0.4 (:mod:`.v04`); what differs is
where the metadata lives and that ``omero`` channels may leave out ``color`` and ``window``
(checked when present).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from linumpy_gpu.ngff import v04
from linumpy_gpu.ngff.model import Channel, ImageLabelMeta, MultiscaleMeta, PlateMeta, WellMeta

VERSION = "0.5"


def parse_multiscales(block: Mapping[str, Any], where: str, index: int = 0) -> MultiscaleMeta:
    """``multiscales[index]`` of an image's ``ome`` block (with ``omero``, ``image-label``)."""
    return v04.parse_multiscales(block, where, index, version=VERSION)


def parse_omero(raw: Any, where: str) -> tuple[Channel, ...]:
    """The ``omero`` block; color and window are optional, checked when present."""
    return v04.parse_omero(raw, where, version=VERSION)


def parse_image_label(raw: Any, where: str) -> ImageLabelMeta | None:
    """The ``image-label`` block (0.4 rules)."""
    return v04.parse_image_label(raw, where, version=VERSION)


def parse_plate(block: Mapping[str, Any], where: str) -> PlateMeta:
    """The ``plate`` block (0.4 rules)."""
    return v04.parse_plate(block, where, version=VERSION)


def parse_well(block: Mapping[str, Any], where: str) -> WellMeta:
    """The ``well`` block (0.4 rules)."""
    return v04.parse_well(block, where, version=VERSION)
