"""Embedded transactional throughput and commit latency (issue 22): records/s of a
``Producer(transactional_id=...)`` committing transactions of 100, 1,000 and 10,000 records of
100 bytes over 2 partitions (send, then ``commit_transaction()``, which flushes, writes
PrepareCommit, a COMMIT marker per partition and CompleteCommit, each durable), beside the same
records from a plain producer in the same run; and the median latency of ``commit_transaction()``.
The served side (``kafkalite serve``) and Kafka's ``ProducerPerformance --transactional-id`` are
the server's benchmark.

Run: PYTHONPATH=python python benches/bench_transactions.py [total_records]"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kafkalite
from report import machine

VALUE = b"v" * 100


def run(data: str, total: int, size: int | None) -> tuple[float, float | None]:
    """(records/s, median commit seconds) for transactions of ``size`` (None: plain producer)."""
    topic = f"t{size}"
    kafkalite.Admin(data).create_topic(topic, 2)
    if size is None:
        p = kafkalite.Producer(data, linger_ms=5)
        began = time.perf_counter()
        for i in range(total):
            p.send(topic, VALUE, key=b"%d" % (i & 1))
        p.flush()
        elapsed = time.perf_counter() - began
        p.close()
        return total / elapsed, None
    p = kafkalite.Producer(data, transactional_id=f"bench-{size}", linger_ms=5)
    p.init_transactions()
    commits = []
    began = time.perf_counter()
    for _ in range(total // size):
        p.begin_transaction()
        for i in range(size):
            p.send(topic, VALUE, key=b"%d" % (i & 1))
        c = time.perf_counter()
        p.commit_transaction()
        commits.append(time.perf_counter() - c)
    elapsed = time.perf_counter() - began
    p.close()
    return (total // size) * size / elapsed, statistics.median(commits)


def main(total: int) -> None:
    print(f"# embedded transactions, {total} records of 100 bytes, 2 partitions; {machine()}")
    print(f"# load: {os.getloadavg()}")
    print("| producer | records/s | commit median ms |")
    print("| --- | ---: | ---: |")
    with tempfile.TemporaryDirectory() as data:
        for size in (None, 100, 1000, 10000):
            rate, commit = run(data, total, size)
            label = "plain (no transactions)" if size is None else f"transactions of {size}"
            shown = "" if commit is None else f"{commit * 1000:.2f}"
            print(f"| {label} | {rate:,.0f} | {shown} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
