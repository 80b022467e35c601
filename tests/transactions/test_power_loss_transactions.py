"""A power-loss model for transactions (issue 22): a committed transaction never loses records.

The workload (tests/faults/txn_power_loss_writer.py) commits transactions through a
transactional ``Producer`` with the default acks=1 (its records reach the page cache only) and
is SIGKILLed by an engine fail point inside its last commit: right after PrepareCommit is
recorded (``txn.prepare.after_record``), or right after CompleteCommit is (``
txn.complete.after_record``, which the coordinator appends without a sync of its own). It runs
under ``strace -f``, so the model knows every msync (with the file range it covered, from the
process's mmap calls) and fsync the engine really made. A crash image keeps, of every segment,
the bytes those syncs covered, and of the rest a chosen subset of the 4 KiB pages (the first
image none of them): what a power loss at the kill may leave. Other files are kept whole and
directory entries are not modelled (tests/engine/test_power_loss.py models them).

Each image is recovered as a user would: the next producer with the transactional id completes
what the image's ``__transaction_state`` says was decided. Since PrepareCommit of the last
transaction was synced before the kill, the image commits it: every record of every
transaction must then be there for read_committed readers, exactly once. Syncing a
transaction's records only with its COMMIT marker (after PrepareCommit) failed this: the image
committed the last transaction without its records. The second kill point checks that a
CompleteCommit lost to the power loss is completed by the next user."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import warnings

import pytest
from faults.txn_power_loss_writer import PARTITIONS, TOPIC, TRANSACTIONAL_ID, value_for
from helpers import child_env
from kafkalite import Log, Producer, _native
from test_power_loss_group_commit import _CLOSE, _FSYNC, _MMAP, _MSYNC, _MUNMAP, _OPENAT, events

PAGE = 4096
TXNS = 4
RECORDS = 40
SEGMENT_BYTES = 16384
IMAGES = 12
WRITER = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "faults", "txn_power_loss_writer.py"
)


def synced_ranges(trace: str) -> dict[str, list[tuple[int, int]]]:
    """Per file (normalized path): the byte ranges a successful msync or fsync covered. The
    writer is one process (threads share its descriptors and maps)."""
    fds: dict[int, str] = {}
    maps: list[tuple[int, int, str, int]] = []  # (address, length, path, file offset)
    out: dict[str, list[tuple[int, int]]] = {}
    for _, _, _, text in events(trace):
        if m := _OPENAT.search(text):
            if int(m.group(2)) >= 0:
                fds[int(m.group(2))] = os.path.normpath(m.group(1))
        elif m := _CLOSE.match(text):
            fds.pop(int(m.group(1)), None)
        elif m := _MMAP.match(text):
            path = fds.get(int(m.group(2)), "")
            maps.append((int(m.group(4), 16), int(m.group(1)), path, int(m.group(3))))
        elif m := _MUNMAP.match(text):
            maps = [x for x in maps if x[0] != int(m.group(1), 16)]
        elif m := _MSYNC.match(text):
            addr, length = int(m.group(1), 16), int(m.group(2))
            for base, size, path, offset in maps:
                if base <= addr < base + size:
                    start = addr - base + offset
                    out.setdefault(path, []).append((start, start + length))
        elif m := _FSYNC.match(text):
            path = fds.get(int(m.group(1)), "")
            out.setdefault(path, []).append((0, 1 << 62))
    return out


def crash_image(
    data: str, synced: dict[str, list[tuple[int, int]]], dest: str, rng: random.Random | None
) -> None:
    """Copy `data` to `dest` as a power loss could leave it: each segment keeps its synced bytes
    and, with `rng`, a random subset of its other pages (without, none); every other file whole."""
    for root, _, names in os.walk(data):
        target = os.path.join(dest, os.path.relpath(root, data))
        os.makedirs(target, exist_ok=True)
        for name in names:
            path = os.path.normpath(os.path.join(root, name))
            with open(path, "rb") as f:
                content = f.read()
            if name.endswith(".log"):
                image = bytearray(len(content))
                for page in range(0, len(content), PAGE):
                    if rng is not None and rng.random() < 0.5:
                        image[page : page + PAGE] = content[page : page + PAGE]
                for start, end in synced.get(path, []):
                    image[start:end] = content[start:end]
                content = bytes(image[: len(content)])
            with open(os.path.join(target, name), "wb") as f:
                f.write(content)


def committed_values(data: str) -> list[bytes]:
    out: list[bytes] = []
    for p in range(PARTITIONS):
        with Log(os.path.join(data, f"{TOPIC}-{p}"), readonly=True) as log:
            out.extend(r.value for r in log.committed_records())
    return sorted(out)


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", ["txn.prepare.after_record", "txn.complete.after_record"])
def test_a_committed_transaction_keeps_every_record_through_a_power_loss(kill_at, tmp_path):
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("strace is not installed: the model needs the syncs the engine made")
    data = os.path.normpath(str(tmp_path / "data"))
    trace_file = str(tmp_path / "strace.txt")
    syscalls = "openat,close,mmap,munmap,msync,fsync,fdatasync"
    env = child_env({**os.environ, "KAFKALITE_FAILPOINTS": f"{kill_at}=kill@{TXNS}"})
    cmd = [sys.executable, WRITER, data, str(TXNS), str(RECORDS), str(SEGMENT_BYTES)]
    done = subprocess.run(
        [strace, "-f", "-qq", "-e", f"trace={syscalls}", "-o", trace_file, *cmd],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if not os.path.exists(trace_file) or "ptrace" in done.stderr:
        pytest.skip(f"strace could not run the workload (status {done.returncode}): {done.stderr[-300:]}")
    assert done.returncode in (-9, 128 + 9), f"the writer was not killed at {kill_at}: {done.stderr[-2000:]}"
    with open(trace_file) as f:
        synced = synced_ranges(f.read())
    want = sorted(value_for(t, p, i) for t in range(TXNS) for p in range(PARTITIONS) for i in range(RECORDS))
    rng = random.Random(5)
    for n in range(IMAGES):
        image = str(tmp_path / f"image-{n}")
        crash_image(data, synced, image, rng if n else None)
        where = f"image {n} of a power loss at {kill_at} of transaction {TXNS - 1}"
        # PrepareCommit was synced before the kill: the image has decided to commit. Without
        # unsynced pages (image 0) it is still in PrepareCommit, CompleteCommit lost if written.
        [state] = [
            t["state"] for t in _native.list_transactions(image) if t["transactional_id"] == TRANSACTIONAL_ID
        ]
        assert state in (("PrepareCommit",) if n == 0 else ("PrepareCommit", "CompleteCommit")), (
            f"{where}: the transaction log says {state}"
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # RecoveryWarning: the unsynced tails are cut
            p = Producer(image, transactional_id=TRANSACTIONAL_ID)
            p.init_transactions()  # completes the commit the image holds
            p.close()
        got = committed_values(image)
        missing = sorted(set(want) - set(got))
        assert not missing, (
            f"{where}: the commit completed without {len(missing)} of its records: {missing[:5]}"
        )
        assert got == want, (
            f"{where}: read_committed reads {len(got)} records, want {len(want)} (duplicates?)"
        )
        shutil.rmtree(image)
