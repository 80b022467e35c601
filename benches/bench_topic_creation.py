"""Topic creation and data-directory open as the topic count grows (issue 34 item 4).

    python benches/bench_topic_creation.py [--sizes 100,1000,10000] [--creates 50] [--served] [--kafka]
                                           [--label NAME] [--out FILE]

For each size N a data directory is filled with N topics of one partition in one metadata write
(so the fill costs the same for any build), then:
- embedded: ``--creates`` more topics made one by one with ``Admin.create_topic``, each timed;
  ms per topic, median and mean;
- open: in a fresh process, ``Admin(dir).list_topics()``, ``Producer(dir)`` up to its first
  send flushed, and ``Consumer(dir, topic)`` up to its first record (the interpreter's own start
  excluded), median of 3 processes;
- ``--served``: ``kafkalite serve`` on the directory, CreateTopics of 50 one-partition topics per
  request (confluent-kafka's AdminClient), a 1.2 s pause between requests so the server's
  controller mutation quota (50 partitions/s, bursts of 200) never throttles: ms per topic,
  median over 3 requests;
- ``--kafka``: the same CreateTopics requests to a one-node Kafka broker (KRaft, on 127.0.0.1,
  tests/kafka_broker.py) holding N topics too.

Run it under the build to measure (``PYTHONPATH=python`` for this worktree's); the children
inherit it. Prints a markdown table; ``--out`` appends it there under ``--label``."""

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
sys.path.insert(0, str(HERE.parent / "tests"))


def fill(path: str, n: int) -> None:
    """N topics of one partition in one metadata write (``DataDir.update``, in every build)."""
    from kafkalite.datadir import DataDir

    def change(topics: dict) -> None:
        for i in range(n):
            name = f"fill-{i:05}"
            os.makedirs(os.path.join(path, f"{name}-0"), exist_ok=True)
            topics[name] = {"partitions": 1, "config": {}}

    DataDir(path, create=True).update(change, create=True)


def embedded(path: str, creates: int) -> list[float]:
    from kafkalite import Admin

    admin = Admin(path)
    times = []
    for i in range(creates):
        t = time.perf_counter()
        admin.create_topic(f"new-{i:04}", 1)
        times.append((time.perf_counter() - t) * 1000)
    return times


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--creates", type=int, default=50)
    ap.add_argument("--served", action="store_true")
    ap.add_argument("--kafka", action="store_true")
    ap.add_argument("--label", default="")
    ap.add_argument("--out")
    args = ap.parse_args()
    import kafkalite

    rows = []
    for n in map(int, args.sizes.split(",")):
        work = tempfile.mkdtemp(prefix="bench-topics-")
        try:
            path = os.path.join(work, "d")
            fill(path, n)
            times = embedded(path, args.creates)
            opened = open_times(path)
            row = {
                "n": n,
                "median": statistics.median(times),
                "mean": statistics.mean(times),
                **opened,
            }
            if args.served:
                row["served"] = statistics.median(served(path))
            if args.kafka:
                row["kafka"] = statistics.median(kafka(n, work))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    head = "| topics | create_topic median ms | mean ms | list_topics (fresh process) ms | Producer start+send ms | Consumer start+first record ms |"
    sep = "|---:|---:|---:|---:|---:|---:|"
    if args.served:
        head += " served CreateTopics ms/topic |"
        sep += "---:|"
    if args.kafka:
        head += " Kafka CreateTopics ms/topic |"
        sep += "---:|"
    lines = [f"{args.label} ({os.path.dirname(kafkalite.__file__)})", "", head, sep]
    for r in rows:
        cells = [
            f"{r['n']:,}",
            f"{r['median']:.2f}",
            f"{r['mean']:.2f}",
            f"{r['list']:.1f}",
            f"{r['producer']:.1f}",
            f"{r['consumer']:.1f}",
        ]
        if args.served:
            cells.append(f"{r['served']:.2f}")
        if args.kafka:
            cells.append(f"{r['kafka']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
