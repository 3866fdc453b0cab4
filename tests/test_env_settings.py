"""Numeric settings from the environment: used when valid, refused by name when not."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from linumpy_gpu.env import env_float, env_int


def test_unset_or_empty_gives_the_default(monkeypatch):
    monkeypatch.delenv("LINUMPY_GPU_TEST_SETTING", raising=False)
    assert env_int("LINUMPY_GPU_TEST_SETTING", 7) == 7
    assert env_int("LINUMPY_GPU_TEST_SETTING", None, minimum=1) is None
    monkeypatch.setenv("LINUMPY_GPU_TEST_SETTING", " ")
    assert env_float("LINUMPY_GPU_TEST_SETTING", 0.25) == 0.25


def test_valid_values_are_used(monkeypatch):
    monkeypatch.setenv("LINUMPY_GPU_TEST_SETTING", " 12 ")
    assert env_int("LINUMPY_GPU_TEST_SETTING", 7, minimum=1) == 12
    assert env_float("LINUMPY_GPU_TEST_SETTING", 0.25) == 12.0
    monkeypatch.setenv("LINUMPY_GPU_TEST_SETTING", "3.5")
    assert env_float("LINUMPY_GPU_TEST_SETTING", 0.25) == 3.5


@pytest.mark.parametrize("value", ["1 GiB", "0x10", "-1", "2.5"])
def test_bad_integers_are_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("LINUMPY_GPU_TEST_SETTING", value)
    with pytest.raises(ValueError, match=r"LINUMPY_GPU_TEST_SETTING must be an integer >= 0"):
        env_int("LINUMPY_GPU_TEST_SETTING", 7)


@pytest.mark.parametrize("value", ["quarter", "-0.5", "nan"])
def test_bad_numbers_are_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("LINUMPY_GPU_TEST_SETTING", value)
    with pytest.raises(ValueError, match=r"LINUMPY_GPU_TEST_SETTING must be a number >= 0"):
        env_float("LINUMPY_GPU_TEST_SETTING", 0.25)


def test_inf_is_a_number():
    assert env_float("LINUMPY_GPU_TEST_SETTING_UNSET", math.inf) == math.inf


@pytest.mark.parametrize(
    "module, variable, value, attribute, expected",
    [
        ("linumpy_gpu.gpu.staging", "LINUMPY_GPU_PINNED_CAP", "268435456", "DEFAULT_CAP", 1 << 28),
        ("linumpy_gpu.gpu.host_decode", "LINUMPY_GPU_HOST_THREADS", "3", "DEFAULT_THREADS", 3),
        ("linumpy_gpu.gpu.backend", "LINUMPY_GPU_SCRATCH_FRACTION", "3", "SCRATCH_FRACTION", 3.0),
    ],
)
def test_module_settings_read_and_refuse_their_variables(
    module, variable, value, attribute, expected
):
    """The GPU modules read their settings at import (no GPU needed to import them); in a
    fresh interpreter, so this process keeps its own settings."""

    def run(setting: str) -> subprocess.CompletedProcess:
        code = f"import {module} as m; print(repr(m.{attribute}))"
        env = {**os.environ, variable: setting}
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)

    good = run(value)
    assert good.returncode == 0, good.stderr
    assert float(good.stdout) == expected
    bad = run("lots")
    assert bad.returncode != 0
    assert f"ValueError: {variable} must be" in bad.stderr
