"""A griffe extension for the API pages: docstrings use Sphinx roles (``:class:`Level```),
which read well in ``help()`` and IDEs; on the site they become inline code."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj):`~?([^`]+)`")
LITERAL = re.compile(r"``([^`]+)``")


def _short(match: re.Match[str]) -> str:
    target = match.group(1)
    shown = target.rsplit(".", 1)[-1] if match.group(0).count("~") else target
    return f"`{shown}`"


class SphinxRoles(Extension):
    """Rewrites roles and double-backtick literals into markdown inline code."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = ROLE.sub(_short, obj.docstring.value)
            obj.docstring.value = LITERAL.sub(r"`\1`", text)
