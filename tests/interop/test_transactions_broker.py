"""Transactions' files read across kafkalite and Apache Kafka 4.1 (marker ``broker``): Kafka's
DumpLogSegments decodes what kafkalite's coordinator and producer wrote (``__transaction_state``
records with ``--transaction-log-decoder``, COMMIT/ABORT markers, transactional batches, the
producer snapshot's open transaction), and kafkalite decodes a broker's ``__transaction_state``
after kafka-python's transactional producers committed and aborted through it."""

from __future__ import annotations

import glob
import os

import pytest
from kafka_broker import KafkaBroker, dump_log_segments, run_kafka_class
from kafkalite import Admin, Log, Producer, _native

pytestmark = pytest.mark.broker


def test_kafka_decodes_the_transaction_files_kafkalite_writes(tmp_path):
    data = str(tmp_path / "data")
    Admin(data).create_topic("out", 1)
    p = Producer(data, transactional_id="lite-txn")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"kept", key=b"k")
    p.commit_transaction()
    p.begin_transaction()
    p.send("out", b"dropped", key=b"k")
    p.abort_transaction()
    p.begin_transaction()
    p.send("out", b"open", key=b"k")
    p.flush()
    p.close()  # the open transaction stays open: the snapshot at close records it
    state = glob.glob(os.path.join(data, "__transaction_state-*", "*.log"))
    state = [f for f in state if os.path.getsize(f) > 0]
    assert len(state) == 1
    done = run_kafka_class("kafka.tools.DumpLogSegments", "--transaction-log-decoder", "--files", state[0])
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "lite-txn" in out, out[-3000:]
    # Kafka's decoder prints each record as JSON: every state of the two transactions, by its id
    # (Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3, CompleteCommit 4, CompleteAbort 5).
    for status in range(6):
        assert f'"transactionStatus":{status}' in out, (status, out[-3000:])
    assert '"transactionPartitions":[{"topic":"out","partitionIds":[0]}]' in out
    assert "Exception" not in out, out[-3000:]
    segment = os.path.join(data, "out-0", "00000000000000000000.log")
    dump = dump_log_segments(segment)
    assert "endTxnMarker: COMMIT" in dump and "endTxnMarker: ABORT" in dump, dump[-3000:]
    assert "isTransactional: true" in dump, dump[-3000:]
    snapshots = glob.glob(os.path.join(data, "out-0", "*.snapshot"))
    assert snapshots, "a clean close snapshots the producer state"
    snap = dump_log_segments(snapshots[0])
    assert "currentTxnFirstOffset: OptionalLong[4]" in snap, snap  # the open transaction, as Kafka reads it


def test_kafkalite_decodes_a_brokers_transaction_log(tmp_path):
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    logs = tmp_path / "logs"
    with KafkaBroker(logs, tmp_path / "work") as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        admin.create_topics([NewTopic("tx", 1, 1)])
        admin.close()
        for tid, commit in (("broker-commit", True), ("broker-abort", False)):
            p = KafkaProducer(
                bootstrap_servers=broker.bootstrap_servers, transactional_id=tid, enable_idempotence=True
            )
            p.init_transactions()
            p.begin_transaction()
            p.send("tx", b"v")
            p.flush()
            p.commit_transaction() if commit else p.abort_transaction()
            p.close()
    latest: dict[str, dict] = {}
    for folder in sorted(glob.glob(str(logs / "__transaction_state-*"))):
        with Log(folder, readonly=True) as log:
            for r in log.records():
                tid, metadata = _native.transaction_log_decode(r.key, r.value)
                if metadata is not None:
                    latest[tid] = metadata
    assert latest["broker-commit"]["state"] == "CompleteCommit", latest
    assert latest["broker-abort"]["state"] == "CompleteAbort", latest
    assert (
        latest["broker-commit"]["producer_id"] >= 0 and latest["broker-commit"]["transaction_timeout_ms"] > 0
    )
