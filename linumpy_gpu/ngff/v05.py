"""NGFF 0.5 (zarr v3): the 0.4 model under the ``ome`` key with one ``version``.

The image, labels, plate and well rules are those of 0.4 (:mod:`.v04`); what differs is
where the metadata lives and that ``omero`` channels may leave out ``color`` and ``window``
(checked when present). The ``omero`` and ``image-label`` blocks are read by
:func:`.v04.parse_omero` and :func:`.v04.parse_image_label` given ``version="0.5"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from linumpy_gpu.ngff import v04
from linumpy_gpu.ngff.model import MultiscaleMeta, PlateMeta, WellMeta

VERSION = "0.5"


def parse_multiscales(block: Mapping[str, Any], where: str, index: int = 0) -> MultiscaleMeta:
    """``multiscales[index]`` of an image's ``ome`` block (with ``omero``, ``image-label``)."""
    return v04.parse_multiscales(block, where, index, version=VERSION)


def parse_plate(block: Mapping[str, Any], where: str) -> PlateMeta:
    """The ``plate`` block (0.4 rules)."""
    return v04.parse_plate(block, where, version=VERSION)


def parse_well(block: Mapping[str, Any], where: str) -> WellMeta:
    """The ``well`` block (0.4 rules)."""
    return v04.parse_well(block, where, version=VERSION)
