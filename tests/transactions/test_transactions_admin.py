"""Transactions in Admin and the command line (issue 22 item 5): ``Admin.list_transactions`` /
``describe_transactions`` report committed, aborted and open transactions with Kafka's state
names; ``kafkalite transactions abort`` (another process) aborts an open transaction so that a
read_committed reader never sees its records and its producer is fenced; bad ids are typed errors
and a non-zero exit with a message."""

from __future__ import annotations

import os
import subprocess

import pytest
from kafkalite import Admin, Log, Producer, TopicPartition
from kafkalite.errors import (
    ConcurrentTransactionsError,
    InvalidConfigError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)


@pytest.fixture
def data(tmp_path):
    path = str(tmp_path / "data")
    Admin(path).create_topic("out", 2)
    return path


def transaction(data: str, tid: str, end: str | None, n: int = 3) -> Producer:
    """A producer of `tid` that sent `n` records to out-0 then committed, aborted or left it open."""
    p = Producer(data, transactional_id=tid)
    p.init_transactions()
    p.begin_transaction()
    for i in range(n):
        p.send("out", b"%s-%d" % (tid.encode(), i), partition=0)
    p.flush()
    if end == "commit":
        p.commit_transaction()
    elif end == "abort":
        p.abort_transaction()
    return p


def committed_values(data: str) -> list[bytes]:
    with Log(os.path.join(data, "out-0"), readonly=True) as log:
        return sorted(r.value for r in log.committed_records())


def cli(spawn, data: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = spawn.module(
        "kafkalite",
        "transactions",
        *args,
        "--data-dir",
        data,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_list_and_describe_committed_open_and_aborted(data):
    producers = [
        transaction(data, "done", "commit"),
        transaction(data, "open", None),
        transaction(data, "gone", "abort"),
    ]
    admin = Admin(data)
    listed = {t.transactional_id: t for t in admin.list_transactions()}
    assert {i: t.state for i, t in listed.items()} == {
        "done": "CompleteCommit",
        "open": "Ongoing",
        "gone": "CompleteAbort",
    }
    assert [t.transactional_id for t in admin.list_transactions(states=["Ongoing"])] == ["open"]
    pid = listed["gone"].producer_id
    assert [t.transactional_id for t in admin.list_transactions(producer_ids=[pid])] == ["gone"]
    assert admin.list_transactions(duration_ms=3_600_000) == []  # all started just now

    d = admin.describe_transactions(["open", "done"])
    assert d["open"].state == "Ongoing"
    assert d["open"].producer_id == listed["open"].producer_id
    assert d["open"].producer_epoch == 0
    assert d["open"].topic_partitions == [TopicPartition("out", 0)]
    assert d["open"].transaction_timeout_ms == 60_000
    assert d["open"].transaction_start_time_ms is not None
    assert d["done"].state == "CompleteCommit" and d["done"].topic_partitions == []
    for p in producers:
        p.close()


def test_cli_list_and_describe_print_kafka_columns(data, spawn):
    transaction(data, "open", None).close()
    listed = cli(spawn, data, "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split("\n")[0].split() == ["TransactionalId", "ProducerId", "TransactionState"]
    assert listed.stdout.split("\n")[1].split()[::2] == ["open", "Ongoing"]
    described = cli(spawn, data, "describe", "--transactional-id", "open")
    assert described.returncode == 0, described.stderr
    row = dict(zip(*(line.split() for line in described.stdout.strip().split("\n")), strict=True))
    assert row["TransactionState"] == "Ongoing" and row["TopicPartitions"] == "out-0"


def test_cli_abort_hides_the_records_and_fences_the_producer(data, spawn):
    done = transaction(data, "done", "commit")
    open_ = transaction(data, "job", None)
    assert committed_values(data) == [b"done-0", b"done-1", b"done-2"]  # job's are past the LSO
    aborted = cli(spawn, data, "abort", "--transactional-id", "job")
    assert aborted.returncode == 0, aborted.stderr
    assert "Aborted" in aborted.stdout
    # The ABORT markers let the LSO pass the job's records; read_committed never shows them.
    with Log(os.path.join(data, "out-0"), readonly=True) as log:
        assert log.last_stable_offset == log.end_offset
    assert committed_values(data) == [b"done-0", b"done-1", b"done-2"]
    d = Admin(data).describe_transactions(["job"])["job"]
    assert d.producer_epoch > 0 and d.state != "Ongoing"
    with pytest.raises(ProducerFencedError):
        open_.send("out", b"late", partition=0).get(timeout=10)
        open_.commit_transaction()
    # A committed transaction is not the abort's to touch, and nothing else moved.
    again = cli(spawn, data, "abort", "--transactional-id", "done")
    assert again.returncode == 1 and "no open transaction" in again.stderr
    assert committed_values(data) == [b"done-0", b"done-1", b"done-2"]
    done.close()


def test_bad_ids_are_typed_errors_and_a_nonzero_exit(data, spawn):
    admin = Admin(data)
    with pytest.raises(TransactionalIdNotFoundError):
        admin.describe_transactions(["nope"])
    with pytest.raises(InvalidConfigError):
        admin.describe_transactions([""])
    with pytest.raises(InvalidConfigError):
        admin.describe_transactions("abc")  # a str, not a list of ids
    with pytest.raises(InvalidConfigError):
        admin.list_transactions(states=["Running"])
    with pytest.raises(TransactionalIdNotFoundError):
        admin.abort_transaction("nope")
    transaction(data, "idle", "commit").close()
    with pytest.raises(InvalidTxnStateError):
        admin.abort_transaction("idle")
    for args, said in [
        (("describe", "--transactional-id", "nope"), "'nope' is not known"),
        (("abort", "--transactional-id", "nope"), "'nope' is not known"),
        (("describe", "--transactional-id", ""), "non-empty"),
    ]:
        r = cli(spawn, data, *args)
        assert r.returncode == 1 and said in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_abort_does_not_fence_a_producer_that_started_after_the_describe(data, monkeypatch):
    """The race an abort must lose: the id's producer restarts (a new epoch, no transaction
    open) between the abort's describe and its fence. The abort is refused, the new producer
    keeps working."""
    from kafkalite.transactions import admin as transaction_admin

    old = transaction(data, "job", None)
    described = transaction_admin.describe_transaction
    started: list[Producer] = []

    def describe_then_restart(data_dir: str, tid: str):
        d = described(data_dir, tid)
        if not started:  # the abort's first look; the restart lands right after it
            started.append(Producer(data, transactional_id="job"))
            started[0].init_transactions()
        return d

    monkeypatch.setattr(transaction_admin, "describe_transaction", describe_then_restart)
    with pytest.raises(ConcurrentTransactionsError):
        Admin(data).abort_transaction("job")
    new = started[0]
    new.begin_transaction()
    new.send("out", b"new", partition=0)
    new.commit_transaction()  # not fenced by the abort
    assert b"new" in committed_values(data)
    new.close()
    old.close()
