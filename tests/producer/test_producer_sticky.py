"""Keyless records and Kafka's sticky partitioner (issue 14 target 5): a run of consecutive
keyless records goes to one partition until ``batch_size`` bytes went there, then the next
run goes to another partition, for ``send()`` and ``send_batch`` alike; keyed records keep
murmur2. Record bytes are the engine's upper bound of an encoded record (what the
partitioner counts): 27 bytes of fields plus the value's length varint plus the value."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kafkalite import Admin, Consumer, Producer, TopicPartition
from kafkalite.producer.partitioner import partition_for_key


def record_bytes(value: bytes) -> int:
    n, zigzag = 1, len(value) << 1
    while zigzag >= 0x80:
        zigzag >>= 7
        n += 1
    return 27 + n + len(value)


def placed(path: str, topic: str, partitions: int) -> dict[int, int]:
    """Record index (the value's first 4 bytes) -> the partition it was written to."""
    out = {}
    with Consumer(path) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning()
        while batch := c.poll(timeout_ms=100, max_records=100_000):
            for tp, records in batch.items():
                for r in records:
                    out[struct.unpack(">I", r.value[:4])[0]] = tp.partition
    return out


def check_runs(values: list[bytes], partition_of: list[int], batch_size: int, partitions: int) -> None:
    runs: list[list[int]] = []  # indices of consecutive records in one partition
    for i, p in enumerate(partition_of):
        if runs and partition_of[runs[-1][0]] == p:
            runs[-1].append(i)
        else:
            runs.append([i])
    for n, run in enumerate(runs if partitions > 1 else ()):  # one partition: one run
        sizes = [record_bytes(values[i]) for i in run]
        assert sum(sizes[:-1]) < batch_size, (sizes, batch_size)  # no run goes on past a full batch
        if n < len(runs) - 1:  # and a finished run moved on only once its batch filled
            assert sum(sizes) >= batch_size, (sizes, batch_size)
    if partitions == 1:
        assert set(partition_of) == {0}
    elif len(runs) >= 60:  # a missing partition after 60 random switches: < 1e-7
        assert set(partition_of) == set(range(partitions))


def make_values(sizes: list[int]) -> list[bytes]:
    return [struct.pack(">I", i) + b"v" * s for i, s in enumerate(sizes)]


SETTINGS = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
VALUE_SIZES = st.lists(st.integers(0, 300), min_size=1, max_size=1500)


@SETTINGS
@given(partitions=st.integers(1, 5), batch_size=st.integers(1, 4000), sizes=VALUE_SIZES)
@example(partitions=3, batch_size=1000, sizes=[100] * 400)
def test_send_spreads_keyless_records_a_batch_at_a_time(tmp_path_factory, partitions, batch_size, sizes):
    path = str(tmp_path_factory.mktemp("sticky") / "data")
    Admin(path).create_topic("t", partitions=partitions)
    values = make_values(sizes)
    with Producer(path, batch_size=batch_size) as p:
        futures = [p.send("t", v) for v in values]
        p.flush()
        partition_of = [f.get(5).partition for f in futures]
    assert placed(path, "t", partitions) == dict(enumerate(partition_of))
    check_runs(values, partition_of, batch_size, partitions)


@SETTINGS
@given(
    partitions=st.integers(1, 5),
    batch_size=st.integers(1, 4000),
    calls=st.lists(VALUE_SIZES, min_size=1, max_size=4),
)
@example(partitions=3, batch_size=1000, calls=[[100] * 300, [10] * 50, [200] * 100])
def test_send_batch_spreads_keyless_records_like_send(tmp_path_factory, partitions, batch_size, calls):
    # One call is no longer one partition; runs continue across calls (and with send()).
    path = str(tmp_path_factory.mktemp("sticky") / "data")
    Admin(path).create_topic("t", partitions=partitions)
    values = make_values([s for sizes in calls for s in sizes])
    with Producer(path, batch_size=batch_size) as p:
        start = 0
        for sizes in calls:
            out = p.send_batch("t", values[start : start + len(sizes)])
            assert sum(last - first + 1 for first, last in out.values()) == len(sizes)
            start += len(sizes)
    where = placed(path, "t", partitions)
    assert sorted(where) == list(range(len(values)))
    check_runs(values, [where[i] for i in range(len(values))], batch_size, partitions)


def test_a_big_keyless_send_batch_reaches_every_partition(tmp_path):
    # The case: 200,000 keyless records from one call landed in one partition.
    path = str(tmp_path / "data")
    Admin(path).create_topic("t", partitions=4)
    with Producer(path) as p:
        out = p.send_batch("t", [b"x" * 100] * 200_000)
    assert sorted(out) == [0, 1, 2, 3]
    counts = [last - first + 1 for first, last in out.values()]
    assert sum(counts) == 200_000 and min(counts) > 30_000  # about 50,000 each


def test_send_batch_to_a_partition_and_keyed_records_are_not_spread(tmp_path):
    path = str(tmp_path / "data")
    Admin(path).create_topic("t", partitions=3)
    keys = [b"k%d" % i for i in range(300)]
    with Producer(path, batch_size=100) as p:
        assert p.send_batch("t", [b"x" * 50] * 100, partition=2) == {2: (0, 99)}
        out = p.send_batch("t", [b"x" * 50] * 300, keys=keys)
        singles = [p.send("t", b"x", key=k) for k in keys]
        p.flush()
        assert [f.get(5).partition for f in singles] == [partition_for_key(k, 3) for k in keys]
    expected = {n: sum(partition_for_key(k, 3) == n for k in keys) for n in range(3)}
    assert {n: last - first + 1 for n, (first, last) in out.items()} == expected
