"""Shared writers follow each other without listing the partition directory on every append
(issue 21, item 5): rolls are found by name, deletions and swaps by the segment generation
(`.kafkalite-segments`), and a follower lists only when the generation moved or cannot be read.

Every test drives writer processes (tests/support/procs/segment_follower.py) with `segment.bytes` at 14,
so every append rolls, and checks that each append lands at the next offset and that a writer's
view of the segments is the directory's, after a peer rolled, deleted segments (retention), was
killed -9 between its change and the generation's bump, or after the generation file was
damaged or removed. The last test counts `getdents64` under strace: appends at 2,000 segments
must make none."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
from kafkalite import Log

SEGMENT_BYTES = 14
GENERATION_FILE = ".kafkalite-segments"


class Writer:
    """One segment_follower.py process: a shared writer answering commands on stdin."""

    def __init__(
        self, spawn, part_dir: str, retention_bytes: int | None = None, failpoints: str | None = None
    ):
        env = dict(os.environ)
        env.pop("KAFKALITE_FAILPOINTS", None)
        if failpoints:
            env["KAFKALITE_FAILPOINTS"] = failpoints
        args = [part_dir, SEGMENT_BYTES] + ([retention_bytes] if retention_bytes is not None else [])
        self.proc = spawn(
            "segment_follower.py", *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.ask(None) == "ready"

    def ask(self, command: str | None) -> str:
        if command is not None:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError(
                f"the writer ended (status {self.proc.wait(timeout=30)}) before answering {command!r}"
            )
        return line.strip()

    def append(self, value: str) -> int:
        first, last = map(int, self.ask(f"append {value}").split())
        assert first == last
        return first

    def view(self) -> list[int]:
        return [int(b) for b in self.ask("view").split(",")]

    def quit(self) -> None:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        assert self.proc.wait(timeout=60) == 0


def listed_bases(part_dir: str) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(part_dir) if n.endswith(".log") and n[:-4].isdigit())


def values(part_dir: str) -> dict[int, bytes]:
    with Log(part_dir, readonly=True) as log:
        return {r.offset: r.value for r in log.records()}


def test_two_writer_processes_alternating_rolls(part_dir, spawn):
    a, b = Writer(spawn, part_dir), Writer(spawn, part_dir)
    for i in range(200):
        assert (a if i % 2 == 0 else b).append(f"v{i}") == i
        assert (a if i % 2 == 0 else b).view() == listed_bases(part_dir) == list(range(i + 1))
    a.quit()
    b.quit()
    assert values(part_dir) == {i: b"v%d" % i for i in range(200)}


def test_a_writer_follows_a_peer_that_rolled_and_deleted_segments(part_dir, spawn):
    a = Writer(spawn, part_dir, retention_bytes=10_000)
    b = Writer(spawn, part_dir, retention_bytes=1)
    assert a.append("a0") == 0
    assert b.ask("appendn 300") == "1 300"
    assert int(b.ask("retention")) > 0  # retention.bytes=1: all but the active segment go
    assert a.append("a1") == 301
    assert a.view() == listed_bases(part_dir)
    assert a.view()[0] >= 300
    b.quit()
    a.quit()
    with Log(part_dir, readonly=True) as log:
        assert log.start_offset >= 300
        assert [r.value for r in log.records()][-1] == b"a1"


@pytest.mark.parametrize(
    "failpoints, during",
    [
        ("roll.after_seal=kill", "appendn 5"),  # sealed, next segment not created
        ("roll.after_create=kill", "appendn 5"),  # next segment created, nothing in it
        ("segments.generation=kill@1", "retention"),  # generation moved, nothing deleted yet
        ("segments.generation=kill@2", "retention"),  # segments deleted, second bump never made
    ],
)
def test_a_peer_killed_between_its_change_and_the_bump(part_dir, spawn, failpoints, during):
    a = Writer(spawn, part_dir, retention_bytes=10_000)
    assert a.ask("appendn 40") == "0 39"
    b = Writer(spawn, part_dir, retention_bytes=1, failpoints=failpoints)
    with pytest.raises(EOFError):
        b.ask(during)
    assert b.proc.returncode == -signal.SIGKILL
    before = values(part_dir)
    end = max(before) + 1
    for i in range(5):
        assert a.append(f"a{i}") == end + i
        assert a.view() == listed_bases(part_dir)
    a.quit()
    after = values(part_dir)
    assert {k: v for k, v in after.items() if k < end} == {k: v for k, v in before.items() if k >= min(after)}
    assert [after[end + i] for i in range(5)] == [b"a%d" % i for i in range(5)]


DAMAGE = {
    "missing": lambda path: os.remove(path),
    "empty": lambda path: open(path, "wb").close(),
    "short": lambda path: os.truncate(path, 20),
    "long": lambda path: open(path, "ab").write(b"\0"),
    "flipped": lambda path: flip(path, 17),
    "magic": lambda path: flip(path, 0),
}


def flip(path: str, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x40]))


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_or_missing_generation_file_falls_back_to_listing(part_dir, spawn, damage):
    a = Writer(spawn, part_dir, retention_bytes=10_000)
    b = Writer(spawn, part_dir, retention_bytes=1)
    assert a.ask("appendn 20") == "0 19"
    assert b.append("b0") == 20
    generation = os.path.join(part_dir, GENERATION_FILE)
    assert os.path.getsize(generation) == 32
    DAMAGE[damage](generation)
    # The peer changes the segments with the file damaged: it rolls and deletes.
    assert b.ask("appendn 30") == "21 50"
    assert int(b.ask("retention")) > 0
    assert a.append("a0") == 51
    assert a.view() == listed_bases(part_dir)
    # ... and once the file is good again (rewritten by a writer), a change still shows.
    DAMAGE[damage](generation)
    assert b.append("b1") == 52
    with open(generation, "rb") as f:
        assert len(f.read()) == 32, "a writer rewrote the damaged file"
    assert b.ask("appendn 30") == "53 82"
    assert int(b.ask("retention")) > 0
    assert a.append("a1") == 83
    assert a.view() == listed_bases(part_dir)
    a.quit()
    b.quit()
    got = values(part_dir)
    assert got[83] == b"a1" and min(got) == listed_bases(part_dir)[0]


def test_a_reader_sees_deletions_with_or_without_the_generation_file(part_dir, spawn):
    a = Writer(spawn, part_dir, retention_bytes=1)
    assert a.ask("appendn 50") == "0 49"
    with Log(part_dir, readonly=True) as reader:
        assert reader.end_offset == 50
        assert [s.base_offset for s in reader.segments] == listed_bases(part_dir)
        assert int(a.ask("retention")) > 0
        assert reader.start_offset == listed_bases(part_dir)[0]
        assert [s.base_offset for s in reader.segments] == listed_bases(part_dir)
        os.remove(os.path.join(part_dir, GENERATION_FILE))
        assert a.ask("appendn 10") == "50 59"
        assert reader.end_offset == 60
        assert [s.base_offset for s in reader.segments] == listed_bases(part_dir)
    a.quit()


STRACED = r"""
import sys
from kafkalite import Log
path, markers, appends = sys.argv[1], sys.argv[2], int(sys.argv[3])
a = Log(path, segment_bytes=14, shared_writers=True)
b = Log(path, segment_bytes=14, shared_writers=True)
seq = 0

def produce(log):  # an idempotent producer's batch, as the server appends it
    global seq
    data = log.encode_batches([b"p"], producer_id=9, producer_epoch=0, base_sequence=seq)
    seq += 1
    return log.append_produce(data)[0]

produce(a)  # both writers load the producer state now (that lists the snapshots, once)
produce(b)
end = a.end_offset

def mark(name):
    try:
        open(markers + "/" + name)  # fails: only its openat shows in the trace
    except FileNotFoundError:
        pass

mark("begin")
for i in range(appends):  # alternating: each append follows the other writer's roll
    first, _ = (a if i % 2 == 0 else b).append_values([b"x"], timestamp=1)
    assert first == end + i, (first, end + i)
for i in range(appends):  # one writer alone
    first, _ = a.append_values([b"y"], timestamp=1)
    assert first == end + appends + i
for i in range(appends):  # idempotent, alternating: each roll snapshots the producer state
    assert produce(a if i % 2 == 0 else b) == end + 2 * appends + i
mark("end")
a.close()
b.close()
"""


def test_appends_do_not_list_the_directory(tmp_path):
    """O(1) in the number of segments: 3 x 100 appends at 2,000 segments, no getdents64."""
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("strace is not installed")
    part_dir = str(tmp_path / "events-0")
    with Log(part_dir, segment_bytes=SEGMENT_BYTES) as log:
        for _ in range(2000):
            log.append_values([b"s"], timestamp=1)
        assert len(log.segments) == 2000
    markers = str(tmp_path / "no-such-dir")
    trace = str(tmp_path / "strace.txt")
    done = subprocess.run(
        [strace, "-f", "-qq", "-e", "trace=openat,getdents64", "-o", trace]
        + [sys.executable, "-c", STRACED, part_dir, markers, "100"],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    with open(trace) as f:
        lines = f.read().splitlines()
    begin = next(i for i, line in enumerate(lines) if markers + "/begin" in line)
    end = next(i for i, line in enumerate(lines) if markers + "/end" in line)
    listings = [line for line in lines[begin:end] if re.search(r"\bgetdents64\(", line)]
    assert listings == [], f"{len(listings)} getdents64 calls in 300 appends at 2,000 segments"
    snapshots = [n for n in os.listdir(part_dir) if n.endswith(".snapshot")]
    assert len(snapshots) <= 3, f"rolls left {len(snapshots)} producer snapshots behind"
