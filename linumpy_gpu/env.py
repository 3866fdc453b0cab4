"""Numeric settings from the environment, refused with the variable's name when they do not
parse or are out of range (a typo should not surface as a bare ``int()`` error at import)."""

from __future__ import annotations

import os


def env_int(name: str, default: int | None, minimum: int = 0) -> int | None:
    """``$name`` as an integer of at least ``minimum``; ``default`` when unset or empty."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return number


def env_float(name: str, default: float, minimum: float = 0.0) -> float:
    """``$name`` as a number of at least ``minimum``; ``default`` when unset or empty."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is None or not number >= minimum:  # also refuses nan
        raise ValueError(f"{name} must be a number >= {minimum}, got {value!r}")
    return number
