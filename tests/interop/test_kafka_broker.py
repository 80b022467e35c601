"""The format promise, checked against a real Apache Kafka broker (marker ``broker``): what a
broker wrote, kafkalite reads record for record; what kafkalite wrote, Kafka's DumpLogSegments
accepts with its index sanity check and a broker serves to kafka-python unchanged."""

from __future__ import annotations

import glob
import os
import shutil
import time

import pytest
from kafka_broker import KafkaBroker, commit_as_group, dump_log_segments, require_jars
from kafkalite import Admin, Consumer, Log, Record

pytestmark = pytest.mark.broker

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _kafka_python_produce(bootstrap: str, topic: str, codec: str, n: int) -> list[tuple]:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec, linger_ms=5
    )
    pending = []
    for i in range(n):
        key = None if i % 7 == 0 else b"key-%d" % (i % 13)
        value = (
            None if key is not None and i % 11 == 5 else b"value-%d-" % i + b"x" * (i % 50)
        )  # tombstones need keys
        headers = [("h", b"%d" % i)] if i % 3 == 0 else []
        future = producer.send(
            topic, value=value, key=key, headers=headers, timestamp_ms=1_700_000_000_000 + i
        )
        pending.append((future, 1_700_000_000_000 + i, key, value, headers))
    producer.flush()
    sent = [(future.get(30).offset, *rest) for future, *rest in pending]
    producer.close()
    return sent


def _kafka_python_consume(bootstrap: str, topic: str, expected: int) -> list[tuple]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10_000
    )
    got = []
    for m in consumer:
        got.append((m.offset, m.timestamp, m.key, m.value, list(m.headers)))
        if len(got) >= expected:
            break
    consumer.close()
    return got


def test_kafkalite_reads_what_a_broker_wrote(tmp_path):
    broker = KafkaBroker(tmp_path / "logs", tmp_path / "work")
    sent = {}
    with broker:
        for codec in CODECS:
            sent[codec] = _kafka_python_produce(broker.bootstrap_servers, f"c-{codec}", codec, 300)
    for codec in CODECS:
        with Consumer(str(tmp_path / "logs"), f"c-{codec}", auto_offset_reset="earliest") as consumer:
            got = []
            while True:
                batch = consumer.poll(timeout_ms=0)
                if not batch:
                    break
                got += [
                    (r.offset, r.timestamp, r.key, r.value, list(r.headers))
                    for rs in batch.values()
                    for r in rs
                ]
        assert sorted(got) == sorted(sent[codec]), codec


def _write_kafkalite_partition(path: str, n: int) -> list[tuple]:
    written = []
    with Log(path, segment_bytes=4 * 1024, compression="zstd", index_interval_bytes=256) as log:
        for start in range(0, n, 25):
            records = []
            for i in range(start, min(start + 25, n)):
                key = None if i % 7 == 0 else b"key-%d" % (i % 13)
                value = b"value-%d-" % i + b"y" * (i % 60)
                headers = [("h", b"%d" % i)] if i % 3 == 0 else []
                records.append(Record(value, key=key, headers=headers, timestamp=1_700_000_000_000 + i))
                written.append((i, 1_700_000_000_000 + i, key, value, headers))
            log.append(records)
    return written


def test_dump_log_segments_accepts_kafkalite_segments(tmp_path):
    require_jars()
    part = str(tmp_path / "events-0")
    _write_kafkalite_partition(part, 2_000)
    logs = sorted(glob.glob(os.path.join(part, "*.log")))
    assert len(logs) > 3, "the test wants several segments"
    files = (
        logs
        + sorted(glob.glob(os.path.join(part, "*.index")))
        + sorted(glob.glob(os.path.join(part, "*.timeindex")))
    )
    out = dump_log_segments(*files)
    for bad in ("Corrupt", "corrupt", "mismatch", "Exception", "failed", "isvalid: false"):
        assert bad not in out, out[-3000:]
    for f in files:
        if not f.endswith(".log"):
            assert f"{f} passed sanity check." in out, out[-3000:]
    assert out.count("| offset: ") == 2_000, "DumpLogSegments must see every record"


def test_a_broker_serves_kafkalite_segments(tmp_path):
    logs = tmp_path / "logs"
    broker = KafkaBroker(logs, tmp_path / "work")
    with broker:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        admin.create_topics([NewTopic("served", 1, 1)])
        admin.close()
        deadline = time.monotonic() + 30
        while not (logs / "served-0").is_dir() and time.monotonic() < deadline:
            time.sleep(0.1)
    # Replace the broker's (empty) segments with kafkalite's; keep its partition metadata.
    part = logs / "served-0"
    for f in glob.glob(str(part / "0*")):
        os.remove(f)
    scratch = str(tmp_path / "scratch" / "served-0")
    written = _write_kafkalite_partition(scratch, 1_000)
    for f in glob.glob(os.path.join(scratch, "0*")):
        shutil.copy(f, part)
    with broker:
        got = _kafka_python_consume(broker.bootstrap_servers, "served", len(written))
    assert got == written


def test_admin_topics_in_a_broker_dir_are_read_only(tmp_path):
    """A broker's log directory has no kafkalite metadata: kafkalite reads it but refuses to
    change it (it would otherwise disagree with the broker's own metadata log)."""
    broker = KafkaBroker(tmp_path / "logs", tmp_path / "work")
    with broker:
        _kafka_python_produce(broker.bootstrap_servers, "ro", "none", 10)
    admin = Admin(str(tmp_path / "logs"))
    assert "ro" in admin.list_topics()
    with pytest.raises(Exception) as info:
        admin.create_topic("new-one", 1)
    assert "broker" in str(info.value)


def test_committed_offsets_of_a_kafka_4_broker(tmp_path):
    """Kafka 4.x's group coordinator writes OffsetCommitValue v4 (flexible) beside group
    metadata records; kafkalite's group tools read the offsets a broker's consumers committed."""
    broker = KafkaBroker(tmp_path / "logs", tmp_path / "work")
    with broker:
        _kafka_python_produce(broker.bootstrap_servers, "orders", "none", 50)
        commit_as_group(broker.bootstrap_servers, "orders", "billing", read=30, commits=[(30, "note")])
    admin = Admin(str(tmp_path / "logs"))
    described = admin.describe_group("billing")
    offsets = {(p.topic, p.partition): (p.committed, p.lag) for p in described.partitions}
    assert offsets == {("orders", 0): (30, 20)}
    assert "billing" in admin.list_groups()
