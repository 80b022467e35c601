"""The Java client (org.apache.kafka:kafka-clients 4.x from Maven Central) against `kafkalite serve`:
tests/java-client/KafkaliteJavaClient.java, compiled here with javac, produces every codec with
headers and null keys/values, consumes as a group and uses the AdminClient; the embedded API
checks what it wrote, and it checks what Python wrote. Marker ``broker`` (Java and Maven)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import kafkalite
import maven_jars
import pytest
from server_clients import (
    INIT_PRODUCER_ID,
    embedded_read,
    items,
    served_api_keys,
    stored_codecs,
    write_from_python,
)
from test_server import CODECS

pytestmark = pytest.mark.broker
pytest_plugins = ["kafkalite.testing"]

SOURCE = Path(__file__).parents[1] / "java-client" / "KafkaliteJavaClient.java"
N = 200


class JavaClient:
    def __init__(self, classpath: str) -> None:
        self.classpath = classpath

    def run(self, *args: object, idempotence: bool | None = None, check: bool = True) -> list[str]:
        """Run one mode of the program; returns its stdout lines (and fails the test with its
        stderr when it exits non-zero and ``check``)."""
        props = ["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]
        if idempotence is not None:
            props.append(f"-Denable.idempotence={str(idempotence).lower()}")
        cmd = ["java", "-Xmx256m", *props, "-cp", self.classpath, "KafkaliteJavaClient", *map(str, args)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        self.stderr = done.stderr
        if check:
            assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stderr[-4000:]}"
        return done.stdout.splitlines()


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClient:
    jars = maven_jars.require(maven_jars.java_client_jars)
    if not shutil.which("javac"):
        if os.environ.get("CI"):
            pytest.fail("javac is missing (.ci/run installs openjdk-17-jdk-headless)")
        pytest.skip("javac is missing (apt-get install openjdk-17-jdk-headless)")
    classes = tmp_path_factory.mktemp("java-classes")
    classpath = f"{jars}/*"
    done = subprocess.run(
        ["javac", "-d", str(classes), "-cp", classpath, str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return JavaClient(f"{classes}{os.pathsep}{classpath}")


def parse_records(lines: list[str]) -> list[tuple[str, int, int, bytes | None, bytes | None, list]]:
    """The program's ``R topic partition offset key value headers`` lines, decoded."""

    def unhex(s: str) -> bytes | None:
        return None if s == "-" else bytes.fromhex(s)

    out = []
    for line in lines:
        if not line.startswith("R "):
            continue
        fields = line.split(" ")
        _, topic, partition, offset, key, value = fields[:6]
        raw_headers = fields[6].split(",") if len(fields) > 6 and fields[6] else []
        headers = [(h.split("=", 1)[0], unhex(h.split("=", 1)[1])) for h in raw_headers]
        out.append((topic, int(partition), int(offset), unhex(key), unhex(value), headers))
    return out


def test_java_admin_client_creates_lists_and_describes(kafkalite_server, java):
    lines = java.run("admin", kafkalite_server.bootstrap_servers, "java-admin", 2)
    assert lines == [
        "CREATED java-admin",
        "EXISTS TopicExistsException",
        "LISTED java-admin",
        "DESCRIBED java-admin 2 leader=0",
        "CLUSTER nodes=1 controller=0",
    ]
    info = kafkalite.Admin(kafkalite_server.path).describe_topic("java-admin")
    assert len(info.partitions) == 2 and info.config["retention.ms"] == 3_600_000


def test_java_producer_every_codec_read_by_the_embedded_consumer(kafkalite_server, java):
    lines = java.run("produce", kafkalite_server.bootstrap_servers, "java", N, *CODECS, idempotence=False)
    for codec in CODECS:
        topic = f"java-{codec}"
        assert [line for line in lines if line.startswith(f"ACK {topic} ")] == [
            f"ACK {topic} 0 {i}" for i in range(N)
        ]
        got = embedded_read(kafkalite_server.path, topic, N)
        assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
            (i, *item) for i, item in enumerate(items(N))
        ]
        # Stored as sent: the Java client's batches keep its codec on disk.
        assert stored_codecs(kafkalite_server.path, topic) == {CODECS.index(codec)}


def test_java_consumer_group_reads_what_python_wrote(kafkalite_server, java):
    """confluent-kafka writes every codec, the embedded Producer writes a topic of its own; the
    Java consumer reads them all in one group and commits, and the embedded side sees its
    committed offsets."""
    written = write_from_python(kafkalite_server, N)
    total = sum(map(len, written.values()))
    lines = java.run("consume", kafkalite_server.bootstrap_servers, "java-group", total, *written)
    assert lines[-1] == f"COMMITTED {total}"
    got = parse_records(lines)
    for topic, want in written.items():
        assert [r[2:] for r in got if r[0] == topic] == [(i, *item) for i, item in enumerate(want)], topic
    description = kafkalite.Admin(kafkalite_server.path).describe_group("java-group")
    assert {(p.topic, p.partition): p.committed for p in description.partitions} == {
        (topic, 0): len(want) for topic, want in written.items()
    }


def test_java_producer_with_its_default_config(kafkalite_server, java):
    """The Java client enables idempotence by default (since 3.0): InitProducerId is served, and
    the default producer writes every record once."""
    assert INIT_PRODUCER_ID in served_api_keys(kafkalite_server.address)
    lines = java.run("produce", kafkalite_server.bootstrap_servers, "java-default", 10, "lz4", check=False)
    assert lines[-1] == "ACK java-default-lz4 0 9", java.stderr[-3000:]
    assert len(embedded_read(kafkalite_server.path, "java-default-lz4", 10)) == 10
