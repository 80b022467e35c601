"""Adversary findings against session 8's producer changes (the native drain of filled batches in
``send()`` and the sender thread, the append that keeps the GIL, one stat per large append,
CRC-32C through crc-fast). Each test injects the fault it is about: a callback that raises
KeyboardInterrupt or SystemExit in the middle of a drain, and so on."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import threading
import time

import pytest
from helpers import child_env
from kafkalite import (
    Admin,
    CorruptRecordError,
    IllegalStateError,
    InvalidTypeError,
    KafkaliteError,
    Log,
    LogPoisonedError,
    Producer,
    _native,
)
from kafkalite import producer as producer_module
from kafkalite.producer import sender as producer_sender
from kafkalite.producer import topics as producer_topics

PAD = b"x" * 100
#: Two of these records fill a batch.
SMALL_BATCH = 300


def _values(data_dir: str) -> list[bytes]:
    with Log(os.path.join(data_dir, "t-0"), readonly=True) as log:
        return [r.value.rstrip(b"x") for r in log.records()]


@pytest.mark.parametrize("path", ["native", "python"])
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_a_callback_interrupting_a_drain_leaves_no_taken_batch_unwritten(
    tmp_path, monkeypatch, path, interrupt
):
    """A drain takes every queued batch of a partition out of the accumulator, then appends
    them one by one, running each batch's callbacks. A callback that raised KeyboardInterrupt
    or SystemExit (or was hit by Ctrl-C) ended the drain there: the batches after it were out of
    the accumulator and never appended, their futures never resolved, pending() said 0 and
    close() returned as if all were written (19 of 20 records lost, native and Python drains
    alike); the callbacks of the same batch after the raising one never ran either. Now the
    drain appends and resolves every batch it took, runs every callback, then raises the first
    interrupt."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    if path == "python":  # the sender's drain takes the Python path (as when the lock is busy)
        monkeypatch.setattr(producer_sender, "drain_partition", lambda *args: False)
    later: list = []
    with Producer(data_dir, batch_size=SMALL_BATCH, linger_ms=60_000) as p:
        real_wake = producer_module._Sender.wake
        # The sender thread is not told: the batches the callback queues stay queued, several.
        monkeypatch.setattr(producer_module._Sender, "wake", lambda self, part, due=False: None)

        def queue_more(metadata):
            # Inside a callback send() queues (its drain would wait for the one running it).
            later.extend(p.send("t", b"later-%d" % i + PAD, key=b"k") for i in range(20))

        p.send("t", b"seed" + PAD, key=b"k").add_callback(queue_more)
        p.flush()
        assert len(later) == 20 and not any(f.is_done for f in later)
        monkeypatch.setattr(producer_module._Sender, "wake", real_wake)
        ran = []

        def interrupting(metadata):
            raise interrupt("from a callback")

        later[0].add_callback(interrupting)
        later[0].add_callback(lambda md: ran.append(md.offset))  # the same batch, after it
        later[1].add_callback(lambda md: ran.append(md.offset))
        later[5].add_callback(lambda md: ran.append(md.offset))  # a later batch
        with pytest.raises(interrupt):
            p.flush()
        unresolved = [i for i, f in enumerate(later) if not f.is_done]
        assert unresolved == [], f"futures never resolved: {unresolved}"
        assert all(f.succeeded() for f in later)
        assert ran == [later[i].get().offset for i in (0, 1, 5)]
        assert p._sender.pending() == 0
    values = _values(data_dir)
    assert values == [b"seed"] + [b"later-%d" % i for i in range(20)]
    assert [f.get().offset for f in later] == list(range(1, 21))


@pytest.mark.parametrize("truncated_to", [0, 4096])
def test_a_large_append_after_another_process_truncated_the_segment_does_not_lengthen_it(
    tmp_path, truncated_to
):
    """Batches of 32 KiB and more are written with pwrite, which raises no SIGBUS past the end of
    a shrunk file: it lengthens the file again, after a hole. Session 8 dropped the stat before
    such a write when the append reserves no blocks (one stat per append instead of two), so a
    segment another process truncated grew back to 107,137 bytes (a hole, then a batch nobody
    acknowledged) before the writer noticed. Now the writer stats before every pwrite: a typed
    error, the file left as the other process left it, and the writer poisoned."""
    path = str(tmp_path / "t-0")
    writer = Log(path, segment_bytes=64 << 20)
    writer.append_values([b"x" * 1000] * 40)
    writer.append_values([b"x" * 1000] * 33)  # 256 KiB reserved: the next batch reserves nothing
    (segment,) = [os.path.join(path, f) for f in os.listdir(path) if f.endswith(".log")]
    os.truncate(segment, truncated_to)
    with pytest.raises(LogPoisonedError, match="truncated by another process"):
        writer.append_values([b"y" * 1000] * 33)
    assert os.path.getsize(segment) == truncated_to, "the append lengthened the truncated segment again"
    with pytest.raises(LogPoisonedError):
        writer.append_values([b"later"] * 100)
    assert os.path.getsize(segment) == truncated_to
    writer.close()


def test_a_callback_raising_systemexit_in_the_acknowledging_thread_does_not_stop_acks_all(tmp_path, caplog):
    """Under acks='all' the callbacks run in the acknowledging thread, which caught only
    Exception from resolving a batch: a callback's SystemExit ended the thread with the other
    batches of its round unresolved and their records still counted, so every later flush()
    timed out (without a timeout: waited forever) and close() raised. Now the thread logs it and
    goes on."""
    Admin(tmp_path).create_topic("t")
    raised = []

    def exits_once(metadata):
        if not raised and threading.current_thread().name == "kafkalite-producer-acks":
            raised.append(metadata.offset)
            raise SystemExit("from a callback")

    p = Producer(tmp_path, acks="all", batch_size=SMALL_BATCH, linger_ms=0)
    futures = [p.send("t", b"v%d" % i + PAD, key=b"k").add_callback(exits_once) for i in range(50)]
    p.flush(timeout=10)
    assert raised, "no callback ran in the acknowledging thread"
    assert all(f.is_done and f.succeeded() for f in futures)
    later = [p.send("t", b"later%d" % i, key=b"k") for i in range(5)]
    p.flush(timeout=10)
    assert all(f.succeeded() for f in later)
    p.close(timeout=10)
    assert "SystemExit: from a callback" in caplog.text


@pytest.mark.parametrize(
    "before, after, partitioner", [(4, 1, None), (2, 4, lambda key, all, available: all[-1])]
)
def test_a_send_while_a_re_created_topic_changes_size_gets_a_typed_answer(
    tmp_path, monkeypatch, before, after, partitioner
):
    """The thread that finds a topic re-created with another partition count re-reads it
    (``_Topic.configure``): it replaced the topic's partition list and partition numbers first
    and resized the accumulator after. A send() whose thread ran in between raised a bare
    IndexError: shrunk, the accumulator routed its record to a partition no longer in the list
    (3 of 200 sends here); grown, a custom partitioner picked a new partition the accumulator
    did not have yet (every send in the window). Now neither names a partition the other lacks."""
    Admin(tmp_path).create_topic("t", before)
    p = Producer(tmp_path, batch_size=SMALL_BATCH, linger_ms=60_000, partitioner=partitioner)
    keys = [b"k%d" % i for i in range(8)]
    for key in keys:
        p.send("t", PAD, key=key)
    p.flush()  # every partition's log is open
    for key in keys:
        p.send("t", PAD, key=key)
    Admin(tmp_path).delete_topic("t")
    Admin(tmp_path).create_topic("t", after)
    real = producer_topics.StickyPartitioner
    rereading = threading.Event()

    def preempted(*args):
        rereading.set()
        time.sleep(0.3)  # the GIL goes to the sending thread in the middle of configure()
        return real(*args)

    monkeypatch.setattr(producer_topics, "StickyPartitioner", preempted)

    def flush() -> None:
        with contextlib.suppress(KafkaliteError):  # the deleted partitions' records fail
            p.flush()

    flusher = threading.Thread(target=flush)
    flusher.start()  # its append to partition 0 finds the new folder and re-reads the topic
    assert rereading.wait(10)
    futures, untyped = [], []
    for i in range(200):
        try:
            futures.append(p.send("t", PAD, key=keys[i % 8]))
        except KafkaliteError:
            pass
        except Exception as e:
            untyped.append(e)
    flusher.join()
    assert untyped == []
    p.flush(timeout=10)
    assert all(f.is_done for f in futures)
    p.close(timeout=10)


def test_crc32c_agrees_with_an_independent_implementation_on_unaligned_buffers():
    """Batch CRCs now come from crc-fast (SIMD folding): checked against kafka-python's own
    CRC-32C on every length 0..600 at every alignment 0..16 (the SIMD loop's head, body and
    tail cases) and on large buffers up to 1 MiB at odd offsets. Held on first run."""
    from kafka.record import _crc32c

    data = random.Random(8).randbytes((1 << 20) + 64)
    view = memoryview(data)
    cases = [(size, offset) for size in range(600) for offset in range(17)]
    cases += [
        (size, offset)
        for size in (4095, 4096, 4097, 65535, 65537, (1 << 20) - 1, 1 << 20)
        for offset in (0, 3)
    ]
    wrong = [
        c
        for c in cases
        if _native.crc32c(bytes(view[c[1] : c[1] + c[0]])) != _crc32c.crc(view[c[1] : c[1] + c[0]])
    ]
    assert wrong == []


def test_a_flipped_byte_in_a_batch_is_detected_by_the_new_crc(tmp_path):
    """Every byte the CRC covers (attributes to the end of the records), flipped in a decoy copy
    of a segment, makes a reader raise CorruptRecordError rather than return other records. Held
    on first run (with crc-fast)."""
    src = tmp_path / "src" / "t-0"
    with Log(str(src)) as log:
        log.append_values([b"value-%d" % i for i in range(20)])
    (segment,) = src.glob("*.log")
    data = segment.read_bytes()
    crc_from = 8 + 4 + 4 + 1 + 4  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
    for pos in range(crc_from, len(data)):
        decoy = tmp_path / f"decoy-{pos}" / "t-0"
        shutil.copytree(src, decoy)
        damaged = bytearray(data)
        damaged[pos] ^= 0x40
        (decoy / segment.name).write_bytes(bytes(damaged))
        with pytest.raises(CorruptRecordError), Log(str(decoy), readonly=True) as log:  # at open, or reading
            list(log.records())
        shutil.rmtree(decoy.parent)


@pytest.mark.parametrize("path", ["native", "python"])
def test_an_append_interrupted_by_ctrl_c_fails_its_batch_and_the_drain_goes_on(tmp_path, monkeypatch, path):
    """A KeyboardInterrupt can land in the Python part of an append (``_Sender.append``: the
    Python drain's, or the native drain's for a partition whose folder was replaced). That
    batch's futures fail typed (it may or may not be in the log: Kafka's answer to a request
    cut short), the drain appends the batches after it, and the interrupt is raised after."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    with Producer(data_dir, batch_size=SMALL_BATCH, linger_ms=60_000) as p:
        p.send("t", b"seed" + PAD, key=b"k")
        p.flush()  # the log is open
        monkeypatch.setattr(producer_module._Sender, "wake", lambda self, part, due=False: None)
        producer_module._in_callbacks.depth = 1  # as in a callback: send() only queues
        try:
            futures = [p.send("t", b"v%d" % i + PAD, key=b"k") for i in range(10)]
        finally:
            producer_module._in_callbacks.depth = 0
        if path == "native":  # the native drain hands the batches of a new folder to append_one
            Admin(data_dir).delete_topic("t")
            Admin(data_dir).create_topic("t")
        else:  # the drain that waited for the lock, of a partition whose log is not open
            monkeypatch.setattr(producer_sender, "drain_partition", lambda *args: False)
            part = p._sender.topics["t"].partitions[0]
            with part.drain_lock:
                p._sender.close_log(part)
        real_append = producer_module._Sender.append
        calls = []

        def interrupted_once(self, part, buffer):
            calls.append(1)
            if len(calls) == 1:
                raise KeyboardInterrupt
            return real_append(self, part, buffer)

        monkeypatch.setattr(producer_module._Sender, "append", interrupted_once)
        with pytest.raises(KeyboardInterrupt):
            p.flush()
        assert all(f.is_done for f in futures), "a future of the interrupted drain never resolved"
        assert isinstance(futures[0].exception, IllegalStateError)
        assert "interrupted" in str(futures[0].exception)
        written = [f for f in futures if f.succeeded()]
        assert len(written) >= 8 and p._sender.pending() == 0
    values = _values(data_dir)
    assert values[-len(written) :] == [b"v%d" % i for i in range(10)][-len(written) :]


def test_a_callback_added_to_a_written_record_that_raises_is_logged_not_raised(tmp_path, caplog):
    """A callback's failure is logged and the record's result stands (kafka-python's rule, which
    the drain follows). A callback added to a future already resolved runs at once in
    add_callback, which raised its exception instead: since send() appends the batches it fills,
    whether ``p.send(...).add_callback(cb)`` raised depended on whether that send filled a batch.
    Now it is logged the same way; a KeyboardInterrupt still propagates."""
    Admin(tmp_path).create_topic("t")

    def broken(*args):
        raise ValueError("a bug in the callback")

    def interrupting(*args):
        raise KeyboardInterrupt

    with Producer(tmp_path, batch_size=SMALL_BATCH, linger_ms=60_000) as p:
        written = p.send("t", PAD, key=b"k")
        p.flush()
        assert written.add_callback(broken) is written
        with pytest.raises(KeyboardInterrupt):
            written.add_callback(interrupting)
        failed = p.send("t", PAD, key=b"k")
        Admin(tmp_path).delete_topic("t")  # the append then fails typed
        with contextlib.suppress(KafkaliteError):
            p.flush()
        assert failed.failed()
        assert failed.add_errback(broken) is failed
    assert caplog.text.count("a bug in the callback") == 2


def test_append_values_refusing_none_says_what_to_do_instead(tmp_path):
    """append_values takes bytes only; for a None it said "must be bytes (or None), not NoneType",
    which contradicts itself. Now it names the call that appends a null value."""
    with Log(str(tmp_path / "t-0")) as log:
        with pytest.raises(
            InvalidTypeError, match=r"values\[1\] is None: .*append\(\[Record\(key, None\)\]\)"
        ):
            log.append_values([b"a", None])
        assert log.end_offset == 0  # nothing written


def test_a_small_append_after_a_truncation_inside_its_page_is_not_acknowledged(tmp_path):
    """Batches under 32 KiB are stored through the writer's map. Another process truncating the
    segment to a length inside the page the next batch goes to raises no SIGBUS (the page is
    still partly in the file), and the bytes past the new end are dropped: the append must see
    the file's length and refuse, not return offsets for a batch that is not in the log."""
    path = str(tmp_path / "t-0")
    writer = Log(path, segment_bytes=64 << 20)
    writer.append_values([b"x" * 100] * 10)
    (segment,) = [os.path.join(path, f) for f in os.listdir(path) if f.endswith(".log")]
    with open(segment, "rb") as f:
        end = len(f.read().rstrip(b"\0"))  # the batches' end: the rest is reserved (zeros)
    os.truncate(segment, end + 50)
    try:
        writer.append_values([b"y" * 200])
    except LogPoisonedError:
        return  # refused: nothing acknowledged
    with Log(path, readonly=True) as log:
        assert [r.value for r in log.records()][-1] == b"y" * 200, "acknowledged, and not in the log"


SHARED_SENDER = r"""
import os, sys
from kafkalite import Producer
data_dir, writer, linger_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = os.fdopen(1, "w", buffering=1)  # one line per acknowledged record, before the next append
def acknowledged(tag, metadata):
    out.write(f"{tag} {metadata.partition} {metadata.offset}\n")
p = Producer(data_dir, batch_size=1000, linger_ms=linger_ms)
for i in range(8000):
    tag = f"{writer}.{i}"
    p.send("t", tag.encode() + b"-" + b"x" * 40, key=b"k%d" % (i % 3)).add_callback(acknowledged, tag)
p.close()
"""


@pytest.mark.parametrize(
    "failpoint", ["index.append=kill@20", "segment.reserve=kill@3", "roll.after_seal=kill@2"]
)
def test_three_processes_sharing_partitions_one_killed_mid_native_drain_lose_no_acknowledged_record(
    tmp_path, failpoint
):
    """Three processes send to the same two partitions through the native drain (send() appends
    the batches it fills, small segments so rolls happen), each at another linger; one is killed
    (SIGKILL from a fail point) at a step of an append. After recovery every record a callback
    acknowledged, in any process, is at the offset it was given. Held (also for
    segment.create.log, roll.after_create, segment.seal.trim and producer.accumulate)."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic(
        "t", 2, config={"segment.bytes": "50000"}
    )  # ~30 rolls: each process gets some
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SHARED_SENDER, data_dir, str(writer), linger],
            env=child_env({**os.environ, "KAFKALITE_FAILPOINTS": failpoint} if writer == 0 else None),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for writer, linger in enumerate(["0", "2", "60000"])
    ]
    outputs = [proc.communicate(timeout=240) for proc in procs]
    assert [proc.returncode for proc in procs] == [-9, 0, 0], [err[-2000:] for _, err in outputs]
    acked = [line.split() for out, _ in outputs for line in out.splitlines()]
    assert len(acked) > 16000
    logs = {}
    for partition in (0, 1):
        with Log(os.path.join(data_dir, f"t-{partition}")) as log:  # a writer: recovery runs
            logs[partition] = {r.offset: r.value.split(b"-")[0].decode() for r in log.records()}
    lost = [(tag, p, o) for tag, p, o in acked if logs[int(p)].get(int(o)) != tag]
    assert lost == [], f"{len(lost)} acknowledged records are not where they were acknowledged"
