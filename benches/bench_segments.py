"""What one append costs a shared writer as the partition's segment count grows (issue 21,
item 5): ``segment.bytes`` at its minimum (14), so every append rolls, at 1, 1,000 and 30,000
segments, in several builds.

    python benches/bench_segments.py [--counts 1,1000,30000] [--appends 300] \\
        before=../before/python after=python [label=dir ...]

Each side is a ``python/`` folder holding a built kafkalite (``make build`` in that checkout).
For each count a child process makes the segments with an exclusive writer (one record each),
closes it, then opens the partition twice with ``shared_writers=True``, as the server and
producers do (two opens are two flock holders, exactly as two processes would be), and times
``--appends`` single-record appends in two workloads: ``alone``, writer A appends while B stays
open; ``alternating``, A and B take turns, so each append first follows the other's roll. CPU
per append is the process's user + system time (every thread) over the loop; wall time too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from before_after import side_env
from report import machine

SEGMENT_BYTES = 14  # Kafka's minimum: every batch rolls


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(count: int, appends: int) -> None:
    """The workload, in a process that imports one side's kafkalite."""
    from kafkalite import Log

    value = [b"v" * 10]
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kafkalite-bench-segments-") as work:
        path = os.path.join(work, "t-0")
        started = time.perf_counter()
        with Log(path, segment_bytes=SEGMENT_BYTES) as log:
            for _ in range(count):
                log.append_values(value, timestamp=1)
            assert len(log.segments) == count, len(log.segments)
        out["setup_s"] = time.perf_counter() - started
        a = Log(path, segment_bytes=SEGMENT_BYTES, shared_writers=True)
        b = Log(path, segment_bytes=SEGMENT_BYTES, shared_writers=True)
        for name, writers in (("alone", (a, a)), ("alternating", (a, b))):
            end = a.end_offset
            cpu0, wall0 = cpu(), time.perf_counter()
            for i in range(appends):
                first, _ = writers[i % 2].append_values(value, timestamp=1)
                if first != end + i:
                    raise SystemExit(f"{name}: append {i} landed at {first}, expected {end + i}")
            cpu1, wall1 = cpu(), time.perf_counter()
            out[f"{name}_cpu_us"] = (cpu1 - cpu0) / appends * 1e6
            out[f"{name}_wall_us"] = (wall1 - wall0) / appends * 1e6
        a.close()
        b.close()
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sides", nargs="*", help="label=python_dir (a built kafkalite each)")
    parser.add_argument("--counts", default="1,1000,30000", help="segment counts, comma-separated")
    parser.add_argument("--appends", type=int, default=300, help="appends timed per workload")
    parser.add_argument("--out", help="also write the table to this Markdown file")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        return child(*args.child)
    if not args.sides or any("=" not in s for s in args.sides):
        parser.error("give each side as label=python_dir")
    sides = dict(s.split("=", 1) for s in args.sides)
    envs = {label: side_env(os.path.abspath(path)) for label, path in sides.items()}
    counts = [int(c) for c in args.counts.split(",")]
    rows = []
    loads = [os.getloadavg()[0]]
    for count in counts:
        for label, env in envs.items():
            done = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", str(count), str(args.appends)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append((count, label, json.loads(done.stdout)))
            loads.append(os.getloadavg()[0])
    lines = [
        f"Machine: {machine()}; 1-minute load {min(loads):.2f} to {max(loads):.2f}.",
        f"segment.bytes={SEGMENT_BYTES} (every append rolls), {args.appends} single-record appends per workload,",
        "two shared writers open; µs per append, CPU (user + system) and wall.",
        "",
        "| segments | build | alone: CPU | alone: wall | alternating: CPU | alternating: wall | setup (s) |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for count, label, r in rows:
        lines.append(
            f"| {count:,} | {label} | {r['alone_cpu_us']:,.0f} | {r['alone_wall_us']:,.0f} "
            f"| {r['alternating_cpu_us']:,.0f} | {r['alternating_wall_us']:,.0f} | {r['setup_s']:.1f} |"
        )
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
