"""The jars a connector folder adds to a Spark session: those pyspark does not ship, with or without Delta's."""

from pathlib import Path

from logstore.spark import delta_jars, unbundled_jars


def test_a_connector_folder_adds_its_own_jars_and_none_that_spark_ships(tmp_path: Path) -> None:
    for name in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "kafka-clients-3.9.2.jar", "scala-library-2.13.15.jar"):
        (tmp_path / name).write_bytes(b"")
    names = [Path(j).name for j in unbundled_jars(tmp_path)]
    assert names == ["kafka-clients-3.9.2.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar"]
    assert delta_jars(tmp_path) == []  # no delta-spark jar: Delta comes from Maven instead
