"""Numeric settings from the environment, refused with the variable's name when they do not
parse or are out of range (a typo should not surface as a bare ``int()`` error at import)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

Number = TypeVar("Number", int, float)


def _env_number(
    name: str, default: Number | None, minimum: Number, parse: Callable[[str], Number], kind: str
) -> Number | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = parse(value)
    except ValueError:
        number = None
    if number is None or not number >= minimum:  # also refuses nan
        raise ValueError(f"{name} must be {kind} >= {minimum}, got {value!r}")
    return number


def env_int(name: str, default: int | None, minimum: int = 0) -> int | None:
    """``$name`` as an integer of at least ``minimum``; ``default`` when unset or empty."""
    return _env_number(name, default, minimum, int, "an integer")


def env_float(name: str, default: float, minimum: float = 0.0) -> float:
    """``$name`` as a number of at least ``minimum``; ``default`` when unset or empty."""
    return _env_number(name, default, minimum, float, "a number")
