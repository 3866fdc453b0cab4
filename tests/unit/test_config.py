"""Settings: one object, the environment read once, changed per block or per call."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import linumpy_gpu as lg
from linumpy_gpu.config import Settings


def test_defaults():
    s = Settings()
    assert s.progress is False and s.io_threads is None and s.pinned_bytes == 1 << 30
    assert s.scratch_fraction == 0.25 and s.read_ahead_bytes == 512 << 20


def test_environment_is_parsed_and_checked():
    env = {
        "LINUMPY_GPU_IO_THREADS": "6",
        "LINUMPY_GPU_PROGRESS": "yes",
        "LINUMPY_GPU_SCRATCH_FRACTION": "3",
        "LINUMPY_GPU_PINNED_BYTES": "0x10000000",
        "LINUMPY_GPU_NVCOMP_LIBRARY": "/opt/libnvcomp.so",
        "LINUMPY_GPU_UNRELATED": "ignored",
    }
    s = Settings.from_environment(env)
    assert (s.io_threads, s.progress, s.scratch_fraction, s.pinned_bytes) == (6, True, 3.0, 1 << 28)
    assert s.nvcomp_library == "/opt/libnvcomp.so"


def test_integers_with_leading_zeros_are_decimal():
    s = Settings.from_environment(
        {"LINUMPY_GPU_IO_THREADS": "08", "LINUMPY_GPU_READ_AHEAD_BYTES": " 01048576 "}
    )
    assert (s.io_threads, s.read_ahead_bytes) == (8, 1 << 20)


@pytest.mark.parametrize(
    "variable, value, message",
    [
        ("LINUMPY_GPU_IO_THREADS", "lots", "is not an integer"),
        ("LINUMPY_GPU_IO_THREADS", "0", "io_threads must be an integer >= 1"),
        ("LINUMPY_GPU_SCRATCH_FRACTION", "nan", "scratch_fraction must be a number >= 0"),
        ("LINUMPY_GPU_SCRATCH_FRACTION", "-0.5", "scratch_fraction must be a number >= 0"),
        ("LINUMPY_GPU_PROGRESS", "maybe", "is not 0 or 1"),
        ("LINUMPY_GPU_PINNED_BYTES", "1000", "pinned_bytes must be an integer >= 1048576"),
    ],
)
def test_bad_environment_values_are_refused_by_name(variable, value, message):
    with pytest.raises(lg.ConfigError, match=message) as info:
        Settings.from_environment({variable: value})
    assert isinstance(info.value, ValueError)


def test_set_changes_settings_for_a_block_and_nests():
    base = lg.config.get()
    with lg.config.set(io_threads=3) as outer:
        assert lg.config.get() is outer and outer.io_threads == 3
        with lg.config.set({"progress": True}):
            assert lg.config.get().io_threads == 3 and lg.config.get().progress is True
        assert lg.config.get().progress is base.progress
    assert lg.config.get() == base


def test_set_refuses_unknown_names_and_bad_values():
    with pytest.raises(lg.ConfigError, match="unknown setting"), lg.config.set(io_thread=3):
        pass
    with pytest.raises(lg.ConfigError, match="io_threads must be"), lg.config.set(io_threads=-1):
        pass
    with pytest.raises(lg.ConfigError, match="progress must be"), lg.config.set(progress="yes"):
        pass


@pytest.mark.parametrize(
    "changes", [{"io_threads": 0}, {"memory": "bogus"}, {"io_threads": "8"}, {"pinned_bytes": -1}]
)
def test_settings_objects_are_checked_as_changes_are(changes):
    with pytest.raises(lg.ConfigError):
        Settings(**changes)


@pytest.mark.parametrize(
    "changes",
    [{"io_threads": 10**400}, {"pinned_bytes": 10**400}, {"scratch_fraction": 10**400}],
)
def test_numbers_too_large_for_the_machine_are_refused(changes):
    with pytest.raises(lg.ConfigError), lg.config.set(**changes):
        pass
    name, value = next(iter(changes.items()))
    with pytest.raises(lg.ConfigError, match=name):
        Settings.from_environment({f"LINUMPY_GPU_{name.upper()}": str(value)})


@pytest.mark.parametrize("key", [1, None])
def test_setting_names_that_are_not_text_are_refused(key):
    with pytest.raises(lg.ConfigError, match="setting names are text"), lg.config.set({key: 4}):
        pass


@pytest.mark.parametrize("settings", ["io_threads=8", ["io_threads"], 5])
def test_settings_that_are_not_a_mapping_are_refused(settings):
    with pytest.raises(lg.ConfigError, match="mapping"), lg.config.set(settings):
        pass


def test_blocks_are_per_thread():
    seen = {}

    def other():
        seen["other"] = lg.config.get().io_threads

    with lg.config.set(io_threads=9):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen["other"] == lg.config.get().io_threads


def test_objects_capture_the_settings_current_when_made(tmp_path):
    from tests.helpers.safety import small_store

    small_store(tmp_path / "s.zarr")
    with lg.config.set(io_threads=2, read_ahead_bytes=0):
        img = lg.open_ome_zarr(tmp_path / "s.zarr")
    source = img[0]._reader.source
    assert (source.threads, source.read_ahead_bytes) == (2, 0)
    per_call = lg.open_ome_zarr(tmp_path / "s.zarr", settings={"io_threads": 5})
    assert per_call[0]._reader.source.threads == 5


def test_the_environment_is_read_once_per_process():
    code = (
        "import os, linumpy_gpu as lg\n"
        "first = lg.config.get().io_threads\n"
        "os.environ['LINUMPY_GPU_IO_THREADS'] = '9'\n"
        "print(first, lg.config.get().io_threads, lg.config.sources()['io_threads'])\n"
    )
    env = {**os.environ, "LINUMPY_GPU_IO_THREADS": "4"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4", "4", "LINUMPY_GPU_IO_THREADS"]


def test_info_shows_the_settings(capsys):
    from linumpy_gpu.cli import main

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for name in lg.config.names():
        assert name in out


def test_only_the_settings_module_reads_the_environment():
    """Every module takes its settings from :mod:`linumpy_gpu.config`; none reads
    ``os.environ`` or ``os.getenv`` itself (a setting read elsewhere escapes ``config.set``
    and ``linumpy-gpu info``)."""
    import pathlib

    import linumpy_gpu

    package = pathlib.Path(linumpy_gpu.__file__).parent
    readers = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.name != "config.py"
        and any(word in path.read_text() for word in ("os.environ", "os.getenv", "environ["))
    ]
    assert readers == []


def test_a_block_setting_the_default_value_still_counts_as_set(tmp_path):
    """set(io_threads=None) around to_dask overrides the image's own io_threads=2, though
    None is also the default: what a block names is set, whatever its value."""
    from linumpy_gpu.image.dask import read_settings

    lg.write_ome_zarr(tmp_path / "s.zarr", np.zeros((4, 8, 8), "u2"), device="cpu")
    level = lg.open_ome_zarr(tmp_path / "s.zarr", settings={"io_threads": 2, "progress": True})[0]
    assert read_settings(level)["io_threads"] == 2
    with lg.config.set(io_threads=None, progress=False):
        assert lg.config.sources()["io_threads"] == "set"
        settings = read_settings(level)
    assert settings["io_threads"] is None and settings["progress"] is False
    assert lg.config.sources()["io_threads"] != "set"


@pytest.mark.parametrize(
    "variable, value", [("LINUMPY_GPU_IO_THREADS", "0"), ("LINUMPY_GPU_SCRATCH_FRACTION", "inf")]
)
def test_out_of_range_environment_values_name_the_variable(variable, value):
    with pytest.raises(lg.ConfigError, match=f"^{variable}='{value}': "):
        Settings.from_environment({variable: value})


def test_a_misspelt_variable_is_warned_about():
    with pytest.warns(lg.ConfigWarning, match="LINUMPY_GPU_IO_THREAD names no setting"):
        s = Settings.from_environment({"LINUMPY_GPU_IO_THREAD": "4"})
    assert s.io_threads is None


def test_numpy_numbers_are_settings_values():
    with lg.config.set(io_threads=np.int64(4), scratch_fraction=np.float32(0.5)) as s:
        assert (s.io_threads, s.scratch_fraction) == (4, 0.5)
        assert type(s.io_threads) is int


def test_info_names_the_gzip_decoder(capsys, monkeypatch):
    """A machine where the deflate package cannot load reads gzip 2.5x slower: info says so
    and how to fix it."""
    from linumpy_gpu.cli import main
    from linumpy_gpu.codecs import deflate

    assert main(["info"]) == 0
    assert "gzip/zlib decoder: libdeflate" in capsys.readouterr().out
    monkeypatch.setattr(deflate, "_libdeflate", lambda: None)
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "gzip/zlib decoder: zlib (install the deflate package" in out


@pytest.mark.parametrize(
    "given", [{"memory": "bogus"}, {"scratch_fraction": -1}, {"host_threads": -3}]
)
def test_gpu_backend_checks_its_arguments_before_looking_for_a_gpu(given):
    from linumpy_gpu.gpu import GpuBackend

    with pytest.raises(lg.ConfigError):
        GpuBackend(**given)


def test_sources_say_where_the_values_in_use_came_from_not_the_environment_now():
    code = (
        "import os, linumpy_gpu as lg\n"
        "first = lg.config.get().io_threads\n"
        "os.environ['LINUMPY_GPU_IO_THREADS'] = '7'\n"
        "print(first, lg.config.get().io_threads, lg.config.sources()['io_threads'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "LINUMPY_GPU_IO_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "None", "default"]
