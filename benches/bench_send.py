"""``Producer.send()`` per record (issue 14 target 1) in several builds, interleaved: the
``send`` row of bench_peers.py (8-byte keys, 100-byte values, 4 partitions, default config, the
futures dropped) without the broker, so that one change can be measured on the shared VM.
Each run is a child process importing one side's kafkalite; it reports records/s (wall, from
the first send to the end of ``close()``), CPU ns per record of the whole process (every
thread, the engine's included) and of the sending thread alone, and checks that every record
was written (the partitions' end offsets).

    python benches/bench_send.py before=OLD/python after=python [--records 1000000] [--rounds 3]
        [--linger-ms 0] [--out benches/results] [--name send-before-after]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from before_after import side_env
from report import machine, write_report

CHILD = r"""
import json, os, shutil, sys, tempfile, time
from kafkalite import Admin, Consumer, Producer, TopicPartition
n, linger = int(sys.argv[1]), float(sys.argv[2])
VALUE = b"v" * 100
keys = [i.to_bytes(8, "big") for i in range(n)]
work = tempfile.mkdtemp(prefix="kafkalite-bench-send-")
try:
    Admin(work).create_topic("t", partitions=4)
    load = os.getloadavg()[0]
    wall, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
    with Producer(work, linger_ms=linger) as p:
        send = p.send
        for k in keys:
            send("t", VALUE, key=k)
    wall, cpu, thread = time.perf_counter() - wall, time.process_time() - cpu, time.thread_time() - thread
    with Consumer(work) as c:
        written = sum(c.end_offsets([TopicPartition("t", i) for i in range(4)]).values())
    if written != n:
        raise SystemExit(f"{written} of {n} records were written")
    print(json.dumps({"rate": n / wall, "cpu_ns": cpu / n * 1e9, "thread_ns": thread / n * 1e9, "load": load}))
finally:
    shutil.rmtree(work, ignore_errors=True)
"""


def run(python_dir: str, records: int, linger: float) -> dict:
    env = side_env(python_dir)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(records), str(linger)], env=env, capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(f"{python_dir}: {out.stderr.strip() or out.stdout.strip()}")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "sides", nargs="+", help="name=python_dir (a python/ folder holding a built kafkalite)"
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--linger-ms", type=float, default=0.0)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--name", default="send-before-after")
    args = parser.parse_args()
    sides = dict(s.split("=", 1) for s in args.sides)
    sides = {name: os.path.abspath(path) for name, path in sides.items()}
    runs = []
    for r in range(args.rounds):
        for name, path in sides.items():
            result = run(path, args.records, args.linger_ms)
            runs.append({"round": r, "side": name, **result})
            print(
                f"round {r + 1} {name}: {result['rate']:,.0f} rec/s, CPU {result['cpu_ns']:.0f} ns/rec "
                f"(sending thread {result['thread_ns']:.0f}), load {result['load']:.1f}",
                flush=True,
            )
    first = next(iter(sides))
    median = {
        (name, key): statistics.median(x[key] for x in runs if x["side"] == name)
        for name in sides
        for key in ("rate", "cpu_ns", "thread_ns")
    }
    loads = [x["load"] for x in runs]
    lines = [
        f"# `Producer.send()` per record: {args.rounds} interleaved rounds, medians",
        "",
        f"Machine: {machine()}; 1-minute load at the start of each run {min(loads):.1f} to {max(loads):.1f}. "
        f"{args.records:,} keyed sends (8-byte keys, 100-byte values) to 4 partitions, linger_ms={args.linger_ms:g}, "
        "timed from the first send to the end of close().",
        "",
        f"| build | records/s (wall) | CPU ns/record (process) | CPU ns/record (sending thread) | rate / {first} |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in sides:
        lines.append(
            f"| {name} | {median[(name, 'rate')]:,.0f} | {median[(name, 'cpu_ns')]:.0f} | "
            f"{median[(name, 'thread_ns')]:.0f} | {median[(name, 'rate')] / median[(first, 'rate')]:.2f} |"
        )
    command = " ".join(["python", os.path.relpath(__file__), *sys.argv[1:]])
    lines += ["", f"Builds: {', '.join(f'{n}: `{p}`' for n, p in sides.items())}. Command: `{command}`."]
    write_report(args.out, args.name, {"sides": sides, "args": vars(args), "runs": runs}, lines)


if __name__ == "__main__":
    main()
