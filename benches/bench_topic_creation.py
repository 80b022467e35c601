"""Topic creation and data-directory open as the topic count grows (issue 34 item 4).

    python benches/bench_topic_creation.py before=/work/main/python after=python [--sizes 100,1000,10000]
        [--creates 50] [--rounds 2] [--served] [--kafka] [--out FILE]

For each size N a data directory is filled with N topics of one partition in one metadata write
(so the fill costs the same for any build), then:
- embedded: ``--creates`` more topics made one by one with ``Admin.create_topic``, each timed;
  ms per topic, median and mean of the wall time, median of the process's CPU time;
- open: in a fresh process, ``Admin(dir).list_topics()``, ``Producer(dir)`` up to its first
  send flushed, and ``Consumer(dir, topic)`` up to its first record (the interpreter's own start
  excluded), median of 3 processes;
- ``--served``: ``kafkalite serve`` on the directory, CreateTopics of 50 one-partition topics per
  request (confluent-kafka's AdminClient), a 1.2 s pause between requests so the server's
  controller mutation quota (50 partitions/s, bursts of 200) never throttles: ms per topic,
  median over 3 requests;
- ``--kafka``: the same CreateTopics requests to a one-node Kafka broker (KRaft, on 127.0.0.1,
  tests/support/kafka_broker.py) holding N topics too.

Each ``label=path`` is a build (its ``python`` folder); every measurement of a size runs in a
child process with that ``PYTHONPATH``, the builds alternating, ``--rounds`` times each (medians
reported). The Kafka broker's row is measured once per size. Prints a markdown table with the
ratio of each build to the first; ``--out`` writes it there too."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))


def fill(path: str, n: int) -> None:
    """N topics of one partition in one metadata write (``DataDir.update``, in every build)."""
    from kafkalite.datadir import DataDir

    def change(topics: dict) -> None:
        for i in range(n):
            name = f"fill-{i:05}"
            os.makedirs(os.path.join(path, f"{name}-0"), exist_ok=True)
            topics[name] = {"partitions": 1, "config": {}}

    DataDir(path, create=True).update(change, create=True)


def embedded(path: str, creates: int) -> tuple[list[float], list[float]]:
    """Wall and CPU ms of each create (the wall time is mostly the two syncs, whose latency
    depends on whatever else the disk does; the CPU time is what grows with the topic count)."""
    from kafkalite import Admin

    admin = Admin(path)
    wall, cpu = [], []
    for i in range(creates):
        t, c = time.perf_counter(), time.process_time()
        admin.create_topic(f"new-{i:04}", 1)
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return wall, cpu


OPEN_CHILD = r"""
import json, sys, time
path = sys.argv[1]
t0 = time.perf_counter()
from kafkalite import Admin, Consumer, Producer
t1 = time.perf_counter()
topics = Admin(path).list_topics()
t2 = time.perf_counter()
p = Producer(path)
p.send("fill-00000", b"x")
p.flush()
t3 = time.perf_counter()
p.close()
t4 = time.perf_counter()
c = Consumer(path, "fill-00000", auto_offset_reset="earliest")
got = []
while not got:
    got = [r for rs in c.poll(timeout_ms=1000).values() for r in rs]
t5 = time.perf_counter()
c.close()
print(json.dumps({"list": (t2 - t1) * 1000, "producer": (t3 - t2) * 1000, "consumer": (t5 - t4) * 1000, "n": len(topics)}))
"""


def open_times(path: str) -> dict[str, float]:
    runs = []
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", OPEN_CHILD, path], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout))
    return {k: statistics.median(r[k] for r in runs) for k in ("list", "producer", "consumer")}


def create_requests(bootstrap: str, prefix: str, rounds: int = 3, per_request: int = 50) -> list[float]:
    """ms per topic of CreateTopics requests of `per_request` topics each."""
    from confluent_kafka.admin import AdminClient, NewTopic

    client = AdminClient({"bootstrap.servers": bootstrap})
    out = []
    for r in range(rounds):
        time.sleep(1.2)  # the quota's bucket refills (50 partitions/s)
        topics = [NewTopic(f"{prefix}-{r}-{i:03}", 1, 1) for i in range(per_request)]
        t = time.perf_counter()
        for future in client.create_topics(topics, operation_timeout=60, request_timeout=60).values():
            future.result()
        out.append((time.perf_counter() - t) * 1000 / per_request)
    return out


def served(path: str) -> list[float]:
    from serve_proc import start_serve

    def start(*args: str, **kwargs):
        return subprocess.Popen([sys.executable, "-m", *args, "--log-level", "WARNING"], **kwargs)

    proc, bootstrap = start_serve(start, path)
    try:
        return create_requests(bootstrap, "served")
    finally:
        proc.kill()
        proc.wait()


def kafka(n: int, work: str) -> list[float]:
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka_broker import KafkaBroker

    broker = KafkaBroker(os.path.join(work, "kafka-logs"), os.path.join(work, "kafka-work")).start()
    try:
        client = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        for start in range(0, n, 500):  # the fill, 500 a request, not timed
            topics = [NewTopic(f"fill-{i:05}", 1, 1) for i in range(start, min(n, start + 500))]
            for future in client.create_topics(topics, operation_timeout=120, request_timeout=120).values():
                future.result()
        return create_requests(broker.bootstrap_servers, "kafka")
    finally:
        broker.stop()


def measure(n: int, creates: int, with_served: bool) -> dict[str, float]:
    """Everything for one size, in this process (with the build on its ``PYTHONPATH``)."""
    work = tempfile.mkdtemp(prefix="bench-topics-")
    try:
        path = os.path.join(work, "d")
        fill(path, n)
        wall, cpu = embedded(path, creates)
        row = {
            "median": statistics.median(wall),
            "mean": statistics.mean(wall),
            "cpu": statistics.median(cpu),
            **open_times(path),
        }
        if with_served:
            row["served"] = statistics.median(served(path))
        return row
    finally:
        shutil.rmtree(work, ignore_errors=True)


COLUMNS = [
    ("median", "create_topic median ms"),
    ("mean", "create_topic mean ms"),
    ("cpu", "create_topic CPU ms (median)"),
    ("list", "Admin+list_topics, fresh process, ms"),
    ("producer", "Producer start+first send ms"),
    ("consumer", "Consumer start+first record ms"),
    ("served", "served CreateTopics ms/topic"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="*", help="label=path of a build's python folder")
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--creates", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--served", action="store_true")
    ap.add_argument("--kafka", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: measure this size
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one, args.creates, args.served)))
        return
    builds = [b.split("=", 1) for b in args.builds] or [["this", os.environ.get("PYTHONPATH", "python")]]
    sizes = list(map(int, args.sizes.split(",")))
    load_before = os.getloadavg()[0]
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    kafka_rows: dict[int, float] = {}
    for n in sizes:
        for _ in range(args.rounds):
            for label, path in builds:
                child = [sys.executable, __file__, "--one", str(n), "--creates", str(args.creates)]
                child += ["--served"] if args.served else []
                env = {**os.environ, "PYTHONPATH": os.path.abspath(path)}
                out = subprocess.run(child, capture_output=True, text=True, env=env, check=True)
                runs.setdefault((label, n), []).append(json.loads(out.stdout.splitlines()[-1]))
                print(label, n, runs[(label, n)][-1], file=sys.stderr, flush=True)
        if args.kafka:
            work = tempfile.mkdtemp(prefix="bench-topics-kafka-")
            try:
                kafka_rows[n] = statistics.median(kafka(n, work))
            finally:
                shutil.rmtree(work, ignore_errors=True)
            print("kafka", n, kafka_rows[n], file=sys.stderr, flush=True)
    columns = [(k, h) for k, h in COLUMNS if k != "served" or args.served]
    lines = [
        f"builds: {', '.join(f'{label}={path}' for label, path in builds)}; {args.creates} creates per size, "
        f"medians of {args.rounds} rounds; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after",
        "",
        "| topics | build | "
        + " | ".join(h for _, h in columns)
        + (" | Kafka CreateTopics ms/topic |" if args.kafka else " |"),
        "|---:|---|" + "---:|" * (len(columns) + (1 if args.kafka else 0)),
    ]
    first = builds[0][0]
    for n in sizes:
        for label, _ in builds:
            med = {k: statistics.median(r[k] for r in runs[(label, n)]) for k, _ in columns}
            base = {k: statistics.median(r[k] for r in runs[(first, n)]) for k, _ in columns}
            cells = [
                f"{med[k]:.2f}" + ("" if label == first else f" ({med[k] / base[k]:.2f}x)")
                for k, _ in columns
            ]
            kafka_cell = [f"{kafka_rows[n]:.2f}"] if args.kafka else []
            lines.append(f"| {n:,} | {label} | " + " | ".join(cells + kafka_cell) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
