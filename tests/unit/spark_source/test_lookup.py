"""``format("logstore")`` on a session nobody registered it on: Spark's lookup of installed Python data sources
(the code its driver runs in a Python worker, here run in-process) finds ``pyspark_logstore.DefaultSource``."""

from __future__ import annotations

import io

from pyspark.serializers import read_int
from pyspark.sql.worker import lookup_data_sources
from pyspark.worker_util import pickleSer, utf8_deserializer

from spark_source import LogstoreDataSource


def test_spark_finds_the_logstore_source_among_installed_modules() -> None:
    out = io.BytesIO()
    lookup_data_sources._main(io.BytesIO(), out)
    out.seek(0)
    found = {}
    for _ in range(read_int(out)):
        name = utf8_deserializer.loads(out)
        found[name] = pickleSer._read_with_length(out)
    assert found["logstore"] is LogstoreDataSource
