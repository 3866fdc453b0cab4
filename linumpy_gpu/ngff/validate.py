"""A second opinion on metadata from ome-zarr-models (the community's pydantic models).

Reading never comes here: the parsers of this package check the spec on their own. This
is for a ``validate`` command and for tests that check what linumpy_gpu writes. The
package is imported on first call only.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from linumpy_gpu.ngff._common import kind_of, ome_block, release_of

# (version, kind) -> module and class of the attributes model for that block.
_MODELS = {
    ("0.4", "image"): ("ome_zarr_models.v04.image", "ImageAttrs"),
    ("0.4", "image-label"): ("ome_zarr_models.v04.image_label", "ImageLabelAttrs"),
    ("0.4", "labels"): ("ome_zarr_models.v04.labels", "LabelsAttrs"),
    ("0.4", "plate"): ("ome_zarr_models.v04.hcs", "HCSAttrs"),
    ("0.4", "well"): ("ome_zarr_models.v04.well", "WellAttrs"),
    ("0.4", "bioformats2raw"): ("ome_zarr_models.v04.bioformats2raw", "BioFormats2RawAttrs"),
    ("0.5", "image"): ("ome_zarr_models.v05.image", "ImageAttrs"),
    ("0.5", "image-label"): ("ome_zarr_models.v05.image_label", "ImageLabelAttrs"),
    ("0.5", "labels"): ("ome_zarr_models.v05.labels", "LabelsAttrs"),
    ("0.5", "plate"): ("ome_zarr_models.v05.hcs", "HCSAttrs"),
    ("0.5", "well"): ("ome_zarr_models.v05.well", "WellAttrs"),
    ("0.5", "bioformats2raw"): ("ome_zarr_models.v05.bioformats2raw", "BioFormats2RawAttrs"),
    # Public from ome-zarr-models 1.8 on; earlier releases report that they have no model.
    ("0.6", "image"): ("ome_zarr_models.v06.image", "ImageAttrs"),
    ("0.6", "image-label"): ("ome_zarr_models.v06.image_label", "ImageLabelAttrs"),
    ("0.6", "labels"): ("ome_zarr_models.v06.labels", "LabelsAttrs"),
    ("0.6", "plate"): ("ome_zarr_models.v06.hcs", "HCSAttrs"),
    ("0.6", "well"): ("ome_zarr_models.v06.well", "WellAttrs"),
    ("0.6", "bioformats2raw"): ("ome_zarr_models.v06.bioformats2raw", "BioFormats2RawAttrs"),
    ("0.6", "scene"): ("ome_zarr_models.v06.scene", "BaseSceneAttrs"),
}
ZARR_FORMATS = {"0.4": 2, "0.5": 3, "0.6": 3}


def validate_with_ome_zarr_models(
    attributes: Mapping[str, Any], zarr_format: int, where: str
) -> list[str]:
    """Check a group's attributes with ome-zarr-models; return the problems it finds
    (``"<where>: <field>: <message>"``), an empty list when it finds none.

    Never raises for invalid input. Versions ome-zarr-models has no public model for (0.1
    to 0.3; 0.6 before ome-zarr-models 1.8) and a missing package are reported as problems
    too, so an empty list always means "checked and valid".
    """
    try:
        import ome_zarr_models
    except ImportError:
        return [f"{where}: ome-zarr-models is not installed (pip install ome-zarr-models)"]
    if not isinstance(attributes, Mapping):
        return [f"{where}: attributes: expected an object, found {type(attributes).__name__}"]
    block, version = ome_block(attributes, zarr_format)
    kind = kind_of(block)
    if kind is None:
        return [f"{where}: no OME-NGFF metadata in the attributes"]
    if version is None and zarr_format == 2:
        version = "0.4"  # 0.4 labels groups carry no version, and plates and wells may not
    if version is None:
        return [f"{where}: no NGFF version is declared"]
    package = getattr(ome_zarr_models, "__version__", "?")
    release = release_of(version)
    if release not in ZARR_FORMATS or not _has_models(release):
        return [f"{where}: ome-zarr-models {package} has no public model for NGFF {version}"]
    version = release
    problems = []
    if zarr_format != ZARR_FORMATS[version]:
        problems.append(
            f"{where}: zarr_format: NGFF {version} is stored in zarr v{ZARR_FORMATS[version]}, "
            f"not v{zarr_format}"
        )
    payload = dict(attributes) if version == "0.4" else dict(block)
    kinds = [kind]
    if kind == "image" and "image-label" in block:
        kinds.append("image-label")
    for k in kinds:
        target = _MODELS.get((version, k))
        if target is None:
            problems.append(f"{where}: ome-zarr-models {release} has no model for a '{k}' block")
            continue
        problems.extend(_run(target, payload, where))
    return problems


def _has_models(version: str) -> bool:
    import importlib.util

    package = f"ome_zarr_models.v{version.replace('.', '')}"
    try:
        return importlib.util.find_spec(package) is not None
    except ImportError:
        return False


def _run(target: tuple[str, str], payload: dict, where: str) -> list[str]:
    import importlib

    try:
        model = getattr(importlib.import_module(target[0]), target[1])
    except (ImportError, AttributeError) as exc:
        return [f"{where}: ome-zarr-models has no {target[1]} in {target[0]} ({exc})"]
    try:
        with warnings.catch_warnings():
            # Its warnings are recommendations (SHOULD), not problems.
            warnings.simplefilter("ignore")
            model.model_validate(payload)
    except Exception as exc:  # pydantic.ValidationError, and anything a validator raises
        errors = getattr(exc, "errors", None)
        if not callable(errors):
            return [f"{where}: {type(exc).__name__}: {exc}"]
        return [
            f"{where}: {_dotted(e.get('loc', ())) or '(root)'}: {e.get('msg', '')}"
            for e in errors()
        ]
    return []


def _dotted(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
