"""The fault suite's transactional checker (tests/faults/txn_checker.py) is not vacuous: given a
data directory and journals where a transaction's outcome and the log disagree, each of its
rules reports it (and a consistent run reports nothing). The suite itself runs in
tests/faults/test_fault_injection.py."""

from __future__ import annotations

import os

import pytest
from kafkalite import Admin, Consumer, Producer, TopicPartition

from faults import journal as J
from faults import txn_checker
from faults.txn_checker import OUTPUT, group_of, input_key

SLOTS = {"t0": "plain:0"}
GROUP = group_of("t0", "plain:0")
IN = TopicPartition("plain", 0)


class Run:
    """A data directory and the journal of one transactional child ``t0.0``."""

    def __init__(self, root: str) -> None:
        self.run_dir = root
        self.data = os.path.join(root, "data")
        os.makedirs(os.path.join(root, "journals"))
        admin = Admin(self.data)
        admin.create_topic("plain", 1)
        admin.create_topic(OUTPUT, 2)
        with Producer(self.data) as plain:
            for i in range(10):
                plain.send("plain", b"in-%d" % i, partition=0)
        self.journal = J.Journal(os.path.join(root, "journals", "t0.0.jsonl"))
        self.producer = Producer(self.data, transactional_id="t0")
        self.producer.init_transactions()
        pid, epoch = self.producer._transactions().native.producer
        self.journal.write("init", t0=J.now(), pid=pid, epoch=epoch)
        self.seq = self.number = 0

    def transaction(
        self, start: int, end: int, *, commit: bool = True, journaled: bool | None = None
    ) -> None:
        """Transform input offsets [start, end) in a transaction that commits (or aborts);
        the journal says ``journaled`` (default: the truth)."""
        said = commit if journaled is None else journaled
        self.number += 1
        first = self.seq
        self.journal.write("begin", txn=self.number, seq=first)
        p = self.producer
        p.begin_transaction()
        for o in range(start, end):
            p.send(OUTPUT, J.encode_value("t0.0", self.seq, 4), key=input_key(GROUP, "plain", 0, o))
            self.seq += 1
        p.send_offsets_to_transaction({IN: end}, GROUP)
        self.journal.write("end", txn=self.number, seqs=[first, self.seq], input=[start, end], commit=said)
        (p.commit_transaction if commit else p.abort_transaction)()
        self.journal.write("ended", txn=self.number, commit=said)

    def check(self) -> list[str]:
        self.producer.close()
        violations, _stats = txn_checker.check(self.run_dir, self.data, SLOTS)
        return violations


@pytest.fixture
def run(tmp_path):
    return Run(str(tmp_path))


def rules(violations: list[str]) -> set[str]:
    return {v.split(":")[0] for v in violations}


def test_a_consistent_run_has_no_violations(run):
    run.transaction(0, 4)
    run.transaction(4, 7, commit=False)
    run.transaction(4, 7)
    assert run.check() == []


def test_a_committed_transaction_missing_from_the_log_is_reported(run):
    run.transaction(0, 4)
    run.transaction(4, 7, commit=False, journaled=True)  # the child was told it committed
    assert rules(run.check()) == {"T1"}


def test_records_of_an_aborted_transaction_visible_are_reported(run):
    run.transaction(0, 4, journaled=False)  # told it aborted; it is visible
    assert "T2" in rules(run.check())


def test_offsets_committed_without_their_records_are_reported(run):
    run.transaction(0, 4)
    with Consumer(run.data, group_id=GROUP, enable_auto_commit=False) as c:
        c.assign([IN])
        c.commit({IN: 9})  # outside any transaction
    violations = run.check()
    assert rules(violations) == {"T4"} and "no output" in violations[0]


def test_an_unfenced_successor_is_reported(run):
    run.transaction(0, 4)
    pid, epoch = run.producer._transactions().native.producer
    later = J.Journal(os.path.join(run.run_dir, "journals", "t0.1.jsonl"))
    later.write("init", t0=J.now(), pid=pid, epoch=epoch)  # the same epoch: nothing was fenced
    run.transaction(4, 6)  # and the older incarnation commits after it
    violations = run.check()
    assert rules(violations) == {"T5"} and len(violations) == 2, violations
