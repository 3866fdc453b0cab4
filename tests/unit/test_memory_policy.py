"""How much device memory a GPU read may hold besides its output (``memory`` setting)."""

from __future__ import annotations

import pytest

import linumpy_gpu as lg
from linumpy_gpu.gpu.backend import read_scratch_budget

GiB = 1 << 30


def settings(**changes):
    return lg.config.Settings().replace(**changes)


def test_the_default_is_auto():
    assert lg.config.Settings().memory == "auto"


def test_auto_takes_half_of_what_is_free_after_the_output():
    out, free = 4 * GiB, 76 * GiB
    assert read_scratch_budget(out, free, settings()) == (free - out) // 2
    # a region as well as a full level
    assert read_scratch_budget(out, free, settings(), whole_level=False) == (free - out) // 2


def test_auto_stays_within_the_users_cap():
    out, free = 4 * GiB, 76 * GiB
    assert read_scratch_budget(out, free, settings(memory_cap=3 * GiB)) == 3 * GiB


def test_auto_never_goes_below_the_tight_bound_when_memory_is_short():
    out = 8 * GiB
    tight = read_scratch_budget(out, 9 * GiB, settings(memory="tight"))
    assert tight == 2 * GiB  # a quarter of the output
    assert read_scratch_budget(out, 9 * GiB, settings()) == tight
    # a cap below the tight bound does not starve the read either
    assert read_scratch_budget(out, 80 * GiB, settings(memory_cap=0)) == tight


def test_tight_keeps_a_quarter_of_the_output_for_full_levels():
    out = 16 * GiB
    assert read_scratch_budget(out, 76 * GiB, settings(memory="tight")) == 4 * GiB
    # the floor for small reads
    assert read_scratch_budget(1 << 20, 76 * GiB, settings(memory="tight")) == GiB


def test_tight_lets_regions_use_region_scratch_within_half_of_what_is_free():
    tight = settings(memory="tight", scratch_floor=0)
    out = 64 << 20
    assert read_scratch_budget(out, 76 * GiB, tight, False, region_scratch=4 * GiB) == 4 * GiB
    assert read_scratch_budget(out, 2 * GiB, tight, False, region_scratch=4 * GiB) == GiB
    # never below what a full level gets
    assert read_scratch_budget(out, 76 * GiB, tight, False, region_scratch=1) == out // 4


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [("LINUMPY_GPU_MEMORY", "tight", "tight"), ("LINUMPY_GPU_MEMORY_CAP", "0x40000000", GiB)],
)
def test_the_policy_comes_from_the_environment(variable, value, expected):
    s = lg.config.Settings.from_environment({variable: value})
    name = variable.removeprefix("LINUMPY_GPU_").lower()
    assert getattr(s, name) == expected


@pytest.mark.parametrize("value", ["fast", "", 1, None])
def test_an_unknown_policy_is_refused(value):
    with pytest.raises(lg.ConfigError, match="memory must be 'auto' or 'tight'"):
        settings(memory=value)
