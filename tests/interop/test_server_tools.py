"""What Kafka's own tools need from `kafkalite serve` (issue 21, item 6), checked here with
kafka-python's and confluent-kafka's admin clients (the broker-marked tests at the end run Kafka's
tools themselves): ListGroups/DescribeGroups know the groups that only have committed offsets
(after a restart, or committed by an admin client or the embedded side) as Kafka does, Empty
"consumer" groups; OffsetDelete; DescribeLogDirs; every topic config name of Kafka 4.x (those
kafkalite does not apply are stored, reported and warned about); broker configs by the broker's
id "0" as well as the cluster default ""."""

from __future__ import annotations

import logging
import subprocess
import time

import kafkalite
import pytest
from kafkalite import TopicPartition
from kafkalite.datadir import TOPIC_CONFIG_DEFS
from kafkalite.server import Server

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer  # noqa: E402
from kafka import TopicPartition as KafkaTP  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError  # noqa: E402
from kafka.structs import OffsetAndMetadata  # noqa: E402

TIMEOUT = 20

#: Kafka 4.x's topic configs (LogConfig's definitions in Kafka's storage module; the internal
#: internal.segment.bytes left out): every one is accepted by a Kafka broker.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.type",
    "compression.zstd.level",
    "delete.retention.ms",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "index.interval.bytes",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "preallocate",
    "remote.copy.lag.bytes",
    "remote.copy.lag.ms",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.jitter.ms",
    "segment.ms",
    "unclean.leader.election.enable",
}


def kafka_admin(server: Server) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)


def outside_commit(server: Server, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Offsets committed as an admin tool or an assign()ed consumer commits them."""
    consumer = KafkaConsumer(
        bootstrap_servers=server.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    try:
        tps = {KafkaTP(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
        consumer.assign(list(tps))
        consumer.commit(tps)
    finally:
        consumer.close()


def committed(path: str, group: str, topic: str, partition: int) -> int | None:
    consumer = kafkalite.Consumer(path, group_id=group)
    try:
        return consumer.committed(TopicPartition(topic, partition))
    finally:
        consumer.close()


def test_groups_with_only_committed_offsets_are_listed_and_described_as_empty_after_a_restart(tmp_path):
    """The finding: a group that only has committed offsets (any group after a server restart,
    or one committed by an admin client) was missing from `kafka-consumer-groups --list`, and
    `--describe` said it does not exist. Kafka lists and describes it: Empty, "consumer"."""
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic("t", 2)
    with Server(path) as server:
        outside_commit(server, "by-network", {("t", 0): 3})
    embedded = kafkalite.Consumer(path, group_id="by-embedded", enable_auto_commit=False)
    embedded.assign([TopicPartition("t", 1)])
    embedded.commit({TopicPartition("t", 1): 5})
    embedded.close()
    live = kafkalite.Consumer(path, "t", group_id="live-embedded", enable_auto_commit=False)
    live.poll(timeout_ms=200)
    live.commit({TopicPartition("t", 0): 1})
    try:
        with Server(path) as server:
            admin = kafka_admin(server)
            try:
                listed = {g["group_id"]: (g["protocol_type"], g["group_state"]) for g in admin.list_groups()}
                described = admin.describe_groups(["by-network", "by-embedded", "live-embedded", "nope"])
            finally:
                admin.close()
    finally:
        live.close()
    assert listed == {
        "by-network": ("consumer", "Empty"),
        "by-embedded": ("consumer", "Empty"),
        "live-embedded": ("consumer", "Stable"),
    }, listed
    for group in ("by-network", "by-embedded"):
        assert (described[group]["group_state"], described[group]["protocol_type"]) == ("Empty", "consumer")
        assert described[group]["members"] == []
    assert described["live-embedded"]["group_state"] == "Stable"
    assert described["nope"]["group_state"] == "Dead"


def test_offset_delete_removes_offsets_but_not_those_a_live_member_consumes(tmp_path, caplog):
    """The finding: `kafka-consumer-groups --delete-offsets` failed (OffsetDelete not served).
    Kafka's rules: GROUP_ID_NOT_FOUND for a group that does not exist, GROUP_SUBSCRIBED_TO_TOPIC
    for a topic a live member subscribes to (network or embedded), the others deleted."""
    path = str(tmp_path)
    admin_embedded = kafkalite.Admin(path)
    admin_embedded.create_topic("t", 2)
    admin_embedded.create_topic("other")
    with Server(path) as server, caplog.at_level(logging.WARNING, logger="kafkalite.server"):
        outside_commit(server, "g", {("t", 0): 3, ("t", 1): 4, ("other", 0): 1})
        admin = kafka_admin(server)
        try:
            result = admin.delete_group_offsets("g", [KafkaTP("t", 0)])
            assert result == {KafkaTP("t", 0): NoError}, result
            assert committed(path, "g", "t", 0) is None
            assert committed(path, "g", "t", 1) == 4

            with pytest.raises(GroupIdNotFoundError):
                admin.delete_group_offsets("nobody", [KafkaTP("t", 0)])

            member = KafkaConsumer(
                "t", bootstrap_servers=server.bootstrap_servers, group_id="g", enable_auto_commit=False
            )
            try:
                deadline = time.monotonic() + 30
                while not member.assignment() and time.monotonic() < deadline:
                    member.poll(timeout_ms=200)
                assert member.assignment()
                result = admin.delete_group_offsets("g", [KafkaTP("t", 1), KafkaTP("other", 0)])
                assert result[KafkaTP("t", 1)] is GroupSubscribedToTopicError, result
                assert result[KafkaTP("other", 0)] is NoError, result
            finally:
                member.close()
            assert committed(path, "g", "t", 1) == 4
            assert committed(path, "g", "other", 0) is None
        finally:
            admin.close()
        refusals = [r.getMessage() for r in caplog.records if "refused OffsetDelete" in r.getMessage()]
        assert any("GROUP_ID_NOT_FOUND" in m for m in refusals), refusals
        assert any("GROUP_SUBSCRIBED_TO_TOPIC" in m and "127.0.0.1" in m for m in refusals), refusals

    # Embedded members count as live members of the group too.
    live = kafkalite.Consumer(path, "t", group_id="g", enable_auto_commit=False)
    live.poll(timeout_ms=200)
    try:
        with Server(path) as server:
            admin = kafka_admin(server)
            try:
                result = admin.delete_group_offsets("g", [KafkaTP("t", 1)])
            finally:
                admin.close()
        assert result[KafkaTP("t", 1)] is GroupSubscribedToTopicError, result
    finally:
        live.close()
    assert committed(path, "g", "t", 1) == 4


def test_describe_log_dirs_reports_the_data_directory_and_each_partitions_size(tmp_path):
    """The finding: `kafka-log-dirs` failed (DescribeLogDirs not served). The data directory is
    the one log dir; each partition's size is its segments' bytes, as the embedded Admin counts
    them; the offset lag is 0."""
    path = str(tmp_path)
    admin_embedded = kafkalite.Admin(path)
    admin_embedded.create_topic("t", 2)
    with kafkalite.Producer(path) as producer:
        for i in range(50):
            producer.send("t", b"x" * (i + 1), partition=i % 2)
    sizes = {p.partition: p.size_bytes for p in admin_embedded.describe_topic("t").partitions}
    assert all(sizes.values())
    with Server(path) as server:
        admin = kafka_admin(server)
        try:
            everything = admin.describe_log_dirs()
            some = admin.describe_log_dirs(topic_partitions={"t": [1, 7], "no": [0]})
        finally:
            admin.close()
    [broker] = everything
    [log_dir] = broker["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == path
    assert log_dir["total_bytes"] > 0 and 0 <= log_dir["usable_bytes"] <= log_dir["total_bytes"]
    topics = {t["name"]: t["partitions"] for t in log_dir["topics"]}
    assert set(topics) == {"t"}
    assert {p["partition_index"]: p["partition_size"] for p in topics["t"]} == sizes
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in topics["t"])
    [narrowed] = some[0]["log_dirs"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in narrowed["topics"]] == [
        ("t", [1])
    ]


def test_every_kafka_topic_config_is_accepted_stored_and_described(tmp_path, caplog):
    """The finding: MirrorMaker 2's topic-config sync failed every cycle on
    `remote.log.delete.on.disable`, a topic config Kafka 4.x knows. Every name Kafka accepts is
    accepted; those kafkalite does not apply are stored, described and warned about."""
    assert {d["name"] for d in TOPIC_CONFIG_DEFS} == KAFKA_TOPIC_CONFIGS
    path = str(tmp_path)
    with Server(path) as server, caplog.at_level(logging.WARNING):
        admin = kafka_admin(server)
        try:
            created = admin.create_topics(
                [NewTopic("mirrored", 1, 1, topic_configs={"remote.log.delete.on.disable": "true"})],
                raise_errors=False,
            )
            assert [t["error_code"] for t in created["topics"]] == [0], created
        finally:
            admin.close()
        client = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        resource = ConfigResource(
            "topic",
            "mirrored",
            incremental_configs=[
                ConfigEntry("remote.storage.enable", "false", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("local.retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
            ],
        )
        assert client.incremental_alter_configs([resource])[resource].exception(timeout=TIMEOUT) is None
        described = client.describe_configs([ConfigResource("topic", "mirrored")])
        entries = next(iter(described.values())).result(timeout=TIMEOUT)
    assert entries["remote.log.delete.on.disable"].value == "true"
    assert ConfigSource(entries["remote.log.delete.on.disable"].source) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["local.retention.ms"].value == "60000"
    assert set(entries) == KAFKA_TOPIC_CONFIGS
    config = kafkalite.Admin(path).describe_topic("mirrored").config
    assert config["remote.log.delete.on.disable"] is True and config["local.retention.ms"] == 60000
    warned = [r.getMessage() for r in caplog.records if "does not apply" in r.getMessage()]
    assert any("remote.log.delete.on.disable" in m for m in warned), warned
    assert any("local.retention.ms" in m for m in warned), warned
    # The embedded Admin takes them too (and warns the same way).
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        kafkalite.Admin(path).create_topic("embedded", 1, {"segment.jitter.ms": 5})
    assert any("segment.jitter.ms" in r.getMessage() for r in caplog.records)


def broker_entries(client: AdminClient, name: str) -> dict:
    resource = ConfigResource("broker", name)
    return client.describe_configs([resource])[resource].result(timeout=TIMEOUT)


def test_broker_config_by_name_0_and_by_default_is_the_data_directory_config(tmp_path):
    """The finding: `kafka-configs --entity-type brokers --entity-name 0` showed nothing after
    an alter (it shows the configs whose source is DYNAMIC_BROKER_CONFIG) and its
    `--delete-config` failed (it deletes only what it shows). Both "0" and "" reach the data
    directory's config; each reports a set value as its own kind of dynamic config (the
    cluster default "" is what the Kafka tool's --entity-default uses: the broker-marked test;
    neither Python client sends an empty broker name)."""
    path = str(tmp_path)
    with Server(path) as server:
        client = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        resource = ConfigResource(
            "broker",
            "0",
            incremental_configs=[
                ConfigEntry("log.retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        assert client.incremental_alter_configs([resource])[resource].exception(timeout=TIMEOUT) is None
        assert kafkalite.Admin(path).describe_data_dir_config()["log.retention.ms"] == 3_600_000
        by_id = broker_entries(client, "0")
        assert by_id["log.retention.ms"].value == "3600000"
        assert ConfigSource(by_id["log.retention.ms"].source) == ConfigSource.DYNAMIC_BROKER_CONFIG
        delete = ConfigResource(
            "broker",
            "0",
            incremental_configs=[
                ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
            ],
        )
        assert client.incremental_alter_configs([delete])[delete].exception(timeout=TIMEOUT) is None
        assert (
            ConfigSource(broker_entries(client, "0")["log.retention.ms"].source)
            == ConfigSource.DEFAULT_CONFIG
        )
    assert "log.retention.ms" not in kafkalite.Admin(path)._dir.dir_config()


# -- Kafka's own tools ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tools_classpath() -> str:
    import maven_jars

    return str(maven_jars.require(maven_jars.kafka_tools_jars) / "*")


def kafka_tool(classpath: str, main: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One of Kafka's command-line tools (its main class), as kafka-*.sh runs it."""
    cmd = ["java", "-Xmx256m", "-cp", classpath, main, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"


@pytest.mark.broker
def test_kafka_consumer_groups_lists_describes_and_deletes_offsets_of_an_offsets_only_group(
    tmp_path, tools_classpath
):
    path = str(tmp_path)
    kafkalite.Admin(path).create_topic("t", 2)
    with Server(path) as server:
        outside_commit(server, "stored", {("t", 0): 3, ("t", 1): 4})
    with Server(path) as server:  # after a restart: the group only has its committed offsets
        bootstrap = ["--bootstrap-server", server.bootstrap_servers]
        listed = kafka_tool(tools_classpath, GROUPS, *bootstrap, "--list")
        assert listed.returncode == 0 and "stored" in listed.stdout.split(), listed
        described = kafka_tool(tools_classpath, GROUPS, *bootstrap, "--describe", "--group", "stored")
        assert described.returncode == 0, described
        assert "does not exist" not in described.stdout + described.stderr, described
        rows = [line.split() for line in described.stdout.splitlines() if line.startswith("stored ")]
        assert sorted((r[1], r[2], r[3]) for r in rows) == [("t", "0", "3"), ("t", "1", "4")], (
            described.stdout
        )
        deleted = kafka_tool(
            tools_classpath, GROUPS, *bootstrap, "--delete-offsets", "--group", "stored", "--topic", "t:0"
        )
        assert deleted.returncode == 0, deleted
        assert committed(path, "stored", "t", 0) is None and committed(path, "stored", "t", 1) == 4


@pytest.mark.broker
def test_kafka_log_dirs_describes_the_data_directory(tmp_path, tools_classpath):
    import json

    path = str(tmp_path)
    kafkalite.Admin(path).create_topic("t", 2)
    with kafkalite.Producer(path) as producer:
        producer.send("t", b"x" * 100, partition=1)
    with Server(path) as server:
        done = kafka_tool(
            tools_classpath,
            LOG_DIRS,
            "--bootstrap-server",
            server.bootstrap_servers,
            "--describe",
            "--topic-list",
            "t",
        )
    assert done.returncode == 0, done
    report = json.loads(done.stdout.strip().splitlines()[-1])
    [broker] = report["brokers"]
    [log_dir] = broker["logDirs"]
    assert log_dir["logDir"] == path and log_dir["error"] is None
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    expected = {
        f"t-{p.partition}": p.size_bytes for p in kafkalite.Admin(path).describe_topic("t").partitions
    }
    assert sizes == expected and sizes["t-1"] > 100


@pytest.mark.broker
def test_kafka_configs_alters_describes_and_deletes_broker_0_and_default_configs(tmp_path, tools_classpath):
    path = str(tmp_path)
    with Server(path) as server:
        bootstrap = ["--bootstrap-server", server.bootstrap_servers]
        for entity in (["--entity-name", "0"], ["--entity-default"]):
            base = [*bootstrap, "--entity-type", "brokers", *entity]
            altered = kafka_tool(
                tools_classpath, CONFIGS, *base, "--alter", "--add-config", "log.retention.ms=3600000"
            )
            assert altered.returncode == 0, altered
            assert kafkalite.Admin(path).describe_data_dir_config()["log.retention.ms"] == 3_600_000
            described = kafka_tool(tools_classpath, CONFIGS, *base, "--describe")
            assert described.returncode == 0 and "log.retention.ms=3600000" in described.stdout, described
            removed = kafka_tool(
                tools_classpath, CONFIGS, *base, "--alter", "--delete-config", "log.retention.ms"
            )
            assert removed.returncode == 0, removed
            assert "log.retention.ms" not in kafkalite.Admin(path)._dir.dir_config()
