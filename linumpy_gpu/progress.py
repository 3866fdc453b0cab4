"""Progress bars for long reads and writes: tqdm, shown only where someone can see them."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm


def progress_bar(
    progress: bool,
    desc: str,
    *,
    total: int | None = None,
    unit: str = "unit",
    file: TextIO | None = None,
) -> tqdm | None:
    """A tqdm bar labelled ``desc`` when ``progress`` is on, else None.

    The bar draws only on a terminal (``file``, default stderr, whose ``isatty()`` is
    true) or in a notebook (tqdm's widget): on a redirected stream it is created disabled,
    so logs and pipes stay free of carriage-return updates. Callers update and close it
    as any tqdm bar; a disabled bar ignores both."""
    if not progress:
        return None
    from tqdm.auto import tqdm

    # disable=None is tqdm's own "disable when the stream is not a TTY"; the notebook
    # widget turns it into "shown", as a notebook has no TTY yet displays the bar
    return tqdm(total=total, desc=desc, unit=unit, file=file, disable=None)
