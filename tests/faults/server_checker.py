"""The invariants of a server fault run (``server_controller``), each a named part, so a report
says which guarantee broke and the test can carry a list of known ones:

- ``acknowledged_records``  checker rules 1-4 over embedded and network producers (an
                            acknowledged record is in the log once, at its offset; no duplicate
                            (producer, seq), which for the idempotent network producers means
                            the server deduplicated their retries across kills and restarts)
- ``ownership``             checker rule 5, per group (the embedded group and the network one;
                            for the network group of kafka-python members, without its rule
                            on zombie polls: a Kafka client may return records fetched before
                            it learns of its eviction, e.g. after a server restart)
- ``committed_offsets``     checker rule 6, per group: never backwards, none lost
- ``non_owner_commit``      an intruder's OffsetCommit (generation -1 or a made-up member) that
                            the server accepted while the group had live members (listed by
                            DescribeGroups before and after it, or a member certainly owned the
                            partition throughout: a certain-ownership interval of rule 5)
- ``deadline``              every probe answered within its bound (BOUNDS: ApiVersions and
                            Metadata 2 s, Produce/Fetch/OffsetFetch their timeout + slack, an
                            error code being an answer), and every complete undecodable hostile
                            frame answered or its connection closed within 5 s, and every
                            connection of a SASL server's ``silent``, ``preauth_stall`` and
                            ``per_ip`` attacks closed by the authentication deadline (+5 s),
                            and a ``per_ip`` attack's connections past max.connections.per.ip
                            evicted within 5 s,
                            except while the server was down
- ``refusals``              a SASL server's FindCoordinator v4 of a group the user may not read
                            answered GROUP_AUTHORIZATION_FAILED, never a closed connection
- ``probe_connection``      a probe connection closed or refused while the server was up and
                            no idle-connection attack was on (no rule closes a well-behaved
                            client's connection)
- ``rss``                   the server's resident set (VmRSS sampled, VmHWM at every exit)
                            within RSS_BOUND
- ``processes``             checker rule 7 for the clients and the server (no unexpected
                            death, traceback, panic or hang at the end)"""

from __future__ import annotations

import glob
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from faults import checker, txn_checker
from faults import journal as J
from faults.server_attacks import (
    ANSWER_DEADLINE_S,
    AUTHENTICATION_DEADLINE_S,
    DEADLINE_SLACK_S,
    EVICTED_WITHIN_S,
    GROUP_AUTHORIZATION_FAILED,
)

UNAUTHENTICATED_HOLDS = ("silent", "preauth_stall", "per_ip")  # closed by the authentication deadline

#: Seconds within which each probe must be answered: ApiVersions and Metadata never wait on a
#: partition or a group; Produce (timeout_ms 5000), Fetch (max_wait_ms 500) and OffsetFetch may
#: wait for a lock held by a stopped process, up to their timeout, then answer a retriable error.
BOUNDS = {
    "api_versions": 2.0,
    "api_versions_fresh": 2.0,
    "metadata": 2.0,
    "produce": 10.0,
    "fetch": 10.0,
    "offset_fetch": 10.0,
}
RSS_BOUND = 256 << 20
INVARIANTS = (
    "acknowledged_records",
    "ownership",
    "committed_offsets",
    "non_owner_commit",
    "deadline",
    "probe_connection",
    "refusals",
    "rss",
    "processes",
)
_PROCESS_MESSAGES = (
    "did not exit within",
    " died of ",
    "exited with status",
    "a Rust panic",
    "printed a traceback",
)


@dataclass
class ServerStats:
    base: checker.Stats
    network_acknowledged: int = 0
    commits: int = 0
    server_kills: int = 0
    attacks: Counter[str] = field(default_factory=Counter)
    intruder_commits: int = 0
    intruder_accepted: int = 0
    probes: int = 0
    probes_exempt: int = 0
    max_latency: dict[str, float] = field(default_factory=dict)
    peak_rss: int = 0
    figures: list[str] = field(default_factory=list)  # per-attack figures for the note
    txn: txn_checker.TxnStats | None = None  # the network transactional children's


def classify(message: str) -> str:
    """The invariant a message of ``checker.check`` belongs to."""
    if message.startswith("ownership:"):
        return "ownership"
    if message.startswith(("commit of ", "final committed offset")):
        return "committed_offsets"
    if any(m in message for m in _PROCESS_MESSAGES):
        return "processes"
    return "acknowledged_records"


def down_windows(controller_journal: list[dict[str, Any]], end: int) -> list[tuple[int, int]]:
    """(from, to) monotonic ns while the server was not serving: from each kill to the next
    ready line."""
    out, down_since = [], None
    for ev in controller_journal:
        if ev["ev"] == "server_kill":
            down_since = ev["t"]
        elif ev["ev"] == "server_ready" and down_since is not None:
            out.append((down_since, ev["t"]))
            down_since = None
    if down_since is not None:
        out.append((down_since, end))
    return out


def overlaps(windows: list[tuple[int, int]], start: int, end: int) -> bool:
    return any(a <= end and start <= b for a, b in windows)


def check(
    run_dir: str,
    data_dir: str,
    topics: dict[str, dict[str, Any]],
    groups: dict[str, str],
    kafka_client_groups: frozenset[str] = frozenset(),
) -> tuple[dict[str, list[str]], ServerStats]:
    """Violations by invariant, and the run's figures. ``groups``: group -> the pattern of its
    members' journals; ``kafka_client_groups``: those of Kafka clients (checker.check's
    ``zombie_polls_allowed``)."""
    journals = os.path.join(run_dir, "journals")
    first_group = next(iter(groups))
    base_violations, base_stats, notes = checker.check(
        run_dir,
        data_dir,
        topics,
        first_group,
        producers="p[0-9n]*.jsonl",
        members=groups,
        zombie_polls_allowed=kafka_client_groups,
    )
    violations: dict[str, list[str]] = defaultdict(list)
    for v in base_violations:
        violations[classify(v)].append(v)
    stats = ServerStats(base_stats)
    stats.figures += notes[:5]
    controller = list(J.read(os.path.join(journals, "controller.jsonl")))
    end = max((ev["t"] for ev in controller), default=0)
    windows = down_windows(controller, end)

    # -- network producers, commits ----------------------------------------------------------
    for path in glob.glob(os.path.join(journals, "pn*.jsonl")):
        stats.network_acknowledged += sum(len(ev["recs"]) for ev in J.read(path) if ev["ev"] == "ack")
    evidence = {g: checker.read_members(journals, pattern, checker.Stats()) for g, pattern in groups.items()}
    stats.commits = sum(len(ev.commits) for ev in evidence.values())

    for ev in controller:
        stats.server_kills += ev["ev"] == "server_kill"
        if ev["ev"] == "server_gave_up":  # e.g. recovery after a kill -9 failing at every start
            violations["processes"].append(
                f"{ev['name']} did not start in {ev['attempts']} attempts (stderr: {os.path.join(run_dir, 'stderr', ev['name'] + '.err')})"
            )
    violations["rss"] += check_rss(controller, stats)
    episodes = [list(J.read(path)) for path in sorted(glob.glob(os.path.join(journals, "x-*.jsonl")))]
    attack_violations, idle_windows = check_attacks(episodes, windows, evidence, stats)
    for invariant, rows in attack_violations.items():
        violations[invariant] += rows
    probes = [ev for ev in J.read(os.path.join(journals, "probe.jsonl")) if ev["ev"] == "probe"]
    for invariant, rows in check_probes(probes, windows, idle_windows, stats).items():
        violations[invariant] += rows
    return {k: v for k, v in violations.items() if v}, stats


def check_rss(controller: list[dict[str, Any]], stats: ServerStats) -> list[str]:
    """``rss``: every sample of the server's VmRSS and VmHWM within RSS_BOUND."""
    over: list[tuple[int, dict[str, Any]]] = []
    for ev in controller:
        if ev["ev"] == "rss":
            worst = max(ev["rss"], ev.get("hwm", 0))
            if worst > RSS_BOUND:
                over.append((worst, ev))
            stats.peak_rss = max(stats.peak_rss, worst)
    if not over:
        return []
    worst, ev = max(over, key=lambda row: row[0])
    return [
        f"server resident set over {RSS_BOUND >> 20} MiB in {len(over)} samples; the largest {worst >> 20} MiB "
        f"({ev['name']}, VmRSS {ev['rss'] >> 20} MiB, VmHWM {ev.get('hwm', 0) >> 20} MiB) at {ev['t']}"
    ]


def check_attacks(
    episodes: list[list[dict[str, Any]]],
    windows: list[tuple[int, int]],
    evidence: dict[str, checker.GroupEvidence],
    stats: ServerStats,
) -> tuple[dict[str, list[str]], list[tuple[int, int]]]:
    """``non_owner_commit`` from the intruders, ``deadline`` for hostile frames left open; and
    the windows of the idle-connection episodes (when a connection cap may refuse a probe)."""
    violations: dict[str, list[str]] = defaultdict(list)
    idle_windows: list[tuple[int, int]] = []
    unended: Counter[str] = Counter()
    for events in episodes:
        started = next((ev["t"] for ev in events if ev["ev"] == "start"), None)
        for ev in events:
            if ev["ev"] == "attack":
                stats.attacks[ev["attack"]] += 1
                stats.figures.append(_attack_figure(ev))
                for what, must_end, t0, outcome in ev.get("results", []) if ev["attack"] == "hostile" else []:
                    if must_end and outcome == "still open" and not overlaps(windows, t0, ev["t"]):
                        unended[what] += 1
                down = started is not None and overlaps(windows, started, ev["t"])
                if ev["attack"] in UNAUTHENTICATED_HOLDS and not down:
                    if ev["oldest_open_s"] > AUTHENTICATION_DEADLINE_S + DEADLINE_SLACK_S:
                        violations["deadline"].append(
                            f"{ev['attack']}: {ev['still_open']} unauthenticated connections still open at the end, the "
                            f"oldest {ev['oldest_open_s']} s after its connect (deadline {AUTHENTICATION_DEADLINE_S:.0f} s)"
                        )
                excess = ev["opened"] - ev["cap"] if ev["attack"] == "per_ip" else 0
                if excess > 0 and not down and ev["closed_early"] < excess:
                    violations["deadline"].append(
                        f"per_ip: {ev['opened']} unauthenticated connections from one address with "
                        f"max.connections.per.ip {ev['cap']}, only {ev['closed_early']} closed within "
                        f"{EVICTED_WITHIN_S:.0f} s of their connect (want the oldest {excess} evicted at once)"
                    )
                if ev["attack"] == "coordinator_denied":
                    wrong = {k: v for k, v in ev["answers"].items() if int(k) != GROUP_AUTHORIZATION_FAILED}
                    # a connection lost within a second of the server's downtime is the kill's
                    lost = [
                        what
                        for t, what in ev["failures"]
                        if not overlaps(windows, t - int(1e9), t + int(1e9))
                    ]
                    if wrong or lost or (not ev["answers"] and not down):
                        violations["refusals"].append(
                            f"FindCoordinator v4 of groups mallory may not read: answers {ev['answers']}, "
                            f"connections lost while the server was up {dict(Counter(lost))} (want only "
                            f"{GROUP_AUTHORIZATION_FAILED}, on its connection)"
                        )
            elif ev["ev"] == "intruder_commit":
                stats.intruder_commits += 1
                stats.intruder_accepted += len(ev["accepted"])
                violations["non_owner_commit"] += _owned_while_accepted(ev, evidence.get(ev["group"]))
        if started is not None and any(ev.get("attack") == "idle" for ev in events):
            idle_windows.append((started, events[-1]["t"] + int(2e9)))
    if unended:
        violations["deadline"].append(
            f"hostile frames neither answered nor closed within {ANSWER_DEADLINE_S:.0f} s while the server was up: "
            f"{dict(unended)}"
        )
    return violations, idle_windows


def check_probes(
    probes: list[dict[str, Any]],
    windows: list[tuple[int, int]],
    idle_windows: list[tuple[int, int]],
    stats: ServerStats,
) -> dict[str, list[str]]:
    """``deadline`` and ``probe_connection`` from the probe's events; a probe sent while the
    server was down, or cut by its kill, is exempt."""
    violations: dict[str, list[str]] = defaultdict(list)
    late: dict[str, list[str]] = defaultdict(list)
    dropped: dict[str, list[str]] = defaultdict(list)
    for ev in probes:
        stats.probes += 1
        kind, t0 = ev["kind"], ev["t0"]
        if overlaps(windows, t0, t0 + int(ev["latency_s"] * 1e9)):
            stats.probes_exempt += 1
            continue
        if ev["outcome"] in ("ok", "late"):
            stats.max_latency[kind] = max(stats.max_latency.get(kind, 0.0), ev["latency_s"])
        if ev["outcome"] == "late":
            late[kind].append(f"none in {ev['latency_s']:.1f} s at {t0}")
        elif ev["latency_s"] > BOUNDS[kind]:
            late[kind].append(f"{ev['latency_s']:.1f} s at {t0}")
        elif ev["outcome"] in ("closed", "refused"):
            if kind == "api_versions_fresh" and overlaps(idle_windows, t0, t0):
                continue  # a connection cap is a rule
            dropped[kind].append(f"{ev['outcome']} at {t0}")
    for kind, rows in sorted(late.items()):
        violations["deadline"].append(
            f"{len(rows)} {kind} probes not answered within {BOUNDS[kind]:.0f} s while the server was up: {', '.join(rows[:5])}"
        )
    for kind, rows in sorted(dropped.items()):
        violations["probe_connection"].append(
            f"{len(rows)} {kind} probe connections dropped while the server was up: {', '.join(rows[:5])}"
        )
    return violations


def _owned_while_accepted(ev: dict[str, Any], evidence: checker.GroupEvidence | None) -> list[str]:
    """An intruder's accepted commit is a violation when DescribeGroups listed members both
    before and after it, or when a member certainly owned the partition throughout it."""
    if not ev["accepted"]:
        return []
    before, after = ev.get("members_before"), ev.get("members_after")
    if before and after:
        return [
            f"group {ev['group']}: the server accepted an OffsetCommit of {len(ev['accepted'])} partitions from outside the "
            f"group (generation {ev['generation']}, member {ev['member']!r}) at {ev['t0']} between two DescribeGroups that "
            f"listed {len(before)} and {len(after)} members"
        ]
    out = []
    for topic, part in ev["accepted"]:
        for s, e, owner in evidence.certain.get((topic, part), ()):
            if s < ev["t0"] and ev["t1"] < e:
                out.append(
                    f"group {ev['group']}: the server accepted an OffsetCommit of {topic}-{part} from outside the group "
                    f"(generation {ev['generation']}, member {ev['member']!r}) at {ev['t0']} while {owner} owned it ({s}..{e})"
                )
                break
    return out


def _attack_figure(ev: dict[str, Any]) -> str:
    hidden = ("ev", "t", "attack", "results") if ev["attack"] == "hostile" else ("ev", "t", "attack")
    fields = {k: v for k, v in ev.items() if k not in hidden}
    return f"{ev['attack']}: {fields}"[:300]
