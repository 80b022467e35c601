"""Hanging transactions (kafka-transactions.sh ``find-hanging`` and ``abort --topic --partition
--start-offset``): a transactional producer SIGKILLed mid-transaction, then its coordinator state
lost, leaves a transaction open in a partition that no coordinator will end, holding back the
last stable offset for good. ``kafkalite transactions find-hanging`` lists it from the
partition's producer state; while the coordinator still has it Ongoing it is not hanging (its
timeout will abort it). ``abort`` of the listed start offset writes the ABORT marker: the
records stay hidden from read_committed readers and the LSO moves on."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import textwrap
import time

import pytest
from kafkalite import Admin, Log, Producer
from kafkalite.errors import InvalidTxnStateError
from test_transactions_admin import cli

HOUR_MS = 3_600_000

# Opens a transaction of "zombie" with 3 records in t-0 stamped an hour ago (CreateTime: the
# producer state's last timestamp), then SIGKILLs itself with the transaction open.
ZOMBIE = textwrap.dedent(
    """
    import os, signal, sys, time
    from kafkalite import Producer

    p = Producer(sys.argv[1], transactional_id="zombie")
    p.init_transactions()
    p.begin_transaction()
    then = int(time.time() * 1000) - 3_600_000
    for i in range(3):
        p.send("t", b"z%d" % i, partition=0, timestamp_ms=then)
    p.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.fixture
def data(tmp_path):
    path = str(tmp_path / "data")
    Admin(path).create_topic("t", 2)
    return path


def _lso_held(data: str) -> bool:
    with Log(os.path.join(data, "t-0"), readonly=True) as log:
        return bool(log.last_stable_offset < log.end_offset)


def _zombie(spawn, data: str) -> None:
    child = spawn.code(ZOMBIE, data)
    assert child.wait(60) == -signal.SIGKILL
    assert _lso_held(data)
    with Producer(data) as p:  # a plain producer keeps writing after it
        p.send("t", b"later", partition=0).get(10)


def test_a_killed_producer_whose_coordinator_state_is_lost_is_found_and_aborted(data, spawn):
    _zombie(spawn, data)
    # The coordinator still has it Ongoing: its timeout will abort it, so it is not hanging.
    assert (
        cli(spawn, data, "find-hanging", "--topic", "t", "--max-transaction-timeout", "1").stdout.count("\n")
        == 1
    )
    for folder in glob.glob(os.path.join(data, "__transaction_state-*")):
        shutil.rmtree(folder)  # the coordinator's state is gone: nothing will end it now
    found = cli(spawn, data, "find-hanging", "--broker-id", "0", "--max-transaction-timeout", "1")
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert lines[0].split() == [
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
        "LastTimestamp",
        "Duration(min)",
    ]
    assert len(lines) == 2, found.stdout
    topic, partition, _pid, _epoch, _ce, start, _ts, minutes = lines[1].split()
    assert (topic, partition, start) == ("t", "0", "0") and int(minutes) >= 59
    # A longer limit than its age: not past any possible timeout yet.
    assert (
        cli(spawn, data, "find-hanging", "--topic", "t", "--max-transaction-timeout", "120").stdout.count(
            "\n"
        )
        == 1
    )
    aborted = cli(spawn, data, "abort", "--topic", "t", "--partition", "0", "--start-offset", start)
    assert aborted.returncode == 0, aborted.stderr
    assert not _lso_held(data)
    with Log(os.path.join(data, "t-0"), readonly=True) as log:
        assert [r.value for r in log.committed_records()] == [b"later"]
    assert cli(spawn, data, "find-hanging", "--topic", "t", "--partition", "0").stdout.count("\n") == 1
    again = cli(spawn, data, "abort", "--topic", "t", "--partition", "0", "--start-offset", start)
    assert again.returncode == 1 and "no open transaction starting at offset 0" in again.stderr


def test_admin_describe_producers_and_abort_hanging_transaction(data, spawn):
    _zombie(spawn, data)
    admin = Admin(data)
    (producers,) = admin.describe_producers([("t", 0)]).values()
    zombie = next(p for p in producers if p.current_transaction_start_offset is not None)
    assert zombie.current_transaction_start_offset == 0
    assert zombie.last_timestamp < time.time() * 1000 - HOUR_MS + 60_000
    with pytest.raises(InvalidTxnStateError):  # not at that producer's epoch: nothing written
        admin.abort_hanging_transaction("t", 0, zombie.producer_id, zombie.producer_epoch - 1, 0)
    assert _lso_held(data)
    admin.abort_hanging_transaction("t", 0, zombie.producer_id, zombie.producer_epoch, 0)
    assert not _lso_held(data)


def test_bad_find_hanging_arguments_exit_non_zero(data, spawn):
    assert cli(spawn, data, "find-hanging").returncode == 2  # --broker-id or --topic
    bad = cli(spawn, data, "find-hanging", "--broker-id", "0", "--partition", "1")
    assert bad.returncode == 2 and "--partition needs --topic" in bad.stderr
    unknown = cli(spawn, data, "find-hanging", "--topic", "nope")
    assert unknown.returncode != 0 and "nope" in unknown.stderr
