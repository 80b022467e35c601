"""`kafkalite serve`'s resident memory under hostile fetches and many idle connections (issue 21,
target: peak RSS under 256 MB in each phase).

    python benches/bench_server_memory.py [--megabytes 100] [--connections 8] [--rounds 5]
        [--idle 2000] [--pythonpath DIR] [--out benches/results] [--name NAME]

One server process (``python -m kafkalite serve``) over a data directory with one partition of
``--megabytes`` MB (1 MB batches). Phases, each reporting the server's VmHWM (peak) and VmRSS
after it, from /proc/PID/status:
  1. amplification: ``--connections`` connections at once, each sending ``--rounds`` times a
     Fetch v4 that names the partition four times with max_bytes and partition_max_bytes
     2^31-1, and reading each answer;
  2. idle: ``--idle`` connections opened and left idle (each sent one ApiVersions first);
  3. both: phase 1 again while the idle connections stay open.
``--pythonpath`` runs the server from another checkout (``PYTHONPATH`` of the server only: the
same bench against an older build). Results: ``<name>.md`` and ``.json`` in --out."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))  # wire_fetch.py: what the tests use

from bench_server import serve_process, status_mb  # noqa: E402 (the server start bench_server.py makes)
from report import write_report  # noqa: E402
from wire_fetch import fill, hostile  # noqa: E402


def amplification(bootstrap: str, connections: int, rounds: int) -> float:
    """Seconds for every connection's rounds; raises if any failed."""
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=hostile, args=(bootstrap, "big", rounds, errors)) for _ in range(connections)
    ]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} hostile connections failed: {errors[0]!r}")
    return time.perf_counter() - began


def open_idle(bootstrap: str, count: int) -> list[socket.socket]:
    host, port = bootstrap.rsplit(":", 1)
    request = struct.pack(">hhih", 18, 0, 1, -1)  # ApiVersions v0
    socks = []
    for _ in range(count):
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(struct.pack(">i", len(request)) + request)
        socks.append(s)
    for s in socks:  # every connection answered: all of them are being served
        (size,) = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
        s.recv(size, socket.MSG_WAITALL)
    return socks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--megabytes", type=int, default=100)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--pythonpath", help="PYTHONPATH of the server process (another build)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--name", default=f"server-memory-{time.strftime('%Y-%m-%d')}")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kafkalite-memory-bench-"))
    env = {**os.environ, "PYTHONPATH": args.pythonpath} if args.pythonpath else None
    load_start = os.getloadavg()[0]
    server = None
    idle: list[socket.socket] = []
    try:
        fill(str(work / "data"), "big", 1, args.megabytes)
        server, bootstrap = serve_process(work / "data", env=env, log_level="ERROR")
        time.sleep(0.5)
        phases: dict[str, dict[str, float]] = {"started": status_mb(server.pid)}
        s = amplification(bootstrap, args.connections, args.rounds)
        phases["amplification"] = {**status_mb(server.pid), "seconds": s}
        idle = open_idle(bootstrap, args.idle)
        time.sleep(1)
        phases["idle"] = status_mb(server.pid)
        s = amplification(bootstrap, args.connections, args.rounds)
        phases["amplification + idle"] = {**status_mb(server.pid), "seconds": s}
        print(phases)
    finally:
        for s in idle:
            s.close()
        if server is not None:
            server.kill()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)
    load_end = os.getloadavg()[0]
    rows = [
        f"| {name} | {p['VmHWM']:.0f} | {p['VmRSS']:.0f} | {p['RssAnon']:.0f} | {p['RssFile']:.0f} | "
        f"{p['seconds']:.1f} |"
        if "seconds" in p
        else f"| {name} | {p['VmHWM']:.0f} | {p['VmRSS']:.0f} | {p['RssAnon']:.0f} | {p['RssFile']:.0f} | |"
        for name, p in phases.items()
    ]
    lines = [
        f"# kafkalite serve's memory under hostile fetches (`python benches/bench_server_memory.py "
        f"{' '.join(sys.argv[1:])}`)",
        "",
        f"One partition of {args.megabytes} MB. Amplification: {args.connections} connections at once, each "
        f"{args.rounds} Fetch requests naming the partition 4 times with max_bytes and partition_max_bytes "
        f"2^31-1. Idle: {args.idle} connections open (one ApiVersions each). MB from /proc/PID/status after "
        f"each phase (VmHWM: the peak so far). 1-minute load average {load_start:.2f} at the start, "
        f"{load_end:.2f} at the end. Target (issue 21): peak under 256 MB.",
        "",
        "| phase | VmHWM MB | VmRSS MB | RssAnon MB | RssFile MB | seconds |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
    ]
    results = {"args": vars(args), "load_average_1min": [load_start, load_end], "phases_mb": phases}
    write_report(args.out, args.name, results, lines)


if __name__ == "__main__":
    main()
