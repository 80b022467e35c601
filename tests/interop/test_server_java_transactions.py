"""The Java client's transactional producer (org.apache.kafka:kafka-clients 4.1) against
`kafkalite serve` (issue 22): tests/java-client/KafkaliteTransactions.java commits, aborts, sends
offsets to a transaction, is fenced by a second producer with its transactional.id, and describes
the transaction, lists it and describes the partition's producers with the Admin client; its
read_committed consumer and the embedded API check what it wrote. The server finalizes
transaction.version 2, so the client runs KIP-890 part 2 (Produce v12 adds the partitions,
TxnOffsetCommit v5 the group's, every EndTxn v5 bumps the epoch); the same program against a
Kafka 4.1 broker prints the same facts and leaves the same markers and epochs in the
partitions. Marker ``broker`` (Java and Maven)."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import kafkalite
import maven_jars
import pytest
from kafka_broker import KafkaBroker
from test_broker_transactions_files import _batches

pytestmark = pytest.mark.broker
pytest_plugins = ["kafkalite.testing"]

SOURCE = Path(__file__).parents[1] / "java-client" / "KafkaliteTransactions.java"


@pytest.fixture(scope="module")
def classpath(tmp_path_factory) -> str:
    return maven_jars.compiled(
        maven_jars.java_client_jars, SOURCE, tmp_path_factory.mktemp("java-tx-classes")
    )


def run(classpath: str, bootstrap: str) -> list[str]:
    """KafkaliteTransactions against ``bootstrap`` (topic java-tx, 2 partitions): its lines."""
    cmd = [
        "java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
        "KafkaliteTransactions", bootstrap, "java-tx",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.splitlines()


def test_java_transactional_producer_commits_aborts_and_is_fenced(kafkalite_server, classpath):
    kafkalite.Admin(kafkalite_server.path).create_topic("java-tx", 2)
    lines = run(classpath, kafkalite_server.bootstrap_servers)
    assert "COMMITTED" in lines
    assert any(line.startswith("FENCED ") for line in lines), lines
    # Transaction version 2: each of the three ends bumped the epoch (0 -> 3); the fence bumped
    # it once to abort the zombie's transaction (4), the newer producer's init once (5), its
    # commit once (6), as a Kafka 4.1 broker does (test_java_tv2_matches_the_broker).
    assert "DESCRIBED CompleteCommit 6 0" in lines, lines
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


def _partition_history(logs: Path, partition: int) -> list[tuple]:
    """Partition ``partition`` of java-tx record by record: ("record", value, producer, epoch)
    and ("marker", commit?, producer, epoch), producer ids numbered by first appearance (each
    side allocates its own). Batch boundaries are left out: the client's batching may differ."""
    ids: dict[int, int] = {}
    out: list[tuple] = []
    for b in _batches(logs / f"java-tx-{partition}"):
        producer = ids.setdefault(b["producer_id"], len(ids))
        if b["control"]:
            out.append(("marker", struct.unpack(">hh", b["keys"][0])[1] == 1, producer, b["producer_epoch"]))
        else:
            out += [("record", v, producer, b["producer_epoch"]) for v in b["values"]]
    return out


def test_java_tv2_matches_the_broker(tmp_path, classpath):
    """The same program against a Kafka 4.1 broker (transaction.version 2 finalized, its
    default) and against `kafkalite serve`: the same facts printed (fencing, the described
    epoch, offsets, what read_committed reads), and in both partitions the same records and
    markers at the same epochs: the epoch bumped at every end, the markers carrying it."""
    import confluent_kafka.admin

    broker_logs = tmp_path / "broker-logs"
    with KafkaBroker(broker_logs, tmp_path / "broker-work") as broker:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        for created in admin.create_topics([confluent_kafka.admin.NewTopic("java-tx", 2, 1)]).values():
            created.result(60)
        on_broker = run(classpath, broker.bootstrap_servers)
    lite = tmp_path / "kafkalite-data"
    kafkalite.Admin(str(lite)).create_topic("java-tx", 2)
    with kafkalite.Server(lite) as server:
        on_kafkalite = run(classpath, server.bootstrap_servers)
    assert on_kafkalite == on_broker
    for p in (0, 1):
        history = _partition_history(lite, p)
        assert history == _partition_history(broker_logs, p)
        assert [m[3] for m in history if m[0] == "marker"] == sorted(
            {m[3] for m in history if m[0] == "marker"}
        )
