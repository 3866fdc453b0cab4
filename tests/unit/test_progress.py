"""Progress bars draw on a terminal and stay quiet on a redirected stream."""

from __future__ import annotations

import io

from linumpy_gpu.progress import progress_bar
from tests.helpers.terminal import Terminal


def test_no_bar_when_progress_is_off():
    assert progress_bar(False, "reading x", total=3, file=Terminal()) is None


def test_bar_draws_on_a_terminal():
    stream = Terminal()
    bar = progress_bar(True, "reading x", total=4, unit="chunk", file=stream)
    assert bar is not None and not bar.disable
    bar.update(4)
    bar.close()
    assert "reading x" in stream.getvalue() and "4/4" in stream.getvalue()


def test_bar_is_disabled_on_a_redirected_stream():
    stream = io.StringIO()  # a file or a pipe: isatty() is false
    bar = progress_bar(True, "writing y", total=2, file=stream)
    assert bar is not None and bar.disable
    bar.update(2)
    bar.reset(total=5)
    bar.close()
    assert stream.getvalue() == ""


def test_bar_follows_stderr_when_no_stream_is_given(monkeypatch):
    stream = Terminal()
    monkeypatch.setattr("sys.stderr", stream)
    bar = progress_bar(True, "copying z", total=1)
    assert bar is not None
    bar.update(1)
    bar.close()
    assert "copying z" in stream.getvalue()
