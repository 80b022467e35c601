"""The workload of tests/engine/test_power_loss_group_commit.py: several threads, each its own
``Log(shared_writers=True, flush="always")`` of one partition, appending small batches, in
two processes at once (``--pair``); the first process is killed by the engine's fail point
``group_commit.sync=kill@N`` (SIGKILL at its N-th group sync, holding the sync lock, before
its msync) while the second goes on: as many Log threads and, with ``--producer``, as many
threads sending through a ``Producer(acks='all')`` (its Log threads then share one Log).

After each acknowledged append a thread opens ``MARKERS/ack-<first>-<last>-<pid>-<thread>-<seq>``
(the producer's future callback ``MARKERS/pack-<offset>-<offset>-...``), which does not exist: that failing openat() is the ack's point in the strace log, and the name
says which records it acknowledged (their values follow from it, ``values_for``). A process
ends with os._exit, as a crash would: no close. Both processes open their logs first and start
appending together, so the kill lands while the other process has appends waiting.

usage: group_commit_writer.py PART_DIR MARKERS SEED THREADS APPENDS SEGMENT_BYTES
       group_commit_writer.py --pair PART_DIR MARKERS SEED THREADS APPENDS SEGMENT_BYTES KILL_AT [--producer]"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

TOPIC = "events"


def values_for(pid: int, thread: int, seq: int, n: int, producer: bool = False) -> list[bytes]:
    """The values of one append (a producer's start with "<pid>-p")."""
    who = b"%d-p%d" % (pid, thread) if producer else b"%d-%d" % (pid, thread)
    return [(b"%s-%d-%d;" % (who, seq, i)) * (1 + (seq + i) % 7) for i in range(n)]


def writer(
    part_dir: str,
    markers: str,
    seed: int,
    thread: int,
    appends: int,
    segment_bytes: int,
    start: threading.Barrier,
    shared_log=None,
) -> None:
    from kafkalite import Log

    rng = random.Random(seed * 1000 + thread)
    pid = os.getpid()
    log = shared_log or Log(part_dir, shared_writers=True, flush="always", segment_bytes=segment_bytes)
    start.wait(120)  # opened
    start.wait(120)  # both processes opened theirs: go
    for seq in range(appends):
        first, last = log.append_values(values_for(pid, thread, seq, rng.randint(1, 20)))
        try:
            os.open(os.path.join(markers, f"ack-{first}-{last}-{pid}-{thread}-{seq}"), os.O_RDONLY)
        except FileNotFoundError:
            pass


def producer_thread(producer, markers: str, thread: int, appends: int, start: threading.Barrier) -> None:
    """send() with acks='all'; the future's callback (the producer's acks thread) marks the ack."""
    pid = os.getpid()
    start.wait(120)
    start.wait(120)
    for seq in range(appends * 4):  # single records: more of them, to overlap the other process

        def acked(m, seq=seq) -> None:
            try:
                os.open(
                    os.path.join(markers, f"pack-{m.offset}-{m.offset}-{pid}-{thread}-{seq}"), os.O_RDONLY
                )
            except FileNotFoundError:
                pass

        producer.send(TOPIC, values_for(pid, thread, seq, 1, producer=True)[0]).add_callback(acked)
        time.sleep(0.001)  # let the sender thread drain between sends: many small batches
    producer.flush()


def main(part_dir: str, markers: str, seed: int, threads: int, appends: int, segment_bytes: int) -> None:
    """Every thread opens its log (with GROUP_COMMIT_PRODUCER set, as many more threads send
    through one Producer(acks='all') on the partition's data directory, topic TOPIC); once all
    threads of both processes are ready (a file per process in GROUP_COMMIT_BARRIER), they append."""
    barrier = os.environ.get("GROUP_COMMIT_BARRIER")

    def both_ready() -> None:
        if barrier:
            open(os.path.join(barrier, str(os.getpid())), "w").close()
            deadline = time.monotonic() + 120
            while len(os.listdir(barrier)) < 2 and time.monotonic() < deadline:
                time.sleep(0.005)

    producing = bool(os.environ.get("GROUP_COMMIT_PRODUCER"))
    start = threading.Barrier(threads * (2 if producing else 1) + 1)
    shared_log = None
    if producing:  # this variant's Log threads also share one Log (their syncs group in-process)
        from kafkalite import Log

        shared_log = Log(part_dir, shared_writers=True, flush="always", segment_bytes=segment_bytes)
    workers = [
        threading.Thread(
            target=writer, args=(part_dir, markers, seed, t, appends, segment_bytes, start, shared_log)
        )
        for t in range(threads)
    ]
    if producing:
        from kafkalite import Producer

        producer = Producer(os.path.dirname(part_dir), acks="all")
        workers += [
            threading.Thread(target=producer_thread, args=(producer, markers, t, appends, start))
            for t in range(threads)
        ]
    for w in workers:
        w.start()
    # Every thread opened its log, then both processes did: go. (A thread that failed breaks
    # the barrier: the process fails instead of hanging.)
    start.wait(120)
    both_ready()
    start.wait(120)
    for w in workers:
        w.join()
    sys.stdout.flush()
    os._exit(0)


def pair(args: list[str], kill_at: int, with_producer: bool) -> None:
    """Both processes at once; the first killed at its kill_at-th group sync. Prints both statuses."""
    from kafkalite import Admin

    part_dir = args[0]
    assert os.path.basename(part_dir) == f"{TOPIC}-0", part_dir
    Admin(os.path.dirname(part_dir)).create_topic(TOPIC, partitions=1, config={"segment.bytes": int(args[5])})
    barrier = tempfile.mkdtemp(prefix="group-commit-barrier-")
    plain = dict(os.environ, GROUP_COMMIT_BARRIER=barrier)
    killed = dict(plain, KAFKALITE_FAILPOINTS=f"group_commit.sync=kill@{kill_at}")
    producing = dict(plain, GROUP_COMMIT_PRODUCER="1") if with_producer else plain
    kids = [
        subprocess.Popen([sys.executable, __file__, *args[:2], str(int(args[2]) + i), *args[3:]], env=env)
        for i, env in enumerate([killed, producing])
    ]
    print(" ".join(str(k.wait(300)) for k in kids), flush=True)
    shutil.rmtree(barrier)


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "--pair":
        pair(a[1:7], int(a[7]), a[8:] == ["--producer"])
    else:
        main(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]))
