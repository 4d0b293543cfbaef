"""The local file system ``logstore.spark.session()`` gives a local driver (``jars/localfs``).

Hadoop's own, without its native library, runs ``chmod`` and ``readlink`` in a
child process for every file it creates and renames; ``jars/localfs`` makes the
same calls in-process. Every Spark test (streaming checkpoints, Delta commits,
compaction) runs on it; these check the parts that differ from Hadoop's.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from logstore.spark import LOCAL_FS_JAR, local_file_system_conf

pytestmark = pytest.mark.spark


def _fs(spark: Any) -> tuple[Any, Any]:
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    return jvm, jvm.org.apache.hadoop.fs.Path("file:///").getFileSystem(conf)


def test_the_session_reads_and_writes_local_paths_through_the_in_process_file_system(spark: Any) -> None:
    assert LOCAL_FS_JAR.is_file(), "make builds jars/localfs into .cache/localfs"
    jvm, fs = _fs(spark)
    assert fs.getClass().getName() == "logstore.hadoop.NioLocalFileSystem"
    assert fs.getRawFileSystem().getClass().getName() == "logstore.hadoop.NioRawLocalFileSystem"
    conf = spark._jsc.hadoopConfiguration()
    fc = jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)
    assert fc.getDefaultFileSystem().getClass().getName() == "logstore.hadoop.NioLocalFs"


def test_files_and_directories_get_the_permissions_hadoop_asks_for(spark: Any, tmp_path: Path) -> None:
    jvm, fs = _fs(spark)
    hpath, perm = jvm.org.apache.hadoop.fs.Path, jvm.org.apache.hadoop.fs.permission.FsPermission
    d = tmp_path / "d"
    assert fs.mkdirs(hpath(d.as_uri()), perm("750"))
    out = fs.create(hpath((d / "f").as_uri()))  # 666 less Hadoop's umask (fs.permissions.umask-mode, 022)
    out.write(bytearray(b"abc"))
    out.close()
    assert stat.S_IMODE(d.stat().st_mode) == 0o750
    assert stat.S_IMODE((d / "f").stat().st_mode) == 0o644
    fs.setPermission(hpath((d / "f").as_uri()), perm("604"))
    assert stat.S_IMODE((d / "f").stat().st_mode) == 0o604
    assert (d / "f").read_bytes() == b"abc"
    assert (d / ".f.crc").is_file()  # checksummed as Hadoop's local file system is


def test_a_symbolic_link_is_still_reported_as_one(spark: Any, tmp_path: Path) -> None:
    jvm, fs = _fs(spark)
    hpath = jvm.org.apache.hadoop.fs.Path
    (tmp_path / "target").write_bytes(b"12345")
    os.symlink(tmp_path / "target", tmp_path / "link")
    link = fs.getFileLinkStatus(hpath(str(tmp_path / "link")))
    assert link.isSymlink()
    assert link.getSymlink().toUri().getPath() == str(tmp_path / "target")
    plain = fs.getFileLinkStatus(hpath((tmp_path / "target").as_uri()))
    assert not plain.isSymlink() and plain.isFile() and plain.getLen() == 5


def test_only_a_new_local_driver_gets_it(spark: Any) -> None:
    # A driver that is still to start (a fresh interpreter): the jar goes before the user's own classpath.
    probe = (
        "import json; from logstore.spark import local_file_system_conf as c; print(json.dumps(["
        "c({'spark.master': 'local[2]', 'spark.driver.extraClassPath': '/x.jar'}), c({'spark.master': 'yarn'})]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    local, cluster = json.loads(done.stdout)
    assert local == {
        "spark.driver.extraClassPath": f"{LOCAL_FS_JAR}{os.pathsep}/x.jar",
        "spark.hadoop.fs.file.impl": "logstore.hadoop.NioLocalFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "logstore.hadoop.NioLocalFs",
    }
    assert cluster == {}  # the jar is on this machine only
    # Under spark-submit the JVM was started before the interpreter, with the classpath it was given.
    submitted = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={**env, "PYSPARK_GATEWAY_PORT": "1"},
    )
    assert json.loads(submitted.stdout) == [{}, {}]
    # This test run's driver is running: its classpath can no longer change, so nothing is asked of it.
    assert local_file_system_conf({"spark.master": "local[2]"}) == {}
