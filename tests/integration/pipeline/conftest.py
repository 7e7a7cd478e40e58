"""Spark for the pipeline tests: one local[2] session per test module (skipped without pyspark
or Java). The tests drive a real server with the official client and read what it wrote."""

from __future__ import annotations

import os
import shutil
import sys

import pytest


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and os.path.exists(os.path.join(home, "bin", "java"))))


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if not _java_available():
        pytest.skip("Spark needs Java 17 (no java on PATH or JAVA_HOME)")
    from amps_emulator.pipeline.session import make_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = make_session("local[2]", "amps-pipeline-tests", progress=False,
                           conf={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()
