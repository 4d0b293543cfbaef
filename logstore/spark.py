"""A local SparkSession with Delta Lake configured, for jobs, notebooks and tests.

Delta's jars come from Maven Central. ``make`` copies them once into
``.cache/jars`` (``jars/pom.xml``), and :func:`session` puts that folder's jars
on Spark's classpath, so a warm cache works offline. Without the folder it
falls back to ``spark.jars.packages`` (Ivy, cached in ``~/.ivy2``).

Importing this module does not start Spark (nor import pyspark); :func:`session` does.
:func:`register` adds ``format("logstore")`` to a session built elsewhere
(``spark-submit``, a notebook's ``spark``, Databricks).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logstore.config import load_config
from logstore.errors import InvalidConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrameWriter, SparkSession
    from pyspark.sql.datasource import DataSource

__all__ = [
    "DATA_SOURCES_GROUP",
    "DELTA_ARTIFACT",
    "data_sources",
    "LOCAL_FS_JAR",
    "delta_jars",
    "local_file_system_conf",
    "register",
    "session",
    "unbundled_jars",
    "spark_home_without_python_zips",
]

DATA_SOURCES_GROUP = "logstore.spark_datasources"
"""Entry-point group naming the Python data sources :func:`session` registers (``format("logstore")``)."""

SCALA_VERSION = "2.13"


def _delta_version() -> str:
    return metadata.version("delta-spark")


def _spark_minor() -> str:
    return ".".join(metadata.version("pyspark").split(".")[:2])


def _delta_artifact() -> str:
    # Delta 4.1 began publishing one artifact per Spark minor (delta-spark_4.1_2.13); Delta 4.0 has only
    # delta-spark_2.13, built for Spark 4.0.
    major, minor = (int(x) for x in _delta_version().split(".")[:2])
    if (major, minor) < (4, 1):
        return f"io.delta:delta-spark_{SCALA_VERSION}"
    return f"io.delta:delta-spark_{_spark_minor()}_{SCALA_VERSION}"


DELTA_ARTIFACT = _delta_artifact()
"""Maven coordinates (without version) of Delta for this pyspark and delta-spark."""


def _project_jars_dir() -> Path:
    return Path(__file__).resolve().parent.parent / ".cache" / "jars"


def delta_jars(jars_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Delta's jars in ``jars_dir`` that Spark does not already ship; empty unless it holds this delta-spark's jar.

    Jars whose artifact (name without version) pyspark already bundles —
    Scala, Jackson, Hadoop, Parquet, log4j — are left out so Spark's own
    versions are the only ones on the classpath.
    """
    folder = Path(jars_dir) if jars_dir else _project_jars_dir()
    # The cache must hold this delta-spark's jar (same Spark, same Delta minor: patch releases of the Python
    # package and the jar may differ); else it was made for another Spark and Maven resolves the right one.
    minor = ".".join(_delta_version().split(".")[:2])
    if not any(folder.glob(f"{DELTA_ARTIFACT.split(':')[1]}-{minor}.*.jar")):
        return []
    return unbundled_jars(folder)


def unbundled_jars(jars_dir: str | os.PathLike[str]) -> list[str]:
    """The jars in ``jars_dir`` whose artifact pyspark does not already bundle (paths, sorted).

    For a connector fetched with its dependencies (Spark's Kafka source), so
    that the versions Spark ships (Scala, Hadoop, …) stay the only ones on the classpath.
    """
    import pyspark

    bundled = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(p) for p in Path(jars_dir).glob("*.jar") if _artifact(p.name) not in bundled)


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
    home = spark_home_without_python_zips()
    if home is not None:
        os.environ["SPARK_HOME"] = home
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
    for k, v in local_file_system_conf(conf).items():  # the classpath keeps the user's; other keys they set win
        if k == "spark.driver.extraClassPath" or k not in overrides:
            conf[k] = v
    builder = SparkSession.builder
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def register(spark: SparkSession) -> SparkSession:
    """Register ``format("logstore")`` (read and write) on ``spark``, a session built anywhere; returns it.

    For a session this process did not build — ``spark-submit``'s, a
    notebook's, Databricks' — with the ``logstore`` distribution installed on
    the driver and the workers. Spark's lookup of installed Python data sources
    (modules named ``pyspark_*``) finds the source without this call too
    (``pyspark_logstore``); registering is explicit, and also makes a batch
    write without ``mode(...)`` append (see :func:`_append_by_default`).
    Idempotent.
    """
    sources = data_sources()
    for source in sources:
        try:
            spark.dataSource.register(source)
        except Exception as e:  # Spark 4.0 refuses a name registered already, e.g. by its own lookup
            if "DATA_SOURCE_ALREADY_EXISTS" not in str(e):
                raise
    _append_by_default({source.name().lower() for source in sources})
    return spark


_APPENDING_FORMATS: set[str] = set()


def _append_by_default(formats: set[str]) -> None:
    """Make PySpark's ``DataFrameWriter.save()`` of ``formats`` take the default save mode as ``Append``.

    Spark's Kafka sink treats ``ErrorIfExists`` — the mode of a ``save()``
    without ``mode(...)`` — as append and refuses ``Ignore`` and
    ``Overwrite``. Spark itself refuses ``ErrorIfExists`` and ``Ignore`` for
    any Python data source before the source sees the write, so a Kafka job
    would fail after swapping the format. This wraps ``format``, ``mode``
    and ``save`` of PySpark's classic ``DataFrameWriter`` (once per process):
    a write to one of ``formats`` whose mode is unset or ``error`` /
    ``errorifexists`` / ``default`` is sent as ``append``; ``ignore`` is
    refused with ``INVALID_CONFIG`` (``overwrite`` by the sink itself). Other
    formats are untouched. A Spark Connect writer is not wrapped: give it
    ``mode("append")``.
    """
    from pyspark.sql.readwriter import DataFrameWriter

    first = not _APPENDING_FORMATS
    _APPENDING_FORMATS.update(formats)
    if not first:
        return
    wrapped_format, wrapped_mode, wrapped_save = DataFrameWriter.format, DataFrameWriter.mode, DataFrameWriter.save

    def format(self: DataFrameWriter, source: str) -> DataFrameWriter:
        self._logstore_format = source  # type: ignore[attr-defined]
        return wrapped_format(self, source)

    def mode(self: DataFrameWriter, saveMode: str | None) -> DataFrameWriter:
        if saveMode is not None:
            self._logstore_mode = saveMode  # type: ignore[attr-defined]
        return wrapped_mode(self, saveMode)

    def save(
        self: DataFrameWriter,
        path: str | None = None,
        format: str | None = None,
        mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        fmt = (format or getattr(self, "_logstore_format", None) or "").lower()
        if fmt in _APPENDING_FORMATS:
            chosen = (mode or getattr(self, "_logstore_mode", None) or "errorifexists").lower()
            if chosen in ("error", "errorifexists", "default"):
                mode = "append"
            elif chosen == "ignore":
                raise InvalidConfigError(
                    f"format('{fmt}') does not support the Ignore save mode (nor does Spark's Kafka sink): "
                    "use mode('append'), the default"
                )
        return wrapped_save(self, path, format=format, mode=mode, **kwargs)

    format.__doc__, mode.__doc__, save.__doc__ = wrapped_format.__doc__, wrapped_mode.__doc__, wrapped_save.__doc__
    DataFrameWriter.format = format  # type: ignore[method-assign]
    DataFrameWriter.mode = mode  # type: ignore[method-assign]
    DataFrameWriter.save = save  # type: ignore[method-assign,assignment]


LOCAL_FS_JAR = Path(__file__).resolve().parent.parent / ".cache" / "localfs" / "logstore-localfs.jar"
"""Hadoop's local file system without a child process per file (``jars/localfs``, built by ``make``)."""


def local_file_system_conf(conf: dict[str, str]) -> dict[str, str]:
    """Spark conf that makes a local-mode driver use ``jars/localfs``'s file system for ``file:`` paths.

    Without Hadoop's native library (a pip-installed pyspark has none) the
    local file system runs ``chmod`` in a child process for every file and
    directory it creates and ``readlink`` for both paths of every rename: a
    fork of the driver's JVM each, tens of milliseconds on a small machine.
    A streaming query pays four of each a micro-batch for its offset and
    commit logs — ~45 ms apiece, about half of a short micro-batch —, a
    Delta commit and every Parquet file written to a local table pay them
    too. ``jars/localfs`` makes the same system calls in-process; files,
    permissions and checksums are as Hadoop's.

    Empty (Hadoop's own file system) off POSIX systems (Windows has its own
    ``winutils`` path), when the jar is not built, for a cluster master (the
    jar is on this machine only), or when the driver's JVM is already
    running — an earlier session's, or ``spark-submit``'s, which started it
    before this interpreter — as its classpath can no longer change. A
    ``spark.driver.extraClassPath`` in ``conf`` (the user's overrides) is
    kept, after the jar; one set only in ``spark-defaults.conf`` is replaced,
    as any ``--conf`` replaces it: pass it to :func:`session`.
    """
    if os.name != "posix" or not LOCAL_FS_JAR.is_file() or not conf.get("spark.master", "local").startswith("local"):
        return {}
    from pyspark import SparkContext

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return {}
    classpath = [str(LOCAL_FS_JAR), *filter(None, [conf.get("spark.driver.extraClassPath")])]
    return {
        "spark.driver.extraClassPath": os.pathsep.join(classpath),
        "spark.hadoop.fs.file.impl": "logstore.hadoop.NioLocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "logstore.hadoop.NioLocalFs",
    }


def spark_home_without_python_zips() -> str | None:
    """A SPARK_HOME for a pip-installed pyspark whose Python workers import pyspark's compiled modules.

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python
    worker's path. Python compiles modules it imports from a zip each time
    (it caches bytecode only beside source files), so every worker the JVM
    starts — one per streaming query of a Python data source, every daemon,
    every non-reused worker — spent ~0.5 s of CPU compiling pyspark. The
    installed package is the same pyspark with its bytecode cached: this
    returns a directory of symlinks to everything in the package except
    ``python/`` (jars, bin, conf…), under the temporary directory, so workers
    find pyspark in site-packages instead.

    None (leave SPARK_HOME alone) when the user set SPARK_HOME, when pyspark
    is not a pip install with the zip, or when the directory cannot be made.
    """
    if "SPARK_HOME" in os.environ:
        return None
    import pyspark

    package = Path(pyspark.__file__).resolve().parent
    if not (package / "python" / "lib" / "pyspark.zip").is_file() or not (package / "jars").is_dir():
        return None
    key = hashlib.sha256(f"{package}:{pyspark.__version__}".encode()).hexdigest()[:16]
    home = Path(tempfile.gettempdir()) / f"logstore-spark-home-{os.getuid()}-{key}"
    if (home / "jars").is_dir():
        return str(home)
    try:
        # Made aside and renamed into place: another process may be making the same directory.
        partial = Path(tempfile.mkdtemp(prefix=home.name + ".", dir=home.parent))
        for entry in package.iterdir():
            if entry.name != "python":
                (partial / entry.name).symlink_to(entry)
        try:
            partial.rename(home)
        except OSError:  # the other process won; its directory is the same
            shutil.rmtree(partial, ignore_errors=True)
    except OSError:
        return None
    return str(home) if (home / "jars").is_dir() else None


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
