"""kill -9 at random moments while appending with flush="always": after every reopen, each
acknowledged record is there, in order, with its value, and nothing corrupt is readable."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

import pytest
from conftest import kafka_python_records
from kafkalite import Log
from procs.crash_writer import value_for

KILLS = int(os.environ.get("KAFKALITE_CRASH_KILLS", "50"))


@pytest.mark.slow
def test_sigkill_loses_no_acknowledged_record(part_dir, spawn):
    rng = random.Random(20261122)
    acknowledged = -1
    for kill in range(KILLS):
        child = spawn("crash_writer.py", part_dir, kill, stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().startswith("ready")
        time.sleep(rng.uniform(0.0, 0.15))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        for line in out.split():
            acknowledged = max(acknowledged, int(line))
        with Log(part_dir, segment_bytes=64 * 1024) as log:
            assert log.end_offset >= acknowledged + 1, (
                f"kill {kill}: acknowledged {acknowledged}, log ends at {log.end_offset}"
            )
            for r in log.records():
                assert r.value == value_for(r.offset), f"kill {kill}: offset {r.offset} holds the wrong value"
            count = log.end_offset
        assert acknowledged >= 0 or kill < 3
    records = kafka_python_records(part_dir)
    assert [r[0] for r in records] == list(range(count))
    assert acknowledged > 100
