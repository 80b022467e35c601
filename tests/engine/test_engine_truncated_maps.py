"""A file shrunk under a map (another process truncating it) must not kill the process with
SIGBUS: each case runs in a child that must exit normally, with a typed error where data
was needed (the truncation is done in-process, which faults exactly as another process's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PRELUDE = r"""
import glob, os, sys
from kafkalite import Log, KafkaliteError, CorruptRecordError, LogPoisonedError
path = sys.argv[1]
def build(n=200):
    with Log(path, segment_bytes=8192) as log:
        for i in range(n):
            log.append_values([b"%d" % i + b"x" * 100])
def segments():
    return sorted(glob.glob(os.path.join(path, "*.log")))
# Append `batches` (each 32 KiB or more: the pwrite path) to a writer whose segment was
# truncated, then one more: the first that notices is typed, and the writer stays poisoned.
def append_large_after_truncation(writer, batches):
    try:
        for batch in batches:
            writer.append_values(batch)
        print("no error")
    except LogPoisonedError as e:
        print("typed", type(e).__name__)
    try:
        writer.append_values([b"later"] * 100000)
    except LogPoisonedError:
        print("stays poisoned")
"""

CASES = {
    "segment being read": """
build()
reader = Log(path, readonly=True)
os.truncate(segments()[0], 0)
try:
    list(reader.records(0))
    print("no error")
except CorruptRecordError as e:
    print("typed", type(e).__name__)
""",
    "active segment being written": """
writer = Log(path, segment_bytes=1 << 20)
writer.append_values([b"first"] * 10)
os.truncate(segments()[-1], 0)
try:
    for i in range(50):
        writer.append_values([b"y" * 1000])
    print("no error")
except LogPoisonedError as e:
    print("typed", type(e).__name__)
try:
    writer.append_values([b"later"])
except LogPoisonedError:
    print("stays poisoned")
""",
    "active segment being written in large batches": """
# Batches of 32 KiB and more go through pwrite, not the map: no SIGBUS tells the writer, so
# it must notice the shrunk file itself (a pwrite past the new end would leave a hole).
writer = Log(path, segment_bytes=64 << 20)
writer.append_values([b"first" * 10000])
os.truncate(segments()[-1], 0)
append_large_after_truncation(writer, [[b"y" * 1000] * 100] * 5)
""",
    "active segment being written in large batches, none reserving blocks": """
# The batch after the truncation fits the blocks reserved already (256 KiB after the second
# batch): it reserves nothing, and the stat before its pwrite must still see the shrunk file
# (test_adversary_session8 checks that the file is not lengthened again).
writer = Log(path, segment_bytes=64 << 20)
writer.append_values([b"x" * 1000] * 40)
writer.append_values([b"x" * 1000] * 33)
os.truncate(segments()[-1], 0)
append_large_after_truncation(writer, [[b"y" * 1000] * 33])
""",
    "wake-up file": """
from kafkalite._native import Notifier
os.makedirs(path)
f = os.path.join(path, ".kafkalite-notify")
n = Notifier(f)
n.notify()
os.truncate(f, 0)
n.notify()
seen = n.sequence()
n.wait(seen, 10)
print("typed survived")
""",
    "index file": """
build(2000)
reader = Log(path, readonly=True)
for ix in glob.glob(os.path.join(path, "*.index")) + glob.glob(os.path.join(path, "*.timeindex")):
    os.truncate(ix, 0)
try:
    assert len(list(reader.records(0))) == 2000
    reader.offset_for_timestamp(0)
    print("typed unaffected")
except KafkaliteError as e:
    print("typed", type(e).__name__)
""",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_truncating_a_mapped_file_does_not_kill_the_process(tmp_path, case):
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + CASES[case], str(tmp_path / "t-0")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"{case}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-2000:]}"
    assert "typed" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    if case.startswith("active segment being written"):
        assert "stays poisoned" in proc.stdout
