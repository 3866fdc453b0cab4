"""One error hierarchy: every class in linumpy_gpu.errors is exported at the top level,
derives from the package's base error (or base warning), and pickles (dask workers send
errors back to the client)."""

from __future__ import annotations

import inspect
import pickle
import warnings

import pytest

import linumpy_gpu as lg
from linumpy_gpu import errors

CLASSES = [
    obj
    for name, obj in vars(errors).items()
    if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__
]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_exported_and_rooted(cls):
    assert getattr(lg, cls.__name__) is cls
    assert cls.__name__ in lg.__all__
    assert issubclass(cls, lg.LinumpyGpuError | lg.LinumpyGpuWarning)


def test_no_error_classes_outside_the_errors_module():
    import importlib
    import pkgutil

    found = []
    for module in pkgutil.walk_packages(lg.__path__, "linumpy_gpu."):
        if module.name.endswith("__main__"):
            continue
        mod = importlib.import_module(module.name)
        for name, obj in vars(mod).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, Exception)
                and obj.__module__ == mod.__name__
                and not name.startswith("_")
                and mod is not errors
            ):
                found.append(f"{mod.__name__}.{name}")
    assert found == []


def test_errors_with_fields_pickle():
    for exc in (
        lg.ChunkDecodeError("a/0", "c/1/0/0", "truncated"),
        lg.InvalidMetadataError("/s.zarr", "multiscales", "a list", 3),
        lg.LevelNotFoundError("no level 9"),
    ):
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and str(again) == str(exc)


def test_warn_points_past_the_package():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        errors.warn("careful", lg.MetadataWarning)
    assert caught[0].filename == __file__
