"""Durable sends side by side (issue 14 target 2): kafkalite ``send()`` with ``acks='all'``
against confluent-kafka ``acks=all`` to a real one-node Kafka broker (KRaft on 127.0.0.1,
started and stopped here, as in bench_peers.py), in one run, with the same 8-byte keys and
100-byte values.

    python benches/bench_acks_all.py [--records N] [--rounds 3] [--shape 1x1 --shape 2x2]

A shape PxT runs P processes of T threads each, every thread sending records/(P*T) records
through its process's one producer (kafkalite's Producer and confluent-kafka's Producer are both
thread-safe); the time runs from "go" to the last process's flush. Rounds are interleaved and
the medians printed; every row counts its records back (end offsets) and stops the run if any
is missing. Prints a markdown table and writes it to ``results/acks-all-<date>.md`` (a new name
if that exists), or to --out."""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))  # helpers.py: the produce loop the tests use too

from helpers import produce_all  # noqa: E402

VALUE = b"v" * 100


def keys_for(start: int, n: int) -> list[bytes]:
    return [(start + i).to_bytes(8, "big") for i in range(n)]


# -- one sending process -----------------------------------------------------------------------
def child(side: str, target: str, topic: str, threads: int, start: int, n: int) -> None:
    """Build the producer, say "ready", wait for "go", send from `threads` threads, flush, say
    how long it took."""
    if side == "kafkalite":
        from kafkalite import Producer

        p = Producer(target, acks="all")

        def send(keys: list[bytes]) -> None:
            s = p.send
            for k in keys:
                s(topic, VALUE, key=k)

        def finish() -> None:
            p.flush()
            p.close()
    else:
        import confluent_kafka as ck

        failed: list = []
        p = ck.Producer(
            {
                "bootstrap.servers": target,
                "acks": "all",
                "delivery.report.only.error": True,
                "partitioner": "murmur2_random",
                "on_delivery": lambda err, msg: failed.append(err),
            }
        )

        def send(keys: list[bytes]) -> None:
            produce_all(p, topic, VALUE, keys)

        def finish() -> None:
            left = p.flush(120)
            if left or failed:
                raise SystemExit(f"confluent-kafka: {left} unsent, {len(failed)} failed")

    per = n // threads
    chunks = [keys_for(start + i * per, per) for i in range(threads)]
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.perf_counter()
    workers = [threading.Thread(target=send, args=(c,)) for c in chunks]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    finish()
    print(f"took {time.perf_counter() - began}", flush=True)


# -- the parent --------------------------------------------------------------------------------
def run_shape(side: str, target: str, topic: str, procs: int, threads: int, records: int) -> float:
    """Records per second of one row: procs x threads senders of records/(procs*threads) each."""
    per_proc = records // procs
    env = dict(os.environ)
    kids = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                side,
                target,
                topic,
                str(threads),
                str(i * per_proc),
                str(per_proc),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(procs)
    ]
    try:
        for k in kids:
            assert k.stdout is not None and k.stdout.readline().strip() == "ready", (
                f"{side} child did not start"
            )
        os.sync()  # earlier rows' writeback must not land on this one
        began = time.perf_counter()
        for k in kids:
            assert k.stdin is not None
            k.stdin.write("go\n")
            k.stdin.flush()
        for k in kids:
            assert k.stdout is not None
            line = k.stdout.readline()
            if not line.startswith("took"):
                raise SystemExit(f"{side} child failed: {line!r}")
        took = time.perf_counter() - began
    finally:
        for k in kids:
            if k.wait(120) != 0:
                raise SystemExit(f"{side} child exited with status {k.returncode}")
    return (records // procs // threads) * procs * threads / took


def new_result_path() -> Path:
    stem = HERE / "results" / f"acks-all-{datetime.date.today().isoformat()}"
    path, n = stem.with_suffix(".md"), 1
    while path.exists():
        n += 1
        path = Path(f"{stem}-{n}.md")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shape", action="append", help="PxT: processes x threads (default 1x1 and 2x2)")
    ap.add_argument("--out", help="write the table here (default: results/acks-all-<date>.md, a new name)")
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        side, target, topic, threads, start, n = args.child
        return child(side, target, topic, int(threads), int(start), int(n))

    import bench_peers  # the broker and the record counting, shared with the peers bench

    shapes = [tuple(int(x) for x in s.split("x")) for s in (args.shape or ["1x1", "2x2"])]
    work = Path(tempfile.mkdtemp(prefix="kafkalite-acks-all-"))
    broker = None
    try:
        broker = bench_peers.Broker(work)
        lite = bench_peers.Kafkalite(str(work / "data"))
        results: dict[tuple[str, tuple[int, int]], list[float]] = {}
        for r in range(args.rounds):
            for shape in shapes:
                sides = [("kafkalite", lite), ("confluent-kafka", broker)]
                for name, side in sides if r % 2 == 0 else reversed(sides):
                    topic = side.topic(f"a-{uuid.uuid4().hex[:8]}")
                    target = lite.data if name == "kafkalite" else broker.bootstrap
                    rate = run_shape(name, target, topic, shape[0], shape[1], args.records)
                    want = args.records // shape[0] // shape[1] * shape[0] * shape[1]
                    bench_peers.expect(side.count(topic), want, f"{name} {shape}")
                    side.drop(topic)
                    results.setdefault((name, shape), []).append(rate)
                    print(f"round {r + 1} {name} {shape[0]}x{shape[1]}: {rate:,.0f} rec/s", flush=True)
        lines = [
            f"acks=all, {args.records:,} records of 8-byte keys and 100-byte values, medians of {args.rounds} rounds",
            "",
            "| processes x threads | kafkalite `send(acks='all')` | confluent-kafka acks=all | ratio |",
            "|---|---:|---:|---:|",
        ]
        for shape in shapes:
            a = statistics.median(results[("kafkalite", shape)])
            b = statistics.median(results[("confluent-kafka", shape)])
            lines.append(f"| {shape[0]}x{shape[1]} | {a:,.0f} rec/s | {b:,.0f} rec/s | {a / b:.2f}x |")
        table = "\n".join(lines)
        print(table)
        out = Path(args.out) if args.out else new_result_path()
        out.write_text(table + "\n")
        print(f"written to {out}")
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
