"""Issue 21's server soak-and-fault suite (tests/faults/server_*.py), beside issue 9's fault suite:
``kafkalite serve`` with network producers (confluent-kafka, idempotent, acks=all) and group
members (kafka-python) and transactional consume-transform-produce jobs (confluent-kafka,
``faults.server_txn_child``) beside embedded producers and members on the same data directory, while
the controller SIGSTOPs and kills embedded lock holders, kills -9 and restarts the server, and
sends hostile frames, fetch amplification, metadata floods, thousands of idle connections and
commits from outside the groups; a probe measures every answer. The invariants, each by name,
are ``faults.server_checker``'s: acknowledged_records, ownership, committed_offsets,
non_owner_commit, deadline, probe_connection, rss, processes, and ``transactions``
(``faults.txn_checker``'s T1-T5 over the network transactional children, read back read_committed).

Seed: KAFKALITE_FAULTS_SEED (default: random, printed). Length: KAFKALITE_FAULTS_SECONDS
(default 60 s of faults, 71-79 s in all at load 15-22 on 2 cores, with about 75-110 paced
network transactions); the long run is e.g.
``KAFKALITE_FAULTS_SECONDS=900 pytest -n 0 -m faults tests/faults/test_server_fault_injection.py``.
Attacks: KAFKALITE_SERVER_FAULTS_ATTACKS (comma-separated, default all of
``server_controller.ATTACKS``). On failure the journals and logs are kept; the path is printed.

KNOWN_VIOLATIONS: invariants that the server of this commit is known to break, pending the
issue 21 fixes (lock waits off the async workers with deadlines, bounded fetch responses and a
response budget, commits from non-members refused). A run reports their violations in full, and
the test fails on any other invariant's. The lead empties this set once the fixes are merged
(then every invariant fails the test); KAFKALITE_SERVER_FAULTS_STRICT=1 ignores it now. The
bounds the suite holds the server to are ``server_checker.BOUNDS`` (ApiVersions and Metadata
2 s; Produce, Fetch and OffsetFetch 10 s: the probe's Produce timeout_ms 5000 plus 5 s of slack)
and ``server_checker.RSS_BOUND`` (256 MiB, the interpreter of ``python -m kafkalite serve``
included).

The second test runs the controller's authenticated configuration (SASL/SCRAM, the authorizer,
~2,000 users, the probe logged in, embedded clients only) under issue 35's attacks, with the
invariants ``refusals`` and the authentication deadline's part of ``deadline`` besides; the same
seconds and seed variables apply. The tests after them check the checker's server invariants on
made-up journals (no server)."""

from __future__ import annotations

import os
import shutil

import pytest

from faults import server_controller

#: Seen on main (b57d838) before the issue 21 fixes: ApiVersions, Metadata and every other probe
#: unanswered for 5-13 s while a stopped process holds an append lock (seed 8 with
#: KAFKALITE_SERVER_FAULTS_ATTACKS=lock), a metadata flood creates its topics or a fetch is
#: amplified, and hostile frames left open meanwhile (deadline: seeds 2121, 90210); the server's
#: RSS at 2.3 GiB under fetch amplification (rss: seeds 21, 2121, 90210); a generation -1
#: OffsetCommit to the embedded group accepted while its members owned the partitions
#: (non_owner_commit: seeds 7, 12, 424242).
KNOWN_VIOLATIONS: frozenset[str] = frozenset()


@pytest.mark.faults
def test_server_survives_soak_and_faults_with_every_invariant(ci_log):
    seconds = float(os.environ.get("KAFKALITE_FAULTS_SECONDS", "60"))
    chosen = os.environ.get("KAFKALITE_SERVER_FAULTS_ATTACKS")
    attacks = set(filter(None, chosen.split(","))) if chosen else None
    known = frozenset() if os.environ.get("KAFKALITE_SERVER_FAULTS_STRICT") == "1" else KNOWN_VIOLATIONS
    # the seed and the figures belong in the CI log
    result = server_controller.run(seconds=seconds, attacks=attacks, out=ci_log)
    tolerated = sorted(set(result.violations) & known)
    if tolerated:
        ci_log(f"server fault injection: known violations pending the issue 21 fixes: {', '.join(tolerated)}")
    unexpected = {k: v for k, v in result.violations.items() if k not in known}
    assert not unexpected, result.report()
    shutil.rmtree(result.run_dir, ignore_errors=True)  # kept for known violations only: nothing to look at


@pytest.mark.faults
def test_authenticated_server_survives_unauthenticated_and_hostile_clients(ci_log):
    """Issue 35's attacks on a SASL/SCRAM server with the authorizer on (server_controller's
    authenticated configuration): SCRAM client-first floods against ~2,000 users, stalled 512 KiB
    frames before authentication, silent sockets kept alive with ApiVersions, more sockets than
    max.connections.per.ip, an authenticated user's unread fetches, FindCoordinator v4 of groups it
    may not read, beside kill -9s of the server and the embedded clients; the probe logs in as
    admin. Every invariant holds, no known violations."""
    seconds = float(os.environ.get("KAFKALITE_FAULTS_SECONDS", "60"))
    result = server_controller.run(seconds=seconds, out=ci_log, authenticated=True)
    assert not result.violations, result.report()
    shutil.rmtree(result.run_dir, ignore_errors=True)


# -- the checker's server invariants on made-up journals (fast: no server, no children) ----------
S = 1_000_000_000  # ns


def _stats():
    from faults import checker, server_checker

    return server_checker.ServerStats(checker.Stats())


def probe(kind: str, t0: float, latency: float, outcome: str = "ok") -> dict:
    return {
        "ev": "probe",
        "kind": kind,
        "t0": int(t0 * S),
        "latency_s": latency,
        "outcome": outcome,
        "errors": [],
    }


def test_a_probe_answered_late_while_the_server_was_up_is_a_deadline_violation():
    from faults.server_checker import check_probes, down_windows

    controller = [{"ev": "server_kill", "t": 10 * S}, {"ev": "server_ready", "t": 14 * S}]
    windows = down_windows(controller, 100 * S)
    stats = _stats()
    got = check_probes(
        [
            probe("api_versions", 1, 0.01),
            probe("api_versions", 2, 5.0, "late"),  # up: a violation
            probe("metadata", 3, 2.5),  # answered, past its 2 s bound
            probe("produce", 15, 9.0),  # within its 10 s bound
            probe("api_versions", 9, 5.0, "late"),  # cut by the kill at 10: exempt
            probe("api_versions_fresh", 12, 0.0, "refused"),  # down: exempt
            probe("api_versions", 20, 0.0, "closed"),  # up, a well-behaved connection closed
            probe("api_versions_fresh", 31, 0.0, "refused"),  # during an idle-connection episode
        ],
        windows,
        [(30 * S, 40 * S)],
        stats,
    )
    assert [v.split(" probes")[0] for v in got["deadline"]] == ["1 api_versions", "1 metadata"]
    assert len(got["probe_connection"]) == 1 and "api_versions probe" in got["probe_connection"][0]
    assert stats.probes == 8 and stats.probes_exempt == 2


def test_an_intruders_commit_accepted_while_the_group_had_members_is_a_violation():
    from faults import checker
    from faults.server_checker import check_attacks

    evidence = {"g": checker.GroupEvidence(), "embedded": checker.GroupEvidence()}
    evidence["embedded"].certain[("t", 0)].append((1 * S, 9 * S, "m0.0"))

    def intruder(group: str, accepted: list, before: list | None, t0: float = 5) -> dict:
        return {
            "ev": "intruder_commit",
            "group": group,
            "generation": -1,
            "member": "",
            "t0": int(t0 * S),
            "t1": int(t0 * S) + 1000,
            "offsets": [["t", 0, 3]],
            "accepted": accepted,
            "members_before": before,
            "members_after": before,
        }

    episodes = [
        [
            intruder("g", [], ["a"]),  # refused: fine
            intruder("g", [["t", 0]], []),  # accepted by an empty group: fine (Kafka's simple consumer)
            intruder("g", [["t", 0]], ["a", "b"]),  # accepted with two members listed: a violation
            intruder("embedded", [["t", 0]], []),  # no member listed, but m0.0 owned t-0 throughout
            intruder("embedded", [["t", 0]], [], t0=20),  # after m0.0's ownership ended: fine
        ]
    ]
    violations, _ = check_attacks(episodes, [], evidence, _stats())
    assert len(violations["non_owner_commit"]) == 2
    assert "listed 2 and 2 members" in violations["non_owner_commit"][0]
    assert "while m0.0 owned it" in violations["non_owner_commit"][1]


def test_hostile_frames_left_open_and_rss_past_the_bound_are_violations():
    from faults.server_checker import RSS_BOUND, check_attacks, check_rss

    hostile = {
        "ev": "attack",
        "attack": "hostile",
        "t": 10 * S,
        "connections": 3,
        "outcomes": {},
        "results": [
            ["negative size", True, 5 * S, "still open"],  # must be closed: a violation
            ["size then silence", False, 5 * S, "still open"],  # may be waited on
            ["zero size", True, 5 * S, "closed"],
        ],
    }
    violations, _ = check_attacks([[hostile]], [], {}, _stats())
    assert violations["deadline"] and "'negative size': 1" in violations["deadline"][0]
    violations, _ = check_attacks([[hostile]], [(4 * S, 11 * S)], {}, _stats())  # the server was down
    assert not violations["deadline"]
    stats = _stats()
    samples = [
        {"ev": "rss", "name": "server.0", "t": i, "rss": (100 + 100 * i) << 20, "hwm": 0} for i in range(3)
    ]
    assert check_rss(samples, stats) == [
        f"server resident set over {RSS_BOUND >> 20} MiB in 1 samples; the largest 300 MiB "
        "(server.0, VmRSS 300 MiB, VmHWM 0 MiB) at 2"
    ]
    assert stats.peak_rss == 300 << 20


def test_the_fault_checkers_messages_are_sorted_into_invariants():
    from faults.server_checker import classify

    assert classify("ownership: plain-0 owned by m0.1 ... and by m1.0 ... at once") == "ownership"
    assert classify("commit of plain-0 went backwards: ...") == "committed_offsets"
    assert (
        classify("final committed offset of plain-0 is 3, below 5 that m0.0 committed at 9")
        == "committed_offsets"
    )
    assert classify("server.1 died of SIGSEGV, which nobody sent it (stderr: x)") == "processes"
    assert classify("2 children printed a traceback of an untyped error: X (first: y)") == "processes"
    assert classify("plain-1: 3 acknowledged records lost (log 0..9): 4, 5, 6") == "acknowledged_records"


def test_a_kafka_client_committing_its_own_kept_position_again_is_not_a_backwards_commit(tmp_path):
    """kafka-python 3 keeps its position of a partition assigned to it again under the eager
    protocol (server soak seed 450638360): a commit back to the member's own last commit is
    allowed for Kafka-client groups only; one back to any other offset stays a violation."""
    from faults import checker

    def backwards(kept_positions: bool, commits: list) -> list[str]:
        evidence = checker.GroupEvidence(commits=commits)
        parts = {("t", 0): checker.PartitionState(log_end=200)}
        found = checker.check_group("g", evidence, str(tmp_path), parts, kept_positions=kept_positions)
        return [v for v in found if "went backwards" in v]

    kept = [(1, "a", "t", 0, 100), (2, "b", "t", 0, 150), (3, "a", "t", 0, 100)]
    assert backwards(True, kept) == []
    assert len(backwards(False, kept)) == 1  # kafkalite's own Consumer refetches: a violation
    elsewhere = [(1, "a", "t", 0, 100), (2, "b", "t", 0, 150), (3, "a", "t", 0, 120)]
    assert len(backwards(True, elsewhere)) == 1


def test_a_kafka_client_carrying_on_from_a_position_whose_commit_failed_is_not_a_backwards_commit(tmp_path):
    """Server soak seed 576503542: member a committed 100, polled to 150, its commit of 150
    failed (the server was killed), b took the partition and committed 300, and a, assigned it
    again, carried on from its kept position 150 and committed 200. Forgiven for Kafka-client
    groups only when a's polls chain from its own position; resuming elsewhere stays a violation."""
    from faults import checker

    def rows(start: int, end: int) -> list:
        return [(o, None) for o in range(start, end)]

    def backwards(kept_positions: bool, a_resumed_at: int) -> list[str]:
        evidence = checker.GroupEvidence(
            polls=[
                ("a", 1, 1, "t", 0, rows(100, 150)),
                ("b", 3, 3, "t", 0, rows(150, 300)),
                ("a", 6, 6, "t", 0, rows(a_resumed_at, 200)),
            ],
            commits=[(0, "a", "t", 0, 100), (4, "b", "t", 0, 300), (7, "a", "t", 0, 200)],
        )
        parts = {("t", 0): checker.PartitionState(log_end=300)}
        found = checker.check_group("g", evidence, str(tmp_path), parts, kept_positions=kept_positions)
        return [v for v in found if "went backwards" in v]

    assert backwards(True, 150) == []
    assert len(backwards(False, 150)) == 1  # kafkalite's own Consumer refetches: a violation


def test_a_kafka_client_poll_begun_before_the_other_members_commit_carries_on_its_position(tmp_path):
    """Server soak seed 339130509: member a committed 100 (its polls ended there) and was stopped
    through two rebalances; b was assigned the partition, consumed and committed 300; a, assigned
    it again (kafka-python 3 keeps the position of a partition in its old and new assignment),
    returned from a poll that had started just before b's last commit with records from its kept
    position 100 and committed 150. The poll counts by when it returned."""
    from faults import checker

    def rows(start: int, end: int) -> list:
        return [(o, None) for o in range(start, end)]

    def backwards(kept_positions: bool, resumed_at: int) -> list[str]:
        evidence = checker.GroupEvidence(
            polls=[
                ("a", 1, 2, "t", 0, rows(50, 100)),
                ("b", 3, 4, "t", 0, rows(100, 300)),
                ("a", 5, 7, "t", 0, rows(resumed_at, resumed_at + 50)),
            ],
            commits=[(2, "a", "t", 0, 100), (6, "b", "t", 0, 300), (8, "a", "t", 0, resumed_at + 50)],
        )
        parts = {("t", 0): checker.PartitionState(log_end=300)}
        found = checker.check_group("g", evidence, str(tmp_path), parts, kept_positions=kept_positions)
        return [v for v in found if "went backwards" in v]

    assert backwards(True, 100) == []
    assert len(backwards(False, 100)) == 1
    assert len(backwards(True, 80)) == 1  # not where a's own polls ended
    assert len(backwards(True, 120)) == 1  # not where a's own polls ended
    assert len(backwards(True, 170)) == 1  # a skip past its position


def test_unauthenticated_sockets_past_the_deadline_and_unanswered_refusals_are_violations():
    from faults.server_checker import check_attacks

    def held(attack: str, oldest: float, t: float = 30) -> dict:
        return {"ev": "attack", "attack": attack, "t": int(t * S), "still_open": 3, "oldest_open_s": oldest}

    def denied(answers: dict, failures: list, t: float = 30) -> dict:
        return {
            "ev": "attack",
            "attack": "coordinator_denied",
            "t": int(t * S),
            "answers": answers,
            "failures": failures,
        }

    start = {"ev": "start", "t": 10 * S}
    episodes = [
        [start, held("silent", 16.2)],  # open 16 s after its connect: a violation
        [start, held("preauth_stall", 9.0)],  # within the 10 s deadline (+5 s): fine
        [start, denied({"30": 40}, [])],  # refused on its connection: fine
        [start, denied({"30": 40, "15": 1}, [])],  # answered something else: a violation
        [start, denied({"30": 40}, [[20 * S, "Closed"]])],  # closed while the server was up
        [start, denied({"30": 40}, [[60 * S, "Closed"]])],  # closed by the kill at 60 s: fine
    ]
    violations, _ = check_attacks(episodes, [(60 * S, 62 * S)], {}, _stats())
    assert len(violations["deadline"]) == 1 and "silent: 3 unauthenticated" in violations["deadline"][0]
    assert len(violations["refusals"]) == 2
    assert "'15': 1" in violations["refusals"][0] and "{'Closed': 1}" in violations["refusals"][1]


def test_connections_past_the_per_ip_cap_not_evicted_at_once_are_a_violation():
    """Without max.connections.per.ip the excess would stay open until the authentication
    deadline closed them, which the deadline check alone takes for a holding server."""
    from faults.server_checker import check_attacks

    def per_ip(closed_early: int, t: float = 30) -> dict:
        return {
            "ev": "attack",
            "attack": "per_ip",
            "t": int(t * S),
            "cap": 400,
            "opened": 500,
            "closed_early": closed_early,
            "still_open": 0,
            "oldest_open_s": 9.0,
        }

    start = {"ev": "start", "t": 10 * S}
    episodes = [
        [start, per_ip(100)],  # the oldest 100 evicted: fine
        [start, per_ip(450)],  # more, by other episodes' connections: fine
        [start, per_ip(0)],  # none: the cap is not enforced, a violation
        [{"ev": "start", "t": 59 * S}, per_ip(0, t=70)],  # the server was killed meanwhile: fine
    ]
    violations, _ = check_attacks(episodes, [(60 * S, 62 * S)], {}, _stats())
    assert len(violations["deadline"]) == 1
    assert "only 0 closed within 5 s" in violations["deadline"][0], violations["deadline"]
