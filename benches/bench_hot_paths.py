"""The per-record hot paths of issue 14 (targets 1, 3, 6), kafkalite alone: keyed ``send()``
per record (8-byte keys, 100-byte values), consumer iteration over records with keys and
values, and the producer's peak resident memory writing one partition. Peers are compared in
bench_peers.py; this one is for before/after runs of one change. Each figure is the best of
``--rounds``; wall-clock and process CPU rates are both given (on a shared machine the CPU rate
is the steadier one). Every run checks that what it counted was written.

    python benches/bench_hot_paths.py [--records 1000000] [--rounds 3] [--out benches/results/hot_paths]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from kafkalite import Admin, Consumer, Producer
from report import machine, write_report

VALUE = b"v" * 100

RSS_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[3])  # benches/, for report.py
from kafkalite import Admin, Producer
from report import memory_status as status
data, n = sys.argv[1], int(sys.argv[2])
Admin(data).create_topic("t", partitions=1)
peak = {"VmRSS": 0, "RssFile": 0}
with Producer(data) as p:
    send = p.send
    for i in range(n):
        send("t", b"v" * 100, i.to_bytes(8, "big"))
        if i % 100_000 == 0:
            peak = {k: max(v, peak[k]) for k, v in status().items()}
    p.flush()
    peak = {k: max(v, peak[k]) for k, v in status().items()}
print(json.dumps(peak))
"""


def rates(fn) -> tuple[float, float, int]:
    wall, cpu = time.perf_counter(), time.process_time()
    count = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "hot_paths"))
    args = parser.parse_args()
    n = args.records
    keys = [i.to_bytes(8, "big") for i in range(n)]
    res: dict[str, dict] = {}
    work = tempfile.mkdtemp(prefix="kafkalite-hot-")
    try:
        for r in range(args.rounds):
            data = os.path.join(work, f"d{r}")
            Admin(data).create_topic("t", partitions=1)

            def send_keyed(data: str = data) -> int:
                with Producer(data) as p:
                    send = p.send
                    futures = [send("t", VALUE, k) for k in keys]
                failed = [f for f in futures if not f.succeeded()]
                if failed:
                    raise SystemExit(f"{len(failed)} of {n} sends failed: {failed[0].exception!r}")
                return n

            def consume(data: str = data) -> int:
                with Consumer(data, "t", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
                    got = sum(1 for m in c if m.key is not None and m.value is not None)
                if got != n:
                    raise SystemExit(f"consumed {got} records with keys and values, expected {n}")
                return got

            for name, fn in (("send() keyed, per record", send_keyed), ("consumer iteration", consume)):
                wall, cpu, count = rates(fn)
                best = res.setdefault(name, {"records_per_s": 0.0, "records_per_cpu_s": 0.0})
                best["records_per_s"] = max(best["records_per_s"], count / wall)
                best["records_per_cpu_s"] = max(best["records_per_cpu_s"], count / cpu)
            shutil.rmtree(data)
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                RSS_CHILD,
                os.path.join(work, "rss"),
                str(2 * n),
                os.path.dirname(__file__),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        rss = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]
    lines = [
        f"# Hot paths: {n:,} records (8-byte keys, 100-byte values), best of {args.rounds}",
        "",
        f"Machine: {machine()}, 1-minute load at the end {load:.1f}",
        "",
        "| workload | records/s (wall) | records per CPU-second |",
        "|---|---:|---:|",
    ]
    for name, r in res.items():
        lines.append(f"| {name} | {r['records_per_s']:,.0f} | {r['records_per_cpu_s']:,.0f} |")
    lines += [
        "",
        f"Producer writing one partition ({2 * n:,} keyed sends): peak VmRSS {rss['VmRSS'] >> 20} MB, "
        f"peak RssFile (file-backed) {rss['RssFile'] >> 20} MB",
    ]
    raw = {"records": n, "load": load, "throughput": res, "producer_rss_bytes": rss}
    write_report(args.out, "hot_paths", raw, lines)


if __name__ == "__main__":
    main()
