"""Client benchmark (issue 3): 100-byte values in one process, kafkalite against the peers a
Python user would otherwise reach for on one machine, in the same run:
  - SQLite in WAL mode (stdlib sqlite3), one table used as a log
  - kafka-python's own record builder writing the same v2 batches to a file
plus produce->consume latency between two processes.

    python benches/bench_clients.py [--records 1000000] [--out benches/results]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from kafkalite import Admin, Consumer, Log, Producer
from report import machine, write_report

VALUE = b"v" * 100
HERE = os.path.dirname(os.path.abspath(__file__))


def timed(fn):
    os.sync()
    began = time.perf_counter()
    result = fn()
    return time.perf_counter() - began, result


def check_futures(futures: list, what: str) -> None:
    """A benchmark counts only written records: every future must have succeeded."""
    failed = [f for f in futures if not f.succeeded()]
    if failed:
        raise SystemExit(
            f"{what}: {len(failed)} of {len(futures)} records failed, first: {failed[0].exception!r}"
        )


def check_ranges(ranges: list[tuple[int, int]], expected: int, what: str) -> None:
    """(first, last) offsets of bulk appends: contiguous, and as many records as counted."""
    written = sum(last - first + 1 for first, last in ranges)
    if written != expected or any(b[0] != a[1] + 1 for a, b in itertools.pairwise(ranges)):
        raise SystemExit(
            f"{what}: wrote {written} records in {len(ranges)} calls, expected {expected} contiguous"
        )


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


WARMUP = 200


def latency_run(kind: str, path: str, n: int, send) -> list[float]:
    """Steady-state latency: the first WARMUP records (which open files, reserve and prefault
    the first segment on both sides) are sent and consumed but not counted."""
    child = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "latency_consumer.py"), kind, path, str(n + WARMUP)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    for _ in range(n + WARMUP):
        send(str(time.monotonic_ns()).encode())
        time.sleep(0.0005)  # ~2,000 records/s: latency, not throughput
    out, _ = child.communicate(timeout=120)
    return [float(x) for x in out.split()][WARMUP:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    n = args.records
    work = tempfile.mkdtemp(prefix="kafkalite-clients-")
    res: dict[str, dict] = {}
    try:
        data = os.path.join(work, "data")
        Admin(data).create_topic("t", partitions=1)
        Admin(data).create_topic("bulk", partitions=1)
        Admin(data).create_topic("lat", partitions=1)

        # -- producing ---------------------------------------------------------------------
        def send_loop(**config):
            def run():
                with Producer(data, **config) as p:
                    send = p.send
                    return [send("t", VALUE) for _ in range(n)]

            return run

        s, futures = timed(send_loop())
        check_futures(futures, "send() with defaults")
        res["kafkalite send() (defaults: batch_size 16 KiB, linger 0)"] = {"seconds": s, "records": n}
        s, futures = timed(send_loop(batch_size=1 << 20, linger_ms=5))
        check_futures(futures, "send() with batch_size 1 MiB")
        res["kafkalite send() (batch_size 1 MiB)"] = {"seconds": s, "records": n}
        del futures

        values = [VALUE] * 1000

        def send_batch():
            with Producer(data) as p:
                return [p.send_batch("bulk", values, partition=0)[0] for _ in range(n // 1000)]

        s, ranges = timed(send_batch)
        check_ranges(ranges, n // 1000 * 1000, "send_batch")
        res["kafkalite send_batch (1,000 per call)"] = {"seconds": s, "records": n}

        def append_values():
            with Log(os.path.join(work, "raw-0")) as log:
                return [log.append_values(values) for _ in range(n // 1000)]

        s, ranges = timed(append_values)
        check_ranges(ranges, n // 1000 * 1000, "Log.append_values")
        res["engine Log.append_values (1,000 per call)"] = {"seconds": s, "records": n}

        # Peer 1: SQLite WAL, one row per record, a transaction per 1,000 rows.
        db_path = os.path.join(work, "log.db")
        db = sqlite3.connect(db_path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, key BLOB, value BLOB, ts INTEGER)")

        def sqlite_insert():
            ts = int(time.time() * 1000)
            for _ in range(n // 1000):
                with db:
                    for _ in range(1000):
                        db.execute("INSERT INTO log (key, value, ts) VALUES (?, ?, ?)", (None, VALUE, ts))

        s, _ = timed(sqlite_insert)
        res["SQLite WAL insert per record (txn per 1,000)"] = {"seconds": s, "records": n}
        rows = [(None, VALUE, 0)] * 1000

        def sqlite_many():
            for _ in range(n // 1000):
                with db:
                    db.executemany("INSERT INTO log (key, value, ts) VALUES (?, ?, ?)", rows)

        s, _ = timed(sqlite_many)
        res["SQLite WAL executemany (1,000 per txn)"] = {"seconds": s, "records": n}

        # Peer 2: kafka-python's builder, the same v2 batches appended to a file.
        from kafka.record.default_records import DefaultRecordBatchBuilder

        def kafka_python_builder():
            with open(os.path.join(work, "kp.log"), "wb") as f:
                for _ in range(n // 1000):
                    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
                    ts = int(time.time() * 1000)
                    for i in range(1000):
                        builder.append(i, timestamp=ts, key=None, value=VALUE, headers=[])
                    f.write(builder.build())

        s, _ = timed(kafka_python_builder)
        res["kafka-python DefaultRecordBatchBuilder -> file"] = {"seconds": s, "records": n}

        # -- consuming ---------------------------------------------------------------------
        def consume_iter():
            with Consumer(data, "t", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
                return sum(1 for _ in c)

        s, got = timed(consume_iter)
        res["kafkalite consumer iteration"] = {"seconds": s, "records": got}

        def drain(fetch, rows) -> int:
            """Records read from the beginning until a fetch comes back empty."""
            with Consumer(data, "t", auto_offset_reset="earliest") as c:
                total = 0
                while batch := fetch(c):
                    total += sum(rows(v) for v in batch.values())
                return total

        s, got = timed(lambda: drain(lambda c: c.poll(max_records=10_000), len))
        res["kafkalite consumer poll(max_records=10,000)"] = {"seconds": s, "records": got}
        s, got = timed(lambda: drain(lambda c: c.poll_arrow(), lambda b: b.num_rows))
        res["kafkalite consumer poll_arrow (Arrow bulk path)"] = {"seconds": s, "records": got}

        def sqlite_read():
            return sum(1 for _ in db.execute("SELECT id, key, value, ts FROM log ORDER BY id"))

        s, got = timed(sqlite_read)
        res["SQLite SELECT iteration"] = {"seconds": s, "records": got}

        from kafka.record.memory_records import MemoryRecords

        def kafka_python_read():
            records = MemoryRecords(open(os.path.join(work, "kp.log"), "rb").read())
            total = 0
            while records.has_next():
                for _ in records.next_batch():
                    total += 1
            return total

        s, got = timed(kafka_python_read)
        res["kafka-python MemoryRecords iteration"] = {"seconds": s, "records": got}

        # -- latency between processes -----------------------------------------------------
        lat_n = 2000
        lat_futures: list = []
        with Producer(data, linger_ms=0) as p:
            kl = latency_run("kafkalite", data, lat_n, lambda v: lat_futures.append(p.send("lat", v)))
        check_futures(lat_futures, "latency run")
        lat_db = os.path.join(work, "lat.db")
        ldb = sqlite3.connect(lat_db, isolation_level=None)
        ldb.execute("PRAGMA journal_mode=WAL")
        ldb.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, value BLOB)")
        sl = latency_run(
            "sqlite", lat_db, lat_n, lambda v: ldb.execute("INSERT INTO log (value) VALUES (?)", (v,))
        )
        latency = {
            "kafkalite": {"p50_us": statistics.median(kl), "p99_us": percentile(kl, 0.99), "max_us": max(kl)},
            "SQLite WAL, reader polling every 100 µs": {
                "p50_us": statistics.median(sl),
                "p99_us": percentile(sl, 0.99),
                "max_us": max(sl),
            },
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)

    append_rate = n / res["engine Log.append_values (1,000 per call)"]["seconds"]
    lines = [
        f"# Client benchmark: {n:,} records of 100-byte values, one process",
        "",
        f"Machine: {machine()}",
        "",
        "| workload | records/s | vs engine append_values |",
        "|---|---:|---:|",
    ]
    for name, r in res.items():
        r["records_per_s"] = r["records"] / r["seconds"]
        lines.append(f"| {name} | {r['records_per_s']:,.0f} | {r['records_per_s'] / append_rate:.2f} |")
    lines += [
        "",
        f"Produce -> consume latency between two processes (2,000 records at ~2,000/s, after {WARMUP} warm-up records):",
        "",
        "| path | p50 µs | p99 µs | max µs |",
        "|---|---:|---:|---:|",
    ]
    for name, lat in latency.items():
        lines.append(f"| {name} | {lat['p50_us']:.0f} | {lat['p99_us']:.0f} | {lat['max_us']:.0f} |")
    write_report(args.out, "clients", {"records": n, "throughput": res, "latency": latency}, lines)


if __name__ == "__main__":
    main()
