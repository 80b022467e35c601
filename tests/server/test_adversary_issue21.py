"""Adversarial tests for issue 21's server changes ("a server you can run a real workload on"):
a group member's OffsetCommit that waits for a stopped embedded process's append lock on
``__consumer_offsets-<p>`` while the group rebalances must not land after the new generation's
owner fetched the older offset; hostile inputs and stuck peers must not starve the server."""

from __future__ import annotations

import os
import socket
import struct
import time

import kafkalite
import pytest
from kafkalite import _native

pytest.importorskip("kafka.record.default_records")
from serve_proc import free_port, serve_on
from server_wire import HOLD_FLOCK, NONE, Reader, Wire, _string, in_background, release, stop_holder, timed

pytest_plugins = ["kafkalite.testing"]


def start_serve_with(start, data_dir, env):
    """``kafkalite serve`` on a free port with ``env``: (process, address)."""
    port = free_port()
    return serve_on(start, data_dir, port, "--log-level", "WARNING", env=env), f"127.0.0.1:{port}"


FETCH, JOIN_GROUP, SYNC_GROUP, OFFSET_COMMIT, OFFSET_FETCH, CREATE_TOPICS = 1, 11, 14, 8, 9, 19
DELETE_GROUPS, OFFSET_DELETE, DESCRIBE_GROUPS, LIST_GROUPS = 42, 47, 15, 16
UNKNOWN_TOPIC_OR_PARTITION, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 3, 22, 25, 27
INVALID_REQUEST, NON_EMPTY_GROUP, GROUP_SUBSCRIBED_TO_TOPIC = 42, 68, 86


def join(wire: Wire, group: str, member_id: str = "") -> tuple[int, int, str, str]:
    """JoinGroup v0 (session timeout 10 s): (error, generation, leader id, member id)."""
    protocols = struct.pack(">i", 1) + _string("range") + struct.pack(">i", 0)
    body = _string(group) + struct.pack(">i", 10_000) + _string(member_id) + _string("consumer") + protocols
    r = Reader(wire.call(JOIN_GROUP, 0, body))
    (error, generation) = r.take(">hi")
    r.string()  # protocol
    leader, member = r.string(), r.string()
    return error, generation, leader or "", member or ""


def sync(wire: Wire, group: str, generation: int, member_id: str, members: list[str]) -> int:
    """SyncGroup v0 (empty assignments from the leader): the error code."""
    assignments = struct.pack(">i", len(members)) + b"".join(
        _string(m) + struct.pack(">i", 0) for m in members
    )
    body = _string(group) + struct.pack(">i", generation) + _string(member_id) + assignments
    return struct.unpack(">h", wire.call(SYNC_GROUP, 0, body)[:2])[0]


def commit(wire: Wire, group: str, generation: int, member_id: str, topic: str, offset: int) -> int:
    """OffsetCommit v2 of partition 0: its error code."""
    body = (
        _string(group)
        + struct.pack(">i", generation)
        + _string(member_id)
        + struct.pack(">q", -1)
        + struct.pack(">i", 1)
        + _string(topic)
        + struct.pack(">i", 1)
        + struct.pack(">iq", 0, offset)
        + _string("")
    )
    r = Reader(wire.call(OFFSET_COMMIT, 2, body))
    assert r.take(">i")[0] == 1
    r.string()
    assert r.take(">i")[0] == 1
    return r.take(">ih")[1]


def fetch_committed(wire: Wire, group: str, topic: str) -> int:
    """OffsetFetch v1 of partition 0: the committed offset (-1: none)."""
    body = _string(group) + struct.pack(">i", 1) + _string(topic) + struct.pack(">ii", 1, 0)
    r = Reader(wire.call(OFFSET_FETCH, 1, body))
    assert r.take(">i")[0] == 1
    r.string()
    assert r.take(">i")[0] == 1
    _index, offset = r.take(">iq")
    r.string()
    (error,) = r.take(">h")
    assert error == NONE
    return offset


def test_a_commit_waiting_for_a_stopped_append_lock_holder_is_refused_after_a_rebalance(
    kafkalite_server, spawn
):
    """The lead's re-check under the offsets partition's locks (``OffsetStore::commit``'s
    ``admit``): member A of generation 1 commits offset 10 while an embedded process stopped
    with ``__consumer_offsets-<p>``'s append lock makes it wait; meanwhile B joins, A rejoins,
    generation 2 completes and its members fetch the committed offset (5). Once the holder goes
    away the old commit must be refused; had it been accepted, the new owner saw an older
    offset than one the group was told was committed."""
    address = kafkalite_server.address
    group, topic = "adv21-recheck", "adv21-t"
    assert Wire(address).metadata([topic]) == {topic: NONE}
    a = Wire(address)
    error, generation, leader, member_a = join(a, group)
    assert (error, leader) == (NONE, member_a)
    assert sync(a, group, generation, member_a, [member_a]) == NONE
    # The first commit creates and opens the offsets partition.
    assert commit(a, group, generation, member_a, topic, 5) == NONE
    partition_dir = os.path.join(
        kafkalite_server.path, f"{_native.OFFSETS_TOPIC}-{_native.offsets_partition(group)}"
    )
    holder = stop_holder(spawn.code, HOLD_FLOCK, os.path.join(partition_dir, ".kafkalite.lock"))
    try:
        stuck, out = in_background(commit, Wire(address), group, generation, member_a, topic, 10)
        time.sleep(0.3)  # the commit passed its first verdict and waits for the append lock
        b = Wire(address)
        joining_b = in_background(join, b, group)
        time.sleep(0.2)
        rejoined_a = join(Wire(address), group, member_a)
        joining_b[0].join(10)
        joined_b = joining_b[1]["result"]
        assert rejoined_a[0] == NONE and joined_b[0] == NONE
        assert rejoined_a[1] == joined_b[1] == generation + 1
        members = [member_a, joined_b[3]]
        leader_wire, leader_id = (b, joined_b[3]) if joined_b[2] == joined_b[3] else (Wire(address), member_a)
        assert sync(leader_wire, group, generation + 1, leader_id, members) == NONE
        # The new generation's owner reads the committed offset: the older commit's.
        seen = fetch_committed(Wire(address, timeout=10), group, topic)
        assert stuck.is_alive(), "the commit still waits for the held append lock"
    finally:
        release(holder)
    stuck.join(15)
    assert "error" not in out, out
    code = out["result"]
    assert code in (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS) or seen == 10, (
        f"the generation-{generation} commit was answered {code} after generation {generation + 1}'s owner "
        f"fetched offset {seen}"
    )
    assert fetch_committed(Wire(address), group, topic) == 5


def fetch_request(topic: str, max_bytes: int) -> bytes:
    """A Fetch v4 frame (no wait) of partition 0 from offset 0, up to ``max_bytes``."""
    body = (
        struct.pack(">iiiib", -1, 0, 0, max_bytes, 0)
        + struct.pack(">i", 1)
        + _string(topic)
        + struct.pack(">i", 1)
        + struct.pack(">iqi", 0, 0, max_bytes)
    )
    frame = struct.pack(">hhih", FETCH, 4, 1, 3) + b"adv" + body
    return struct.pack(">i", len(frame)) + frame


def fetched_bytes(wire: Wire, topic: str) -> int:
    """Fetch v4 of partition 0 from offset 0 (1 MiB at most): the record bytes returned."""
    body = fetch_request(topic, 1 << 20)[4 + 2 + 2 + 4 + 2 + 3 :]
    r = Reader(wire.call(FETCH, 4, body))
    r.take(">i")  # throttle
    assert r.take(">i")[0] == 1
    r.string()
    assert r.take(">i")[0] == 1
    _index, error = r.take(">ih")
    assert error == NONE
    r.take(">qq")
    (aborted,) = r.take(">i")
    r.take(f">{max(aborted, 0) * 16}x")
    return r.take(">i")[0]


def test_clients_that_never_read_their_fetch_responses_do_not_starve_other_consumers(tmp_path):
    """Two connections each ask for more than half of the server-wide response budget
    (``QUEUED_MAX_RESPONSE_BYTES``, 64 MiB) and never read: before, their responses (and
    budget) were held as long as their sockets lived, and every other consumer got empty
    fetches of a non-empty log. Now a response unread within ``connections.max.idle.ms``
    (here 2 s; 30 s at most) closes its connection and frees its budget."""
    server = _native.NativeServer(str(tmp_path / "data"), "127.0.0.1:0", idle_timeout_ms=2000)
    try:
        address = server.local_addr
        writer = Wire(address)
        assert writer.metadata(["big"]) == {"big": NONE}
        chunk = os.urandom(512 * 1024)
        for _ in range(80):  # 40 MiB: two whole responses exceed the 64 MiB budget
            assert writer.produce("big", 0, chunk) == NONE
        writer.close()
        host, port = address.rsplit(":", 1)
        stalled = []
        for _ in range(2):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            sock.sendall(fetch_request("big", 64 << 20))
            stalled.append(sock)  # ...and never read
        time.sleep(0.5)
        got, started = 0, time.monotonic()
        while got == 0 and time.monotonic() - started < 15:
            got = fetched_bytes(Wire(address, timeout=10), "big")
            time.sleep(0.2)
        assert got > 0, "the stalled connections keep the response budget: other consumers get empty fetches"
        for sock in stalled:
            sock.close()
    finally:
        server.stop(10_000)


def open_or_refused(path: str) -> kafkalite.Log | None:
    """A shared writer of ``path``, or None when its open refused the link by name."""
    try:
        return kafkalite.Log(path, shared_writers=True, segment_bytes=1024)
    except kafkalite.KafkaliteError as e:
        assert "symbolic link" in str(e)
        return None


def test_a_segment_generation_file_that_is_a_link_is_never_followed_or_written(tmp_path):
    """``.kafkalite-segments`` replaced by a link to a decoy outside the partition: opens (which
    may cut, so bump), a second shared writer's appends and rolls (which follow), and deletions
    (which bump) never write the decoy; what needs the file refuses with a typed error naming
    the link, and deleting segments does not delete them unannounced to other writers."""
    decoy = tmp_path / "decoy"
    decoy.write_bytes(b"decoy: must stay as it is\n")
    path = str(tmp_path / "t-0")
    first = kafkalite.Log(path, shared_writers=True, segment_bytes=1024)
    first.append_values([b"x" * 200 for _ in range(20)])
    generation_file = os.path.join(path, ".kafkalite-segments")
    if os.path.exists(generation_file):
        os.remove(generation_file)
    os.symlink(decoy, generation_file)
    second = open_or_refused(path)
    for log in (first, second, first):
        if log is not None:
            log.append_values([b"y" * 200 for _ in range(10)])
            log.roll()
    with pytest.raises(kafkalite.KafkaliteError, match="symbolic link"):
        first.delete_records_before(5)
    # The log start offset may move (as Kafka's does before its segments go), the files not.
    assert os.path.exists(os.path.join(path, "00000000000000000000.log")), "nothing deleted unannounced"
    end = first.end_offset
    assert len(list(first.records())) == end - first.start_offset
    for log in (first, second):
        if log is not None:
            log.close()
    reopened = open_or_refused(path)
    if reopened is not None:
        assert reopened.end_offset == end
        reopened.close()
    assert decoy.read_bytes() == b"decoy: must stay as it is\n"
    assert os.path.islink(generation_file)


@pytest.mark.parametrize(
    "failpoint",
    [
        "group_commit.sync@4",
        "group_commit.publish@4",
        "roll.after_seal@3",
        "roll.after_create@3",
        "dir.sync@3",
    ],
)
def test_every_acknowledged_acks_all_record_survives_a_kill_at_the_sync_or_a_roll(tmp_path, spawn, failpoint):
    """``kafkalite serve`` (``--acks-all=disk``) killed (SIGKILL) at a step of the group-commit
    sync or of a segment roll while a producer sends acks=all records one at a time: after
    the restart every record the server acknowledged is in the log, in order."""
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("acked", 1, {"segment.bytes": 4096})
    name, _, nth = failpoint.partition("@")
    env = {**os.environ, "KAFKALITE_FAILPOINTS": f"{name}=kill@{nth}"}
    proc, bootstrap = start_serve_with(spawn.module, data, env)
    acked = []
    try:
        wire = Wire(bootstrap, timeout=30)
        for i in range(2000):
            value = b"%06d" % i + b"v" * 500
            try:
                error = wire.produce("acked", 0, value)
            except (AssertionError, OSError):
                break
            if error == NONE:
                acked.append(value)
        else:
            pytest.fail(f"the failpoint {failpoint} never killed the server")
    finally:
        proc.kill()
        proc.wait(30)
    assert proc.returncode == -9
    assert acked, "some records were acknowledged before the kill"
    log = kafkalite.Log(str(data / "acked-0"))
    stored = [r.value for r in log.records()]
    log.close()
    missing = [v[:6] for v in acked if v not in stored]
    assert not missing, f"acknowledged acks=all records lost after a kill at {failpoint}: {missing[:10]}"


@pytest.mark.serial  # the 2 s ApiVersions bound is the guarantee
def test_a_fetch_of_ten_thousand_nonexistent_partitions_is_answered_promptly_and_creates_nothing(
    kafkalite_server,
):
    """One Fetch naming 10,000 partitions of topics that do not exist: each is answered
    UNKNOWN_TOPIC_OR_PARTITION within a bound, nothing is created, and the server stays
    responsive to others meanwhile."""
    address = kafkalite_server.address
    topics = [f"ghost-{i}" for i in range(10_000)]
    body = struct.pack(">iiiib", -1, 0, 0, 1 << 20, 0) + struct.pack(">i", len(topics))
    body += b"".join(_string(t) + struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, 1 << 20) for t in topics)
    probe = Wire(address, timeout=10)
    thread, out = in_background(Wire(address, timeout=60).call, FETCH, 4, body)
    while thread.is_alive():
        error, seconds = timed(probe.api_versions)
        assert error == NONE and seconds < 2.0, f"an ApiVersions took {seconds:.1f} s"
        time.sleep(0.05)
    assert "error" not in out, out
    assert out["seconds"] < 15.0
    r = Reader(out["result"])
    r.take(">i")
    (count,) = r.take(">i")
    assert count == len(topics)
    codes = set()
    for _ in range(count):
        r.string()
        assert r.take(">i")[0] == 1
        _index, error = r.take(">ih")
        r.take(">qq")
        (aborted,) = r.take(">i")
        r.take(f">{max(aborted, 0) * 16}x")
        (size,) = r.take(">i")
        r.take(f">{max(size, 0)}x")
        codes.add(error)
    assert codes == {UNKNOWN_TOPIC_OR_PARTITION}
    assert not [t for t in kafkalite.Admin(kafkalite_server.path).list_topics() if t.startswith("ghost-")]


def create_topics(wire: Wire, topics: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """CreateTopics v2 (timeout 30 s): each entry's (name, error code), in order."""
    body = struct.pack(">i", len(topics))
    body += b"".join(_string(name) + struct.pack(">ihii", n, 1, 0, 0) for name, n in topics)
    r = Reader(wire.call(CREATE_TOPICS, 2, body + struct.pack(">i?", 30_000, False)))
    r.take(">i")  # throttle
    answered = []
    for _ in range(r.take(">i")[0]):
        name, (error,) = r.string() or "", r.take(">h")
        r.string()  # message
        answered.append((name, error))
    return answered


def test_a_create_topics_naming_a_topic_twice_creates_neither_entry(kafkalite_server):
    """Kafka answers INVALID_REQUEST for every entry of a name the request repeats and creates
    none of them (ControllerApis: "Duplicate topic name"); before, the first entry was created
    (and charged to the mutation quota) and only the second refused."""
    wire = Wire(kafkalite_server.address)
    answered = create_topics(wire, [("twice", 1), ("once", 1), ("twice", 3)])
    assert set(answered) == {("twice", INVALID_REQUEST), ("once", NONE)}
    assert sorted(kafkalite.Admin(kafkalite_server.path).list_topics()) == ["once"]


def test_an_outside_commit_waiting_for_the_append_lock_is_refused_once_an_embedded_consumer_joined(
    kafkalite_server, spawn
):
    """The re-check covers the embedded side too: a commit from outside the group (generation
    -1, no member id) admitted while the group had no member waits for a stopped append lock
    holder; meanwhile an embedded ``kafkalite.Consumer`` joins and reads its position (the
    committed 5). Once the holder goes, the old commit must be refused (UNKNOWN_MEMBER_ID),
    not land under the consumer that already read the older offset."""
    address, path = kafkalite_server.address, kafkalite_server.path
    group, topic = "adv21-embedded", "adv21-e"
    kafkalite.Admin(path).create_topic(topic, 1)
    wire = Wire(address)
    for i in range(20):  # committed offsets inside the log: positions are not reset
        assert wire.produce(topic, 0, b"%d" % i) == NONE
    assert commit(wire, group, -1, "", topic, 5) == NONE
    partition_dir = os.path.join(path, f"{_native.OFFSETS_TOPIC}-{_native.offsets_partition(group)}")
    holder = stop_holder(spawn.code, HOLD_FLOCK, os.path.join(partition_dir, ".kafkalite.lock"))
    consumer = None
    try:
        stuck, out = in_background(commit, Wire(address), group, -1, "", topic, 10)
        time.sleep(0.3)  # past its first verdict (no member then), waiting for the append lock
        consumer = kafkalite.Consumer(path, topic, group_id=group)
        consumer.poll(timeout_ms=500)
        seen = consumer.committed(kafkalite.TopicPartition(topic, 0))
        assert stuck.is_alive(), "the commit still waits for the held append lock"
    finally:
        release(holder)
        stuck.join(15)
        if consumer is not None:
            consumer.close()
    assert "error" not in out, out
    assert out["result"] == UNKNOWN_MEMBER_ID or seen == 10, (
        f"an outside commit was answered {out['result']} after an embedded member joined and read offset {seen}"
    )


def offset_delete(wire: Wire, group: str, topic: str) -> int:
    """OffsetDelete v0 of partition 0: the group's error code, else the partition's."""
    body = _string(group) + struct.pack(">i", 1) + _string(topic) + struct.pack(">ii", 1, 0)
    r = Reader(wire.call(OFFSET_DELETE, 0, body))
    (error, _throttle) = r.take(">hi")
    if error != NONE:
        return error
    assert r.take(">i")[0] == 1
    r.string()
    assert r.take(">i")[0] == 1
    return r.take(">ih")[1]


def delete_group(wire: Wire, group: str) -> int:
    """DeleteGroups v0 of one group: its error code."""
    r = Reader(wire.call(DELETE_GROUPS, 0, struct.pack(">i", 1) + _string(group)))
    r.take(">i")  # throttle
    assert r.take(">i")[0] == 1
    r.string()
    return r.take(">h")[0]


@pytest.mark.parametrize("removal", ["offset_delete", "delete_group"])
def test_offsets_removed_while_an_embedded_consumer_joins_are_refused(kafkalite_server, spawn, removal):
    """OffsetDelete and DeleteGroups of a group without members pass their check, then wait for
    the offsets partition's append lock (held by a stopped process); meanwhile an embedded
    ``kafkalite.Consumer`` joins the group and reads its committed offset. Once the holder
    goes, the removal must be refused (GROUP_SUBSCRIBED_TO_TOPIC / NON_EMPTY_GROUP): before,
    the tombstones landed under the live consumer, and DeleteGroups removed its group folder."""
    address, path = kafkalite_server.address, kafkalite_server.path
    group, topic = f"adv21-{removal}", "adv21-d"
    kafkalite.Admin(path).create_topic(topic, 1)
    wire = Wire(address)
    for i in range(20):
        assert wire.produce(topic, 0, b"%d" % i) == NONE
    assert commit(wire, group, -1, "", topic, 5) == NONE
    partition_dir = os.path.join(path, f"{_native.OFFSETS_TOPIC}-{_native.offsets_partition(group)}")
    holder = stop_holder(spawn.code, HOLD_FLOCK, os.path.join(partition_dir, ".kafkalite.lock"))
    consumer = None
    call = offset_delete if removal == "offset_delete" else delete_group
    args = (group, topic) if removal == "offset_delete" else (group,)
    try:
        stuck, out = in_background(call, Wire(address), *args)
        time.sleep(0.3)  # past its check (no member then), waiting for the append lock
        consumer = kafkalite.Consumer(path, topic, group_id=group)
        consumer.poll(timeout_ms=500)
        seen = consumer.committed(kafkalite.TopicPartition(topic, 0))
        assert seen == 5 and stuck.is_alive()
    finally:
        release(holder)
        stuck.join(15)
    try:
        assert "error" not in out, out
        assert out["result"] in (GROUP_SUBSCRIBED_TO_TOPIC, NON_EMPTY_GROUP), (
            f"{removal} was answered {out['result']} after an embedded member joined and read offset {seen}"
        )
        assert consumer.committed(kafkalite.TopicPartition(topic, 0)) == 5
    finally:
        consumer.close()


def test_group_admin_requests_are_prompt_while_a_stopped_member_holds_the_group_state_lock(
    kafkalite_server, spawn
):
    """An embedded member stopped (SIGSTOP) holding its group's state lock: DescribeGroups,
    ListGroups, OffsetFetch and DeleteGroups of that group are answered within the server's lock
    deadline (none waits for the holder), and ApiVersions meanwhile at once."""
    address = kafkalite_server.address
    group = "adv21-held"
    group_dir = os.path.join(kafkalite_server.path, _native.GROUPS_DIR, group)
    os.makedirs(group_dir)
    holder = stop_holder(spawn.code, HOLD_FLOCK, os.path.join(group_dir, _native.GROUP_STATE_LOCK_FILE))
    try:
        calls = [
            (DESCRIBE_GROUPS, 0, struct.pack(">i", 1) + _string(group)),
            (LIST_GROUPS, 0, b""),
            (
                OFFSET_FETCH,
                1,
                _string(group) + struct.pack(">i", 1) + _string("t") + struct.pack(">ii", 1, 0),
            ),
            (DELETE_GROUPS, 0, struct.pack(">i", 1) + _string(group)),
        ]
        for api, version, body in calls:
            thread, out = in_background(Wire(address, timeout=30).call, api, version, body)
            time.sleep(0.1)
            assert timed(Wire(address, timeout=10).api_versions)[1] < 2.0
            thread.join(20)
            assert "error" not in out, (api, out)
            assert out["seconds"] < 10.0, f"API {api} took {out['seconds']:.1f} s"
    finally:
        release(holder)


DELETING_WRITER = r"""
import sys
import kafkalite
log = kafkalite.Log(sys.argv[1], shared_writers=True, segment_bytes=1024)
log.append_values([b"a" * 200 for _ in range(10)])
log.delete_records_before(int(sys.argv[2]))   # the generation bumps: killed at one of them
log.append_values([b"c" * 200 for _ in range(3)])
"""


@pytest.mark.parametrize("nth", [1, 2])
def test_a_writer_killed_between_the_segment_generation_bumps_leaves_other_writers_consistent(
    tmp_path, spawn, nth
):
    """A shared writer deletes segments (DeleteRecords: the generation moves before and after)
    and is killed (SIGKILL, failpoint ``segments.generation``) at the ``nth`` bump, while
    another writer of the partition, open all along, appends before and after: that writer
    and a fresh reader see the same contiguous offsets, and its appends continue the log."""
    path = str(tmp_path / "t-0")
    other = kafkalite.Log(path, shared_writers=True, segment_bytes=1024)
    other.append_values([b"b" * 200 for _ in range(20)])
    env = {**os.environ, "KAFKALITE_FAILPOINTS": f"segments.generation=kill@{nth}"}
    done = spawn.run(DELETING_WRITER, path, 25, env=env)
    assert done.returncode == -9, done.stderr
    other.append_values([b"d" * 200 for _ in range(5)])
    offsets = [r.offset for r in other.records()]
    assert offsets == list(range(other.start_offset, other.end_offset)), "a gap or a stale segment"
    fresh = kafkalite.Log(path, shared_writers=True, segment_bytes=1024)
    assert (fresh.start_offset, fresh.end_offset) == (other.start_offset, other.end_offset)
    assert [r.offset for r in fresh.records()] == offsets
    assert [r.value[:1] for r in fresh.records()] == [r.value[:1] for r in other.records()]
    fresh.close()
    other.close()
