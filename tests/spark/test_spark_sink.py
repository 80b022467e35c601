"""The Spark sink's commit protocol under faults, without Spark (the commit is plain Python):
a streaming commit (one transaction per micro-batch) SIGKILLed at each step, or at a random
moment, while other producers write the same partitions, leaves read_committed readers all or
nothing and is finished on replay with every row exactly once; a batch commit refuses
bad rows before appending anything (its transaction under faults: test_spark_sink_transactions)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import textwrap
import time

import pytest

pa = pytest.importorskip("pyarrow")

from kafkalite import Admin  # noqa: E402
from kafkalite.log import Log  # noqa: E402
from test_spark_sink_transactions import failpoint_env, transaction_steps  # noqa: E402

ROWS = 5
FOREIGN = b"foreign"

# The committing process: commits micro-batch 7 of sink "ck" (ROWS rows to each of dst-0 and
# dst-1) and is SIGKILLed at a step of its transaction: a fail point named in
# KAFKALITE_FAILPOINTS, or "between_partitions" (dst-0 appended, then another producer
# appends to both partitions, then the kill), or "announce" (prints a line as its first append
# starts, for a kill at a random moment).
COMMITTER = textwrap.dedent(
    """
    import os, signal, sys
    import pyarrow as pa
    from kafkalite.log import Log
    from kafkalite.spark import sink

    path, step, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def other_producer():
        for p in (0, 1):
            with Log(os.path.join(path, f"dst-{p}"), shared_writers=True) as log:
                log.append_values([b"foreign"])

    if step == "between_partitions":
        append = Log.append_produce

        def append_produce(self, data):
            result = append(self, data)
            other_producer()
            os.kill(os.getpid(), signal.SIGKILL)
            return result

        Log.append_produce = append_produce
    if step == "announce":  # say when the first append starts, for a kill at a random moment after
        append = Log.append_produce

        def announced(self, data, announce=[True]):
            if announce.pop() if announce else False:
                print("appending", flush=True)
            return append(self, data)

        Log.append_produce = announced
    values = [b"row-%d" % i for i in range(2 * rows)]
    table = pa.table({"value": values, "partition": [i % 2 for i in range(2 * rows)]})
    sink.publish_once(path, sink.sink_id({"checkpointLocation": "ck"}), 7, [table], "dst")
    """
)

FAIL_POINTS = transaction_steps(offsets=True)


def _committer(spawn, path: str, step: str, rows: int = ROWS, **kwargs) -> subprocess.Popen:
    return spawn.code(COMMITTER, path, step, rows, env=failpoint_env(step), **kwargs)


def _planned(rows: int = ROWS) -> pa.Table:
    values = [b"row-%d" % i for i in range(2 * rows)]
    return pa.table({"value": values, "partition": [i % 2 for i in range(2 * rows)]})


def _replay(path: str, rows: int = ROWS) -> bool:
    from kafkalite.spark import sink

    return sink.publish_once(path, sink.sink_id({"checkpointLocation": "ck"}), 7, [_planned(rows)], "dst")


def _values(path: str, partition: int) -> list[bytes]:
    """``partition`` as a read_committed reader sees it."""
    with Log(os.path.join(path, f"dst-{partition}"), readonly=True) as log:
        return [r.value for r in log.committed_records()]


def _ours(path: str, partition: int) -> list[bytes]:
    return [v for v in _values(path, partition) if v != FOREIGN]


def _check_exactly_once(path: str, rows: int = ROWS) -> None:
    for p in (0, 1):
        assert _ours(path, p) == [b"row-%d" % i for i in range(p, 2 * rows, 2)], (
            f"dst-{p}: rows missing, duplicated or reordered"
        )
        with Log(os.path.join(path, f"dst-{p}"), readonly=True) as log:
            assert log.last_stable_offset == log.end_offset, f"dst-{p}: a transaction is still open"


def _open_transaction(path: str) -> bool:
    with Log(os.path.join(path, "dst-0"), readonly=True) as log:
        return bool(log.last_stable_offset < log.end_offset)


@pytest.fixture
def data(tmp_path):
    path = str(tmp_path / "data")
    Admin(path).create_topic("dst", 2)
    return path


@pytest.mark.parametrize("step", [*FAIL_POINTS, "between_partitions"])
def test_kill_9_at_each_commit_step_then_replay_writes_each_row_once(data, step, spawn):
    """Killed at each step of its transaction while another producer writes the same
    partitions: read_committed readers see each partition's rows of the micro-batch all or not
    at all, and after Spark's replay every row exactly once, the other producer's records all
    there, no transaction left open, and a second replay skipped."""
    child = _committer(spawn, data, step)
    assert child.wait(60) == -signal.SIGKILL, "the commit was not killed at its step"
    for p in (0, 1):
        assert _ours(data, p) in ([], [b"row-%d" % i for i in range(p, 2 * ROWS, 2)]), f"dst-{p}: part of it"
    with Log(os.path.join(data, "dst-1"), shared_writers=True) as log:
        log.append_values([FOREIGN])  # another producer writes before Spark replays
    _replay(data)
    _check_exactly_once(data)
    foreign = sum(v == FOREIGN for p in (0, 1) for v in _values(data, p))
    assert foreign == (3 if step == "between_partitions" else 1)  # the other producer's records are all there
    assert _replay(data) is False  # committed: a second replay is skipped
    _check_exactly_once(data)


def test_a_micro_batch_left_pending_by_an_older_kafkalite_is_finished_without_its_appended_rows(data):
    """Upgrade: the idempotent protocol of an older version recorded micro-batch 7 as pending and
    appended dst-0's rows (visible, outside any transaction) before it was killed. The replay
    appends only dst-1's, and the older version's committed micro-batch id still counts."""
    from kafkalite.spark import sink
    from kafkalite.spark.batches import encode

    ident = sink.sink_id({"checkpointLocation": "ck"})
    marker = os.path.join(data, sink.SINKS_DIR, f"{ident}.json")
    os.makedirs(os.path.dirname(marker))
    with open(marker, "w") as f:
        pending = {"batch_id": 7, "starts": {"dst:0": 0, "dst:1": 0}, "sequences": {"dst:0": 0, "dst:1": 0}}
        json.dump({"batch_id": 6, "sequences": {}, "pending": pending}, f)
    with Log(os.path.join(data, "dst-0"), shared_writers=True) as log:
        rows = [b"row-%d" % i for i in range(0, 2 * ROWS, 2)]
        log.append_produce(encode(log, rows, [None] * ROWS, [[]] * ROWS, sink.producer_for(ident), 0))
    assert _replay(data) is True
    _check_exactly_once(data)
    assert sink.publish_once(data, ident, 6, [_planned()], "dst") is False  # committed by the older version


@pytest.mark.slow
def test_kill_9_at_random_moments_with_a_concurrent_producer(tmp_path, spawn):
    """A large micro-batch (several batches per partition), killed at random times while another
    process keeps producing to the same partitions; every replay leaves each row exactly once."""
    seed = int(os.environ.get("KAFKALITE_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed={seed}")
    rng = random.Random(seed)
    rows = 60_000
    producer_code = textwrap.dedent(
        """
        import os, sys, time
        from kafkalite.log import Log
        logs = [Log(os.path.join(sys.argv[1], f"dst-{p}"), shared_writers=True) for p in (0, 1)]
        while True:
            for log in logs:
                log.append_values([b"foreign"])
            time.sleep(0.001)
        """
    )
    killed = interrupted = 0
    for attempt in range(8):
        path = str(tmp_path / f"d{attempt}")
        Admin(path).create_topic("dst", 2, {"max.message.bytes": 64 * 1024})
        other = spawn.code(producer_code, path)
        try:
            child = _committer(spawn, path, "announce", rows, stdout=subprocess.PIPE)
            assert child.stdout.readline() == b"appending\n"  # the transaction is open
            # Then somewhere in its appends or its end: at once on even attempts (the appends of a
            # fast engine take a few ms, so these land inside them), up to 30 ms later on odd ones.
            time.sleep(0.0 if attempt % 2 == 0 else rng.uniform(0.0, 0.03))
            child.send_signal(signal.SIGKILL)
            if child.wait(60) == -signal.SIGKILL:
                killed += 1
                interrupted += _open_transaction(path)
            _replay(path, rows)
        finally:
            other.kill()
            other.wait()
        _check_exactly_once(path, rows)
    print(f"killed {killed} commits, {interrupted} of them with their transaction open")
    assert interrupted >= 1


def test_a_batch_write_refuses_bad_rows_before_appending_anything(data):
    from kafkalite.spark import sink

    good_then_bad = pa.table({"value": [b"a", b"b"], "partition": [0, 5]})
    with pytest.raises(ValueError, match="partition 5 of topic 'dst'"):
        sink.publish(data, [good_then_bad], "dst")
    Admin(data).create_topic("small", 2, {"max.message.bytes": 1024})
    too_large = pa.table({"value": [b"ok", b"x" * 4096], "partition": [0, 1]})
    with pytest.raises(ValueError):
        sink.publish(data, [too_large], "small")
    Admin(data).create_topic("kv", 2, {"cleanup.policy": "compact"})
    keyless = pa.table({"value": [b"v", b"w"], "key": [b"k", None], "partition": [0, 1]})
    with pytest.raises(ValueError, match="key"):
        sink.publish(data, [keyless], "kv")
    for topic in ("dst", "small", "kv"):
        for p in (0, 1):
            with Log(os.path.join(data, f"{topic}-{p}"), readonly=True) as log:
                assert log.end_offset == 0, f"{topic}-{p} got rows from a refused write"
