"""The OpenAPI document (``/openapi.json``, ``/docs``) in Markdown, from docstrings written for Sphinx.

FastAPI takes each route's docstring as its description. The project's
docstrings use reStructuredText: ``` ``literal`` ``` and roles such as
``:class:`~logstore.structs.TopicInfo``` that Swagger UI and ReDoc show raw.
:func:`markdown_openapi` serves the same text as Markdown: a literal in single
backticks, a role as the object's name in backticks.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

__all__ = ["markdown", "markdown_openapi"]

_ROLE = re.compile(r":(?:py:)?[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``([^`]+)``")


def markdown(text: str) -> str:
    """``text`` with reStructuredText roles and literals as Markdown inline code."""

    def role(m: re.Match[str]) -> str:
        target = m.group(1).strip()
        shown = target.rsplit(".", 1)[-1] if "`~" in m.group(0) else target  # ~ shows the last name only
        return f"`{shown}`"

    return _LITERAL.sub(r"`\1`", _ROLE.sub(role, text))


def _rewrite(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: markdown(v) if k in ("description", "summary") and isinstance(v, str) else _rewrite(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rewrite(v) for v in node]
    return node


def markdown_openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """A replacement for ``app.openapi``: FastAPI's document, built once, with Markdown descriptions."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = _rewrite(schema)
        return app.openapi_schema

    return openapi
