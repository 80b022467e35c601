"""Shared fixtures: a fresh partition directory per test, ``spawn`` (the one way tests start
child processes), ``java_program`` (the member programs of tests/java-client), and a reader
of .log files with kafka-python's record decoder (an implementation we did not write)."""

from __future__ import annotations

import fcntl
import glob
import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import SUPPORT, TESTS, child_env

# The `kafkalite_server` fixture, also for a test module run alone that does not name the plugin
# itself (an installed kafkalite registers it through its pytest11 entry point as well).
pytest_plugins = ["kafkalite.testing"]

PROCS = os.path.join(SUPPORT, "procs")  # the child-process scripts
CHILD_TIMEOUT = 300.0  # seconds a child may live before it counts as hung


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """Under pytest-xdist (``-n 2``; ``--dist loadgroup`` is in pyproject.toml's addopts) the
    ``spark`` tests go to one group and the ``broker`` tests (a Kafka broker or a Java client) to
    another, so at most one JVM of each kind runs; a module's tests that share a module-scoped
    fixture (a data directory, a TLS PKI) go to one worker, so the fixture starts once; the other
    tests are spread one by one. The fault suites (``faults``) count as ``serial``: their 2 s
    latency probes are guarantees measured under their own load. A wrapper, so the marks are
    there before pytest-xdist's own hook turns them into node-id suffixes."""
    for item in items:
        if item.get_closest_marker("faults"):
            item.add_marker(pytest.mark.serial)
        jvm = next((kind for kind in ("spark", "broker") if item.get_closest_marker(kind)), None)
        if jvm:
            # One group for every JVM left its chain the longest part of a 2-worker run (issue
            # 23); three JVMs at once (3 workers on 2 cores) failed their start-up timeouts.
            item.add_marker(pytest.mark.xdist_group(f"jvm-{jvm}"))
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d[-1].scope in ("module", "package", "session") for d in defs if d and d[-1].baseid):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    return (yield)


class _ProbeItem(pytest.Item):
    def runtest(self) -> None:  # never run: only its node id is looked at
        raise NotImplementedError


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs) -> None:
    """pytest-xdist hands a test's group to its scheduler as a ``@group`` suffix of the node id,
    which it writes into ``item._nodeid`` (xdist 3.8); pytest 9.2 reads the id from ``item._id``,
    so the suffix is lost and every test is scheduled on its own: two JVMs of a kind at once, a
    module's fixture started on both workers (pytest-dev/pytest-xdist#1386, open). pyproject.toml
    pins pytest < 9.2; with a pytest where xdist's write does not reach ``nodeid`` anyway the run
    stops here rather than run ungrouped."""
    if config.getvalue("dist") != "loadgroup":
        return
    probe = object.__new__(_ProbeItem)  # what xdist's worker does to each grouped item
    probe._nodeid = "tests/test_x.py::test@group"  # type: ignore[attr-defined]
    try:
        grouped = probe.nodeid == "tests/test_x.py::test@group"
    except AttributeError:
        grouped = False
    if not grouped:
        raise pytest.UsageError(
            f"pytest-xdist {importlib.metadata.version('pytest-xdist')} cannot group tests under "
            f"pytest {pytest.__version__} (it sets item._nodeid, which this pytest ignores: "
            "pytest-dev/pytest-xdist#1386): pip install 'pytest>=8,<9.2' (the [test] extra pins "
            "it), or run without -n"
        )


# A ``serial`` test (a bound it measures would not hold beside a busy neighbour) runs alone: under
# pytest-xdist every test holds a shared lock on a file of this run while it runs (setup, call and
# teardown, so a module's JVM start and stop count too), a ``serial`` test an exclusive one. The
# controller makes the lock directory and hands it to each worker it starts.
SERIAL_LOCKS = "kafkalite_serial_locks"
_locks_key = pytest.StashKey[str]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    stash = node.config.stash
    if _locks_key not in stash:
        stash[_locks_key] = tempfile.mkdtemp(prefix="kafkalite-xdist-")
    node.workerinput[SERIAL_LOCKS] = stash[_locks_key]


def pytest_configure(config: pytest.Config) -> None:
    """Tests stop children with SIGINT, as a user's Ctrl-C. A run started in the background of a
    shell without job control (``cmd &``, ``nohup``) has SIGINT ignored, and an ignored signal
    stays ignored across exec: every child (and pytest-xdist worker) would then shrug off the
    SIGINT, and ``kafkalite serve`` or ``produce`` never stop (issue 23: 4 failures of a 2-worker
    run started so). A Python handler is not inherited, so the children start with the default."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _locks_key in config.stash:
        shutil.rmtree(config.stash[_locks_key], ignore_errors=True)


@contextmanager
def _machine_share(locks: str, exclusive: bool) -> Iterator[None]:
    """A readers-writer lock across the workers, writer first: a ``serial`` test takes the gate,
    so no test starts beside it while it waits for the running ones to end."""
    with open(os.path.join(locks, "gate"), "a") as gate, open(os.path.join(locks, "share"), "a") as share:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(share, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    locks = getattr(item.config, "workerinput", {}).get(SERIAL_LOCKS)
    if locks is None:
        return (yield)
    with _machine_share(locks, exclusive=item.get_closest_marker("serial") is not None):
        return (yield)


@pytest.fixture
def ci_log(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]):
    """``ci_log(line)``: a line for the CI log (a fault run's seed and summary), shown even when
    the test passes. In one process it is printed as it comes; a pytest-xdist worker's output
    never reaches the terminal, so there it travels with the test's report (user_properties)
    and ``pytest_terminal_summary`` prints it at the end of the run."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")

    def log(line: str) -> None:
        if worker:
            request.node.user_properties.append(("ci_log", line))
        else:
            with capsys.disabled():
                print(line, flush=True)

    return log


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    for reports in terminalreporter.stats.values():
        for report in reports:
            lines = [v for k, v in getattr(report, "user_properties", ()) if k == "ci_log"]
            if lines and getattr(report, "when", None) == "call":
                terminalreporter.write_sep("-", f"CI log of {report.nodeid}")
                for line in lines:
                    terminalreporter.write_line(line)


@pytest.fixture
def part_dir(tmp_path):
    return str(tmp_path / "events-0")


class Spawn:
    """Starts Python child processes for one test and cleans up after it.

    ``spawn("crash_writer.py", part_dir, 3, stdout=subprocess.PIPE)`` runs tests/support/procs/crash_writer.py;
    ``spawn.code(SOURCE, part_dir)`` runs ``python -c SOURCE``, ``spawn.run(SOURCE, part_dir)`` the same
    to its end (a ``CompletedProcess``, output as text) and ``spawn.module("kafkalite", "serve")``
    ``python -m kafkalite serve``. Arguments are passed through
    ``str``; keyword arguments go to ``subprocess.Popen`` (``env`` is completed by ``child_env``).
    A child still alive after ``timeout`` seconds is killed and the test fails naming it (a hang
    becomes a failure, not a stuck CI run); at teardown every child still running is killed
    (SIGKILL also ends a SIGSTOPped one) and reaped."""

    def __init__(self) -> None:
        self._children: list[subprocess.Popen] = []
        self._timers: list[threading.Timer] = []
        self.hung: list[str] = []

    def __call__(self, script: str, *args: object, **kwargs) -> subprocess.Popen:
        path = os.path.join(PROCS, script)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no child script {path}: child scripts live in tests/support/procs/")
        return self._start([sys.executable, path, *map(str, args)], **kwargs)

    def code(self, source: str, *args: object, **kwargs) -> subprocess.Popen:
        return self._start([sys.executable, "-c", source, *map(str, args)], **kwargs)

    def run(
        self, source: str, *args: object, timeout: float = 60.0, env: dict | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``python -c SOURCE ARGS`` run to the end: stdout and stderr captured as text. A child
        still running after ``timeout`` is killed and the test fails naming it."""
        proc = self.code(
            source, *args, timeout=timeout, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def module(self, name: str, *args: object, **kwargs) -> subprocess.Popen:
        """``python -m name ARGS`` (for example the ``kafkalite`` command line)."""
        return self._start([sys.executable, "-m", name, *map(str, args)], **kwargs)

    def _start(
        self, argv: list[str], *, timeout: float = CHILD_TIMEOUT, env: dict | None = None, **kwargs
    ) -> subprocess.Popen:
        proc = subprocess.Popen(argv, env=child_env(env), **kwargs)
        self._children.append(proc)
        timer = threading.Timer(timeout, self._expire, (proc, argv, timeout))
        timer.daemon = True
        timer.start()
        self._timers.append(timer)
        return proc

    def _expire(self, proc: subprocess.Popen, argv: list[str], timeout: float) -> None:
        if proc.poll() is None:
            self.hung.append(f"{' '.join(argv)[:200]} (still running after {timeout:.0f} s)")
            proc.kill()

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        for proc in self._children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def spawn():
    """See ``Spawn``: start child processes that are killed when the test ends."""
    children = Spawn()
    try:
        yield children
    finally:
        children.close()
    if children.hung:
        pytest.fail("child process timed out and was killed: " + "; ".join(children.hung))


class JavaPrograms:
    """The programs of tests/java-client (one .java file each), compiled on first use against
    kafka-clients 4.x (``maven_jars``: fetched, or the test skipped; without javac the test
    skips, or fails in CI) and started as children of a test's ``spawn``."""

    def __init__(self, classes: str) -> None:
        self.classes = classes
        self.classpaths: dict[str, str] = {}

    def classpath(self, name: str) -> str:
        import maven_jars

        if name not in self.classpaths:
            source = Path(TESTS) / "java-client" / f"{name}.java"
            classes = Path(self.classes) / name
            classes.mkdir(parents=True, exist_ok=True)
            self.classpaths[name] = maven_jars.compiled(maven_jars.java_client_jars, source, classes)
        return self.classpaths[name]

    def start(self, spawn: Spawn, name: str, *args: object, **kwargs) -> subprocess.Popen:
        """``java NAME ARGS`` through ``spawn``, exec'd so that signals (SIGKILL, SIGTERM,
        SIGSTOP) reach the JVM itself; keyword arguments go to ``subprocess.Popen``."""
        argv = [
            "java",
            "-Xmx256m",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            self.classpath(name),
        ]
        return spawn.code(
            "import os, sys; os.execvp(sys.argv[1], sys.argv[1:])", *argv, name, *args, **kwargs
        )


@pytest.fixture(scope="session")
def java_program(tmp_path_factory) -> JavaPrograms:
    """See ``JavaPrograms``: tests/java-client's programs, each compiled once per session."""
    return JavaPrograms(str(tmp_path_factory.mktemp("java-programs")))


def kafka_python_records(partition_dir: str) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """Decode every batch of every .log in the directory with kafka-python, checking CRCs.
    Returns (offset, timestamp, key, value, headers) for each data record."""
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.memory_records import MemoryRecords

    out = []
    for path in sorted(glob.glob(os.path.join(partition_dir, "*.log"))):
        data = open(path, "rb").read()
        records = MemoryRecords(data)
        consumed = 0
        while records.has_next():
            batch = records.next_batch()
            assert isinstance(batch, DefaultRecordBatch)
            assert batch.validate_crc(), f"kafka-python rejects the CRC of a batch in {path}"
            consumed += batch.size_in_bytes
            if batch.is_control_batch:
                continue
            for r in batch:
                out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
        assert consumed == len(data), f"{path}: batches cover {consumed} of {len(data)} bytes"
    return out
