"""Child process of bench_clients.py: reports produce-to-consume latency. Each value holds the
producer's time.monotonic_ns() (CLOCK_MONOTONIC is shared by all processes on Linux)."""

import sqlite3
import sys
import time


def kafkalite_consumer(data_dir: str, n: int) -> list[float]:
    from kafkalite import Consumer

    c = Consumer(data_dir, "lat", auto_offset_reset="earliest")
    print("ready", flush=True)
    out: list[float] = []
    while len(out) < n:
        for records in c.poll(timeout_ms=1000).values():
            now = time.monotonic_ns()
            out += [(now - int(r.value)) / 1e3 for r in records]
    return out


def sqlite_consumer(path: str, n: int) -> list[float]:
    """SQLite has no wake-up: poll the table every 100 µs."""
    db = sqlite3.connect(path)
    print("ready", flush=True)
    out: list[float] = []
    last = 0
    while len(out) < n:
        rows = db.execute("SELECT id, value FROM log WHERE id > ? ORDER BY id", (last,)).fetchall()
        now = time.monotonic_ns()
        for rid, value in rows:
            out.append((now - int(value)) / 1e3)
            last = rid
        if not rows:
            time.sleep(0.0001)
    return out


if __name__ == "__main__":
    kind, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    lat = kafkalite_consumer(path, n) if kind == "kafkalite" else sqlite_consumer(path, n)
    print(" ".join(f"{x:.1f}" for x in lat), flush=True)
