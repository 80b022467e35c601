"""Spark benchmark, --records records of 100-byte values in 4 partitions, local[2].

``scan`` (issue 5, the default): kafkalite -> count(), kafkalite -> Parquet, and Spark reading
the same rows from Parquet files and from JSON lines (count and Parquet copy); rows/s and ratios.

``pushdown`` (issue 25): two selective queries, the last 1% by timestamp and 1% of the records
as one partition's offset range, each run with filter pushdown (the source seeks through the
time and offset indexes), without it (the source scans, Spark filters), and through Spark's own
Kafka source (spark-sql-kafka-0-10, from Maven Central) reading the same files from
``kafkalite serve``, all in one run; count() of the matching rows, which must agree.

``phases``: where those two pushdown queries and the floor under them spend their time, phase
by phase (``spark_phases.py``: Spark's event log and timestamps inside kafkalite's source).

``--conf KEY=VALUE`` (repeatable) sets a Spark setting for the whole session, so for every side
alike; the report names it.

    python benches/bench_spark.py [scan|pushdown|phases] [--records 10000000] [--runs 2] [--conf K=V] [--out benches/results]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from peers_common import local_spark
from report import machine, write_report

HERE = os.path.dirname(os.path.abspath(__file__))


def best_of(n: int, fn) -> float:
    times = []
    for _ in range(n):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="?", choices=["scan", "pushdown", "phases"], default="scan")
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    args.settings = dict(c.split("=", 1) for c in args.conf)
    if args.what == "pushdown":
        pushdown(args)
    elif args.what == "phases":
        phases(args)
    else:
        scan(args)


def settings_note(settings: dict[str, str]) -> str:
    if not settings:
        return "Spark's default settings"
    return "every side with " + ", ".join(f"`{k}={v}`" for k, v in settings.items())


def command(args: argparse.Namespace) -> str:
    conf = "".join(f" --conf {c}" for c in args.conf)
    return f"python benches/bench_spark.py {args.what} --records {args.records} --runs {args.runs}{conf}"


def spark_machine(extra: str = "") -> str:
    """The machine line of this script's reports: ``report.machine``, pyspark's version, ``extra``."""
    import pyspark

    return f"{machine()}, pyspark {pyspark.__version__}{extra}"


def run_facts(
    args: argparse.Namespace, records: int, load_before: tuple[float, float, float], extra: str = ""
) -> dict:
    """What a run's JSON results open with: the machine (``spark_machine(extra)``), its records,
    runs and Spark settings, and the load average before it and now, at its end."""
    return {
        "machine": spark_machine(extra),
        "records": records,
        "runs": args.runs,
        "settings": args.settings,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }


def machine_and_load(results: dict) -> str:
    """The report's sentence on where it ran: ``run_facts``' machine and load averages."""
    before, after = results["load_before"], results["load_after"]
    return (
        f"Machine: {results['machine']}. Load average (1, 5, 15 min) before: {before[0]:.2f}, {before[1]:.2f}, "
        f"{before[2]:.2f}; after: {after[0]:.2f}, {after[1]:.2f}, {after[2]:.2f}."
    )


def scan(args: argparse.Namespace) -> None:
    from kafkalite import Admin, Producer

    work = tempfile.mkdtemp(prefix="kl-spark-bench-")
    data = os.path.join(work, "data")
    Admin(data).create_topic("events", 4)
    n = args.records
    value = b"v" * 100
    began = time.perf_counter()
    with Producer(data) as producer:
        chunk = 100_000
        for start in range(0, n, chunk):
            producer.send_batch("events", [value] * min(chunk, n - start), partition=(start // chunk) % 4)
    produce_s = time.perf_counter() - began
    print(f"produced {n:,} records in {produce_s:.1f} s", flush=True)

    spark = local_spark(settings=args.settings)
    kl = lambda: spark.read.format("kafkalite").option("subscribe", "events").load(data)  # noqa: E731
    parquet_src, json_src = os.path.join(work, "src.parquet"), os.path.join(work, "src.json")
    kl().write.parquet(parquet_src)  # the same rows, as Spark's own formats
    spark.read.parquet(parquet_src).write.json(json_src)
    assert kl().count() == n

    def copy(df_fn, name):
        def run():
            out = os.path.join(work, name)
            shutil.rmtree(out, ignore_errors=True)
            df_fn().write.parquet(out)

        return run

    results = {
        "machine": spark_machine(),
        "records": n,
        "count_s": {
            "kafkalite": best_of(args.runs, lambda: kl().count()),
            "parquet": best_of(args.runs, lambda: spark.read.parquet(parquet_src).count()),
            "json": best_of(args.runs, lambda: spark.read.json(json_src).count()),
        },
        "to_parquet_s": {
            "kafkalite": best_of(args.runs, copy(kl, "out-kl")),
            "parquet": best_of(args.runs, copy(lambda: spark.read.parquet(parquet_src), "out-pq")),
            "json": best_of(args.runs, copy(lambda: spark.read.json(json_src), "out-js")),
        },
    }
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    rate = lambda s: n / s / 1e6  # noqa: E731
    c, w = results["count_s"], results["to_parquet_s"]
    lines = [
        "# Spark reading and writing kafkalite (`python benches/bench_spark.py`)",
        "",
        f"{n:,} records of 100-byte values in 4 partitions, `local[2]`; best of {args.runs}. Machine: {results['machine']}.",
        "",
        "| source | `count()` | rows/s | → Parquet | rows/s |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {src} | {c[src]:.2f} s | {rate(c[src]):.2f} M | {w[src]:.2f} s | {rate(w[src]):.2f} M |"
            for src in ("kafkalite", "parquet", "json")
        ),
        "",
        f"kafkalite / Parquet: count {c['parquet'] / c['kafkalite']:.2f}×, copy to Parquet {w['parquet'] / w['kafkalite']:.2f}× "
        f"(of Spark's own speed); kafkalite / JSON lines: count {c['json'] / c['kafkalite']:.2f}×, copy {w['json'] / w['kafkalite']:.2f}×.",
    ]
    write_report(args.out, "spark", results, lines)


# -- pushdown ------------------------------------------------------------------------------------
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
T0 = 1_700_000_000_000
CHUNKS = 400  # appends of n/400 records, one second apart, round-robin over the 4 partitions


def write_events(data: str, n: int) -> None:
    """Topic "events": n records of 100 bytes through the bulk path, timestamps rising by a
    second per chunk, so the last 1% of the time is the last 4 chunks (one per partition)."""
    from kafkalite import Admin, Producer
    from kafkalite.log import Log

    Admin(data).create_topic("events", 4)
    value, chunk = b"v" * 100, n // CHUNKS
    with Producer(data) as producer:
        for i in range(CHUNKS):
            producer.send_batch("events", [value] * chunk, partition=i % 4, timestamp_ms=T0 + i * 1000)
    written = 0
    for p in range(4):
        with Log(os.path.join(data, f"events-{p}"), readonly=True) as log:
            written += log.end_offset - log.start_offset
    if written != chunk * CHUNKS:
        raise SystemExit(f"wrote {written:,} records, expected {chunk * CHUNKS:,}")


def register_minimal_source(spark) -> None:
    """``format("minimal")``: a Python data source with one task of 10 rows made of nothing,
    for the floor any Python data source pays per query (Spark's planning round trips to its
    Python planner workers, one Python task)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Reader(DataSourceReader):
        def partitions(self) -> list:
            return [InputPartition(0)]

        def read(self, partition: InputPartition):
            import pyarrow as pa

            yield pa.record_batch([pa.array([0] * 10, pa.int32())], names=["partition"])

    class Minimal(DataSource):
        @classmethod
        def name(cls) -> str:
            return "minimal"

        def schema(self) -> str:
            return "partition int"

        def reader(self, schema: object) -> Reader:
            return Reader()

    spark.dataSource.register(Minimal)


def pushdown(args: argparse.Namespace) -> None:
    import maven_jars  # tests/ is on the path through peers_common
    import pyspark
    from kafkalite.server import Server

    load_before = os.getloadavg()
    work = tempfile.mkdtemp(prefix="kl-spark-pushdown-")
    data = os.path.join(work, "data")
    n = args.records - args.records % CHUNKS
    began = time.perf_counter()
    write_events(data, n)
    print(f"wrote {n:,} records in {time.perf_counter() - began:.1f} s", flush=True)
    kafka_version, jars = maven_jars.spark_kafka_jars(pyspark.__version__)
    queries = pushdown_queries(n)
    spark = local_spark(jars, args.settings)
    register_minimal_source(spark)
    times: dict[str, dict[str, float]] = {}
    with Server(data) as server:

        def kafkalite(where: str, on: bool) -> int:
            spark.conf.set(PUSHDOWN, "true" if on else "false")
            return (
                spark.read.format("kafkalite").option("subscribe", "events").load(data).where(where).count()
            )

        def kafka(where: str) -> int:
            return (
                spark.read.format("kafka")
                .option("kafka.bootstrap.servers", server.bootstrap_servers)
                .option("subscribe", "events")
                .load()
                .where(where)
                .count()
            )

        sides = {
            "kafkalite, pushdown": lambda w: kafkalite(w, True),
            "kafkalite, no pushdown": lambda w: kafkalite(w, False),
            "Spark's Kafka source": kafka,
        }
        tiny = "partition = 0 AND offset < 10"
        for run in sides.values():  # untimed: Python workers and JVM classes load on first use
            run(tiny)
        # What any query of this source costs here (planning, Python workers, one task): the
        # floor under the pushdown figures.
        floor = best_of(args.runs, lambda: kafkalite(tiny, True))
        print(f"floor (10 records, pushdown): {floor:.2f} s", flush=True)
        # Under that floor: the same count() of 10 rows from the least a Python data source can
        # be, and from Spark alone (no Python): what is left to any source, and to kafkalite's.
        minimal_s = best_of(
            args.runs, lambda: spark.read.format("minimal").load().where("partition = 0").count()
        )
        spark_s = best_of(args.runs, lambda: spark.range(10).where("id < 5").count())
        print(f"minimal Python source: {minimal_s:.2f} s, spark.range: {spark_s:.2f} s", flush=True)
        for name, where in queries.items():
            times[name] = {}
            counts = set()
            for side, run in sides.items():
                best = float("inf")
                for _ in range(args.runs):
                    began = time.perf_counter()
                    counts.add(run(where))
                    best = min(best, time.perf_counter() - began)
                times[name][side] = best
                print(f"{name}, {side}: {best:.2f} s", flush=True)
            if counts != {n // 100}:
                raise SystemExit(f"{name}: the sides counted {sorted(counts)}, expected {n // 100:,}")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    results = {
        **run_facts(args, n, load_before, f", spark-sql-kafka {kafka_version}"),
        "queries": queries,
        "seconds": times,
        "floor_s": floor,
        "minimal_python_source_s": minimal_s,
        "spark_range_s": spark_s,
    }
    lines = [
        f"# Spark filter pushdown (`{command(args)}`)",
        "",
        f"{n:,} records of 100-byte values in 4 partitions, `local[2]`, {settings_note(args.settings)}, "
        f"`count()` of the 1% that match; best of {args.runs}. Spark's Kafka source reads the same files from "
        "`kafkalite serve` on 127.0.0.1. " + machine_and_load(results),
        "",
        "| query | kafkalite, pushdown | kafkalite, no pushdown | Spark's Kafka source | × no pushdown | × Kafka source |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in queries:
        t = times[name]
        on, off, kafka_s = t["kafkalite, pushdown"], t["kafkalite, no pushdown"], t["Spark's Kafka source"]
        lines.append(
            f"| {name} | {on:.2f} s | {off:.2f} s | {kafka_s:.2f} s | {off / on:.1f}× | {kafka_s / on:.1f}× |"
        )
    lines += [
        "",
        f"Floor: the same source reading 10 records with pushdown (`{tiny}`) took {floor:.2f} s: "
        "Spark's planning, the Python planner and task workers, one task. The same count() of 10 rows "
        f"from a minimal Python data source (one task, rows made of nothing): {minimal_s:.2f} s; from "
        f"`spark.range(10)` (no Python): {spark_s:.2f} s.",
        "",
        "Filters:",
        *(f"* {name}: `{where}`" for name, where in queries.items()),
    ]
    name = "spark-pushdown" + "".join(f"-{k.rsplit('.', 2)[-2]}-{v}" for k, v in args.settings.items())
    write_report(args.out, name, results, lines)


def pushdown_queries(n: int) -> dict[str, str]:
    """The two selective queries of ``pushdown``, over ``write_events(data, n)``."""
    per_partition = n // 4
    return {
        "last 1% by timestamp": f"timestamp >= timestamp_millis({T0 + (CHUNKS - 4) * 1000})",
        "1% as one partition's offset range": (
            f"partition = 2 AND offset BETWEEN {per_partition // 2} AND {per_partition // 2 + n // 100 - 1}"
        ),
    }


def phases(args: argparse.Namespace) -> None:
    """The pushdown queries and the floor under them, phase by phase (``spark_phases``)."""
    import spark_phases

    load_before = os.getloadavg()
    work = tempfile.mkdtemp(prefix="kl-spark-phases-")
    data, events, trace = (os.path.join(work, d) for d in ("data", "events", "trace.jsonl"))
    os.makedirs(events)
    n = args.records - args.records % CHUNKS
    write_events(data, n)
    # Spark's Python workers import spark_phases (the traced source) and append to the trace.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    os.environ[spark_phases.TRACE_ENV] = trace
    event_log = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events,
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }
    spark = local_spark(settings={**event_log, **args.settings})
    spark.dataSource.register(spark_phases.TracedSource)
    register_minimal_source(spark)
    spark.conf.set(PUSHDOWN, "true")
    where = pushdown_queries(n)
    where["floor: 10 records"] = "partition = 0 AND offset < 10"

    def kafkalite(w: str):
        return lambda: spark.read.format("kafkalite_traced").option("subscribe", "events").load(data).where(w)

    queries = {name: kafkalite(w) for name, w in where.items()}
    queries["minimal Python source"] = lambda: spark.read.format("minimal").load().where("partition = 0")
    queries["spark.range (no Python)"] = lambda: spark.range(10).where("id < 5")
    for df in queries.values():  # untimed: Python workers and JVM classes load on first use
        df().count()
    timed = []
    for _ in range(args.runs):
        for name, df in queries.items():
            began = time.time() * 1000
            frame = df()
            loaded = time.time() * 1000
            frame.count()
            timed.append((name, began, loaded, time.time() * 1000))
    spark.stop()
    result = spark_phases.phases(events, trace, timed)
    shutil.rmtree(work, ignore_errors=True)
    results = {
        **run_facts(args, n, load_before),
        "queries": where,
        "ms": result,
    }
    lines = [
        f"# Where a selective Spark query over kafkalite spends its time (`{command(args)}`)",
        "",
        f"{n:,} records in 4 partitions, `local[2]`, {settings_note(args.settings)}, filter pushdown on, `count()`; "
        f"median of {args.runs} runs. Bold: kafkalite's code (the read phase also holds Spark taking the batches). "
        + machine_and_load(results),
        "",
        *spark_phases.table(result, list(queries)),
        "",
        "Filters:",
        *(f"* {name}: `{w}`" for name, w in where.items()),
    ]
    name = "spark-pushdown-phases" + "".join(f"-{k.rsplit('.', 2)[-2]}-{v}" for k, v in args.settings.items())
    write_report(args.out, name, results, lines)


if __name__ == "__main__":
    main()
