"""A Spark batch write's commit is one transaction over all its partitions (without Spark: the
commit is plain Python): SIGKILLed at each step of the transaction (the engine's fail points,
and between two partitions' appends), read_committed readers see each partition's rows all or
not at all, and once the next commit has run (it ends the dead one under the same
transactional id) every partition holds the same whole number of copies of the write, with no
transaction left open to hold back the last stable offset. An append that fails aborts the
transaction; concurrent commits take separate pool slots and do not fence each other."""

from __future__ import annotations

import errno
import os
import signal
import textwrap

import pytest

pa = pytest.importorskip("pyarrow")

from kafkalite import Admin  # noqa: E402
from kafkalite._native import failpoint_names  # noqa: E402
from kafkalite.log import Log  # noqa: E402

ROWS = 5  # per partition

# Commits a batch write of ROWS rows to each of dst-0 and dst-1 (under the pool, or under
# argv[3] as kafka.transactional.id) and is SIGKILLed at a fail point (KAFKALITE_FAILPOINTS) or,
# for step "between_partitions", right after dst-0's append.
COMMITTER = textwrap.dedent(
    """
    import os, signal, sys
    import pyarrow as pa
    from kafkalite.log import Log
    from kafkalite.spark import sink

    path, step, ident = sys.argv[1], sys.argv[2], sys.argv[3] or None
    if step == "between_partitions":
        append = Log.append_produce

        def append_produce(self, data):
            result = append(self, data)
            os.kill(os.getpid(), signal.SIGKILL)
            return result

        Log.append_produce = append_produce
    rows = int(sys.argv[4])
    table = pa.table({"value": [b"row-%d" % i for i in range(2 * rows)], "partition": [i % 2 for i in range(2 * rows)]})
    sink.publish(path, [table], "dst", transactional_id=ident)
    """
)


def transaction_steps(offsets: bool) -> list[str]:
    """Every fail point of a transaction's steps, in order (rust/src/storage/failpoint.rs), those of
    send_offsets_to_transaction only with ``offsets``; the markers are written partition by
    partition, so ``txn.marker.after@2`` (both written) is added to the first one's."""
    names = [n for n in failpoint_names() if n.startswith("txn.") and (offsets or ".offsets." not in n)]
    return names + ["txn.marker.after@2"]


def failpoint_env(step: str) -> dict[str, str]:
    """The environment for a child killed at ``step`` (a fail point, @N: its N-th hit)."""
    env = dict(os.environ)
    if step.startswith("txn."):
        point, _, nth = step.partition("@")
        env["KAFKALITE_FAILPOINTS"] = f"{point}=kill" + (f"@{nth}" if nth else "")
    return env


def decided(step: str) -> bool:
    """Whether a kill at ``step`` comes after the commit decision was recorded."""
    return step.startswith(("txn.prepare.after", "txn.marker", "txn.complete"))


FAIL_POINTS = transaction_steps(offsets=False)


def _write(rows: int = ROWS) -> pa.Table:
    return pa.table(
        {"value": [b"row-%d" % i for i in range(2 * rows)], "partition": [i % 2 for i in range(2 * rows)]}
    )


def _committed(path: str, partition: int) -> list[bytes]:
    with Log(os.path.join(path, f"dst-{partition}"), readonly=True) as log:
        return [r.value for r in log.committed_records()]


def _copies(path: str, partition: int, rows: int = ROWS) -> int:
    """How many whole copies of the write's rows ``partition`` shows read_committed (a partial
    copy fails)."""
    values = _committed(path, partition)
    one = [b"row-%d" % i for i in range(partition, 2 * rows, 2)]
    copies, rest = divmod(len(values), len(one))
    assert rest == 0 and values == one * copies, (
        f"dst-{partition}: read_committed sees part of a write: {values}"
    )
    return copies


def _no_open_transaction(path: str) -> None:
    for p in (0, 1):
        with Log(os.path.join(path, f"dst-{p}"), readonly=True) as log:
            assert log.last_stable_offset == log.end_offset, f"dst-{p}: a transaction is still open"


@pytest.fixture
def data(tmp_path):
    path = str(tmp_path / "data")
    Admin(path).create_topic("dst", 2)
    return path


def _kill_commit(spawn, path: str, step: str, ident: str = "") -> None:
    child = spawn.code(COMMITTER, path, step, ident, ROWS, env=failpoint_env(step))
    assert child.wait(60) == -signal.SIGKILL, "the commit was not killed at its step"


@pytest.mark.parametrize("step", [*FAIL_POINTS, "between_partitions"])
@pytest.mark.parametrize("ident", ["", "etl-1"], ids=["pool", "kafka.transactional.id"])
def test_a_batch_commit_killed_at_each_step_is_all_or_nothing_and_the_next_commit_completes(
    data, spawn, step, ident
):
    from kafkalite.spark import sink

    _kill_commit(spawn, data, step, ident)
    seen = [_copies(data, p) for p in (0, 1)]  # each partition: all of its rows or none
    if not decided(step):
        assert seen == [0, 0], f"killed at {step}, before the commit decision, yet rows are visible"
    sink.publish(data, [_write()], "dst", transactional_id=ident or None)  # not blocked by the dead one
    _no_open_transaction(data)
    copies = [_copies(data, p) for p in (0, 1)]
    assert copies[0] == copies[1] == (2 if decided(step) else 1), (
        f"killed at {step}: read_committed sees {copies} copies of the write in dst-0, dst-1"
    )


def test_an_append_failing_midway_aborts_the_whole_write(data, monkeypatch):
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
        sink.publish(data, [_write()], "dst")
    assert info.value.errno == errno.ENOSPC  # the cause keeps its type
    notes = "".join(info.value.__notes__)
    assert "appending to dst-1 failed after dst-0" in notes and "aborted" in notes
    monkeypatch.undo()
    assert [_copies(data, p) for p in (0, 1)] == [0, 0]
    _no_open_transaction(data)  # aborted at once: nothing waits for the timeout
    sink.publish(data, [_write()], "dst")
    assert [_copies(data, p) for p in (0, 1)] == [1, 1]


def test_concurrent_commits_take_separate_slots_and_a_dead_slot_is_ended_by_the_next_commit(data, spawn):
    """A commit killed in slot 1 (slot 0 busy with another write) leaves an open transaction;
    the next commit, in slot 0, ends it rather than leaving it to hold back the LSO."""
    from kafkalite.spark import sink, transactional

    with transactional._slot(data) as held:  # another write is committing in slot 0
        assert held == 0
        _kill_commit(spawn, data, "between_partitions")
        with Log(os.path.join(data, "dst-0"), readonly=True) as log:
            assert log.last_stable_offset < log.end_offset  # the dead commit's transaction is open
    sink.publish(data, [_write()], "dst")
    _no_open_transaction(data)
    assert [_copies(data, p) for p in (0, 1)] == [1, 1]


def test_the_transaction_options_are_checked(data):
    from kafkalite.spark import transactional
    from kafkalite.spark.options import SparkOptionError

    assert transactional.transactional_id({}) is None
    assert transactional.transactional_id({"kafka.transactional.id": "etl"}) == "etl"
    assert transactional.timeout_ms({}) == 60_000
    assert transactional.timeout_ms({"kafka.transaction.timeout.ms": "5000"}) == 5000
    for bad in ("0", "x", str(10**9)):
        with pytest.raises(SparkOptionError, match="transaction.timeout.ms"):
            transactional.timeout_ms({"kafka.transaction.timeout.ms": bad})
    with pytest.raises(SparkOptionError, match="kafka.transactional.id"):
        transactional.transactional_id({"kafka.transactional.id": " "})


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark")
    from helpers import local_spark

    with local_spark(2, {"spark.sql.shuffle.partitions": "2"}) as session:
        yield session


@pytest.mark.spark
def test_a_spark_batch_write_ends_the_transaction_a_killed_commit_left_open(spark, data, spawn):
    """Through Spark, with ``kafka.transactional.id``: a commit under that id was killed with
    dst-0 appended (its transaction open, holding back read_committed readers); the next write
    under the id aborts it, and a ``kafka.isolation.level=read_committed`` read sees that
    write's rows only, read_uncommitted also the aborted ones (as Kafka's)."""
    _kill_commit(spawn, data, "between_partitions", "spark-etl")

    def read(level: str) -> list[bytes]:
        df = spark.read.format("kafkalite").option("subscribe", "dst").option("kafka.isolation.level", level)
        return sorted(bytes(r.value) for r in df.load(data).collect())

    assert read("read_committed") == []
    rows = spark.createDataFrame([(i % 2, f"v{i}") for i in range(10)], "partition int, value string")
    rows.write.format("kafkalite").mode("append").option("topic", "dst").option(
        "kafka.transactional.id", "spark-etl"
    ).save(data)
    _no_open_transaction(data)
    assert read("read_committed") == sorted(b"v%d" % i for i in range(10))
    assert len(read("read_uncommitted")) == 10 + ROWS  # and the killed commit's dst-0 rows, aborted
