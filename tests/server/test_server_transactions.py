"""Kafka transactions through ``kafkalite serve`` (issue 22): kafka-python's and confluent-kafka's
transactional producers against the server's FindCoordinator (key type 1), InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn, read back by
read_committed and read_uncommitted consumers.

Each test injects what it guards against: an aborted transaction among committed ones, an abort
after ``send_offsets_to_transaction``, a second producer with the same transactional id, the
server killed (kill -9, through the coordinator's fail points) at each step of EndTxn and
restarted, an embedded process stopped (SIGSTOP) while it holds the transactional id's lock, a
producer that abandons its transaction past ``transaction.timeout.ms``, transactional batches
from a fenced producer or for a partition never added to the transaction."""

from __future__ import annotations

import logging
import os
import signal
import struct
import subprocess
import time

import kafkalite
import pytest
from serve_proc import free_port, serve_on

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.errors import InvalidProducerEpochError, ProducerFencedError  # noqa: E402
from server_wire import HOLD_FLOCK, Reader, Wire, release, stop_holder, timed  # noqa: E402

pytest_plugins = ["kafkalite.testing"]

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 10, 22, 24, 26
NONE, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS = 0, 47, 48, 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

#: Far below the 5 s a held lock is waited for, far above a loaded machine's noise.
PROMPT = 2.0


def values(
    bootstrap: str, topic: str, isolation: str, want: int | None = None, timeout: float = 20.0
) -> list[bytes]:
    """Every value of ``topic`` a kafka-python consumer at ``isolation`` reads from the start:
    until ``want`` were read (then one more quiet poll, to catch extras), or ``timeout``."""
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest"
    )
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500)
            got.extend(r.value for records in batch.values() for r in records)
            if want is not None and len(got) >= want and not batch:
                break
    finally:
        consumer.close()
    return got


def transactional(bootstrap: str, transactional_id: str, **config) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id, **config)
    producer.init_transactions()
    return producer


def test_commit_and_abort_are_seen_as_kafka_shows_them_to_each_isolation_level(kafkalite_server):
    """Committed, aborted and committed again, from kafka-python (two partitions) and from
    confluent-kafka: read_committed sees the committed records only, in order, and
    read_uncommitted all of them (the markers are hidden from both)."""
    kafkalite.Admin(kafkalite_server.path).create_topic("tx", 2)
    bootstrap = kafkalite_server.bootstrap_servers
    producer = transactional(bootstrap, "kp-tx")
    for tag, commit in (("c1", True), ("a1", False), ("c2", True)):
        producer.begin_transaction()
        for i in range(4):
            producer.send("tx", b"%s-%d" % (tag.encode(), i), partition=i % 2)
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()
    confluent = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-tx"})
    confluent.init_transactions(30)
    for tag, commit in (("ck-a", False), ("ck-c", True)):
        confluent.begin_transaction()
        for i in range(4):
            confluent.produce("tx", b"%s-%d" % (tag.encode(), i), partition=i % 2)
        confluent.flush(30)  # librdkafka's abort drops what it has not sent yet
        confluent.commit_transaction(30) if commit else confluent.abort_transaction(30)
    del confluent
    committed = {b"%s-%d" % (t, i) for t in (b"c1", b"c2", b"ck-c") for i in range(4)}
    aborted = {b"%s-%d" % (t, i) for t in (b"a1", b"ck-a") for i in range(4)}
    read = values(bootstrap, "tx", "read_committed", want=len(committed))
    assert sorted(read) == sorted(committed)
    assert sorted(values(bootstrap, "tx", "read_uncommitted", want=20)) == sorted(committed | aborted)
    # confluent-kafka's read_committed consumer (librdkafka's own aborted-transaction filter).
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ck-read",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["tx"])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < len(committed) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append(message.value())
    consumer.close()
    assert sorted(got) == sorted(committed)


def test_send_offsets_to_transaction_commits_the_groups_offsets_iff_the_transaction_commits(kafkalite_server):
    """confluent-kafka's consume-transform-produce step: the offsets sent to a transaction that
    is aborted are never the group's, those of one that commits are; while a transaction with
    offsets is open, a read_committed consumer's OffsetFetch (require_stable) is told
    UNSTABLE_OFFSET_COMMIT rather than the old offset, and a plain commit written after the
    transactional one is not undone by its COMMIT."""
    kafkalite.Admin(kafkalite_server.path).create_topic("in", 1)
    kafkalite.Admin(kafkalite_server.path).create_topic("out", 1)
    bootstrap = kafkalite_server.bootstrap_servers
    TopicPartition = confluent_kafka.TopicPartition
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "ctp", "enable.auto.commit": False}
    )
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp-tx"})
    producer.init_transactions(30)

    def committed() -> int:
        return consumer.committed([TopicPartition("in", 0)], 10)[0].offset

    producer.begin_transaction()
    producer.produce("out", b"first", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition("in", 0, 10)], consumer.consumer_group_metadata(), 30
    )
    producer.commit_transaction(30)
    assert committed() == 10
    producer.begin_transaction()
    producer.produce("out", b"second", partition=0)
    producer.send_offsets_to_transaction(
        [TopicPartition("in", 0, 20)], consumer.consumer_group_metadata(), 30
    )
    # Open: librdkafka's committed() asks with require_stable (KIP-447), is told
    # UNSTABLE_OFFSET_COMMIT, and retries until its timeout rather than read a stale 10.
    with pytest.raises(confluent_kafka.KafkaException, match="Timed out"):
        consumer.committed([TopicPartition("in", 0)], 3)
    producer.abort_transaction(30)
    assert committed() == 10
    producer.begin_transaction()
    producer.send_offsets_to_transaction(
        [TopicPartition("in", 0, 30)], consumer.consumer_group_metadata(), 30
    )
    producer.commit_transaction(30)
    assert committed() == 30
    assert values(bootstrap, "out", "read_committed", want=1) == [b"first"]
    consumer.close()
    del producer


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(kafkalite_server):
    """KIP-98's zombie fencing: the newer producer's InitProducerId aborts the older one's open
    transaction and bumps the epoch; the older one's commit fails with ProducerFencedError (or
    its batches with INVALID_PRODUCER_EPOCH), and none of its records is ever read_committed."""
    kafkalite.Admin(kafkalite_server.path).create_topic("fence", 1)
    bootstrap = kafkalite_server.bootstrap_servers
    zombie = transactional(bootstrap, "fenced-tx")
    zombie.begin_transaction()
    zombie.send("fence", b"zombie-0", partition=0)
    zombie.flush()
    newer = transactional(bootstrap, "fenced-tx")
    # EndTxn answers PRODUCER_FENCED; a produce first INVALID_PRODUCER_EPOCH (as Kafka's broker),
    # after which kafka-python tries an epoch bump, is refused, and fails its commit in that state.
    with pytest.raises((ProducerFencedError, InvalidProducerEpochError, kafka.errors.KafkaError)):
        zombie.send("fence", b"zombie-1", partition=0)
        zombie.commit_transaction()
    try:
        zombie.close(timeout=5)
    except kafka.errors.KafkaError:
        pass
    newer.begin_transaction()
    newer.send("fence", b"newer", partition=0)
    newer.commit_transaction()
    newer.close()
    assert values(bootstrap, "fence", "read_committed", want=1) == [b"newer"]


# The producer of the crash test, in its own process (it is killed with the server's first life).
CRASH_PRODUCER = r"""
import sys
from confluent_kafka import Producer
bootstrap, commit, n = sys.argv[1], sys.argv[2] == "commit", int(sys.argv[3])
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "crash-tx", "transaction.timeout.ms": 600000})
p.init_transactions(30)
p.begin_transaction()
for i in range(n):
    p.produce("crash", b"txn-%d" % i, partition=i % 3)
p.flush(30)
print("produced", flush=True)
(p.commit_transaction if commit else p.abort_transaction)(60)
print("ended", flush=True)
"""


@pytest.mark.parametrize(
    ("failpoint", "commit", "visible"),
    [
        # Killed before the decision is recorded: the transaction stays open after the restart,
        # and the next producer of the id aborts it.
        ("txn.prepare.before_record", True, False),
        # Decided (PrepareCommit recorded), markers not written, or one of three written, or
        # all written and CompleteCommit not recorded: the restarted server completes it.
        ("txn.prepare.after_record", True, True),
        ("txn.marker.after@1", True, True),
        ("txn.complete.before_record", True, True),
        ("txn.marker.after@1", False, False),
    ],
)
def test_server_killed_between_end_txn_steps_completes_the_decision_after_restart(
    tmp_path, spawn, failpoint, commit, visible
):
    """kill -9 of the server at a step of EndTxn (the coordinator's fail points), then a restart
    without fail points: a transaction whose commit was recorded is complete for read_committed
    readers (every record once), an aborted or undecided one is never visible, and a new
    producer with the same transactional id fences the old one and commits after it."""
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("crash", 3)
    name, _, nth = failpoint.partition("@")
    env = {**os.environ, "KAFKALITE_FAILPOINTS": f"{name}=kill" + (f"@{nth}" if nth else "")}
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    server = serve_on(spawn.module, data, port, "--log-level", "WARNING", env=env)
    n = 30
    producer = spawn.code(
        CRASH_PRODUCER, bootstrap, "commit" if commit else "abort", n, stdout=subprocess.PIPE, text=True
    )
    assert producer.stdout is not None and producer.stdout.readline().strip() == "produced"
    assert server.wait(60) == -signal.SIGKILL, "the fail point did not kill the server"
    producer.kill()
    producer.wait(30)
    server = serve_on(spawn.module, data, port, "--log-level", "WARNING")
    try:
        expected = [b"txn-%d" % i for i in range(n)] if visible else []
        if not visible:
            # The next producer of the id aborts whatever is left open, then commits its own.
            newer = transactional(bootstrap, "crash-tx")
            newer.begin_transaction()
            newer.send("crash", b"after", partition=0)
            newer.commit_transaction()
            newer.close()
            expected = [b"after"]
        read = values(bootstrap, "crash", "read_committed", want=len(expected), timeout=30)
        assert sorted(read) == sorted(expected)
        everything = values(bootstrap, "crash", "read_uncommitted", want=n + (0 if visible else 1))
        assert len(everything) == n + (0 if visible else 1), "a record was lost or written twice"
    finally:
        server.kill()
        server.wait(30)


def init_producer_id_body(transactional_id: str, timeout_ms: int = 60_000) -> bytes:
    """InitProducerId v1 (non-flexible): transactional id, transaction timeout."""
    return (
        struct.pack(">h", len(transactional_id)) + transactional_id.encode() + struct.pack(">i", timeout_ms)
    )


def test_a_stopped_embedded_holder_of_the_transactional_ids_lock_gets_concurrent_transactions_not_a_hang(
    kafkalite_server, spawn, caplog
):
    """An embedded process stopped (SIGSTOP) while it holds a transactional id's coordinator lock:
    ApiVersions and another id's InitProducerId are answered at once, the held id's
    InitProducerId gets CONCURRENT_TRANSACTIONS (retriable) after the server's bounded wait with
    a WARNING naming the holder, and once the holder is gone the id is served again."""
    address = kafkalite_server.address
    wire = Wire(address)
    error, *_ = Reader(wire.call(INIT_PRODUCER_ID, 1, init_producer_id_body("held-tx"))).take(">ihqh")[1:]
    assert error == NONE  # the id exists; its lock file is there
    lock_file = os.path.join(kafkalite_server.path, ".kafkalite-transactions", "held-tx.lock")
    holder = stop_holder(spawn.code, HOLD_FLOCK, lock_file)
    caplog.set_level(logging.WARNING, logger="kafkalite.server")
    try:
        body, seconds = timed(wire.call, INIT_PRODUCER_ID, 1, init_producer_id_body("held-tx"))
        assert struct.unpack(">ih", body[:6])[1] == CONCURRENT_TRANSACTIONS
        assert seconds < 15, f"the held id's InitProducerId took {seconds:.1f} s"
        other = Wire(address)
        answer, seconds = timed(other.call, INIT_PRODUCER_ID, 1, init_producer_id_body("free-tx"))
        assert struct.unpack(">ih", answer[:6])[1] == NONE and seconds < PROMPT
        # Meanwhile ApiVersions (on another connection) is answered at once.
        probe = Wire(address)
        result, seconds = timed(probe.api_versions)
        assert result == NONE and seconds < PROMPT
        assert any("CONCURRENT_TRANSACTIONS" in r.getMessage() for r in caplog.records)
    finally:
        release(holder)
    error = struct.unpack(">ih", wire.call(INIT_PRODUCER_ID, 1, init_producer_id_body("held-tx"))[:6])[1]
    assert error == NONE


def test_api_versions_stay_prompt_while_a_transactional_request_waits_for_a_stopped_holder(
    kafkalite_server, spawn
):
    """The held id's InitProducerId waits on a blocking slot, not on a request worker: ApiVersions
    sent while it waits is answered at once."""
    import threading

    address = kafkalite_server.address
    assert (
        struct.unpack(">ih", Wire(address).call(INIT_PRODUCER_ID, 1, init_producer_id_body("slow-tx"))[:6])[1]
        == NONE
    )
    lock_file = os.path.join(kafkalite_server.path, ".kafkalite-transactions", "slow-tx.lock")
    holder = stop_holder(spawn.code, HOLD_FLOCK, lock_file)
    try:
        waiting = [
            threading.Thread(
                target=Wire(address).call, args=(INIT_PRODUCER_ID, 1, init_producer_id_body("slow-tx"))
            )
            for _ in range(4)
        ]
        for t in waiting:
            t.start()
        time.sleep(0.5)
        probe = Wire(address)
        result, seconds = timed(probe.api_versions)
        assert result == NONE and seconds < PROMPT, f"ApiVersions took {seconds:.1f} s"
        for t in waiting:
            t.join(30)
    finally:
        release(holder)


# A producer that abandons its transaction: killed once its records are sent.
ABANDONING_PRODUCER = r"""
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "abandoned-tx", "transaction.timeout.ms": 1000})
p.init_transactions(30)
p.begin_transaction()
p.produce("slow", b"abandoned", partition=0)
p.flush(30)
print("produced", flush=True)
import time
time.sleep(600)
"""


def test_transaction_timeout_aborts_an_abandoned_transaction(kafkalite_server, spawn):
    """A producer sends in a transaction and is killed (transaction.timeout.ms 1 s): the server's
    periodic check aborts the transaction, so records written after it become visible to
    read_committed readers (the last stable offset moves past it) and its own never do."""
    kafkalite.Admin(kafkalite_server.path).create_topic("slow", 1)
    bootstrap = kafkalite_server.bootstrap_servers
    proc = spawn.code(ABANDONING_PRODUCER, bootstrap, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "produced"
    proc.kill()
    proc.wait(30)
    plain = KafkaProducer(bootstrap_servers=bootstrap)
    plain.send("slow", b"after", partition=0).get(30)
    plain.close()
    # Kafka checks every 10 s (transaction.abort.timed.out.transaction.cleanup.interval.ms).
    assert values(bootstrap, "slow", "read_committed", want=1, timeout=40) == [b"after"]
    assert sorted(values(bootstrap, "slow", "read_uncommitted", want=2)) == [b"abandoned", b"after"]


def test_find_coordinator_for_a_transactional_id_names_this_server(kafkalite_server):
    """FindCoordinator key_type 1 (v1) and batched (v4): this node; an empty id: INVALID_REQUEST."""
    wire = Wire(kafkalite_server.address)
    body = struct.pack(">h", len("some-tx")) + b"some-tx" + struct.pack(">b", 1)
    reader = Reader(wire.call(FIND_COORDINATOR, 1, body))
    _throttle, error = reader.take(">ih")
    reader.string()
    (node_id,) = reader.take(">i")
    host = reader.string()
    (port,) = reader.take(">i")
    assert error == NONE and node_id == 0 and f"{host}:{port}" == kafkalite_server.address
    empty = Reader(wire.call(FIND_COORDINATOR, 1, struct.pack(">h", 0) + struct.pack(">b", 1)))
    assert empty.take(">ih")[1] == 42  # INVALID_REQUEST


def test_transactional_batches_not_in_the_transaction_are_refused(kafkalite_server):
    """Kafka's produce verification: a transactional batch for a partition never added to the
    transaction is INVALID_TXN_STATE and one without a transactional id
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED (both non-retriable), so no batch can land that no
    marker will ever end (which would hold the last stable offset back for good)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    kafkalite.Admin(kafkalite_server.path).create_topic("verify", 1)
    wire = Wire(kafkalite_server.address)
    reader = Reader(wire.call(INIT_PRODUCER_ID, 1, init_producer_id_body("verify-tx")))
    _throttle, error, pid, epoch = reader.take(">ihqh")
    assert error == NONE
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=1,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=b"stray", headers=[])
    records = bytes(builder.build())

    def produce(transactional_id: str | None) -> int:
        tid = (
            struct.pack(">h", -1)
            if transactional_id is None
            else struct.pack(">h", len(transactional_id)) + transactional_id.encode()
        )
        body = (
            tid
            + struct.pack(">hii", -1, 10_000, 1)
            + struct.pack(">h", 6)
            + b"verify"
            + struct.pack(">ii", 1, 0)
            + struct.pack(">i", len(records))
            + records
        )
        r = Reader(wire.call(0, 3, body))
        r.take(">i")
        r.string()
        r.take(">ii")
        return r.take(">h")[0]

    assert produce("verify-tx") == INVALID_TXN_STATE
    assert produce(None) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # Read-only: the server has the partition open (it looked for the producer's open transaction).
    log = kafkalite.Log(os.path.join(kafkalite_server.path, "verify-0"), readonly=True)
    assert log.end_offset == 0, "a refused transactional batch was written"
    log.close()


@pytest.mark.parametrize("first", ["network", "embedded"])
def test_an_embedded_and_a_network_producer_with_one_transactional_id_fence_each_other(
    kafkalite_server, first
):
    """The server's coordinator and the embedded producer's are one (the data directory's): the
    later producer's init_transactions aborts the earlier one's open transaction and fences it,
    whichever side each is on; only the later one's records are ever read_committed."""
    from kafkalite.errors import ProducerFencedError as EmbeddedFenced

    kafkalite.Admin(kafkalite_server.path).create_topic("mixed", 1)
    bootstrap = kafkalite_server.bootstrap_servers

    def network() -> KafkaProducer:
        return transactional(bootstrap, "mixed-tx")

    def embedded() -> kafkalite.Producer:
        producer = kafkalite.Producer(kafkalite_server.path, transactional_id="mixed-tx")
        producer.init_transactions()
        return producer

    older = network() if first == "network" else embedded()
    older.begin_transaction()
    older.send("mixed", b"older", partition=0)
    older.flush()
    newer = embedded() if first == "network" else network()
    # kafka-python may be told INVALID_PRODUCER_EPOCH by the produce first (then its commit fails
    # in its own epoch-bump state, a KafkaError) or PRODUCER_FENCED by EndTxn: fenced either way.
    fenced = kafka.errors.KafkaError if first == "network" else EmbeddedFenced
    try:
        with pytest.raises(fenced):
            older.send("mixed", b"older-2", partition=0)
            older.commit_transaction()
        newer.begin_transaction()
        newer.send("mixed", b"newer", partition=0)
        newer.commit_transaction()
    finally:
        newer.close()
        try:
            older.close()
        except Exception:  # a fenced producer may say so again at close
            pass
    assert values(bootstrap, "mixed", "read_committed", want=1) == [b"newer"]


def test_list_offsets_latest_is_the_last_stable_offset_for_read_committed(kafkalite_server):
    """ListOffsets (a consumer's end_offsets, auto_offset_reset='latest') at read_committed
    answers the last stable offset while a transaction is open, the log end at
    read_uncommitted; once the transaction ends, both the log end."""
    kafkalite.Admin(kafkalite_server.path).create_topic("lso", 1)
    bootstrap = kafkalite_server.bootstrap_servers
    plain = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(3):
        plain.send("lso", b"plain-%d" % i, partition=0).get(30)
    plain.close()
    producer = transactional(bootstrap, "lso-tx")
    producer.begin_transaction()
    for i in range(5):
        producer.send("lso", b"open-%d" % i, partition=0)
    producer.flush()

    def end(isolation: str) -> int:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        tp = kafka.TopicPartition("lso", 0)
        try:
            return consumer.end_offsets([tp])[tp]
        finally:
            consumer.close()

    assert (end("read_committed"), end("read_uncommitted")) == (3, 8)
    producer.commit_transaction()
    producer.close()
    assert (end("read_committed"), end("read_uncommitted")) == (9, 9)  # the marker is offset 8


def test_a_server_stopped_at_once_logs_no_panic_of_its_transaction_round(tmp_path, caplog):
    """The round that aborts expired transactions runs at start off the request workers; a stop
    right after cancels it before it begins, and that cancellation was logged at ERROR as
    "expiring and completing panicked (a bug)" (nine starts in ten when a test stopped the server
    at once). A cancelled round is no panic: nothing is logged."""
    from kafkalite.server import Server

    caplog.set_level(logging.ERROR, logger="kafkalite")
    for _ in range(20):
        Server(tmp_path / "data").stop()
    panics = [r.getMessage() for r in caplog.records if "panicked" in r.getMessage()]
    assert not panics, panics
