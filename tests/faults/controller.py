"""The controller of a fault-injection run: starts producer, group-member and transactional
(``txn_child``) processes on a few small-segment topics, then for ``seconds`` SIGKILLs,
SIGSTOPs/SIGCONTs and restarts them, fills the disk (a tmpfs shrunk to what is in use; root
only), lowers some children's descriptor limit and starts some with engine fail points; at the
end stops everything, reopens
the data directory (recovery runs) and checks the invariants (``faults.checker``,
``faults.txn_checker``). Transactional children get the coordinator's fail points (``txn.*``)
more often than others, and a fault of their own: ``zombie``.

Seeded: every choice the controller makes comes from ``random.Random(seed)``; the seed is
printed first and in every failure. (The interleaving of the processes is the scheduler's, so
a seed reproduces the fault schedule, not the exact run.)

Long run: ``KAFKALITE_FAULTS_SECONDS=600 pytest -m faults tests/faults/test_fault_injection.py`` or
``PYTHONPATH=python:tests:tests/support python -m faults.controller --seconds 600 [--seed N]``."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from faults import checker, txn_checker
from faults import journal as J
from faults.txn_checker import OUTPUT as TXN_OUTPUT

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GROUP = "faults"
PRODUCERS = 3
MEMBERS = 3
TMPFS_SIZE = 512 << 20
START_TIMEOUT_S = 60.0  # a loaded 2-core machine may take this long to start and stop children
STOP_TIMEOUT_S = 60.0


def topic_layout(rng: random.Random) -> dict[str, dict[str, Any]]:
    """Small segments so rolls happen often; one compacted topic, one with size retention."""
    return {
        "plain": {
            "partitions": 2,
            "config": {"segment.bytes": rng.choice([16, 32, 64]) << 10},
        },
        "compact": {
            "partitions": 1,
            "config": {
                "cleanup.policy": "compact",
                "segment.bytes": 16 << 10,
                "min.cleanable.dirty.ratio": 0.2,
                "delete.retention.ms": 0,
            },
        },
        "retained": {
            "partitions": 1,
            "config": {"segment.bytes": 16 << 10, "retention.bytes": 64 << 10},
        },
    }


@dataclass
class Child:
    slot: str
    incarnation: int
    proc: subprocess.Popen
    stderr: str
    failpoints: str | None
    signals_sent: set[int] = field(default_factory=set)
    cont_at: float | None = None  # SIGSTOPped until then

    @property
    def name(self) -> str:
        return f"{self.slot}.{self.incarnation}"


@dataclass
class Result:
    seed: int
    seconds: float
    violations: list[str]
    stats: checker.Stats
    notes: list[str]
    run_dir: str
    txn: txn_checker.TxnStats | None = None

    def summary(self) -> str:
        s = self.stats
        return (
            f"fault injection summary: seed={self.seed} seconds={self.seconds:.0f} acknowledged={s.acknowledged} "
            f"consumed={s.consumed} kills={s.kills} stops={s.stops} enospc={s.enospc} emfile={s.emfile} eio={s.eio} "
            f"failed_sends={s.failed_sends} failpoint_children={s.failpoint_children} violations={len(self.violations)}"
        ) + (f" {self.txn.summary()}" if self.txn is not None else "")

    def report(self, first: int = 12) -> str:
        lines = [
            self.summary(),
            f"seed {self.seed}: rerun with KAFKALITE_FAULTS_SEED={self.seed}",
        ]
        if self.violations:
            lines.append(
                f"data dir and journals kept in {self.run_dir}; first {min(first, len(self.violations))} violations:"
            )
            lines += [f"  [seed {self.seed}] {v}" for v in self.violations[:first]]
        return "\n".join(lines)


def child_env() -> dict[str, str]:
    """A child's environment: tests/ and tests/support/ on PYTHONPATH (``python -m faults.X``, the
    helpers), stacks on a fatal signal or a hang dump (faulthandler prints every thread's)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [TESTS_DIR, os.path.join(TESTS_DIR, "support"), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["PYTHONFAULTHANDLER"] = "1"
    return env


class Controller:
    #: How long a SIGSTOPped child stays stopped: beyond session_timeout_ms, so it gets evicted.
    STOP_SECONDS = (0.1, 4.0)
    #: The odds of each tick's fault (``disk`` only on the tmpfs).
    ACTION_WEIGHTS = {"kill": 25, "stop": 25, "disk": 10, "zombie": 6, "none": 40}
    #: The transactional slots (``faults.txn_child``) and the input each reads: a partition
    #: assigned (its own group), or a topic subscribed in one shared group (rebalances: KIP-447).
    #: A ``zombie`` fault SIGSTOPs one and starts its next incarnation at once (which must fence it).
    TXN_INPUTS = {"t0": "plain:0", "t1": "plain", "t2": "plain"}
    #: The odds that a child starts with fail points, and for a transactional child that they
    #: are the coordinator's (``txn.*``: every step of a transaction).
    FAILPOINT_ODDS = 0.3
    TXN_FAILPOINT_ODDS = 0.6

    def __init__(
        self, seed: int, seconds: float, run_dir: str, out: Any = print, faults: bool = True
    ) -> None:
        self.seed = seed
        self.faults = faults  # False: the same workload without faults (a control run for the checker)
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.run_dir = run_dir
        self.out = out
        self.data = os.path.join(run_dir, "data")
        self.journals = os.path.join(run_dir, "journals")
        self.logs = os.path.join(run_dir, "stderr")
        self.children: dict[str, Child] = {}
        self.zombies: list[Child] = []  # SIGSTOPped transactional children already replaced
        self.incarnations: dict[str, int] = {}
        self.restart_at: dict[str, float] = {}
        self.mounted = False
        self.disk_full_until: float | None = None
        self.topics = topic_layout(self.rng)
        self.strategy = self.rng.choice(["range", "roundrobin", "sticky", "cooperative-sticky"])
        self.failpoints = self._failpoint_names()
        for d in (self.data, self.journals, self.logs):
            os.makedirs(d, exist_ok=True)
        self.journal = J.Journal(os.path.join(self.journals, "controller.jsonl"))

    # -- setup ---------------------------------------------------------------------------
    def _failpoint_names(self) -> list[str]:
        from kafkalite import _native

        names = getattr(_native, "failpoint_names", None)
        return sorted(names()) if names is not None else []

    def mount(self) -> None:
        """A tmpfs as the data dir, so the controller can fill the disk by shrinking it."""
        if os.geteuid() != 0:
            self.out("fault injection: not root, no tmpfs: the run has no real disk-full episodes")
            return
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", self.data],
            check=False,
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            self.out(
                f"fault injection: mount of a tmpfs failed ({r.stderr.strip()}): no real disk-full episodes"
            )
            return
        self.mounted = True

    def umount(self) -> None:
        if self.mounted:
            r = subprocess.run(["umount", self.data], check=False, capture_output=True, text=True)
            if r.returncode != 0:  # a child still holding it: lazily, so nothing stays mounted
                subprocess.run(["umount", "-l", self.data], check=False, capture_output=True)
            self.mounted = False

    def resize(self, size: int) -> bool:
        r = subprocess.run(
            ["mount", "-o", f"remount,size={size}", self.data], check=False, capture_output=True
        )
        return r.returncode == 0

    def create_topics(self) -> None:
        from kafkalite import Admin

        admin = Admin(self.data)
        for name, meta in self.topics.items():
            admin.create_topic(name, meta["partitions"], meta["config"])
        if self.TXN_INPUTS:
            admin.create_topic(TXN_OUTPUT, 2, {"segment.bytes": 32 << 10})

    # -- children --------------------------------------------------------------------------
    def command(self, slot: str, name: str) -> tuple[str, list[str], int]:
        """The module a slot runs (``python -m``), its arguments and its descriptor limit:
        ``p*`` slots are embedded producers, the others embedded group members."""
        rng = self.rng
        nofile = rng.choice([48, 64, 96, 128]) if rng.random() < 0.25 and self.faults else 0
        if slot in self.TXN_INPUTS:
            args = self.child_args(name, TXN_OUTPUT) + ["--nofile", str(nofile)]
            return "faults.txn_child", args + ["--slot", slot, "--input", self.TXN_INPUTS[slot]], nofile
        args = self.child_args(name, ",".join(self.topics)) + ["--nofile", str(nofile)]
        if slot.startswith("p"):
            return "faults.producer_child", args, nofile
        stall = rng.choice([0, 0, 0.01, 0.03]) if self.faults else 0
        args += ["--group", GROUP, "--strategy", self.strategy, "--stall-probability", str(stall)]
        return "faults.member_child", args, nofile

    def child_args(self, name: str, topics: str) -> list[str]:
        """The arguments every child takes (``journal.child_args``)."""
        return [
            "--data", self.data,
            "--journal", os.path.join(self.journals, f"{name}.jsonl"),
            "--name", name,
            "--topics", topics,
            "--seed", str(self.rng.randrange(2**32)),
        ]  # fmt: skip

    def spawn(self, slot: str) -> None:
        inc = self.incarnations[slot] = self.incarnations.get(slot, -1) + 1
        name = f"{slot}.{inc}"
        module, args, nofile = self.command(slot, name)
        env = child_env()
        failpoints = self.choose_failpoints(slot)
        if failpoints:
            env["KAFKALITE_FAILPOINTS"] = failpoints
        else:
            env.pop("KAFKALITE_FAILPOINTS", None)
        proc, stderr = self.popen(name, [sys.executable, "-m", module, *args], env)
        self.children[slot] = Child(slot, inc, proc, stderr, failpoints)
        self.journal.write("start", name=name, pid=proc.pid, nofile=nofile, failpoints=failpoints)

    def choose_failpoints(self, slot: str) -> str | None:
        """``KAFKALITE_FAILPOINTS`` for a new child, or None. A transactional child's are mostly
        the coordinator's steps, each hit a few times (so a transaction or two complete first)."""
        rng = self.rng
        if not self.failpoints or not self.faults or rng.random() >= self.FAILPOINT_ODDS:
            return None
        names = self.failpoints
        txn_steps = [n for n in names if n.startswith("txn.")]
        if slot in self.TXN_INPUTS and txn_steps and rng.random() < self.TXN_FAILPOINT_ODDS:
            names = txn_steps
            chosen = rng.sample(names, k=min(len(names), rng.randint(1, 2)))
            return ",".join(
                f"{n}={rng.choice(['kill', 'kill', 'kill', 'eio'])}@{rng.randint(1, 8)}" for n in chosen
            )
        chosen = rng.sample(names, k=min(len(names), rng.randint(1, 2)))
        return ",".join(
            f"{n}={rng.choice(['kill', 'enospc', 'emfile', 'eio'])}@{rng.randint(1, 30)}" for n in chosen
        )

    def popen(
        self, name: str, argv: list[str], env: dict[str, str], **kwargs: Any
    ) -> tuple[subprocess.Popen, str]:
        """Start a child in the run directory, its output in ``stderr/NAME.err``."""
        stderr = os.path.join(self.logs, f"{name}.err")
        with open(stderr, "wb") as err:
            kwargs = {"stdout": err, "stderr": err, **kwargs}
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, cwd=self.run_dir, **kwargs)
        return proc, stderr

    def signal(self, child: Child, sig: int) -> None:
        try:
            child.proc.send_signal(sig)
        except ProcessLookupError:
            return
        child.signals_sent.add(sig)

    def reap(self, child: Child) -> None:
        self.journal_exit(child)
        del self.children[child.slot]

    def journal_exit(self, child: Child) -> None:
        """The ``exit`` event the checker's rule 7 reads."""
        rc = child.proc.returncode
        fp_kill = bool(child.failpoints and "=kill" in child.failpoints)
        self.journal.write(
            "exit",
            name=child.name,
            rc=rc,
            signals_sent=sorted(child.signals_sent),
            failpoint_kill=fp_kill,
            stderr=child.stderr,
        )

    # -- the fault loop --------------------------------------------------------------------
    def tick(self) -> None:
        rng, now = self.rng, time.monotonic()
        for child in list(self.children.values()):
            if child.cont_at is not None and now >= child.cont_at:
                self.signal(child, signal.SIGCONT)
                child.cont_at = None
                self.journal.write("cont", name=child.name)
            if child.proc.poll() is not None:
                self.reap(child)
                self.restart_at[child.slot] = now + rng.uniform(0.1, 1.0)
        for zombie in list(self.zombies):
            if zombie.cont_at is not None and now >= zombie.cont_at:
                self.signal(zombie, signal.SIGCONT)
                zombie.cont_at = None
                self.journal.write("cont", name=zombie.name)
            if zombie.proc.poll() is not None:
                self.journal_exit(zombie)
                self.zombies.remove(zombie)
        for slot, at in list(self.restart_at.items()):
            if now >= at:
                del self.restart_at[slot]
                self.spawn(slot)
        if self.disk_full_until is not None and now >= self.disk_full_until:
            self.resize(TMPFS_SIZE)
            self.disk_full_until = None
            self.journal.write("disk_free")
        weights = dict(
            self.ACTION_WEIGHTS,
            disk=self.ACTION_WEIGHTS["disk"] if self.mounted else 0,
            zombie=self.ACTION_WEIGHTS["zombie"] if self.TXN_INPUTS else 0,
        )
        action = rng.choices(list(weights), weights=list(weights.values()))[0]
        if not self.faults:
            action = "none"
        live = [c for c in self.children.values() if c.proc.poll() is None]
        if action == "kill" and live:
            child = rng.choice(live)
            self.journal.write("kill", name=child.name)
            self.signal(child, signal.SIGKILL)
        elif action == "stop" and (stoppable := [c for c in live if self.stoppable(c)]):
            child = rng.choice(stoppable)
            if child.cont_at is None:
                self.journal.write("stop", name=child.name)
                self.signal(child, signal.SIGSTOP)
                child.cont_at = now + rng.uniform(*self.STOP_SECONDS)
        elif action == "zombie" and (
            txn := [c for c in live if c.slot in self.TXN_INPUTS and c.cont_at is None]
        ):
            self.make_zombie(rng.choice(txn), now)
        elif action == "disk" and self.disk_full_until is None:
            st = os.statvfs(self.data)
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
            for slack in (rng.choice([0, 64 << 10, 512 << 10]), 1 << 20, 4 << 20):
                if self.resize(used + slack + 4096):
                    self.disk_full_until = now + rng.uniform(0.5, 4.0)
                    self.journal.write("disk_full", used=used, slack=slack)
                    break

    def make_zombie(self, child: Child, now: float) -> None:
        """SIGSTOP a transactional child and start its slot's next incarnation at once: the
        new one's init_transactions() must fence it, so when it runs again (SIGCONT) none of
        its calls may succeed (the checker's rule T5)."""
        self.journal.write("zombie", name=child.name)
        self.signal(child, signal.SIGSTOP)
        child.cont_at = now + self.rng.uniform(0.5, 4.0)
        del self.children[child.slot]
        self.zombies.append(child)
        self.spawn(child.slot)

    def stoppable(self, child: Child) -> bool:
        """Whether the ``stop`` fault may pick this child (every one, here)."""
        return True

    def run(self) -> None:
        for i in range(PRODUCERS):
            self.spawn(f"p{i}")
        for i in range(MEMBERS):
            self.spawn(f"m{i}")
        for slot in self.TXN_INPUTS:
            self.spawn(slot)
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:
            self.tick()
            time.sleep(self.rng.uniform(0.15, 0.5))

    def stop_all(self) -> None:
        """SIGCONT, give the disk back, SIGTERM; a child that does not exit in time is a hang:
        SIGABRT (faulthandler prints its stacks), then SIGKILL. Never leaves a process behind."""
        if self.disk_full_until is not None:
            self.resize(TMPFS_SIZE)
            self.disk_full_until = None
        self.restart_at.clear()
        for child in [*self.children.values(), *self.zombies]:
            if child.cont_at is not None:
                self.signal(child, signal.SIGCONT)
                child.cont_at = None
            self.signal(child, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in list(self.children.values()):
            self.wait_or_abort(child, deadline, STOP_TIMEOUT_S)
            self.reap(child)
        for child in self.zombies:
            self.wait_or_abort(child, deadline, STOP_TIMEOUT_S)
            self.journal_exit(child)
        self.zombies.clear()

    def wait_or_abort(self, child: Child, deadline: float, seconds: float) -> None:
        """Wait for a child asked to stop; one still running at ``deadline`` is a hang
        (journaled): SIGABRT, so faulthandler prints its stacks, then SIGKILL."""
        try:
            child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.journal.write("hang", name=child.name, seconds=seconds, stderr=child.stderr)
            self.signal(child, signal.SIGABRT)
            try:
                child.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.signal(child, signal.SIGKILL)
                child.proc.wait()

    def describe(self, **fields: Any) -> None:
        """run.json: what ``python -m faults.checker RUN_DIR`` needs to check a kept run again."""
        with open(os.path.join(self.run_dir, "run.json"), "w") as f:
            json.dump(
                {"seed": self.seed, "seconds": self.seconds, "topics": self.topics, **fields}, f, indent=1
            )

    def run_to_end(self) -> float:
        """``run()``, then stop every child (and in any case kill them); returns the time the
        stopping began."""
        try:
            self.run()
        finally:
            stopping = time.monotonic()
            try:
                self.stop_everything()
            finally:
                self.kill_everything()
        return stopping

    def stop_everything(self) -> None:
        self.stop_all()

    def kill_everything(self) -> None:
        self.kill_all()

    def kill_all(self) -> None:
        """The last resort of a finally: no child outlives the run."""
        for child in [*self.children.values(), *self.zombies]:
            if child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()
        self.children.clear()
        self.zombies.clear()


def run(
    seed: int | None = None, seconds: float = 75.0, out: Any = print, keep: bool = False, faults: bool = True
) -> Result:
    if seed is None:
        env = os.environ.get("KAFKALITE_FAULTS_SEED")
        seed = int(env) if env else random.randrange(2**31)
    run_dir = tempfile.mkdtemp(prefix=f"kafkalite-faults-{seed}-")
    out(
        f"fault injection: seed={seed} seconds={seconds:.0f} run_dir={run_dir} (rerun with KAFKALITE_FAULTS_SEED={seed})"
    )
    c = Controller(seed, seconds, run_dir, out, faults)
    started = time.monotonic()
    try:
        c.mount()
        if not c.failpoints:
            out(
                "fault injection: this kafkalite has no _native.failpoint_names(): no children with fail points"
            )
        c.create_topics()
        c.describe(strategy=c.strategy, tmpfs=c.mounted, txn_inputs=c.TXN_INPUTS)
        stopping = c.run_to_end()
        if c.mounted:
            c.resize(TMPFS_SIZE * 2)  # recovery needs room
        checking = time.monotonic()
        violations, stats, notes = checker.check(run_dir, c.data, c.topics, GROUP)
        txn_violations, txn_stats = txn_checker.check(run_dir, c.data, c.TXN_INPUTS)
        violations += txn_violations
        out(
            f"fault injection: {stopping - started:.0f} s of faults, {checking - stopping:.0f} s to stop the children, "
            f"{time.monotonic() - checking:.0f} s to recover and check"
        )
        result = Result(seed, time.monotonic() - started, violations, stats, notes, run_dir, txn_stats)
        if violations and c.mounted:  # keep the evidence: the tmpfs goes away
            shutil.copytree(c.data, os.path.join(run_dir, "data-copy"), symlinks=True)
    finally:
        c.kill_all()
        c.umount()
    return finish(result, out, keep)


def finish(result: Any, out: Any, keep: bool) -> Any:
    """The end of a run: its directory removed unless it found violations (or ``keep``), its
    report printed."""
    if not result.violations and not keep:
        shutil.rmtree(result.run_dir, ignore_errors=True)
    out(result.report())
    return result


def cli(description: str | None, seconds: float) -> argparse.ArgumentParser:
    """The options of ``python -m faults.controller`` and ``faults.server_controller``."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--seconds", type=float, default=float(os.environ.get("KAFKALITE_FAULTS_SECONDS", str(seconds)))
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the run directory even without violations")
    return parser


def main() -> None:
    parser = cli(__doc__, 75)
    parser.add_argument(
        "--no-faults",
        action="store_true",
        help="the same workload without faults: a control run for the checker",
    )
    args = parser.parse_args()
    result = run(args.seed, args.seconds, keep=args.keep, faults=not args.no_faults)
    sys.exit(1 if result.violations else 0)


if __name__ == "__main__":
    main()
