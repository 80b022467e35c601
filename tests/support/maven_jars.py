"""Jars from Maven Central for the tests and benchmarks that run Java: one way to fetch them.

Each set of jars is a small pom (``tests/<name>/pom.xml``, nothing built or packaged) whose
dependencies ``mvn dependency:copy-dependencies`` copies into a cache folder under
``~/.cache/kafkalite/``. A folder is renamed into place only once complete, so it is whole or
absent. The Kafka broker (``kafka_broker.py``), Kafka's tools (``test_server_tools.py``), the
Java client (``test_server_clients.py``) and
Spark's Kafka source (``test_server_clients.py``, ``benches/bench_peers.py``) come from here.
``.ci/run`` fetches them all; outside CI a test without Java/Maven/network skips (``require``)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

TESTS = Path(__file__).resolve().parents[1]  # tests/, beside support/
CACHE = Path.home() / ".cache" / "kafkalite"
#: kafka-clients for the Java client tests, the same release as the broker (kafka_broker.py).
JAVA_CLIENT_VERSION = "4.1.1"

T = TypeVar("T")


def copy_dependencies(pom: Path, folder: Path, **properties: str) -> Path:
    """``folder`` holding ``pom``'s runtime dependencies, fetched with Maven when missing
    (``properties`` become ``-Dkey=value``). Raises RuntimeError saying what is missing.
    Several pytest-xdist workers may ask at once: one fetches under ``<folder>.lock``, the
    others wait for it and find the folder there."""
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if folder.is_dir():  # another worker fetched it while this one waited
            return folder
        return _fetch(pom, folder, properties)


def _fetch(pom: Path, folder: Path, properties: dict[str, str]) -> Path:
    if not shutil.which("java"):
        raise RuntimeError("Java 17+ is needed (java not on PATH)")
    if not shutil.which("mvn"):
        raise RuntimeError("the jars are fetched with Maven (mvn not on PATH; apt-get install maven)")
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    cmd = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime"]
    cmd += [f"-D{key}={value}" for key, value in properties.items()]
    cmd.append(f"-DoutputDirectory={partial}")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise RuntimeError(
            f"fetching {pom.parent.name} ({properties}) with Maven failed:\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    partial.rename(folder)  # complete or absent, never half there
    return folder


def kafka_tools_jars() -> Path:
    """Kafka's command-line tools (kafka-tools and kafka_2.13, tests/kafka-tools/pom.xml): the
    main classes behind kafka-consumer-groups, kafka-configs and kafka-log-dirs."""
    return copy_dependencies(
        TESTS / "kafka-tools" / "pom.xml",
        CACHE / f"kafka-tools-{JAVA_CLIENT_VERSION}",
        **{"kafka.version": JAVA_CLIENT_VERSION},
    )


def compiled(jars: Callable[[], Path], source: Path, classes: Path) -> str:
    """``source`` (one Java file) compiled into ``classes`` against ``jars()`` (fetched, or the
    test skipped as ``require`` says; without javac the test skips, or fails in CI); returns the
    classpath to run it with."""
    folder = require(jars)
    if not shutil.which("javac"):
        if os.environ.get("CI"):
            pytest.fail("javac is missing (.ci/run installs openjdk-17-jdk-headless)")
        pytest.skip("javac is missing (apt-get install openjdk-17-jdk-headless)")
    done = subprocess.run(
        ["javac", "-d", str(classes), "-cp", f"{folder}/*", str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return f"{classes}{os.pathsep}{folder}/*"


def kafka_streams_jars() -> Path:
    """Kafka Streams (kafka-streams and its dependencies; tests/kafka-streams/pom.xml)."""
    return copy_dependencies(
        TESTS / "kafka-streams" / "pom.xml",
        CACHE / f"kafka-streams-{JAVA_CLIENT_VERSION}",
        **{"kafka.version": JAVA_CLIENT_VERSION},
    )


def mirror_maker_jars() -> Path:
    """Kafka's MirrorMaker 2 (connect-mirror, connect-runtime; tests/mirror-maker/pom.xml)."""
    return copy_dependencies(
        TESTS / "mirror-maker" / "pom.xml",
        CACHE / f"mirror-maker-{JAVA_CLIENT_VERSION}",
        **{"kafka.version": JAVA_CLIENT_VERSION},
    )


def java_client_jars() -> Path:
    """org.apache.kafka:kafka-clients and its codecs (tests/java-client/pom.xml)."""
    return copy_dependencies(
        TESTS / "java-client" / "pom.xml",
        CACHE / f"kafka-clients-{JAVA_CLIENT_VERSION}",
        **{"kafka.version": JAVA_CLIENT_VERSION},
    )


def spark_kafka_jars(spark_version: str) -> tuple[str, list[str]]:
    """spark-sql-kafka-0-10 for ``spark_version`` (or, when Maven Central has no such release
    yet, the newest earlier minor release of the same major version: pyspark 4.3.0 runs 4.2.0's;
    a release already in the cache is taken first); returns (version used, the jars pyspark does
    not already ship, for ``spark.jars``)."""
    import pyspark

    major, minor = (int(x) for x in spark_version.split(".")[:2])
    candidates = [spark_version] + [f"{major}.{m}.0" for m in range(minor - 1, -1, -1)]
    cached = [v for v in candidates if (CACHE / f"spark-sql-kafka-0-10_2.13-{v}").is_dir()]
    errors = []
    for version in cached[:1] or candidates:  # no Maven run (seconds) when one is already here
        try:
            folder = copy_dependencies(
                TESTS / "spark_kafka" / "pom.xml",
                CACHE / f"spark-sql-kafka-0-10_2.13-{version}",
                **{"spark.version": version},
            )
        except RuntimeError as e:
            errors.append(f"{version}: {str(e).strip().splitlines()[:2]}")
            continue
        shipped = {_artifact(j) for j in os.listdir(Path(pyspark.__file__).parent / "jars")}
        jars = sorted(str(j) for j in folder.glob("*.jar") if _artifact(j.name) not in shipped)
        return version, jars
    raise RuntimeError("spark-sql-kafka-0-10 could not be fetched from Maven Central:\n" + "\n".join(errors))


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    parts = os.path.basename(jar)[: -len(".jar")].split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


def require(fetch: Callable[[], T]) -> T:
    """``fetch()`` for a test: skip with the reason when the jars cannot be had, except in CI,
    where that is a failure (CI installs what it needs)."""
    try:
        return fetch()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"jars from Maven Central unavailable: {e}")
