"""The producer's acks='all' group commit while it streams (issue 25 item 1): batches are now
appended by the native drain and handed to ``DurableAcks``, whose thread is woken only when
idle and syncs, per group, everything handed in while the previous sync ran. Its waits face
the faults they must survive: another process stopped (SIGSTOP) while it holds the partition's sync lock, the
syncing process killed (SIGKILL) in the middle of its sync, and an msync failing with EIO
(the engine's fail points). In each, a record is acknowledged only once a sync covered it,
and a waiting flush() is bounded by its timeout, never by the stopped process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time

import pytest
from helpers import CHILD_OUTCOMES, run_python_ok
from kafkalite import Admin, KafkaTimeoutError, Log, Producer

#: Takes the partition's sync lock (the flock on its group-commit file), says so, and holds it.
HOLD_SYNC_LOCK = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(os.path.join(sys.argv[1], ".kafkalite-durable"), os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, max(os.fstat(fd).st_size, 4096))
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(600)
    """
)


def test_a_stopped_process_holding_the_sync_lock_holds_back_acknowledgements_not_flush_timeouts(
    tmp_path, spawn
):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", partitions=1)
    with Producer(data, acks="all") as warm:  # creates the group-commit file and joins it
        warm.send("t", b"warm-up", key=b"k").get(30)
    holder = spawn.code(HOLD_SYNC_LOCK, os.path.join(data, "t-0"), stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    os.kill(holder.pid, signal.SIGSTOP)
    p = Producer(data, acks="all")
    try:
        futures = [
            p.send("t", b"v" * 100, key=b"%d" % i) for i in range(20_000)
        ]  # streaming: the native drain
        began = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            p.flush(timeout=1)
        assert time.monotonic() - began < 5, "flush(timeout=1) waited far past its timeout"
        done = [f for f in futures if f.is_done]
        assert not done, f"{len(done)} records acknowledged while no sync could run"
        os.kill(holder.pid, signal.SIGKILL)  # the lock is released with the process
        holder.wait(30)
        p.flush(timeout=60)
        offsets = [f.get(0).offset for f in futures]
    finally:
        p.close(timeout=60)
    assert offsets == list(range(1, 20_001))
    with Log(os.path.join(data, "t-0"), readonly=True) as log:
        assert log.end_offset == 20_001


#: One producer process of two on one partition: sends `n` acks='all' records tagged with its
#: name, flushing every 1,000, and prints each acknowledged record's number as its callback runs.
SENDER = textwrap.dedent(
    """
    import sys
    from kafkalite import Producer
    data, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    def acked(i, metadata):  # kafka-python order: the bound arguments, then the metadata
        print(i, flush=True)
    with Producer(data, acks="all") as p:
        for i in range(n):
            p.send("t", b"%s-%07d" % (name.encode(), i), key=b"k").add_callback(acked, i)
            if i % 1000 == 999:
                p.flush(120)  # a sync at least every 1,000 records: many syncs, in both processes
        p.flush(120)
    print("done", flush=True)
    """
)


def test_a_syncer_killed_in_the_middle_of_its_sync_leaves_no_writer_waiting_and_no_ack_unsynced(
    tmp_path, spawn
):
    """Process A is killed (SIGKILL, a fail point) after one of its msyncs returned and before it
    published the durable watermark, holding the sync lock; process B, streaming on the same
    partition, takes the released lock and finishes: all its records acknowledged, every
    acknowledged record of either process in the log."""
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", partitions=1)
    n = 30_000
    env_a = {**os.environ, "KAFKALITE_FAILPOINTS": "group_commit.publish=kill@5"}
    a = spawn.code(SENDER, data, "a", n, env=env_a, stdout=subprocess.PIPE, text=True)
    b = spawn.code(SENDER, data, "b", n, stdout=subprocess.PIPE, text=True)
    out_b, _ = b.communicate(timeout=150)
    out_a, _ = a.communicate(timeout=150)
    assert a.returncode == -signal.SIGKILL, f"the fail point never killed A (exit {a.returncode})"
    assert b.returncode == 0 and out_b.splitlines()[-1] == "done", out_b[-500:]
    acked = {"a": [int(x) for x in out_a.split()], "b": [int(x) for x in out_b.split()[:-1]]}
    assert len(acked["b"]) == n
    with Log(os.path.join(data, "t-0"), readonly=True) as log:
        stored = {r.value for r in log.records()}
    for name, ids in acked.items():
        missing = [i for i in ids if b"%s-%07d" % (name.encode(), i) not in stored]
        assert not missing, f"{len(missing)} acknowledged records of {name} are not in the log: {missing[:5]}"


STREAMING_PRODUCER = CHILD_OUTCOMES + textwrap.dedent(
    """
    import json, sys, time
    from kafkalite import Admin, Producer
    path = sys.argv[1]
    Admin(path).create_topic("t", partitions=1)
    with Producer(path, acks="all") as p:
        futures = []
        for i in range(30000):
            futures.append(p.send("t", b"v" * 100, key=b"%d" % i))
            if i % 1000 == 999:
                # A pause between bursts: the sending thread keeps the GIL through its appends,
                # so the acknowledging thread syncs a group when it gets the GIL (5 ms, or
                # here): about 30 groups however loaded the machine, so the nth sync exists.
                time.sleep(0.001)
        print(json.dumps({"results": outcomes(p, futures)}))
    """
)


@pytest.mark.parametrize("nth", [2, 6])
def test_an_msync_failing_while_a_producer_streams_acknowledges_only_what_earlier_syncs_covered(
    tmp_path, nth
):
    """One thread streams 30,000 records in bursts of 1,000 (the native drain, groups of many
    batches); the nth group's msync fails with EIO: the records acknowledged are a prefix of the
    log that the syncs before it covered, and every later record fails typed."""
    env = {**os.environ, "KAFKALITE_FAILPOINTS": f"group_commit.sync=eio@{nth}"}
    done = run_python_ok(STREAMING_PRODUCER, str(tmp_path / "data"), env=env)
    out = json.loads(done.stdout.splitlines()[-1])
    results = out["results"]
    ok = [r[1] for r in results if r[0] == "ok"]
    failed = [r for r in results if r[0] != "ok"]
    assert ok and failed, f"{len(ok)} acknowledged, {len(failed)} failed: the fault should land midway"
    assert {r[0] for r in failed} == {"LogPoisonedError"}, {r[0] for r in failed}
    assert ok == list(range(len(ok))), "acknowledged offsets are not the log's first records"
    first_failed = next(i for i, r in enumerate(results) if r[0] != "ok")
    assert all(r[0] != "ok" for r in results[first_failed:]), (
        "a record after the failed sync was acknowledged"
    )


THREADED_PRODUCER = CHILD_OUTCOMES + textwrap.dedent(
    """
    import json, sys, threading
    from kafkalite import Admin, Producer
    path = sys.argv[1]
    Admin(path).create_topic("t", partitions=4)
    with Producer(path, acks="all") as p:
        futures = [[] for _ in range(3)]
        def send(n):
            futures[n] = [p.send("t", b"v" * 100, partition=i % 4) for i in range(12000)]
        threads = [threading.Thread(target=send, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(json.dumps({"results": outcomes(p, [f for fs in futures for f in fs])}))
    """
)


@pytest.mark.parametrize("nth", [3, 9])
def test_an_msync_failing_while_threads_stream_to_partitions_resolves_every_future_and_poisons_one_partition(
    tmp_path, nth
):
    """Three threads hand batches of four partitions to the acknowledging thread's queue
    (groups span partitions); the nth sync fails with EIO: every future resolves within the
    bound, the failed ones typed, and what was acknowledged is in the log, one partition's
    failure leaving the others' acknowledgements standing."""
    data = str(tmp_path / "data")
    env = {**os.environ, "KAFKALITE_FAILPOINTS": f"group_commit.sync=eio@{nth}"}
    done = run_python_ok(THREADED_PRODUCER, data, env=env)
    results = json.loads(done.stdout.splitlines()[-1])["results"]
    assert len(results) == 36000
    ok = [(r[2], r[1]) for r in results if r[0] == "ok"]
    failed = [r for r in results if r[0] != "ok"]
    assert ok and failed, f"{len(ok)} acknowledged, {len(failed)} failed: the fault should land midway"
    assert {r[0] for r in failed} == {"LogPoisonedError"}, {r[0] for r in failed}
    for partition in range(4):
        with Log(os.path.join(data, f"t-{partition}"), readonly=True) as log:
            end = log.end_offset
        acked = [o for p, o in ok if p == partition]
        assert all(o < end for o in acked), f"an acknowledged record of t-{partition} is not in its log"
    assert len({p for p, _ in ok}) >= 2, "a failed sync of one partition stopped the others' acknowledgements"


#: acks='all' through segments of 16 KiB: about every 140th record's batch rolls the segment.
#: The producer appends without releasing the GIL and rolls with it released, in the append
#: lock hold that found the roll due (`Log::try_append_builder_deferred`, `append_rolling`).
#: The first errback (run by the draining thread right after the failed append, before it
#: appends the next batch) notes whether the partition's append lock is free then; a hold kept
#: after the failure would be released only by this writer's next append, or never if it was
#: the last. Prints each future's outcome, that note, and the log's records.
ROLLING_PRODUCER = CHILD_OUTCOMES + textwrap.dedent(
    """
    import fcntl, json, os, sys
    from kafkalite import Admin, Log, Producer
    path = sys.argv[1]
    Admin(path).create_topic("t", partitions=1, config={"segment.bytes": 16384})
    free = []
    def lock_free(e):
        if not free:
            with open(os.path.join(path, "t-0", ".kafkalite.lock"), "a+") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(lock, fcntl.LOCK_UN)
                    free.append(True)
                except BlockingIOError:
                    free.append(False)
    with Producer(path, acks="all", batch_size=1024, linger_ms=0) as p:
        futures = []
        for i in range(3000):
            futures.append(p.send("t", b"%05d" % i + b"v" * 100, key=b"k"))
            futures[-1].add_errback(lock_free)
        out = outcomes(p, futures)
    with Log(os.path.join(path, "t-0"), readonly=True) as log:
        values = [r.value[:5].decode() for r in log.records()]
    print(json.dumps({"results": out, "lock_free": free, "values": values}))
    """
)


@pytest.mark.parametrize("fault", ["roll.after_seal=eio@3", "roll.after_create=panic@3"])
def test_a_roll_failing_in_the_producers_append_fails_its_batch_typed_and_releases_the_append_lock(
    tmp_path, fault
):
    """The third roll of an acks='all' producer fails (EIO after the seal: undone; a panic after
    the new segment exists: the log is poisoned) while the sending thread rolls in the append
    lock hold it kept with the GIL released: the process goes on, that batch's futures fail
    typed, none is acknowledged that is not in the log, and the append lock is released."""
    env = {**os.environ, "KAFKALITE_FAILPOINTS": fault}
    done = run_python_ok(ROLLING_PRODUCER, str(tmp_path / "data"), env=env)
    out = json.loads(done.stdout.splitlines()[-1])
    results = out["results"]
    ok = {r[1]: i for i, r in enumerate(results) if r[0] == "ok"}
    failed = [r for r in results if r[0] != "ok"]
    assert ok and failed, f"{len(ok)} acknowledged, {len(failed)} failed: the fault should land midway"
    assert all(r[0].endswith("Error") and r[0] != "PanicException" for r in failed), {r[0] for r in failed}
    assert out["lock_free"] == [True], "the producer kept the partition's append lock after the failed roll"
    values = out["values"]
    for offset, i in ok.items():
        assert values[offset] == f"{i:05d}", f"acknowledged record {i} is not at offset {offset}"
