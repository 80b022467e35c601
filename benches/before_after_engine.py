"""``cargo bench --bench engine`` of two builds, interleaved (before, after, before, after...):
the whole process's CPU time per record (user + system, all threads; steadier than wall clock
on the shared VM) and the median of each stage's records/s. Build each side's binary with
``cargo bench --bench engine --no-run`` in its checkout (it prints the executable's path).

    python benches/before_after_engine.py BEFORE_BIN AFTER_BIN [--rounds 4] [--batches 10000]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess

STAGE = re.compile(r"^(.{28})\s+(\d+) records/s", re.MULTILINE)


def run(exe: str, batches: int) -> tuple[float, dict[str, float]]:
    """CPU seconds of one run of ``exe`` and its stages' records/s."""
    began = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [exe], env=dict(os.environ, BATCHES=str(batches)), capture_output=True, text=True, check=True
    ).stdout
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ended.ru_utime - began.ru_utime) + (ended.ru_stime - began.ru_stime)
    return cpu, {name.strip(): float(rate) for name, rate in STAGE.findall(out)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batches", type=int, default=10_000, help="batches of 1,000 records")
    args = parser.parse_args()
    records = args.batches * 1000
    runs: dict[str, list[tuple[float, dict[str, float]]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for side in runs:
            load = os.getloadavg()[0]
            cpu, stages = run(getattr(args, side), args.batches)
            runs[side].append((cpu, stages))
            print(f"round {r} {side}: load {load:.1f}, {cpu / records * 1e9:.1f} CPU ns/record", flush=True)
    print("\n| side | CPU ns/record (whole process) | " + " | ".join(runs["before"][0][1]) + " |")
    print("|---|---:|" + "---:|" * len(runs["before"][0][1]))
    for side, xs in runs.items():
        cpu = statistics.median(c for c, _ in xs) / records * 1e9
        rates = [statistics.median(s[name] for _, s in xs) for name in xs[0][1]]
        print(f"| {side} | {cpu:.1f} | " + " | ".join(f"{x:,.0f}" for x in rates) + " |")


if __name__ == "__main__":
    main()
