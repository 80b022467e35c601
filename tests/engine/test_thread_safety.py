"""The thread-safety statements of the docstrings and the README: several threads may share
one Producer (as kafka-python's KafkaProducer) and one Log; every record arrives once and each
thread's records to a partition keep their order."""

from __future__ import annotations

import threading

from helpers import split_by_writer
from kafkalite import Admin, Consumer, Log, Producer, TopicPartition

THREADS, PER_THREAD = 4, 2_000


def run_threads(target) -> None:
    errors: list[BaseException] = []

    def guarded(n: int) -> None:
        try:
            target(n)
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread is still running"
    assert errors == []


def test_threads_share_one_producer(tmp_path):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 2)
    with Producer(data, linger_ms=1, batch_size=4096) as producer:

        def send(n: int) -> None:
            for i in range(PER_THREAD):
                producer.send("t", value=b"%d:%d" % (n, i), partition=i % 2)
            producer.flush()

        run_threads(send)
    with Consumer(data) as consumer:
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        consumer.seek_to_beginning()
        by_partition: dict[int, list[bytes]] = {0: [], 1: []}
        while sum(len(v) for v in by_partition.values()) < THREADS * PER_THREAD:
            polled = consumer.poll(timeout_ms=1000, max_records=10_000)
            assert polled, "records are missing"
            for tp, records in polled.items():
                by_partition[tp.partition] += [r.value for r in records]
    for partition, values in by_partition.items():
        expected = list(range(partition, PER_THREAD, 2))
        assert split_by_writer(values) == {n: expected for n in range(THREADS)}


def test_threads_share_one_log(part_dir):
    with Log(part_dir, segment_bytes=64 * 1024) as log:

        def append(n: int) -> None:
            for i in range(0, PER_THREAD, 10):
                log.append_values([b"%d:%d" % (n, j) for j in range(i, i + 10)])
                assert log.end_offset >= 10  # a read between appends sees whole batches

        run_threads(append)
        records = list(log.records())
    assert [r.offset for r in records] == list(range(THREADS * PER_THREAD))
    assert split_by_writer([r.value for r in records]) == {n: list(range(PER_THREAD)) for n in range(THREADS)}
