"""KIP-447's other half: a read_committed consumer starts a partition only once no open
transaction holds offsets of it for its group (Kafka's OffsetFetch require_stable /
UNSTABLE_OFFSET_COMMIT). Otherwise a new owner of a partition starts from the offset committed
before a transaction that then commits, and its output duplicates that transaction's."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from helpers import read_process_write_data
from kafkalite import Consumer, Producer, TopicPartition

IN = TopicPartition("in", 0)


@pytest.fixture
def data(tmp_path):
    path = read_process_write_data(tmp_path)
    with Consumer(path, group_id="g", enable_auto_commit=False) as c:
        c.assign([IN])
        c.commit({IN: 3})
    return path


def first_offset(data: str, timeout_ms: int, isolation: str = "read_committed") -> int | None:
    """The first offset a new consumer of the group polls within ``timeout_ms``, or None."""
    with Consumer(data, group_id="g", enable_auto_commit=False, isolation_level=isolation) as c:
        c.assign([IN])
        records = c.poll(timeout_ms=timeout_ms).get(IN, [])
        return records[0].offset if records else None


@pytest.mark.parametrize("commit", [True, False])
def test_a_new_consumer_waits_for_the_transaction_holding_its_offsets(data, commit):
    p = Producer(data, transactional_id="owner")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"derived", partition=0)
    p.send_offsets_to_transaction({IN: 8}, "g")
    # Open: a read_committed consumer does not start from the offset before it (3)...
    assert first_offset(data, 300) is None
    # ...a read_uncommitted one does, as Kafka's (no require_stable).
    assert first_offset(data, 300, "read_uncommitted") == 3
    # position() waits for the transaction to end, as Kafka's does (here: ended by a thread).
    waiting = Consumer(data, group_id="g", enable_auto_commit=False, isolation_level="read_committed")
    waiting.assign([IN])
    ender = threading.Timer(0.5, p.commit_transaction if commit else p.abort_transaction)
    ender.start()
    started = time.monotonic()
    assert waiting.position(IN) == (8 if commit else 3)
    assert time.monotonic() - started >= 0.4, "position() returned before the transaction ended"
    ender.join()
    waiting.close()
    assert first_offset(data, 2000) == (8 if commit else 3)
    p.close()


ABANDON = """
import os, sys
from kafkalite import Producer, TopicPartition
p = Producer(sys.argv[1], transactional_id="dead", transaction_timeout_ms=500)
p.init_transactions()
p.begin_transaction()
p.send_offsets_to_transaction({TopicPartition("in", 0): 8}, "g")
print("open", flush=True)
sys.stdin.read()
"""


def test_a_transaction_abandoned_by_a_dead_producer_is_aborted_after_its_timeout(data, spawn):
    import subprocess

    child = spawn.code(ABANDON, data, stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "open"
    child.send_signal(signal.SIGKILL)
    child.wait()
    # No coordinator process and no other producer: the waiting consumer aborts it itself once
    # its timeout (0.5 s) passed, and starts from the offset committed before it.
    started = time.monotonic()
    with Consumer(data, group_id="g", enable_auto_commit=False, isolation_level="read_committed") as c:
        c.assign([IN])
        deadline = started + 30
        records: list = []
        while not records and time.monotonic() < deadline:
            records = c.poll(timeout_ms=200).get(IN, [])
    assert records and records[0].offset == 3
    assert time.monotonic() - started < 15, (
        "the expired transaction was aborted within its timeout and a sweep"
    )


def test_a_committed_transactions_offsets_count_while_another_transaction_of_the_group_is_open(data):
    """Both transactions write the group's offsets to the same ``__consumer_offsets`` partition;
    the open one (for another partition) must not hide the one that committed after it, as
    Kafka's coordinator applies offsets at their COMMIT marker."""
    other = Producer(data, transactional_id="other-member")
    other.init_transactions()
    other.begin_transaction()
    other.send_offsets_to_transaction({TopicPartition("out", 0): 1}, "g")
    p = Producer(data, transactional_id="owner")
    p.init_transactions()
    p.begin_transaction()
    p.send("out", b"derived", partition=0)
    p.send_offsets_to_transaction({IN: 8}, "g")
    p.commit_transaction()
    assert first_offset(data, 2000) == 8  # not 3, the offset before the committed transaction
    other.abort_transaction()
    assert first_offset(data, 2000) == 8
    other.close()
    p.close()
