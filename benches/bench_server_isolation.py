"""ApiVersions latency of `kafkalite serve` while neighbours hold locks (issue 21):
- idle: nothing held
- partition held: an embedded shared writer stopped (SIGSTOP) holding a partition's append lock,
  with two clients producing to that partition all the time (each answered REQUEST_TIMED_OUT
  after the server's deadline, then sending again)
- group held: an embedded member stopped holding its group's state lock, with a client joining
  that group all the time (COORDINATOR_LOAD_IN_PROGRESS after the deadline, then again)
- both held at once
- topic flood: three connections each send a Metadata naming 1,000 new topics

Each phase sends ApiVersions on a fresh connection every 50 ms for --seconds and reports
p50/p99/max. The server runs in its own process (`kafkalite serve`).

  python benches/bench_server_isolation.py [--seconds 12] [--name server-isolation-DATE]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# tests/support/: serve_proc.py, server_wire.py: what the tests use
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

import kafkalite  # noqa: E402
from kafkalite import _native  # noqa: E402
from report import write_report  # noqa: E402
from serve_proc import start_serve  # noqa: E402
from server_wire import HOLD_FLOCK, SHARED_WRITER, Wire, release, stop_holder, timed  # noqa: E402


def start_module(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], **kwargs)


def start_code(source: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", source, *args], **kwargs)


def probe(address: str, seconds: float) -> list[float]:
    """ApiVersions on a fresh connection every 50 ms: each one's latency in ms."""
    latencies = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        wire = Wire(address, timeout=120)
        error, took = timed(wire.api_versions)
        wire.close()
        assert error == 0
        latencies.append(took * 1000)
        time.sleep(0.05)
    return latencies


def keep_calling(stop: threading.Event, call, *args) -> dict:
    """Call `call(*args)` on one connection until `stop`; counts the answers by code."""
    answers: dict = {}

    def run() -> None:
        while not stop.is_set():
            code, _ = timed(call, *args)
            answers[code] = answers.get(code, 0) + 1

    threading.Thread(target=run, daemon=True).start()
    return answers


def summary(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    return {
        "count": len(ordered),
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "max_ms": round(ordered[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--name", default=f"server-isolation-{datetime.date.today()}")
    args = parser.parse_args()
    results: dict = {"load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as data:
        admin = kafkalite.Admin(data)
        admin.create_topic("held", partitions=2)
        proc, address = start_serve(start_module, data, "--log-level", "ERROR")
        stop = threading.Event()
        holders = []
        try:
            assert Wire(address).produce("held", 0, b"warm") == 0
            results["idle"] = summary(probe(address, args.seconds))

            holders.append(stop_holder(start_code, SHARED_WRITER, os.path.join(data, "held-0")))
            answers = [
                keep_calling(stop, Wire(address, timeout=120).produce, "held", 0, b"x") for _ in range(2)
            ]
            results["partition_held"] = summary(probe(address, args.seconds))
            results["partition_held"]["stuck_produce_answers"] = answers

            group_dir = os.path.join(data, _native.GROUPS_DIR, "held-group")
            os.makedirs(group_dir)
            holders.append(
                stop_holder(start_code, HOLD_FLOCK, os.path.join(group_dir, _native.GROUP_STATE_LOCK_FILE))
            )
            joins = keep_calling(stop, Wire(address, timeout=120).join_group, "held-group")
            results["partition_and_group_held"] = summary(probe(address, args.seconds))
            results["partition_and_group_held"]["stuck_join_answers"] = joins
            stop.set()
            for h in holders:
                release(h)
            holders.clear()

            floods = []
            for c in range(3):
                names = [f"flood-{c}-{i}" for i in range(1000)]
                t = threading.Thread(target=Wire(address, timeout=300).metadata, args=(names,), daemon=True)
                t.start()
                floods.append(t)
            results["topic_flood"] = summary(probe(address, args.seconds))
            for t in floods:
                t.join(300)
            results["topic_flood"]["topics_created"] = len(admin.list_topics()) - 1
        finally:
            stop.set()
            for h in holders:
                release(h)
            proc.terminate()
            proc.wait(30)
    results["load_after"] = os.getloadavg()
    lines = [
        "# ApiVersions latency while neighbours hold locks (issue 21)",
        "",
        f"`python benches/bench_server_isolation.py --seconds {args.seconds:g}`; load average "
        f"{results['load_before'][0]:.2f} before, {results['load_after'][0]:.2f} after. ApiVersions on a "
        "fresh connection every 50 ms; the server waits at most 5 s for a held lock.",
        "",
        "| phase | requests | p50 ms | p99 ms | max ms | notes |",
        "|---|---|---|---|---|---|",
    ]
    for phase in ("idle", "partition_held", "partition_and_group_held", "topic_flood"):
        r = results[phase]
        notes = {k: v for k, v in r.items() if k not in ("count", "p50_ms", "p99_ms", "max_ms")}
        lines.append(
            f"| {phase} | {r['count']} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | {notes or ''} |"
        )
    write_report(str(HERE / "results"), args.name, results, lines)


if __name__ == "__main__":
    main()
