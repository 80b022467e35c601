"""kafkalite.aio: the asyncio API over the sync Producer/Consumer (aiokafka's names).

Faults injected: appends by another process while a consumer idles (woken by the futex, not by
polling: CPU time measured), a member leaving and a member kill -9'd mid-stream (every record
consumed, commits land), getone() cancelled while its fetch is in a worker thread (no record
skipped)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import kafkalite
import pytest
from kafkalite import Admin, TopicPartition
from kafkalite.aio import AIOConsumer, AIOKafkaConsumer, AIOKafkaProducer, AIOProducer
from kafkalite.groups.member import GroupFiles

GROUP = {"session_timeout_ms": 1000, "heartbeat_interval_ms": 100, "auto_offset_reset": "earliest"}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_round_trip_send_send_and_wait_getone_getmany_async_for(tmp_path):
    data = str(tmp_path / "data")
    assert AIOKafkaProducer is AIOProducer and AIOKafkaConsumer is AIOConsumer

    async def main():
        async with AIOProducer(data) as producer:
            future = await producer.send("t", b"v0", key=b"k0")
            assert isinstance(future, asyncio.Future)
            first = await future
            assert (first.topic, first.partition, first.offset) == ("t", 0, 0)
            meta = await producer.send_and_wait("t", b"v1", key=b"k1", headers=[("h", b"x")])
            assert meta.offset == 1
            futures = [await producer.send("t", b"v%d" % i) for i in range(2, 1000)]
            await producer.flush()
            assert all(f.done() for f in futures)
            assert [f.result().offset for f in futures] == list(range(2, 1000))
        async with AIOConsumer("t", path=data, auto_offset_reset="earliest") as consumer:
            r = await consumer.getone()
            assert (r.offset, r.key, r.value) == (0, b"k0", b"v0")
            batch = await consumer.getmany(timeout_ms=1000, max_records=10)
            assert list(batch) == [TopicPartition("t", 0)]
            got = batch[TopicPartition("t", 0)]
            assert [x.offset for x in got] == list(range(1, 11)) and got[0].headers == [("h", b"x")]
            assert await consumer.position(TopicPartition("t", 0)) == 11
            offsets = []
            async for record in consumer:
                offsets.append(record.offset)
                if record.offset == 999:
                    break
            assert offsets == list(range(11, 1000))
            assert await consumer.getmany(timeout_ms=50) == {}
            consumer.seek(TopicPartition("t", 0), 500)
            assert (await consumer.getone()).offset == 500

    run(main())


def test_async_for_wakes_on_another_process_append_and_does_not_spin(tmp_path, spawn):
    """Idle in ``async for`` for 2 s: (almost) no CPU. Then a child process appends: the record
    arrives well within the 1 s wait cap, so the futex woke the loop, not a timer."""
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 1)
    kafkalite.Producer(data).close()  # a producer has opened the data dir: the notify file exists
    child = (
        "import sys, time\nfrom kafkalite import Producer\n"
        "p = Producer(sys.argv[1])\n"
        "for i in range(3):\n"
        "    time.sleep(0.37)\n    p.send('t', b'from-child').get(10)\n    print(time.time(), flush=True)\n"
        "p.close()\n"
    )

    async def main():
        async with AIOConsumer("t", path=data, group_id="g", **GROUP) as consumer:
            assert await consumer.getmany(timeout_ms=200) == {}
            received: list[float] = []

            async def iterate():
                async for record in consumer:
                    received.append(time.time())
                    assert record.value == b"from-child"
                    if len(received) == 3:
                        return

            task = asyncio.create_task(iterate())
            await asyncio.sleep(0.3)  # the group joined, the iteration waits
            cpu = time.process_time()
            await asyncio.sleep(2.0)
            idle_cpu = time.process_time() - cpu
            assert not task.done()
            assert idle_cpu < 0.2, f"idle-waiting for 2 s cost {idle_cpu:.3f} s of CPU: polling"
            proc = spawn.code(child, data, stdout=subprocess.PIPE, text=True)
            await asyncio.wait_for(task, 20)
            appended = [float(line) for line in proc.stdout]
            # Three appends at arbitrary points of the 1 s cap: a timer would miss 0.25 s.
            late = [round(r - a, 3) for r, a in zip(received, appended, strict=True) if r - a > 0.25]
            assert not late, f"woken {late} s after the append: by the wait cap, not the notifier"

    run(main())


def _produce(data: str, topic: str, n: int, start: int = 0) -> None:
    with kafkalite.Producer(data) as p:
        for i in range(start, start + n):
            p.send(topic, b"%d" % i, key=b"%d" % i)


def _committed(data: str, topic: str, partitions: int) -> dict[int, int | None]:
    with kafkalite.Consumer(data, group_id="g") as c:
        return {p: c.committed(TopicPartition(topic, p)) for p in range(partitions)}


def test_two_members_rebalance_when_one_stops_every_record_consumed(tmp_path):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 4)
    _produce(data, "t", 400)

    async def drain(consumer, seen, until):
        while not until():
            for records in (await consumer.getmany(timeout_ms=100)).values():
                seen.extend(int(r.value) for r in records)
            await consumer.commit()

    async def main():
        a = AIOConsumer("t", path=data, group_id="g", enable_auto_commit=False, **GROUP)
        b = AIOConsumer("t", path=data, group_id="g", enable_auto_commit=False, **GROUP)
        await a.start()
        await b.start()
        seen_a: list[int] = []
        seen_b: list[int] = []
        deadline = time.monotonic() + 20
        # Both members get a share (the group rebalanced to two), then b leaves.
        await asyncio.gather(
            drain(a, seen_a, lambda: len(seen_a) + len(seen_b) >= 400 or time.monotonic() > deadline),
            drain(b, seen_b, lambda: len(seen_a) + len(seen_b) >= 400 or time.monotonic() > deadline),
        )
        assert len(a.assignment()) == 2 and len(b.assignment()) == 2
        await b.stop()
        _produce(data, "t", 400, start=400)
        await drain(
            a, seen_a, lambda: len(set(seen_a)) >= 800 - len(set(seen_b)) or time.monotonic() > deadline
        )
        assert len(a.assignment()) == 4
        await a.stop()
        return seen_a, seen_b

    seen_a, seen_b = run(main())
    assert sorted(seen_a + seen_b) == list(range(800))  # each exactly once: clean handover
    assert sum(v for v in _committed(data, "t", 4).values() if v) == 800


MEMBER = """
import asyncio, sys, time
from kafkalite.groups.member import GroupFiles
from kafkalite.aio import AIOConsumer

async def main():
    time.sleep(float(sys.argv[2]))  # a slow start, as under load
    async with AIOConsumer("t", path=sys.argv[1], group_id="g", enable_auto_commit=False,
                           session_timeout_ms=1000, heartbeat_interval_ms=100,
                           auto_offset_reset="earliest") as c:
        while True:
            got = await c.getmany(timeout_ms=100, max_records=5)
            for records in got.values():
                for r in records:
                    print(int(r.value), flush=True)
            await c.commit()
            await asyncio.sleep(0.05)  # slow: most of its fetch is still buffered when killed

asyncio.run(main())
"""


def _group_diagnosis(data: str) -> str:
    """The group's members, whether their processes exist, and who holds their files' flocks."""
    files = GroupFiles(data, "g")
    members = files.load()["members"]
    holders = {}
    for member in members:
        try:
            inode = os.stat(files.member_path(member)).st_ino
        except FileNotFoundError:  # evicted between the load and now
            holders[member] = "nobody (member file gone)"
            continue
        with open("/proc/locks") as locks:
            holders[member] = [line.split()[4] for line in locks if f":{inode} " in line]
    return "; ".join(
        f"{m} pid {pid} exists={os.path.exists(f'/proc/{pid}')} flock held by {holders[m]}"
        for m, pid in ((m, info["pid"]) for m, info in members.items())
    )


@pytest.mark.parametrize("child_start_s", [0, 2], ids=["child-starts-at-once", "child-starts-late"])
def test_a_kill_9_member_partitions_are_taken_over_every_record_consumed(tmp_path, spawn, child_start_s):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 4)
    proc = spawn.code(MEMBER, data, str(child_start_s), stdout=subprocess.PIPE, text=True)

    async def main():
        async with AIOConsumer("t", path=data, group_id="g", enable_auto_commit=False, **GROUP) as a:
            seen: list[int] = []
            deadline = time.monotonic() + 20
            while len(a.assignment()) != 2 and time.monotonic() < deadline:
                await a.getmany(timeout_ms=50)
            assert len(a.assignment()) == 2, "the child never joined"
            # The records are written only now that the child is a member: written before, the
            # parent could drain all four partitions while the child starts (a slow start under
            # load), and the child, with nothing to consume, would never be killed mid-stream.
            await asyncio.to_thread(_produce, data, "t", 2000)
            while not child_seen() and time.monotonic() < deadline:  # it consumes, slowly
                for records in (await a.getmany(timeout_ms=50, max_records=5)).values():
                    seen.extend(int(r.value) for r in records)
            assert child_seen(), "the child consumed nothing"
            await asyncio.sleep(0.2)
            proc.kill()
            proc.wait()
            deadline = time.monotonic() + 20  # the takeover's own bound
            while time.monotonic() < deadline:  # until a owns all four and is caught up
                got = await a.getmany(timeout_ms=100)
                for records in got.values():
                    seen.extend(int(r.value) for r in records)
                await a.commit()
                if not got and len(a.assignment()) == 4:
                    break
            assert len(a.assignment()) == 4, f"not taken over: {_group_diagnosis(data)}"
            return seen

    child_lines: list[str] = []

    def child_seen() -> set[int]:
        return {int(line) for line in child_lines if line.strip().isdigit()}

    reader = threading.Thread(target=lambda: child_lines.extend(proc.stdout), daemon=True)
    reader.start()
    seen = run(main())
    reader.join(5)
    assert child_seen(), "the child consumed nothing before it was killed"
    assert set(seen) | child_seen() == set(range(2000))  # at least once: none lost
    assert sum(v for v in _committed(data, "t", 4).values() if v) == 2000


def test_cancelled_getone_leaves_the_consumer_usable_and_skips_nothing(tmp_path):
    data = str(tmp_path / "data")
    _produce(data, "t", 3)

    def slow_deserializer(value: bytes) -> bytes:
        time.sleep(0.2)
        return value

    async def main():
        async with AIOConsumer(
            "t", path=data, auto_offset_reset="earliest", value_deserializer=slow_deserializer
        ) as consumer:
            # Cancelled while its fetch runs in a worker thread: the fetched records stay.
            task = asyncio.create_task(consumer.getone())
            await asyncio.sleep(0.2)  # the fetch is in a worker thread, deserializing
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert [(await asyncio.wait_for(consumer.getone(), 10)).offset for _ in range(3)] == [0, 1, 2]
            # Cancelled while waiting for data: the next getone gets the next append.
            task = asyncio.create_task(consumer.getone())
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            async with AIOProducer(data) as producer:
                await producer.send_and_wait("t", b"late")
            assert (await asyncio.wait_for(consumer.getone(), 5)).value == b"late"

    run(main())


def test_errors_are_the_sync_apis_typed_errors(tmp_path):
    data = str(tmp_path / "data")

    async def main():
        with pytest.raises(kafkalite.InvalidConfigError):
            AIOProducer(data, acks=7)
        producer = AIOProducer(data)
        with pytest.raises(kafkalite.IllegalStateError):
            await producer.send("t", b"x")
        async with producer:
            with pytest.raises(kafkalite.InvalidTopicError):
                await producer.send("bad/name", b"x")
            with pytest.raises(kafkalite.InvalidConfigError):
                await producer.send("t", None, key=None)
            await producer.send_and_wait("t", b"x")
        with pytest.raises(kafkalite.IllegalStateError):
            await producer.send("t", b"x")
        with pytest.raises(kafkalite.KafkaliteError) as missing:
            await AIOConsumer("t", path=str(tmp_path / "none")).start()
        with pytest.raises(type(missing.value)):
            kafkalite.Consumer(str(tmp_path / "none"), "t")
        async with AIOConsumer("t", path=data) as consumer:
            with pytest.raises(kafkalite.IllegalStateError):
                await consumer.commit()  # no group_id
            with pytest.raises(kafkalite.IllegalStateError):
                consumer.seek(TopicPartition("t", 5), 0)  # not assigned

    run(main())


def test_pause_and_subscribe_drop_buffered_records_without_skipping_them(tmp_path):
    """getone() fetched a chunk and handed out one record: records still buffered when the
    partition is paused (or the subscription changes) are read again later, not skipped, and
    commit() commits only what was handed out."""
    data = str(tmp_path / "data")
    _produce(data, "t", 10)
    tp = TopicPartition("t", 0)

    async def main():
        async with AIOConsumer("t", path=data, group_id="g", enable_auto_commit=False, **GROUP) as c:
            assert (await c.getone()).offset == 0
            await c.commit()
            assert await c.committed(tp) == 1  # not 10: nine records are only buffered
            c.pause(tp)
            assert await c.getmany(timeout_ms=100) == {}
            c.resume(tp)
            assert (await asyncio.wait_for(c.getone(), 10)).offset == 1
            c.subscribe(["t"])
            assert [r.offset for r in (await c.getmany(timeout_ms=1000))[tp]] == list(range(2, 10))

    run(main())


def test_getmany_of_some_partitions_keeps_the_others_buffered_in_order(tmp_path):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 2)
    with kafkalite.Producer(data) as p:
        for i in range(6):
            p.send("t", b"%d" % i, partition=i % 2)
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)

    async def main():
        async with AIOConsumer("t", path=data, group_id="g", enable_auto_commit=False, **GROUP) as c:
            first = await c.getmany(tp1, timeout_ms=1000)
            assert list(first) == [tp1] and [r.value for r in first[tp1]] == [b"1", b"3", b"5"]
            with kafkalite.Producer(data) as p:
                p.send("t", b"6", partition=0)
            assert await c.getmany(tp1, timeout_ms=100) == {}  # fetches, but not tp0 again
            await c.commit()
            assert await c.committed(tp0) == 0  # none of tp0 handed out: not past its buffer
            assert (await c.getone(tp0)).value == b"0"
            rest = await c.getmany(timeout_ms=1000)
            more = await c.getmany(timeout_ms=1000)
            assert [r.value for r in rest.get(tp0, []) + more.get(tp0, [])] == [b"2", b"4", b"6"]
            with pytest.raises(kafkalite.IllegalStateError):
                await c.getmany(TopicPartition("t", 7))

    run(main())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
