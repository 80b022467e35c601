"""Followers whose newest segment retention deleted under them read (or append) on instead of
failing "cannot open segment ... No such file" (KafkaliteFileNotFoundError).

A reader that lists a partition's segments while the writer's retention deletes them: every
segment the listing showed after the first is gone by the time the reader opens it, and the
first (the reader's newest) with them. Before the fix the reader had already marked that first
segment sealed, releasing its descriptor, because the listing showed successors; none of them
opened, so it stayed the newest, and the next look reopened it by name, as a -n 2 CI run met
through describe_topic's fresh reader while test_retention_covers_topics_no_producer_writes
enforced retention. The interleaving is forced with the `follow.open_segment=stop` fail point:
the reader stops itself between its listing and an open, the test deletes segments as retention
does, and continues it.

A shared writer whose roll failed after sealing its segment (`roll.after_seal=eio`: undone, but
the seal released the descriptor) holds its newest segment by name only: another writer appends
to it, rolls past it and deletes it, and the first writer's next append lists again."""

from __future__ import annotations

import glob
import os
import signal
import subprocess

from helpers import wait_until_stopped
from kafkalite import Log

#: A fresh reader (its first look lists the directory), then one more look: the log's bounds
#: and records as the reader sees them.
READER = r"""
import sys
from kafkalite import Log
reader = Log(sys.argv[1], readonly=True)
print(reader.start_offset, reader.end_offset, *(r.value.decode() for r in reader.records()), flush=True)
"""


def segment_bases(part: str) -> list[int]:
    return sorted(int(os.path.basename(p)[:-4]) for p in glob.glob(os.path.join(part, "*.log")))


def test_a_reader_whose_listed_segments_retention_deleted_before_it_opened_them_reads_on(tmp_path, spawn):
    part = str(tmp_path / "t-0")
    with Log(part) as writer:
        writer.append_values([b"a"] * 10)  # offsets 0..9
        writer.roll()
        writer.append_values([b"b"] * 10)  # 10..19, in the active segment
        assert segment_bases(part) == [0, 10]
        # Hit 1 opens segment 0; at hit 2, about to open segment 10, the reader stops.
        env = {**os.environ, "KAFKALITE_FAILPOINTS": "follow.open_segment=stop@2"}
        reader = spawn.code(READER, part, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until_stopped(reader, "the reader")
        # Retention, as a writer runs it while the reader is between its listing and its opens:
        # the writer rolls past both segments and deletes them.
        writer.roll()
        writer.append_values([b"c"] * 5)  # 20..24
        writer.delete_records_before(20)
        assert segment_bases(part) == [20]
        os.kill(reader.pid, signal.SIGCONT)
        out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err[-2000:]
    assert out.split() == ["20", "25", *["c"] * 5]


#: A shared writer whose first roll fails after the seal (its fail point), then, on a line on
#: stdin, appends one record and prints its (first, last) offsets.
FAILED_ROLL_WRITER = r"""
import sys
from kafkalite import Log
log = Log(sys.argv[1], shared_writers=True)
log.append_values([b"a"] * 10)
try:
    log.roll()
except Exception as e:
    print("roll failed:", type(e).__name__, flush=True)
sys.stdin.readline()
print(*log.append_values([b"w"]), flush=True)
"""


def test_a_writer_whose_failed_roll_left_its_segment_deleted_under_it_appends_on(tmp_path, spawn):
    part = str(tmp_path / "t-0")
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "roll.after_seal=eio@1"}
    first = spawn.code(
        FAILED_ROLL_WRITER,
        part,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdout is not None and first.stdin is not None
    assert first.stdout.readline().split() == ["roll", "failed:", "KafkaliteIOError"]
    with Log(part, shared_writers=True) as other:
        other.append_values([b"b"] * 10)  # 10..19, in segment 0: the failed roll was undone
        other.roll()
        other.append_values([b"c"] * 5)  # 20..24
        other.delete_records_before(20)
        assert segment_bases(part) == [20]
    first.stdin.write("go\n")
    first.stdin.flush()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err[-2000:]
    assert out.split() == ["25", "25"]
    with Log(part, readonly=True) as reader:
        assert [r.value for r in reader.records()] == [b"c"] * 5 + [b"w"]
