"""committed()/load cost on a big ``__consumer_offsets`` partition: one group's 200,000 commits
(batches of 10 over 100 partitions; every 50th batch a transaction's, every 7th of those aborted),
then an open transaction and 2,000 plain commits after it (past the last stable offset).

Rows: a cold load (a new OffsetStore reads the whole partition), a warm load with nothing new, and
a warm load after one more commit (median of 20). Run against any tree, same command:

    PYTHONPATH=<tree>/python python benches/bench_committed_offsets.py [--commits 200000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from kafkalite import Admin
from kafkalite.datadir import DataDir
from kafkalite.groups import offsets
from kafkalite.log import Record

GROUP = "bench"


def fill(data: DataDir, commits: int) -> None:
    log = data.open_partition(offsets.OFFSETS_TOPIC, offsets.offsets_partition(GROUP), shared_writers=True)
    seq: dict[int, int] = {}

    def entries(i: int) -> tuple[list[bytes], list[bytes]]:
        keys = [offsets.encode_key(GROUP, "in", (i * 10 + j) % 100) for j in range(10)]
        return [offsets.encode_value(i * 10 + j, "", 0) for j in range(10)], keys

    def txn(pid: int, values: list[bytes], keys: list[bytes]) -> None:
        s = seq.get(pid, 0)
        log.append_produce(
            log.encode_batches(
                values, keys=keys, producer_id=pid, producer_epoch=0, base_sequence=s, transactional=True
            )
        )
        seq[pid] = s + len(values)

    for i in range(commits // 10):
        values, keys = entries(i)
        if i % 50 == 49:
            pid = 1000 + i % 13
            txn(pid, values, keys)
            log._native.write_txn_marker(pid, 0, i % 7 != 0, 0)
        else:
            log.append([Record(v, key=k, timestamp=0) for v, k in zip(values, keys, strict=True)])
    txn(1, *entries(0))  # open: holds the last stable offset here
    for i in range(200):
        values, keys = entries(i)
        log.append([Record(v, key=k, timestamp=0) for v, k in zip(values, keys, strict=True)])
    log.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        Admin(tmp).create_topic("in", 100)
        data = DataDir(tmp)
        offsets.ensure_offsets_topic(data)
        fill(data, args.commits)
        started = time.perf_counter()
        store = offsets.OffsetStore(data, GROUP)
        assert len(store.load()) == 100
        cold = time.perf_counter() - started
        started = time.perf_counter()
        store.load()
        idle = time.perf_counter() - started
        after_one = []
        for i in range(20):
            store.commit({("in", i): (10**9 + i, "")})
            started = time.perf_counter()
            assert store.load()[("in", i)][0] == 10**9 + i
            after_one.append(time.perf_counter() - started)
        store.close()
    print(f"commits={args.commits} (+2,000 past an open transaction)")
    print(f"cold load            {cold * 1000:9.1f} ms")
    print(f"warm load, idle      {idle * 1000:9.3f} ms")
    print(f"warm load, +1 commit {statistics.median(after_one) * 1000:9.3f} ms (median of 20)")


if __name__ == "__main__":
    main()
