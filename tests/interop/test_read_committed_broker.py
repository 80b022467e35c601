"""read_committed against a real Apache Kafka broker (marker ``broker``): two transactional
producers interleave committed and aborted transactions with plain records between, a third
leaves one open; kafka-python consumers read what the broker serves at both isolation levels;
then, with the broker stopped, kafkalite reads the broker's log directory: identical records,
the same end offsets (LSO under read_committed), and the aborted transactions kafkalite derives
from the markers alone equal the broker's `.txnindex` entries."""

from __future__ import annotations

import glob
import os
import shutil
import struct
import time
from pathlib import Path

import pytest
from helpers import kafka_python_read_to_end
from kafka_broker import KafkaBroker
from kafkalite import Consumer, Log, TopicPartition

pytestmark = pytest.mark.broker

TOPIC = "tx"


def _producers(bootstrap: str):
    from kafka import KafkaProducer

    def transactional(tid: str) -> KafkaProducer:
        p = KafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=tid, enable_idempotence=True, linger_ms=0
        )
        p.init_transactions()
        return p

    return (
        transactional("txn-a"),
        transactional("txn-b"),
        transactional("txn-c"),
        KafkaProducer(bootstrap_servers=bootstrap),
    )


def _write(bootstrap: str) -> None:
    """The script of tests/txn_partition.INTERLEAVED, through a broker, plus an open transaction.
    Each send is flushed, so batches land in the script's order; pauses let segment.ms roll
    segments (sealed segments with `.txnindex` files)."""
    a, b, c, plain = _producers(bootstrap)
    n = 0

    def send(p, count: int) -> None:
        nonlocal n
        for _ in range(count):
            p.send(TOPIC, key=b"k%d" % n, value=b"v%d" % n)
            n += 1
        p.flush()

    a.begin_transaction()
    b.begin_transaction()
    send(plain, 2)
    send(a, 2)
    send(b, 3)
    send(plain, 1)
    send(a, 1)
    a.commit_transaction()
    send(b, 2)
    b.abort_transaction()
    time.sleep(1.2)  # segment.ms: the next append rolls
    a.begin_transaction()
    b.begin_transaction()
    send(a, 2)
    send(b, 1)
    send(plain, 1)
    a.abort_transaction()
    a.begin_transaction()
    send(a, 2)
    b.commit_transaction()
    time.sleep(1.2)
    send(plain, 2)
    b.begin_transaction()
    send(b, 2)
    b.abort_transaction()
    send(a, 1)
    a.commit_transaction()
    send(plain, 3)
    c.begin_transaction()  # left open: read_committed stops at its first offset
    send(c, 2)
    send(plain, 2)
    a.begin_transaction()
    send(a, 1)
    a.commit_transaction()
    for p in (a, b, plain):
        p.close()
    c.close(timeout=0)  # the transaction stays open (no marker) until the broker stops


def _kafka_python_read(bootstrap: str, level: str) -> tuple[list[tuple[int, bytes, bytes]], int]:
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=level,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    tp = KTP(TOPIC, 0)
    consumer.assign([tp])
    got = [(m.offset, m.key, m.value) for m in kafka_python_read_to_end(consumer)]
    end = consumer.end_offsets([tp])[tp]
    consumer.close()
    return got, end


def _kafkalite_read(log_dir: str, level: str) -> tuple[list[tuple[int, bytes, bytes]], int]:
    tp = TopicPartition(TOPIC, 0)
    with Consumer(log_dir, TOPIC, auto_offset_reset="earliest", isolation_level=level) as consumer:
        got = []
        while batch := consumer.poll(timeout_ms=0, max_records=5):
            got += [(r.offset, r.key, r.value) for rs in batch.values() for r in rs]
        return got, consumer.end_offsets([tp])[tp]


def _txn_index_entries(partition: str) -> list[tuple[int, int, int, int]]:
    out = []
    for f in sorted(glob.glob(os.path.join(partition, "*.txnindex"))):
        data = Path(f).read_bytes()
        out += [struct.unpack_from(">hqqqq", data, i)[1:] for i in range(0, len(data), 34)]
    return out


def test_kafkalite_reads_transactions_as_the_broker_serves_them(tmp_path):
    logs = tmp_path / "logs"
    broker = KafkaBroker(logs, tmp_path / "work", **{"log.roll.ms": "1000"})
    served = {}
    with broker:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        admin.create_topics([NewTopic(TOPIC, 1, 1, topic_configs={"segment.ms": "1000"})])
        admin.close()
        _write(broker.bootstrap_servers)
        for level in ("read_uncommitted", "read_committed"):
            served[level] = _kafka_python_read(broker.bootstrap_servers, level)
    committed, uncommitted = served["read_committed"][0], served["read_uncommitted"][0]
    assert len(committed) < len(uncommitted)  # aborted records and the open transaction are hidden
    assert served["read_committed"][1] < served["read_uncommitted"][1]  # the LSO is below the end
    partition = str(logs / f"{TOPIC}-0")
    assert len(glob.glob(os.path.join(partition, "*.log"))) >= 3
    assert _txn_index_entries(partition)  # the broker indexed its aborted transactions
    for level in ("read_uncommitted", "read_committed"):
        assert _kafkalite_read(str(logs), level) == served[level], level
    # From the markers alone (no .txnindex), kafkalite derives the broker's index entries.
    bare = tmp_path / "bare" / f"{TOPIC}-0"
    shutil.copytree(partition, bare, ignore=shutil.ignore_patterns("*.txnindex"))
    with Log(str(bare), readonly=True) as log:
        assert [tuple(t) for t in log.aborted_transactions()] == _txn_index_entries(partition)
        assert [(r.offset, r.key, r.value) for r in log.committed_records()] == committed
