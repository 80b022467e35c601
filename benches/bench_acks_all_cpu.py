"""CPU seconds of one process's send() of N records (8-byte keys, 100-byte values) and flush(),
kafkalite only, for A/B runs of two builds on a shared machine (issue 25 item 1): wall time there
follows the load; user+sys of the process (getrusage) and its context switches much less. On an
idle machine the sending thread bounds the rate (the syncs and the acknowledging thread run on
the other core): its "run" is its CPU time, "queued" the time it was runnable but another
process had the core (the load), and "blocked" the time it slept, waiting for the GIL or a lock
(/proc/thread-self/schedstat). Run + blocked is its wall time without the load's queueing; the
blocked part still grows with the load (a GIL holder that is itself queued).

    PYTHONPATH=<checkout>/python python benches/bench_acks_all_cpu.py [all|1] [records] [partitions]

Keyed records go to one partition's topic by default; bench_peers' topics have four.

The data directory goes under $ABDIR (default /tmp; /dev/shm for tmpfs, where a sync is cheap)."""

import os
import resource
import shutil
import sys
import tempfile
import time

from kafkalite import Admin, Producer


def schedstat() -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable and waiting for one) of this thread."""
    with open("/proc/thread-self/schedstat") as f:
        run, queued, _ = f.read().split()
    return int(run) / 1e9, int(queued) / 1e9


acks = sys.argv[1] if len(sys.argv) > 1 else "all"
acks = 1 if acks == "1" else acks
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
partitions = int(sys.argv[3]) if len(sys.argv) > 3 else 1
d = tempfile.mkdtemp(prefix="embacks-", dir=os.environ.get("ABDIR", "/tmp"))
try:
    Admin(d).create_topic("t", partitions=partitions)
    p = Producer(d, acks=acks)
    V = b"v" * 100
    keys = [i.to_bytes(8, "big") for i in range(n)]
    p.send("t", V, key=keys[0])
    p.flush()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    s0 = schedstat()
    s = p.send
    for k in keys:
        s("t", V, key=k)
    p.flush()
    s1 = schedstat()
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    p.close()
    run, queued = s1[0] - s0[0], s1[1] - s0[1]
    blocked = (t1 - t0) - run - queued
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(
        f"acks={acks} partitions={partitions} {n / (t1 - t0):,.0f} rec/s  wall {t1 - t0:.2f}s cpu {cpu:.2f}s (user {r1.ru_utime - r0.ru_utime:.2f} sys {r1.ru_stime - r0.ru_stime:.2f})  vcsw {r1.ru_nvcsw - r0.ru_nvcsw} ivcsw {r1.ru_nivcsw - r0.ru_nivcsw}"
        f"  sending thread: run {run:.2f}s queued {queued:.2f}s blocked {blocked:.2f}s"
    )
finally:
    shutil.rmtree(d)
