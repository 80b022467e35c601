"""A reader that follows another writer and meets a damaged batch after batches published since
its last look: the follow fails typed (CorruptRecordError), and the good batches it counted stay
readable. Before the fix the follow returned its error before mapping them, and every later read
of them panicked in the engine ("read 0..2302 outside a map of 1151"), as an embedded group
member did in the server soak of a fresh-clone CI run (seed 1370683853). Damage is made in this
test's own temp directory."""

from __future__ import annotations

import glob
import os

import kafkalite
import pytest


def test_a_follow_that_meets_damage_keeps_the_batches_before_it_readable(tmp_path):
    part = str(tmp_path / "t-0")
    writer = kafkalite.Log(part, shared_writers=True)
    writer.append_values([b"a" * 100] * 10)  # offsets 0..9
    reader = kafkalite.Log(part, readonly=True)
    assert reader.end_offset == 10
    first = bytes(reader.read(0))  # the whole first batch
    writer.append_values([b"b" * 100] * 10)  # offsets 10..19, published after the reader's look
    (segment,) = glob.glob(os.path.join(part, "*.log"))
    with open(segment, "r+b") as f:
        # After the two batches (same size): a whole, CRC-valid copy of the first batch, whose
        # offsets (0..9) do not follow 19, which a follower must call damage.
        f.seek(2 * len(first))
        f.write(first)
    with pytest.raises(kafkalite.CorruptRecordError, match="do not follow offset 19"):
        list(reader.records(10, 20))
    assert [r.offset for r in reader.records(10, 20)] == list(range(10, 20))
    assert {r.value for r in reader.records(10, 20)} == {b"b" * 100}
