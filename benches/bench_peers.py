"""kafkalite against its peers in one run (issue 14): a real Apache Kafka broker (KRaft, one
node on 127.0.0.1, started and stopped here; tests/support/kafka_broker.py) driven by confluent-kafka and
kafka-python, and Spark's own Kafka source (spark-sql-kafka-0-10 from Maven Central, through
tests/spark_kafka/pom.xml) against kafkalite's Spark source on the same records. Beside the Spark
rows, a reference that is not kafkalite: Spark's own Parquet reader on a Parquet copy of the same
rows into the same sink, the ceiling any source feeding that sink reaches on this machine in this
run, reported as the ratio it gets against the Kafka source.

    python benches/bench_peers.py [--records N] [--spark-records N] [--rounds 3] [--only ROW ...]
                                  [--out benches/results] [--replace]

Records have 8-byte keys and 100-byte values. Rounds are interleaved (every row once per round,
the order of the sides alternating) and the table shows medians. Every measurement counts the
records back (end offsets, or the rows read/written) and stops the run if any are missing.
Results: ``peers-<date>.json``, ``.md`` and ``.png`` (ratios) in --out, a new name unless
--replace. A ratio above 1 means kafkalite is ahead (faster, lower latency, less memory)."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(
    0, str(HERE.parent / "tests" / "support")
)  # tests/support/: kafka_broker.py (the broker), maven_jars.py (Spark's Kafka source)

import confluent_kafka as ck  # noqa: E402
import confluent_kafka.admin  # noqa: E402 (makes ck.admin available)
import kafka_broker  # noqa: E402
import kafkalite  # noqa: E402
import maven_jars  # noqa: E402
from kafkalite import Admin, Consumer, Producer, TopicPartition  # noqa: E402
from peers_common import (  # noqa: E402
    LATENCY_RECORDS,
    LATENCY_WARMUP,
    PARTITIONS,
    VALUE,
    KafkaEndpoint,
    Missing,
    expect,
    finish_run,
    fmt,
    local_spark,
    output_base,
    paced_latency,
    percentile,
    plot,
    stream_into_parquet,
    timed,
)
from report import write_report  # noqa: E402

TINY = (2, 34)  # partitions of the two tiny topics whose count() difference gives the per-task cost
#: The Spark rows' reference sides (not kafkalite, not a peer): Spark's Parquet reader on a Parquet
#: copy of the same rows, into the same sink. count() through Parquet reads only the row counts in
#: the files' footers, which a source that cannot prune columns (every Python data source) never
#: can, so count() also gets the ceiling of a reader that hands Spark every column (a noop sink).
CEILING = "ceiling: Spark's Parquet reader"
CEILING_ALL_COLUMNS = "ceiling: Spark's Parquet reader, every column (noop sink)"
REFERENCE_SIDES = (CEILING, CEILING_ALL_COLUMNS)
PEER_SPARK = "Spark's Kafka source via the broker"

ROWS = {
    "send": "`send()` per record, defaults",
    "acks_all": "`send(acks='all')`",
    "send_batch": "`send_batch` with keys, 1,000 per call",
    "consume": "consumer iteration (keys and values)",
    "poll_arrow": "`poll_arrow`",
    "latency_p50": "produce→consume p50 across processes",
    "latency_p99": "produce→consume p99 across processes",
    "spark_count": "Spark `local[2]` `count()`",
    "spark_parquet": "Spark → Parquet",
    "spark_stream": "Spark stream, AvailableNow → Parquet",
    "spark_task": "Spark reader's per-task overhead",
    "rss": "producer peak RSS (VmHWM), one partition",
}
#: unit, and whether a larger figure is better (throughput) or worse (latency, time, memory)
UNITS = {
    "send": ("rec/s", True),
    "acks_all": ("rec/s", True),
    "send_batch": ("rec/s", True),
    "consume": ("rec/s", True),
    "poll_arrow": ("rec/s", True),
    "latency_p50": ("µs", False),
    "latency_p99": ("µs", False),
    "spark_count": ("rows/s", True),
    "spark_parquet": ("rows/s", True),
    "spark_stream": ("rows/s", True),
    "spark_task": ("ms", False),
    "rss": ("MB", False),
}


# -- kafkalite ------------------------------------------------------------------------------------
class Kafkalite:
    def __init__(self, data: str) -> None:
        self.data = data
        self.admin = Admin(data)
        import pyarrow  # noqa: F401 (imported now: the first poll_arrow() would otherwise time the import)

    def topic(self, name: str, partitions: int = PARTITIONS) -> str:
        self.admin.create_topic(name, partitions=partitions)
        return name

    def count(self, topic: str) -> int:
        """Records in ``topic`` (end offsets; every topic here starts at offset 0)."""
        with Consumer(self.data) as c:
            tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or ())]
            return sum(c.end_offsets(tps).values())

    def drop(self, topic: str) -> None:
        self.admin.delete_topic(topic)

    def send(self, topic: str, keys: list[bytes], **config: object) -> None:
        with Producer(self.data, **config) as p:
            send = p.send
            for k in keys:
                send(topic, VALUE, key=k)

    def send_batch(self, topic: str, keys: list[bytes], per_call: int) -> None:
        values = [VALUE] * per_call
        with Producer(self.data) as p:
            for i in range(0, len(keys), per_call):
                chunk = keys[i : i + per_call]
                p.send_batch(topic, values[: len(chunk)], keys=chunk)

    def iterate(self, topic: str) -> int:
        n = 0
        with Consumer(self.data, topic, auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
            for r in c:
                r.key, r.value  # noqa: B018 (what a user reads)
                n += 1
        return n

    def poll_arrow(self, topic: str) -> int:
        n = 0
        with Consumer(self.data, topic, auto_offset_reset="earliest") as c:
            while batch := c.poll_arrow():
                n += sum(t.num_rows for t in batch.values())
        return n


# -- the broker, through confluent-kafka and kafka-python ------------------------------------------
class Broker(KafkaEndpoint):
    def __init__(self, work: Path) -> None:
        kafka_broker.ensure_jars()
        self.broker = kafka_broker.KafkaBroker(
            work / "broker-logs", work / "broker", **{"log.segment.delete.delay.ms": "0"}
        )
        try:
            self.broker.start()
        except BaseException:  # Ctrl-C while it starts: no JVM left behind
            self.broker.stop()
            raise
        super().__init__(self.broker.bootstrap_servers)

    def stop(self) -> None:
        self.close()
        self.broker.stop()

    def kafka_python_send(self, topic: str, keys: list[bytes]) -> None:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=self.bootstrap, acks=1)
        futures = [p.send(topic, VALUE, key=k) for k in keys]
        p.flush(120)
        p.close()
        failed = [f for f in futures if not f.succeeded()]
        if failed:
            raise Missing(f"kafka-python: {len(failed)} records failed, first {failed[0].exception!r}")

    def kafka_python_consume(self, topic: str, n: int) -> int:
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP

        c = KafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000
        )
        tps = [KTP(topic, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got = 0
        for r in c:
            r.key, r.value  # noqa: B018
            got += 1
            if got == n:
                break
        c.close()
        return got


# -- Spark ----------------------------------------------------------------------------------------
class SparkBench:
    def __init__(self, kl: Kafkalite, broker: Broker, records: int, work: Path) -> None:
        import pyspark

        self.kafka_version, jars = maven_jars.spark_kafka_jars(pyspark.__version__)
        self.kl, self.broker, self.n, self.work = kl, broker, records, work
        keys = [i.to_bytes(8, "big") for i in range(records)]
        kl.send_batch(kl.topic("spark"), keys, 100_000)
        broker.send(broker.topic("spark"), keys, **{"batch.size": 1 << 20})
        del keys
        expect(kl.count("spark"), records, "kafkalite spark topic")
        expect(broker.count("spark"), records, "broker spark topic")
        tiny_keys = [i.to_bytes(8, "big") for i in range(10 * TINY[1])]
        for parts in TINY:
            for side in (kl, broker):
                side.topic(f"tiny{parts}", parts)
            kl_p = Producer(kl.data)
            for p in range(parts):
                kl_p.send_batch(f"tiny{parts}", [VALUE] * 10, partition=p)
            kl_p.close()
            cp, failed = broker.producer()
            for i, k in enumerate(tiny_keys[: 10 * parts]):
                cp.produce(f"tiny{parts}", VALUE, k, partition=i % parts)
            if cp.flush(60) or failed:
                raise Missing("tiny topic on the broker")
        self.spark = local_spark(jars)
        for side in ("kafkalite", "kafka"):  # untimed: Python workers and JVM classes load on first use
            expect(self.reader(side, f"tiny{TINY[0]}").count(), 10 * TINY[0], f"Spark warm-up through {side}")
        # The ceiling's input: the same rows in Spark's own format, written once, untimed.
        self.parquet = str(work / "spark-rows.parquet")
        self.reader("kafkalite", "spark").write.parquet(self.parquet)
        self.parquet_schema = self.spark.read.parquet(self.parquet).schema
        expect(self.spark.read.parquet(self.parquet).count(), records, "Parquet copy of the Spark rows")

    def stop(self) -> None:
        self.spark.stop()

    def reader(self, side: str, topic: str, stream: bool = False):
        """``side``: "kafkalite", "kafka" (the broker) or "parquet" (the ceiling: Spark's Parquet
        reader, and for a stream its file source, on the Parquet copy of ``topic`` "spark")."""
        r = self.spark.readStream if stream else self.spark.read
        if side == "parquet":
            assert topic == "spark", "only the Spark rows have a Parquet copy"
            return r.schema(self.parquet_schema).parquet(self.parquet)
        if side == "kafkalite":
            return (
                r.format("kafkalite")
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .load(self.kl.data)
            )
        return (
            r.format("kafka")
            .option("kafka.bootstrap.servers", self.broker.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )

    def count(self, side: str) -> float:
        s, got = timed(lambda: self.reader(side, "spark").count())
        expect(got, self.n, f"Spark count() through {side}")
        return self.n / s

    def all_columns(self, side: str) -> float:
        """Every column read and handed to Spark, then dropped (a noop sink): what count() costs
        a reader that cannot prune columns."""
        s, _ = timed(lambda: self.reader(side, "spark").write.format("noop").mode("overwrite").save())
        return self.n / s

    def _out(self, name: str) -> str:
        out = self.work / name
        shutil.rmtree(out, ignore_errors=True)
        return str(out)

    def to_parquet(self, side: str) -> float:
        out = self._out(f"parquet-{side}")
        s, _ = timed(lambda: self.reader(side, "spark").write.parquet(out))
        expect(self.spark.read.parquet(out).count(), self.n, f"Parquet written through {side}")
        shutil.rmtree(out)
        return self.n / s

    def stream(self, side: str) -> float:
        out, checkpoint = self._out(f"stream-{side}"), self._out(f"checkpoint-{side}")

        def run() -> None:
            failed = stream_into_parquet(self.reader(side, "spark", stream=True), out, checkpoint)
            if failed is not None:
                raise Missing(f"the {side} stream failed: {failed}")

        s, _ = timed(run)
        expect(self.spark.read.parquet(out).count(), self.n, f"stream written through {side}")
        shutil.rmtree(out)
        shutil.rmtree(checkpoint)
        return self.n / s

    def task_ms(self, side: str) -> float:
        """Wall-clock milliseconds each extra task adds to a `count()` in local[2]: the
        difference between two tiny topics (10 records per partition), per extra partition."""
        times = []
        for parts in TINY:
            s, got = timed(lambda parts=parts: self.reader(side, f"tiny{parts}").count())
            expect(got, 10 * parts, f"Spark count() of tiny{parts} through {side}")
            times.append(s)
        return (times[1] - times[0]) / (TINY[1] - TINY[0]) * 1000


# -- the rows -------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, broker: Broker) -> None:
        self.n, self.work = args.records, work
        self.keys = [i.to_bytes(8, "big") for i in range(self.n)]
        self.kl = Kafkalite(str(work / "data"))
        self.broker = broker
        self.rss_file: dict[str, list[float]] = {"kafkalite": [], "confluent-kafka": []}
        self.spark_records = args.spark_records
        self.spark: SparkBench | None = None
        self.read_topics: dict[str, str] = {}
        self.cache: dict[str, float] = {}  # a peer figure two rows share, per round

    def close(self) -> None:
        if self.spark is not None:
            self.spark.stop()

    # Each measurement returns one figure; the sides of a row run in turn.
    def produce(self, side, kind: str, **config: object) -> float:
        topic = side.topic(f"p-{uuid.uuid4().hex[:8]}")
        if kind == "send":
            fn = lambda: side.send(topic, self.keys, **config)  # noqa: E731
        elif kind == "batch":
            fn = lambda: side.send_batch(topic, self.keys, 1000)  # noqa: E731
        else:
            fn = lambda: side.kafka_python_send(topic, self.keys)  # noqa: E731
        s, _ = timed(fn)
        expect(side.count(topic), self.n, f"{kind} {config} to {type(side).__name__}")
        side.drop(topic)
        return self.n / s

    def read_topic(self, side) -> str:
        """One topic of --records keyed records per side, written once, read by every round."""
        name = type(side).__name__
        if name not in self.read_topics:
            topic = side.topic("read")
            if isinstance(side, Kafkalite):
                side.send_batch(topic, self.keys, 1000)
            else:
                side.send(topic, self.keys, **{"batch.size": 1 << 20})
            expect(side.count(topic), self.n, f"read topic on {name}")
            self.read_topics[name] = topic
        return self.read_topics[name]

    def consume(self, side, how: str = "iterate", **config: object) -> float:
        topic = self.read_topic(side)
        if how == "iterate":
            fn = lambda: side.iterate(topic)  # noqa: E731
        elif how == "arrow":
            fn = lambda: side.poll_arrow(topic)  # noqa: E731
        elif how == "kafka-python":
            fn = lambda: side.kafka_python_consume(topic, self.n)  # noqa: E731
        else:
            fn = lambda: side.consume(topic, self.n, **config)  # noqa: E731
        s, got = timed(fn)
        expect(got, self.n, f"{how} {config} from {type(side).__name__}")
        return self.n / s

    def tuned_confluent_consume(self) -> float:
        if "tuned" not in self.cache:
            self.cache["tuned"] = self.consume(self.broker, "confluent", **{"fetch.queue.backoff.ms": 10})
        return self.cache["tuned"]

    def latency(self, kind: str, **config: object) -> tuple[float, float]:
        side = self.kl if kind == "kafkalite" else self.broker
        topic = side.topic(f"lat-{uuid.uuid4().hex[:8]}", 1)
        target = self.kl.data if kind == "kafkalite" else self.broker.bootstrap
        total = LATENCY_RECORDS + LATENCY_WARMUP
        child = [sys.executable, str(HERE / "peers_child.py"), "latency", kind, target, topic, str(total)]
        if kind == "kafkalite":
            p = Producer(self.kl.data, **config)
            send, flush = (lambda v: p.send(topic, v)), p.flush
        else:
            p, failed = self.broker.producer(**config)
            send, flush = (lambda v: (p.produce(topic, v), p.poll(0))), (lambda: p.flush(30))
        lat = paced_latency(child, send, flush, total)
        if kind == "kafkalite":
            p.close()
        elif failed:
            raise Missing(f"confluent-kafka latency producer: {len(failed)} records failed")
        expect(len(lat), LATENCY_RECORDS, f"{kind} latency records")
        expect(side.count(topic), total + 1, f"{kind} latency topic")
        side.drop(topic)
        return statistics.median(lat), percentile(lat, 0.99)

    def latencies(self, which: int) -> dict[str, Callable[[], float]]:
        """p50 (which=0) or p99 (1); both rows come from the same runs, made once a round."""

        def get(key: str, kind: str, **config: object) -> Callable[[], float]:
            def run() -> float:
                if key not in self.cache:
                    self.cache[key] = self.latency(kind, **config)  # type: ignore[assignment]
                return self.cache[key][which]  # type: ignore[index]

            return run

        tuned = {"socket.nagle.disable": True, "acks": 1}
        return {
            "kafkalite": get("kl", "kafkalite"),
            "confluent-kafka `linger.ms=0` via the broker": get(
                "c0", "confluent", **{"linger.ms": 0, **tuned}
            ),
            "confluent-kafka `linger.ms=1` via the broker": get(
                "c1", "confluent", **{"linger.ms": 1, **tuned}
            ),
        }

    def spark_bench(self) -> SparkBench:
        if self.spark is None:
            self.spark = SparkBench(self.kl, self.broker, self.spark_records, self.work)
        return self.spark

    def rss(self, kind: str) -> float:
        side = self.kl if kind == "kafkalite" else self.broker
        topic = side.topic(f"rss-{uuid.uuid4().hex[:8]}", 1)
        target = self.kl.data if kind == "kafkalite" else self.broker.bootstrap
        os.sync()
        done = subprocess.run(
            [sys.executable, str(HERE / "peers_child.py"), "rss", kind, target, topic, str(self.n)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise Missing(f"the {kind} RSS producer failed:\n{done.stderr[-2000:]}")
        expect(side.count(topic), self.n, f"{kind} RSS topic")
        side.drop(topic)
        import json

        out = json.loads(done.stdout)
        self.cache[f"rss-file-{kind}"] = out["rss_file_peak_mb"]
        return out["vmhwm_mb"]

    def rows(self) -> dict[str, dict[str, Callable[[], float]]]:
        """Row -> {side: measurement}; the first side is kafkalite, the rest its peers."""
        kl, b = self.kl, self.broker
        sp = lambda name: lambda side: lambda: getattr(self.spark_bench(), name)(side)  # noqa: E731
        return {
            "send": {
                "kafkalite": lambda: self.produce(kl, "send"),
                "confluent-kafka acks=1": lambda: self.produce(b, "send", acks=1),
                "kafka-python acks=1": lambda: self.produce(b, "kafka-python"),
            },
            "acks_all": {
                "kafkalite": lambda: self.produce(kl, "send", acks="all"),
                "confluent-kafka acks=all": lambda: self.produce(b, "send", acks="all"),
            },
            "send_batch": {
                "kafkalite": lambda: self.produce(kl, "batch"),
                "confluent-kafka, 1 MiB batches": lambda: self.produce(b, "send", **{"batch.size": 1 << 20}),
            },
            "consume": {
                "kafkalite": lambda: self.consume(kl),
                "confluent-kafka `consume(10000)`, `fetch.queue.backoff.ms=10`": self.tuned_confluent_consume,
                "confluent-kafka `consume(10000)`, defaults": lambda: self.consume(b, "confluent"),
                "kafka-python iteration": lambda: self.consume(b, "kafka-python"),
            },
            "poll_arrow": {
                "kafkalite": lambda: self.consume(kl, "arrow"),
                "confluent-kafka `consume(10000)`, `fetch.queue.backoff.ms=10`": self.tuned_confluent_consume,
            },
            "latency_p50": self.latencies(0),
            "latency_p99": self.latencies(1),
            **{
                row: {
                    "kafkalite": sp(name)("kafkalite"),
                    PEER_SPARK: sp(name)("kafka"),
                    **({CEILING: sp(name)("parquet")} if row != "spark_task" else {}),
                    **({CEILING_ALL_COLUMNS: sp("all_columns")("parquet")} if row == "spark_count" else {}),
                }
                for row, name in (
                    ("spark_count", "count"),
                    ("spark_parquet", "to_parquet"),
                    ("spark_stream", "stream"),
                    ("spark_task", "task_ms"),
                )
            },
            "rss": {
                "kafkalite": lambda: self.rss("kafkalite"),
                "confluent-kafka": lambda: self.rss("confluent"),
            },
        }


# -- the report -----------------------------------------------------------------------------------
def ratio(row: str, kafkalite: float, peer: float) -> float:
    return kafkalite / peer if UNITS[row][1] else peer / kafkalite


def versions(spark: SparkBench | None) -> dict[str, str]:
    import kafka
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    return {
        "kafkalite": kafkalite.__version__,
        "Kafka broker": f"{kafka_broker.KAFKA_VERSION} (KRaft, one node, 127.0.0.1)",
        "confluent-kafka": f"{ck.version()} (librdkafka {ck.libversion()[0]})",
        "kafka-python": kafka.__version__,
        "pyspark": pyspark.__version__,
        "spark-sql-kafka-0-10": spark.kafka_version if spark else "(not run)",
        "java": java,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
    }


def report(
    args,
    bench: Bench,
    figures: dict,
    failures: dict[str, str],
    interrupted: str,
    load: tuple[float, float],
    seconds: float,
) -> None:
    base = output_base(args.out, "peers", args.replace)
    table, plot_rows, ceilings = [], [], []
    for row, sides in figures.items():
        unit = UNITS[row][0]
        if row in failures:
            table.append(f"| {ROWS[row]} | failed | {failures[row].replace('|', '/')} | |")
            continue
        if not sides["kafkalite"]:
            continue  # not reached before an interruption
        kl = statistics.median(sides["kafkalite"])
        for peer, values in sides.items():
            if peer == "kafkalite" or peer in REFERENCE_SIDES or not values:
                continue
            r = ratio(row, kl, statistics.median(values))
            kl_cell = fmt(kl, unit)
            if row == "rss" and bench.rss_file["kafkalite"]:
                kl_cell += f" ({statistics.median(bench.rss_file['kafkalite']):.0f} MB file-backed)"
            table.append(
                f"| {ROWS[row]} | {kl_cell} | {peer}: {fmt(statistics.median(values), unit)} | {r:.2f}× |"
            )
            plot_rows.append((f"{ROWS[row]} vs {peer}", r))
        for ceiling, values in sides.items():
            if ceiling not in REFERENCE_SIDES or not values or not sides[PEER_SPARK]:
                continue
            ref, peer_value = statistics.median(values), statistics.median(sides[PEER_SPARK])
            r = ratio(row, ref, peer_value)
            table.append(
                f"| {ROWS[row]}, {ceiling} (a reference, not kafkalite) | {fmt(ref, unit)} "
                f"(kafkalite reaches {ratio(row, kl, ref):.2f} of it) | {PEER_SPARK}: {fmt(peer_value, unit)} "
                f"| ceiling {r:.2f}× |"
            )
            label = f"{ROWS[row]}, {ceiling} vs Spark's Kafka source"
            plot_rows.append((label, r))
            ceilings.append(label)
    plot_name = base.name + ".png"
    spark_size = f" (Spark rows: {args.spark_records:,})" if bench.spark is not None else ""
    ver = versions(bench.spark)
    mismatch = []
    if bench.spark is not None and bench.spark.kafka_version != ver["pyspark"]:
        mismatch = [
            "",
            f"Maven Central has no spark-sql-kafka-0-10 {ver['pyspark']} (pyspark's version): "
            f"Spark's Kafka source ran from {bench.spark.kafka_version}, an earlier release of the same major version.",
        ]
    lines = [
        f"# kafkalite against its peers (`python benches/bench_peers.py {' '.join(sys.argv[1:])}`)",
        "",
        f"{args.records:,} records{spark_size} of 8-byte keys and 100-byte values, "
        f"{PARTITIONS} partitions (latency and RSS: 1); medians of {args.rounds} interleaved rounds; "
        f"a ratio above 1 means kafkalite is ahead. 1-minute load average {load[0]:.2f} at the start, "
        f"{load[1]:.2f} at the end; {seconds / 60:.1f} minutes.",
        *(["", f"**{interrupted}**"] if interrupted else []),
        "",
        "| workload | kafkalite | peer | ratio |",
        "|---|---:|---:|---:|",
        *table,
        "",
        f"![ratios]({plot_name})",
        "",
        "Latency: one record every 0.5 ms for "
        f"{LATENCY_RECORDS:,} records after {LATENCY_WARMUP:,} warm-up records (3 s), the consumer in another process; "
        "broker path tuned: producer `linger.ms` as shown, `acks=1`, `socket.nagle.disable=true`; consumer "
        "`fetch.wait.max.ms=10`, `fetch.queue.backoff.ms=0`, `socket.nagle.disable=true`. "
        "Ceiling rows (a reference, not kafkalite): Spark's own Parquet reader on a Parquet copy of the same "
        "rows (written once from kafkalite's topic, untimed), into the same sink (a stream: Spark's file source "
        "with AvailableNow); their ratio is what a perfect source would get against Spark's Kafka source in this "
        "run. Parquet's `count()` reads only the footers' row counts, which no source without column pruning "
        "(every Python data source) can do, hence the every-column ceiling: the same rows into a noop sink. "
        "The records' values are all the same 100 bytes, which Parquet stores dictionary-encoded, so the "
        "ceiling reads a fraction of the bytes a log reader does: a generous ceiling. "
        f"Spark per-task overhead: `count()` of a {TINY[1]}-partition topic minus a {TINY[0]}-partition one "
        "(10 records a partition), per extra task, wall-clock in `local[2]`. confluent-kafka producers use "
        "`delivery.report.only.error=true` (a callback only for a failure) and wait in `poll()` when "
        "librdkafka's queue is full; kafkalite's `send()` returns a future per record. The consumer rows read "
        "a topic written once per side by its bulk path (kafkalite `send_batch`, 1,000 keyed records a call; "
        "confluent-kafka with 1 MiB batches).",
        *mismatch,
        "",
        "Versions: " + "; ".join(f"{k} {v}" for k, v in ver.items()) + ".",
    ]
    results = {
        "records": args.records,
        "spark_records": args.spark_records,
        "rounds": args.rounds,
        "interrupted": interrupted,
        "load_average_1min": {"start": load[0], "end": load[1]},
        "versions": ver,
        "units": {row: UNITS[row][0] for row in figures},
        "reference_sides": list(REFERENCE_SIDES),
        "figures": figures,
        "rss_file_backed_mb": bench.rss_file,
    }
    write_report(str(base.parent), base.name, results, lines)
    title = (
        f"kafkalite / peer, {args.records:,} records (Spark {args.spark_records:,}), median of {args.rounds}, "
        f"load {load[0]:.1f}-{load[1]:.1f}"
    )
    plot(plot_rows, base.with_suffix(".png"), title, references=ceilings)


def run_round(bench: Bench, rows: dict, r: int, figures: dict, failures: dict[str, str]) -> None:
    """Every row once, the order of its sides reversed every other round."""
    for row, sides in rows.items():
        order = list(sides.items())
        for side, fn in order if r % 2 == 0 else order[::-1]:
            if row in failures:
                break
            try:
                value = fn()
            except Missing:
                raise
            # e.g. Spark's "Python worker failed to connect back" on a busy machine: the other rows go on
            except Exception as e:
                failures[row] = (
                    f"{side}: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
                )
                print(f"round {r + 1} {row:13} FAILED {failures[row]}", flush=True)
                continue
            figures[row][side].append(value)
            print(f"round {r + 1} {row:13} {side}: {fmt(value, UNITS[row][0])}", flush=True)
    for kind, label in (("kafkalite", "kafkalite"), ("confluent", "confluent-kafka")):
        if f"rss-file-{kind}" in bench.cache:
            bench.rss_file[label].append(bench.cache.pop(f"rss-file-{kind}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="records per producer/consumer row")
    ap.add_argument("--spark-records", type=int, default=4_000_000, help="records the Spark rows read")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", action="append", choices=list(ROWS), help="run only this row (repeatable)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--replace", action="store_true", help="overwrite today's peers-<date> files")
    args = ap.parse_args()
    if args.records < 1000 or args.spark_records < 1 or args.rounds < 1:
        ap.error("--records must be at least 1000, --spark-records and --rounds at least 1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below on kill, too
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C even when started in the background
    load_start = os.getloadavg()[0]
    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="kafkalite-peers-"))
    broker = bench = None
    try:
        broker = Broker(work)
        bench = Bench(args, work, broker)
        rows = {row: sides for row, sides in bench.rows().items() if not args.only or row in args.only}
        failures: dict[str, str] = {}  # row -> why it stopped (its other figures are dropped)
        figures: dict[str, dict[str, list[float]]] = {
            row: {side: [] for side in sides} for row, sides in rows.items()
        }
        interrupted = ""
        try:
            for r in range(args.rounds):
                bench.cache.clear()
                run_round(bench, rows, r, figures, failures)
        except KeyboardInterrupt:  # keep what was measured: the report says where it stopped
            if not any(values for sides in figures.values() for values in sides.values()):
                raise
            interrupted = (
                f"Interrupted (Ctrl-C) in round {r + 1} of {args.rounds}: medians of the rounds measured."
            )
            print(interrupted, flush=True)
        load = (load_start, os.getloadavg()[0])
        report(args, bench, figures, failures, interrupted, load, time.perf_counter() - began)
        if failures:
            raise SystemExit(f"{len(failures)} row(s) failed (the report says which): {', '.join(failures)}")
        if interrupted:
            raise SystemExit(130)
    finally:
        if bench is not None:
            bench.close()
        finish_run(broker, work)


if __name__ == "__main__":
    main()
