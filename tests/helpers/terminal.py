"""A text stream that says it is a terminal, for checking what progress bars draw there."""

from __future__ import annotations

import io
import sys

import pytest


class Terminal(io.StringIO):
    """Collects what is written, as a terminal would show it (``isatty()`` is true)."""

    def isatty(self) -> bool:
        return True


def stderr_on_terminal(monkeypatch: pytest.MonkeyPatch) -> Terminal:
    """Replace ``sys.stderr`` with a :class:`Terminal` for the rest of the test. Call it in
    the test body: pytest's output capture puts its own stderr back between a fixture's
    setup and the test."""
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream
