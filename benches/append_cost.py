"""What one ``Log.append(Record)`` costs in several builds, in figures that survive a loaded
shared machine: CPU per record (all threads, user + system) of the append loop alone and of
the loop plus ``close()``, over interleaved rounds; with ``--callgrind``, user-space
instructions per record (valgrind's Ir count, independent of load: ``perf stat -e
instructions`` needs a hardware PMU, which the VM lacks).

    python benches/append_cost.py [--rounds 12] [--batches 2000] [--callgrind] \\
        before=../before/python after=python [label=dir ...]

Each side is a ``python/`` folder holding a built kafkalite (``make build`` in that checkout).
The workload is bench_log.py's append(Record) row: lists of 1,000 ``Record(100 bytes,
timestamp=1)`` appended to a fresh log. The loop+close column exists because the writer's
release of written pages (issue 14 target 6) pays while appending for page-table work that
otherwise falls on ``close()``/exit (unmapping, and write-protecting the mapped dirty pages
for the final sync); benchmarks that time the loop only see the first half of that trade.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from before_after import side_env
from report import machine

PER_BATCH = 1000
VALUE = b"x" * 100
# Two workload sizes for the instruction count: the difference cancels start-up and imports.
CALLGRIND_BATCHES = (20, 120)


def child(batches: int) -> None:
    """The workload, in the process the parent started with one side's kafkalite importable."""
    from kafkalite import Log, Record

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)  # every thread, the prefault helpers too
        return r.ru_utime + r.ru_stime

    with tempfile.TemporaryDirectory(prefix="kafkalite-append-cost-") as work:
        log = Log(os.path.join(work, "records-0"))
        records = [Record(VALUE, timestamp=1) for _ in range(PER_BATCH)]
        cpu0, wall0 = cpu(), time.perf_counter()
        for _ in range(batches):
            log.append(records)
        cpu1, wall1 = cpu(), time.perf_counter()
        if log.end_offset != batches * PER_BATCH:
            raise SystemExit(f"wrote {log.end_offset} records, expected {batches * PER_BATCH}")
        log.close()
        cpu2 = cpu()
    n = batches * PER_BATCH
    print(
        json.dumps(
            {
                "loop_cpu_ns": (cpu1 - cpu0) / n * 1e9,
                "loop_close_cpu_ns": (cpu2 - cpu0) / n * 1e9,
                "loop_wall_ns": (wall1 - wall0) / n * 1e9,
            }
        )
    )


def run_child(
    env: dict[str, str], batches: int, wrap: list[str] | None = None
) -> subprocess.CompletedProcess:
    command = [*(wrap or []), sys.executable, os.path.abspath(__file__), "--child", str(batches)]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True)


def instructions_per_record(env: dict[str, str]) -> float:
    """User-space instructions per record under callgrind: Ir(120 batches) - Ir(20 batches)."""
    counts = []
    with tempfile.TemporaryDirectory(prefix="kafkalite-callgrind-") as work:
        for batches in CALLGRIND_BATCHES:
            out = os.path.join(work, f"callgrind-{batches}.out")
            done = run_child(env, batches, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"])
            found = re.search(r"Collected : (\d+)", done.stderr)
            if not found:
                raise SystemExit(f"no instruction count in callgrind's output:\n{done.stderr}")
            counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / ((CALLGRIND_BATCHES[1] - CALLGRIND_BATCHES[0]) * PER_BATCH)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sides", nargs="*", help="label=python_dir (a built kafkalite each)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--batches", type=int, default=2000, help="appends of 1,000 records per run")
    parser.add_argument("--callgrind", action="store_true", help="also count instructions per record")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        return child(args.child)
    if not args.sides or any("=" not in s for s in args.sides):
        parser.error("give each side as label=python_dir")
    sides = dict(s.split("=", 1) for s in args.sides)
    envs = {label: side_env(os.path.abspath(path)) for label, path in sides.items()}
    runs: dict[str, list[dict]] = {label: [] for label in sides}
    loads = []
    for _ in range(args.rounds):
        for label, env in envs.items():
            loads.append(os.getloadavg()[0])
            runs[label].append(json.loads(run_child(env, args.batches).stdout))
    print(
        f"Machine: {machine()}; 1-minute load {min(loads):.1f} to {max(loads):.1f}; {args.rounds} interleaved"
    )
    print(
        f"rounds of {args.batches:,} x Log.append(1,000 Records of 100 bytes), medians (min), ns per record.\n"
    )
    head = "| build | CPU, append loop | CPU, loop + close() | wall, append loop |"
    print(head + (" instructions (user, callgrind) |" if args.callgrind else ""))
    print("|---|---:|---:|---:|" + ("---:|" if args.callgrind else ""))
    for label, rows in runs.items():
        cells = [
            f"{statistics.median(r[key] for r in rows):.1f} ({min(r[key] for r in rows):.1f})"
            for key in ("loop_cpu_ns", "loop_close_cpu_ns", "loop_wall_ns")
        ]
        if args.callgrind:
            cells.append(f"{instructions_per_record(envs[label]):.1f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
