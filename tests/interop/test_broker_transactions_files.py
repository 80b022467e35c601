"""The files a transaction leaves, written by Apache Kafka 4.1 and by `kafkalite serve`, compared
(issue 22; marker ``broker``). The same confluent-kafka transactional workload (commit one
transaction, abort one, commit one) runs against a broker and against `kafkalite serve`; then,
with both stopped, the partition directories and `__transaction_state` are decoded with
kafka-python's record decoder and compared structurally: each batch's attributes
(transactional/control flags), producer id and epoch consistency, base sequences, the
COMMIT/ABORT control records' key and value bytes, the `.txnindex` entries, and the
`__transaction_state` records' key bytes, value schema versions and state sequence. Producer
ids differ between the two (each side allocates its own), so they are compared as "the same id
throughout". Last, kafkalite reads the broker's directory with read_committed and gets what the
broker served."""

from __future__ import annotations

import glob
import os
import struct
import time
from pathlib import Path

import pytest
from kafka_broker import KafkaBroker
from kafkalite import Consumer, Log, Server, _native
from test_read_committed_broker import _txn_index_entries

pytestmark = pytest.mark.broker

TOPIC = "files"
TXN_ID = "files-txn"
#: (values, commit?) per transaction, in order
WORKLOAD = [([b"c0", b"c1", b"c2"], True), ([b"a0", b"a1"], False), ([b"c3"], True)]


def _run_workload(bootstrap: str) -> list[bytes]:
    """The transactions of WORKLOAD through confluent-kafka (one flush per transaction, so each is
    one batch); returns what a read_committed consumer then reads."""
    import confluent_kafka as ck
    import confluent_kafka.admin

    admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([ck.admin.NewTopic(TOPIC, 1, 1)]).values():
        f.result(30)
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 50})
    p.init_transactions(60)  # a new broker answers NOT_COORDINATOR until __transaction_state is loaded
    for values, commit in WORKLOAD:
        p.begin_transaction()
        for i, v in enumerate(values):
            p.produce(TOPIC, v, key=b"k%d" % i, partition=0)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    p.flush(30)
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "files-check",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.assign([ck.TopicPartition(TOPIC, 0, ck.OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for m in c.consume(100, timeout=0.5):
            assert m.error() is None, m.error()
            got.append(m.value())
        if len(got) >= 4:
            for m in c.consume(100, timeout=1):  # nothing more than the committed four
                got.append(m.value())
            break
    c.close()
    return got


def _batches(partition: Path) -> list[dict]:
    """Every batch of the partition's segments, as kafka-python decodes it (CRC checked)."""
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.memory_records import MemoryRecords

    out = []
    for path in sorted(partition.glob("*.log")):
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            b = records.next_batch()
            assert isinstance(b, DefaultRecordBatch) and b.validate_crc(), path
            rs = list(b)
            out.append(
                {
                    "base_offset": b.base_offset,
                    "count": len(rs),
                    "attributes": b.attributes,
                    "transactional": b.is_transactional,
                    "control": b.is_control_batch,
                    "producer_id": b.producer_id,
                    "producer_epoch": b.producer_epoch,
                    "base_sequence": b.base_sequence,
                    "keys": [r.key for r in rs],
                    "values": [r.value for r in rs],
                }
            )
    return out


def _state_records(logs: Path) -> list[tuple[int, bytes, bytes | None]]:
    """(partition, key, value) of every `__transaction_state` record of TXN_ID."""
    out = []
    for folder in sorted(glob.glob(str(logs / "__transaction_state-*"))):
        n = int(folder.rsplit("-", 1)[1])
        with Log(folder, readonly=True) as log:
            for r in log.records():
                if _native.transaction_log_decode(r.key, r.value)[0] == TXN_ID:
                    out.append((n, r.key, r.value))
    return out


def _side(logs: Path) -> dict:
    return {
        "batches": _batches(logs / f"{TOPIC}-0"),
        "txnindex": _txn_index_entries(str(logs / f"{TOPIC}-0")),
        "state": _state_records(logs),
    }


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("files")
    sides = {}
    broker_logs = tmp / "broker-logs"
    with KafkaBroker(broker_logs, tmp / "broker-work") as broker:
        served = _run_workload(broker.bootstrap_servers)
    sides["broker"] = {**_side(broker_logs), "served": served, "logs": broker_logs}
    lite = tmp / "kafkalite-data"
    with Server(lite) as server:
        served = _run_workload(server.bootstrap_servers)
    sides["kafkalite"] = {**_side(lite), "served": served, "logs": lite}
    return sides


def _normalized(side: dict) -> dict:
    """The side's files with producer ids replaced by their order of appearance (each side
    allocates its own ids) and the state records' timestamps left out (wall clocks), kept
    instead as how each record's start time relates to its transaction's."""
    ids: dict[int, int] = {}

    def pid(p: int) -> int:
        return p if p < 0 else ids.setdefault(p, len(ids))

    batches = [{**b, "producer_id": pid(b["producer_id"])} for b in side["batches"]]
    txnindex = [(pid(p), first, last, lso) for p, first, last, lso in side["txnindex"]]
    state, start = [], None
    for partition, key, value in side["state"]:
        _, m = _native.transaction_log_decode(key, value)
        assert m is not None
        if m["state"] == "Ongoing" and m["start_ms"] != start:
            start = m["start_ms"]
        fields = {k: v for k, v in m.items() if k not in ("last_update_ms", "start_ms")}
        fields["producer_id"] = pid(fields["producer_id"])
        started = (
            "none" if m["start_ms"] == -1 else "this transaction's" if m["start_ms"] == start else "other"
        )
        state.append((partition, key, fields, started))
    return {"batches": batches, "txnindex": txnindex, "state": state}


@pytest.fixture(scope="module")
def normalized(written) -> dict:
    return {name: _normalized(side) for name, side in written.items()}


def test_both_serve_the_committed_records(written):
    for side in written.values():
        assert side["served"] == [b"c0", b"c1", b"c2", b"c3"]


def test_partition_batches_are_the_brokers(normalized):
    """Data batches transactional (attributes 0x10) with the producer's id, epoch and running
    base sequence; one control batch per transaction (0x30, base sequence -1) whose record key is
    (version 0, COMMIT 1 / ABORT 0) and value (version 0, coordinator epoch 0): byte for byte."""
    lite, broker = normalized["kafkalite"]["batches"], normalized["broker"]["batches"]
    assert lite == broker
    markers = [b for b in broker if b["control"]]
    assert [b["keys"] for b in markers] == [[struct.pack(">hh", 0, int(c))] for _, c in WORKLOAD]
    assert {b["attributes"] for b in markers} == {0x30} and {b["producer_id"] for b in broker} == {0}


def test_txnindex_entries_are_the_brokers(normalized):
    """One entry for the aborted transaction: (producer, first offset, marker offset, LSO)."""
    assert normalized["kafkalite"]["txnindex"] == normalized["broker"]["txnindex"] == [(0, 4, 6, 7)]


def test_transaction_state_records_are_the_brokers(written, normalized):
    """The same `__transaction_state` partition (abs(javaHash) % 50), TransactionLogKey bytes,
    and state sequence with the same fields (producer id and epoch, timeout, partitions; start
    time that of the transaction). Value schema: Kafka 4.1 on a cluster at transaction version 2
    writes TransactionLogValue v1 (flexible), kafkalite v0 (the newest non-flexible, which Kafka
    4.1 reads: test_transactions_broker.py); both decode here."""
    lite, broker = normalized["kafkalite"]["state"], normalized["broker"]["state"]
    states = [fields["state"] for _, _, fields, _ in broker]
    assert states == ["Empty"] + ["Ongoing", "PrepareCommit", "CompleteCommit"] + [
        "Ongoing",
        "PrepareAbort",
        "CompleteAbort",
    ] + ["Ongoing", "PrepareCommit", "CompleteCommit"]
    assert lite == broker
    for name, side in written.items():
        versions = {struct.unpack_from(">h", value)[0] for _, _, value in side["state"] if value}
        assert versions <= {0, 1}, (name, versions)
        assert {struct.unpack_from(">h", key)[0] for _, key, _ in side["state"]} == {0}, name


def test_kafkalite_reads_the_brokers_directory_as_the_broker_serves(written):
    logs = str(written["broker"]["logs"])
    with Consumer(logs, TOPIC, auto_offset_reset="earliest", isolation_level="read_committed") as c:
        got = []
        while batch := c.poll(timeout_ms=0, max_records=100):
            got += [r.value for rs in batch.values() for r in rs]
    assert got == written["broker"]["served"]
    with Log(os.path.join(logs, f"{TOPIC}-0"), readonly=True) as log:
        assert [r.value for r in log.committed_records()] == got
