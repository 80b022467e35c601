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

The attacks of a SASL/SCRAM server (issue 35; the controller's authenticated configuration, and
benches/bench_server_attacks.py, which runs these same episodes beside its measured client), each
a load kept up for ``--seconds``:

- ``scram_flood``    threads connecting, sending a SCRAM client-first (a real user of the ~2,000
                     in the users file, or an unknown one), reading the server-first, hanging up
- ``connect_flood``  the same connections asking ApiVersions instead (scram_flood's control for the
                     bench; no soak episode)
- ``preauth_stall``  connections each stalling a 512 KiB frame half sent, never authenticating
- ``silent``         connections never authenticating, half of them sending ApiVersions to keep
                     alive: each must be closed by the authentication deadline (checker)
- ``per_ip``         more connections from 127.0.0.1 than its max.connections.per.ip: the excess
                     must be evicted (the oldest unauthenticated closed) at once (checker)
- ``unread_fetch``   an authenticated user's connections sending Fetches of the big partition and
                     never reading the answers (holding the response budget)
- ``coordinator_denied``  an authenticated user asking FindCoordinator v4 for groups it may not
                     read: each must be answered GROUP_AUTHORIZATION_FAILED, not closed (checker)

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
AUTHENTICATION_DEADLINE_S = 10.0  # the server's default --authentication-timeout-ms
DEADLINE_SLACK_S = 5.0  # past the deadline before a silent connection still open is a violation
SILENT_HOLD_S = AUTHENTICATION_DEADLINE_S + DEADLINE_SLACK_S + 1
SCRAM_FLOOD_THREADS = 8
STALL_CONNECTIONS, STALL_FRAME = 300, 512 << 10
# With the stalls and the clients, under the controller's max.connections.per.ip: none evicted,
# each lives to be closed by the authentication deadline (the controller plans per_ip before).
SILENT_CONNECTIONS = 80
PER_IP_EXTRA = 100  # connections past --per-ip: the oldest as many must be evicted at once (checker)
EVICTED_WITHIN_S = AUTHENTICATION_DEADLINE_S / 2  # closed this soon: evicted, not timed out
UNREAD_FETCH_CONNECTIONS, UNREAD_FETCHES = 12, 4
GROUP_AUTHORIZATION_FAILED = 30


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


def raise_nofile(connections: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + 64
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard)
    )


def idle(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    raise_nofile(IDLE_CONNECTIONS)
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
    from kafkalite.groups.offsets import offsets_partition

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


# -- the attacks of a SASL/SCRAM server -------------------------------------------------------
def seconds_of(args: argparse.Namespace, rng: random.Random) -> float:
    return args.seconds or rng.uniform(8, 20)


def scram_flood(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    connection_flood(args, rng, journal, "scram_flood", sasl=True)


def connect_flood(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    """scram_flood's control: the same connections each asking ApiVersions instead, so a bench
    tells what SCRAM costs from what the connections themselves do."""
    connection_flood(args, rng, journal, "connect_flood", sasl=False)


def connection_flood(
    args: argparse.Namespace, rng: random.Random, journal: Journal, attack: str, sasl: bool
) -> None:
    seconds = seconds_of(args, rng)
    stop_at = time.monotonic() + seconds
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def loop(r: random.Random) -> None:
        while time.monotonic() < stop_at:
            known = r.random() < 0.5
            user = f"user-{r.randrange(max(args.users, 1)):05}" if known else f"nobody-{r.randrange(10**9)}"
            try:
                wire = W.Wire(args.bootstrap, ANSWER_DEADLINE_S, client_id="flooder")
                try:
                    if sasl:
                        wire.call(W.SASL_HANDSHAKE, 1, W._string("SCRAM-SHA-256"))
                        error, _ = wire.sasl_authenticate(f"n,,n={user},r=flood{r.randrange(10**9)}".encode())
                        outcome = f"error {error}" if error else "server-first"
                    else:
                        outcome = f"error {error}" if (error := wire.api_versions()) else "api-versions"
                finally:
                    wire.close()  # hung up mid-exchange
            except (W.Late, W.Closed, OSError) as e:
                outcome = type(e).__name__
            with lock:
                outcomes[outcome] += 1

    threads = [
        threading.Thread(target=loop, args=(random.Random(rng.random()),)) for _ in range(SCRAM_FLOOD_THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(outcomes.values())
    journal.write(
        "attack",
        attack=attack,
        seconds=round(seconds, 1),
        per_s=round(total / seconds),
        outcomes=dict(outcomes),
    )


def hold_connections(
    args: argparse.Namespace, count: int, first: bytes, seconds: float, keepalive: float = 0.0
) -> dict[str, Any]:
    """``count`` connections, each sending ``first`` (as much as the socket takes), then held
    ``seconds`` and closed; a ``keepalive`` share of them sends ApiVersions every 0.5 s. Each
    one's fate: closed by the server (and how long after its connect), or still open."""
    raise_nofile(count)
    api_versions = struct.pack(">hhi", W.API_VERSIONS, 0, 1) + W._string("silent")
    api_versions = struct.pack(">i", len(api_versions)) + api_versions
    socks: list[tuple[socket.socket, float, bool]] = []
    failures: Counter[str] = Counter()
    for i in range(count):
        try:
            s = W.connect(args.bootstrap, ANSWER_DEADLINE_S)
        except OSError as e:
            failures[type(e).__name__] += 1
            if sum(failures.values()) > 50:
                break
            continue
        s.setblocking(False)
        try:
            s.send(first)
        except OSError:
            pass
        socks.append((s, time.monotonic(), i < count * keepalive))
    closed_after: list[float] = []
    open_socks = list(socks)
    stop_at = time.monotonic() + seconds
    while open_socks and time.monotonic() < stop_at:
        time.sleep(0.5)
        still = []
        for s, opened, alive in open_socks:
            try:
                if alive:
                    s.send(api_versions)
                while s.recv(1 << 16):  # answers to the keepalives, dropped
                    pass
                ended = True  # recv returned b"": closed by the server
            except BlockingIOError:
                ended = False
            except OSError:
                ended = True
            if ended:
                closed_after.append(time.monotonic() - opened)
                s.close()
            else:
                still.append((s, opened, alive))
        open_socks = still
    now_ = time.monotonic()
    oldest_open = max((now_ - opened for _, opened, _ in open_socks), default=0.0)
    for s, _, _ in open_socks:
        s.close()
    return {
        "opened": len(socks),
        "failures": dict(failures),
        "closed_by_server": len(closed_after),
        "closed_after_s": [round(min(closed_after, default=0), 1), round(max(closed_after, default=0), 1)],
        "closed_early": sum(1 for t in closed_after if t < EVICTED_WITHIN_S),
        "still_open": len(open_socks),
        "oldest_open_s": round(oldest_open, 1),
    }


def preauth_stall(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    frame = struct.pack(">i", STALL_FRAME) + rng.randbytes(STALL_FRAME // 2)
    seconds = seconds_of(args, rng)
    journal.write(
        "attack",
        attack="preauth_stall",
        frame=STALL_FRAME,
        seconds=round(seconds, 1),
        **hold_connections(args, STALL_CONNECTIONS, frame, seconds),
    )


def silent(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    """Held past the authentication deadline and its slack unless ``--seconds`` says otherwise,
    so the checker sees each one closed."""
    seconds = args.seconds or max(seconds_of(args, rng), SILENT_HOLD_S)
    journal.write(
        "attack",
        attack="silent",
        seconds=round(seconds, 1),
        deadline_s=AUTHENTICATION_DEADLINE_S,
        **hold_connections(args, SILENT_CONNECTIONS, b"", seconds, keepalive=0.5),
    )


def per_ip(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    seconds = seconds_of(args, rng)
    journal.write(
        "attack",
        attack="per_ip",
        cap=args.per_ip,
        seconds=round(seconds, 1),
        **hold_connections(args, args.per_ip + PER_IP_EXTRA, b"", seconds),
    )


def login(args: argparse.Namespace, client_id: str) -> W.Wire:
    wire = W.Wire(args.bootstrap, ANSWER_DEADLINE_S, client_id=client_id)
    error = wire.login(args.user, args.password)
    if error:
        wire.close()
        raise W.Closed(f"{args.user} not authenticated: error {error}")
    return wire


def unread_fetch(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    topic, part = args.big.rsplit(":", 1)
    seconds = seconds_of(args, rng)
    wires, failures = [], Counter[str]()
    for _ in range(UNREAD_FETCH_CONNECTIONS):
        try:
            wire = login(args, "hog")
            for _ in range(UNREAD_FETCHES):  # never read
                wire.send(W.fetch([(topic, int(part), 0)], 0, W.INT31, W.INT31))
            wires.append(wire)
        except (W.Late, W.Closed, OSError) as e:
            failures[type(e).__name__] += 1
    time.sleep(seconds)
    for wire in wires:
        wire.close()
    journal.write(
        "attack",
        attack="unread_fetch",
        seconds=round(seconds, 1),
        connections=len(wires),
        unread=len(wires) * UNREAD_FETCHES,
        failures=dict(failures),
    )


def coordinator_denied(args: argparse.Namespace, rng: random.Random, journal: Journal) -> None:
    seconds = seconds_of(args, rng)
    stop_at = time.monotonic() + seconds
    answers: Counter[int] = Counter()
    failures: list[tuple[int, str]] = []  # (when, what): the checker exempts the server's downtime
    groups = args.groups.split(",")
    while time.monotonic() < stop_at:
        try:
            wire = login(args, "denied")
            try:
                while time.monotonic() < stop_at:
                    for code in wire.find_coordinator(rng.choice(groups)):
                        answers[code] += 1
                    time.sleep(0.02)
            finally:
                wire.close()
        except (W.Late, W.Closed, OSError, AssertionError) as e:
            failures.append((now(), type(e).__name__))
            time.sleep(0.2)
    journal.write(
        "attack",
        attack="coordinator_denied",
        seconds=round(seconds, 1),
        answers={str(k): v for k, v in answers.items()},
        failures=failures,
    )


ATTACKS = {
    "hostile": hostile,
    "fetch": fetch,
    "metadata": metadata,
    "idle": idle,
    "intruder": intruder,
    "lock": lock,
    "scram_flood": scram_flood,
    "connect_flood": connect_flood,
    "preauth_stall": preauth_stall,
    "silent": silent,
    "per_ip": per_ip,
    "unread_fetch": unread_fetch,
    "coordinator_denied": coordinator_denied,
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
    parser.add_argument(
        "--seconds", type=float, default=0.0, help="the load's length (default: 8-20 s, seeded)"
    )
    parser.add_argument(
        "--user", default="mallory", help="the authenticated attacker (unread_fetch, coordinator_denied)"
    )
    parser.add_argument("--password", default="mallory-pw")
    parser.add_argument("--users", type=int, default=0, help="user-00000.. in the users file (scram_flood)")
    parser.add_argument("--per-ip", type=int, default=0, help="the server's max.connections.per.ip (per_ip)")
    args = parser.parse_args()
    journal = Journal(args.journal)
    journal.write("start", attack=args.attack, pid=os.getpid())
    ATTACKS[args.attack](args, random.Random(args.seed), journal)


if __name__ == "__main__":
    main()
