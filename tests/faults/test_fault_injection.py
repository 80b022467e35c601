"""Issue 9's fault-injection suite (tests/faults/): producers (acks='all'), group members and
transactional consume-transform-produce jobs (issue 22) in several processes while the controller
SIGKILLs, SIGSTOPs, fills the disk (tmpfs, as root), lowers descriptor limits, sets fail points
(``txn.*`` at every step of a transaction) and replaces transactional jobs by a successor that must
fence them; then the invariants of tests/faults/checker.py and tests/faults/txn_checker.py.

Seed: KAFKALITE_FAULTS_SEED (default: random, printed). Length: KAFKALITE_FAULTS_SECONDS
(default 75 s of faults, about 90-120 s in all on a 2-core machine); the long run for the
figures is e.g. ``KAFKALITE_FAULTS_SECONDS=900 pytest -n 0 -m faults tests/faults/test_fault_injection.py``.
On failure the data directory and journals are kept, and their path is in the message."""

from __future__ import annotations

import os

import pytest

from faults import controller


@pytest.mark.faults
def test_acknowledged_records_ownership_transactions_and_processes_survive_faults(ci_log):
    seconds = float(os.environ.get("KAFKALITE_FAULTS_SECONDS", "75"))
    result = controller.run(seconds=seconds, out=ci_log)  # the seed and the summary belong in the CI log
    assert not result.violations, result.report()
