"""The OpenAPI document shows Markdown, not the reStructuredText of the docstrings it is built from."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ingest_api.app import create_app
from ingest_api.openapi import markdown
from logstore.config import LogstoreConfig


def test_roles_and_literals_become_inline_code() -> None:
    assert markdown("see :mod:`ingest_api.forwarding` and :class:`~logstore.structs.TopicInfo`") == (
        "see `ingest_api.forwarding` and `TopicInfo`"
    )
    assert markdown("``?forward=false`` or :py:meth:`Consumer.poll`") == "`?forward=false` or `Consumer.poll`"


def test_served_document_has_no_sphinx_markup(tmp_path: Path) -> None:
    text = json.dumps(create_app(LogstoreConfig(root=str(tmp_path))).openapi())
    assert not re.findall(r":[a-z]+:`", text)
    assert "``" not in text
    assert "`GET /v1/topics`" in text  # the literals are still there, as Markdown
