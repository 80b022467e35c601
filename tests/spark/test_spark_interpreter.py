"""format("kafkalite") from an interpreter that is not the activated venv's: Spark's workers
would start ``python3`` from PATH, which has no kafkalite (DATA_SOURCE_NOT_FOUND); importing
kafkalite.spark before the session starts points them at the driver's interpreter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import run_python_ok

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark  # starts a local Spark session: -m 'not spark' leaves it out

SCRIPT = textwrap.dedent(
    """
    import sys
    from kafkalite import Admin, Producer
    import kafkalite.spark  # before the session: Spark's workers run this interpreter

    path = sys.argv[1]
    Admin(path).create_topic("t", 2)
    with Producer(path) as producer:
        for i in range(10):
            producer.send("t", value=b"%d" % i, partition=i % 2)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    print("COUNT", spark.read.format("kafkalite").option("subscribe", "t").load(path).count())
    spark.stop()
    """
)


def _not_activated_env() -> dict[str, str]:
    """No PYSPARK_* variables, no venv marker, and the venv's bin directory off PATH."""
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.abspath(p) != venv_bin
    )
    return env


def test_format_kafkalite_works_from_a_venv_that_is_not_activated(tmp_path):
    env = _not_activated_env()
    python3 = shutil.which("python3", path=env["PATH"])
    if python3 is not None:  # the fault is real: PATH's python3 cannot load the data source
        probe = subprocess.run(
            [python3, "-c", "import pyarrow, kafkalite"],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        if probe.returncode == 0:
            pytest.skip(f"{python3} on PATH has kafkalite and pyarrow: the failure cannot be reproduced here")
    out = run_python_ok(SCRIPT, str(tmp_path / "data"), env=env, timeout=240, stderr_tail=3000)
    assert "COUNT 10" in out.stdout


def test_plain_import_of_kafkalite_points_spark_workers_here():
    """`import kafkalite` alone is enough (no Spark needed to check): PYSPARK_PYTHON defaults to
    this interpreter, and a user's own choice is never overridden."""
    import os
    import subprocess
    import sys

    code = "import os, kafkalite; print(os.environ.get('PYSPARK_PYTHON'))"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    unset = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert unset.stdout.strip() == sys.executable, unset.stderr
    chosen = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYSPARK_PYTHON": "/opt/py"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert chosen.stdout.strip() == "/opt/py"
