"""The Spark sink's commit protocol under faults, without Spark (the commit is plain Python):
a streaming commit SIGKILLed at each step, or at a random moment, while other producers write
the same partitions, is finished on replay with every row exactly once; a batch commit refuses
bad rows before appending anything and names what it appended when an append fails."""

from __future__ import annotations

import errno
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

ROWS = 5
FOREIGN = b"foreign"

# The committing process: plans micro-batch 7 of sink "ck" (ROWS rows to each of dst-0 and
# dst-1), and at the step named by argv[2] lets "another producer" append to both partitions
# and then SIGKILLs itself. Steps: before_pending (the marker is about to be written),
# after_pending (written, nothing appended), between_partitions (dst-0 appended, dst-1 not),
# before_commit (both appended, the batch id not yet recorded), interleave (another producer
# appends between the marker and the sink's append, then the commit dies before recording the
# batch id), never.
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

    def die():
        other_producer()
        os.kill(os.getpid(), signal.SIGKILL)

    save = sink.save_state

    def save_state(path_, sink_, state):
        if step == "before_pending" and state["pending"]:
            die()
        if step in ("before_commit", "interleave") and not state["pending"]:
            die()
        save(path_, sink_, state)
        if step == "after_pending" and state["pending"]:
            die()
        if step == "interleave" and state["pending"]:
            other_producer()  # another producer appends between the marker and our append...

    sink.save_state = save_state
    append = Log.append_produce

    def append_produce(self, data):
        result = append(self, data)
        if step == "between_partitions":
            die()
        return result

    Log.append_produce = append_produce
    values = [b"row-%d" % i for i in range(2 * rows)]
    table = pa.table({"value": values, "partition": [i % 2 for i in range(2 * rows)]})
    sink.publish_once(path, sink.sink_id({"checkpointLocation": "ck"}), 7, [table], "dst")
    """
)


def _committer(spawn, path: str, step: str, rows: int = ROWS) -> subprocess.Popen:
    return spawn.code(COMMITTER, path, step, rows)


def _planned(rows: int = ROWS) -> pa.Table:
    values = [b"row-%d" % i for i in range(2 * rows)]
    return pa.table({"value": values, "partition": [i % 2 for i in range(2 * rows)]})


def _replay(path: str, rows: int = ROWS) -> bool:
    from kafkalite.spark import sink

    return sink.publish_once(path, sink.sink_id({"checkpointLocation": "ck"}), 7, [_planned(rows)], "dst")


def _values(path: str, partition: int) -> list[bytes]:
    with Log(os.path.join(path, f"dst-{partition}"), readonly=True) as log:
        return [r.value for r in log.records()]


def _check_exactly_once(path: str, rows: int = ROWS) -> None:
    for p in (0, 1):
        values = _values(path, p)
        ours = [v for v in values if v != FOREIGN]
        assert ours == [b"row-%d" % i for i in range(p, 2 * rows, 2)], (
            f"dst-{p}: rows missing, duplicated or reordered"
        )


@pytest.fixture
def data(tmp_path):
    path = str(tmp_path / "data")
    Admin(path).create_topic("dst", 2)
    return path


@pytest.mark.slow
def test_replay_after_a_crash_with_another_producer_in_between_appends_nothing_twice(data, spawn):
    """The reported case: the marker is written, another producer appends, the sink appends,
    the commit dies before recording the batch id; Spark replays the micro-batch."""
    child = _committer(spawn, data, "interleave")
    assert child.wait(60) == -signal.SIGKILL
    with Log(os.path.join(data, "dst-0"), shared_writers=True) as log:
        log.append_values([FOREIGN])  # and more writes before the replay
    _replay(data)
    _check_exactly_once(data)


@pytest.mark.slow
@pytest.mark.parametrize("step", ["before_pending", "after_pending", "between_partitions", "before_commit"])
def test_kill_9_at_each_commit_step_then_replay_writes_each_row_once(data, step, spawn):
    child = _committer(spawn, data, step)
    assert child.wait(60) == -signal.SIGKILL
    with Log(os.path.join(data, "dst-1"), shared_writers=True) as log:
        log.append_values([FOREIGN])  # another producer writes before Spark replays
    _replay(data)
    _check_exactly_once(data)
    foreign = sum(v == FOREIGN for p in (0, 1) for v in _values(data, p))
    assert foreign == 3  # the other producer's records are all there
    assert _replay(data) is False  # committed: a second replay is skipped
    _check_exactly_once(data)


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
    from kafkalite.spark import sink

    ident = sink.sink_id({"checkpointLocation": "ck"})
    killed = interrupted = 0
    for attempt in range(8):
        path = str(tmp_path / f"d{attempt}")
        Admin(path).create_topic("dst", 2, {"max.message.bytes": 64 * 1024})
        other = spawn.code(producer_code, path)
        try:
            child = _committer(spawn, path, "never", rows)
            deadline = time.monotonic() + 120
            while (
                child.poll() is None
                and not sink.load_state(path, ident)["pending"]
                and time.monotonic() < deadline
            ):
                time.sleep(0.0005)  # until the commit has recorded its pending marker
            # Then somewhere in its appends: at once on even attempts (the appends of a fast engine
            # take a few ms, so these land inside them), up to 80 ms later on odd ones.
            time.sleep(0.0 if attempt % 2 == 0 else rng.uniform(0.0, 0.08))
            child.send_signal(signal.SIGKILL)
            if child.wait(60) == -signal.SIGKILL:
                killed += 1
                interrupted += sink.load_state(path, ident)["pending"] is not None
            _replay(path, rows)
        finally:
            other.kill()
            other.wait()
        _check_exactly_once(path, rows)
    print(
        f"killed {killed} commits, {interrupted} of them after the pending marker and before the commit record"
    )
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


def test_a_batch_commit_that_fails_midway_names_what_it_appended(data, monkeypatch):
    from kafkalite.spark import sink

    calls = []
    append = Log.append_produce

    def failing(self, data_):
        calls.append(self.path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device (injected)", self.path)
        return append(self, data_)

    monkeypatch.setattr(Log, "append_produce", failing)
    with pytest.raises(OSError) as info:
        sink.publish(data, [_planned()], "dst")
    assert info.value.errno == errno.ENOSPC  # the cause keeps its type
    assert "appending to dst-1 failed" in "".join(info.value.__notes__)
    assert "stay visible: dst-0" in "".join(info.value.__notes__)
    monkeypatch.undo()
    assert len(_values(data, 0)) == ROWS and _values(data, 1) == []  # exactly what the note says


def test_the_commit_record_is_written_atomically_without_following_links(tmp_path):
    """The marker goes through ``_files.write_atomically``: a link planted where the sink once
    put its fixed temp file (``<marker>.tmp``) must not redirect the write to a decoy outside
    the data directory, and the bytes on disk are plain ``json.dumps`` of the state."""
    from kafkalite.spark import sink

    decoy = tmp_path / "decoy.txt"
    decoy.write_text("untouched")
    data = tmp_path / "data"
    ident = "a" * 32
    marker_dir = data / sink.SINKS_DIR
    marker_dir.mkdir(parents=True)
    (marker_dir / f"{ident}.json.tmp").symlink_to(decoy)
    state = {"batch_id": 3, "sequences": {"t:0": 7}, "pending": None}
    sink.save_state(str(data), ident, state)
    assert decoy.read_text() == "untouched"
    assert (marker_dir / f"{ident}.json").read_bytes() == json.dumps(state).encode()
    assert sink.load_state(str(data), ident) == state
    assert sorted(os.listdir(marker_dir)) == [f"{ident}.json", f"{ident}.json.tmp"]  # no temp file left
