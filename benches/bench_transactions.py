"""Embedded transactional throughput and commit latency (issue 22): records/s of a
``Producer(transactional_id=...)`` committing transactions of 100, 1,000 and 10,000 records of
100 bytes over 2 partitions (send, then ``commit_transaction()``, which flushes, writes
PrepareCommit, a COMMIT marker per partition and CompleteCommit, each durable), beside the same
records from a plain producer in the same run; and the p50/p99 latency of ``commit_transaction()``.
The served side (``kafkalite serve``) is bench_server_transactions.py; both beside a Kafka broker
(confluent-kafka and Kafka's ``ProducerPerformance --transactional-id``) is
bench_transactions_peers.py, which uses ``transactions()`` below.

Run: PYTHONPATH=python python benches/bench_transactions.py [total_records] [parent_dir]

``parent_dir`` (default: the system's temporary folder) holds the data directory: on a tmpfs
(``/dev/shm``) every fsync/msync is free, so the difference from a disk is what the commit's
syncs cost."""

from __future__ import annotations

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kafkalite
from peers_common import percentile, timed_transactions
from report import machine

VALUE = b"v" * 100


def transactions(
    data: str, topic: str, per_txn: int, txns: int, transactional_id: str
) -> tuple[float, list[float]]:
    """``txns`` transactions of ``per_txn`` records (8-byte keys, 100-byte values) to ``topic``
    through one embedded transactional producer: (seconds from the first begin_transaction() to
    the last commit's return, each commit_transaction()'s seconds). init_transactions() and
    close() are not timed, as a client's connection setup is not."""
    p = kafkalite.Producer(data, transactional_id=transactional_id, linger_ms=5)
    p.init_transactions()
    timed = timed_transactions(
        p,
        txns,
        per_txn,
        lambda t, i: p.send(topic, VALUE, key=b"%08d" % (t * per_txn + i)),
        p.commit_transaction,
    )
    p.close()
    return timed


def plain(data: str, topic: str, total: int) -> float:
    """Seconds to send ``total`` records with a plain producer and flush."""
    p = kafkalite.Producer(data, linger_ms=5)
    began = time.perf_counter()
    for i in range(total):
        p.send(topic, VALUE, key=b"%08d" % i)
    p.flush()
    elapsed = time.perf_counter() - began
    p.close()
    return elapsed


def main(total: int, parent: str | None) -> None:
    print(f"# embedded transactions, {total} records of 100 bytes, 2 partitions; {machine()}")
    print(f"# data directory under {parent or tempfile.gettempdir()}; load: {os.getloadavg()}")
    print("| producer | records/s | commit p50 ms | commit p99 ms |")
    print("| --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(dir=parent) as data:
        for size in (None, 100, 1000, 10000):
            topic = f"t{size}"
            kafkalite.Admin(data).create_topic(topic, 2)
            if size is None:
                print(f"| plain (no transactions) | {total / plain(data, topic, total):,.0f} |  |  |")
                continue
            txns = total // size
            elapsed, commits = transactions(data, topic, size, txns, f"bench-{size}")
            p50, p99 = percentile(commits, 0.5) * 1000, percentile(commits, 0.99) * 1000
            print(f"| transactions of {size} | {txns * size / elapsed:,.0f} | {p50:.2f} | {p99:.2f} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000, sys.argv[2] if len(sys.argv) > 2 else None)
