"""Group commit (issue 14 target 2) when the sync fails: a failing msync, injected with the
engine's fail point ``group_commit.sync``, fails every batch waiting for it and every later one
(the writer is poisoned: Linux may drop the failed pages, so a retried sync could succeed
without the data); nothing it did not sync is acknowledged. Each case runs in a child process,
since fail points are read once per process. (The kill -9 case, with a second process, is in
tests/engine/test_power_loss_group_commit.py.)"""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from helpers import CHILD_OUTCOMES, run_python_ok
from kafkalite import Log, LogPoisonedError

PRODUCER = CHILD_OUTCOMES + textwrap.dedent(
    """
    import json, sys, threading
    from kafkalite import Admin, Producer

    path, partitions, flush_every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    Admin(path).create_topic("t", partitions=partitions)
    futures = []
    with Producer(path, acks="all", linger_ms=1) as p:
        def send(t):
            for i in range(400):
                futures.append(p.send("t", b"%d-%d" % (t, i) * 20, key=b"%d-%d" % (t, i)))
                if flush_every and i % flush_every == flush_every - 1:
                    p.flush(60)  # each flush waits for a sync: several syncs for sure
        threads = [threading.Thread(target=send, args=(t,)) for t in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        out = outcomes(p, futures)
        try:
            p.send("t", b"after", key=b"k").get(60)
            later = "ok"
        except Exception as e:
            later = type(e).__name__
    print(json.dumps({"results": out, "later": later}))
    """
)


def run_producer(tmp_path, fault: str, partitions: int, flush_every: int = 0) -> dict:
    env = {**os.environ, "KAFKALITE_FAILPOINTS": fault}
    done = run_python_ok(PRODUCER, str(tmp_path / "data"), str(partitions), str(flush_every), env=env)
    return json.loads(done.stdout.splitlines()[-1])


def test_a_failing_sync_fails_every_waiting_batch_and_acknowledges_nothing(tmp_path):
    out = run_producer(tmp_path, "group_commit.sync=eio", partitions=2)
    results = out["results"]
    assert len(results) == 1600
    acknowledged = [r for r in results if r[0] == "ok"]
    assert not acknowledged, f"{len(acknowledged)} records were acknowledged though no sync succeeded"
    assert {r[0] for r in results} == {"LogPoisonedError"}, {r[0] for r in results}
    assert "group_commit.sync" in results[0][1] and "durable" in results[0][1], results[0][1]
    assert out["later"] == "LogPoisonedError", "a poisoned writer must refuse later sends too"


def test_a_sync_failing_midway_fails_what_it_covered_and_everything_after(tmp_path):
    # One partition, flushed every 50 records per thread (many syncs): its third group sync fails.
    out = run_producer(tmp_path, "group_commit.sync=eio@3", partitions=1, flush_every=50)
    results = out["results"]
    ok = sorted(r[1] for r in results if r[0] == "ok")
    failed = [r for r in results if r[0] != "ok"]
    assert ok and failed, f"{len(ok)} acknowledged, {len(failed)} failed: the fault should land midway"
    assert {r[0] for r in failed} == {"LogPoisonedError"}
    # What was acknowledged is a prefix of the log: the syncs that succeeded covered everything
    # appended before them; nothing after the failed sync is acknowledged.
    assert ok == list(range(len(ok))), "acknowledged offsets are not the log's first records"
    with Log(str(tmp_path / "data" / "t-0"), readonly=True) as log:
        got = {r.offset for r in log.records(0, len(ok))}
    assert got == set(ok)
    assert out["later"] == "LogPoisonedError"


LOG_CHILD = textwrap.dedent(
    """
    import sys
    from kafkalite import Log, LogPoisonedError
    log = Log(sys.argv[1], flush="always", shared_writers=True)
    try:
        log.append_values([b"never acknowledged"])
    except LogPoisonedError as e:
        print("first:", e)
    try:
        log.append_values([b"later"])
    except LogPoisonedError as e:
        print("later:", e)
    """
)


@pytest.mark.parametrize("point", ["group_commit.sync", "group_commit.publish"])
def test_a_log_whose_sync_fails_raises_and_takes_no_more_appends(tmp_path, point):
    """``Log(flush="always")``: the append that waited raises, and the next one too. A failure
    after the msync (before the watermark is published) fails as well: nothing is published."""
    part = tmp_path / "t-0"
    env = {**os.environ, "KAFKALITE_FAILPOINTS": f"{point}=eio"}
    done = run_python_ok(LOG_CHILD, str(part), env=env, timeout=60)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("first:") and point in lines[0], lines
    assert lines[1].startswith("later:"), lines
    # Reopened (recovery), the partition takes appends again.
    with Log(str(part), flush="always") as log:
        log.append_values([b"after reopening"])
        assert log.end_offset >= 1
    assert issubclass(LogPoisonedError, RuntimeError)
