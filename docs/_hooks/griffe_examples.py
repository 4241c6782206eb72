"""Griffe extension for the API pages: read datarax's ``Example:`` sections as examples.

datarax docstrings head their doctests ``Example:`` (singular); Google style knows
``Examples:``. Renaming the heading when griffe loads each object makes mkdocstrings
render the ``>>>`` lines as Python code, not as Markdown text.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(\s*)Example( \([^)]*\))?:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Rename ``Example:`` / ``Example (...):`` headings to ``Examples:``."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _HEADING.sub(r"\1Examples:", obj.docstring.value)
