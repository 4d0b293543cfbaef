"""A cluster's Spark conf ``spark.logstore.root`` names the store a notebook maintains."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from maintenance import store_config


@pytest.fixture
def spark_root(spark: SparkSession, tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "store"
    root.mkdir()
    spark.conf.set("spark.logstore.root", str(root))
    yield root
    spark.conf.unset("spark.logstore.root")


@pytest.mark.spark
def test_the_spark_conf_names_the_root_unless_the_parameter_does(
    spark: SparkSession, spark_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOGSTORE_ROOT", str(tmp_path / "elsewhere"))
    assert store_config("", spark).root == str(spark_root)
    assert store_config(str(tmp_path), spark).root == str(tmp_path)
