"""`kafkalite serve` keeps its resident memory bounded while it serves a log much larger than
that (issue 13: resident memory <= 100 MB): pages it wrote or sent leave its resident set
(they stay in the page cache), so RSS does not grow with the data served, and a burst of
writes to several partitions at once keeps only a small window of each resident."""

from __future__ import annotations

import time
from collections.abc import Iterable

import kafkalite
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


def assert_peak_below(pid: int, bound: int, doing: str) -> None:
    hwm, rss_file = peak_rss(pid)
    print(f"server peak RSS {hwm / 1e6:.0f} MB, file-backed now {rss_file / 1e6:.0f} MB")
    assert hwm < bound, f"peak RSS {hwm / 1e6:.0f} MB {doing}"


def send_all(bootstrap: str, topic: str, count: int, partitions: Iterable[int] | None = None) -> None:
    """``count`` records of VALUE keyed by their number to ``topic`` (record i to
    ``partitions[i]`` when given) from a producer that wants throughput, as bench_server's
    (1 MiB batches, linger.ms=5); returns once all are acknowledged."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20, "acks": 1}
    )
    produce_all(producer, topic, VALUE, (b"%d" % i for i in range(count)), partitions)
    assert producer.flush(120) == 0


@pytest.mark.slow
def test_serving_a_log_larger_than_memory_budget_keeps_rss_bounded(tmp_path, spawn):
    server, bootstrap = start_serve(spawn.module, tmp_path, "--log-level", "WARNING")
    try:
        send_all(bootstrap, "big", RECORDS)
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
        assert_peak_below(server.pid, 100 << 20, "serving 250 MB")
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
    """30 partitions written in turn (8 MB each): each writer keeps a window around its write
    position faulted in, and the server drops the pages of its open partitions every couple of seconds, so its
    memory does not grow with the number of partitions it has served."""
    server, bootstrap = start_serve(spawn.module, tmp_path, "--log-level", "WARNING")
    try:
        for t in range(30):
            send_all(bootstrap, f"many-{t}", 8_000)
        time.sleep(5)  # idle: the server's periodic release has run
        rss = current_rss(server.pid)
        print(f"server RSS {rss / 1e6:.0f} MB after writing 30 partitions of 8 MB")
        assert rss < 100 << 20, f"RSS {rss / 1e6:.0f} MB with 30 idle written partitions"
    finally:
        server.kill()
        server.wait()


def test_a_burst_of_1_mib_batches_to_4_partitions_keeps_a_small_window_resident(tmp_path, spawn):
    """bench_server's produce rows (1 MiB batches over 4 partitions), made larger: 160 MB in
    40 MB per partition, so each writer reaches its 16 MiB allocation steps. Each writer used to
    fault in its whole next step at once and keep up to a step behind it, 4 partitions x ~32 MiB
    between the server's periodic releases: peak RSS 94-163 MB (three runs). Now 46-47 MB: each
    keeps a 2-6 MiB window around its write position (segment/writer.rs `RESIDENT_WINDOW`), and a Produce
    request's batches are written from its frame without a copy. The peak (VmHWM, kept by the
    kernel, so no sampling can miss it) includes the interpreter's ~25 MB."""
    server, bootstrap = start_serve(spawn.module, tmp_path, "--log-level", "WARNING")
    try:
        kafkalite.Admin(tmp_path).create_topic("burst", partitions=4)  # the same files the server serves
        send_all(bootstrap, "burst", 160_000, (i % 4 for i in range(160_000)))  # 160 MB
        sizes = [sum(f.stat().st_size for f in (tmp_path / f"burst-{p}").glob("*.log")) for p in range(4)]
        assert min(sizes) > 40_000_000, sizes  # every partition took its 40 MB
        assert_peak_below(server.pid, 75 << 20, "taking 4 x 40 MB in 1 MiB batches")
    finally:
        server.kill()
        server.wait()
