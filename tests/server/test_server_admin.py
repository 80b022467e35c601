"""The admin APIs of `kafkalite serve` (issue 13) against confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient: DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, DeleteRecords, DeleteGroups, DescribeCluster and CreateTopics' checks.
Every result is cross-checked with the embedded ``kafkalite.Admin`` on the same data directory
(and the other way round); error cases get Kafka's error codes; hostile values never crash the
server nor touch a path outside the data directory."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import subprocess
import time

import kafkalite
import pytest
from kafkalite.datadir import TOPIC_DEFAULTS
from kafkalite.server import Server

pytest_plugins = ["kafkalite.testing"]

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

TIMEOUT = 20

# confluent-kafka's alter_configs (the legacy AlterConfigs API, tested here) is deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")


def admin_client(server: Server) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap_servers})


def error_of(future) -> KafkaError | None:
    """The KafkaError a confluent future failed with (None when it succeeded)."""
    exc = future.exception(timeout=TIMEOUT)
    return None if exc is None else exc.args[0]


def code_of(future) -> int:
    err = error_of(future)
    return 0 if err is None else err.code()


def produce(server: Server, topic: str, count: int, partition: int = 0) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers, "linger.ms": 5})
    for i in range(count):
        p.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=partition)
    assert p.flush(TIMEOUT) == 0


def as_text(value: object) -> str:
    """A config value as Kafka's configs travel."""
    return str(value).lower() if isinstance(value, bool) else str(value)


# -- DeleteTopics -----------------------------------------------------------------------------


def test_delete_topics_removes_what_admin_sees_and_the_folders(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("gone", partitions=3)
    admin.create_topic("kept")
    client = admin_client(kafkalite_server)
    assert error_of(client.delete_topics(["gone"])["gone"]) is None
    assert admin.list_topics() == ["kept"]
    leftovers = [n for n in os.listdir(kafkalite_server.path) if n.startswith("gone")]
    assert leftovers == []
    # Kafka's answer for a topic that is not there (any more).
    assert code_of(client.delete_topics(["gone"])["gone"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    # A topic deleted over the network can be created again, empty, by either route.
    admin.create_topic("gone")
    assert admin.describe_topic("gone").partitions[0].end_offset == 0


def test_a_topic_deleted_over_the_network_fails_an_open_producer_of_another_process(kafkalite_server, spawn):
    """An embedded Producer in another process keeps the partition open; after DeleteTopics its
    next send gets UNKNOWN_TOPIC_OR_PARTITION (UnknownTopicOrPartitionError), as after
    Admin.delete_topic, and nothing re-creates the folder."""
    kafkalite.Admin(kafkalite_server.path).create_topic("t")
    child = spawn.code(
        """
import sys
import kafkalite
from kafkalite.errors import UnknownTopicOrPartitionError
with kafkalite.Producer(sys.argv[1]) as p:
    p.send("t", b"before").get(timeout=10)
    print("sent", flush=True)
    sys.stdin.readline()
    try:
        p.send("t", b"after").get(timeout=10)
        print("acknowledged", flush=True)
    except UnknownTopicOrPartitionError:
        print("UnknownTopicOrPartitionError", flush=True)
""",
        kafkalite_server.path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    assert child.stdout.readline().strip() == "sent"
    client = admin_client(kafkalite_server)
    assert error_of(client.delete_topics(["t"])["t"]) is None
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "UnknownTopicOrPartitionError"
    assert child.wait(30) == 0
    assert not os.path.exists(os.path.join(kafkalite_server.path, "t-0"))


def test_delete_topics_waits_for_an_append_in_flight(kafkalite_server):
    """A shared writer mid-append holds the partition's append lock: DeleteTopics waits for it
    (the rename happens under that lock), then deletes."""
    kafkalite.Admin(kafkalite_server.path).create_topic("busy")
    lock_path = os.path.join(kafkalite_server.path, "busy-0", ".kafkalite.lock")
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # an append in flight
        client = admin_client(kafkalite_server)
        future = client.delete_topics(["busy"], operation_timeout=30)["busy"]
        time.sleep(0.5)
        assert os.path.isdir(os.path.join(kafkalite_server.path, "busy-0")), (
            "renamed under a held append lock"
        )
        assert not future.done()
        fcntl.flock(lock, fcntl.LOCK_UN)
    assert error_of(future) is None
    assert kafkalite.Admin(kafkalite_server.path).list_topics() == []


def test_a_topic_deleted_embedded_disappears_from_the_network(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("t", partitions=2)
    produce(kafkalite_server, "t", 3)
    admin.delete_topic("t")
    client = admin_client(kafkalite_server)
    assert "t" not in client.list_topics(timeout=TIMEOUT).topics
    assert code_of(client.delete_topics(["t"])["t"]) == KafkaError.UNKNOWN_TOPIC_OR_PART


# -- CreatePartitions --------------------------------------------------------------------------


def test_create_partitions_grows_and_refuses_everything_else(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("t", partitions=2)
    client = admin_client(kafkalite_server)
    # validate_only changes nothing.
    assert error_of(client.create_partitions([NewPartitions("t", 4)], validate_only=True)["t"]) is None
    assert len(admin.describe_topic("t").partitions) == 2
    assert error_of(client.create_partitions([NewPartitions("t", 5)])["t"]) is None
    assert [p.partition for p in admin.describe_topic("t").partitions] == [0, 1, 2, 3, 4]
    assert len(client.list_topics("t", timeout=TIMEOUT).topics["t"].partitions) == 5
    produce(kafkalite_server, "t", 2, partition=4)
    assert admin.describe_topic("t").partitions[4].end_offset == 2
    for total in (5, 3, 1):
        err = error_of(client.create_partitions([NewPartitions("t", total)])["t"])
        assert err is not None and err.code() == KafkaError.INVALID_PARTITIONS, (total, err)
    assert "must be larger" in error_of(client.create_partitions([NewPartitions("t", 3)])["t"]).str()
    assert len(admin.describe_topic("t").partitions) == 5
    assert (
        code_of(client.create_partitions([NewPartitions("nope", 3)])["nope"])
        == KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    # Embedded growth is seen over the network at once.
    admin.create_partitions("t", 7)
    assert len(client.list_topics("t", timeout=TIMEOUT).topics["t"].partitions) == 7


# -- DescribeConfigs ---------------------------------------------------------------------------


def test_describe_configs_of_a_topic_created_embedded(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.alter_data_dir_config({"log.segment.bytes": 50_000_000})
    admin.create_topic("t", config={"retention.ms": 60_000, "cleanup.policy": "compact,delete"})
    resource = ConfigResource("topic", "t")
    client = admin_client(kafkalite_server)
    entries = client.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(timeout=TIMEOUT)
    assert set(entries) == set(TOPIC_DEFAULTS), "every topic config key"
    embedded = admin.describe_topic("t").config
    assert {k: e.value for k, e in entries.items()} == {k: as_text(v) for k, v in embedded.items()}
    sources = {k: ConfigSource(e.source) for k, e in entries.items()}
    assert sources["retention.ms"] == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert sources["cleanup.policy"] == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert sources["segment.bytes"] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert entries["segment.bytes"].value == "50000000"
    assert sources["max.message.bytes"] == ConfigSource.DEFAULT_CONFIG
    # Synonyms, most specific first: the topic's value, the data directory's, Kafka's default
    # (kafka-python keeps them as a list; confluent-kafka's dict keeps one per name).
    kafka_admin = pytest.importorskip("kafka.admin")
    kp = kafka_admin.KafkaAdminClient(bootstrap_servers=kafkalite_server.bootstrap_servers)
    try:
        described = kp.describe_configs(
            [kafka_admin.ConfigResource("TOPIC", "t")], include_synonyms=True, config_filter="all"
        )
    finally:
        kp.close()
    configs = described["topic"]["t"]
    synonyms = {k: [(s["name"], s["value"], s["source"]) for s in v["synonyms"]] for k, v in configs.items()}
    assert synonyms["segment.bytes"] == [
        ("log.segment.bytes", "50000000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
        ("log.segment.bytes", "1073741824", "DEFAULT_CONFIG"),
    ]
    assert synonyms["retention.ms"] == [
        ("retention.ms", "60000", "DYNAMIC_TOPIC_CONFIG"),
        ("log.retention.ms", "604800000", "DEFAULT_CONFIG"),
    ]


def test_describe_configs_of_the_broker_is_the_data_directory_config(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.init({"num.partitions": 3, "log.retention.ms": 3_600_000})
    resource = ConfigResource("broker", "0")
    client = admin_client(kafkalite_server)
    entries = client.describe_configs([resource])[resource].result(timeout=TIMEOUT)
    embedded = admin.describe_data_dir_config()
    assert {k: e.value for k, e in entries.items()} == {k: as_text(v) for k, v in embedded.items()}
    # Set for every broker of kafkalite (the one), so broker "0" reports it as its own (Kafka's
    # DYNAMIC_BROKER_CONFIG), which is what kafka-configs --entity-name 0 shows and can delete.
    assert ConfigSource(entries["num.partitions"].source) == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert ConfigSource(entries["log.segment.bytes"].source) == ConfigSource.DEFAULT_CONFIG


def test_describe_configs_errors_are_kafkas(kafkalite_server):
    client = admin_client(kafkalite_server)
    cases = {
        ConfigResource("topic", "nope"): KafkaError.UNKNOWN_TOPIC_OR_PART,
        ConfigResource("topic", "../etc"): KafkaError.TOPIC_EXCEPTION,
    }
    for resource, code in cases.items():
        assert code_of(client.describe_configs([resource])[resource]) == code, resource


# -- AlterConfigs / IncrementalAlterConfigs ----------------------------------------------------


def incremental(client: AdminClient, topic: str, *ops: tuple[str, str | None, AlterConfigOpType], **kw):
    """The KafkaError of one IncrementalAlterConfigs on a topic (None: it succeeded)."""
    resource = ConfigResource(
        "topic", topic, incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops]
    )
    return error_of(client.incremental_alter_configs([resource], **kw)[resource])


def test_incremental_alter_configs_set_delete_append_subtract(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("t", config={"retention.ms": 60_000})
    client = admin_client(kafkalite_server)
    S, D, A, R = (
        AlterConfigOpType.SET,
        AlterConfigOpType.DELETE,
        AlterConfigOpType.APPEND,
        AlterConfigOpType.SUBTRACT,
    )
    assert incremental(client, "t", ("segment.bytes", "1000000", S), ("retention.ms", None, D)) is None
    config = admin.describe_topic("t").config
    assert config["segment.bytes"] == 1_000_000 and config["retention.ms"] == TOPIC_DEFAULTS["retention.ms"]
    assert incremental(client, "t", ("cleanup.policy", "compact", A)) is None
    assert admin.describe_topic("t").config["cleanup.policy"] == "compact,delete"
    assert incremental(client, "t", ("cleanup.policy", "delete", R)) is None
    assert admin.describe_topic("t").config["cleanup.policy"] == "compact"
    # validate_only checks and changes nothing.
    assert incremental(client, "t", ("segment.bytes", "2000000", S), validate_only=True) is None
    assert admin.describe_topic("t").config["segment.bytes"] == 1_000_000
    # Embedded changes are what the network describes next.
    admin.alter_config("t", {"retention.bytes": 12345})
    resource = ConfigResource("topic", "t")
    described = client.describe_configs([resource])[resource].result(timeout=TIMEOUT)
    assert described["retention.bytes"].value == "12345"
    assert ConfigSource(described["retention.bytes"].source) == ConfigSource.DYNAMIC_TOPIC_CONFIG


@pytest.mark.parametrize(
    "key, value, op, message",
    [
        ("retention.ms", "soon", AlterConfigOpType.SET, "retention.ms must be an integer"),
        ("retention.ms", "-5", AlterConfigOpType.SET, "retention.ms must be >= -1"),
        ("segment.bytes", str(10**30), AlterConfigOpType.SET, "segment.bytes"),
        ("compression.type", "brotli", AlterConfigOpType.SET, "compression.type must be one of"),
        ("no.such.key", "1", AlterConfigOpType.SET, "unknown topic config 'no.such.key'"),
        ("no.such.key", None, AlterConfigOpType.DELETE, "unknown topic config 'no.such.key'"),
        ("retention.ms", "5", AlterConfigOpType.APPEND, "append is not allowed"),
        ("cleanup.policy", "sideways", AlterConfigOpType.APPEND, "cleanup.policy must be"),
    ],
)
def test_bad_config_changes_are_invalid_config_with_a_message(kafkalite_server, key, value, op, message):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("t", config={"retention.ms": 60_000})
    before = admin.describe_topic("t").config
    client = admin_client(kafkalite_server)
    err = incremental(client, "t", (key, value, op))
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err
    assert message in err.str()
    assert admin.describe_topic("t").config == before


def test_legacy_alter_configs_replaces_the_topic_config(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("t", config={"retention.ms": 60_000})
    client = admin_client(kafkalite_server)
    resource = ConfigResource("topic", "t", set_config={"segment.bytes": "2000000"})
    assert error_of(client.alter_configs([resource])[resource]) is None
    config = admin.describe_topic("t").config
    assert config["segment.bytes"] == 2_000_000
    assert config["retention.ms"] == TOPIC_DEFAULTS["retention.ms"], "AlterConfigs replaces the whole set"
    bad = ConfigResource("topic", "t", set_config={"segment.bytes": "tiny"})
    assert code_of(client.alter_configs([bad])[bad]) == KafkaError.INVALID_CONFIG
    missing = ConfigResource("topic", "nope", set_config={"segment.bytes": "2000000"})
    assert code_of(client.alter_configs([missing])[missing]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_broker_config_changes_are_the_data_directory_config(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    client = admin_client(kafkalite_server)
    broker = ConfigResource(
        "broker",
        "0",
        incremental_configs=[ConfigEntry("num.partitions", "4", incremental_operation=AlterConfigOpType.SET)],
    )
    assert error_of(client.incremental_alter_configs([broker])[broker]) is None
    assert admin.describe_data_dir_config()["num.partitions"] == 4
    produce(kafkalite_server, "auto", 1)  # auto-created with the new num.partitions
    assert len(admin.describe_topic("auto").partitions) == 4
    bad = ConfigResource(
        "broker",
        "0",
        incremental_configs=[ConfigEntry("num.partitions", "0", incremental_operation=AlterConfigOpType.SET)],
    )
    assert code_of(client.incremental_alter_configs([bad])[bad]) == KafkaError.INVALID_CONFIG
    assert admin.describe_data_dir_config()["num.partitions"] == 4


# -- DeleteRecords -----------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_offset(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("t", partitions=2)
    produce(kafkalite_server, "t", 10)
    client = admin_client(kafkalite_server)
    done = client.delete_records([TopicPartition("t", 0, 4)])
    (future,) = done.values()
    assert future.result(timeout=TIMEOUT).low_watermark == 4
    assert admin.describe_topic("t").partitions[0].start_offset == 4
    with kafkalite.Consumer(kafkalite_server.path, auto_offset_reset="earliest") as consumer:
        consumer.assign([kafkalite.TopicPartition("t", 0)])
        got = [r.offset for rs in consumer.poll(timeout_ms=2000).values() for r in rs]
    assert got == list(range(4, 10))
    # Beyond the high watermark or negative: Kafka's code; nothing moves.
    for tp, code in [
        (TopicPartition("t", 0, 11), KafkaError.OFFSET_OUT_OF_RANGE),
        (TopicPartition("t", 0, -7), KafkaError.OFFSET_OUT_OF_RANGE),
    ]:
        (f,) = client.delete_records([tp]).values()
        assert code_of(f) == code, tp
    # Unknown partitions and topics: librdkafka refuses them itself from its metadata.
    for tp in (TopicPartition("t", 9, 1), TopicPartition("nope", 0, 1)):
        (f,) = client.delete_records([tp]).values()
        assert code_of(f) != 0
    assert admin.describe_topic("t").partitions[0].start_offset == 4
    # -1 (OFFSET_END) is the high watermark: everything.
    (future,) = client.delete_records([TopicPartition("t", 0, confluent_kafka.OFFSET_END)]).values()
    assert future.result(timeout=TIMEOUT).low_watermark == 10
    low, high = confluent_kafka.Consumer(
        {"bootstrap.servers": kafkalite_server.bootstrap_servers, "group.id": "unused"}
    ).get_watermark_offsets(TopicPartition("t", 0), timeout=TIMEOUT)
    assert (low, high) == (10, 10)


def test_records_deleted_embedded_are_gone_over_the_network(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("t")
    produce(kafkalite_server, "t", 6)
    assert admin.delete_records({("t", 0): 5}) == {("t", 0): 5}
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": kafkalite_server.bootstrap_servers, "group.id": "u"}
    )
    try:
        assert consumer.get_watermark_offsets(TopicPartition("t", 0), timeout=TIMEOUT) == (5, 6)
    finally:
        consumer.close()
    with pytest.raises(kafkalite.OffsetOutOfRangeError):
        admin.delete_records({("t", 0): 99})


def test_delete_records_is_refused_on_a_compacted_topic(kafkalite_server):
    kafkalite.Admin(kafkalite_server.path).create_topic("c", config={"cleanup.policy": "compact"})
    produce(kafkalite_server, "c", 3)
    client = admin_client(kafkalite_server)
    (f,) = client.delete_records([TopicPartition("c", 0, 1)]).values()
    assert code_of(f) == KafkaError.POLICY_VIOLATION


# -- DeleteGroups ------------------------------------------------------------------------------


def network_member(server: Server, group: str, topic: str):
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": server.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert consumer.assignment()
    return consumer


def test_delete_groups_of_network_and_embedded_groups(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("t")
    produce(kafkalite_server, "t", 3)
    client = admin_client(kafkalite_server)
    # A network group: NON_EMPTY_GROUP while its member is active; deleted once it left.
    member = network_member(kafkalite_server, "net", "t")
    member.commit(offsets=[TopicPartition("t", 0, 2)], asynchronous=False)
    assert "net" in admin.list_groups()
    assert code_of(client.delete_consumer_groups(["net"])["net"]) == KafkaError.NON_EMPTY_GROUP
    member.close()
    assert error_of(client.delete_consumer_groups(["net"])["net"]) is None
    assert "net" not in admin.list_groups()
    assert admin.describe_group("net").partitions == []
    # An embedded group: its committed offsets and its state folder go, as Admin.delete_group does.
    with kafkalite.Consumer(kafkalite_server.path, "t", group_id="emb", auto_offset_reset="earliest") as c:
        c.poll(timeout_ms=2000)
        c.commit()
        assert code_of(client.delete_consumer_groups(["emb"])["emb"]) == KafkaError.NON_EMPTY_GROUP
    assert os.path.isdir(os.path.join(kafkalite_server.path, ".kafkalite-groups", "emb"))
    assert error_of(client.delete_consumer_groups(["emb"])["emb"]) is None
    assert "emb" not in admin.list_groups()
    assert not os.path.exists(os.path.join(kafkalite_server.path, ".kafkalite-groups", "emb"))
    # Gone, or never there: GROUP_ID_NOT_FOUND, as Admin.delete_group's GroupIdNotFoundError.
    for group in ("emb", "never"):
        assert code_of(client.delete_consumer_groups([group])[group]) == KafkaError.GROUP_ID_NOT_FOUND
        with pytest.raises(kafkalite.GroupIdNotFoundError):
            admin.delete_group(group)


def test_offsets_of_a_group_deleted_embedded_are_gone_over_the_network(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    admin.create_topic("t")
    produce(kafkalite_server, "t", 1)
    member = network_member(kafkalite_server, "g", "t")
    member.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
    member.close()
    assert admin.delete_group("g") == 1
    reader = confluent_kafka.Consumer(
        {"bootstrap.servers": kafkalite_server.bootstrap_servers, "group.id": "g"}
    )
    try:
        (tp,) = reader.committed([TopicPartition("t", 0)], timeout=TIMEOUT)
        assert tp.offset == confluent_kafka.OFFSET_INVALID
    finally:
        reader.close()


# -- DescribeCluster and CreateTopics ----------------------------------------------------------


def test_describe_cluster_is_one_broker_node_0(kafkalite_server):
    client = admin_client(kafkalite_server)
    cluster = client.describe_cluster().result(timeout=TIMEOUT)
    host, port = kafkalite_server.bootstrap_servers.rsplit(":", 1)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, host, int(port))]
    assert cluster.controller.id == 0
    assert cluster.cluster_id == client.list_topics(timeout=TIMEOUT).cluster_id == "kafkalite"


def test_the_cluster_id_of_a_broker_directory_is_its_own(tmp_path):
    data = tmp_path / "broker-dir"
    data.mkdir()
    (data / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=q1Sh-9_ISia_zwGINzRvyQ\n")
    with Server(data) as server:
        client = admin_client(server)
        assert client.describe_cluster().result(timeout=TIMEOUT).cluster_id == "q1Sh-9_ISia_zwGINzRvyQ"
        assert client.list_topics(timeout=TIMEOUT).cluster_id == "q1Sh-9_ISia_zwGINzRvyQ"


def test_a_broker_directory_is_read_only_to_the_admin_apis(tmp_path):
    """A Kafka broker's log directory (no kafkalite metadata): its topics are described, never
    deleted, grown or reconfigured (POLICY_VIOLATION), as the embedded Admin refuses them."""
    data = tmp_path / "broker-dir"
    (data / "old-0").mkdir(parents=True)
    (data / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=q1Sh-9_ISia_zwGINzRvyQ\n")
    with Server(data) as server:
        client = admin_client(server)
        assert code_of(client.delete_topics(["old"])["old"]) == KafkaError.POLICY_VIOLATION
        assert (
            code_of(client.create_partitions([NewPartitions("old", 2)])["old"]) == KafkaError.POLICY_VIOLATION
        )
        assert incremental(client, "old", ("retention.ms", "1", AlterConfigOpType.SET)).code() == (
            KafkaError.POLICY_VIOLATION
        )
        resource = ConfigResource("topic", "old")
        assert client.describe_configs([resource])[resource].result(timeout=TIMEOUT)["retention.ms"].value
    # Nothing but the server's wake-up file was added; no kafkalite metadata took the topics over.
    assert sorted(n for n in os.listdir(data) if n != ".kafkalite-notify") == ["meta.properties", "old-0"]
    with pytest.raises(kafkalite.ReadOnlyDataDirError):
        kafkalite.Admin(data).delete_topic("old")


def test_create_topics_validate_only_configs_and_replication(kafkalite_server):
    admin = kafkalite.Admin(kafkalite_server.path)
    client = admin_client(kafkalite_server)
    assert error_of(client.create_topics([NewTopic("v", 2)], validate_only=True)["v"]) is None
    assert admin.list_topics() == []
    made = client.create_topics([NewTopic("c", 2, replication_factor=1, config={"retention.ms": "1000"})])[
        "c"
    ]
    assert error_of(made) is None
    assert admin.describe_topic("c").config["retention.ms"] == 1000
    for rf in (2, 3, 0):
        err = error_of(client.create_topics([NewTopic(f"r{rf}", 1, replication_factor=rf)])[f"r{rf}"])
        assert err is not None and err.code() == KafkaError.INVALID_REPLICATION_FACTOR, rf
    bad = error_of(client.create_topics([NewTopic("b", 1, config={"retention.ms": "later"})])["b"])
    assert bad is not None and bad.code() == KafkaError.INVALID_CONFIG and "retention.ms" in bad.str()
    assert admin.list_topics() == ["c"]


# -- hostile values ----------------------------------------------------------------------------


def test_hostile_names_and_numbers_get_kafkas_codes_and_stay_inside(tmp_path):
    """Names that are paths, impossible partition counts, unknown keys: each answered with
    Kafka's code; nothing is created or deleted outside the data directory; the server keeps
    serving."""
    decoy = tmp_path / "decoy-0"
    decoy.mkdir()
    (decoy / "keep").write_text("precious")
    groups_decoy = tmp_path / "grp"
    groups_decoy.mkdir()
    outside_before = sorted([*os.listdir(tmp_path), "data"])
    with Server(tmp_path / "data") as server:
        client = admin_client(server)
        kafkalite.Admin(server.path).create_topic("ok")
        for name in ("..", ".", "../decoy", "a/b", "/etc", "x" * 300):
            err = error_of(client.create_topics([NewTopic(name, 1)])[name])
            assert err is not None and err.code() == KafkaError.TOPIC_EXCEPTION, (name, err)
            assert code_of(client.delete_topics([name])[name]) == KafkaError.TOPIC_EXCEPTION, name
            (f,) = client.create_partitions([NewPartitions(name, 3)]).values()
            assert code_of(f) == KafkaError.TOPIC_EXCEPTION, name
        # librdkafka checks counts itself; kafka-python sends them as given.
        kafka_admin = pytest.importorskip("kafka.admin")
        from kafka.errors import InvalidPartitionsError

        kp = kafka_admin.KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        try:
            for count in (-5, 0, 10**9, 2**31 - 1):
                with pytest.raises(InvalidPartitionsError):
                    kp.create_topics([kafka_admin.NewTopic("n", count, 1)])
                with pytest.raises(InvalidPartitionsError):
                    kp.create_partitions({"ok": kafka_admin.NewPartitions(count)})
        finally:
            kp.close()
        unknown = error_of(client.create_topics([NewTopic("u", 1, config={"no.such": "1"})])["u"])
        assert unknown is not None and unknown.code() == KafkaError.INVALID_CONFIG
        for group in ("..", "../grp", "../../grp", "../..", str(groups_decoy)):
            assert code_of(client.delete_consumer_groups([group])[group]) == KafkaError.GROUP_ID_NOT_FOUND
        assert incremental(client, "../decoy", ("retention.ms", "1", AlterConfigOpType.SET)).code() == (
            KafkaError.TOPIC_EXCEPTION
        )
        # Still serving: a normal request works.
        assert error_of(client.create_partitions([NewPartitions("ok", 2)])["ok"]) is None
        assert kafkalite.Admin(server.path).list_topics() == ["ok"]
    assert sorted(os.listdir(tmp_path)) == outside_before
    assert (decoy / "keep").read_text() == "precious" and groups_decoy.is_dir()


# -- kafka-python's KafkaAdminClient ---------------------------------------------------------


def test_kafka_python_admin_client(kafkalite_server):
    kafka_admin = pytest.importorskip("kafka.admin")
    from kafka.errors import InvalidPartitionsError, UnknownTopicOrPartitionError

    client = kafka_admin.KafkaAdminClient(bootstrap_servers=kafkalite_server.bootstrap_servers)
    admin = kafkalite.Admin(kafkalite_server.path)
    try:
        made = client.create_topics(
            [kafka_admin.NewTopic("kp", 2, 1, topic_configs={"retention.ms": "5000"})]
        )
        # CreateTopics v5+ reports the new topic's configs, with where each value comes from.
        (result,) = made["topics"]
        assert (result["num_partitions"], result["replication_factor"]) == (2, 1)
        assert set(result["configs"]) == set(TOPIC_DEFAULTS)
        assert result["configs"]["retention.ms"]["value"] == "5000"
        assert result["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert result["configs"]["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
        assert admin.describe_topic("kp").config["retention.ms"] == 5000
        client.create_partitions({"kp": kafka_admin.NewPartitions(4)})
        assert len(admin.describe_topic("kp").partitions) == 4
        with pytest.raises(InvalidPartitionsError):
            client.create_partitions({"kp": kafka_admin.NewPartitions(2)})
        client.alter_configs([kafka_admin.ConfigResource("TOPIC", "kp", {"segment.bytes": "3000000"})])
        assert admin.describe_topic("kp").config["segment.bytes"] == 3_000_000
        described = client.describe_configs([kafka_admin.ConfigResource("TOPIC", "kp")], config_filter="all")
        text = repr(described)
        assert "segment.bytes" in text and "3000000" in text and "max.message.bytes" in text
        produce(kafkalite_server, "kp", 5)
        client.delete_records({kafka_python_tp("kp", 0): 3})
        assert admin.describe_topic("kp").partitions[0].start_offset == 3
        cluster = client.describe_cluster()
        assert "kafkalite" in repr(cluster)
        client.delete_topics(["kp"])
        assert admin.list_topics() == []
        with pytest.raises(UnknownTopicOrPartitionError):
            client.delete_topics(["kp"])
    finally:
        client.close()


def kafka_python_tp(topic: str, partition: int):
    from kafka.structs import TopicPartition as KTopicPartition

    return KTopicPartition(topic, partition)


def test_apis_are_advertised(kafkalite_server):
    """ApiVersions (v0, raw) lists each admin API, so clients use them instead of failing early."""
    host, port = kafkalite_server.bootstrap_servers.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        reply = recv_exactly(sock, size)
    correlation, error, count = struct.unpack(">ihi", reply[:10])
    assert (correlation, error) == (7, 0)
    versions = {k: (lo, hi) for k, lo, hi in struct.iter_unpack(">hhh", reply[10 : 10 + 6 * count])}
    # DeleteTopics 20, DeleteRecords 21, DescribeConfigs 32, AlterConfigs 33, CreatePartitions 37,
    # DeleteGroups 42, IncrementalAlterConfigs 44, DescribeCluster 60.
    assert versions[20] == (1, 6) and versions[21] == (0, 2) and versions[32] == (1, 4)
    assert versions[33] == (0, 2) and versions[37] == (0, 3) and versions[42] == (0, 2)
    assert versions[44] == (0, 1) and versions[60] == (0, 2)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the server closed the connection"
        out += chunk
    return out
