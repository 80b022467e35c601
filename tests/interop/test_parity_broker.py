"""Issue 10 points 1 and 4 against a real Apache Kafka broker (marker ``broker``): the log start
offset moves both ways between a broker's log directory and kafkalite, and what kafkalite's
cleaner leaves passes Kafka's DumpLogSegments --index-sanity-check and is served unchanged."""

from __future__ import annotations

import glob
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from helpers import kafka_python_read_to_end
from kafka_broker import KafkaBroker, dump_log_segments, require_jars
from kafkalite import Admin, Consumer, Log, Producer

pytestmark = pytest.mark.broker


def _wait_for_dir(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not path.is_dir() and time.monotonic() < deadline:
        time.sleep(0.1)


def _consume_all(bootstrap: str, topic: str) -> list[tuple]:
    """Every record the broker serves from the one partition of ``topic``."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    got = [(m.offset, m.timestamp, m.key, m.value) for m in kafka_python_read_to_end(consumer)]
    consumer.close()
    return got


def test_kafkalite_starts_at_a_brokers_deleterecords_offset(tmp_path):
    from kafka import KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient

    broker = KafkaBroker(tmp_path / "logs", tmp_path / "work")
    with broker:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        for i in range(1000):
            producer.send("deleted", b"v%d" % i, key=b"k%d" % i)
        producer.flush()
        producer.close()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        admin.delete_records({TopicPartition("deleted", 0): 300})
        admin.close()
    assert (
        len(glob.glob(str(tmp_path / "logs" / "deleted-0" / "*.log"))) == 1
    )  # the segment still starts at 0
    with Consumer(str(tmp_path / "logs"), "deleted", auto_offset_reset="earliest") as consumer:
        got = []
        while batch := consumer.poll(timeout_ms=0):
            got += [r.offset for rs in batch.values() for r in rs]
        assert consumer.beginning_offsets(list(consumer.assignment()))
    assert got == list(range(300, 1000))


def _compacted_kafkalite_dir(data: str, records: int, keys: int, segment_bytes: int) -> dict[int, tuple]:
    """A compacted topic after delete_records_before and compaction; returns what must survive
    (offset -> (timestamp, key, value))."""
    Admin(data).create_topic(
        "served", 1, config={"cleanup.policy": "compact", "segment.bytes": segment_bytes}
    )
    latest: dict[bytes, int] = {}
    written: dict[int, tuple] = {}
    with Producer(data, linger_ms=0) as producer:
        for i in range(records):
            key = b"key-%d" % (i % keys)
            ts = 1_700_000_000_000 + i
            value = b"value-%d-" % i + b"z" * (i % 40)
            producer.send("served", value, key=key, timestamp_ms=ts)
            written[i] = (ts, key, value)
            latest[key] = i
    with Log(os.path.join(data, "served-0"), segment_bytes=segment_bytes, compact=True) as log:
        log.delete_records_before(records // 10)
    Admin(data).compact_topic("served")
    start = records // 10
    return {o: written[o] for o in sorted(set(latest.values())) if o >= start}


def test_a_broker_serves_kafkalite_after_delete_records_and_compaction(tmp_path):
    data = str(tmp_path / "data")
    latest = _compacted_kafkalite_dir(data, 3000, 200, 16 * 1024)
    with Log(os.path.join(data, "served-0"), readonly=True) as log:
        survivors = [(r.offset, r.timestamp, r.key, r.value) for r in log.records()]
    assert survivors[0][0] >= 300 and len(survivors) < 1500, "compaction and DeleteRecords removed records"
    assert set(latest) <= {s[0] for s in survivors}
    with open(os.path.join(data, "log-start-offset-checkpoint")) as f:
        kafkalite_start = f.read().splitlines()[2:]
    assert kafkalite_start == ["served 0 300"]
    logs = tmp_path / "logs"
    broker = KafkaBroker(logs, tmp_path / "work")
    with broker:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        admin.create_topics([NewTopic("served", 1, 1, topic_configs={"cleanup.policy": "compact"})])
        admin.close()
        _wait_for_dir(logs / "served-0")
    part = logs / "served-0"
    for f in glob.glob(str(part / "0*")):
        os.remove(f)
    for f in glob.glob(os.path.join(data, "served-0", "0*")):
        shutil.copy(f, part)
    # kafkalite's checkpoint lines go into the broker's files, as an operator moving them would.
    for name in ("log-start-offset-checkpoint", "cleaner-offset-checkpoint"):
        ours = Path(data, name).read_text().splitlines()[2:]
        theirs = [
            line for line in (logs / name).read_text().splitlines()[2:] if not line.startswith("served ")
        ]
        lines = theirs + ours
        (logs / name).write_text(f"0\n{len(lines)}\n" + "".join(line + "\n" for line in lines))
    with broker:
        got = _consume_all(broker.bootstrap_servers, "served")
    assert got == survivors


def test_dump_log_segments_accepts_a_compacted_topic_and_files_shrink(tmp_path):
    require_jars()
    data = str(tmp_path / "data")
    part = os.path.join(data, "kv-0")
    Admin(data).create_topic("kv", 1, config={"cleanup.policy": "compact", "segment.bytes": 16 * 1024})
    with Producer(data) as producer:
        for i in range(20_000):
            producer.send("kv", b"value-%d" % i, key=b"key-%d" % (i % 1000))
    before = len(os.listdir(part))
    Admin(data).compact_topic("kv")
    after = len(os.listdir(part))
    assert after < before / 2, (before, after)
    files = sorted(glob.glob(os.path.join(part, "0*")))
    out = dump_log_segments(*files)
    bad = [
        line
        for line in out.splitlines()
        if re.search("Corrupt|corrupt|mismatch|Exception|failed|isvalid: false", line)
    ]
    assert not bad, bad[:20]
    for f in files:
        if not f.endswith(".log"):  # DumpLogSegments checks non-empty indexes only
            assert f"{f} passed sanity check." in out or f"{f} is empty." in out, out[-3000:]
    assert f"{files[2]} passed sanity check." in out  # the first .timeindex
    with Log(part, readonly=True) as log:
        latest = {r.key: r.value for r in log.records()}
    assert latest == {b"key-%d" % k: b"value-%d" % (19_000 + k) for k in range(1000)}
