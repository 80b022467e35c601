"""What the benchmarks that drive Kafka clients share (bench_peers.py against a real broker,
bench_server.py against `kafkalite serve` and a real broker): the record shape, the checks that
stop a run whose counts are wrong, a confluent-kafka view of any Kafka endpoint, the paced
produce->consume latency run, the end of a run, and the report's number format, file names and ratio plot."""

from __future__ import annotations

import datetime
import gc
import glob
import os
import re
import select
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import confluent_kafka.admin

# tests/support/helpers.py holds the one produce loop the tests and the benches share: every script that
# imports this module gets tests/ on its path here, not by remembering to add it itself.
_TESTS = str(Path(__file__).resolve().parent.parent / "tests" / "support")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
from helpers import produce_all  # noqa: E402

VALUE = b"v" * 100
PARTITIONS = 4
LATENCY_RECORDS, LATENCY_RATE = 2000, 2000  # records/s: latency, not throughput
#: Records sent and consumed but not counted. A new librdkafka consumer on a new topic stalls for a
#: second or more after its first records (seen here: 1.2 s, then steady at a few ms), so the
#: warm-up lasts 3 s, the same for both paths.
LATENCY_WARMUP = 3 * LATENCY_RATE


#: The summary line of Kafka's ProducerPerformance (org.apache.kafka.tools): records sent,
#: records/s, MB/s, latency avg/max (ms), then the 50th/95th/99th percentiles (ms).
PP_LINE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec .*?([\d.]+) ms avg latency, ([\d.]+) ms max latency, "
    r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


class Missing(SystemExit):
    """A benchmark counted records that were not written (or read fewer than were)."""


def expect(got: int, want: int, what: str) -> None:
    if got != want:
        raise Missing(f"{what}: counted {got:,} records, expected {want:,}: the figure would be wrong")


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    os.sync()  # earlier phases' writeback must not land on this one
    began = time.perf_counter()
    out = fn()
    return time.perf_counter() - began, out


def local_spark(jars: Collection[str] = (), settings: Mapping[str, str] | None = None) -> Any:
    """The benches' one Spark session: ``local[2]``, no UI or progress bar, a 4 GB driver,
    ``jars`` (Spark's Kafka source, for the rows that compare with it) and any other Spark
    ``settings``; the Python workers run this interpreter."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in (settings or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stream_into_parquet(df: Any, out: str, checkpoint: str) -> str | None:
    """Runs the streaming DataFrame ``df`` as one Trigger.AvailableNow query into Parquet files at
    ``out`` and waits for it: None when it finished, else why it failed."""
    q = (
        df.writeStream.format("parquet")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out)
    )
    q.awaitTermination()
    return None if q.exception() is None else str(q.exception())


def timed_transactions(
    producer: Any, txns: int, per_txn: int, send: Callable[[int, int], object], commit: Callable[[], object]
) -> tuple[float, list[float]]:
    """The transactional benches' loop: ``txns`` transactions of ``per_txn`` ``send(t, i)`` calls
    on ``producer`` (any client with ``begin_transaction()``), each ended by ``commit()``.
    Returns (seconds from the first begin_transaction() to the last commit's return, each
    commit's seconds); the caller's init_transactions() and close() are not timed."""
    commits = []
    began = time.perf_counter()
    for t in range(txns):
        producer.begin_transaction()
        for i in range(per_txn):
            send(t, i)
        started = time.perf_counter()
        commit()
        commits.append(time.perf_counter() - started)
    return time.perf_counter() - began, commits


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def paced_latency(
    child_argv: list[str], send: Callable[[bytes], object], flush: Callable[[], object], total: int
) -> list[float]:
    """Produce->consume latency (µs) of ``total`` records sent at ``LATENCY_RATE``, read by the
    child process ``child_argv`` (peers_child.py latency ...), minus the warm-up records. The
    child says "ready" once it has seen the probe record, so connections are up before timing.
    ``send(value)`` sends one record, ``flush()`` waits for all."""
    child = subprocess.Popen(child_argv, stdout=subprocess.PIPE, text=True)
    try:
        send(b"probe")
        flush()
        ready, _, _ = select.select([child.stdout], [], [], 120)
        if not ready or child.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
            raise Missing("the latency consumer did not see the probe record within 120 s")
        time.sleep(0.2)
        began = time.monotonic()
        for i in range(total):
            time.sleep(max(0.0, began + i / LATENCY_RATE - time.monotonic()))
            send(str(time.monotonic_ns()).encode())
        flush()
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return [float(x) for x in out.split()][LATENCY_WARMUP:]


# -- any Kafka endpoint, through confluent-kafka ----------------------------------------------------
class KafkaEndpoint:
    """A Kafka broker (Apache Kafka or `kafkalite serve`) at ``bootstrap``, as confluent-kafka
    sees it: create topics, count records (end offsets), produce and consume checked batches."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        # log_level 4: no notices about the topics this script deletes
        self.admin = ck.admin.AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 4})
        self.checker = ck.Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": "bench-check", "enable.auto.commit": False}
        )

    def close(self) -> None:
        self.checker.close()
        del self.admin  # its connections would log the broker's going away
        gc.collect()

    def topic(self, name: str, partitions: int = PARTITIONS) -> str:
        for f in self.admin.create_topics([ck.admin.NewTopic(name, partitions, 1)]).values():
            f.result(60)
        deadline = time.monotonic() + 30  # metadata reaches the broker's cache a moment later
        while len(self.admin.list_topics(name, timeout=10).topics[name].partitions) != partitions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} did not appear on the broker")
            time.sleep(0.1)
        return name

    def count(self, topic: str) -> int:
        parts = self.admin.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(self.checker.get_watermark_offsets(ck.TopicPartition(topic, p), 30)[1] for p in parts)

    def drop(self, topic: str) -> None:
        for f in self.admin.delete_topics([topic]).values():
            f.result(60)

    def producer(self, **config: object) -> tuple[ck.Producer, list]:
        failed: list = []
        p = ck.Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "delivery.report.only.error": True,  # a tuned user's choice: no callback per success
                "partitioner": "murmur2_random",  # the Java client's (and kafkalite's) key -> partition
                "on_delivery": lambda err, msg: failed.append(err),
                **config,
            }
        )
        return p, failed

    def send(self, topic: str, keys: list[bytes], **config: object) -> None:
        p, failed = self.producer(**config)
        produce_all(p, topic, VALUE, keys)
        left = p.flush(120)
        if left or failed:
            raise Missing(f"confluent-kafka: {left} unsent, {len(failed)} failed, first {failed[:1]}")

    def consume(self, topic: str, n: int, **config: object) -> int:
        c = ck.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                **config,
            }
        )
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = 0
        try:
            while got < n:
                # consume() waits for all it asks for: never ask past the end
                msgs = c.consume(min(10000, n - got), timeout=10)
                if not msgs:
                    raise Missing(f"confluent-kafka consumer stalled after {got:,} of {n:,} records")
                for m in msgs:
                    if m.error():
                        raise Missing(f"confluent-kafka consumer: {m.error()}")
                    m.key(), m.value()
                got += len(msgs)
        finally:
            c.close()
        return got


def finish_run(broker: Any, work: Path) -> None:
    """The end of a run, whatever happened: the Apache Kafka broker stopped if one was started
    (``kafka_broker``'s), the run's work folder removed."""
    if broker is not None:
        broker.stop()
    shutil.rmtree(work, ignore_errors=True)


def fmt(value: float, unit: str) -> str:
    if unit in ("rec/s", "rows/s"):
        return f"{value / 1e6:.2f} M {unit}" if value >= 1e6 else f"{value:,.0f} {unit}"
    if unit == "µs":
        return f"{value:,.0f} µs"
    return f"{value:,.1f} {unit}"


def output_base(out: str, prefix: str, replace: bool) -> Path:
    """``<prefix>-<UTC date>``, with -2, -3, ... while that name is taken, unless --replace."""
    base = Path(out) / f"{prefix}-{datetime.datetime.now(datetime.UTC):%Y-%m-%d}"
    if replace:
        return base
    n, candidate = 1, base
    while glob.glob(f"{candidate}.*"):
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def plot(rows: list[tuple[str, float]], path: Path, title: str, references: Collection[str] = ()) -> None:
    """One bar per (label, ratio), green where kafkalite is ahead, red where behind; the labels in
    ``references`` are reference figures (not kafkalite's: e.g. a ceiling), drawn grey."""
    if not rows:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    fig, ax = plt.subplots(figsize=(13, 0.4 * len(rows) + 1.4))
    labels = [name.replace("`", "") for name, _ in rows][::-1]
    values = [r for _, r in rows][::-1]
    colors = ["tab:gray" if name in references else "tab:green" if v >= 1 else "tab:red" for name, v in rows]
    ax.barh(labels, values, color=colors[::-1])
    ax.axvline(1, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlim(right=max(values) * 4)  # room for the last label
    ax.set_xlabel(
        "kafkalite / peer (above 1: kafkalite ahead)"
        + ("; grey: a reference / peer, not kafkalite" if references else "")
    )
    ax.set_title(title, fontsize=9)
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.2f}×", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
