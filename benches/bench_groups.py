"""Consumer groups and compaction benchmark (issue 4):
- takeover: a member is SIGKILLed; time until the survivor consumes its partitions again
  (p50 and max over --kills kills, with a producer appending all the time)
- rebalance time when a member joins and when one leaves (range and cooperative-sticky)
- commit latency (p50/p99), against SQLite WAL with synchronous=FULL committing the same row
- compaction throughput on --records records over --keys keys (100-byte values)

  python benches/bench_groups.py [--kills 20] [--records 10000000] [--keys 1000000]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from kafkalite import Admin, Consumer, Producer
from kafkalite.log import Log, Record
from report import write_report

HERE = os.path.dirname(os.path.abspath(__file__))


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


class Member:
    """A group_member.py process and the lines it printed."""

    def __init__(self, data: str, strategy: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "group_member.py"), data, "g", strategy],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_for(lambda ls: "READY" in ls)

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            with self.cond:
                self.lines.append(line.strip())
                self.cond.notify_all()

    def wait_for(self, pred, timeout: float = 30.0):
        with self.cond:
            if not self.cond.wait_for(lambda: pred(self.lines), timeout=timeout):
                raise TimeoutError(f"member never printed what was expected; got {self.lines[-5:]}")

    def owned(self) -> set[str]:
        with self.cond:
            owns = [line for line in self.lines if line.startswith("OWNS")]
        return set(filter(None, owns[-1].partition(" ")[2].partition(" ")[2].split(","))) if owns else set()


def bench_takeover(kills: int, strategy: str = "cooperative-sticky") -> dict:
    data = tempfile.mkdtemp(prefix="kl-takeover-")
    Admin(data).create_topic("t", 4)
    stop = threading.Event()

    def produce() -> None:
        with Producer(data) as producer:
            i = 0
            while not stop.is_set():
                producer.send("t", value=b"x" * 100, partition=i % 4)
                i += 1
                if i % 8 == 0:
                    producer.flush()
                    time.sleep(0.001)

    threading.Thread(target=produce, daemon=True).start()
    survivor = Member(data, strategy)
    takeovers = []
    for _ in range(kills):
        victim = Member(data, strategy)
        # Wait until the hand-over settled: the survivor owns exactly what the victim does not.
        deadline = time.monotonic() + 30
        while not (
            victim.owned()
            and len(victim.owned() | survivor.owned()) == 4
            and not victim.owned() & survivor.owned()
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("the group did not settle")
            time.sleep(0.02)
        victim.wait_for(lambda ls: any(line.startswith("FIRST") for line in ls))
        moved = victim.owned()
        mark = len(survivor.lines)
        victim.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic_ns()
        victim.proc.wait()
        survivor.wait_for(
            lambda ls, mark=mark, moved=moved: (
                {line.split()[2] for line in ls[mark:] if line.startswith("FIRST")} >= moved
            )
        )
        firsts = [
            int(line.split()[1])
            for line in survivor.lines[mark:]
            if line.startswith("FIRST") and line.split()[2] in moved
        ]
        takeovers.append((max(firsts) - killed) / 1e6)
    stop.set()
    survivor.proc.kill()
    return {
        "kills": kills,
        "p50_ms": statistics.median(takeovers),
        "max_ms": max(takeovers),
        "all_ms": takeovers,
    }


def bench_rebalance(strategy: str, rounds: int = 10) -> dict:
    data = tempfile.mkdtemp(prefix="kl-rebalance-")
    Admin(data).create_topic("t", 6)
    first = Consumer(data, "t", group_id="g", partition_assignment_strategy=strategy)
    joins, leaves = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        second = Consumer(data, "t", group_id="g", partition_assignment_strategy=strategy)
        while len(second.assignment()) < 3 or len(first.assignment()) > 3:
            first.poll(0)
            second.poll(0)
        joins.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        second.close()
        while len(first.assignment()) < 6:
            first.poll(0)
        leaves.append((time.perf_counter() - began) * 1000)
    first.close()
    return {
        "join_p50_ms": statistics.median(joins),
        "join_max_ms": max(joins),
        "leave_p50_ms": statistics.median(leaves),
        "leave_max_ms": max(leaves),
    }


def bench_commit(n: int = 2000) -> dict:
    data = tempfile.mkdtemp(prefix="kl-commit-")
    Admin(data).create_topic("t", 6)
    consumer = Consumer(data, "t", group_id="g")
    consumer.poll(0)
    tps = sorted(consumer.assignment())
    ours = []
    for i in range(n):
        began = time.perf_counter()
        consumer.commit({tp: i for tp in tps})
        ours.append((time.perf_counter() - began) * 1e6)
    consumer.close()
    db = sqlite3.connect(os.path.join(data, "offsets.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(
        "CREATE TABLE offsets (grp TEXT, topic TEXT, part INT, off INT, PRIMARY KEY (grp, topic, part))"
    )
    peer = []
    for i in range(n):
        began = time.perf_counter()
        db.execute("BEGIN")
        db.executemany(
            "INSERT OR REPLACE INTO offsets VALUES ('g', ?, ?, ?)",
            [(tp.topic, tp.partition, i) for tp in tps],
        )
        db.execute("COMMIT")
        peer.append((time.perf_counter() - began) * 1e6)
    return {
        "partitions_per_commit": len(tps),
        "p50_us": statistics.median(ours),
        "p99_us": percentile(ours, 0.99),
        "sqlite_full_p50_us": statistics.median(peer),
        "sqlite_full_p99_us": percentile(peer, 0.99),
    }


def bench_compaction(records: int, keys: int) -> dict:
    data = tempfile.mkdtemp(prefix="kl-compact-")
    path = os.path.join(data, "kv-0")
    log = Log(path, compact=True, segment_bytes=128 << 20)
    value = b"v" * 100
    chunk = 100_000
    for start in range(0, records, chunk):
        log.append(
            [
                Record(value, key=b"key-%07d" % ((start + i) * 7919 % keys), timestamp=1000)
                for i in range(chunk)
            ]
        )
    log.roll()
    size = sum(s.size for s in log.segments)
    os.sync()
    began = time.perf_counter()
    scanned = sum(len(b) for b in iter_arrow(log))
    scan_s = time.perf_counter() - began
    began = time.perf_counter()
    stats = log.clean(86_400_000)
    clean_s = time.perf_counter() - began
    log.close()
    return {
        "records": records,
        "keys": keys,
        "bytes_before": stats["bytes_before"],
        "bytes_after": stats["bytes_after"],
        "records_removed": stats["records_removed"],
        "seconds": clean_s,
        "mb_per_s": size / clean_s / 1e6,
        "scan_mb_per_s": size / scan_s / 1e6,
        "scanned": scanned,
    }


def iter_arrow(log: Log):
    position, end = log.start_offset, log.end_offset
    while position < end:
        batch, position = log._native.read_arrow(position, end, 1 << 20)
        yield batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"}
    results["takeover"] = bench_takeover(args.kills)
    print("takeover", results["takeover"], flush=True)
    results["rebalance"] = {s: bench_rebalance(s) for s in ("range", "cooperative-sticky")}
    print("rebalance", results["rebalance"], flush=True)
    results["commit"] = bench_commit()
    print("commit", results["commit"], flush=True)
    results["compaction"] = bench_compaction(args.records, args.keys)
    print("compaction", results["compaction"], flush=True)
    t, r, c, k = results["takeover"], results["rebalance"], results["commit"], results["compaction"]
    lines = [
        "# Consumer groups and compaction (`python benches/bench_groups.py`)",
        "",
        f"Machine: {results['machine']}.",
        "",
        "| measurement | kafkalite | peer / target |",
        "|---|---|---|",
        f"| takeover after SIGKILL (survivor consumes the dead member's partitions), {t['kills']} kills | p50 {t['p50_ms']:.0f} ms, max {t['max_ms']:.0f} ms | target ≤ 1000 ms |",
        *(
            f"| rebalance, {s}: join / leave (p50) | {v['join_p50_ms']:.1f} ms / {v['leave_p50_ms']:.1f} ms | |"
            for s, v in r.items()
        ),
        f"| commit of {c['partitions_per_commit']} offsets (durable) | p50 {c['p50_us']:.0f} µs, p99 {c['p99_us']:.0f} µs | SQLite WAL synchronous=FULL: p50 {c['sqlite_full_p50_us']:.0f} µs, p99 {c['sqlite_full_p99_us']:.0f} µs; target ≤ 1 ms |",
        f"| compaction, {k['records']:,} records over {k['keys']:,} keys | {k['mb_per_s']:.0f} MB/s ({k['seconds']:.1f} s, {k['bytes_before'] / 1e6:.0f} → {k['bytes_after'] / 1e6:.0f} MB) | sequential Arrow scan of the same log: {k['scan_mb_per_s']:.0f} MB/s |",
    ]
    write_report(args.out, "groups", results, lines)


if __name__ == "__main__":
    main()
