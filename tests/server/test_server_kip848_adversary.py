"""An adversary's pass over the consumer group protocol (KIP-848) of ``kafkalite serve``, through
the wire (hand-built frames, tests/support/consumer_group_wire.py, and kafka-python's OffsetFetch v9):

- hostile heartbeats (epochs out of range, unknown members, empty and huge subscriptions,
  duplicate topics, a bad assignor or regex, rebalance timeouts of 0 and below) get Kafka's error
  codes and leave the server answering;
- an owned-partitions list that names a topic twice does not hide a partition the member still
  owns (it was read as the last entry alone, and the partition went to a second member);
- an old instance of a static member that was replaced is fenced (FENCED_INSTANCE_ID), as Kafka
  finds static members by instance id;
- topics that do not exist yet, then appear, gain partitions, or are deleted mid-group;
- regex subscriptions (SubscribedTopicRegex): whole-name matches, topics created later,
  INVALID_REGULAR_EXPRESSION;
- OffsetFetch v9 checks the member id and epoch of a consumer group (STALE_MEMBER_EPOCH,
  UNKNOWN_MEMBER_ID), as Kafka does;
- with ACLs: subscribed topic names the principal may not DESCRIBE refuse the heartbeat
  (TOPIC_AUTHORIZATION_FAILED) and a regex does not match them;
- a classic JoinGroup to an empty consumer group makes it a classic group (it was still shown
  as an empty consumer group); an embedded kafkalite.Consumer in the same group id;
- members killed before acknowledging a revocation (the rebalance timeout frees the partitions);
- a server restart mid-group (committed offsets survive, members rejoin);
- 100 members joining at once: every partition owned by one member at most, at every step.
"""

from __future__ import annotations

import threading
import time
import uuid

import kafkalite
import pytest
from consumer_group_wire import (
    FENCED_INSTANCE_ID,
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    INVALID_REGULAR_EXPRESSION,
    INVALID_REQUEST,
    NONE,
    STALE_MEMBER_EPOCH,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    Member,
    TopicIds,
    call_kafka_python,
    owned_count,
)
from kafkalite.server import Server
from server_wire import Wire

pytest.importorskip("kafka")

TOPIC = "adv"
PARTITIONS = 6
SESSION_MS = 6_000
UNSUPPORTED_ASSIGNOR = 112


def new_id() -> str:
    return str(uuid.uuid4())


def start_server(path: str, **kwargs) -> Server:
    return Server(
        path, group_consumer_session_timeout_ms=SESSION_MS, group_consumer_heartbeat_interval_ms=200, **kwargs
    )


def setup(path: str, topics: dict[str, int] | None = None) -> None:
    admin = kafkalite.Admin(path)
    for name, partitions in (topics or {TOPIC: PARTITIONS}).items():
        admin.create_topic(name, partitions=partitions)


def connect(server: Server) -> Member:
    return Member(server.address, TopicIds(server.address))


class Client:
    """A member that heartbeats as a well-behaved client does: it reports what it owns, gives up
    what it is no longer assigned, and remembers its epoch."""

    def __init__(self, wire: Member, group: str, topics: list[str] | None, regex: str | None = None) -> None:
        self.wire, self.group, self.id = wire, group, new_id()
        self.owned: dict[str, list[int]] = {}
        first = wire.heartbeat(group, self.id, 0, topics=topics, regex=regex, owned={}, rebalance_ms=30_000)
        assert first["error"] == NONE, first
        self.epoch = first["epoch"]
        self.owned = first["assignment"] or {}

    def beat(self) -> dict:
        answer = self.wire.heartbeat(self.group, self.id, self.epoch, owned=self.owned)
        assert answer["error"] == NONE, answer
        self.epoch = answer["epoch"]
        if answer["assignment"] is not None:
            self.owned = answer["assignment"]
        return answer

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def assert_no_partition_twice(clients: list[Client]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for c in clients:
        for tp in c.partitions():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.id} at once"
            seen[tp] = c.id


def converge(clients: list[Client], want: set[tuple[str, int]], timeout: float = 30.0) -> None:
    """Heartbeat every client until together they own exactly ``want``, checking at every step
    that no partition has two owners."""
    deadline = time.monotonic() + timeout
    while True:
        for c in clients:
            c.beat()
            assert_no_partition_twice(clients)
        owned = set().union(*(c.partitions() for c in clients))
        if owned == want and sum(len(c.partitions()) for c in clients) == len(want):
            return
        assert time.monotonic() < deadline, f"no convergence to {sorted(want)}: {[c.owned for c in clients]}"
        time.sleep(0.05)


def everything(topic: str = TOPIC, partitions: int = PARTITIONS) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(partitions)}


def test_hostile_heartbeats_get_kafkas_errors_and_the_server_keeps_answering(tmp_path):
    path = str(tmp_path)
    setup(path)
    with start_server(path) as server:
        wire = connect(server)
        group = "hostile"
        a = Client(wire, group, [TOPIC])
        assert owned_count({"assignment": a.owned}) == PARTITIONS
        refused = {
            "epoch below -2": wire.heartbeat(group, a.id, -3),
            "epoch i32 min": wire.heartbeat(group, a.id, -(2**31)),
            "epoch i32 max": wire.heartbeat(group, a.id, 2**31 - 1, owned=a.owned),
            "unknown member": wire.heartbeat(group, new_id(), 1),
            "unknown member leaving": wire.heartbeat(group, new_id(), -1),
            "unknown group": wire.heartbeat("no-such-group", new_id(), 3),
            "static leave without instance": wire.heartbeat(group, a.id, -2),
            "join without rebalance timeout": wire.heartbeat(group, new_id(), 0, topics=[TOPIC], owned={}),
            "join owning partitions": wire.heartbeat(
                group, new_id(), 0, topics=[TOPIC], owned={TOPIC: [0]}, rebalance_ms=1000
            ),
            "join without subscription": wire.heartbeat(group, new_id(), 0, owned={}, rebalance_ms=1000),
            "empty group id": wire.heartbeat(" ", new_id(), 0, topics=[TOPIC], owned={}, rebalance_ms=1000),
            "empty member id": wire.heartbeat(group, "", 0, topics=[TOPIC], owned={}, rebalance_ms=1000),
            "unknown assignor": wire.join(group, new_id(), [TOPIC], assignor="sticky-and-evil"),
            "bad regex": wire.join(group, new_id(), None, regex="(unclosed"),
            "regex too big to compile": wire.join(group, new_id(), None, regex="(a{1000}){1000}"),
        }
        expected = {
            "epoch i32 max": FENCED_MEMBER_EPOCH,
            "unknown member": UNKNOWN_MEMBER_ID,
            "unknown member leaving": UNKNOWN_MEMBER_ID,
            "unknown group": UNKNOWN_MEMBER_ID,
            "unknown assignor": UNSUPPORTED_ASSIGNOR,
            "bad regex": INVALID_REGULAR_EXPRESSION,
            "regex too big to compile": INVALID_REGULAR_EXPRESSION,
        }
        got = {what: answer["error"] for what, answer in refused.items()}
        assert got == {what: expected.get(what, INVALID_REQUEST) for what in refused}, got
        assert all(answer["message"] for answer in refused.values())

        # A huge subscription of topics that do not exist, with duplicates: a member, no partitions.
        huge = [f"missing-{i}" for i in range(20_000)] + [TOPIC, TOPIC]
        b = wire.join(group, new_id(), huge)
        assert b["error"] == NONE, b
        # An empty subscription is a member with nothing to consume (Kafka accepts it).
        c = wire.join(group, new_id(), [])
        assert c["error"] == NONE and owned_count(c) == 0, c
        # Owned partitions of a topic id no topic has, and of partitions past the end: ignored.
        odd = wire.heartbeat(group, a.id, a.epoch, owned={TOPIC: [*a.owned[TOPIC], 99], "gone-topic": [0, 1]})
        assert odd["error"] == NONE, odd
        # The same instance id in another group is another member.
        for g in ("inst-1", "inst-2"):
            assert wire.join(g, new_id(), [TOPIC], instance="shared")["error"] == NONE
        # The server still answers, and a new group still works.
        assert Wire(server.address, timeout=5).api_versions() == NONE
        converge([Client(wire, "afterwards", [TOPIC])], everything(), timeout=10)


def test_a_topic_listed_twice_in_owned_partitions_does_not_hide_a_partition_still_owned(tmp_path):
    """A revokes half its partitions when B joins. Its heartbeat lists the topic twice: first
    with one partition it must give up (it still owns it), then with what it keeps. The server
    read the last entry alone, took the revocation as done and gave that partition to B while A
    still reported owning it."""
    path = str(tmp_path)
    setup(path)
    with start_server(path) as server:
        wire = connect(server)
        group = "twice"
        a = Client(wire, group, [TOPIC])
        b = Client(wire, group, [TOPIC])
        told = a.beat()  # A learns what it keeps; the rest it must revoke
        kept = told["assignment"][TOPIC]
        revoked = sorted(set(range(PARTITIONS)) - set(kept))
        assert revoked, told
        still = [(TOPIC, [revoked[0]]), (TOPIC, kept)]
        for _ in range(3):
            answer = wire.heartbeat(group, a.id, a.epoch, owned=still)
            assert answer["error"] == NONE, answer
            got = b.beat()
            assert revoked[0] not in (got["assignment"] or b.owned).get(TOPIC, []), (
                f"partition {revoked[0]} given to B while A still reports owning it"
            )
        # Once A stops reporting it, B gets it.
        a.owned = {TOPIC: kept}
        converge([a, b], everything())


def test_a_replaced_static_instance_is_fenced_by_instance_id(tmp_path):
    path = str(tmp_path)
    setup(path)
    with start_server(path) as server:
        wire = connect(server)
        group = "static"
        old = wire.join(group, new_id(), [TOPIC], instance="s-1")
        assert old["error"] == NONE
        # The instance leaves for a restart (-2) and a new process with a new member id replaces it.
        assert wire.heartbeat(group, old["member"], -2, instance="s-1")["error"] == NONE
        new = wire.join(group, new_id(), [TOPIC], instance="s-1")
        assert new["error"] == NONE and owned_count(new) == PARTITIONS, new
        # The old process, still alive, heartbeats with its epoch: fenced by its instance id.
        stale = wire.heartbeat(group, old["member"], old["epoch"], instance="s-1", owned=old["assignment"])
        assert stale["error"] == FENCED_INSTANCE_ID, stale
        # Another join with the held instance id: refused as before.
        assert wire.join(group, new_id(), [TOPIC], instance="s-1")["error"] == UNRELEASED_INSTANCE_ID
        # An instance id nobody has, with a member epoch: unknown.
        assert wire.heartbeat(group, new_id(), 3, instance="nobody")["error"] == UNKNOWN_MEMBER_ID


def test_topics_that_appear_grow_and_disappear_mid_group(tmp_path):
    path = str(tmp_path)
    setup(path)
    admin = kafkalite.Admin(path)
    with start_server(path) as server:
        wire = connect(server)
        group = "growing"
        a = Client(wire, group, [TOPIC, "later"])
        b = Client(wire, group, [TOPIC, "later"])
        converge([a, b], everything())
        admin.create_topic("later", partitions=2)
        converge([a, b], everything() | everything("later", 2))
        admin.create_partitions("later", 5)
        converge([a, b], everything() | everything("later", 5))
        admin.delete_topic("later")
        converge([a, b], everything())


def test_regex_subscription_matches_whole_names_and_topics_created_later(tmp_path):
    path = str(tmp_path)
    setup(path, {"re-a": 2, "re-b": 1, "xre-a": 1, TOPIC: 1})
    admin = kafkalite.Admin(path)
    with start_server(path) as server:
        wire = connect(server)
        group = "regex"
        a = Client(wire, group, None, regex="re-.*")
        b = Client(wire, group, None, regex="re-.*")
        want = everything("re-a", 2) | everything("re-b", 1)
        converge([a, b], want)
        # A topic created later that matches joins the subscription at the next heartbeats.
        admin.create_topic("re-c", partitions=3)
        converge([a, b], want | everything("re-c", 3))
        described = wire.describe(group)
        assert described["error"] == NONE
        assert {m["regex"] for m in described["members"].values()} == {"re-.*"}
        # Names and a regex together: their union; an empty regex (librdkafka's) is none.
        c = Client(wire, group, [TOPIC], regex="")
        converge([a, b, c], want | everything("re-c", 3) | everything(TOPIC, 1))
        # A member changes its regex: the group follows.
        changed = wire.heartbeat(group, a.id, a.epoch, regex="re-b", owned=a.owned)
        assert changed["error"] == NONE, changed
        a.epoch = changed["epoch"]
        if changed["assignment"] is not None:
            a.owned = changed["assignment"]
        converge([a, b, c], want | everything("re-c", 3) | everything(TOPIC, 1))
        assert wire.describe(group)["members"][a.id]["regex"] == "re-b"
        bad = wire.heartbeat(group, a.id, a.epoch, regex="[z-a]", owned=a.owned)
        assert bad["error"] == INVALID_REGULAR_EXPRESSION and "re" in (bad["message"] or ""), bad


def offset_fetch_v9(
    server: Server, group: str, member: str | None, epoch: int, topics: list[str] | None = None
) -> tuple[int, dict]:
    """kafka-python's OffsetFetch v9 (an encoder we did not write) for partition 0 of ``topics``,
    or every offset of ``group``: the group's error and {(topic, partition): (offset, error)}
    (only the offset when ``topics`` is None)."""
    from kafka.protocol.consumer.group import OffsetFetchRequest

    req = OffsetFetchRequest[9]
    wanted = None
    if topics is not None:
        topic = req.OffsetFetchRequestGroup.OffsetFetchRequestTopics
        wanted = [topic(name=t, partition_indexes=[0]) for t in topics]
    one = req.OffsetFetchRequestGroup(group_id=group, member_id=member, member_epoch=epoch, topics=wanted)
    (g,) = call_kafka_python(server.address, req(groups=[one], require_stable=False)).groups
    if topics is not None:
        return g.error_code, {
            (t.name, p.partition_index): (p.committed_offset, p.error_code)
            for t in g.topics
            for p in t.partitions
        }
    return g.error_code, {
        (t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
    }


def commit_outside(server: Server, group: str, offsets: list[tuple[str, int, int]]) -> None:
    """OffsetCommit v2 from outside the group (generation -1): accepted while it is empty."""
    from server_wire import Wire as KafkaPythonWire
    from server_wire import offset_commit

    wire = KafkaPythonWire(server.address, timeout=10, client_id="kip848-adversary")
    try:
        response = wire.call(offset_commit(group, -1, "", offsets), timeout=10)
    finally:
        wire.close()
    assert [p.error_code for t in response.topics for p in t.partitions] == [NONE] * len(offsets)


def test_offset_fetch_v9_checks_the_members_epoch(tmp_path):
    path = str(tmp_path)
    setup(path)
    with start_server(path) as server:
        group = "fetcher"
        commit_outside(server, group, [(TOPIC, 0, 42)])
        wire = connect(server)
        a = Client(wire, group, [TOPIC])
        error, offsets = offset_fetch_v9(server, group, a.id, a.epoch)
        assert error == NONE and offsets[(TOPIC, 0)] == 42
        # An admin (no member id, epoch -1) is not checked.
        assert offset_fetch_v9(server, group, None, -1)[0] == NONE
        # A stale epoch, an unknown member, a member epoch without a member id: refused.
        assert offset_fetch_v9(server, group, a.id, a.epoch - 1)[0] == STALE_MEMBER_EPOCH
        assert offset_fetch_v9(server, group, a.id, a.epoch + 1)[0] == STALE_MEMBER_EPOCH
        assert offset_fetch_v9(server, group, new_id(), a.epoch)[0] == UNKNOWN_MEMBER_ID
        assert offset_fetch_v9(server, group, None, a.epoch)[0] == UNKNOWN_MEMBER_ID
        # B joins: A's epoch does not move until it heartbeats, and B's is its own.
        b = Client(wire, group, [TOPIC])
        assert offset_fetch_v9(server, group, b.id, b.epoch)[0] == NONE
        # Not a consumer group: the member id is not checked (Kafka's classic groups do not).
        commit_outside(server, "classic-offsets", [(TOPIC, 1, 7)])
        error, offsets = offset_fetch_v9(server, "classic-offsets", "whoever", 5)
        assert error == NONE and offsets[(TOPIC, 1)] == 7


def test_heartbeat_topics_the_principal_may_not_describe(tmp_path):
    """ACLs on: subscribing by name to a topic the principal may not DESCRIBE refuses the
    heartbeat (TOPIC_AUTHORIZATION_FAILED, as KafkaApis does); a regex matches only topics it may
    describe, so the hidden one is never assigned."""
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourceType,
    )

    path = str(tmp_path)
    setup(path, {"visible": 2, "hidden": 2})
    group = "acl-group"

    def allow(op, rtype, name):
        pattern = ResourcePattern(rtype, name, ACLResourcePatternType.LITERAL)
        return ACL("User:ANONYMOUS", "*", op, ACLPermissionType.ALLOW, pattern)

    # The ACLs, created by a super user; then the server that enforces them on everyone.
    with Server(path, authorizer=True, super_users=["User:ANONYMOUS"]) as server:
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        result = admin.create_acls(
            [
                allow(ACLOperation.READ, ResourceType.GROUP, group),
                allow(ACLOperation.DESCRIBE, ResourceType.TOPIC, "visible"),
                allow(ACLOperation.READ, ResourceType.TOPIC, "visible"),
            ]
        )
        assert not result["failed"], result
        admin.close()
    with start_server(path, authorizer=True) as server:
        wire = connect(server)  # Metadata lists only "visible" to this principal
        refused = wire.join(group, new_id(), ["visible", "hidden"])
        assert refused["error"] == TOPIC_AUTHORIZATION_FAILED, refused
        by_regex = Client(wire, group, None, regex=".*")
        by_name = Client(wire, group, ["visible"])
        converge([by_regex, by_name], everything("visible", 2))
        assert wire.describe(group)["members"][by_regex.id]["regex"] == ".*"
        # The group itself needs READ: another group is refused before any topic is looked at.
        other = wire.join("other-group", new_id(), ["visible"])
        assert other["error"] == 30, other  # GROUP_AUTHORIZATION_FAILED
        # OffsetFetch v9 authorizes each topic on its own, as Kafka does (the whole request was
        # refused once v8+ was served): the hidden topic's partition alone is refused.
        error, offsets = offset_fetch_v9(server, group, None, -1, ["visible", "hidden"])
        assert error == NONE
        assert offsets == {("visible", 0): (-1, NONE), ("hidden", 0): (-1, TOPIC_AUTHORIZATION_FAILED)}


def test_classic_join_to_an_empty_consumer_group_makes_it_classic(tmp_path):
    from kafka import KafkaAdminClient, KafkaConsumer

    path = str(tmp_path)
    setup(path)
    with start_server(path) as server:
        wire = connect(server)
        group = "turncoat"
        a = Client(wire, group, [TOPIC])
        assert wire.heartbeat(group, a.id, -1)["error"] == NONE  # the last member leaves: Empty
        consumer = KafkaConsumer(
            TOPIC, bootstrap_servers=server.bootstrap_servers, group_id=group, enable_auto_commit=False
        )
        try:
            deadline = time.monotonic() + 30
            while not consumer.assignment():
                assert time.monotonic() < deadline, "the classic member got no assignment"
                consumer.poll(timeout_ms=100)
            admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
            try:
                described = admin.describe_groups([group])[group]
                listed = admin.list_groups()
            finally:
                admin.close()
            # DescribeGroups and ListGroups show the classic group and its member (it was shown
            # as an empty consumer group, its member hidden).
            assert described["group_state"] == "Stable" and len(described["members"]) == 1, described
            assert [g for g in listed if g["group_id"] == group][0]["group_type"] == "classic", listed
            # ConsumerGroupDescribe: not a consumer group any more.
            assert wire.describe(group)["error"] == GROUP_ID_NOT_FOUND
            # A consumer-protocol join while the classic member is there: refused as in Kafka
            # without online migration.
            assert wire.join(group, new_id(), [TOPIC])["error"] == GROUP_ID_NOT_FOUND
        finally:
            consumer.close()


def test_an_embedded_consumer_and_network_members_never_share_a_group(tmp_path):
    path = str(tmp_path)
    setup(path)
    group = "mixed"
    with start_server(path) as server:
        wire = connect(server)
        embedded = kafkalite.Consumer(path, TOPIC, group_id=group)
        try:
            deadline = time.monotonic() + 20
            while not embedded.assignment():
                assert time.monotonic() < deadline
                embedded.poll(timeout_ms=20)
            refused = wire.join(group, new_id(), [TOPIC])
            assert refused["error"] == GROUP_ID_NOT_FOUND, refused
        finally:
            embedded.close()
        a = Client(wire, group, [TOPIC])
        assert len(a.partitions()) == PARTITIONS
        # While the network group has members, an embedded consumer of the same group is refused.
        with pytest.raises(kafkalite.KafkaliteError):
            second = kafkalite.Consumer(path, TOPIC, group_id=group)
            try:
                second.poll(timeout_ms=500)
            finally:
                second.close()
        converge([a], everything())


def test_members_that_die_before_acknowledging_a_revocation(tmp_path):
    """A member told to revoke that never heartbeats again is removed after its rebalance
    timeout (well before its session timeout) and its partitions move; one that joined with a
    rebalance timeout of 0 (or below) is removed at its first revocation, as Kafka's timer does."""
    path = str(tmp_path)
    setup(path)
    with start_server(path) as server:
        wire = connect(server)
        group = "dying"
        dead = wire.heartbeat(group, new_id(), 0, topics=[TOPIC], owned={}, rebalance_ms=1_000)
        assert owned_count(dead) == PARTITIONS
        b = Client(wire, group, [TOPIC])
        told = wire.heartbeat(group, dead["member"], dead["epoch"], owned=dead["assignment"])
        assert told["error"] == NONE and owned_count(told) < PARTITIONS  # revoking, then it dies
        started = time.monotonic()
        converge([b], everything(), timeout=SESSION_MS / 1000 - 1)
        assert time.monotonic() - started < SESSION_MS / 1000 - 1
        answer = wire.heartbeat(group, dead["member"], dead["epoch"], owned=told["assignment"])
        assert answer["error"] == UNKNOWN_MEMBER_ID, answer

        for timeout in (0, -7):
            hasty = wire.heartbeat("hasty", new_id(), 0, topics=[TOPIC], owned={}, rebalance_ms=timeout)
            assert hasty["error"] == NONE, hasty
            c = Client(wire, "hasty", [TOPIC])
            wire.heartbeat("hasty", hasty["member"], hasty["epoch"], owned=hasty["assignment"])
            converge([c], everything(), timeout=5)
            assert wire.heartbeat("hasty", c.id, -1)["error"] == NONE


def test_restart_mid_group_keeps_offsets_and_members_rejoin(tmp_path):
    path = str(tmp_path)
    setup(path)
    group = "restarted"
    with start_server(path) as server:
        commit_outside(server, group, [(TOPIC, p, 10 + p) for p in range(PARTITIONS)])
        wire = connect(server)
        a = Client(wire, group, [TOPIC])
        b = Client(wire, group, [TOPIC])
        converge([a, b], everything())
        wire.close()
    with start_server(path) as server:
        wire = connect(server)
        a.wire = b.wire = wire
        # The group is gone with the old process: members are told to rejoin.
        answer = wire.heartbeat(group, a.id, a.epoch, owned=a.owned)
        assert answer["error"] == UNKNOWN_MEMBER_ID, answer
        a2, b2 = Client(wire, group, [TOPIC]), Client(wire, group, [TOPIC])
        converge([a2, b2], everything())
        error, offsets = offset_fetch_v9(server, group, a2.id, a2.epoch)
        assert error == NONE and offsets == {(TOPIC, p): 10 + p for p in range(PARTITIONS)}


def test_a_hundred_members_joining_at_once(tmp_path):
    path = str(tmp_path)
    partitions = 150
    setup(path, {TOPIC: partitions})
    with start_server(path) as server:
        ids = TopicIds(server.address)
        group = "crowd"
        clients: list[Client] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def join() -> None:
            try:
                client = Client(Member(server.address, ids), group, [TOPIC])
                with lock:
                    clients.append(client)
            except BaseException as e:  # the test fails on it below
                errors.append(e)

        threads = [threading.Thread(target=join) for _ in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors[:3]
        assert len(clients) == 100
        assert_no_partition_twice(clients)
        converge(clients, everything(TOPIC, partitions), timeout=120)
        assert all(len(c.partitions()) in (1, 2) for c in clients), "the uniform assignor balances"
        for c in clients:
            c.wire.close()


def test_metadata_by_topic_id_with_an_empty_name(tmp_path):
    """The Java client (4.x) asks Metadata v12 for the topics of a regex subscription's assignment
    by id, with an empty name beside each id (its schema's default). The server took the empty
    name for the topic's name (INVALID_TOPIC_EXCEPTION), so the client never learnt the names
    and never consumed; Kafka looks such a topic up by its id."""
    from server_wire import compact_string

    path = str(tmp_path)
    setup(path)
    with start_server(path) as server:
        tid = TopicIds(server.address).id(TOPIC)
        wire = Wire(server.address, timeout=10)
        body = b"\x02" + tid + compact_string("") + b"\x00" + b"\x00\x00\x00"  # one topic; flags; tags
        r = wire.call_flexible(3, 12, body)
        wire.close()
        r.i32()  # throttle
        for _ in range(r.count()):  # brokers
            r.i32(), r.string(), r.i32(), r.string(), r.tags()
        r.string(), r.i32()  # cluster id, controller
        assert r.count() == 1
        error, name, got = r.i16(), r.string(), r.raw(16)
        assert (error, name, got) == (NONE, TOPIC, tid)
