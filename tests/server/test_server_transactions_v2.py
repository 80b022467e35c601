"""Transaction version 2 (KIP-890 part 2) in `kafkalite serve`, as a Kafka 4 broker serves it:
ApiVersions finalizes `transaction.version` 2; a transactional Produce v12 adds its partitions to
the transaction (no AddPartitionsToTxn); every EndTxn v5 bumps the producer epoch, answers the
new one, and its markers carry it, so a zombie at the old epoch is fenced in every partition
(INVALID_PRODUCER_EPOCH on Produce, PRODUCER_FENCED on EndTxn); a retried EndTxn is recognised
by its epoch one below. Requests are built with kafka-python's protocol classes at the exact
versions a Java 4.x producer sends. Also: the embedded producer and a version-2 network
producer with one transactional id fence each other over the shared `__transaction_state`, and
kill -9 of the server between EndTxn's record steps (the coordinator's fail points) leaves the
transaction completed or aborted as Kafka's recovery does. The Java client itself (broker
marked): tests/interop/test_server_java_transactions.py and test_java_tv2_matches_the_broker below."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import time

import kafkalite
import pytest
from serve_proc import free_port, serve_on

kafka = pytest.importorskip("kafka")
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse  # noqa: E402
from kafka.protocol.producer import ProduceRequest, ProduceResponse  # noqa: E402
from kafka.protocol.producer.transaction import (  # noqa: E402
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from test_server_transactions import values  # noqa: E402

pytest_plugins = ["kafkalite.testing"]

NONE, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, PRODUCER_FENCED = 0, 47, 48, 90
#: The versions a Java 4.x producer sends once the server finalizes transaction.version 2.
PRODUCE_V2, END_TXN_V2, INIT_PRODUCER_ID = 12, 5, 5


class Client:
    """One connection; each request at the version given, decoded with kafka-python's classes."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.correlation = 0

    def call(self, request, version: int, response_class):
        self.correlation += 1
        request.with_header(correlation_id=self.correlation, client_id="tv2-test")
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        (size,) = struct.unpack(">i", self._read(4))
        return response_class.decode(self._read(size), version=version, header=True)

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            assert chunk, "the server closed the connection"
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()

    def init_producer_id(self, transactional_id: str) -> tuple[int, int, int]:
        """(error, producer id, epoch)."""
        request = InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout_ms=600_000,
            producer_id=-1,
            producer_epoch=-1,
        )
        r = self.call(request, INIT_PRODUCER_ID, InitProducerIdResponse)
        return r.error_code, r.producer_id, r.producer_epoch

    def produce(
        self, transactional_id: str, topic: str, partition: int, producer: tuple[int, int], sequence: int,
        values: list[bytes], version: int = PRODUCE_V2,
    ) -> int:  # fmt: skip
        """One transactional batch of ``values`` at ``producer`` (id, epoch): the error code."""
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=1, producer_id=producer[0],
            producer_epoch=producer[1], base_sequence=sequence, batch_size=1 << 20,
        )  # fmt: skip
        for i, v in enumerate(values):
            builder.append(i, timestamp=int(time.time() * 1000), key=None, value=v, headers=[])
        data = ProduceRequest.TopicProduceData
        request = ProduceRequest(
            transactional_id=transactional_id, acks=-1, timeout_ms=30_000,
            topic_data=[data(name=topic, partition_data=[
                data.PartitionProduceData(index=partition, records=bytes(builder.build()))
            ])],
        )  # fmt: skip
        [topic_response] = self.call(request, version, ProduceResponse).responses
        [partition_response] = topic_response.partition_responses
        return partition_response.error_code

    def end_txn(
        self, transactional_id: str, producer: tuple[int, int], commit: bool, version: int = END_TXN_V2
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch) of EndTxn (id and epoch -1 below v5)."""
        request = EndTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer[0],
            producer_epoch=producer[1],
            committed=commit,
        )
        r = self.call(request, version, EndTxnResponse)
        return r.error_code, getattr(r, "producer_id", -1), getattr(r, "producer_epoch", -1)


def describe(data: str, transactional_id: str):
    return kafkalite.Admin(data).describe_transactions([transactional_id])[transactional_id]


def control_epochs(data: str, topic: str, partition: int) -> list[tuple[int, int, bool]]:
    """(producer id, epoch, commit?) of each transaction marker of the partition, read while
    the server may run (its segment is preallocated: read through the engine, not the file)."""
    from kafka.record.memory_records import MemoryRecords

    out = []
    with kafkalite.Log(os.path.join(data, f"{topic}-{partition}"), readonly=True) as log:
        for h in log.batch_headers(log.start_offset):
            if h.control:
                batch = MemoryRecords(bytes(log.read(h.base_offset))).next_batch()
                [marker] = list(batch)
                out.append((h.producer_id, h.producer_epoch, struct.unpack(">hh", marker.key)[1] == 1))
    return out


def landed(data: str, topic: str, partition: int, want: list, timeout: float = 10.0) -> list:
    """``control_epochs`` once they are ``want``, or at ``timeout``: EndTxn is answered once its
    end is decided, its markers land right after (``server/txn_ends.rs``)."""
    deadline = time.monotonic() + timeout
    while (got := control_epochs(data, topic, partition)) != want and time.monotonic() < deadline:
        time.sleep(0.02)
    return got


def test_api_versions_finalize_transaction_version_2(kafkalite_server):
    """v4 names the supported range 0-2 and the finalized level 2 (epoch at least 0, or Java
    clients ignore it); v3, as Kafka's, leaves out a supported range starting at 0 but keeps the
    finalized level; the versions of KIP-890 part 2 are advertised."""
    client = Client(kafkalite_server.address)
    v4 = client.call(ApiVersionsRequest(), 4, ApiVersionsResponse)
    assert v4.error_code == NONE
    assert [(f.name, f.min_version, f.max_version) for f in v4.supported_features] == [
        ("transaction.version", 0, 2)
    ]
    assert [(f.name, f.min_version_level, f.max_version_level) for f in v4.finalized_features] == [
        ("transaction.version", 2, 2)
    ]
    assert v4.finalized_features_epoch >= 0
    top = {k.api_key: k.max_version for k in v4.api_keys}
    assert (top[0], top[26], top[28]) == (12, 5, 5)  # Produce, EndTxn, TxnOffsetCommit
    v3 = client.call(ApiVersionsRequest(), 3, ApiVersionsResponse)
    assert list(v3.supported_features) == []
    assert [(f.name, f.max_version_level) for f in v3.finalized_features] == [("transaction.version", 2)]
    client.close()


def test_produce_v12_adds_partitions_and_end_txn_v5_bumps_the_epoch_fencing_the_zombie(kafkalite_server):
    kafkalite.Admin(kafkalite_server.path).create_topic("tv2", 2)
    tid = "tv2-tx"
    client = Client(kafkalite_server.address)
    error, pid, e0 = client.init_producer_id(tid)
    assert error == NONE
    # No AddPartitionsToTxn: the Produce v12 itself adds the partition.
    assert client.produce(tid, "tv2", 0, (pid, e0), 0, [b"c0", b"c1"]) == NONE
    described = describe(kafkalite_server.path, tid)
    assert (described.state, [(t.topic, t.partition) for t in described.topic_partitions]) == (
        "Ongoing",
        [("tv2", 0)],
    )
    assert client.end_txn(tid, (pid, e0), True) == (NONE, pid, e0 + 1)
    # A retry of that EndTxn (its response lost): the same answer, nothing ended twice.
    assert client.end_txn(tid, (pid, e0), True) == (NONE, pid, e0 + 1)
    assert control_epochs(kafkalite_server.path, "tv2", 0) == [(pid, e0 + 1, True)]
    # The zombie (the old epoch) is fenced in a partition the new epoch never wrote to, by the
    # coordinator, and in the one its marker went to.
    assert client.produce(tid, "tv2", 1, (pid, e0), 0, [b"zombie"]) == INVALID_PRODUCER_EPOCH
    assert client.produce(tid, "tv2", 0, (pid, e0), 2, [b"zombie"]) == INVALID_PRODUCER_EPOCH
    # An EndTxn one epoch below is a retry (Kafka's table): an abort of the committed one is
    # INVALID_TXN_STATE, not a new end.
    assert client.end_txn(tid, (pid, e0), False) == (INVALID_TXN_STATE, -1, -1)
    # The next transaction at the bumped epoch starts at sequence 0, is aborted, bumps again.
    assert client.produce(tid, "tv2", 1, (pid, e0 + 1), 0, [b"a0"]) == NONE
    assert client.produce(tid, "tv2", 0, (pid, e0 + 1), 0, [b"a1"]) == NONE
    assert client.end_txn(tid, (pid, e0 + 1), False) == (NONE, pid, e0 + 2)
    assert landed(kafkalite_server.path, "tv2", 1, [(pid, e0 + 2, False)]) == [(pid, e0 + 2, False)]
    assert client.end_txn(tid, (pid, e0), True) == (PRODUCER_FENCED, -1, -1)  # two epochs below
    # An abort with nothing open ends an empty transaction (an epoch bump); a commit is refused.
    assert client.end_txn(tid, (pid, e0 + 2), False) == (NONE, pid, e0 + 3)
    assert client.end_txn(tid, (pid, e0 + 3), True) == (INVALID_TXN_STATE, -1, -1)
    described = describe(kafkalite_server.path, tid)
    assert (described.state, described.producer_epoch) == ("CompleteAbort", e0 + 3)
    client.close()
    assert sorted(values(kafkalite_server.bootstrap_servers, "tv2", "read_committed", want=2)) == [
        b"c0",
        b"c1",
    ]


def test_clients_below_transaction_version_2_keep_its_rules(kafkalite_server):
    """A client that negotiates Produce v11 and EndTxn v4 (Java 3.x, or 4.x against a broker
    without transaction version 2) adds partitions with AddPartitionsToTxn, and its epoch stays
    across transactions: the markers carry the same one."""
    kafkalite.Admin(kafkalite_server.path).create_topic("tv0", 1)
    tid = "tv0-tx"
    client = Client(kafkalite_server.address)
    error, pid, epoch = client.init_producer_id(tid)
    assert error == NONE
    # A v11 Produce does not add its partition: the verification refuses it.
    assert client.produce(tid, "tv0", 0, (pid, epoch), 0, [b"x"], version=11) == INVALID_TXN_STATE
    for n in range(2):
        add = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="tv0", partitions=[0])],
        )  # fmt: skip
        [topic] = client.call(add, 3, AddPartitionsToTxnResponse).results_by_topic_v3_and_below
        assert [r.partition_error_code for r in topic.results_by_partition] == [NONE]
        assert client.produce(tid, "tv0", 0, (pid, epoch), n, [b"v%d" % n], version=11) == NONE
        assert client.end_txn(tid, (pid, epoch), True, version=4) == (NONE, -1, -1)
    two = [(pid, epoch, True), (pid, epoch, True)]
    assert landed(kafkalite_server.path, "tv0", 0, two) == two
    client.close()


def test_a_batch_after_its_transactions_end_is_verified_again_not_appended_into_it(kafkalite_server):
    """The server appends a transaction's later batches to a partition without asking the
    coordinator while the partition holds that producer's open transaction at that epoch (Kafka's
    `hasOngoingTransaction`). Once a marker ended it there (the coordinator writes markers through
    its own handle on the partition), a batch at the same epoch (transaction version 0 keeps it
    across transactions), or at a fence's new epoch, is verified again: refused, not appended
    into a transaction no marker will ever end (a hanging transaction)."""
    kafkalite.Admin(kafkalite_server.path).create_topic("late", 1)
    tid = "late-tx"
    client = Client(kafkalite_server.address)
    error, pid, epoch = client.init_producer_id(tid)
    assert error == NONE

    def add(producer: tuple[int, int]) -> None:
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=producer[0],
            v3_and_below_producer_epoch=producer[1],
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="late", partitions=[0])],
        )  # fmt: skip
        [topic] = client.call(request, 3, AddPartitionsToTxnResponse).results_by_topic_v3_and_below
        assert [r.partition_error_code for r in topic.results_by_partition] == [NONE]

    add((pid, epoch))
    for seq in range(3):  # the first is verified, the later ones go into its open transaction
        assert client.produce(tid, "late", 0, (pid, epoch), seq, [b"c%d" % seq], version=11) == NONE
    assert client.end_txn(tid, (pid, epoch), True, version=4) == (NONE, -1, -1)
    assert client.produce(tid, "late", 0, (pid, epoch), 3, [b"late"], version=11) == INVALID_TXN_STATE
    # A new transaction, fenced by a new producer instance (its abort marker bumps the epoch):
    # the new epoch's batch without AddPartitionsToTxn is no member of a transaction either.
    add((pid, epoch))
    assert client.produce(tid, "late", 0, (pid, epoch), 3, [b"aborted"], version=11) == NONE
    error, pid2, epoch2 = client.init_producer_id(tid)
    assert (error, pid2) == (NONE, pid) and epoch2 > epoch
    assert client.produce(tid, "late", 0, (pid, epoch2), 0, [b"stray"], version=11) == INVALID_TXN_STATE
    assert client.produce(tid, "late", 0, (pid, epoch), 4, [b"zombie"], version=11) == INVALID_PRODUCER_EPOCH
    client.close()
    [committed, (fenced_pid, fenced_epoch, fenced_commit)] = control_epochs(kafkalite_server.path, "late", 0)
    assert committed == (pid, epoch, True)
    assert (fenced_pid, fenced_commit) == (pid, False) and epoch < fenced_epoch <= epoch2
    with kafkalite.Log(os.path.join(kafkalite_server.path, "late-0"), readonly=True) as log:
        # 3 committed records and their marker, 1 aborted record and its marker: nothing else.
        assert log.end_offset == 6
    assert sorted(values(kafkalite_server.bootstrap_servers, "late", "read_committed", want=3)) == [
        b"c0",
        b"c1",
        b"c2",
    ]


@pytest.mark.parametrize("first", ["network", "embedded"])
def test_an_embedded_producer_and_a_tv2_network_producer_fence_each_other(kafkalite_server, first):
    """One coordinator over one `__transaction_state`: the later producer's init aborts the
    earlier one's transaction and fences it, whichever side each is on; the embedded coordinator
    reads the version-2 records the server wrote (and the server the embedded ones)."""
    from kafkalite.errors import ProducerFencedError

    kafkalite.Admin(kafkalite_server.path).create_topic("mix2", 1)
    tid = "mix2-tx"
    client = Client(kafkalite_server.address)

    def embedded() -> kafkalite.Producer:
        producer = kafkalite.Producer(kafkalite_server.path, transactional_id=tid)
        producer.init_transactions()
        return producer

    if first == "network":
        error, pid, epoch = client.init_producer_id(tid)
        assert client.produce(tid, "mix2", 0, (pid, epoch), 0, [b"network-1"]) == NONE
        assert client.end_txn(tid, (pid, epoch), True) == (NONE, pid, epoch + 1)  # a version-2 record
        assert client.produce(tid, "mix2", 0, (pid, epoch + 1), 0, [b"zombie"]) == NONE
        newer = embedded()  # reads the version-2 records, aborts the open transaction, fences
        assert client.end_txn(tid, (pid, epoch + 1), True)[0] == PRODUCER_FENCED
        assert client.produce(tid, "mix2", 0, (pid, epoch + 1), 1, [b"zombie-2"]) == INVALID_PRODUCER_EPOCH
        newer.begin_transaction()
        newer.send("mix2", b"embedded", partition=0)
        newer.commit_transaction()
        newer.close()
        expected = [b"network-1", b"embedded"]
    else:
        older = embedded()
        older.begin_transaction()
        older.send("mix2", b"zombie", partition=0)
        older.flush()
        error, pid, epoch = client.init_producer_id(tid)
        assert error == NONE
        assert client.produce(tid, "mix2", 0, (pid, epoch), 0, [b"network"]) == NONE
        assert client.end_txn(tid, (pid, epoch), True) == (NONE, pid, epoch + 1)
        with pytest.raises(ProducerFencedError):
            older.commit_transaction()
        with contextlib.suppress(kafkalite.errors.KafkaliteError):  # a fenced producer may say so again
            older.close()
        # A new embedded producer takes over from the version-2 state: the epoch moves on.
        newest = embedded()
        assert client.end_txn(tid, (pid, epoch + 1), False)[0] == PRODUCER_FENCED
        newest.close()
        assert describe(kafkalite_server.path, tid).producer_epoch == epoch + 2
        expected = [b"network"]
    client.close()
    assert (
        values(kafkalite_server.bootstrap_servers, "mix2", "read_committed", want=len(expected)) == expected
    )


@pytest.mark.parametrize(
    ("failpoint", "commit", "decided"),
    [
        # Killed before the decision is recorded: the transaction stays open; the next producer
        # of the id aborts it.
        ("txn.prepare.before_record", True, False),
        # Decided (Prepare* at the bumped epoch recorded): the restarted server completes it,
        # markers at the bumped epoch, and the producer's retry is answered the bumped epoch.
        ("txn.prepare.after_record", True, True),
        # Past the decision, EndTxn is answered first (`server/txn_ends.rs`), then the server
        # dies before, between or after the markers: the same recovery.
        ("txn.marker.before", True, True),
        ("txn.marker.before", False, True),
        ("txn.marker.after@1", True, True),
        ("txn.complete.before_record", True, True),
        ("txn.marker.after@1", False, True),
    ],
)
def test_server_killed_between_tv2_end_txn_steps_completes_as_kafkas_recovery(
    tmp_path, spawn, failpoint, commit, decided
):
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("crash2", 3)
    name, _, nth = failpoint.partition("@")
    env = {**os.environ, "KAFKALITE_FAILPOINTS": f"{name}=kill" + (f"@{nth}" if nth else "")}
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = serve_on(spawn.module, data, port, "--log-level", "WARNING", env=env)
    tid = "crash2-tx"
    client = Client(address)
    error, pid, epoch = client.init_producer_id(tid)
    assert error == NONE
    records = {p: [b"txn-%d-%d" % (p, i) for i in range(5)] for p in range(3)}
    for p, vs in records.items():
        assert client.produce(tid, "crash2", p, (pid, epoch), 0, vs) == NONE
    if name.startswith("txn.prepare."):
        with pytest.raises((AssertionError, OSError)):
            client.end_txn(tid, (pid, epoch), commit)  # the server dies on the way
    else:
        # Decided: answered before the markers are written, as Kafka's coordinator answers.
        assert client.end_txn(tid, (pid, epoch), commit) == (NONE, pid, epoch + 1)
    assert server.wait(60) == -signal.SIGKILL, "the fail point did not kill the server"
    client.close()
    server = serve_on(spawn.module, data, port, "--log-level", "WARNING")
    after = []
    try:
        client = Client(address)
        everything = sorted(v for vs in records.values() for v in vs)
        if decided:
            # The producer retries its EndTxn: answered as the completed end, at the bumped epoch.
            assert client.end_txn(tid, (pid, epoch), commit) == (NONE, pid, epoch + 1)
            for p in records:
                assert control_epochs(str(data), "crash2", p) == [(pid, epoch + 1, commit)]
            # ...and continues at it: its next transaction commits.
            assert client.produce(tid, "crash2", 0, (pid, epoch + 1), 0, [b"after"]) == NONE
            assert client.end_txn(tid, (pid, epoch + 1), True) == (NONE, pid, epoch + 2)
            after = [b"after"]
        else:
            # A new producer of the id: the open version-2 transaction is aborted at the fenced
            # epoch (+ 1, as a Kafka 4.1 broker), the new producer at + 2; the old is fenced.
            error, new_pid, new_epoch = client.init_producer_id(tid)
            assert (error, new_pid, new_epoch) == (NONE, pid, epoch + 2)
            assert client.end_txn(tid, (pid, epoch), commit)[0] == PRODUCER_FENCED
            for p in records:
                assert control_epochs(str(data), "crash2", p) == [(pid, epoch + 1, False)]
        visible = sorted((everything if decided and commit else []) + after)
        bootstrap = address
        assert sorted(values(bootstrap, "crash2", "read_committed", want=len(visible))) == visible
        total = 15 + len(after)
        assert len(values(bootstrap, "crash2", "read_uncommitted", want=total)) == total, (
            "a record lost or doubled"
        )
        client.close()
    finally:
        server.kill()
        server.wait(30)
