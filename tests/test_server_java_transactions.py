"""The Java client's transactional producer (org.apache.kafka:kafka-clients 4.1) against
`kafkalite serve` (issue 22): tests/java-client/KafkaliteTransactions.java commits, aborts, sends
offsets to a transaction, is fenced by a second producer with its transactional.id, and describes
the transaction, lists it and describes the partition's producers with the Admin client; its
read_committed consumer and the embedded API check what it wrote. Marker ``broker`` (Java and
Maven)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kafkalite
import maven_jars
import pytest

pytestmark = pytest.mark.broker
pytest_plugins = ["kafkalite.testing"]

SOURCE = Path(__file__).parent / "java-client" / "KafkaliteTransactions.java"


@pytest.fixture(scope="module")
def classpath(tmp_path_factory) -> str:
    return maven_jars.compiled(
        maven_jars.java_client_jars, SOURCE, tmp_path_factory.mktemp("java-tx-classes")
    )


def test_java_transactional_producer_commits_aborts_and_is_fenced(kafkalite_server, classpath):
    kafkalite.Admin(kafkalite_server.path).create_topic("java-tx", 2)
    cmd = [
        "java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
        "KafkaliteTransactions", kafkalite_server.bootstrap_servers, "java-tx",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert "COMMITTED" in lines
    assert any(line.startswith("FENCED ") for line in lines), lines
    # The fence bumped the epoch once to abort the zombie's transaction, once for the newer producer (as Kafka).
    assert "DESCRIBED CompleteCommit 2 0" in lines, lines
    assert "LISTED java-tx CompleteCommit" in lines, lines
    assert any(line.startswith("PRODUCERS ") and line.endswith("open=0") for line in lines), lines
    assert "GROUP-OFFSET 7" in lines, lines
    read = next(line for line in lines if line.startswith("READ ")).split(" ", 1)[1].split(",")
    expected = [f"commit-{i}" for i in range(10)] + [f"offsets-{i}" for i in range(4)]
    expected += [f"newer-{i}" for i in range(2)]
    assert read == sorted(expected)
    # The embedded reader agrees: the aborted and the zombie's records are there, hidden.
    consumer = kafkalite.Consumer(
        kafkalite_server.path, "java-tx", auto_offset_reset="earliest", isolation_level="read_committed"
    )
    polled = consumer.poll(timeout_ms=2000, max_records=1000)
    seen = sorted(r.value.decode() for records in polled.values() for r in records)
    consumer.close()
    assert seen == sorted(expected)
