"""The attackers of the server suite, one episode per process (``python -m faults.server_attacks
ATTACK --bootstrap ... --journal ... --seed N``), each journaling what it did and what the server
answered (``attack`` events), so the checker and the summary have the figures:

- ``hostile``        connections sending hostile frames (random bytes, negative and huge sizes,
                     truncated headers, unknown API keys, a size announced then silence)
- ``fetch``          fetch amplification: concurrent Fetch requests naming the big partition
                     COPIES times, max_bytes and partition_max_bytes 2^31-1, answers read and dropped
- ``metadata``       a metadata flood: one Metadata request naming 1,000 new topics with
                     auto-creation allowed
- ``idle``           thousands of idle connections (RLIMIT_NOFILE raised), held, then closed
- ``lock``           an embedded writer holding append locks (the hot partition's, the groups'
                     offsets partitions'), SIGSTOPped by the controller for HOLD seconds
- ``intruder``       a client outside the groups commits (generation -1, or a made-up member) the
                     log end offsets (so an accepted commit moves nothing back), between two
                     DescribeGroups: accepted while the group had live members is a violation
                     (checker)

The SIGSTOP of ``lock`` holders, of the embedded clients, and the server's kill -9 are the
controller's."""

from __future__ import annotations

import argparse
import os
import random
import resource
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import server_wire as W

from faults.journal import Journal, now

FETCH_COPIES = 8
FETCH_CONNECTIONS = 3
FETCH_DEADLINE_S = 60.0
FLOOD_TOPICS = 1000
IDLE_CONNECTIONS = 2000
ANSWER_DEADLINE_S = 5.0


def hostile_frames(rng: random.Random) -> list[tuple[str, bytes, bool]]:
    """(what, bytes, must_end): ``must_end`` frames are complete and undecodable, so the server
    must close the connection (or answer an error) at once; the others may be waited on."""
    junk = rng.randbytes(rng.randint(1, 64))
    header = struct.pack(">hhih", 18, 0, 1, -1)
    return [
        ("random bytes", struct.pack(">i", len(junk)) + junk, False),  # may decode as a request
        ("negative size", struct.pack(">i", -rng.randint(1, 2**31 - 1)), True),
        ("zero size", struct.pack(">i", 0), True),
        ("huge size", struct.pack(">i", rng.randint(200 << 20, 2**31 - 1)), True),
        ("size then silence", struct.pack(">i", 1000) + header, False),
        ("truncated header", struct.pack(">i", 3) + b"\x00\x12\x00", True),
        ("unknown api key", struct.pack(">i", 10) + struct.pack(">hhih", 32000, 0, 1, -1), True),
        ("bad version", struct.pack(">i", 10) + struct.pack(">hhih", 3, 999, 1, -1), True),
        ("client id past the frame", struct.pack(">i", 10) + struct.pack(">hhih", 18, 0, 1, 3000), True),
        ("bytes without a frame", rng.randbytes(rng.randint(1, 3)), False),
    ]


def hostile(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    """Connections each sending one hostile frame; each outcome within ANSWER_DEADLINE_S of
    the last send: ``answered``, ``closed`` or ``still open``."""
    socks: list[tuple[str, bool, int, socket.socket]] = []
    results: list[list] = []
    for _ in range(rng.randint(10, 30)):
        what, frame, must_end = rng.choice(hostile_frames(rng))
        t0 = now()
        try:
            s = W.connect(args.bootstrap, ANSWER_DEADLINE_S)
            s.sendall(frame)
            socks.append((what, must_end, t0, s))
        except OSError:
            results.append([what, must_end, t0, "connect failed"])
    deadline = time.monotonic() + ANSWER_DEADLINE_S
    for what, must_end, t0, s in socks:
        try:
            W.read_exactly(s, 1, deadline)
            outcome = "answered"
        except W.Closed:
            outcome = "closed"
        except W.Late:
            outcome = "still open"
        s.close()
        results.append([what, must_end, t0, outcome])
    journal.write(
        "attack",
        attack="hostile",
        connections=len(socks),
        outcomes=dict(Counter(outcome for *_, outcome in results)),
        results=results,
    )


def exchange(
    args: argparse.Namespace, client_id: str, talk: Callable[[W.Wire], dict[str, Any]]
) -> dict[str, Any]:
    """One connection's exchange, ``talk``, timed: its fields plus t0, latency_s and outcome
    (``ok``, ``late``: no answer by the deadline, ``closed``: closed, reset or refused)."""
    t0, started = now(), time.monotonic()
    out: dict[str, Any] = {"t0": t0}
    try:
        wire = W.Wire(args.bootstrap, ANSWER_DEADLINE_S, client_id=client_id)
        try:
            out.update(outcome="ok", **talk(wire))
        finally:
            wire.close()
    except W.Late:
        out["outcome"] = "late"
    except (W.Closed, OSError) as e:
        out.update(outcome="closed", error=str(e)[:200])
    out["latency_s"] = round(time.monotonic() - started, 3)
    return out


def fetch(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    topic, part = args.big.rsplit(":", 1)
    results: list[dict[str, Any]] = []

    def amplify(wire: W.Wire) -> dict[str, Any]:
        wire.send(W.fetch([(topic, int(part), 0)] * FETCH_COPIES, 100, W.INT31, W.INT31))
        return {"response_bytes": wire.skip(time.monotonic() + FETCH_DEADLINE_S)}

    threads = [
        threading.Thread(target=lambda: results.append(exchange(args, "amplifier", amplify)))
        for _ in range(FETCH_CONNECTIONS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal.write("attack", attack="fetch", copies=FETCH_COPIES, results=results)


def metadata(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    names = [f"flood-{args.seed}-{i}" for i in range(FLOOD_TOPICS)]

    def flood(wire: W.Wire) -> dict[str, Any]:
        response = wire.call(W.metadata(names, auto_create=True), FETCH_DEADLINE_S)
        return {"errors": dict(Counter(t.error_code for t in response.topics))}

    journal.write("attack", attack="metadata", topics=len(names), **exchange(args, "flooder", flood))


def idle(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = IDLE_CONNECTIONS + 64
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard)
    )
    socks, failures = [], Counter[str]()
    started = time.monotonic()
    for _ in range(IDLE_CONNECTIONS):
        try:
            socks.append(W.connect(args.bootstrap, ANSWER_DEADLINE_S))
        except OSError as e:
            failures[type(e).__name__] += 1
            if len(failures) and sum(failures.values()) > 50:
                break  # the server is down or refuses: no point hammering
    opened_in = time.monotonic() - started
    hold = rng.uniform(5, 15)
    journal.write(
        "attack",
        attack="idle",
        opened=len(socks),
        failures=dict(failures),
        opened_in_s=round(opened_in, 2),
        hold_s=round(hold, 1),
    )
    time.sleep(hold)
    closed_by_server = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed_by_server += 1
        except (BlockingIOError, OSError):
            pass
        s.close()
    journal.write("attack_end", attack="idle", closed_by_server=closed_by_server)


def intruder(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    partitions = []
    for spec in args.topics.split(","):
        topic, count = spec.split(":")
        partitions += [(topic, p) for p in range(int(count))]
    summary: dict[str, str] = {}
    for group in args.groups.split(","):
        summary[group] = "no answer"
        try:
            wire = W.Wire(args.bootstrap, ANSWER_DEADLINE_S, client_id="intruder")
            try:
                # The log end offsets (a Fetch's high watermarks): at or past every offset a
                # member commits, so an accepted intrusion moves no committed offset back and
                # breaks no invariant but its own (members skip records, which none checks).
                ends = wire.call(W.fetch([(t, p, 0) for t, p in partitions], 0, 1, 1), ANSWER_DEADLINE_S)
                offsets = [
                    (t.topic, p.partition_index, p.high_watermark)
                    for t in ends.responses
                    for p in t.partitions
                    if p.high_watermark >= 0
                ]
                generation, member = rng.choice([(-1, ""), (rng.randint(1, 50), f"intruder-{args.seed}")])
                before = live_members(wire, group)
                t0 = now()
                response = wire.call(W.offset_commit(group, generation, member, offsets), ANSWER_DEADLINE_S)
                t1 = now()
                after = live_members(wire, group)
                accepted = [
                    [t.name, p.partition_index]
                    for t in response.topics
                    for p in t.partitions
                    if p.error_code == 0
                ]
                journal.write(
                    "intruder_commit",
                    group=group,
                    generation=generation,
                    member=member,
                    t0=t0,
                    t1=t1,
                    offsets=offsets,
                    accepted=accepted,
                    members_before=before,
                    members_after=after,
                    errors=sorted(set(W.errors_of(response))),
                )
                summary[group] = (
                    f"generation {generation}: {len(accepted)} of {len(offsets)} accepted, "
                    f"members listed {None if before is None else len(before)}"
                )
            finally:
                wire.close()
        except (W.Late, W.Closed, OSError) as e:
            journal.write(
                "attack_failed", attack="intruder", group=group, error=f"{type(e).__name__}: {e}"[:200]
            )
    journal.write("attack", attack="intruder", groups=summary)


def live_members(wire: W.Wire, group: str) -> list[str] | None:
    """The members DescribeGroups lists (None: it answered an error)."""
    (described,) = wire.call(W.describe_groups([group]), ANSWER_DEADLINE_S).groups
    return None if described.error_code else [m.member_id for m in described.members]


def lock(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    """An embedded writer caught holding append locks: a shared writer of the hot partition
    and/or of the groups' __consumer_offsets partitions takes each one's append lock (flock of
    .kafkalite.lock, as an append does), journals ``holding``, and holds them HOLD seconds of
    wall time. The controller SIGSTOPs it on ``holding`` and SIGCONTs it after HOLD seconds, so
    the locks stay held by a stopped process all that time; then it releases them and exits."""
    import fcntl

    from kafkalite import Log
    from kafkalite.offsets import offsets_partition

    candidates = [args.hot] + [f"__consumer_offsets-{offsets_partition(g)}" for g in args.groups.split(",")]
    chosen = rng.sample(candidates, k=rng.randint(1, len(candidates)))
    held = []
    for name in chosen:
        path = os.path.join(args.data, name)
        log = Log(path, shared_writers=True)  # a live shared writer...
        f = open(os.path.join(path, ".kafkalite.lock"), "r+")
        fcntl.flock(f, fcntl.LOCK_EX)  # ...caught holding the append lock
        held.append((log, f))
    acquired = time.monotonic()
    journal.write("holding", partitions=chosen, hold_s=args.hold)
    journal.write("attack", attack="lock", partitions=chosen, hold_s=args.hold)
    while time.monotonic() - acquired < args.hold:
        time.sleep(0.05)
    for log, f in held:
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()
        log.close()


ATTACKS = {
    "hostile": hostile,
    "fetch": fetch,
    "metadata": metadata,
    "idle": idle,
    "intruder": intruder,
    "lock": lock,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("attack", choices=sorted(ATTACKS))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--big", default="big:0", help="topic:partition of the big partition (fetch)")
    parser.add_argument("--topics", default="", help="topic:partitions,... (intruder)")
    parser.add_argument("--groups", default="", help="comma-separated (intruder, lock)")
    parser.add_argument("--data", default="", help="the data directory (lock)")
    parser.add_argument("--hot", default="", help="the partition directory name the probe writes (lock)")
    parser.add_argument("--hold", type=float, default=10.0, help="seconds the locks are held (lock)")
    args = parser.parse_args()
    journal = Journal(args.journal)
    journal.write("start", attack=args.attack, pid=os.getpid())
    ATTACKS[args.attack](args, random.Random(args.seed), journal)


if __name__ == "__main__":
    main()
