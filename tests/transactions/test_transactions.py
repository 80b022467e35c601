"""Transactions of the embedded producer (issue 22): what read_committed readers see of
committed, aborted and open transactions; offsets sent to a transaction count iff it commits;
a second producer with the same transactional id fences the first, across processes; a process
killed at every step of a transaction (the engine's txn.* fail points) leaves nothing of an
aborted or unfinished transaction visible and every record of a committed one, once the next
producer with the id starts; timeouts abort; a stopped lock holder costs a bounded wait."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from kafkalite import Admin, Consumer, Log, Producer, TopicPartition, _native
from kafkalite.errors import (
    ConcurrentTransactionsError,
    IllegalStateError,
    InvalidConfigError,
    InvalidTxnStateError,
    KafkaliteError,
    ProducerFencedError,
)


def values(data: str, topic: str, committed: bool = True) -> list[bytes]:
    """Every value of the topic, as a read_committed (or read_uncommitted) reader sees it."""
    out: list[bytes] = []
    for p in range(len(Admin(data).describe_topic(topic).partitions)):
        with Log(os.path.join(data, f"{topic}-{p}"), readonly=True) as log:
            records = log.committed_records() if committed else log.records()
            out.extend(r.value for r in records)
    return sorted(out)


def committed_offset(data: str, group: str = "g") -> int | None:
    with Consumer(data, group_id=group, enable_auto_commit=False) as c:
        return c.committed(TopicPartition("in", 0))


@pytest.fixture
def data(tmp_path):
    path = str(tmp_path / "data")
    admin = Admin(path)
    admin.create_topic("out", 2)
    admin.create_topic("in", 1)
    return path


def test_committed_records_appear_at_the_commit_aborted_ones_never(data):
    p = Producer(data, transactional_id="t1")
    p.init_transactions()
    p.begin_transaction()
    for i in range(50):
        p.send("out", b"c%02d" % i, key=b"%d" % i)
    p.flush()
    # Open: read_committed readers stop at the last stable offset, read_uncommitted see all.
    assert values(data, "out") == []
    assert len(values(data, "out", committed=False)) == 50
    p.commit_transaction()
    assert values(data, "out") == sorted(b"c%02d" % i for i in range(50))
    p.begin_transaction()
    for i in range(30):
        p.send("out", b"a%02d" % i, key=b"%d" % i)
    p.abort_transaction()
    p.begin_transaction()
    p.send("out", b"late", key=b"0")
    p.commit_transaction()
    p.close()
    assert values(data, "out") == sorted([b"c%02d" % i for i in range(50)] + [b"late"])
    assert len(values(data, "out", committed=False)) == 81
    # The batches carry the transactional bit and the producer's id (Kafka's layout).
    with Log(os.path.join(data, "out-0"), readonly=True) as log:
        assert log.aborted_transactions(), "the abort is known to readers"
        assert log.last_stable_offset == log.end_offset


def test_calls_out_of_order_are_typed_errors(data):
    p = Producer(data, transactional_id="t2")
    with pytest.raises(InvalidTxnStateError):
        p.begin_transaction()
    with pytest.raises(InvalidTxnStateError):
        p.send("out", b"x")
    p.init_transactions()
    with pytest.raises(InvalidTxnStateError):
        p.send("out", b"x")
    with pytest.raises(InvalidTxnStateError):
        p.send_batch("out", [b"x"])
    with pytest.raises(InvalidTxnStateError):
        p.commit_transaction()
    p.begin_transaction()
    with pytest.raises(InvalidTxnStateError):
        p.begin_transaction()
    p.commit_transaction()  # an empty transaction ends locally
    p.close()
    plain = Producer(data)
    with pytest.raises(IllegalStateError):
        plain.init_transactions()
    plain.close()
    with pytest.raises(InvalidConfigError):
        Producer(data, transactional_id="t3", transaction_timeout_ms=0)
    assert issubclass(ProducerFencedError, KafkaliteError)


def test_offsets_sent_to_a_transaction_count_iff_it_commits(data):
    with Producer(data) as plain:
        for i in range(10):
            plain.send("in", b"%d" % i, partition=0)
    consumer = Consumer(data, group_id="g", enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.assign([TopicPartition("in", 0)])
    meta = consumer.group_metadata()
    assert meta.group_id == "g"
    p = Producer(data, transactional_id="t4")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"x", key=b"k")
    p.send_offsets_to_transaction({TopicPartition("in", 0): 5}, meta)
    assert committed_offset(data) is None, "not before the commit"
    p.abort_transaction()
    assert committed_offset(data) is None, "never after an abort"
    p.begin_transaction()
    p.send_offsets_to_transaction({TopicPartition("in", 0): 7}, "g")
    p.commit_transaction()
    assert committed_offset(data) == 7
    p.close()
    consumer.close()


FENCED_CHILD = """
import sys
from kafkalite import Producer
p = Producer(sys.argv[1], transactional_id="shared")
p.init_transactions()
p.begin_transaction()
p.send("out", b"zombie", key=b"z")
p.flush()
print("ready", flush=True)
sys.stdin.readline()
try:
    p.send("out", b"zombie-2", key=b"z")
    p.commit_transaction()
    print("committed", flush=True)
except Exception as e:
    print(type(e).__name__, flush=True)
"""


def test_a_second_producer_with_the_id_fences_the_first_across_processes(data, spawn):
    child = spawn.code(FENCED_CHILD, data, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    newer = Producer(data, transactional_id="shared")
    newer.init_transactions()  # aborts the child's open transaction, bumps the epoch
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "ProducerFencedError"
    child.wait()
    newer.begin_transaction()
    newer.send("out", b"newer", key=b"n")
    newer.commit_transaction()
    newer.close()
    assert values(data, "out") == [b"newer"]


# Where a kill leaves the transaction decided (its PrepareCommit is durable): from then on it
# commits; before, the next producer with the id aborts it.
STEPS = [
    ("txn.init.after_record", False),
    ("txn.add.before_record", False),
    ("txn.add.after_record", False),
    ("txn.offsets.before_append", False),
    ("txn.offsets.after_append", False),
    ("txn.prepare.before_record", False),
    ("txn.prepare.after_record", True),
    ("txn.marker.before", True),
    ("txn.marker.after", True),
    ("txn.marker.before=kill@3", True),
    ("txn.marker.after=kill@2", True),
    ("txn.complete.before_record", True),
    ("txn.complete.after_record", True),
]


@pytest.mark.parametrize("mode", ["commit", "abort"])
@pytest.mark.parametrize("step,decided", STEPS, ids=[s for s, _ in STEPS])
def test_a_kill_at_every_step_leaves_exactly_the_committed_transaction(data, spawn, step, decided, mode):
    with Producer(data) as plain:
        for i in range(20):
            plain.send("in", b"%02d" % i, partition=0)
    env = {**os.environ, "KAFKALITE_FAILPOINTS": step if "=" in step else f"{step}=kill"}
    child = spawn("txn_step.py", data, "etl", mode, env=env, stdout=subprocess.PIPE, text=True)
    out, _ = child.communicate()
    assert "finished" not in out and child.returncode == -signal.SIGKILL, (step, child.returncode, out)
    # The restarted producer: it completes (or aborts) what the killed one left, and fences it.
    p = Producer(data, transactional_id="etl")
    p.init_transactions()
    expected = [b"out-%02d" % i for i in range(20)] if decided and mode == "commit" else []
    assert values(data, "out") == expected
    assert committed_offset(data) == (20 if expected else None)
    for partition in range(2):
        with Log(os.path.join(data, f"out-{partition}"), readonly=True) as log:
            assert log.last_stable_offset == log.end_offset, "no transaction is left open"
    # The restart's own transaction works, and another run of the job adds what is missing.
    p.close()
    rerun = spawn("txn_step.py", data, "etl", "commit", stdout=subprocess.PIPE, text=True)
    assert "finished" in rerun.communicate()[0]
    assert values(data, "out") == [b"out-%02d" % i for i in range(20)]
    assert committed_offset(data) == 20


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(data):
    p = Producer(data, transactional_id="slow", transaction_timeout_ms=200)
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"too-late", key=b"k")
    p.flush()
    time.sleep(0.5)
    with pytest.raises(ProducerFencedError):
        p.commit_transaction()
    with pytest.raises(ProducerFencedError):  # fenced for good
        p.begin_transaction()
    p.close()
    assert values(data, "out") == []
    with (
        Log(os.path.join(data, "out-0"), readonly=True) as log0,
        Log(os.path.join(data, "out-1"), readonly=True) as log1,
    ):
        assert log0.last_stable_offset == log0.end_offset and log1.last_stable_offset == log1.end_offset


LOCK_HOLDER = """
import fcntl, os, sys
from kafkalite import _native
d = os.path.join(sys.argv[1], ".kafkalite-transactions")
os.makedirs(d, exist_ok=True)
f = open(os.path.join(d, "held.lock"), "a+")
fcntl.flock(f, fcntl.LOCK_EX)
print("locked", flush=True)
os.kill(os.getpid(), 19)  # SIGSTOP: a coordinator operation stopped mid-way
"""


def test_a_stopped_lock_holder_gives_concurrent_transactions_within_a_bound(data, spawn):
    holder = spawn.code(LOCK_HOLDER, data, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    p = Producer(data, transactional_id="held")
    started = time.monotonic()
    with pytest.raises(ConcurrentTransactionsError) as info:
        p.init_transactions()
    assert time.monotonic() - started < 15, "bounded, not a hang"
    assert info.value.retriable
    assert "held its coordinator lock" in str(info.value)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    p.init_transactions()  # the lock died with its holder
    p.close()
    assert _native.TRANSACTION_STATE_TOPIC in Admin(data).list_topics()


#: examples/consume_transform_produce.py, as spawn() names scripts (relative to tests/support/procs/).
EXAMPLE = os.path.join("..", "..", "..", "examples", "consume_transform_produce.py")


def test_the_consume_transform_produce_example_killed_and_restarted_writes_each_input_once(data, spawn):
    inputs = [b"record-%05d" % i for i in range(20000)]
    with Producer(data, linger_ms=5) as p:
        for i, v in enumerate(inputs):
            p.send("in", v, partition=0, key=b"%d" % i)
    progress = []
    for _ in range(3):  # killed as soon as it committed a transaction more: mid-run, between steps
        before = committed_offset(data, "ctp") or 0
        child = spawn(EXAMPLE, data, "--idle-seconds", "30")
        deadline = time.monotonic() + 60
        while (committed_offset(data, "ctp") or 0) <= before and time.monotonic() < deadline:
            time.sleep(0.005)
        child.send_signal(signal.SIGKILL)
        child.wait()
        progress.append(committed_offset(data, "ctp"))
    assert any(0 < (done or 0) < len(inputs) for done in progress), f"no kill landed mid-run: {progress}"
    final = spawn(EXAMPLE, data, "--idle-seconds", "1.5", stdout=subprocess.PIPE, text=True)
    assert "processed" in final.communicate()[0]
    assert values(data, "out") == sorted(v.upper() for v in inputs), "every input exactly once"
    assert committed_offset(data, "ctp") == len(inputs)


ABANDONED = """
import os, sys
from kafkalite import Producer
p = Producer(sys.argv[1], transactional_id="abandoned", transaction_timeout_ms=300)
p.init_transactions()
p.begin_transaction()
for i in range(10):
    p.send("out", b"never-%d" % i, key=b"%d" % i)
p.flush()
os.kill(os.getpid(), 9)
"""


def test_another_transactional_producer_aborts_an_abandoned_transaction_after_its_timeout(
    data, spawn, monkeypatch
):
    from kafkalite.transactions import manager as transactions

    child = spawn.code(ABANDONED, data)
    assert child.wait() == -signal.SIGKILL
    ends = []
    for partition in range(2):
        with Log(os.path.join(data, f"out-{partition}"), readonly=True) as log:
            ends.append((log.last_stable_offset, log.end_offset))
    assert any(lso < end for lso, end in ends), "the abandoned transaction holds the LSO back"
    monkeypatch.setattr(transactions, "ABORT_TIMED_OUT_INTERVAL_MS", 200)
    other = Producer(data, transactional_id="someone-else")
    other.init_transactions()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with (
            Log(os.path.join(data, "out-0"), readonly=True) as l0,
            Log(os.path.join(data, "out-1"), readonly=True) as l1,
        ):
            if l0.last_stable_offset == l0.end_offset and l1.last_stable_offset == l1.end_offset:
                break
        time.sleep(0.1)
    else:
        pytest.fail("the abandoned transaction was never aborted")
    other.close()
    assert values(data, "out") == []


def test_an_open_transaction_does_not_hide_other_groups_plain_commits(data):
    """Kafka's coordinator applies plain commits at once, whatever transaction is open in the
    same __consumer_offsets partition: two groups sharing a partition, one in an open
    transaction, the other committing plainly."""
    from kafkalite.groups.offsets import offsets_partition

    other = next(
        g
        for g in (f"g{i}" for i in range(1000))
        if g != "g" and offsets_partition(g) == offsets_partition("g")
    )
    p = Producer(data, transactional_id="t-open")
    p.init_transactions()
    p.begin_transaction()
    p.send_offsets_to_transaction({TopicPartition("in", 0): 3}, "g")
    with Consumer(data, group_id=other, enable_auto_commit=False) as c:
        c.assign([TopicPartition("in", 0)])
        c.commit({TopicPartition("in", 0): 9})
    assert committed_offset(data, other) == 9, "a plain commit is visible while the transaction is open"
    assert committed_offset(data, "g") is None
    p.commit_transaction()
    assert committed_offset(data, "g") == 3
    assert committed_offset(data, other) == 9
    p.close()
