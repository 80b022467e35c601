"""Idempotent produce over the wire (issue 13): InitProducerId hands out producer ids that are
unique across restarts and never meet the Spark sink's, and Produce checks each producer's
sequences as Kafka's broker does (``ProducerAppendInfo``): a retried batch is acknowledged at its
original offset and stored once, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an old epoch is
INVALID_PRODUCER_EPOCH. The state lives with the partition and survives restarts (a clean stop
leaves Kafka's ``<offset>.snapshot``; after kill -9 or a damaged snapshot it is rebuilt from the
batch headers in the log).

Requests are built by hand (``struct``) around record batches from kafka-python's
``DefaultRecordBatchBuilder``, so the same ProduceRequest bytes can be sent twice."""

from __future__ import annotations

import glob
import logging
import os
import signal
import struct
import time

import kafkalite
import pytest
from kafkalite._native import FIRST_SINK_PRODUCER_ID, crc32c
from kafkalite.server import Server
from kafkalite.spark.batches import scan
from kafkalite.spark.sink import producer_for
from serve_proc import free_port, serve_on
from server_wire import Wire

confluent_kafka = pytest.importorskip("confluent_kafka")
default_records = pytest.importorskip("kafka.record.default_records")

NONE, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH = 0, 45, 47
TOPIC = "idem"


def batch(pid: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    """A v2 batch as an idempotent producer sends it (kafka-python's builder)."""
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    now = int(time.time() * 1000)
    for i, value in enumerate(values):
        builder.append(i, timestamp=now, key=None, value=value, headers=[])
    return bytes(builder.build())


def stored(path: str, topic: str = TOPIC) -> list[bytes]:
    """Every value in partition 0, read by the embedded API."""
    with kafkalite.log.Log(os.path.join(path, f"{topic}-0"), readonly=True) as log:
        return [r.value for r in log.records()]


def headers(path: str, topic: str = TOPIC) -> list:
    with kafkalite.log.Log(os.path.join(path, f"{topic}-0"), readonly=True) as log:
        return list(scan(log, log.start_offset))


def test_confluent_idempotent_producer_lands_everything_once(kafkalite_server):
    kafkalite.Admin(kafkalite_server.path).create_topic("confluent", partitions=3)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": kafkalite_server.bootstrap_servers,
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 50,
        }
    )
    errors: list = []
    n = 3000
    for i in range(n):
        producer.produce(
            "confluent",
            value=b"%d" % i,
            key=b"k%d" % (i % 7),
            on_delivery=lambda err, msg: err and errors.append(err),
        )
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    values: list[bytes] = []
    pids = set()
    for p in range(3):
        part = os.path.join(kafkalite_server.path, f"confluent-{p}")
        with kafkalite.log.Log(part, readonly=True) as log:
            infos = list(scan(log, 0))
            pids |= {(i.producer_id, i.producer_epoch) for i in infos}
            # Each partition's batches carry consecutive sequences from 0.
            expected = 0
            for info in infos:
                assert info.base_sequence == expected
                expected += info.records
            values += [r.value for r in log.records()]
    assert sorted(values, key=int) == [b"%d" % i for i in range(n)], "every record once"
    assert len(pids) == 1
    ((pid, epoch),) = pids
    assert 0 <= pid < FIRST_SINK_PRODUCER_ID and epoch == 0


def test_a_duplicated_request_is_acknowledged_at_its_offset_and_stored_once(kafkalite_server):
    kafkalite.Admin(kafkalite_server.path).create_topic(TOPIC, partitions=1)
    wire = Wire(kafkalite_server.address)
    error, pid, epoch = wire.init_producer_id()
    assert (error, epoch) == (NONE, 0)
    first = batch(pid, epoch, 0, [b"a", b"b", b"c"])
    assert wire.produce_batch(first, TOPIC) == (NONE, 0)
    # Another writer appends between the original and the retry (a non-idempotent embedded
    # producer in this process): the retry is still found, at its original offset.
    with kafkalite.Producer(kafkalite_server.path) as embedded:
        embedded.send(TOPIC, b"embedded", partition=0).get(timeout=10)
    assert wire.produce_batch(first, TOPIC) == (NONE, 0)
    other = Wire(kafkalite_server.address)  # a retry may come on a new connection
    assert other.produce_batch(first, TOPIC) == (NONE, 0)
    assert wire.produce_batch(batch(pid, epoch, 3, [b"d"]), TOPIC) == (NONE, 4)
    # Each of the last five batches is recognised, not just the newest.
    assert wire.produce_batch(first, TOPIC) == (NONE, 0)
    assert stored(kafkalite_server.path) == [b"a", b"b", b"c", b"embedded", b"d"]
    wire.close()
    other.close()


def test_sequence_gaps_and_old_epochs_are_refused_with_kafkas_codes(kafkalite_server):
    kafkalite.Admin(kafkalite_server.path).create_topic(TOPIC, partitions=1)
    wire = Wire(kafkalite_server.address)
    _, pid, _ = wire.init_producer_id()
    assert wire.produce_batch(batch(pid, 0, 0, [b"0", b"1"]), TOPIC) == (NONE, 0)
    error, base = wire.produce_batch(batch(pid, 0, 5, [b"gap"]), TOPIC)
    assert (error, base) == (OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    # Same first sequence, different range: neither a retry nor in sequence.
    assert wire.produce_batch(batch(pid, 0, 0, [b"0"]), TOPIC)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    # A newer epoch must start at 0; once it has, the old epoch is fenced.
    assert wire.produce_batch(batch(pid, 1, 7, [b"x"]), TOPIC)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert wire.produce_batch(batch(pid, 1, 0, [b"e1"]), TOPIC) == (NONE, 2)
    assert wire.produce_batch(batch(pid, 0, 2, [b"old"]), TOPIC)[0] == INVALID_PRODUCER_EPOCH
    # A producer id the partition has no state for starts anywhere (Kafka 2.5+, KIP-360).
    assert wire.produce_batch(batch(pid + 1, 0, 42, [b"new"]), TOPIC) == (NONE, 3)
    assert stored(kafkalite_server.path) == [b"0", b"1", b"e1", b"new"]
    wire.close()


def test_init_producer_id_is_fresh_unique_across_restarts_and_apart_from_the_sinks(tmp_path):
    data = tmp_path / "d"
    seen = []
    transactional = set()
    for life in range(3):
        with Server(data) as server:
            wire = Wire(server.address)
            for _ in range(3):
                error, pid, epoch = wire.init_producer_id()
                assert (error, epoch) == (NONE, 0)
                seen.append(pid)
            # A transactional id keeps its producer id (from the same blocks) at a new epoch.
            error, pid, epoch = wire.init_producer_id("txn")
            assert (error, epoch) == (NONE, life)
            transactional.add(pid)
            wire.close()
    assert len(transactional) == 1 and not transactional & set(seen)
    assert len(set(seen)) == len(seen), seen
    assert all(0 <= pid < FIRST_SINK_PRODUCER_ID for pid in seen)
    assert all(producer_for(f"sink-{i}").id >= FIRST_SINK_PRODUCER_ID for i in range(100))
    assert all(producer_for(f"sink-{i}").id < 1 << 63 for i in range(100))


@pytest.mark.parametrize("stop", ["clean", "kill-9"])
def test_a_retry_after_a_restart_is_still_deduplicated(tmp_path, spawn, stop):
    """The original request is acknowledged, the server stops (SIGINT: clean close, which
    snapshots; SIGKILL: no snapshot, state rebuilt from the log), and the retry after the
    restart gets the original offset; the next sequence goes on, a gap is still refused."""
    data = tmp_path / "d"
    kafkalite.Admin(str(data)).create_topic(TOPIC, partitions=1)
    port = free_port()
    proc = serve_on(spawn.module, data, port)
    wire = Wire(f"127.0.0.1:{port}")
    _, pid, _ = wire.init_producer_id()
    originals = [batch(pid, 0, 3 * i, [b"%d-%d" % (i, j) for j in range(3)]) for i in range(7)]
    for i, original in enumerate(originals):
        assert wire.produce_batch(original, TOPIC) == (NONE, 3 * i)
    wire.close()
    proc.send_signal(signal.SIGKILL if stop == "kill-9" else signal.SIGINT)
    proc.wait(10)
    snapshots = sorted(os.path.basename(p) for p in glob.glob(str(data / f"{TOPIC}-0" / "*.snapshot")))
    assert snapshots == (["00000000000000000021.snapshot"] if stop == "clean" else [])
    proc = serve_on(spawn.module, data, port)
    wire = Wire(f"127.0.0.1:{port}")
    # After a clean stop only the last batch is in the snapshot (Kafka keeps one batch per
    # producer there); after kill -9 the scan of the log recovers all five.
    assert wire.produce_batch(originals[-1], TOPIC) == (NONE, 18)
    if stop == "kill-9":
        assert wire.produce_batch(originals[2], TOPIC) == (NONE, 6)
    else:
        # The state came from the snapshot, not a scan: Kafka's answer to an older retry then.
        assert wire.produce_batch(originals[2], TOPIC)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert wire.produce_batch(batch(pid, 0, 22, [b"gap"]), TOPIC)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert wire.produce_batch(batch(pid, 0, 21, [b"next"]), TOPIC) == (NONE, 21)
    wire.close()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0
    assert len(stored(str(data))) == 22


def test_a_damaged_snapshot_is_ignored_and_the_state_rebuilt_from_the_log(tmp_path, caplog):
    data = tmp_path / "d"
    kafkalite.Admin(str(data)).create_topic(TOPIC, partitions=1)
    with Server(data) as server:
        wire = Wire(server.address)
        _, pid, _ = wire.init_producer_id()
        original = batch(pid, 0, 0, [b"once"])
        assert wire.produce_batch(original, TOPIC) == (NONE, 0)
        wire.close()
    (snapshot,) = glob.glob(str(data / f"{TOPIC}-0" / "*.snapshot"))
    with open(snapshot, "r+b") as f:
        f.seek(20)
        byte = f.read(1)
        f.seek(20)
        f.write(bytes([byte[0] ^ 0xFF]))
    with caplog.at_level(logging.WARNING, logger="kafkalite"), Server(data) as server:
        wire = Wire(server.address)
        assert wire.produce_batch(original, TOPIC) == (NONE, 0)
        assert wire.produce_batch(batch(pid, 0, 1, [b"then"]), TOPIC) == (NONE, 1)
        wire.close()
    assert any("damaged producer snapshot" in r.getMessage() for r in caplog.records), caplog.text
    assert stored(str(data)) == [b"once", b"then"]
    # Garbage in place of a snapshot (a truncated file) is no crash either.
    for path in glob.glob(str(data / f"{TOPIC}-0" / "*.snapshot")):
        with open(path, "wb") as f:
            f.write(b"\x00\x01")
    with Server(data) as server:
        wire = Wire(server.address)
        assert wire.produce_batch(batch(pid, 0, 1, [b"then"]), TOPIC) == (NONE, 1)
        wire.close()


def test_snapshot_files_have_kafkas_layout(tmp_path):
    """kafka-format.md §4.8: int16 version 1, uint32 CRC-32C of the rest, int32 count, then
    46-byte entries (producerId, epoch, lastSequence, lastOffset, offsetDelta, timestamp,
    coordinatorEpoch -1, currentTxnFirstOffset -1). Taken at clean close and at every roll."""
    data = tmp_path / "d"
    kafkalite.Admin(str(data)).create_topic(TOPIC, partitions=1, config={"segment.bytes": 1024})
    with Server(data) as server:
        wire = Wire(server.address)
        _, pid, _ = wire.init_producer_id()
        for i in range(30):
            assert wire.produce_batch(batch(pid, 0, 2 * i, [b"x" * 40, b"y" * 40]), TOPIC) == (NONE, 2 * i)
        wire.close()
    part = data / f"{TOPIC}-0"
    segments = sorted(int(os.path.basename(p)[:20]) for p in glob.glob(str(part / "*.log")))
    snapshots = sorted(int(os.path.basename(p)[:20]) for p in glob.glob(str(part / "*.snapshot")))
    assert len(segments) > 3
    # One at the log end (clean close) and those of the rolls not yet retired: Kafka keeps the
    # snapshots from the second newest segment's base on.
    assert snapshots[-1] == 60 and snapshots[0] >= segments[-2] and len(snapshots) >= 2
    with open(part / f"{snapshots[-1]:020d}.snapshot", "rb") as f:
        raw = f.read()
    version, crc, count = struct.unpack_from(">hIi", raw, 0)
    assert (version, count, len(raw)) == (1, 1, 10 + 46)
    assert crc == crc32c(raw[6:])
    entry = struct.unpack_from(">qhiqiqiq", raw, 10)
    last = headers(str(data))[-1]
    assert entry[:5] == (pid, 0, 59, 59, 1)
    assert entry[6:] == (-1, -1)
    assert last.producer_id == pid and last.base_offset == 58


def test_a_snapshot_beyond_the_log_end_is_dropped_at_open(tmp_path):
    """Truncation (recovery cutting a torn tail) leaves snapshots describing batches the log no
    longer holds: they are deleted when the partition opens, before anyone appends past them."""
    data = tmp_path / "d"
    kafkalite.Admin(str(data)).create_topic(TOPIC, partitions=1)
    with Server(data) as server:
        wire = Wire(server.address)
        _, pid, _ = wire.init_producer_id()
        assert wire.produce_batch(batch(pid, 0, 0, [b"a"]), TOPIC) == (NONE, 0)
        wire.close()
    part = data / f"{TOPIC}-0"
    # A decoy of a later state, as if the log had been cut back since it was taken.
    with open(part / "00000000000000000001.snapshot", "rb") as f:
        valid = f.read()
    with open(part / "00000000000000000500.snapshot", "wb") as f:
        f.write(valid)
    with Server(data) as server:
        wire = Wire(server.address)
        assert wire.produce_batch(batch(pid, 0, 1, [b"b"]), TOPIC) == (NONE, 1)
        wire.close()
    assert not (part / "00000000000000000500.snapshot").exists()


@pytest.mark.broker
def test_a_brokers_snapshot_is_read_and_written_back_byte_for_byte(tmp_path, caplog):
    """An idempotent kafka-python producer writes to Apache Kafka 4.1; the broker's stopped
    partition (its `.log`, indexes and `<end>.snapshot`) moves into a kafkalite data directory.
    The server takes its state from that snapshot (a retry of the broker-written last batch is
    acknowledged at the broker's offset, no damage warning), and the snapshot kafkalite writes
    at its own clean close, for the same state and offset, has the broker's exact bytes."""
    from kafka import KafkaProducer
    from kafka_broker import KafkaBroker

    logs = tmp_path / "logs"
    with KafkaBroker(logs, tmp_path / "work") as broker:
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, enable_idempotence=True, linger_ms=0, acks="all"
        )
        for i in range(5):
            producer.send(TOPIC, b"broker-%d" % i, partition=0).get(timeout=60)
        producer.close()
    broker_part = logs / f"{TOPIC}-0"
    (snapshot,) = glob.glob(str(broker_part / "*.snapshot"))
    assert os.path.basename(snapshot) == "00000000000000000005.snapshot"
    with open(snapshot, "rb") as f:
        broker_bytes = f.read()
    with open(broker_part / "00000000000000000000.log", "rb") as f:
        log_bytes = f.read()
    last_at = list(_infos(log_bytes))[-1]
    last_batch = log_bytes[last_at[0] :]
    data = tmp_path / "d"
    kafkalite.Admin(str(data)).create_topic(TOPIC, partitions=1)
    part = data / f"{TOPIC}-0"
    for name in os.listdir(part):
        os.remove(part / name)
    for suffix in (".log", ".index", ".timeindex", ".snapshot"):
        src = broker_part / f"{'5' if suffix == '.snapshot' else '0':0>20}{suffix}"
        with open(src, "rb") as f, open(part / src.name, "wb") as g:
            g.write(f.read())
    copied = os.stat(part / "00000000000000000005.snapshot").st_ino
    with caplog.at_level(logging.WARNING, logger="kafkalite"), Server(data) as server:
        wire = Wire(server.address)
        assert wire.produce_batch(last_batch, TOPIC) == (NONE, 4)
        wire.close()
    assert "damaged producer snapshot" not in caplog.text
    assert stored(str(data)) == [b"broker-%d" % i for i in range(5)]
    assert os.stat(part / "00000000000000000005.snapshot").st_ino != copied, "written again at close"
    with open(part / "00000000000000000005.snapshot", "rb") as f:
        assert f.read() == broker_bytes


def _infos(data: bytes):
    """(position, base offset) of each batch in a `.log` file's bytes."""
    pos = 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        yield pos, base
        pos += 12 + length


@pytest.mark.parametrize("fault", ["kill", "enospc"])
def test_a_snapshot_write_that_fails_at_close_costs_a_scan_not_the_state(tmp_path, spawn, fault):
    """The server's clean stop writes the producer snapshot; here that write kills the process
    (kill -9 mid-close) or runs out of space. Either way the next server rebuilds the state
    from the log and a retry is still deduplicated."""
    data = tmp_path / "d"
    kafkalite.Admin(str(data)).create_topic(TOPIC, partitions=1)
    port = free_port()
    proc = serve_on(
        spawn.module,
        data,
        port,
        env={**os.environ, "KAFKALITE_FAILPOINTS": f"producer_snapshot.write={fault}"},
    )
    wire = Wire(f"127.0.0.1:{port}")
    _, pid, _ = wire.init_producer_id()
    originals = [batch(pid, 0, 2 * i, [b"a", b"b"]) for i in range(3)]
    for i, original in enumerate(originals):
        assert wire.produce_batch(original, TOPIC) == (NONE, 2 * i)
    wire.close()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(10)
    assert code == (-signal.SIGKILL if fault == "kill" else 0)
    assert glob.glob(str(data / f"{TOPIC}-0" / "*.snapshot")) == []
    proc = serve_on(spawn.module, data, port)
    wire = Wire(f"127.0.0.1:{port}")
    for i, original in enumerate(originals):
        assert wire.produce_batch(original, TOPIC) == (NONE, 2 * i)
    assert wire.produce_batch(batch(pid, 0, 6, [b"c"]), TOPIC) == (NONE, 6)
    wire.close()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 0
    assert stored(str(data)) == [b"a", b"b"] * 3 + [b"c"]


def test_two_servers_on_one_data_directory_share_ids_and_state(tmp_path):
    """Two servers over the same data directory (each a shared writer of the partition): their
    producer ids never collide, and a retry sent to the other server is still recognised."""
    data = tmp_path / "d"
    kafkalite.Admin(str(data)).create_topic(TOPIC, partitions=1)
    with Server(data) as a, Server(data) as b:
        wa, wb = Wire(a.address), Wire(b.address)
        ids = [wa.init_producer_id()[1], wb.init_producer_id()[1], wa.init_producer_id()[1]]
        assert len(set(ids)) == 3, ids
        pid = ids[0]
        first = batch(pid, 0, 0, [b"1", b"2"])
        assert wa.produce_batch(first, TOPIC) == (NONE, 0)
        assert wb.produce_batch(batch(ids[1], 0, 0, [b"other"]), TOPIC) == (NONE, 2)
        assert wb.produce_batch(first, TOPIC) == (NONE, 0)
        assert wb.produce_batch(batch(pid, 0, 2, [b"3"]), TOPIC) == (NONE, 3)
        assert wa.produce_batch(batch(pid, 0, 2, [b"3"]), TOPIC) == (NONE, 3)
        assert wa.produce_batch(batch(pid, 0, 4, [b"gap"]), TOPIC)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        wa.close()
        wb.close()
    assert stored(str(data)) == [b"1", b"2", b"other", b"3"]
