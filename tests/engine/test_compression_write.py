"""Writing every codec Kafka has (issue 23 item 5): ``compression_type`` gzip, snappy, lz4 and
zstd from ``Producer``, ``Log``, ``kafkalite produce --compression-type`` and the Spark sink's
``kafka.compression.type``, each batch decoded by kafka-python's own decoder (its gzip, xerial
snappy and LZ4-frame readers) and, under the ``broker`` marker, by Kafka's Java codecs
(DumpLogSegments) and a broker serving the segments. A name Kafka does not have is refused up
front with ``InvalidConfigError`` listing the valid ones."""

from __future__ import annotations

import glob
import os
import shutil
import time

import kafkalite
import pytest
from conftest import kafka_python_records
from helpers import run_cli
from kafkalite import Admin, Log, Producer, Record

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
T0 = 1_700_000_000_000


def _stored_codecs(partition_dir: str) -> set[int]:
    """The codec ids (attributes bits 0-2) of every record batch in the partition's segments.
    Control batches (attributes bit 5: the COMMIT markers of the Spark sink's transactions) are
    never compressed, as Kafka writes them, so they are left out."""
    codecs = set()
    for path in glob.glob(os.path.join(partition_dir, "*.log")):
        data = open(path, "rb").read()
        pos = 0
        while pos + 12 <= len(data):
            length = int.from_bytes(data[pos + 8 : pos + 12], "big")
            attributes = int.from_bytes(data[pos + 21 : pos + 23], "big")
            if not attributes & 0x20:
                codecs.add(attributes & 7)
            pos += 12 + length
    return codecs


def _records(n: int, start: int = 0) -> list[tuple[int, int, bytes | None, bytes, list]]:
    """(offset, timestamp, key, value, headers): compressible, with null keys and headers, and
    large enough that one batch spans several lz4 blocks (64 KiB) and xerial chunks (32 KiB)."""
    out = []
    for i in range(start, start + n):
        key = None if i % 7 == 0 else b"key-%d" % (i % 13)
        value = b"value-%d-" % i + bytes(range(256)) * (1 + i % 5)
        headers = [("h", b"%d" % i)] if i % 3 == 0 else []
        out.append((i, T0 + i, key, value, headers))
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_log_writes_every_codec_that_kafka_python_decodes(tmp_path, codec):
    part = str(tmp_path / "t-0")
    want = _records(600)
    with Log(part, compression=codec) as log:
        for chunk in (want[:1], want[1:600]):  # one tiny batch, then one of ~500 KiB
            log.append([Record(v, key=k, headers=h, timestamp=ts) for _, ts, k, v, h in chunk])
    assert _stored_codecs(part) == {CODECS.index(codec)}
    assert kafka_python_records(part) == want
    with Log(part, readonly=True) as log:  # and the engine reads its own writing back
        assert [r.value for r in log.records()] == [w[3] for w in want]


@pytest.mark.parametrize("codec", CODECS)
def test_producer_writes_every_codec(tmp_path, codec):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", partitions=1)
    want = _records(300)
    with Producer(data_dir, compression_type=codec, linger_ms=5) as producer:
        futures = [
            producer.send("t", v, key=k, headers=h, timestamp_ms=ts, partition=0) for _, ts, k, v, h in want
        ]
        assert [f.get(10).offset for f in futures] == list(range(300))
        producer.send_batch("t", [b"bulk-%d" % i * 100 for i in range(1000)], partition=0)
    assert _stored_codecs(os.path.join(data_dir, "t-0")) == {CODECS.index(codec)}
    got = kafka_python_records(os.path.join(data_dir, "t-0"))
    assert [(o, ts, k, v, h) for o, ts, k, v, h in got[:300]] == want
    assert [v for *_, v, _h in got[300:]] == [b"bulk-%d" % i * 100 for i in range(1000)]


@pytest.mark.parametrize("codec", CODECS)
def test_cli_produce_compression_type(tmp_path, codec):
    data_dir = str(tmp_path / "data")
    lines = [b"k%d:line %d %s" % (i % 5, i, b"z" * (i % 90)) for i in range(2000)]
    source = tmp_path / "in.txt"
    source.write_bytes(b"\n".join(lines) + b"\n")
    done = run_cli(
        "--data-dir", data_dir, "produce", "t", "--file", str(source),
        "--key-separator", ":", "--compression-type", codec,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _stored_codecs(os.path.join(data_dir, "t-0")) == {CODECS.index(codec)}
    got = kafka_python_records(os.path.join(data_dir, "t-0"))
    assert [(k, v) for _, _, k, v, _ in got] == [tuple(line.split(b":", 1)) for line in lines]


@pytest.mark.parametrize("codec", CODECS)
def test_topic_compression_type_forces_a_codec(tmp_path, codec):
    """A topic's compression.type wins over the producer's (Kafka's targetCompression)."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", config={"compression.type": codec})
    with Producer(data_dir, compression_type="zstd" if codec != "zstd" else "gzip") as producer:
        producer.send("t", b"forced " * 100, partition=0).get(10)
    assert _stored_codecs(os.path.join(data_dir, "t-0")) == {CODECS.index(codec)}
    assert [v for *_, v, _h in kafka_python_records(os.path.join(data_dir, "t-0"))] == [b"forced " * 100]


@pytest.mark.parametrize("codec", CODECS)
def test_spark_sink_kafka_compression_type(tmp_path, codec):
    pa = pytest.importorskip("pyarrow")
    from kafkalite.spark import sink

    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    values = [b"spark row %d " % i * 20 for i in range(50)]
    table = pa.table({"value": values})
    sink.publish(data_dir, [table], "t", sink.sink_compression({"kafka.compression.type": codec}))
    assert _stored_codecs(os.path.join(data_dir, "t-0")) == {CODECS.index(codec)}
    assert [v for *_, v, _h in kafka_python_records(os.path.join(data_dir, "t-0"))] == values


def test_unknown_codecs_are_refused_up_front_naming_the_valid_ones(tmp_path):
    data_dir = str(tmp_path / "data")
    valid = "'none', 'gzip', 'snappy', 'lz4', 'zstd'"
    with pytest.raises(
        kafkalite.InvalidConfigError, match=f"compression_type must be None or one of {valid}"
    ):
        Producer(data_dir, compression_type="brotli")
    with pytest.raises(kafkalite.InvalidTypeError, match="compression_type"):
        Producer(data_dir, compression_type=4)
    with pytest.raises(kafkalite.InvalidConfigError, match=f"compression must be one of {valid}, not 'lzma'"):
        Log(str(tmp_path / "t-0"), compression="lzma")
    assert not os.path.exists(tmp_path / "t-0"), "refused before anything was created"
    from kafkalite.spark import sink
    from kafkalite.spark.options import SparkOptionError

    with pytest.raises(SparkOptionError, match=f"kafka.compression.type' must be None or one of {valid}"):
        sink.sink_compression({"kafka.compression.type": "LZ4"})  # Kafka's names are lower case
    with pytest.raises(kafkalite.InvalidConfigError, match="compression.type must be one of producer"):
        Admin(data_dir).create_topic("t", config={"compression.type": "brotli"})
    done = run_cli("--data-dir", data_dir, "produce", "t", "--compression-type", "brotli", input=b"x\n")
    assert done.returncode == 2
    assert b"--compression-type: invalid choice: 'brotli'" in done.stderr
    assert b"none" in done.stderr and b"gzip" in done.stderr and b"zstd" in done.stderr
    assert not os.path.exists(os.path.join(data_dir, "t-0"))
    assert kafkalite._native.COMPRESSION_TYPES == ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.broker
def test_kafka_reads_every_codec_kafkalite_wrote(tmp_path):
    """Kafka's own codecs (Java's GZIPInputStream, snappy-java, its LZ4 frame reader, zstd-jni)
    decode every batch in DumpLogSegments, and a broker serves the segments to a consumer."""
    from kafka_broker import KafkaBroker, run_kafka_class

    logs = tmp_path / "logs"
    broker = KafkaBroker(logs, tmp_path / "work")
    with broker:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        admin.create_topics([NewTopic(f"c-{c}", 1, 1) for c in CODECS])
        admin.close()
        deadline = time.monotonic() + 30
        while not all((logs / f"c-{c}-0").is_dir() for c in CODECS) and time.monotonic() < deadline:
            time.sleep(0.1)
    want = _records(400)
    for codec in CODECS:
        scratch = str(tmp_path / "scratch" / f"c-{codec}-0")
        with Log(scratch, compression=codec) as log:
            for start in range(0, 400, 100):
                chunk = want[start : start + 100]
                log.append([Record(v, key=k, headers=h, timestamp=ts) for _, ts, k, v, h in chunk])
        files = sorted(glob.glob(os.path.join(scratch, "0*")))
        done = run_kafka_class(
            "kafka.tools.DumpLogSegments",
            "--deep-iteration", "--print-data-log", "--files", ",".join(f for f in files if f.endswith(".log")),
        )  # fmt: skip
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-3000:]
        assert f"compresscodec: {codec}" in out.lower() or codec == "none", out[:3000]
        assert "Exception" not in out and "isvalid: false" not in out, out[-3000:]
        assert out.count("| offset: ") == 400, out[-3000:]
        assert "payload: value-399-" in out, out[-3000:]
        part = logs / f"c-{codec}-0"
        for f in glob.glob(str(part / "0*")):
            os.remove(f)
        for f in files:
            shutil.copy(f, part)
    from kafka import KafkaConsumer

    with broker:
        for codec in CODECS:
            consumer = KafkaConsumer(
                f"c-{codec}",
                bootstrap_servers=broker.bootstrap_servers,
                auto_offset_reset="earliest",
                consumer_timeout_ms=10_000,
            )
            got = []
            for m in consumer:
                got.append((m.offset, m.timestamp, m.key, m.value, list(m.headers)))
                if len(got) >= len(want):
                    break
            consumer.close()
            assert got == want, codec
