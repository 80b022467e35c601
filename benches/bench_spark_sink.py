"""The Spark sink's write path without Spark (the driver's commit is plain Python): --records
rows of 100-byte values into 4 partitions through ``sink.publish_once`` (a streaming commit:
stamped batches, idempotent append) and ``sink.publish`` (a batch write), keyless and keyed
with a header, beside the peer in the same run: ``Log.append_values`` of the same values.
Reports CPU seconds (this process and its threads: the figure to compare on a shared
machine), rows/s of CPU time and each path's CPU time over the peer's, and wall seconds (what
a transactional commit adds is mostly waiting: the coordinator's records and the partitions
synced before the commit decision, which CPU time does not show).

    python benches/bench_spark_sink.py [--records 1000000] [--runs 3]

To compare two builds, run it with each on PYTHONPATH (the script uses only calls both have).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    import kafkalite
    import pyarrow as pa
    from kafkalite import Admin
    from kafkalite.spark import sink

    n = args.records
    values = [b"%08d" % i + b"v" * 92 for i in range(n)]
    plain = pa.table({"value": values, "partition": [i % 4 for i in range(n)]})
    keyed = plain.append_column("key", pa.array([b"k%d" % (i % 1000) for i in range(n)])).append_column(
        "headers", pa.array([[{"key": "source", "value": b"bench"}]] * n)
    )

    def timed(run) -> tuple[float, float]:
        best, best_wall = float("inf"), float("inf")
        for i in range(args.runs):
            work = tempfile.mkdtemp(prefix="kl-sink-bench-")
            try:
                Admin(work).create_topic("t", 4)
                began, began_wall = time.process_time(), time.perf_counter()
                run(work, i)
                best = min(best, time.process_time() - began)
                best_wall = min(best_wall, time.perf_counter() - began_wall)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        return best, best_wall

    def append_values(work: str, _i: int) -> None:
        for p in range(4):
            with kafkalite.Log(os.path.join(work, f"t-{p}"), shared_writers=True) as log:
                log.append_values(values[p::4])

    paths = {
        "Log.append_values (peer)": append_values,
        "publish_once, values": lambda w, i: sink.publish_once(w, "bench", i, [plain], "t"),
        "publish_once, keys+headers": lambda w, i: sink.publish_once(w, "bench", i, [keyed], "t"),
        "publish, values": lambda w, _i: sink.publish(w, [plain], "t"),
        "publish, keys+headers": lambda w, _i: sink.publish(w, [keyed], "t"),
    }
    times = {name: timed(run) for name, run in paths.items()}
    peer = times["Log.append_values (peer)"][0]
    print(f"{n:,} rows of 100-byte values, 4 partitions, best of {args.runs} ({kafkalite.__file__})")
    for name, (s, wall) in times.items():
        print(
            f"  {name:28s} {s:6.2f} CPU s  {n / s / 1e6:5.2f} M rows/s  {s / peer:5.2f}x the peer  {wall:6.2f} wall s"
        )


if __name__ == "__main__":
    main()
