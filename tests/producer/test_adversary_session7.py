"""Adversary findings against session 7's producer changes (the native ``send``, the native
deleted-topic check in the append, the parallel ``close``). Each test injects the fault it is
about: a thread preempted at the worst moment, a forked child, a process killed mid-close."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
import threading
import time

import kafkalite
import pytest
from helpers import child_env
from kafkalite import Admin, IllegalStateError, KafkaTimeoutError, Producer, _native
from kafkalite import producer as producer_module
from kafkalite.producer import threads as producer_threads
from server_wire import SHARED_WRITER, release, stop_holder


def run_child(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=child_env(),  # the kafkalite this test imported
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def records_in(path: str, topic: str) -> int:
    return sum(_native.Log(d, readonly=True).end_offset for d in glob.glob(f"{path}/{topic}-*"))


@pytest.mark.parametrize("linger_ms", [0, 5])
def test_a_send_preempted_between_queueing_and_waking_the_sender_is_written_by_close(
    tmp_path, monkeypatch, linger_ms
):
    """Threads send (native path) while another closes. A thread preempted after its record
    was queued and before it woke the sender (the Python step after the native queueing),
    while close() finished: the sender's last pass took only the partitions it had been woken
    for, so close() returned with the record queued and its future never resolved (5-10 of
    ~70 futures hung on the old code). Now close() makes the accumulators refuse records, then
    the last pass takes every partition: each future resolves, and each success is in the log."""
    real_wake, real_stop = producer_module._Sender.wake, producer_threads._Flusher.stop

    def preempted_wake(self, p, due=False):
        time.sleep(0.02)  # the GIL went to another thread right after the record was queued
        return real_wake(self, p, due)

    def slow_stop(self):
        time.sleep(0.1)  # close() between its flush and shutting the producer: sends go on
        return real_stop(self)

    monkeypatch.setattr(producer_module._Sender, "wake", preempted_wake)
    monkeypatch.setattr(producer_threads._Flusher, "stop", slow_stop)
    Admin(tmp_path).create_topic("t", 8)
    producer = Producer(tmp_path, linger_ms=linger_ms)
    futures: list[list] = [[] for _ in range(4)]
    refused: list[BaseException] = []

    def sender(i: int) -> None:
        n = 0
        while True:
            try:
                futures[i].append(producer.send("t", b"v", key=b"%d-%d" % (i, n)))
            except kafkalite.KafkaliteError as e:
                refused.append(e)
                return
            n += 1

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.1)
    producer.close()
    for t in threads:
        t.join(10)
    every = [f for fs in futures for f in fs]
    assert every, "no record was sent before close"
    # close() returned: every record it accepted is resolved (Kafka's close waits for them).
    assert [f for f in every if not f.is_done] == []
    assert all(isinstance(e, IllegalStateError) for e in refused), refused
    succeeded = sum(1 for f in every if f.succeeded())
    assert succeeded == records_in(str(tmp_path), "t")


def test_a_send_that_queues_after_close_took_the_last_records_is_refused(tmp_path):
    """A send past the producer's open-check whose record arrives only after close() took what
    was queued (here a key serializer that runs while another thread closes): the old code
    queued it where nothing would append it, its future never resolved. Now it raises."""
    started, closed = threading.Event(), threading.Event()

    def serializer(value):
        if value == b"late":
            started.set()
            closed.wait(10)  # close() runs to its end while this send is past its checks
        return value

    producer = Producer(tmp_path, value_serializer=serializer)
    producer.send("t", b"first", key=b"k").get(10)
    outcome: list = []

    def send() -> None:
        try:
            outcome.append(producer.send("t", b"late", key=b"k"))
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=send)
    t.start()
    assert started.wait(10)
    producer.close()
    closed.set()
    t.join(10)
    [result] = outcome
    if isinstance(result, BaseException):
        assert isinstance(result, IllegalStateError), result
        assert records_in(str(tmp_path), "t") == 1
    else:  # a future: it must resolve, and then the record is in the log
        assert result.is_done, "send() returned a future that nothing will ever resolve"


FORK_CHILD = """
    import os, sys
    from kafkalite import IllegalStateError, Producer, _native
    path = sys.argv[1]
    producer = Producer(path, linger_ms=60_000)  # the parent's records stay queued at fork
    for i in range(100):
        producer.send("t", b"parent-%d" % i)
    pid = os.fork()
    if pid == 0:
        outcome = []
        for name, call in [
            ("send", lambda: producer.send("t", b"child")),
            ("send_batch", lambda: producer.send_batch("t", [b"child"])),
            ("flush", lambda: producer.flush(5)),
        ]:
            try:
                call()
                outcome.append(name + " accepted")
            except IllegalStateError as e:
                outcome.append(name + " refused" if "os.fork()" in str(e) else repr(e))
        producer.close()  # the parent's records are not the child's to write
        print(" / ".join(outcome), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    producer.close()
    print(_native.Log(path + "/t-0", readonly=True).end_offset)
"""


def test_a_forked_child_cannot_send_through_its_parents_producer(tmp_path):
    """os.fork() after sending, then the child uses the producer. The child has no sender
    thread: its send returned a future that never resolved (KafkaTimeoutError from get), and
    its flush appended the parent's queued records a second time (201 records in the log for
    the parent's 100 and the child's one, on the old code). Now the child's calls raise
    IllegalStateError naming the fork, and the log holds the parent's 100 records once."""
    child = run_child(FORK_CHILD, str(tmp_path))
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.split("\n")[:2] == ["send refused / send_batch refused / flush refused", "100"]


def test_a_producer_initialised_twice_refuses_instead_of_splitting_in_two(tmp_path):
    """Producer.__init__ called again on a live producer: the old code built a second sender
    (its thread never started) and then failed in _setup_send with a bare RuntimeError, leaving
    a producer whose native send queued into the first sender and whose answers came from the
    second: the next send raised KeyError with the record queued anyway, and close() closed the
    idle sender. Now the second __init__ raises IllegalStateError and changes nothing."""
    producer = Producer(tmp_path, linger_ms=10_000)
    producer.send("t", b"a")
    producer.flush()
    with pytest.raises(IllegalStateError, match="initialised already"):
        producer.__init__(tmp_path, linger_ms=10_000)  # type: ignore[misc]
    future = producer.send("t", b"b")
    producer.close()
    assert future.get(0).offset == 1
    assert records_in(str(tmp_path), "t") == 2


class LateProducer(Producer):
    def __init__(self, path, **config):
        self.sent_early = self.send("t", b"early")  # before Producer.__init__: a user bug
        super().__init__(path, **config)


def test_send_on_a_producer_not_initialised_raises_typed(tmp_path):
    """send() on an object made by Producer.__new__, or from a subclass's __init__ before
    Producer.__init__: AttributeError ('_sender') on the old code, now IllegalStateError."""
    with pytest.raises(IllegalStateError, match="not initialised"):
        Producer.__new__(Producer).send("t", b"x")
    with pytest.raises(IllegalStateError, match="not initialised"):
        LateProducer(tmp_path)


def test_a_second_close_waits_until_the_first_has_written_everything(tmp_path, monkeypatch):
    """Two threads close one producer. The second close() returned as soon as the first had
    set ``closed``, before the sender's last pass wrote the records sent during the first
    close's flush: its caller saw unresolved futures (and logs still open). Kafka's close()
    joins the I/O thread from every caller; now the second close waits for the first."""
    real_stop, real_drain = producer_threads._Flusher.stop, producer_module._Sender.drain

    def slow_stop(self):
        time.sleep(0.05)  # the first close between its flush and shutting the producer
        return real_stop(self)

    def slow_drain(self, p, current=True):
        if self.closed:
            time.sleep(0.02)  # the sender's last pass, on a busy disk
        return real_drain(self, p, current)

    monkeypatch.setattr(producer_threads._Flusher, "stop", slow_stop)
    monkeypatch.setattr(producer_module._Sender, "drain", slow_drain)
    Admin(tmp_path).create_topic("t", 4)
    producer = Producer(tmp_path, linger_ms=60_000)
    futures: list = []

    def feeder() -> None:
        while True:
            try:
                futures.append(producer.send("t", b"v", key=b"%d" % len(futures)))
            except IllegalStateError:
                return
            time.sleep(0.0001)

    feeding = threading.Thread(target=feeder)
    feeding.start()
    time.sleep(0.02)
    first = threading.Thread(target=producer.close)
    first.start()
    while not producer._sender.closed:
        time.sleep(0.001)
    producer.close()
    unresolved = sum(1 for f in list(futures) if not f.is_done)
    first.join(10)
    feeding.join(10)
    assert unresolved == 0
    assert sum(1 for f in futures if f.succeeded()) == records_in(str(tmp_path), "t")


POISONED_CHILD = """
    import sys, threading
    from kafkalite import LogPoisonedError, Producer
    producer = Producer(sys.argv[1], linger_ms=5)
    futures = []
    for i in range(200):
        try:
            futures.append(producer.send("t", b"v", key=b"%d" % i))
        except LogPoisonedError:
            pass
    try:
        producer.close(10)
    except LogPoisonedError:
        pass
    threads = [t.name for t in threading.enumerate() if t.name == "kafkalite-producer-sender"]
    print(len(futures), sum(f.is_done for f in futures), threads)
"""


def test_close_after_a_panic_poisoned_the_accumulator_still_stops_and_resolves(tmp_path):
    """A panic inside the accumulator (fail point) poisons it. close() must still stop the
    sender thread and leave no future pending: making the accumulators refuse records (this
    session's fix for the close race) must not stop close() halfway on the poisoned one."""
    env = {"KAFKALITE_FAILPOINTS": "producer.accumulate=panic@50"}
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(POISONED_CHILD), str(tmp_path)],
        env={**child_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    sent, done, threads = child.stdout.split(" ", 2)
    assert sent == done and threads.strip() == "[]", child.stdout


def test_producer_close_timeout_raises_the_flush_timeout_not_its_own_log_close(tmp_path, spawn):
    """The flush inside close(timeout) runs out of time (a stopped process holds a partition's
    lock): KafkaTimeoutError, saying another writer may be stopped. Closing that partition's log
    then also fails (this process's own flusher thread is still inside its append), and that
    LogLockedError replaced the timeout, blaming 'another thread of this process'."""
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", partitions=4)
    producer = Producer(data)
    for i in range(8):
        producer.send("t", b"first", key=b"%d" % i).get(timeout=30)
    holder = stop_holder(spawn.code, SHARED_WRITER, os.path.join(data, "t-0"))
    try:
        for i in range(8):
            producer.send("t", b"stuck", key=b"%d" % i)
        time.sleep(0.3)
        with pytest.raises(KafkaTimeoutError, match="another writer stopped"):
            producer.close(timeout=1)
    finally:
        release(holder)
