"""The one reader of committed offsets (rust/src/coordination/committed_offsets.rs, used by the embedded
groups and the server) under the faults it guards against: a transaction's offsets held until
its marker (also for a reader opened mid-transaction), dropped on ABORT and when its producer is
fenced, a later plain commit or tombstone winning over them (Kafka's OffsetMetadataManager), and
damage: a bad CRC, an undecodable or future value, a torn segment tail."""

from __future__ import annotations

import glob
import os
import struct

import pytest
from kafkalite import Admin, _native
from kafkalite.datadir import DataDir
from kafkalite.errors import CorruptRecordError, UnsupportedFormatError
from kafkalite.groups.offsets import (
    OFFSETS_TOPIC,
    OffsetStore,
    encode_key,
    encode_value,
    ensure_offsets_topic,
    offsets_partition,
)
from kafkalite.log import RecoveryWarning

GROUP = "g"
TP = ("in", 0)
PID = 7


@pytest.fixture
def offsets(tmp_path):
    """(data dir, a shared writer of the group's offsets partition), with offset 3 committed."""
    Admin(str(tmp_path / "data")).create_topic("in", 1)
    data = DataDir(str(tmp_path / "data"))
    ensure_offsets_topic(data)
    with OffsetStore(data, GROUP) as store:
        store.commit({TP: (3, "")})
    log = data.open_partition(OFFSETS_TOPIC, offsets_partition(GROUP), shared_writers=True)
    yield data, log
    log.close()


def txn_commit(log, offset: int, epoch: int = 0, seq: int = 0) -> None:
    """A TxnOffsetCommit of ``offset`` for TP, in producer PID's open transaction."""
    key, value = encode_key(GROUP, *TP), encode_value(offset, "txn", 0)
    log.append_produce(
        log.encode_batches(
            [value], keys=[key], producer_id=PID, producer_epoch=epoch, base_sequence=seq, transactional=True
        )
    )


def seen(data) -> tuple[tuple[int, str] | None, bool]:
    """What a fresh store of the group reads: TP's offset, and whether it is unstable."""
    with OffsetStore(data, GROUP) as store:
        return store.load().get(TP), store.unstable(TP)


@pytest.mark.parametrize("commit", [True, False])
def test_a_transactions_offsets_count_at_its_marker_only_if_it_commits(offsets, commit):
    data, log = offsets
    with OffsetStore(data, GROUP) as store:
        assert store.load()[TP] == (3, "")
        txn_commit(log, 8)
        assert store.load()[TP] == (3, "") and store.unstable(TP)  # the same reader, incrementally
        assert seen(data) == ((3, ""), True)  # a reader opened mid-transaction
        log._native.write_txn_marker(PID, 0, commit, 0)
        expected = (8, "txn") if commit else (3, "")
        assert store.load()[TP] == expected and not store.unstable(TP)
        assert seen(data) == (expected, False)


def test_a_fenced_producers_offsets_are_dropped(offsets):
    """Fencing (a new epoch's InitProducerId) aborts the open transaction with a marker of the
    new epoch: the old epoch's offsets never count."""
    data, log = offsets
    txn_commit(log, 8)
    log._native.write_txn_marker(PID, 1, False, 0)
    assert seen(data) == ((3, ""), False)
    txn_commit(log, 9, epoch=1)
    log._native.write_txn_marker(PID, 1, True, 0)
    assert seen(data) == ((9, "txn"), False)


def test_a_commit_written_after_an_open_transactions_wins(offsets):
    data, log = offsets
    txn_commit(log, 8)
    with OffsetStore(data, GROUP) as store:
        store.commit({TP: (5, "plain")})
    assert seen(data) == ((5, "plain"), True)
    log._native.write_txn_marker(PID, 0, True, 0)
    assert seen(data) == ((5, "plain"), False)


def test_a_tombstone_drops_what_an_open_transaction_holds(offsets):
    """Kafka's replay of a tombstone removes the partition's pending transactional commits: the
    COMMIT after it does not bring the deleted offset back."""
    data, log = offsets
    txn_commit(log, 8)
    with OffsetStore(data, GROUP) as store:
        assert store.delete([TP]) == 1
    assert seen(data) == (None, False)
    log._native.write_txn_marker(PID, 0, True, 0)
    assert seen(data) == (None, False)


def test_other_record_types_and_groups_are_skipped(offsets):
    data, log = offsets
    group_metadata = struct.pack(">hh", 2, 1) + GROUP.encode()
    log.append([_native.Record(b"anything", key=group_metadata)])
    with OffsetStore(data, "another") as other:
        other.commit({TP: (99, "")})
    assert seen(data) == ((3, ""), False)


@pytest.mark.parametrize(
    "value, error",
    [
        (struct.pack(">hqi", 5, 42, 5) + bytes([1]) + struct.pack(">q", 0) + b"\x00", UnsupportedFormatError),
        (struct.pack(">hqi", 3, 1, -1) + struct.pack(">h", 100) + b"ab", CorruptRecordError),
    ],
    ids=["future-version", "damaged"],
)
def test_a_value_that_does_not_decode_fails_the_read(offsets, value, error):
    """As it fails Kafka's coordinator load; a skipped commit would be a silently older offset."""
    data, log = offsets
    log.append([_native.Record(value, key=encode_key(GROUP, *TP))])
    with pytest.raises(error):
        seen(data)


def _segment(data) -> str:
    (path,) = glob.glob(os.path.join(data.partition_path(OFFSETS_TOPIC, offsets_partition(GROUP)), "*.log"))
    return path


def _batches(path: str) -> list[tuple[int, int]]:
    """(position, total size) of every batch in a .log file."""
    raw, pos, out = open(path, "rb").read(), 0, []
    while pos + 12 <= len(raw) and (length := struct.unpack_from(">i", raw, pos + 8)[0]) > 0:
        out.append((pos, 12 + length))
        pos += 12 + length
    return out


def test_a_damaged_transactional_commit_fails_the_read(offsets):
    data, log = offsets
    txn_commit(log, 8)
    log._native.write_txn_marker(PID, 0, True, 0)
    log.close()
    path = _segment(data)
    with OffsetStore(data, GROUP) as store:
        assert store.load()[TP] == (8, "txn")
    pos, size = _batches(path)[-2]  # the transactional commit (its marker is the last)
    at = pos + size - 3  # inside its records, under its CRC
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x10]))
    with pytest.raises(CorruptRecordError):
        seen(data)


def test_a_torn_tail_reads_as_the_commits_before_it(offsets):
    """A commit whose append a power loss cut (the segment ends inside it) was never
    acknowledged: the reader sees the offset before it, and a later commit lands after it."""
    data, log = offsets
    log.close()
    with OffsetStore(data, GROUP) as store:
        store.commit({TP: (6, "")})
    path = _segment(data)
    pos, size = _batches(path)[-1]
    os.truncate(path, pos + size // 2)
    assert seen(data) == ((3, ""), False)
    with OffsetStore(data, GROUP) as store, pytest.warns(RecoveryWarning, match="incomplete batch"):
        store.commit({TP: (7, "")})  # the writer's open drops the torn tail
        assert store.load()[TP] == (7, "")


def test_a_batch_claiming_past_a_sealed_segments_end_fails_the_read(offsets):
    """A sealed segment whose batch header claims ~2 GiB (past the file's end) is damage, not a
    torn tail: a later segment exists. Skipping it would hand back an older offset, silently
    (records() refuses the same bytes)."""
    data, log = offsets
    with OffsetStore(data, GROUP) as store:
        store.commit({TP: (4, "")})
        log.roll()
        store.commit({("in", 1): (5, "")})
    log.close()
    folder = data.partition_path(OFFSETS_TOPIC, offsets_partition(GROUP))
    first, _ = sorted(glob.glob(os.path.join(folder, "*.log")))
    pos, _ = _batches(first)[-1]  # the commit of offset 4, the sealed segment's last batch
    with open(first, "r+b") as f:
        f.seek(pos + 8)
        f.write(struct.pack(">i", 0x7FFFFFF0))
    with pytest.raises(CorruptRecordError, match="not a record batch"):
        seen(data)
