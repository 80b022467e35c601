"""The invariants of the transactional children (``txn_child``, issue 22), from their journals
and the data directory after the run.

First the checker does what a restarted job does: ``init_transactions()`` with each slot's
transactional id, which completes a commit a kill left half-done and aborts an open
transaction (and must fence every incarnation before it: rule T5). Then, reading the output
topic as read_committed consumers do:

T1. No record of a committed transaction (``ended`` with commit) is missing.
T2. No record of an aborted transaction, or of one whose commit never began (killed, fenced,
    failed before ``end``), is visible; every visible record belongs to a transaction whose
    commit began.
T3. A transaction whose commit began but whose outcome the child never learned (killed or
    failed inside ``commit_transaction()``) is all or nothing.
T4. Input offsets are committed iff their transaction committed: per group and input
    partition, the visible output holds exactly one record for each input offset below the group's committed
    offset, and none at or beyond it (offsets committed without their records leave a hole;
    records committed without their offsets are read again and written twice).
T5. Fencing: each ``init_transactions()`` of a slot gets a higher epoch than every one before it
    (the checker's own included), and no incarnation's commit that began after a later
    incarnation's ``init_transactions()`` returned succeeded (a zombie must be fenced)."""

from __future__ import annotations

import glob
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from faults import checker
from faults import journal as J

# -- the layout the children (txn_child) and this checker share; here, as importing txn_child
#    would install its SIGTERM handler in the importer.
#: Where every transactional child writes (created by the controller).
OUTPUT = "txn-out"


#: The group of the transactional children that subscribe (``--input topic``).
SHARED_GROUP = "txn-eos"


def group_of(slot: str, source: str) -> str:
    """The group a slot's consumer is in: its own (an assigned ``topic:partition``), or the
    shared one (a subscribed ``topic``)."""
    return f"txn-{slot}" if ":" in source else SHARED_GROUP


def input_key(group: str, topic: str, partition: int, offset: int) -> bytes:
    """An output record's key: which group's input record it was derived from."""
    return b"%s:%s:%d:%d" % (group.encode(), topic.encode(), partition, offset)


def parse_input_key(key: str) -> tuple[str, str, int, int]:
    group, topic, partition, offset = key.rsplit(":", 3)
    return group, topic, int(partition), int(offset)


@dataclass
class Txn:
    name: str
    number: int
    first_seq: int
    seqs: tuple[int, int] | None = None  # known from ``end``
    commit: bool | None = None  # what ``end`` announced
    outcome: bool | None = None  # what ``ended`` confirmed
    end_t: int | None = None


@dataclass
class TxnStats:
    transactions: int = 0
    committed: int = 0
    aborted: int = 0
    unknown: int = 0
    fenced: int = 0
    refused: int = 0  # transactions whose offsets the group refused (KIP-447), then aborted
    visible: int = 0
    extra: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"transactions={self.transactions} committed={self.committed} aborted={self.aborted} "
            f"unknown_outcome={self.unknown} fenced_children={self.fenced} refused_offsets={self.refused} "
            f"visible_output={self.visible}"
        )


def read_journals(
    journals: str, stats: TxnStats
) -> tuple[dict[str, list[Txn]], dict[str, list[dict[str, Any]]]]:
    """Per child name its transactions; per slot its inits (with the child's name)."""
    txns: dict[str, list[Txn]] = {}
    inits: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(journals, "t*.jsonl"))):
        name = os.path.basename(path)[: -len(".jsonl")]
        slot = name.split(".")[0]
        mine: dict[int, Txn] = {}
        for ev in J.read(path):
            kind = ev["ev"]
            if kind == "init":
                inits[slot].append({**ev, "name": name})
            elif kind == "begin":
                mine[ev["txn"]] = Txn(name, ev["txn"], ev["seq"])
            elif kind == "end" and ev["txn"] in mine:
                t = mine[ev["txn"]]
                t.seqs, t.commit, t.end_t = tuple(ev["seqs"]), ev["commit"], ev["t"]  # type: ignore[assignment]
            elif kind == "ended" and ev["txn"] in mine:
                mine[ev["txn"]].outcome = ev["commit"]
                stats.refused += "refused" in ev
            elif kind == "fenced":
                stats.fenced += 1
        txns[name] = list(mine.values())
    return txns, inits


def recover(data_dir: str, slots: list[str]) -> dict[str, tuple[int, int]]:
    """What a restarted job does first: init_transactions() with each slot's id."""
    from kafkalite import Producer

    out = {}
    for slot in slots:
        with Producer(data_dir, transactional_id=slot) as p:
            p.init_transactions()
            out[slot] = p._transactions().native.producer
    return out


def visible_output(data_dir: str) -> tuple[list[tuple[str, int, str]], list[str]]:
    """(producer name, seq, key) of every record a read_committed reader sees in the output
    (``checker.read_partitions``, read_committed)."""
    from kafkalite import Admin

    partitions = len(Admin(data_dir).describe_topic(OUTPUT).partitions)
    states, _notes = checker.read_partitions(
        data_dir, {OUTPUT: {"partitions": partitions}}, isolation_level="read_committed"
    )
    out: list[tuple[str, int, str]] = []
    problems: list[str] = []
    for (topic, p), st in sorted(states.items()):
        where = f"{topic}-{p}"
        if st.reopen_error is not None:
            problems.append(f"reading {where} read_committed failed: {st.reopen_error}")
            continue
        problems += [f"reading {where} read_committed: {e}" for e in st.read_errors]
        if st.last_stable != st.log_end:
            problems.append(
                f"{where}: a transaction is still open after every id was initialized "
                f"(last stable offset {st.last_stable}, end {st.log_end})"
            )
        for offset, (name, seq, key) in sorted(st.records.items()):
            if name is None or seq is None or key is None:
                problems.append(f"{where}@{offset}: a record no child wrote")
                continue
            out.append((name, seq, key))
    return out, problems


def committed_inputs(data_dir: str, slots: dict[str, str]) -> dict[tuple[str, str, int], int | None]:
    """The committed offset of every (group, topic, partition) the slots read."""
    from kafkalite import Admin, Consumer, TopicPartition

    wanted: set[tuple[str, str, int]] = set()
    for slot, source in slots.items():
        topic, _, part = source.partition(":")
        parts = [int(part)] if part else range(len(Admin(data_dir).describe_topic(topic).partitions))
        wanted.update((group_of(slot, source), topic, p) for p in parts)
    out = {}
    for group, topic, p in sorted(wanted):
        with Consumer(data_dir, group_id=group, enable_auto_commit=False) as c:
            out[(group, topic, p)] = c.committed(TopicPartition(topic, p))
    return out


def check(run_dir: str, data_dir: str, slots: dict[str, str]) -> tuple[list[str], TxnStats]:
    """``slots``: each transactional slot's input (``topic:partition`` assigned, ``topic``
    subscribed in the shared group)."""
    violations: list[str] = []
    stats = TxnStats()
    txns, inits = read_journals(os.path.join(run_dir, "journals"), stats)
    try:
        final = recover(data_dir, sorted(slots))
    except Exception as e:  # typed or not, the restart of the job failed: the worst outcome
        return [f"init_transactions() after the run failed: {type(e).__name__}: {e}"], stats
    visible, problems = visible_output(data_dir)
    violations += problems
    stats.visible = len(visible)
    seen: dict[str, set[int]] = defaultdict(set)
    for name, seq, _key in visible:
        seen[name].add(seq)

    # -- T1-T3: each transaction's records, by what its child learned of it -------------------
    covered: dict[str, list[tuple[int, int]]] = defaultdict(list)  # name -> seq ranges that may show
    for name, mine in txns.items():
        for t in mine:
            stats.transactions += 1
            if t.seqs is None or t.commit is False:  # never reached its commit, or aborted
                stats.aborted += t.commit is False and t.outcome is False
                continue
            covered[name].append(t.seqs)
            lo, hi = t.seqs
            shown = sum(1 for s in range(lo, hi) if s in seen[name])
            if t.outcome:
                stats.committed += 1
                if shown != hi - lo:
                    violations.append(
                        f"T1: {name} transaction {t.number} committed, but {hi - lo - shown} of its {hi - lo} "
                        "records are not visible to read_committed"
                    )
            else:
                stats.unknown += 1
                if 0 < shown < hi - lo:
                    violations.append(
                        f"T3: {name} transaction {t.number} (killed or failed in commit) is half visible: "
                        f"{shown} of {hi - lo} records"
                    )
    stray: dict[str, list[int]] = defaultdict(list)
    for name, seq, _key in visible:
        if not any(lo <= seq < hi for lo, hi in covered.get(name, ())):
            stray[name].append(seq)
    for name, seqs in sorted(stray.items()):
        violations.append(
            f"T2: {len(seqs)} records of {name} visible to read_committed from transactions that were aborted "
            f"or never began their commit: seqs {sorted(seqs)[:8]}"
        )

    # -- T4: exactly once per input offset, up to the committed offset -------------------------
    per_input: Counter[tuple[str, str, int, int]] = Counter(parse_input_key(key) for _n, _s, key in visible)
    for (group, topic, part), committed in sorted(committed_inputs(data_dir, slots).items()):
        upto = committed or 0
        outputs = {o: n for (g, t, p, o), n in per_input.items() if (g, t, p) == (group, topic, part)}
        missing = [o for o in range(upto) if o not in outputs]
        twice = sorted(o for o, n in outputs.items() if n > 1)
        beyond = sorted(o for o in outputs if o >= upto)
        where = f"T4: {topic}-{part} (group {group} committed {committed})"
        if missing:
            violations.append(
                f"{where}: {len(missing)} input offsets below the committed offset have no output (offsets "
                f"committed without their records): {missing[:8]}"
            )
        if twice:
            violations.append(f"{where}: {len(twice)} input offsets have output twice: {twice[:8]}")
        if beyond:
            violations.append(
                f"{where}: {len(beyond)} input offsets at or beyond the committed offset have output (records "
                f"committed without their offsets): {beyond[:8]}"
            )

    # -- T5: fencing ---------------------------------------------------------------------------
    # Only orders the journals prove count: B's init began (t0) after A's returned (t); a child
    # stopped between its init's return and its journal line proves nothing.
    for slot in sorted(slots):
        mine = inits.get(slot, [])
        after = [
            *mine,
            {
                "t0": float("inf"),
                "t": float("inf"),
                "pid": final[slot][0],
                "epoch": final[slot][1],
                "name": "the checker",
            },
        ]
        for a in mine:
            for b in after:
                # A network child (server_txn_child) journals no producer id: its client
                # (librdkafka) does not expose one; its fencing is the zombie rule below.
                known = a["pid"] is not None and b["pid"] == a["pid"]
                if b["t0"] > a["t"] and known and b["epoch"] <= a["epoch"]:
                    violations.append(
                        f"T5: {b['name']}'s init_transactions() of {slot} got epoch {b['epoch']}, not above "
                        f"{a['name']}'s {a['epoch']} that returned before it began: not fenced"
                    )
            successors = [b for b in mine if b["name"] != a["name"] and b["t0"] > a["t"]]
            if not successors:
                continue
            first = min(successors, key=lambda b: b["t"])
            for t in txns.get(a["name"], ()):
                if t.outcome and t.end_t is not None and t.end_t > first["t"]:
                    violations.append(
                        f"T5: {a['name']} committed transaction {t.number} although {first['name']} had "
                        f"re-initialized {slot} before it began the commit (a zombie was not fenced)"
                    )
    return violations, stats
