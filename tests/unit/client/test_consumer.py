"""The Python ``Consumer``'s configuration: an unknown key is refused by name (the consumer against a real server is
in ``tests/integration/client/test_consumer.py``)."""

from __future__ import annotations

import pytest

from logstore.client import Consumer
from logstore.errors import InvalidConfigError


def test_unknown_config_key_is_named() -> None:
    with pytest.raises(InvalidConfigError, match=r"fetch\.min\.bytes"):
        Consumer({"bootstrap.servers": "http://x", "group.id": "g", "fetch.min.bytes": 1})
