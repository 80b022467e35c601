"""Issue 21's server soak-and-fault suite (tests/faults/server_*.py), beside issue 9's fault suite:
``kafkalite serve`` with network producers (confluent-kafka, idempotent, acks=all) and group
members (kafka-python) beside embedded producers and members on the same data directory, while
the controller SIGSTOPs and kills embedded lock holders, kills -9 and restarts the server, and
sends hostile frames, fetch amplification, metadata floods, thousands of idle connections and
commits from outside the groups; a probe measures every answer. The invariants, each by name,
are ``faults.server_checker``'s: acknowledged_records, ownership, committed_offsets,
non_owner_commit, deadline, probe_connection, rss, processes.

Seed: KAFKALITE_FAULTS_SEED (default: random, printed). Length: KAFKALITE_FAULTS_SECONDS
(default 60 s of faults, about 80-100 s in all on 2 cores); the long run is e.g.
``KAFKALITE_FAULTS_SECONDS=900 pytest -m faults -s tests/test_server_fault_injection.py``.
Attacks: KAFKALITE_SERVER_FAULTS_ATTACKS (comma-separated, default all of
``server_controller.ATTACKS``). On failure the journals and logs are kept; the path is printed.

KNOWN_VIOLATIONS: invariants that the server of this commit is known to break, pending the
issue 21 fixes (lock waits off the async workers with deadlines, bounded fetch responses and a
response budget, commits from non-members refused). A run reports their violations in full, and
the test fails on any other invariant's. The lead empties this set once the fixes are merged
(then every invariant fails the test); KAFKALITE_SERVER_FAULTS_STRICT=1 ignores it now."""

from __future__ import annotations

import os

import pytest
from faults import server_controller

#: Seen on main before the issue 21 fixes (seeds 21, 7, 1796425605): every probe, ApiVersions
#: included, unanswered for 5-13 s while a metadata flood creates its topics or a fetch is
#: amplified (deadline); the server's RSS at 2.3 GiB under fetch amplification (rss); a
#: generation -1 OffsetCommit to the embedded group accepted while a member owned the partitions
#: (non_owner_commit).
KNOWN_VIOLATIONS: frozenset[str] = frozenset({"deadline", "rss", "non_owner_commit"})


@pytest.mark.faults
def test_server_survives_soak_and_faults_with_every_invariant(capsys):
    seconds = float(os.environ.get("KAFKALITE_FAULTS_SECONDS", "60"))
    chosen = os.environ.get("KAFKALITE_SERVER_FAULTS_ATTACKS")
    attacks = set(filter(None, chosen.split(","))) if chosen else None
    known = frozenset() if os.environ.get("KAFKALITE_SERVER_FAULTS_STRICT") == "1" else KNOWN_VIOLATIONS
    with capsys.disabled():  # the seed and the figures belong in the CI log
        result = server_controller.run(
            seconds=seconds, attacks=attacks, out=lambda line: print(line, flush=True)
        )
        tolerated = sorted(set(result.violations) & known)
        if tolerated:
            print(
                f"server fault injection: known violations pending the issue 21 fixes: {', '.join(tolerated)}"
            )
    unexpected = {k: v for k, v in result.violations.items() if k not in known}
    assert not unexpected, result.report()
