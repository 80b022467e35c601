"""Exactly-once consume-transform-produce (issue 34 item 1) with real clients, on both group
protocols, against `kafkalite serve` and a Kafka 4.1 broker: the Java client (a consumer with
``group.protocol`` consumer or classic, a transactional producer calling
``sendOffsetsToTransaction(offsets, consumer.groupMetadata())``,
tests/java-client/ConsumeTransformProduce.java) and franz-go's ``GroupTransactSession``
(tests/go-client, KIP-848 through ``kgo.ServerSideBalancer``). Each commits the group's offsets
in its transactions with TxnOffsetCommit naming the member and its member epoch (or
generation); every input record must come out exactly once for a read_committed reader, and
the group's committed offsets must be the input's ends, the same on both servers. Marker
``broker`` (Java, Maven, Go)."""

from __future__ import annotations

import os
import shutil
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

TESTS = Path(__file__).parent
JAVA_SOURCE = TESTS / "java-client" / "ConsumeTransformProduce.java"
GO_MODULE = TESTS / "go-client"
COUNT, PARTITIONS = 300, 3


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
        if os.environ.get("CI"):
            pytest.fail("go is missing")
        pytest.skip("go is missing (https://go.dev/dl/): the franz-go test needs it")
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
    with KafkaBroker(work / "logs", work / "work") as broker:
        yield broker


def create_topics(bootstrap: str, names: list[str]) -> None:
    import confluent_kafka.admin

    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    topics = [confluent_kafka.admin.NewTopic(n, PARTITIONS, 1) for n in names]
    for created in admin.create_topics(topics).values():
        created.result(60)


def run_loop(program: list[str], bootstrap: str, name: str, protocol: str) -> dict[int, int]:
    """The program's loop over ``name``-in into ``name``-out as group ``name``: the group's
    committed offset per partition of the input, after checking the output."""
    import confluent_kafka.admin
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    source, sink = f"{name}-in", f"{name}-out"
    create_topics(bootstrap, [source, sink])
    done = subprocess.run(
        [*program, bootstrap, source, sink, name, protocol, str(COUNT)],
        capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.split()[:2] == ["DONE", str(COUNT)], done.stdout
    out = Counter(values(bootstrap, sink, "read_committed", want=COUNT, timeout=30))
    assert out == Counter(b"out-%d" % i for i in range(COUNT)), "each input exactly once"
    wanted = ConsumerGroupTopicPartitions(name, [TopicPartition(source, p) for p in range(PARTITIONS)])
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_group_offsets([wanted])[name].result(30)
    committed = {tp.partition: tp.offset for tp in listed.topic_partitions}
    assert sum(committed.values()) == COUNT, committed
    return committed


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
@pytest.mark.parametrize("client", ["java", "go"])
def test_consume_transform_produce_commits_as_on_a_broker(request, tmp_path, broker, client, protocol):
    program = request.getfixturevalue(client)
    name = f"eos-{client}-{protocol}"
    on_broker = run_loop(program, broker.bootstrap_servers, name, protocol)
    with kafkalite.Server(tmp_path) as server:
        on_kafkalite = run_loop(program, server.bootstrap_servers, name, protocol)
    assert on_kafkalite == on_broker
