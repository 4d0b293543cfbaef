"""The core finds its Spark data sources through an entry-point group, not by importing ``spark_source``.

The import contracts and the fresh-interpreter checks of the layers are in
``tests/integration/test_layers.py``.
"""

from __future__ import annotations

import pytest

from logstore import spark
from logstore.errors import InvalidConfigError


def test_session_registers_the_data_sources_of_the_entry_point_group() -> None:
    from spark_source import LogstoreDataSource

    assert spark.data_sources() == [LogstoreDataSource]


def test_no_registered_data_source_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark, "DATA_SOURCES_GROUP", "logstore.no_such_group")
    with pytest.raises(InvalidConfigError, match=r"logstore\.no_such_group"):
        spark.data_sources()
