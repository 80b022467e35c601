"""The controller of a server fault run (issue 21): ``kafkalite serve`` as a child on a loopback
port, network producers (confluent-kafka, idempotent, acks=all) and network group members
(kafka-python) beside the fault suite's embedded producers and members on the same data
directory, network transactional consume-transform-produce jobs (``faults.server_txn_child``,
confluent-kafka; killed -9 and made zombies like the embedded suite's ``txn_child``), a probe
measuring every answer, and for ``seconds`` the attacks of ATTACKS:

- ``stop``         SIGSTOP/SIGCONT of embedded lock holders (producers and members), up to 12 s
- ``kill``         kill -9 of clients, embedded and network (restarted)
- ``server_kill``  kill -9 of the server, restarted on the same port
- ``lock``         an embedded writer holding append locks (the hot partition's, the groups'
                   offsets partitions'), SIGSTOPped as soon as it holds them, for 4-15 s
- ``hostile``, ``fetch``, ``metadata``, ``idle``, ``intruder``, ``lock``  episodes of
                   ``faults.server_attacks`` (one process each)

or, ``authenticated``, a SASL/SCRAM server with the authorizer on (super user ``admin``, the
probe's login; ``mallory`` may read the big topic only; SCRAM_USERS more users in the users
file; max.connections.per.ip PER_IP), the embedded clients beside it (network clients would all
need logins: the plain configuration has them), and AUTH_EPISODES: ``scram_flood``,
``preauth_stall``, ``silent``, ``per_ip``, ``unread_fetch``, ``coordinator_denied`` (a short
per_ip first, then silent held past the authentication deadline with no server kill or per_ip
meanwhile, so that the checker sees both limits even in a short run);

then stops everything (the server by SIGINT), and checks ``faults.server_checker``'s invariants
and ``faults.txn_checker``'s (as the invariant ``transactions``).
The server's RSS is sampled every tick, and its VmHWM read before every kill and at its exit.

Seeded as the fault suite is (``random.Random(seed)`` for every choice; printed first and in
every failure). Long run: ``KAFKALITE_FAULTS_SECONDS=900 pytest -n 0 -m faults
tests/faults/test_server_fault_injection.py`` or ``PYTHONPATH=python:tests:tests/support python -m
faults.server_controller --seconds 900 [--seed N] [--attacks stop,fetch,...]``."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from serve_proc import free_port, serve_on

from faults import journal as J
from faults import server_checker, txn_checker
from faults.controller import Child, Controller, child_env, cli, finish
from faults.server_attacks import SILENT_HOLD_S
from faults.txn_checker import OUTPUT as TXN_OUTPUT

ATTACKS = ("stop", "kill", "server_kill", "lock", "hostile", "fetch", "metadata", "idle", "intruder")
EPISODES = ("lock", "hostile", "fetch", "metadata", "idle", "intruder")  # faults.server_attacks
EPISODE_WEIGHTS = {"lock": 3, "hostile": 3, "fetch": 2, "metadata": 1, "idle": 1, "intruder": 3}
AUTH_EPISODES = ("scram_flood", "preauth_stall", "silent", "per_ip", "unread_fetch", "coordinator_denied")
AUTH_ATTACKS = ("stop", "kill", "server_kill", *AUTH_EPISODES)
AUTH_EPISODE_WEIGHTS = dict.fromkeys(AUTH_EPISODES, 1)
PASSWORDS = {"admin": "admin-pw", "mallory": "mallory-pw"}
SCRAM_USERS, PER_IP = 2000, 400
PER_IP_HOLD_S = 3.0
AUTH_SERVE_FLAGS = (
    "--sasl",
    "--authorizer",
    "--super-users",
    "User:admin",
    "--max-connections-per-ip",
    str(PER_IP),
)
LOCK_HOLD_S = (4.0, 15.0)  # a stopped lock holder: past the Produce probe's bound, sometimes
EMBEDDED_GROUP, NETWORK_GROUP = "faults", "net"
SLOTS = ("p0", "p1", "m0", "m1", "pn0", "pn1", "mn0", "mn1")  # embedded, then network (n)
BIG_TOPIC, BIG_BYTES, BIG_VALUE = "big", 48 << 20, 512 << 10  # what fetch amplification multiplies
SERVER_STOP_S = 30.0
ATTACK_TIMEOUT_S = 120.0  # every read of an attacker has a deadline: past this it is hung
RSS_JOURNAL_EVERY_S = 1.0
USERS_FILE = ".kafkalite-users.json"


def topic_layout() -> dict[str, dict[str, Any]]:
    """Plain topics (no compaction, no retention: every acknowledged record must stay); small
    segments on one so rolls happen while locks are stopped."""
    return {
        "plain": {"partitions": 2, "config": {"segment.bytes": 64 << 10}},
        "wire": {"partitions": 2, "config": {}},
    }


@dataclass
class Episode:
    child: Child
    attack: str
    deadline: float
    journal: str
    stopped: bool = False  # a ``lock`` episode, once it holds its locks


class ServerController(Controller):
    STOP_SECONDS = (0.5, 12.0)  # past the Produce probe's bound (timeout 5 s + 5 s)
    #: The network transactional slots (``faults.server_txn_child``) and the input partition
    #: each is assigned, of the topic the network producers write.
    TXN_INPUTS = {"tn0": "wire:0", "tn1": "wire:1"}

    def __init__(
        self,
        seed: int,
        seconds: float,
        run_dir: str,
        out: Any,
        attacks: set[str],
        authenticated: bool = False,
    ) -> None:
        super().__init__(seed, seconds, run_dir, out)
        self.attacks = attacks
        self.authenticated = authenticated
        self.slots = tuple(s for s in SLOTS if "n" not in s) if authenticated else SLOTS
        if authenticated:
            self.TXN_INPUTS = {}
        self.episode_names = AUTH_EPISODES if authenticated else EPISODES
        self.episode_weights = AUTH_EPISODE_WEIGHTS if authenticated else EPISODE_WEIGHTS
        self.ACTION_WEIGHTS = {
            "kill": 6 if "kill" in attacks else 0,
            "stop": 12 if "stop" in attacks else 0,
            "zombie": 2 if "kill" in attacks else 0,  # a stopped transactional child, replaced
            "disk": 0,
            "none": 82,
        }
        self.topics = topic_layout()
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.server: Child | None = None
        self.server_restart_at: float | None = None
        self.server_incarnation = -1
        self.probe: Child | None = None
        self.episodes: list[Episode] = []
        self.episode_count = 0
        self.planned: list[tuple[float, str]] = []
        self.deadline = 0.0  # of the faults: set by run()
        self.rss_journaled_at = 0.0
        self.peak_rss = 0

    # -- setup -------------------------------------------------------------------------------
    def create_topics(self) -> None:
        from kafkalite import Admin, Producer

        super().create_topics()
        Admin(self.data).create_topic(BIG_TOPIC, 1)
        with Producer(self.data, acks=1) as producer:
            value = b"b" * BIG_VALUE
            for _ in range(BIG_BYTES // BIG_VALUE):
                producer.send(BIG_TOPIC, value, partition=0)
        if self.authenticated:
            add_users(self.data)

    def command(self, slot: str, name: str) -> tuple[str, list[str], int]:
        if slot.startswith("pn"):
            args = self.child_args(name, ",".join(self.topics)) + ["--bootstrap", self.bootstrap]
            return "faults.server_producer_child", args, 0
        if slot.startswith("mn"):
            args = self.child_args(name, ",".join(self.topics))
            return (
                "faults.server_member_child",
                args + ["--bootstrap", self.bootstrap, "--group", NETWORK_GROUP],
                0,
            )
        if slot in self.TXN_INPUTS:
            args = self.child_args(name, TXN_OUTPUT) + ["--bootstrap", self.bootstrap]
            return "faults.server_txn_child", args + ["--slot", slot, "--input", self.TXN_INPUTS[slot]], 0
        return super().command(slot, name)

    def choose_failpoints(self, slot: str) -> str | None:
        """None for a transactional slot: its faults are the server's (its process loads no
        kafkalite to inject them into)."""
        return None if slot in self.TXN_INPUTS else super().choose_failpoints(slot)

    def stoppable(self, child: Child) -> bool:
        return not child.slot.startswith(("pn", "mn", "tn"))  # the embedded lock holders

    # -- the server ----------------------------------------------------------------------------
    def start_server(self) -> bool:
        self.server_incarnation += 1
        name = f"server.{self.server_incarnation}"
        stderr = os.path.join(self.logs, f"{name}.err")
        env = child_env()

        def start(*argv: str, **kwargs: Any) -> subprocess.Popen:
            return self.popen(name, [sys.executable, "-m", *argv], env, **kwargs)[0]

        for attempt in range(10):  # the port may still be held for a moment after a kill
            try:
                proc = serve_on(start, self.data, self.port, "--log-level", "WARNING", *self.auth_flags())
                break
            except RuntimeError as e:
                self.journal.write("server_start_failed", name=name, attempt=attempt, error=str(e)[:300])
                time.sleep(0.5)
        else:
            self.journal.write("server_gave_up", name=name, attempts=10)
            return False
        threading.Thread(target=_drain, args=(proc, stderr), daemon=True).start()
        self.server = Child("server", self.server_incarnation, proc, stderr, None)
        self.journal.write("server_ready", name=name, pid=proc.pid)
        return True

    def auth_flags(self) -> list[str]:
        if not self.authenticated:
            return []
        return list(AUTH_SERVE_FLAGS)

    def sample_rss(self, force: bool = False) -> None:
        server = self.server
        if server is None or server.proc.poll() is not None:
            return
        try:
            with open(f"/proc/{server.proc.pid}/status") as f:
                fields = {k: v for k, _, v in (line.partition(":") for line in f)}
        except OSError:
            return
        rss, hwm = (int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM"))
        now = time.monotonic()
        if force or hwm > self.peak_rss or now - self.rss_journaled_at >= RSS_JOURNAL_EVERY_S:
            self.journal.write("rss", name=server.name, rss=rss, hwm=hwm)
            self.rss_journaled_at = now
        self.peak_rss = max(self.peak_rss, hwm)

    def kill_server(self) -> None:
        server = self.server
        assert server is not None
        self.sample_rss(force=True)  # VmHWM: the peak since the last sample
        self.journal.write("server_kill", name=server.name)
        self.signal(server, signal.SIGKILL)
        server.proc.wait()
        self.journal_exit(server)
        self.server = None

    def stop_server(self) -> None:
        """SIGINT, as Ctrl-C: a clean stop within SERVER_STOP_S, else a hang (SIGABRT: stacks)."""
        server = self.server
        if server is None:
            return
        self.sample_rss(force=True)
        self.signal(server, signal.SIGINT)
        self.wait_or_abort(server, time.monotonic() + SERVER_STOP_S, SERVER_STOP_S)
        self.journal_exit(server)
        self.server = None

    # -- the probe and the attackers -----------------------------------------------------------
    def start_probe(self) -> None:
        topics = ",".join(f"{t}:{m['partitions']}" for t, m in self.topics.items())
        first = next(iter(self.topics))
        argv = [
            sys.executable, "-m", "faults.server_probe",
            "--bootstrap", self.bootstrap,
            "--journal", os.path.join(self.journals, "probe.jsonl"),
            "--seed", str(self.rng.randrange(2**32)),
            "--topics", topics,
            "--hot", f"{first}:0",
            "--groups", f"{EMBEDDED_GROUP},{NETWORK_GROUP}",
        ]  # fmt: skip
        if self.authenticated:
            argv += ["--user", "admin", "--password", PASSWORDS["admin"]]
        proc, stderr = self.popen("probe", argv, child_env())
        self.probe = Child("probe", 0, proc, stderr, None)
        self.journal.write("start", name="probe", pid=proc.pid)

    def start_episode(self, attack: str) -> None:
        """An episode of ``faults.server_attacks``; an authenticated one's load ends before the
        run does (a silent one is held past the authentication deadline when there is time)."""
        n = self.episode_count = self.episode_count + 1
        name = f"x-{attack}.{n}"
        topics = ",".join(f"{t}:{m['partitions']}" for t, m in self.topics.items())
        first = next(iter(self.topics))
        argv = [
            sys.executable, "-m", "faults.server_attacks", attack,
            "--bootstrap", self.bootstrap,
            "--journal", os.path.join(self.journals, f"{name}.jsonl"),
            "--seed", str(self.rng.randrange(2**31)),
            "--big", f"{BIG_TOPIC}:0",
            "--topics", topics,
            "--groups", f"{EMBEDDED_GROUP},{NETWORK_GROUP}",
            "--data", self.data,
            "--hot", f"{first}-0",
            "--hold", f"{self.rng.uniform(*LOCK_HOLD_S):.1f}",
            "--user", "mallory", "--password", PASSWORDS["mallory"],
            "--users", str(SCRAM_USERS),
            "--per-ip", str(PER_IP),
        ]  # fmt: skip
        if attack in AUTH_EPISODES:
            left = self.deadline - time.monotonic() - 2
            # held past the authentication deadline and its slack, or the checker cannot tell
            # whether the server closed them by it
            long = attack in server_checker.UNAUTHENTICATED_HOLDS and left > SILENT_HOLD_S
            hold = SILENT_HOLD_S if long else self.rng.uniform(6, 15)
            if attack == "per_ip":  # its check is the eviction at once; short, see plan()
                hold = PER_IP_HOLD_S
            argv += ["--seconds", f"{max(3.0, min(hold, left)):.1f}"]
        proc, stderr = self.popen(name, argv, child_env())
        self.episodes.append(
            Episode(
                Child(f"x-{attack}", n, proc, stderr, None),
                attack,
                time.monotonic() + ATTACK_TIMEOUT_S,
                os.path.join(self.journals, f"{name}.jsonl"),
            )
        )
        self.journal.write("start", name=name, pid=proc.pid, attack=attack)

    def plan(self) -> None:
        """Every enabled episode and a server kill at least once, spread over the run (so a
        short run sees each); more come at random."""
        planned = [a for a in (*self.episode_names, "server_kill") if a in self.attacks]
        self.rng.shuffle(planned)
        if self.authenticated:
            # per_ip (short) then silent first, so that even a short run holds silent past the
            # authentication deadline, and no per_ip fills the address's slots meanwhile (the
            # oldest unauthenticated connections, silent's, would be evicted before it).
            first = [a for a in ("per_ip", "silent") if a in planned]
            planned = first + [a for a in planned if a not in first]
        start = time.monotonic()
        span = self.seconds * 0.85  # the last ones end before the stop
        times = [start + (i + self.rng.random()) * span / max(1, len(planned)) for i in range(len(planned))]
        if self.authenticated and planned[:2] == ["per_ip", "silent"]:
            times[1] = max(times[1], times[0] + PER_IP_HOLD_S + 3)
        self.planned = sorted(zip(times, planned, strict=True))

    def server_tick(self) -> None:
        rng, now = self.rng, time.monotonic()
        for ep in list(self.episodes):
            if ep.attack == "lock" and ep.child.cont_at is None and not ep.stopped:
                holding = next((e for e in J.read(ep.journal) if e["ev"] == "holding"), None)
                if holding is not None:  # stopped with its locks held, until its hold is over
                    self.signal(ep.child, signal.SIGSTOP)
                    self.journal.write("stop", name=ep.child.name, partitions=holding["partitions"])
                    ep.child.cont_at = now + holding["hold_s"]
                    ep.stopped = True
            if ep.child.cont_at is not None and now >= ep.child.cont_at:
                self.signal(ep.child, signal.SIGCONT)
                self.journal.write("cont", name=ep.child.name)
                ep.child.cont_at = None
            if ep.child.proc.poll() is None and now > ep.deadline:
                self.wait_or_abort(ep.child, now, ATTACK_TIMEOUT_S)
            if ep.child.proc.poll() is not None:
                self.journal_exit(ep.child)
                self.episodes.remove(ep)
        if self.server is None:
            if self.server_restart_at is not None and now >= self.server_restart_at:
                self.server_restart_at = None if self.start_server() else now + 1.0
            return
        self.sample_rss()
        if self.server.proc.poll() is not None:  # died by itself: the checker reports its exit
            self.journal_exit(self.server)
            self.server = None
            self.server_restart_at = now + 1.0
            return
        running = {ep.attack for ep in self.episodes}
        # No kill during a silent episode: it would close the connections the checker must see
        # closed by the authentication deadline (a planned one comes after it).
        killable = "silent" not in running
        kill = "server_kill" in self.attacks and killable and rng.random() < 0.015
        deferred: list[tuple[float, str]] = []
        while self.planned and self.planned[0][0] <= now:
            attack = self.planned.pop(0)[1]
            if attack == "server_kill" and not killable:
                deferred.append((now + 1.0, attack))
            elif attack == "server_kill":
                kill = True
            else:
                self.start_episode(attack)
        self.planned = sorted(self.planned + deferred)
        enabled = [a for a in self.episode_names if a in self.attacks and a not in running]
        if not killable:  # nor a per_ip: it would evict silent's connections (see plan())
            enabled = [a for a in enabled if a != "per_ip"]
        if enabled and len(self.episodes) < 2 and rng.random() < 0.04:
            self.start_episode(rng.choices(enabled, weights=[self.episode_weights[a] for a in enabled])[0])
        if kill:
            self.kill_server()
            self.server_restart_at = now + rng.uniform(0.3, 2.0)

    def run(self) -> None:
        if not self.start_server():
            raise RuntimeError("kafkalite serve did not start; see " + self.logs)
        if self.authenticated:
            grant_mallory(self.bootstrap)
        for slot in (*self.slots, *self.TXN_INPUTS):
            self.spawn(slot)
        self.start_probe()
        self.plan()
        self.deadline = deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            self.tick()
            self.server_tick()
            time.sleep(self.rng.uniform(0.15, 0.5))

    def stop_everything(self) -> None:
        """Attackers (SIGKILL: an episode has nothing to finish), the clients (SIGTERM, as the
        fault suite), the probe (SIGTERM), then the server (SIGINT)."""
        for ep in self.episodes:
            self.signal(ep.child, signal.SIGKILL)
            ep.child.proc.wait()
            self.journal_exit(ep.child)
        self.episodes.clear()
        if self.server is None and self.start_server() is False:
            self.journal.write(
                "server_start_failed", name="final", attempt=-1, error="no server for the stop"
            )
        try:
            self.stop_all()
        finally:
            if self.probe is not None:
                self.signal(self.probe, signal.SIGTERM)
                self.wait_or_abort(self.probe, time.monotonic() + 30, 30)
                self.journal_exit(self.probe)
                self.probe = None
            self.stop_server()

    def kill_everything(self) -> None:
        """The last resort of a finally: no child outlives the run."""
        self.kill_all()
        for child in [*(ep.child for ep in self.episodes), self.probe, self.server]:
            if child is not None and child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()


def grant_mallory(bootstrap: str) -> None:
    """mallory may READ the big topic (its unread fetches), nothing else: the ACL is made
    through the server, as kafka-acls does."""
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        KafkaAdminClient,
        ResourcePattern,
        ResourceType,
    )

    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="admin",
        sasl_plain_password=PASSWORDS["admin"],
    )
    try:
        pattern = ResourcePattern(ResourceType.TOPIC, BIG_TOPIC)
        result = admin.create_acls(
            [ACL("User:mallory", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)]
        )
        if result["failed"]:
            raise RuntimeError(f"the ACL of mallory was refused: {result['failed']}")
    finally:
        admin.close()


def add_users(data: str) -> None:
    """admin and mallory, then SCRAM_USERS more (user-00000...): copies of mallory's credential
    written into the users file directly (deriving each would take minutes)."""
    import json

    import kafkalite.users

    for user, password in PASSWORDS.items():
        kafkalite.users.add_user(data, user, password)
    path = os.path.join(data, USERS_FILE)
    with open(path) as f:
        users = json.load(f)
    users["users"].update({f"user-{i:05}": users["users"]["mallory"] for i in range(SCRAM_USERS)})
    with open(path, "w") as f:
        json.dump(users, f)
    os.chmod(path, 0o600)


def _drain(proc: subprocess.Popen, path: str) -> None:
    """The server's stderr after its first line (read by serve_on), into its log file, so a
    server that logs a WARNING per refused request never blocks on a full pipe."""
    assert proc.stderr is not None
    with proc.stderr, open(path, "a") as f:
        for line in proc.stderr:
            f.write(line)
            f.flush()


@dataclass
class ServerResult:
    seed: int
    seconds: float
    attacks: list[str]
    violations: dict[str, list[str]]
    stats: server_checker.ServerStats
    run_dir: str

    def summary(self) -> str:
        s, b = self.stats, self.stats.base
        latency = " ".join(f"{k}={v:.2f}s" for k, v in sorted(s.max_latency.items()))
        by_invariant = " ".join(f"{k}={len(v)}" for k, v in sorted(self.violations.items())) or "none"
        return (
            f"server fault injection summary: seed={self.seed} seconds={self.seconds:.0f} attacks={','.join(self.attacks)}\n"
            f"  acknowledged={b.acknowledged} (network {s.network_acknowledged}) consumed={b.consumed} commits={s.commits} "
            f"client_kills={b.kills} stops={b.stops} server_kills={s.server_kills}\n"
            f"  episodes={dict(s.attacks)} intruder_commits={s.intruder_commits} accepted_partitions={s.intruder_accepted}\n"
            f"  probes={s.probes} (exempt while the server was down {s.probes_exempt}) max latency: {latency}\n"
            f"  network transactions: {s.txn.summary() if s.txn else 'none'}\n"
            f"  peak server RSS {s.peak_rss >> 20} MiB (bound {server_checker.RSS_BOUND >> 20} MiB)\n"
            f"  violations by invariant: {by_invariant}"
        )

    def report(self, first: int = 6) -> str:
        lines = [self.summary(), f"seed {self.seed}: rerun with KAFKALITE_FAULTS_SEED={self.seed}"]
        lines += [f"  figure: {f}" for f in self.stats.figures[:12]]
        if self.violations:
            lines.append(f"run dir (journals, logs) kept in {self.run_dir}")
        for invariant, rows in sorted(self.violations.items()):
            lines += [f"  [seed {self.seed}] {invariant}: {v}" for v in rows[:first]]
        return "\n".join(lines)


def run(
    seed: int | None = None,
    seconds: float = 60.0,
    attacks: set[str] | None = None,
    out: Any = print,
    keep: bool = False,
    authenticated: bool = False,
) -> ServerResult:
    if seed is None:
        env = os.environ.get("KAFKALITE_FAULTS_SEED")
        seed = int(env) if env else random.randrange(2**31)
    known = AUTH_ATTACKS if authenticated else ATTACKS
    attacks = set(known) if attacks is None else attacks
    unknown = attacks - set(known)
    if unknown:
        raise ValueError(f"unknown attacks {sorted(unknown)}; known: {', '.join(known)}")
    run_dir = tempfile.mkdtemp(prefix=f"kafkalite-server-faults-{seed}-")
    out(
        f"server fault injection: seed={seed} seconds={seconds:.0f} attacks={','.join(sorted(attacks))} "
        f"run_dir={run_dir} (rerun with KAFKALITE_FAULTS_SEED={seed})"
    )
    c = ServerController(seed, seconds, run_dir, out, attacks, authenticated)
    started = time.monotonic()
    try:
        c.create_topics()
        c.describe(attacks=sorted(attacks), authenticated=authenticated)
        stopping = c.run_to_end()
        checking = time.monotonic()
        groups = {EMBEDDED_GROUP: "m[0-9]*.jsonl"}
        if not authenticated:
            groups[NETWORK_GROUP] = "mn*.jsonl"
        violations, stats = server_checker.check(
            run_dir, c.data, c.topics, groups, frozenset({NETWORK_GROUP} & set(groups))
        )
        if c.TXN_INPUTS:
            txn_violations, stats.txn = txn_checker.check(run_dir, c.data, c.TXN_INPUTS)
            if txn_violations:
                violations["transactions"] = txn_violations
        out(
            f"server fault injection: {stopping - started:.0f} s of setup and faults, {checking - stopping:.0f} s to stop, "
            f"{time.monotonic() - checking:.0f} s to check"
        )
    finally:
        c.kill_everything()
    result = ServerResult(seed, time.monotonic() - started, sorted(attacks), violations, stats, run_dir)
    return finish(result, out, keep)


def main() -> None:
    parser = cli(__doc__, 60)
    parser.add_argument(
        "--attacks",
        default="",
        help=f"comma-separated, of {', '.join(ATTACKS)} (default all); authenticated: {', '.join(AUTH_ATTACKS)}",
    )
    parser.add_argument("--authenticated", action="store_true", help="the SASL/SCRAM server and its attacks")
    args = parser.parse_args()
    chosen = set(filter(None, args.attacks.split(","))) or None
    result = run(args.seed, args.seconds, chosen, keep=args.keep, authenticated=args.authenticated)
    sys.exit(1 if result.violations else 0)


if __name__ == "__main__":
    main()
