"""Exactly-once consume-transform-produce (issue 34 item 1) with real clients, on both group
protocols, against `kafkalite serve` and a Kafka 4.1 broker: the Java client (a consumer with
``group.protocol`` consumer or classic, a transactional producer calling
``sendOffsetsToTransaction(offsets, consumer.groupMetadata())``,
tests/java-client/ConsumeTransformProduce.java) and franz-go's ``GroupTransactSession``
(tests/go-client, KIP-848 through ``kgo.ServerSideBalancer``). Each commits the group's offsets
in its transactions with TxnOffsetCommit naming the member and its member epoch (or
generation); every input record must come out exactly once for a read_committed reader, and
the group's committed offsets must be the input's ends, the same on both servers, also when
the Go loop is killed with SIGKILL a third of the way and a new process takes over. Marker
``broker`` (Java, Maven, Go)."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import kafkalite
import maven_jars
import pytest
from kafka_broker import KafkaBroker

pytest.importorskip("kafka")
pytest.importorskip("confluent_kafka")
from test_server_transactions import values

pytestmark = pytest.mark.broker
pytest_plugins = ["kafkalite.testing"]

TESTS = Path(__file__).parents[1]
JAVA_SOURCE = TESTS / "java-client" / "ConsumeTransformProduce.java"
GO_MODULE = TESTS / "go-client"
COUNT, PARTITIONS = 300, 3
#: The consumer-protocol session timeout of both servers (the classic one is the client's: 6 s).
SESSION_MS = 6_000


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> list[str]:
    classpath = maven_jars.compiled(
        maven_jars.java_client_jars, JAVA_SOURCE, tmp_path_factory.mktemp("ctp-classes")
    )
    return [
        "java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath,
        "ConsumeTransformProduce",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def go(tmp_path_factory) -> list[str]:
    """tests/go-client built with `go build` (modules from the Go proxy into the default cache)."""
    if not shutil.which("go"):
        pytest.skip("go is missing (https://go.dev/dl/, 1.21+: it fetches the 1.26 toolchain go.mod names)")
    binary = tmp_path_factory.mktemp("go-eos") / "eos"
    done = subprocess.run(
        ["go", "build", "-o", str(binary), "."], cwd=GO_MODULE, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return [str(binary)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("eos-broker")
    # A dead consumer-protocol member's partitions move after its session (45 s by default).
    config = {
        "group.consumer.session.timeout.ms": str(SESSION_MS),
        "group.consumer.min.session.timeout.ms": "1000",
    }
    with KafkaBroker(work / "logs", work / "work", **config) as broker:
        yield broker


def create_topics(bootstrap: str, names: list[str]) -> None:
    import confluent_kafka.admin

    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    topics = [confluent_kafka.admin.NewTopic(n, PARTITIONS, 1) for n in names]
    for created in admin.create_topics(topics).values():
        created.result(60)


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """``group``'s committed offset of each partition of ``topic`` (-1001: none)."""
    import confluent_kafka.admin
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    wanted = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_group_offsets([wanted])[group].result(30)
    return {tp.partition: tp.offset for tp in listed.topic_partitions}


def exactly_once(bootstrap: str, name: str) -> dict[int, int]:
    """Every input record of ``name``-in came out of ``name``-out once for a read_committed
    reader and the group committed the input's ends: the committed offsets."""
    out = Counter(values(bootstrap, f"{name}-out", "read_committed", want=COUNT, timeout=30))
    assert out == Counter(b"out-%d" % i for i in range(COUNT)), "each input exactly once"
    committed = committed_offsets(bootstrap, name, f"{name}-in")
    assert sum(committed.values()) == COUNT, committed
    return committed


def loop_args(client: str, bootstrap: str, name: str, protocol: str, produce: int, expect: int) -> list[str]:
    """The loop's arguments: the Java program writes and expects COUNT records, the Go one
    writes ``produce`` and stops after ``expect``."""
    args = [bootstrap, f"{name}-in", f"{name}-out", name, protocol]
    return [*args, str(COUNT)] if client == "java" else [*args, str(produce), str(expect)]


def run_loop(program: list[str], client: str, bootstrap: str, name: str, protocol: str) -> dict[int, int]:
    """The program's loop over ``name``-in into ``name``-out as group ``name``, checked by
    ``exactly_once``."""
    create_topics(bootstrap, [f"{name}-in", f"{name}-out"])
    done = subprocess.run(
        [*program, *loop_args(client, bootstrap, name, protocol, COUNT, COUNT)],
        capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.splitlines()[-1].split()[:2] == ["DONE", str(COUNT)], done.stdout[-2000:]
    return exactly_once(bootstrap, name)


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
@pytest.mark.parametrize("client", ["java", "go"])
def test_consume_transform_produce_commits_as_on_a_broker(request, tmp_path, broker, client, protocol):
    program = request.getfixturevalue(client)
    name = f"eos-{client}-{protocol}"
    on_broker = run_loop(program, client, broker.bootstrap_servers, name, protocol)
    with kafkalite.Server(tmp_path, group_consumer_session_timeout_ms=SESSION_MS) as server:
        on_kafkalite = run_loop(program, client, server.bootstrap_servers, name, protocol)
    assert on_kafkalite == on_broker


def crashed_loop(go: list[str], bootstrap: str, name: str, protocol: str) -> None:
    """franz-go's loop killed with SIGKILL a third of the way (most likely inside a
    transaction: its records written, its offsets sent), then a new process with the same
    transactional id and group takes over: it fences the dead one's transaction, gets the
    partitions once the dead member's session ended, and goes on from the committed offsets."""
    create_topics(bootstrap, [f"{name}-in", f"{name}-out"])
    args = loop_args("go", bootstrap, name, protocol, COUNT, COUNT)
    first = subprocess.Popen([*go, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        for line in first.stdout:
            if line.startswith("COMMITTED ") and int(line.split()[1]) >= COUNT // 3:
                break
        else:
            pytest.fail(f"the first loop ended early: {first.stderr.read() if first.stderr else ''}")
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.communicate(timeout=30)
    left = COUNT - sum(max(o, 0) for o in committed_offsets(bootstrap, name, f"{name}-in").values())
    assert 0 < left < COUNT
    done = subprocess.run(
        [*go, *loop_args("go", bootstrap, name, protocol, 0, left)],
        capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_a_killed_loop_replaced_still_gives_each_input_exactly_once(tmp_path, go, broker, protocol):
    name = f"eos-crash-{protocol}"
    crashed_loop(go, broker.bootstrap_servers, name, protocol)
    on_broker = exactly_once(broker.bootstrap_servers, name)
    with kafkalite.Server(tmp_path, group_consumer_session_timeout_ms=SESSION_MS) as server:
        crashed_loop(go, server.bootstrap_servers, name, protocol)
        on_kafkalite = exactly_once(server.bootstrap_servers, name)
    assert on_kafkalite == on_broker
