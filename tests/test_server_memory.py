"""`kafkalite serve` keeps its resident memory bounded while it serves a log much larger than
that (issue 13: resident memory <= 100 MB): pages it wrote or sent leave its resident set
(they stay in the page cache), so RSS does not grow with the data served."""

from __future__ import annotations

import time

import pytest
from helpers import produce_all
from serve_proc import start_serve

confluent_kafka = pytest.importorskip("confluent_kafka")

RECORDS, VALUE = 250_000, b"x" * 1000  # 250 MB through one partition, in and out


def peak_rss(pid: int) -> tuple[int, int]:
    """(VmHWM, RssFile) in bytes."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmHWM", "RssFile"):
                fields[name] = int(rest.split()[0]) * 1024
    return fields["VmHWM"], fields["RssFile"]


@pytest.mark.slow
def test_serving_a_log_larger_than_memory_budget_keeps_rss_bounded(tmp_path, spawn):
    server, bootstrap = start_serve(spawn.module, tmp_path, "--log-level", "WARNING")
    try:
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": 1}
        )
        produce_all(producer, "big", VALUE, (b"%d" % i for i in range(RECORDS)))
        assert producer.flush(120) == 0
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "rss", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["big"])
        read = 0
        while read < RECORDS:
            for msg in consumer.consume(10_000, timeout=10):
                assert msg.error() is None, msg.error()
                read += 1
        consumer.close()
        hwm, rss_file = peak_rss(server.pid)
        print(f"server peak RSS {hwm / 1e6:.0f} MB, file-backed now {rss_file / 1e6:.0f} MB")
        assert hwm < 100 << 20, f"peak RSS {hwm / 1e6:.0f} MB serving 250 MB"
    finally:
        server.kill()
        server.wait()


def current_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_many_written_partitions_do_not_stay_resident(tmp_path, spawn):
    """30 partitions written in turn (8 MB each): each writer maps its allocation step ahead of
    it, and the server drops the pages of its open partitions every couple of seconds, so its
    memory does not grow with the number of partitions it has served."""
    server, bootstrap = start_serve(spawn.module, tmp_path, "--log-level", "WARNING")
    try:
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": 1}
        )
        for t in range(30):
            produce_all(producer, f"many-{t}", VALUE, (b"%d" % i for i in range(8_000)))
            assert producer.flush(60) == 0
        time.sleep(5)  # idle: the server's periodic release has run
        rss = current_rss(server.pid)
        print(f"server RSS {rss / 1e6:.0f} MB after writing 30 partitions of 8 MB")
        assert rss < 100 << 20, f"RSS {rss / 1e6:.0f} MB with 30 idle written partitions"
    finally:
        server.kill()
        server.wait()
