"""Partitions written as a broker stores what transactional producers send: kafka-python's
batch builder with the transactional flag, producer id, epoch and sequence; COMMIT/ABORT
control batches as a transaction coordinator writes them; non-transactional records between.

A script is a list of steps; ``expected`` is an independent model of what Kafka serves at each
isolation level (a transaction's records are committed iff its producer's next marker is a
COMMIT; read_committed stops at the first offset of a transaction with no marker yet)."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c, encode_varint

TS = 1_700_000_000_000
ABORT, COMMIT = 0, 1


@dataclass(frozen=True)
class Data:
    """A batch of ``count`` records, transactional when ``pid`` is given."""

    pid: int | None
    count: int


@dataclass(frozen=True)
class Marker:
    pid: int
    commit: bool


def data_batch(base: int, values: list[bytes], pid: int | None, seq: int) -> bytes:
    txn = pid is not None
    builder = DefaultRecordBatchBuilder(
        2, 0, int(txn), pid if txn else -1, 0 if txn else -1, seq if txn else -1, 1 << 20
    )
    for i, v in enumerate(values):
        builder.append(i, timestamp=TS + base + i, key=b"k%d" % (base + i), value=v, headers=[])
    data = bytearray(builder.build())
    data[0:8] = struct.pack(">q", base)  # the broker assigns offsets; not CRC-covered
    return bytes(data)


def control_batch(base: int, pid: int, kind: int) -> bytes:
    """An ABORT (0) or COMMIT (1) marker: attributes 0x30, one record with key (version 0,
    type) and value (version 0, coordinator epoch 0)."""
    key, value = struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 0)
    body = bytearray(b"\x00")
    for v in (0, 0):
        encode_varint(v, body.append)
    encode_varint(len(key), body.append)
    body += key
    encode_varint(len(value), body.append)
    body += value
    encode_varint(0, body.append)
    record = bytearray()
    encode_varint(len(body), record.append)
    record += body
    after_crc = struct.pack(">hiqqqhii", 0x30, 0, TS + base, TS + base, pid, 0, -1, 1) + bytes(record)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base, batch_length, 0, 2, calc_crc32c(after_crc)) + after_crc


class TxnPartition:
    """Builds a partition directory step by step, in segments, and knows what each isolation
    level must return. ``values`` are unique, so record lists compare exactly."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        self.offset = 0
        self.segment_base = 0
        self.seq: dict[int, int] = {}
        #: (offset, value, pid or None, transaction number of that pid or None)
        self.records: list[tuple[int, bytes, int | None, int | None]] = []
        self.txn_no: dict[int, int] = {}
        self.open_txn: dict[int, int] = {}  # pid -> first offset of its open transaction
        self.outcome: dict[tuple[int, int], bool] = {}  # (pid, txn number) -> committed
        self.markers: list[tuple[int, int, bool]] = []  # (offset, pid, commit)
        self.new_segment()

    def _log(self) -> str:
        return os.path.join(self.path, f"{self.segment_base:020d}.log")

    def new_segment(self) -> None:
        self.segment_base = self.offset
        for ext in ("log", "index", "timeindex"):
            open(os.path.join(self.path, f"{self.segment_base:020d}.{ext}"), "ab").close()

    def _write(self, data: bytes) -> None:
        with open(self._log(), "ab") as f:
            f.write(data)

    def run(self, steps: list[Data | Marker | str]) -> None:
        for step in steps:
            if step == "roll":
                self.new_segment()
            elif isinstance(step, Data):
                self.data(step.pid, step.count)
            else:
                assert isinstance(step, Marker)
                self.marker(step.pid, step.commit)

    def data(self, pid: int | None, count: int) -> None:
        values = [b"v%d" % (self.offset + i) for i in range(count)]
        seq = self.seq.get(pid, 0) if pid is not None else -1
        self._write(data_batch(self.offset, values, pid, seq))
        txn = None
        if pid is not None:
            self.seq[pid] = seq + count
            if pid not in self.open_txn:
                self.open_txn[pid] = self.offset
                self.txn_no[pid] = self.txn_no.get(pid, -1) + 1
            txn = self.txn_no[pid]
        self.records += [(self.offset + i, v, pid, txn) for i, v in enumerate(values)]
        self.offset += count

    def marker(self, pid: int, commit: bool) -> None:
        self._write(control_batch(self.offset, pid, COMMIT if commit else ABORT))
        if pid in self.open_txn:
            del self.open_txn[pid]
            self.outcome[(pid, self.txn_no[pid])] = commit
        self.markers.append((self.offset, pid, commit))
        self.offset += 1

    @property
    def lso(self) -> int:
        return min(self.open_txn.values(), default=self.offset)

    def expected(self, read_committed: bool) -> list[tuple[int, bytes]]:
        if not read_committed:
            return [(o, v) for o, v, _, _ in self.records]
        return [
            (o, v)
            for o, v, pid, txn in self.records
            if o < self.lso and (pid is None or self.outcome.get((pid, txn), False))
        ]


A, B = 1000, 2000

#: Committed and aborted transactions of two producers interleaved, with plain records between
#: and a segment boundary inside open transactions.
INTERLEAVED: list[Data | Marker | str] = [
    Data(None, 2),
    Data(A, 2),
    Data(B, 3),
    Data(None, 1),
    Data(A, 1),
    Marker(A, commit=True),
    Data(B, 2),
    Marker(B, commit=False),
    Data(A, 2),
    Data(B, 1),
    Data(None, 1),
    Marker(A, commit=False),
    Data(A, 2),
    "roll",
    Marker(B, commit=True),
    Data(None, 2),
    Data(B, 2),
    Marker(B, commit=False),
    Data(A, 1),
    Marker(A, commit=True),
    Data(None, 3),
]
