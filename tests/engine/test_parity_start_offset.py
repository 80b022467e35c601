"""Issue 10 point 1: the log start offset agrees with Kafka's `log-start-offset-checkpoint` in
both directions. kafkalite reads a broker's file (the larger of it and the first segment's
base wins) and keeps Kafka's files (`log-start-offset-checkpoint`, `cleaner-offset-checkpoint`,
`recovery-point-offset-checkpoint`) up to date in a data directory, atomically and shared by
every partition; a partition opened on its own has no data directory and gets none."""

from __future__ import annotations

import multiprocessing
import os

import pytest
from kafkalite import Admin, Consumer, Log, Producer, Record


def _checkpoint(path) -> dict[tuple[str, int], int]:
    with open(path) as f:
        lines = f.read().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2, lines
    return {(t, int(p)): int(o) for t, p, o in (line.split() for line in lines[2:])}


def _fill(path: str, n: int) -> None:
    with Log(path, segment_bytes=4096) as log:
        log.append([Record(b"v%d" % i, key=b"k%d" % (i % 50)) for i in range(n)])


def test_a_brokers_log_start_offset_checkpoint_is_read(tmp_path):
    """A broker's directory after DeleteRecords(300): the segment still starts at 0, the start
    offset is only in the log directory's checkpoint. Every kafkalite reader starts at 300."""
    _fill(str(tmp_path / "t-0"), 1000)
    _fill(str(tmp_path / "u-0"), 10)
    (tmp_path / "meta.properties").write_text("version=1\n")
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n2\nt 0 300\nother 3 9\n")
    with Log(str(tmp_path / "t-0"), readonly=True) as log:
        assert log.start_offset == 300
        assert next(iter(log.records())).offset == 300
    with Log(str(tmp_path / "u-0"), readonly=True) as log:
        assert log.start_offset == 0  # no entry for u-0
    with Consumer(str(tmp_path), "t", auto_offset_reset="earliest") as consumer:
        first = [r for rs in consumer.poll(timeout_ms=0).values() for r in rs]
        assert first[0].offset == 300
    with Log(str(tmp_path / "t-0")) as log:  # a writer agrees
        assert log.start_offset == 300
    # A malformed checkpoint reads as empty (Kafka's rule), never as an error.
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n5\nt 0 300\n")
    with Log(str(tmp_path / "t-0"), readonly=True) as log:
        assert log.start_offset == 0


def test_a_reader_follows_a_checkpoint_moved_while_it_reads(tmp_path):
    _fill(str(tmp_path / "t-0"), 100)
    (tmp_path / "meta.properties").write_text("version=1\n")
    with Log(str(tmp_path / "t-0"), readonly=True) as log:
        assert log.start_offset == 0
        tmp = tmp_path / "log-start-offset-checkpoint.tmp"
        tmp.write_text("0\n1\nt 0 40\n")
        os.rename(tmp, tmp_path / "log-start-offset-checkpoint")
        log.read(log.end_offset)  # a read at the end looks for news
        assert log.start_offset == 40


def test_delete_records_keeps_kafkas_checkpoints(tmp_path):
    data = str(tmp_path)
    Admin(data).create_topic("t", 2)
    with Producer(data) as producer:
        producer.send_batch("t", [b"x%d" % i for i in range(500)], partition=0)
        producer.send_batch("t", [b"y%d" % i for i in range(50)], partition=1)
    with Log(os.path.join(data, "t-0")) as log:
        assert log.delete_records_before(300) == 300
    with Log(os.path.join(data, "t-1")) as log:
        log.delete_records_before(20)
    assert _checkpoint(tmp_path / "log-start-offset-checkpoint") == {("t", 0): 300, ("t", 1): 20}
    # Closing a writer records its recovery point (everything below the log end is flushed).
    assert _checkpoint(tmp_path / "recovery-point-offset-checkpoint") == {("t", 0): 500, ("t", 1): 50}
    assert not any(n.endswith(".tmp") for n in os.listdir(data))


def test_a_partition_opened_on_its_own_writes_no_parent_checkpoint(tmp_path):
    _fill(str(tmp_path / "t-0"), 100)
    with Log(str(tmp_path / "t-0")) as log:
        log.delete_records_before(50)
    assert sorted(os.listdir(tmp_path)) == ["t-0"]


def _delete_records(data: str, partition: int, offset: int) -> None:
    with Log(os.path.join(data, f"t-{partition}"), shared_writers=True) as log:
        log.delete_records_before(offset)


@pytest.mark.slow
def test_several_processes_update_one_checkpoint_without_losing_entries(tmp_path):
    data = str(tmp_path)
    Admin(data).create_topic("t", 8)
    with Producer(data) as producer:
        for p in range(8):
            producer.send_batch("t", [b"v"] * 100, partition=p)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_delete_records, args=(data, p, 10 + p)) for p in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert _checkpoint(tmp_path / "log-start-offset-checkpoint") == {("t", p): 10 + p for p in range(8)}


@pytest.mark.parametrize("failpoint", ["kafka_checkpoint.update=kill", "checkpoint.rename=kill@3"])
def test_a_writer_killed_while_updating_the_checkpoint_leaves_the_old_or_new_file(tmp_path, failpoint):
    import subprocess
    import sys

    data = str(tmp_path)
    Admin(data).create_topic("t", 2)
    with Producer(data) as producer:
        producer.send_batch("t", [b"v"] * 100, partition=0)
        producer.send_batch("t", [b"v"] * 100, partition=1)
    _delete_records(data, 1, 7)
    before = (tmp_path / "log-start-offset-checkpoint").read_text()
    code = f"from kafkalite import Log; Log({os.path.join(data, 't-0')!r}).delete_records_before(60)"
    env = {**os.environ, "KAFKALITE_FAILPOINTS": failpoint}
    done = subprocess.run([sys.executable, "-c", code], env=env, timeout=60, check=False)
    assert done.returncode == -9
    after = _checkpoint(tmp_path / "log-start-offset-checkpoint")
    assert after in ({("t", 1): 7}, {("t", 1): 7, ("t", 0): 60}), (before, after)
    with Log(os.path.join(data, "t-0")) as log:  # kafkalite's own file: 60 or the old start
        assert log.start_offset in (0, 60)
        log.delete_records_before(60)
    assert _checkpoint(tmp_path / "log-start-offset-checkpoint") == {("t", 1): 7, ("t", 0): 60}
