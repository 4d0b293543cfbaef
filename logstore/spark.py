"""A local SparkSession with Delta Lake configured, for jobs, notebooks and tests.

Delta's jars come from Maven Central. ``make`` copies them once into
``.cache/jars`` (``jars/pom.xml``), and :func:`session` puts that folder's jars
on Spark's classpath, so a warm cache works offline. Without the folder it
falls back to ``spark.jars.packages`` (Ivy, cached in ``~/.ivy2``).

Importing this module does not start Spark; :func:`session` does.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from logstore.config import load_config
from logstore.errors import InvalidConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSource

__all__ = ["DATA_SOURCES_GROUP", "DELTA_ARTIFACT", "data_sources", "delta_jars", "session"]

DATA_SOURCES_GROUP = "logstore.spark_datasources"
"""Entry-point group naming the Python data sources :func:`session` registers (``format("logstore")``)."""

SCALA_VERSION = "2.13"


def _delta_version() -> str:
    return metadata.version("delta-spark")


def _spark_minor() -> str:
    return ".".join(metadata.version("pyspark").split(".")[:2])


DELTA_ARTIFACT = f"io.delta:delta-spark_{_spark_minor()}_{SCALA_VERSION}"
"""Maven coordinates (without version) of Delta for this pyspark."""


def _project_jars_dir() -> Path:
    return Path(__file__).resolve().parent.parent / ".cache" / "jars"


def delta_jars(jars_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Delta's jars in ``jars_dir`` that Spark does not already ship.

    Jars whose artifact (name without version) pyspark already bundles —
    Scala, Jackson, Hadoop, Parquet, log4j — are left out so Spark's own
    versions are the only ones on the classpath.
    """
    folder = Path(jars_dir) if jars_dir else _project_jars_dir()
    if not folder.is_dir():
        return []
    import pyspark

    bundled = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(p) for p in folder.glob("*.jar") if _artifact(p.name) not in bundled)


def _artifact(jar_name: str) -> str:
    """``jackson-core-2.13.5.jar`` → ``jackson-core``."""
    parts = jar_name.removesuffix(".jar").split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


def session(**overrides: str) -> SparkSession:
    """A SparkSession (local by default) with Delta's SQL extension and catalog.

    Workers run this interpreter (``PYSPARK_PYTHON``). ``overrides`` are Spark
    conf keys, e.g. ``session(**{"spark.master": "spark://host:7077"})``; they
    win over the defaults here. Reuses the active session when there is one.
    Registers the ``logstore`` data source (``format("logstore")``, read and write).
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf: dict[str, str] = {
        "spark.master": "local[*]",
        "spark.app.name": "logstore",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        # Topic tables must stay writable by delta-rs: no deletion vectors or row tracking by default.
        "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
        "spark.databricks.delta.properties.defaults.enableRowTracking": "false",
    }
    jars = delta_jars(load_config().spark_jars_dir or None)
    if jars:
        conf["spark.jars"] = ",".join(jars)
    else:
        conf["spark.jars.packages"] = f"{DELTA_ARTIFACT}:{_delta_version()}"
    conf.update(overrides)
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    for source in data_sources():
        spark.dataSource.register(source)
    return spark


def data_sources() -> list[type[DataSource]]:
    """The Python data sources registered under the ``logstore.spark_datasources`` entry-point group.

    The core does not import ``spark_source`` (it sits above the core): the
    package declares ``logstore = "spark_source:LogstoreDataSource"`` in that
    group (``pyproject.toml``) and :func:`session` registers what it finds.

    Raises:
        InvalidConfigError: nothing is registered in the group (the package is not installed).
    """
    found = metadata.entry_points(group=DATA_SOURCES_GROUP)
    if not found:
        raise InvalidConfigError(
            f"no Spark data source registered under the entry-point group '{DATA_SOURCES_GROUP}': "
            "install the logstore distribution (pip install -e .) so that format('logstore') exists"
        )
    return [entry.load() for entry in sorted(found, key=lambda e: e.name)]
