"""The invariants of a fault-injection run, from the journals and the recovered data directory.

Every rule is conservative: it reports only what cannot happen in a correct run, whatever the
scheduling, so a violation is a bug (or a hole in a rule, which its message lets you check).

1. Acknowledged records (producer journals, ``ack``): each is in the log exactly once, at its
   acknowledged offset, with its value. Exempt: on a ``delete`` topic with retention, offsets
   below the log start offset (retention removes whole segments); on a compacted topic, a
   record whose key has a record at a higher offset (in the log, in an ack, in a poll) or a
   failed send that may have landed after it (the cleaner keeps the latest per key).
2. No (topic, partition, offset) acknowledged twice; no (producer, seq) twice in the log (no
   child ever resends a seq, so a second copy is the engine's).
3. Per-producer order: within a partition, offsets increase with seq.
4. Consumed records (member journals, ``poll``) are the log's: the record a member got at an
   offset is the one the log holds there (same exemptions as 1).
5. Group ownership. A member's *certain ownership* of a partition is the interval from its
   ``assign`` callback (the partition is acquired before the callback is entered) to the start
   of its last commit that was accepted before its next ``revoke``/``lost`` of the partition
   (a commit is accepted only from the current owner, and a member id that loses a partition
   goes through a callback before it can own it again, so it owned the partition throughout).
   Kills, SIGSTOPs and evictions cannot stretch this interval: it ends at evidence taken inside
   it. Violations: two members' certain intervals of one partition overlap; or a member's poll
   (from its start to its return) lies inside another member's certain interval and returned
   records of that partition (a member that was evicted or revoked must drop the partition
   before it returns records).
6. Committed offsets of a partition, in the order the commits started, never decrease (no run
   resets offsets); the final committed offset is at least the last journaled one and at most
   the log end offset.
7. Processes: no child died of a signal the controller did not send (or a fail point raised);
   no child exited with a status other than 0 or EXIT_TYPED_ERROR; no child wrote a Python
   traceback (children catch KafkaliteError, so any traceback is an untyped error:
   PanicException, a bare OSError, a dead sender thread, ...) or a Rust panic to stderr; every
   child exited after SIGTERM at the end (no hang); no producer future stayed pending 20 s after
   flush()."""

from __future__ import annotations

import glob
import itertools
import os
import re
import signal
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from faults import journal as J


@dataclass
class PartitionState:
    log_start: int = 0
    log_end: int = 0
    records: dict[int, tuple[str | None, int | None, str | None]] = field(default_factory=dict)
    last_stable: int = 0
    reopen_error: str | None = None
    read_errors: list[str] = field(default_factory=list)  # a segment that cannot be read to its end


@dataclass
class Stats:
    acknowledged: int = 0
    consumed: int = 0
    kills: int = 0
    stops: int = 0
    enospc: int = 0
    emfile: int = 0
    eio: int = 0
    failed_sends: int = 0
    failpoint_children: int = 0


def read_partitions(
    data_dir: str, topics: dict[str, dict[str, Any]], isolation_level: str = "read_uncommitted"
) -> tuple[dict[tuple[str, int], PartitionState], list[str]]:
    """Open every partition with a fresh writer (recovery runs), then read every record, or
    (``read_committed``: the transactional checker's view) what a read_committed reader sees:
    no record of an aborted transaction, nothing from the last stable offset on."""
    import warnings

    from kafkalite import KafkaliteError, Log
    from kafkalite.datadir import log_options

    out: dict[tuple[str, int], PartitionState] = {}
    notes: list[str] = []
    for topic, meta in topics.items():
        for p in range(meta["partitions"]):
            path = os.path.join(data_dir, f"{topic}-{p}")
            st = out[(topic, p)] = PartitionState()
            if not os.path.isdir(path):
                continue
            options = log_options(meta.get("config", {}))
            options.pop("compact", None)
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    log = Log(path, segment_bytes=options["segment_bytes"])
                for w in caught:
                    notes.append(f"reopen {topic}-{p}: {w.category.__name__}: {w.message}")
            except KafkaliteError as e:
                st.reopen_error = f"{type(e).__name__}: {e}"
                continue
            except Exception as e:
                st.reopen_error = f"UNTYPED {type(e).__name__}: {e}"
                continue
            try:
                st.log_start, st.log_end = log.start_offset, log.end_offset
                st.last_stable = log.last_stable_offset
                committed = isolation_level == "read_committed"
                # Segment by segment, in small chunks, so one unreadable batch costs only the
                # rest of its segment (Log.records reads 8192 records a chunk and stops).
                for seg in log.segments:
                    position = max(seg.base_offset, st.log_start)
                    stop = min(seg.next_offset, st.last_stable) if committed else seg.next_offset
                    while position < stop:
                        try:
                            chunk, nxt = log._native.read_records(position, stop, 64, isolation_level)
                        except Exception as e:
                            st.read_errors.append(f"{type(e).__name__} reading from offset {position}: {e}")
                            break
                        for r in chunk:
                            ident = J.decode_value(r.value)
                            key = None if r.key is None else r.key.decode(errors="replace")
                            st.records[r.offset] = (*(ident or (None, None)), key)  # type: ignore[assignment]
                        if nxt <= position:
                            break
                        position = nxt
            finally:
                log.close()
    return out, notes


def committed_offsets(
    data_dir: str, group: str, tps: list[tuple[str, int]]
) -> dict[tuple[str, int], int | None]:
    from kafkalite import Consumer, TopicPartition

    with Consumer(data_dir, group_id=group, enable_auto_commit=False) as c:
        return {tp: c.committed(TopicPartition(*tp)) for tp in tps}


def check(
    run_dir: str,
    data_dir: str,
    topics: dict[str, dict[str, Any]],
    group: str,
    producers: str = "p*.jsonl",
    members: dict[str, str] | None = None,
    zombie_polls_allowed: frozenset[str] = frozenset(),
) -> tuple[list[str], Stats, list[str]]:
    """Rules 1-7 over the journals of ``run_dir``: the producers' are those matching
    ``producers``; ``members`` maps each group to the pattern of its members' journals
    (default: ``group``'s members are ``m*.jsonl``). Ownership and commits are per group.
    ``zombie_polls_allowed``: groups of Kafka clients, whose polls rule 5 does not hold to
    (a Kafka client returns records fetched before it learns it was evicted; only its commits
    must fail); kafkalite's Consumer checks its membership before it returns records."""
    violations: list[str] = []
    stats = Stats()
    journals = os.path.join(run_dir, "journals")
    parts, notes = read_partitions(data_dir, topics)
    for (t, p), st in sorted(parts.items()):
        if st.reopen_error:
            violations.append(f"reopen of {t}-{p} after the run failed: {st.reopen_error}")
        for error in st.read_errors[:3]:
            violations.append(
                f"reading {t}-{p} after recovery failed (the rest of that segment is skipped): {error}"
            )

    # -- producers -----------------------------------------------------------------------
    acks: list[
        tuple[str, int, int, str, int, str | None, int]
    ] = []  # topic, part, off, producer, seq, key, send_t
    failed_keys: dict[tuple[str, str], list[int]] = defaultdict(list)  # (topic, key) -> fail times
    for path in sorted(glob.glob(os.path.join(journals, producers))):
        name = os.path.basename(path)[: -len(".jsonl")]
        for ev in J.read(path):
            kind = ev["ev"]
            if kind == "ack":
                for topic, part, off, seq, key in ev["recs"]:
                    acks.append((topic, part, off, name, seq, key, ev["send_t"]))
            elif kind == "stuck":
                violations.append(f"{name}: {ev['what']}")
            elif kind == "fail":
                stats.failed_sends += len(ev["recs"])
                for _seq, key in ev["recs"]:
                    if key is not None:
                        failed_keys[(ev["topic"], key)].append(ev["t"])
            _count_fault(stats, ev)
    stats.acknowledged = len(acks)

    # -- members, per group ----------------------------------------------------------------
    members = {group: "m*.jsonl"} if members is None else members
    evidence = {g: read_members(journals, pattern, stats) for g, pattern in members.items()}
    polls = [poll for ev in evidence.values() for poll in ev.polls]

    # -- 2. offsets acknowledged twice -------------------------------------------------------
    by_offset: dict[tuple[str, int, int], tuple[str, int]] = {}
    twice: dict[tuple[str, int], list[str]] = defaultdict(list)
    for topic, part, off, prod, seq, _key, _ in acks:
        other = by_offset.setdefault((topic, part, off), (prod, seq))
        if other != (prod, seq):
            twice[(topic, part)].append(f"@{off} to {other[0]} seq {other[1]} and to {prod} seq {seq}")
    for (topic, part), rows in sorted(twice.items()):
        violations.append(f"{topic}-{part}: {len(rows)} offsets acknowledged twice: {'; '.join(rows[:4])}")

    # -- 2. duplicates in the log ----------------------------------------------------------
    for (t, p), st in sorted(parts.items()):
        seen: dict[tuple[str, int], int] = {}
        dups = []
        for off, (prod, seq, _key) in sorted(st.records.items()):
            if prod is None:
                continue
            first = seen.setdefault((prod, seq), off)  # type: ignore[arg-type]
            if first != off:
                dups.append(f"{prod} seq {seq} at {first} and {off}")
        if dups:
            violations.append(f"{t}-{p}: {len(dups)} records are in the log twice: {'; '.join(dups[:4])}")

    # -- 3. per-producer order ---------------------------------------------------------------
    per_producer: dict[tuple[str, str, int], list[tuple[int, int]]] = defaultdict(list)
    for topic, part, off, prod, seq, _key, _ in acks:
        per_producer[(prod, topic, part)].append((seq, off))
    for (prod, topic, part), rows in sorted(per_producer.items()):
        rows.sort()
        for (s1, o1), (s2, o2) in itertools.pairwise(rows):
            if o2 <= o1:
                violations.append(
                    f"order: {prod} seq {s1} acknowledged at {topic}-{part}@{o1} but seq {s2} at {o2}"
                )
                break

    # -- 1. every acknowledged record, 4. every consumed one ---------------------------------
    latest_key: dict[tuple[str, int, str], int] = {}

    def note_key(t: str, p: int, key: str | None, off: int) -> None:
        if key is not None and off > latest_key.get((t, p, key), -1):
            latest_key[(t, p, key)] = off

    for (t, p), st in parts.items():
        for off, (_prod, _seq, key) in st.records.items():
            note_key(t, p, key, off)
    for topic, part, off, _prod, _seq, key, _ in acks:
        note_key(topic, part, key, off)
    for _m, _t0, _t, topic, part, rows in polls:
        for off, _prod, _seq, key in rows:
            note_key(topic, part, key, off)

    def exempt(topic: str, part: int, off: int, key: str | None, since: int | None) -> bool:
        config = topics[topic].get("config", {})
        st = parts[(topic, part)]
        retained = "delete" in config.get("cleanup.policy", "delete") and (
            "retention.bytes" in config or "retention.ms" in config
        )
        if retained and off < st.log_start:
            return True
        if "compact" in config.get("cleanup.policy", "delete") and key is not None:
            if latest_key.get((topic, part, key), -1) > off:
                return True
            if any(since is None or ft >= since for ft in failed_keys.get((topic, key), ())):
                return True
        return False

    lost: dict[tuple[str, int], list[str]] = defaultdict(list)
    overwritten: dict[tuple[str, int], list[str]] = defaultdict(list)
    for topic, part, off, prod, seq, key, send_t in sorted(acks):
        st = parts[(topic, part)]
        if st.reopen_error:
            continue
        found = st.records.get(off)
        if found is not None and found[:2] == (prod, seq):
            continue
        if found is not None:
            overwritten[(topic, part)].append(
                f"@{off} acknowledged to {prod} seq {seq} holds {found[0]} seq {found[1]}"
            )
        elif not exempt(topic, part, off, key, send_t):
            lost[(topic, part)].append(f"{off} ({prod} seq {seq})")
    for (topic, part), rows in sorted(overwritten.items()):
        violations.append(
            f"{topic}-{part}: {len(rows)} acknowledged offsets hold another record: {'; '.join(rows[:4])}"
        )
    for (topic, part), offs in sorted(lost.items()):
        st = parts[(topic, part)]
        violations.append(
            f"{topic}-{part}: {len(offs)} acknowledged records lost (log {st.log_start}..{st.log_end}): {', '.join(offs[:8])}"
            + (" ..." if len(offs) > 8 else "")
        )
    wrong_consumed: dict[tuple[str, int], list[str]] = defaultdict(list)
    for member, _t0, _t, topic, part, rows in polls:
        st = parts[(topic, part)]
        if st.reopen_error:
            continue
        for off, prod, seq, key in rows:
            found = st.records.get(off)
            if found is not None and found[:2] == (prod, seq):
                continue
            if found is not None:
                wrong_consumed[(topic, part)].append(
                    f"{off}: {member} got {prod} seq {seq}, log holds {found[0]} seq {found[1]}"
                )
            elif not exempt(topic, part, off, key, None):
                wrong_consumed[(topic, part)].append(f"{off}: {member} got {prod} seq {seq}, not in the log")
    for (topic, part), rows in sorted(wrong_consumed.items()):
        violations.append(
            f"{topic}-{part}: {len(rows)} consumed records differ from the log: {'; '.join(rows[:5])}"
        )

    for g, ev in evidence.items():
        kafka_clients = g in zombie_polls_allowed
        violations.extend(
            check_group(g, ev, data_dir, parts, zombie_polls=not kafka_clients, kept_positions=kafka_clients)
        )

    # -- 7. processes ----------------------------------------------------------------------
    violations.extend(check_processes(run_dir, stats))
    return violations, stats, notes


@dataclass
class GroupEvidence:
    """What the members of one group journaled: their polls, accepted commits and the
    intervals of certain ownership (rule 5)."""

    polls: list[tuple[str, int, int, str, int, list]] = field(
        default_factory=list
    )  # member, t0, t, topic, part, rows
    commits: list[tuple[int, str, str, int, int]] = field(
        default_factory=list
    )  # t0, member, topic, part, offset
    certain: dict[tuple[str, int], list[tuple[int, int, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )


def read_members(journals: str, pattern: str, stats: Stats) -> GroupEvidence:
    """The evidence of the members whose journals match ``pattern`` (one group)."""
    ev = GroupEvidence()
    polls, commits, certain = ev.polls, ev.commits, ev.certain
    for path in sorted(glob.glob(os.path.join(journals, pattern))):
        name = os.path.basename(path)[: -len(".jsonl")]
        open_since: dict[tuple[str, int], int] = {}
        last_commit: dict[tuple[str, int], int] = {}

        def close(
            tp: tuple[str, int],
            name: str = name,
            open_since: dict = open_since,
            last_commit: dict = last_commit,
        ) -> None:
            start = open_since.pop(tp, None)
            end = last_commit.pop(tp, None)
            if start is not None and end is not None and end > start:
                certain[tp].append((start, end, name))

        for event in J.read(path):
            kind = event["ev"]
            if kind == "assign":
                for t, p in event["tps"]:
                    close((t, p))
                    open_since[(t, p)] = event["t"]
            elif kind in ("revoke", "lost"):
                for t, p in event["tps"]:
                    close((t, p))
            elif kind == "commit":
                for t, p, off in event["offsets"]:
                    commits.append((event["t0"], name, t, p, off))
                    if (t, p) in open_since:
                        last_commit[(t, p)] = event["t0"]
            elif kind == "poll":
                for key, rows in event["records"].items():
                    t, p = key.rsplit(":", 1)
                    polls.append((name, event["t0"], event["t"], t, int(p), rows))
                    stats.consumed += len(rows)
            _count_fault(stats, event)
        for tp in list(open_since):
            close(tp)
    return ev


def check_group(
    group: str,
    ev: GroupEvidence,
    data_dir: str,
    parts: dict[tuple[str, int], PartitionState],
    zombie_polls: bool = True,
    kept_positions: bool = False,
) -> list[str]:
    """Rules 5 and 6 for one group (rule 5's polls only with ``zombie_polls``).

    ``kept_positions``: the members are kafka-python 3 clients, which under the eager protocol
    keep their position of a partition that is assigned to them again (Java's client clears it;
    a Kafka broker accepts the commit either way, the member owns the partition). A member
    stopped through a rebalance that another member consumed in then commits its own earlier
    position again: a commit that goes back to the committing member's own last commit of the
    partition is that, not the coordinator's fault (server soak seed 450638360), and the
    records in between are delivered again (at least once)."""
    violations: list[str] = []
    certain, polls, commits = ev.certain, ev.polls, ev.commits
    # -- 5. ownership ----------------------------------------------------------------------
    for tp, intervals in sorted(certain.items()):
        intervals.sort()
        for i, (s1, e1, m1) in enumerate(intervals):
            for s2, e2, m2 in intervals[i + 1 :]:
                if s2 >= e1:
                    break
                if m1 != m2:
                    violations.append(
                        f"ownership: {tp[0]}-{tp[1]} owned by {m1} (assigned at {s1}, commit accepted at {e1}) and by "
                        f"{m2} (assigned at {s2}, commit accepted at {e2}) at once"
                    )
    zombie: dict[tuple[str, str, int], list[str]] = defaultdict(list)
    for member, t0, t, topic, part, rows in polls if zombie_polls else ():
        for s, e, owner in certain.get((topic, part), ()):
            if owner != member and s < t0 and t < e:
                zombie[(member, topic, part)].append(
                    f"poll {t0}..{t} returned {len(rows)} records from {rows[0][0]} while {owner} owned it ({s}..{e})"
                )
                break
    for (member, topic, part), rows in sorted(zombie.items()):
        violations.append(
            f"ownership: {member} consumed {topic}-{part} in {len(rows)} polls while another member owned it; first: {rows[0]}"
        )

    # -- 6. commits ------------------------------------------------------------------------
    last: dict[tuple[str, int], tuple[int, str, int]] = {}
    own_last: dict[tuple[str, str, int], int] = {}
    for t0, member, topic, part, off in sorted(commits):
        prev = last.get((topic, part))
        kept = kept_positions and (
            own_last.get((member, topic, part)) == off
            or (prev is not None and _resumed_own_position(polls, member, topic, part, prev[0], t0, off))
        )
        own_last[(member, topic, part)] = off
        if prev is not None and off < prev[2] and not kept:
            violations.append(
                f"commit of {topic}-{part} went backwards: {prev[1]} committed {prev[2]} at {prev[0]}, then {member} {off} at {t0}"
            )
        last[(topic, part)] = (t0, member, off)
    final = committed_offsets(data_dir, group, sorted(parts))
    for tp, (t0, member, off) in sorted(last.items()):
        got = final.get(tp)
        st = parts[tp]
        if got is None or got < off:
            violations.append(
                f"final committed offset of {tp[0]}-{tp[1]} is {got}, below {off} that {member} committed at {t0}"
            )
        elif got > st.log_end and not st.reopen_error:
            violations.append(
                f"final committed offset of {tp[0]}-{tp[1]} is {got}, beyond the log end {st.log_end}"
            )
    return violations


#: Offsets a poll may skip past its predecessor's end: control records (transaction markers) are
#: never returned, so a position can move past one or two of them between polls.
CONTROL_SKIP = 2


def _resumed_own_position(
    polls: list[tuple[str, int, int, str, int, list]],
    member: str,
    topic: str,
    part: int,
    since: int,
    until: int,
    off: int,
) -> bool:
    """Whether ``member``'s commit of ``off`` at ``until`` is its own kept position carried on:
    its polls of the partition after ``since`` (the other member's higher commit) start where its
    own polls before ``since`` ended and chain up to ``off``. That is kafka-python 3 keeping a
    position whose last commit failed (the server died under it: server soak seed 576503542),
    so the position is ahead of the member's last accepted commit; a member resuming anywhere
    else (a stale committed offset, a skip) is not forgiven."""
    # A poll counts as after ``since`` when it returned after it: one that started before the
    # other member's commit but returned once the partition was assigned again is the member
    # carrying on (server soak seed 339130509: the member's poll started 54 ms before the other's
    # commit and returned its kept position's records 66 ms later).
    mine = sorted(
        (t0, t, rows[0][0], rows[-1][0] + 1)
        for m, t0, t, tp_topic, tp_part, rows in polls
        if m == member and tp_topic == topic and tp_part == part and rows and t0 < until
    )
    before = [end for _, t, _, end in mine if t < since]
    if not before:
        return False
    position = before[-1]
    for _, _, first, end in (poll for poll in mine if poll[1] >= since):
        if not position <= first <= position + CONTROL_SKIP:
            return False
        position = end
    return position <= off <= position + CONTROL_SKIP and position != before[-1]


def _count_fault(stats: Stats, ev: dict[str, Any]) -> None:
    fault = ev.get("fault")
    if fault == "ENOSPC":
        stats.enospc += 1
    elif fault == "EMFILE":
        stats.emfile += 1
    elif fault == "EIO":
        stats.eio += 1


_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):$", re.MULTILINE)


def check_processes(run_dir: str, stats: Stats) -> list[str]:
    out = []
    tracebacks: dict[str, list[str]] = defaultdict(list)  # the error line -> children
    for ev in J.read(os.path.join(run_dir, "journals", "controller.jsonl")):
        kind = ev["ev"]
        if kind == "kill":
            stats.kills += 1
        elif kind == "stop":
            stats.stops += 1
        elif kind == "start" and ev.get("failpoints"):
            stats.failpoint_children += 1
        elif kind == "hang":
            out.append(
                f"{ev['name']} did not exit within {ev['seconds']} s of SIGTERM at the end (a hang); stack in {ev['stderr']}"
            )
        elif kind == "exit":
            name, rc, sent = ev["name"], ev["rc"], set(ev["signals_sent"])
            try:
                with open(ev["stderr"], errors="replace") as f:
                    text = f.read()
            except FileNotFoundError:
                text = ""
            traceback = _TRACEBACK.search(text)
            if ev.get("failpoint_kill"):  # the fail point's own kill: SIGKILL, or abort() if so built
                sent.add(signal.SIGKILL)
                if "panicked at" not in text:
                    sent.add(signal.SIGABRT)
            if rc < 0 and -rc not in sent:
                out.append(
                    f"{name} died of {signal.Signals(-rc).name}, which nobody sent it (stderr: {ev['stderr']})"
                )
            elif rc > 0 and rc != J.EXIT_TYPED_ERROR and traceback is None:  # with one: reported below
                out.append(f"{name} exited with status {rc} (stderr: {ev['stderr']})")
            if "panicked at" in text and traceback is None:
                out.append(f"{name}: a Rust panic (stderr: {ev['stderr']})")
            for m in _TRACEBACK.finditer(text):
                tail = text[m.start() :].splitlines()
                last = next((line for line in tail[1:] if line and not line.startswith((" ", "\t"))), "?")
                tracebacks[re.sub(r"/\S+", "<path>", last.strip())[:200]].append(ev["stderr"])
                break
    for line, where in sorted(tracebacks.items()):
        out.append(
            f"{len(where)} children printed a traceback of an untyped error: {line} (first: {where[0]})"
        )
    return out


def main() -> None:
    """Check a kept run again: ``python -m faults.checker RUN_DIR`` (tests and tests/support on PYTHONPATH)."""
    import json
    import sys

    run_dir = sys.argv[1]
    with open(os.path.join(run_dir, "run.json")) as f:
        run = json.load(f)
    data = os.path.join(run_dir, "data-copy")
    if not os.path.isdir(data):
        data = os.path.join(run_dir, "data")
    violations, stats, notes = check(run_dir, data, run["topics"], "faults")
    if run.get("txn_inputs"):
        from faults import txn_checker

        txn_violations, txn_stats = txn_checker.check(run_dir, data, run["txn_inputs"])
        violations += txn_violations
        print(txn_stats.summary())
    for line in notes + violations:
        print(line)
    print(stats)


if __name__ == "__main__":
    main()
