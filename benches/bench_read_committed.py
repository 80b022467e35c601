"""read_committed cost (issue 10.5): a partition of N 100-byte records in transactional batches
of two producers (one in ten transactions aborted) with plain batches between, read whole at
both isolation levels; and what the per-partition cache saves: the first last-stable-offset
lookup walks every batch header, later ones only what was appended since.

    python benches/bench_read_committed.py [--records 2000000] [--per-batch 100]

Prints records/s per isolation level and the lookup times.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "support"))

from kafkalite import Log
from txn_partition import TxnPartition


def build(path: str, records: int, per_batch: int) -> TxnPartition:
    part = TxnPartition(path)
    batches = records // per_batch
    for i in range(batches):
        pid = (1000, 2000, None)[i % 3]
        part.data(pid, per_batch)
        if pid is not None and i % 6 in (0, 1):
            part.marker(pid, commit=(i // 6) % 10 != 0)
    for pid in (1000, 2000):
        part.marker(pid, commit=True)
    return part


def timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--per-batch", type=int, default=100)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        part, secs = timed(lambda: build(os.path.join(tmp, "t-0"), a.records, a.per_batch))
        print(f"built {part.offset} offsets in {secs:.1f} s")
        Log(part.path).close()  # a writer's recovery builds the offset index, as a broker's segment has
        with Log(part.path, readonly=True) as log:
            lso, first = timed(lambda: log.last_stable_offset)
            _, again = timed(lambda: log.last_stable_offset)
            print(
                f"first LSO lookup (walks ~{part.offset // a.per_batch} batch headers): {first * 1000:.1f} ms; "
                f"next: {again * 1000:.3f} ms"
            )
            readers = (
                (
                    "read_uncommitted",
                    functools.partial(log._native.read_arrow, isolation_level="read_uncommitted"),
                ),
                (
                    "read_committed",
                    functools.partial(log._native.read_arrow, isolation_level="read_committed"),
                ),
            )
            for name, read in readers:

                def whole(read=read) -> int:  # Arrow batches: the engine's cost, no Python objects
                    n, pos = 0, 0
                    while pos < lso:
                        batch, pos = read(pos, lso, 65536)
                        if not len(batch):
                            break
                        n += len(batch)
                    return n

                n, secs = timed(whole)
                print(f"{name}: {n} records in {secs:.2f} s = {n / secs / 1e6:.2f} M records/s")


if __name__ == "__main__":
    main()
