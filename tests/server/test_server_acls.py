"""Authorization on `kafkalite serve` with Kafka's ACL model (issue 24, item 4): ACLs created,
listed and deleted with kafka-python's admin client and Kafka's `kafka-acls`; a SCRAM user with
no ACL refused by every API it touches with that API's *_AUTHORIZATION_FAILED code and one
WARNING line; prefixed patterns, deny over allow, super users; the ACL file private and never
torn by a kill during CreateAcls; when the ACLs are enforced (--authorizer, loopback, not)."""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import subprocess
import time
from pathlib import Path

import kafkalite
import kafkalite.users
import pytest
from kafkalite.server import Server

pytest_plugins = ["kafkalite.testing"]

kafka = pytest.importorskip("kafka")
from kafka.admin import (  # noqa: E402
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    NewTopic,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.protocol.admin.acl import CreateAclsRequest, DescribeAclsRequest  # noqa: E402
from kafka.protocol.admin.topics import (  # noqa: E402
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
)
from kafka.protocol.consumer.fetch import FetchRequest  # noqa: E402
from kafka.protocol.consumer.group import (  # noqa: E402
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest  # noqa: E402
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest  # noqa: E402
from kafka.protocol.metadata.metadata import MetadataRequest  # noqa: E402
from kafka.protocol.producer.produce import ProduceRequest  # noqa: E402
from kafka.protocol.producer.transaction import InitProducerIdRequest  # noqa: E402
from kafka.record import default_records  # noqa: E402

ACLS_FILE = ".kafkalite-acls.json"
PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = 29, 30
CLUSTER_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 31, 53


def add_users(data: Path) -> None:
    for user, password in PASSWORDS.items():
        kafkalite.users.add_user(data, user, password)


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "data"
    add_users(path)
    admin = kafkalite.Admin(str(path))
    for topic in ("orders-eu", "orders-us", "payments", "secret"):
        admin.create_topic(topic, 1)
    with kafkalite.Producer(str(path)) as producer:
        for topic in ("orders-eu", "orders-us", "payments", "secret"):
            producer.send(topic, topic.encode(), partition=0)
    return path


@pytest.fixture
def server(data):
    with Server(data, sasl=True, authorizer=True, super_users=["User:admin"]) as s:
        yield s


def config(server: Server, user: str) -> dict:
    return {
        "bootstrap_servers": server.bootstrap_servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": user,
        "sasl_plain_password": PASSWORDS[user],
    }


def admin_client(server: Server, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(**config(server, user))


def send(client: KafkaAdminClient, request):
    """Any request, on `client`'s authenticated connection; its decoded response."""
    return client._manager.run(client._manager.send, request)


def acl(
    principal: str,
    op: ACLOperation,
    rtype: ResourceType,
    name: str,
    prefixed: bool = False,
    deny: bool = False,
):
    pattern = ACLResourcePatternType.PREFIXED if prefixed else ACLResourcePatternType.LITERAL
    permission = ACLPermissionType.DENY if deny else ACLPermissionType.ALLOW
    return ACL(principal, "*", op, permission, ResourcePattern(rtype, name, pattern))


def everything() -> ACLFilter:
    return ACLFilter(
        None,
        None,
        ACLOperation.ANY,
        ACLPermissionType.ANY,
        ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
    )


def fetch(client: KafkaAdminClient, topic: str):
    partition = FetchRequest.FetchTopic.FetchPartition(
        partition=0, fetch_offset=0, partition_max_bytes=1 << 20
    )
    request = FetchRequest(
        max_version=12,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[partition])],
    )
    [t] = send(client, request).responses
    return t.partitions[0]


def listed_topics(client: KafkaAdminClient) -> set[str]:
    return {t.name for t in send(client, MetadataRequest(topics=None)).topics}


def test_acls_created_listed_and_deleted_with_kafka_python(server, data):
    admin = admin_client(server, "admin")
    wanted = [
        acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, "orders-", prefixed=True),
        acl("User:alice", ACLOperation.READ, ResourceType.GROUP, "*"),
        acl("User:*", ACLOperation.WRITE, ResourceType.TOPIC, "secret", deny=True),
    ]
    result = admin.create_acls(wanted)
    assert not result["failed"] and len(result["succeeded"]) == 3, result
    bad = ACL(
        "alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW, ResourcePattern(ResourceType.TOPIC, "x")
    )
    result = admin.create_acls([bad])
    assert result["failed"] == [kafka.errors.InvalidRequestError], result
    found, error = admin.describe_acls(everything())
    assert error is kafka.errors.NoError and sorted(map(repr, found)) == sorted(map(repr, wanted))
    match = ACLFilter(
        None,
        None,
        ACLOperation.ANY,
        ACLPermissionType.ANY,
        ResourcePatternFilter(ResourceType.TOPIC, "orders-eu", ACLResourcePatternType.MATCH),
    )
    found, _ = admin.describe_acls(match)
    assert [a.resource_pattern.resource_name for a in found] == ["orders-"]
    path = data / ACLS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = json.loads(path.read_text())["acls"]
    assert {a["principal"] for a in stored} == {"User:alice", "User:*"}
    [(_, removed, error)] = admin.delete_acls([match])
    assert error is kafka.errors.NoError and len(removed) == 1
    admin.close()
    server.stop()
    with Server(data, sasl=True, authorizer=True, super_users=["User:admin"]) as again:
        admin = admin_client(again, "admin")
        found, _ = admin.describe_acls(everything())
        assert sorted(map(repr, found)) == sorted(map(repr, wanted[1:])), "the ACLs survive a restart"
        admin.close()


def test_a_user_without_acls_is_refused_by_every_api(server, caplog):
    bob = admin_client(server, "bob")
    caplog.set_level(logging.WARNING, logger="kafkalite.server")
    # Produce, through kafka-python's producer: its metadata for the topic is refused.
    producer = kafka.KafkaProducer(**config(server, "bob"), enable_idempotence=False, max_block_ms=5000)
    with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
        producer.send("payments", b"x").get(timeout=20)
    producer.close()
    assert fetch(bob, "payments").error_code == TOPIC_AUTHORIZATION_FAILED
    # Metadata: the listing leaves the topics out; a named one is refused.
    assert listed_topics(bob) == set()
    [named] = send(
        bob, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="payments")])
    ).topics
    assert named.error_code == TOPIC_AUTHORIZATION_FAILED
    # Groups: the coordinator, the join, the commit.
    found = send(bob, FindCoordinatorRequest(max_version=3, key="g", key_type=0))
    assert found.error_code == GROUP_AUTHORIZATION_FAILED
    join = JoinGroupRequest(
        group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", protocol_type="consumer",
        protocols=[],
    )  # fmt: skip
    assert send(bob, join).error_code == GROUP_AUTHORIZATION_FAILED
    part = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=1
    )
    commit = OffsetCommitRequest(
        group_id="g", generation_id_or_member_epoch=-1, member_id="",
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="payments", partitions=[part])],
    )  # fmt: skip
    [t] = send(bob, commit).topics
    assert t.partitions[0].error_code == GROUP_AUTHORIZATION_FAILED
    # Topics: create and delete.
    create = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name="new", num_partitions=1, replication_factor=1)],
        timeout_ms=5000,
    )
    [created] = send(bob, create).topics
    assert created.error_code == TOPIC_AUTHORIZATION_FAILED
    delete = DeleteTopicsRequest(max_version=5, topic_names=["payments"], timeout_ms=5000)
    [deleted] = send(bob, delete).responses
    assert deleted.error_code == TOPIC_AUTHORIZATION_FAILED
    # Producer ids: transactional and idempotent.
    init = InitProducerIdRequest(
        transactional_id="tx", transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
    )
    assert send(bob, init).error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    init = InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
    )
    assert send(bob, init).error_code == CLUSTER_AUTHORIZATION_FAILED
    # The ACL APIs themselves.
    assert send(bob, DescribeAclsRequest(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1,
    )).error_code == CLUSTER_AUTHORIZATION_FAILED  # fmt: skip
    creation = CreateAclsRequest.AclCreation(
        resource_type=2, resource_name="payments", resource_pattern_type=3, principal="User:bob", host="*",
        operation=3, permission_type=3,
    )  # fmt: skip
    [made] = send(bob, CreateAclsRequest(creations=[creation])).results
    assert made.error_code == CLUSTER_AUTHORIZATION_FAILED
    bob.close()
    # Nothing happened, and each refusal said who, from where, what and on what.
    assert set(kafkalite.Admin(str(server.path)).list_topics()) >= {"payments"}
    assert "new" not in kafkalite.Admin(str(server.path)).list_topics()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for expected in (
        "refused Fetch from /127.0.0.1: TOPIC_AUTHORIZATION_FAILED (User:bob from 127.0.0.1 may not READ TOPIC payments)",
        "refused JoinGroup from /127.0.0.1: GROUP_AUTHORIZATION_FAILED (User:bob from 127.0.0.1 may not READ GROUP g)",
        "may not DELETE TOPIC payments",
        "may not CREATE CLUSTER kafka-cluster or CREATE TOPIC new",
        "may not WRITE TRANSACTIONAL_ID tx",
        "may not ALTER CLUSTER kafka-cluster",
    ):
        assert any(expected in line for line in lines), (expected, lines)


def test_prefixed_read_lets_a_user_read_only_those_topics(server):
    admin = admin_client(server, "admin")
    assert not admin.create_acls(
        [
            acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, "orders-", prefixed=True),
            acl("User:alice", ACLOperation.READ, ResourceType.GROUP, "alice-", prefixed=True),
        ]
    )["failed"]
    admin.close()
    alice = admin_client(server, "alice")
    assert listed_topics(alice) == {"orders-eu", "orders-us"}, "READ implies DESCRIBE, prefix only"
    assert fetch(alice, "orders-us").error_code == 0
    assert fetch(alice, "payments").error_code == TOPIC_AUTHORIZATION_FAILED
    alice.close()
    consumer = kafka.KafkaConsumer(
        "orders-eu", group_id="alice-readers", auto_offset_reset="earliest", consumer_timeout_ms=15000,
        enable_auto_commit=False, **config(server, "alice"),
    )  # fmt: skip
    got = next(consumer, None)
    assert got is not None and got.value == b"orders-eu"
    consumer.commit()
    consumer.close()
    alice = admin_client(server, "alice")
    found = send(alice, FindCoordinatorRequest(max_version=3, key="bob-readers", key_type=0))
    assert found.error_code == GROUP_AUTHORIZATION_FAILED, "a group outside the prefix"
    alice.close()


def test_deny_beats_allow_and_super_users_are_unrestricted(server):
    admin = admin_client(server, "admin")
    assert not admin.create_acls(
        [
            acl("User:alice", ACLOperation.ALL, ResourceType.TOPIC, "*"),
            acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, "sec", prefixed=True, deny=True),
        ]
    )["failed"]
    alice = admin_client(server, "alice")
    assert fetch(alice, "payments").error_code == 0
    assert fetch(alice, "secret").error_code == TOPIC_AUTHORIZATION_FAILED
    assert "secret" in listed_topics(alice), "DENY READ leaves DESCRIBE (from ALL)"
    alice.close()
    # The super user has no ACL and may do anything, including create topics and read secret.
    assert fetch(admin, "secret").error_code == 0
    admin.create_topics([NewTopic("by-admin", 1, 1)])
    assert "by-admin" in kafkalite.Admin(str(server.path)).list_topics()
    producer = kafka.KafkaProducer(**config(server, "admin"), enable_idempotence=False)
    producer.send("secret", b"from admin").get(timeout=20)
    producer.close()
    admin.close()


def test_enforcement_modes(tmp_path):
    data = tmp_path / "data"
    add_users(data)
    kafkalite.Admin(str(data)).create_topic("t", 1)
    grant = acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, "other")
    # Loopback without --authorizer: ACLs can be written but are not enforced.
    with Server(data, sasl=True) as server:
        client = admin_client(server, "bob")
        assert not client.create_acls([grant])["failed"]
        assert fetch(client, "t").error_code == 0
        client.close()
    # Not loopback (0.0.0.0): enforced once any ACL exists.
    port = free_port()
    anywhere = {
        "listen": f"0.0.0.0:{port}",
        "advertised_listener": f"127.0.0.1:{port}",
        "allow_plaintext": True,
    }
    with Server(data, **anywhere) as server:
        client = admin_client(server, "bob")
        assert fetch(client, "t").error_code == TOPIC_AUTHORIZATION_FAILED
        assert client.delete_acls([everything()])[0][2] is kafka.errors.ClusterAuthorizationFailedError
        client.close()
    (data / ACLS_FILE).unlink()
    with Server(data, **anywhere) as server:
        client = admin_client(server, "bob")
        assert fetch(client, "t").error_code == 0, "no ACL yet: not enforced"
        client.close()
    # --authorizer on loopback without SASL: the client is User:ANONYMOUS.
    with Server(data, authorizer=True) as server:
        client = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        assert fetch(client, "t").error_code == TOPIC_AUTHORIZATION_FAILED
        client.close()
    with Server(data, authorizer=True, super_users=["User:ANONYMOUS"]) as server:
        client = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        assert fetch(client, "t").error_code == 0
        client.close()
    with pytest.raises(kafkalite.InvalidConfigError, match="principal"):
        Server(data, authorizer=True, super_users=["admin"])


def test_damaged_acl_file_stops_the_start(tmp_path):
    (tmp_path / ACLS_FILE).write_text('{"version": 1, "acls": [{"name": "x"}]}')
    with pytest.raises(kafkalite.CorruptMetadataError, match="ACL file"):
        Server(tmp_path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(spawn, data: Path, port: int, failpoints: str | None = None):
    env = {**os.environ, "KAFKALITE_FAILPOINTS": failpoints} if failpoints else None
    proc = spawn.module(
        "kafkalite", "serve", "--data-dir", data, "--listen", f"127.0.0.1:{port}", "--sasl", "--authorizer",
        "--super-users", "User:admin;User:ops", env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stderr.readline()
    assert "serving" in line, line + proc.stderr.read()
    return proc


def client_at(port: int) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="admin", sasl_plain_password=PASSWORDS["admin"], request_timeout_ms=5000,
    )  # fmt: skip


@pytest.mark.parametrize("fault", ["checkpoint.write=kill", "checkpoint.rename=kill", "dir.sync=kill"])
def test_acl_file_is_old_or_new_after_a_kill_during_create_acls(tmp_path, spawn, fault):
    """The server killed (-9) while CreateAcls writes the file, before the rename, or after it:
    the next start reads the old set or the new one, never a torn file, still 0600."""
    data = tmp_path / "data"
    add_users(data)
    old = [acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, "a")]
    new = [acl("User:bob", ACLOperation.WRITE, ResourceType.TOPIC, "b", prefixed=True)]
    port = free_port()
    proc = serve(spawn, data, port)
    client = client_at(port)
    assert not client.create_acls(old)["failed"]
    client.close()
    proc.terminate()
    assert proc.wait(10) == 0
    proc = serve(spawn, data, port, failpoints=fault + "@1")
    client = client_at(port)
    with pytest.raises(kafka.errors.KafkaError):
        client.create_acls(new)
    client.close()
    assert proc.wait(10) == -9
    path = data / ACLS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    principals = [a["principal"] for a in json.loads(path.read_text())["acls"]]
    expected = ["User:alice", "User:bob"] if fault.startswith("dir.sync") else ["User:alice"]
    assert principals == expected, (fault, principals)
    proc = serve(spawn, data, port)
    client = client_at(port)
    found, _ = client.describe_acls(everything())
    assert sorted(a.principal for a in found) == expected
    assert not client.create_acls(new)["failed"], "the leftover temp file is no obstacle"
    client.close()
    proc.terminate()
    assert proc.wait(10) == 0


def test_sigkill_loop_during_create_acls_never_tears_the_file(tmp_path, spawn):
    """SIGKILL at arbitrary moments while clients keep creating ACLs: after every kill the file
    parses, holds a prefix of what was acknowledged or one more, and the server starts."""
    data = tmp_path / "data"
    add_users(data)
    port = free_port()
    acknowledged = 0
    for round_ in range(6):
        proc = serve(spawn, data, port)
        client = client_at(port)
        deadline = time.monotonic() + 0.3 + 0.15 * round_
        killed = False
        while not killed:
            if time.monotonic() > deadline:
                proc.kill()
                killed = True
            try:
                result = client.create_acls(
                    [acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, f"t{acknowledged}")]
                )
                if not result["failed"]:
                    acknowledged += 1
            except kafka.errors.KafkaError:
                break
        proc.kill()
        proc.wait(10)
        client.close()
        stored = json.loads((data / ACLS_FILE).read_text())["acls"] if (data / ACLS_FILE).exists() else []
        names = [a["name"] for a in stored]
        assert names[:acknowledged] == [f"t{i}" for i in range(acknowledged)], (names, acknowledged)
        assert len(names) in (acknowledged, acknowledged + 1), (names, acknowledged)
        acknowledged = len(names)
    assert acknowledged > 0


@pytest.mark.broker
def test_kafka_acls_adds_lists_and_removes(server, tmp_path):
    import maven_jars

    classpath = str(maven_jars.require(maven_jars.kafka_tools_jars) / "*")
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{PASSWORDS["admin"]}";\n'
    )

    def acls(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [
            "java", "-Xmx256m", "-cp", classpath, "org.apache.kafka.tools.AclCommand",
            "--bootstrap-server", server.bootstrap_servers, "--command-config", str(props), *args,
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    acls("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders-",
         "--resource-pattern-type", "prefixed", "--group", "alice-")  # fmt: skip
    acls("--add", "--deny-principal", "User:alice", "--operation", "Read", "--topic", "orders-us")
    listed = acls("--list").stdout
    assert (
        "name=orders-, patternType=PREFIXED" in listed and "name=orders-us, patternType=LITERAL" in listed
    ), listed
    assert "principal=User:alice, host=*, operation=READ, permissionType=DENY" in listed, listed
    alice = admin_client(server, "alice")
    assert fetch(alice, "orders-eu").error_code == 0
    assert fetch(alice, "orders-us").error_code == TOPIC_AUTHORIZATION_FAILED
    acls("--remove", "--force", "--topic", "orders-us")
    assert fetch(alice, "orders-us").error_code == 0
    listed = acls("--list", "--topic", "orders-us").stdout
    assert "DENY" not in listed, listed
    alice.close()


def batch(value: bytes) -> bytes:
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(builder.build())


def by_topic(topics, name_field: str = "name") -> dict[str, int]:
    """{topic: its first partition's error code} of a per-partition response."""
    out = {}
    for t in topics:
        parts = getattr(t, "partitions", None) or getattr(t, "partition_responses", None)
        out[getattr(t, name_field)] = parts[0].error_code
    return out


def test_requests_naming_several_topics_are_answered_per_topic(server, caplog):
    """Kafka authorizes each topic of Produce, Fetch, ListOffsets, CreateTopics, DeleteTopics,
    DeleteRecords, OffsetCommit and OffsetFetch on its own: the allowed topics are served, the
    others answered TOPIC_AUTHORIZATION_FAILED, in one response (and one WARNING line)."""
    admin = admin_client(server, "admin")
    assert not admin.create_acls(
        [
            acl("User:alice", ACLOperation.ALL, ResourceType.TOPIC, "orders-", prefixed=True),
            acl("User:alice", ACLOperation.READ, ResourceType.GROUP, "alice-", prefixed=True),
        ]
    )["failed"]
    admin.close()
    alice = admin_client(server, "alice")
    caplog.set_level(logging.WARNING, logger="kafkalite.server")
    topic = ProduceRequest.TopicProduceData
    produce = ProduceRequest(
        transactional_id=None, acks=-1, timeout_ms=5000, max_version=9,
        topic_data=[topic(name=n, partition_data=[topic.PartitionProduceData(index=0, records=batch(b"more"))])
                    for n in ("orders-eu", "payments")],
    )  # fmt: skip
    assert by_topic(send(alice, produce).responses) == {
        "orders-eu": 0,
        "payments": TOPIC_AUTHORIZATION_FAILED,
    }
    assert kafkalite.Admin(str(server.path)).describe_topic("orders-eu").partitions[0].end_offset == 2
    assert kafkalite.Admin(str(server.path)).describe_topic("payments").partitions[0].end_offset == 1

    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    fetch_both = FetchRequest(
        max_version=12, replica_id=-1, max_wait_ms=0, min_bytes=0,
        topics=[FetchRequest.FetchTopic(topic=n, partitions=[part]) for n in ("orders-us", "secret")],
    )  # fmt: skip
    assert by_topic(send(alice, fetch_both).responses, "topic") == {
        "orders-us": 0,
        "secret": TOPIC_AUTHORIZATION_FAILED,
    }

    lt = ListOffsetsRequest.ListOffsetsTopic
    listed = ListOffsetsRequest(
        replica_id=-1, isolation_level=0, max_version=7,
        topics=[lt(name=n, partitions=[lt.ListOffsetsPartition(partition_index=0, timestamp=-1)])
                for n in ("orders-eu", "payments")],
    )  # fmt: skip
    assert by_topic(send(alice, listed).topics) == {"orders-eu": 0, "payments": TOPIC_AUTHORIZATION_FAILED}

    create = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                for n in ("orders-new", "other-new")],
        timeout_ms=5000,
    )  # fmt: skip
    created = {t.name: t.error_code for t in send(alice, create).topics}
    assert created == {"orders-new": 0, "other-new": TOPIC_AUTHORIZATION_FAILED}

    dr = DeleteRecordsRequest.DeleteRecordsTopic
    trim = DeleteRecordsRequest(
        timeout_ms=5000,
        topics=[dr(name=n, partitions=[dr.DeleteRecordsPartition(partition_index=0, offset=1)])
                for n in ("orders-us", "payments")],
    )  # fmt: skip
    assert by_topic(send(alice, trim).topics) == {"orders-us": 0, "payments": TOPIC_AUTHORIZATION_FAILED}
    assert kafkalite.Admin(str(server.path)).describe_topic("payments").partitions[0].start_offset == 0

    ct = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = OffsetCommitRequest(
        group_id="alice-g", generation_id_or_member_epoch=-1, member_id="",
        topics=[ct(name=n, partitions=[ct.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])
                for n in ("orders-eu", "payments")],
    )  # fmt: skip
    assert by_topic(send(alice, commit).topics) == {"orders-eu": 0, "payments": TOPIC_AUTHORIZATION_FAILED}
    ft = OffsetFetchRequest.OffsetFetchRequestTopic
    fetched = send(
        alice,
        OffsetFetchRequest(
            group_id="alice-g", max_version=7, require_stable=False,
            topics=[ft(name=n, partition_indexes=[0]) for n in ("orders-eu", "payments")],
        ),
    )  # fmt: skip
    assert fetched.error_code == 0
    assert {
        t.name: (t.partitions[0].error_code, t.partitions[0].committed_offset) for t in fetched.topics
    } == {
        "orders-eu": (0, 1),
        "payments": (TOPIC_AUTHORIZATION_FAILED, -1),
    }

    delete = DeleteTopicsRequest(max_version=5, topic_names=["orders-new", "payments"], timeout_ms=5000)
    deleted = {t.name: t.error_code for t in send(alice, delete).responses}
    assert deleted == {"orders-new": 0, "payments": TOPIC_AUTHORIZATION_FAILED}
    topics = set(kafkalite.Admin(str(server.path)).list_topics())
    assert "payments" in topics and "orders-new" not in topics and "other-new" not in topics
    alice.close()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("refused Produce" in line for line in lines) == 1, lines
    assert any("may not WRITE TOPIC payments" in line for line in lines), lines


def test_acls_written_by_another_server_count_without_a_restart(data):
    """Two servers on one data directory: an ACL created (then deleted) through one decides
    the other's next request, without a restart."""
    options = {"sasl": True, "authorizer": True, "super_users": ["User:admin"]}
    with Server(data, **options) as one, Server(data, **options) as two:
        alice = admin_client(two, "alice")
        assert fetch(alice, "payments").error_code == TOPIC_AUTHORIZATION_FAILED
        admin = admin_client(one, "admin")
        assert not admin.create_acls([acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, "payments")])[
            "failed"
        ]
        assert fetch(alice, "payments").error_code == 0, "the other server's ACL counts"
        [(_, removed, error)] = admin.delete_acls([everything()])
        assert error is kafka.errors.NoError and len(removed) == 1
        assert fetch(alice, "payments").error_code == TOPIC_AUTHORIZATION_FAILED, "and its deletion"
        admin.close()
        alice.close()


def test_offsets_of_every_topic_list_only_the_topics_the_user_may_describe(server):
    """OffsetFetch without topics (every offset the group has, kafka-python's
    list_group_offsets) lists only the topics the principal may DESCRIBE, as KafkaApis
    filters them: the group's offsets of other topics are not disclosed."""
    admin = admin_client(server, "admin")
    assert not admin.create_acls(
        [
            acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, "orders-", prefixed=True),
            acl("User:alice", ACLOperation.READ, ResourceType.GROUP, "alice-", prefixed=True),
        ]
    )["failed"]
    ct = OffsetCommitRequest.OffsetCommitRequestTopic
    commit = OffsetCommitRequest(
        group_id="alice-all", generation_id_or_member_epoch=-1, member_id="",
        topics=[ct(name=n, partitions=[ct.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])
                for n in ("orders-eu", "payments", "secret")],
    )  # fmt: skip
    assert by_topic(send(admin, commit).topics) == {"orders-eu": 0, "payments": 0, "secret": 0}
    seen_by_admin = admin.list_group_offsets("alice-all")["alice-all"]  # OffsetFetch v8+
    assert {tp.topic for tp in seen_by_admin} == {"orders-eu", "payments", "secret"}, "a super user sees all"
    admin.close()

    alice = admin_client(server, "alice")
    listed = alice.list_group_offsets("alice-all")["alice-all"]
    assert {(tp.topic, meta.offset) for tp, meta in listed.items()} == {("orders-eu", 1)}
    every = send(  # before v8: one group
        alice, OffsetFetchRequest(group_id="alice-all", max_version=7, require_stable=False, topics=None)
    )
    assert every.error_code == 0
    assert [t.name for t in every.topics] == ["orders-eu"]
    alice.close()


def test_find_coordinator_v4_refuses_each_key_and_a_consumer_raises(server):
    """FindCoordinator v4+ (batched keys, what kafka-python 3 and the Java clients send) is
    answered per key: a group the user may not DESCRIBE gets GROUP_AUTHORIZATION_FAILED and node
    -1, a group it may gets the coordinator (KafkaApis' getCoordinator). The refusal used to set
    the top-level node that v4 does not have: the encoding failed, the connection was closed and
    the consumer reconnected forever instead of raising."""
    admin = admin_client(server, "admin")
    assert not admin.create_acls(
        [
            acl("User:alice", ACLOperation.READ, ResourceType.TOPIC, "payments"),
            acl("User:alice", ACLOperation.READ, ResourceType.GROUP, "alice-", prefixed=True),
        ]
    )["failed"]
    admin.close()
    alice = KafkaAdminClient(**config(server, "alice"), request_timeout_ms=5000)
    request = FindCoordinatorRequest(max_version=4, key_type=0, key="", coordinator_keys=["alice-g", "bob-g"])
    found = {c.key: c for c in send(alice, request).coordinators}
    assert found["alice-g"].error_code == 0 and found["alice-g"].node_id == 0
    assert found["bob-g"].error_code == GROUP_AUTHORIZATION_FAILED
    assert (found["bob-g"].node_id, found["bob-g"].port) == (-1, -1)
    request = FindCoordinatorRequest(max_version=4, key_type=1, key="", coordinator_keys=["tx"])
    [tx] = send(alice, request).coordinators
    assert tx.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED and tx.node_id == -1
    alice.close()
    consumer = kafka.KafkaConsumer(
        "payments", group_id="bob-g", auto_offset_reset="earliest", request_timeout_ms=5000,
        **config(server, "alice"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
            while time.monotonic() < deadline:
                consumer.poll(timeout_ms=1000)
    finally:
        consumer.close()


def test_describe_transactions_leaves_out_topics_the_user_may_not_describe(server):
    """DESCRIBE on a transactional id alone does not disclose the names of the topics its
    transaction writes: KafkaApis' handleDescribeTransactionsRequest drops the topics the
    caller may not DESCRIBE."""
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest

    producer = kafka.KafkaProducer(**config(server, "admin"), transactional_id="tx", max_block_ms=10000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("payments", b"p", partition=0).get(timeout=10)
    producer.send("secret", b"s", partition=0).get(timeout=10)
    admin = admin_client(server, "admin")
    assert not admin.create_acls(
        [
            acl("User:alice", ACLOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, "tx"),
            acl("User:alice", ACLOperation.DESCRIBE, ResourceType.TOPIC, "payments"),
        ]
    )["failed"]
    [by_admin] = send(admin, DescribeTransactionsRequest(transactional_ids=["tx"])).transaction_states
    assert {t.topic for t in by_admin.topics} == {"payments", "secret"}, "a super user sees all"
    admin.close()
    alice = admin_client(server, "alice")
    [seen] = send(alice, DescribeTransactionsRequest(transactional_ids=["tx"])).transaction_states
    assert seen.error_code == 0 and seen.transaction_state == "Ongoing"
    assert [(t.topic, list(t.partitions)) for t in seen.topics] == [("payments", [0])]
    alice.close()
    producer.abort_transaction()
    producer.close()


def test_super_users_are_trimmed_and_a_malformed_one_stops_the_start(data, spawn):
    """`--super-users 'User:ops; User:admin'` names two super users (each entry trimmed, as
    Kafka's StandardAuthorizer reads super.users); it used to make " User:admin" the super user
    and admin an ordinary one. A malformed principal stops the start with a clear error."""
    port = free_port()
    proc = spawn.module(
        "kafkalite", "serve", "--data-dir", data, "--listen", f"127.0.0.1:{port}", "--sasl", "--authorizer",
        "--super-users", "User:ops; User:admin ;", stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stderr.readline()
        assert "serving" in line, line
        admin = client_at(port)
        assert fetch(admin, "secret").error_code == 0, "User:admin is a super user"
        admin.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for bad in ("User:ops;admin", "User :admin", "User:"):
        proc = spawn.module(
            "kafkalite", "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--super-users", bad,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        _, err = proc.communicate(timeout=30)
        assert proc.returncode != 0, (bad, err)
        assert "is not a principal such as User:alice" in err, (bad, err)
