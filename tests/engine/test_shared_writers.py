"""Several processes append to one partition: one append order, each writer's records in its
own order, no batch torn or interleaved, no offset assigned twice; a writer killed mid-append
loses only what it had not been told was written, and the others carry on."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest
from conftest import kafka_python_records
from helpers import split_by_writer
from kafkalite import Log


def writer(spawn, path: str, wid: int, count: int, report: bool = False) -> subprocess.Popen:
    extra = ["report"] if report else []
    return spawn("shared_writer.py", path, wid, count, *extra, stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_four_writer_processes_one_partition(part_dir, spawn):
    count = 25_000
    writers = [writer(spawn, part_dir, wid, count) for wid in range(4)]
    for w in writers:
        w.wait(timeout=300)
        assert w.returncode == 0
    with Log(part_dir, readonly=True) as log:
        records = list(log.records())
        assert log.end_offset == 4 * count
        assert len(log.segments) > 20
    assert [r.offset for r in records] == list(range(4 * count))
    assert split_by_writer([r.value for r in records]) == {wid: list(range(count)) for wid in range(4)}
    assert [r[3] for r in kafka_python_records(part_dir)] == [r.value for r in records]
    assert os.path.exists(os.path.join(part_dir, ".kafkalite-clean-shutdown"))  # the last one out sealed it


@pytest.mark.slow
def test_a_killed_writer_loses_only_unacknowledged_records(part_dir, spawn):
    rng = random.Random(5)
    survivors = [writer(spawn, part_dir, wid, 40_000) for wid in (1, 2)]
    acknowledged = -1
    for _round in range(5):
        victim = writer(spawn, part_dir, 0, 10**9, report=True)
        time.sleep(rng.uniform(0.05, 0.3))
        victim.send_signal(signal.SIGKILL)
        out, _ = victim.communicate()
        acks = [int(x) for x in out.split()]
        acknowledged = max([acknowledged] + acks)
    for w in survivors:
        w.wait(timeout=300)
        assert w.returncode == 0
    with Log(part_dir, shared_writers=True) as log:
        values = [r.value for r in log.records()]
    seqs = split_by_writer(values)
    assert seqs[1] == list(range(40_000)) and seqs[2] == list(range(40_000))
    # The victim restarted from seq 0 each round; every round's acknowledged prefix is there.
    victim_seqs = seqs.get(0, [])
    assert acknowledged < 0 or max(victim_seqs) >= acknowledged
    assert len(values) == len(set(enumerate(values)))
    assert kafka_python_records(part_dir)[-1][3] == values[-1]
