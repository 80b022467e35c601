"""The README is true verbatim: every ```python block runs, in order, as one script in a fresh
working directory (later blocks build on earlier ones, as a reader would run them), and every
```bash block except the quick start's install commands runs with `bash -e` after them. The
Spark blocks run in tests of their own (marker ``spark``).

Two things differ from a reader's machine, nothing else: the Kafka port 9092 becomes a free port
(other tests and servers share the host), and Spark's Kafka connector, which a snippet fetches
with ``spark.jars.packages`` (Ivy), comes as the same artifacts through Maven (``maven_jars``): Ivy
also searches ~/.m2, and fails where Maven left a pom without its jar there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import maven_jars
import pytest
from serve_proc import free_port

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text()) if lang == language]


def is_spark(code: str) -> bool:
    return "spark." in code


def is_install(code: str) -> bool:
    return "pip install" in code


def is_spark_bash(code: str) -> bool:
    return "SparkSession" in code


SPARK_KAFKA_PACKAGE = re.compile(
    r'\.config\("spark\.jars\.packages", "org\.apache\.spark:spark-sql-kafka-0-10_2\.13:([0-9.]+)"\)'
)


def as_tested(code: str) -> str:
    """The snippet with a free port for 9092 and, where it asks Ivy for spark-sql-kafka-0-10,
    the same release's jars fetched by Maven (checking that the release it names exists)."""
    code = code.replace("127.0.0.1:9092", f"127.0.0.1:{free_port()}")
    wanted = SPARK_KAFKA_PACKAGE.search(code)
    if wanted:
        import pyspark

        version, jars = maven_jars.require(lambda: maven_jars.spark_kafka_jars(pyspark.__version__))
        assert wanted.group(1) == version, (
            f"the README names spark-sql-kafka {wanted.group(1)}, Maven has {version}"
        )
        code = SPARK_KAFKA_PACKAGE.sub(f'.config("spark.jars", "{",".join(jars)}")', code)
    return code


def run_bash(code: str, cwd: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    env.pop("KAFKALITE_DATA_DIR", None)
    done = subprocess.run(
        ["bash", "-e", "-c", as_tested(code)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"README commands failed:\n{code}\n--- stderr ---\n{done.stderr[-4000:]}"


def run_python(code: str, cwd: Path, timeout: float) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"README code failed:\n{code}\n--- stderr ---\n{done.stderr[-4000:]}"


def test_readme_has_the_blocks_this_test_runs():
    assert len(blocks("python")) >= 3 and any(is_spark(b) for b in blocks("python"))
    assert any(is_install(b) for b in blocks("bash")) and any(not is_install(b) for b in blocks("bash"))


@pytest.mark.slow
def test_python_blocks_run_as_written(tmp_path):
    code = "\n\n".join(b for b in blocks("python") if not is_spark(b))
    run_python(code, tmp_path, timeout=300)


@pytest.mark.slow
def test_bash_blocks_run_as_written(tmp_path):
    for code in blocks("bash"):
        if not is_install(code) and not is_spark_bash(code):
            run_bash(code, tmp_path)


@pytest.mark.spark
def test_spark_bash_blocks_run_as_written(tmp_path):
    spark_blocks = [b for b in blocks("bash") if is_spark_bash(b)]
    assert spark_blocks, "the README's `kafkalite serve` walkthrough (with Spark) is gone"
    for code in spark_blocks:
        run_bash(code, tmp_path)


@pytest.mark.spark
def test_spark_block_runs_as_written(tmp_path):
    (spark_block,) = [b for b in blocks("python") if is_spark(b)]
    setup = "\n\n".join(b for b in blocks("python") if not is_spark(b))  # the topics it reads
    run_python(setup + "\n\n" + spark_block, tmp_path, timeout=600)
