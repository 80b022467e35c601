"""Progress of the long CLI commands (issue 23 item 6): ``produce --file``, ``demo``, ``dump-log``
and ``topics describe`` show a rich bar or live count when stderr is a terminal (run here under
a pseudo-terminal), and print nothing extra when piped: the piped output is exactly what the
command prints without progress, and stdout redirected to a file stays clean while stderr is a
terminal."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import termios

import pytest
from helpers import run_cli
from kafkalite import Admin, Log, Record
from kafkalite.dump import dump_partition

# rich's terminal overrides would defeat the piped half; TERM must name a real terminal.
_ENV = {
    k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "COLUMNS")
}
_ENV["TERM"] = "xterm-256color"


def _in_terminal(spawn, *args: str, stdout_to_terminal: bool = True) -> tuple[int, bytes, bytes]:
    """Run ``kafkalite ARGS`` with stderr (and stdout unless told) on a pseudo-terminal of
    120x40; returns (exit status, what the terminal showed, stdout when it was a pipe)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = spawn.module(
        "kafkalite", *args,
        stdin=subprocess.DEVNULL,
        stdout=slave if stdout_to_terminal else subprocess.PIPE,
        stderr=slave,
        env=_ENV,
    )  # fmt: skip
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every holder of the terminal's other end is gone
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    piped = proc.stdout.read() if proc.stdout else b""
    return proc.wait(), shown, piped


@pytest.fixture
def big_partition(tmp_path) -> str:
    """A partition of several segments (dump-log's progress counts their bytes)."""
    part = str(tmp_path / "events-0")
    with Log(part, segment_bytes=64 * 1024) as log:
        for start in range(0, 4000, 200):
            log.append([Record(b"value-%d-" % i + b"x" * 100) for i in range(start, start + 200)])
    return part


@pytest.fixture
def many_partitions(tmp_path) -> str:
    data_dir = str(tmp_path / "data")
    admin = Admin(data_dir)
    for t in range(4):
        admin.create_topic(f"topic-{t}", partitions=25)
    return data_dir


def _bar_shown(shown: bytes, description: bytes) -> bool:
    return description in shown and ("━".encode() in shown or b"%" in shown)


def test_dump_log_shows_progress_on_a_terminal_and_nothing_when_piped(spawn, big_partition):
    expected = io.StringIO()
    dump_partition(big_partition, expected)
    status, shown, _ = _in_terminal(spawn, "dump-log", big_partition)
    assert status == 0, shown[-2000:]
    assert _bar_shown(shown, b"dump-log"), shown[-2000:]
    assert b"Dumping " in shown
    # stdout to a file, stderr on the terminal: the file gets exactly the dump, the bar stays on stderr
    status, shown, piped = _in_terminal(spawn, "dump-log", big_partition, stdout_to_terminal=False)
    assert status == 0 and piped.decode() == expected.getvalue()
    assert _bar_shown(shown, b"dump-log") and b"Dumping " not in shown
    done = run_cli("dump-log", big_partition, env=_ENV)
    assert done.returncode == 0
    assert done.stdout.decode() == expected.getvalue()
    assert done.stderr == b"0 problem(s) found\n"


def test_topics_describe_shows_progress_on_a_terminal_and_nothing_when_piped(spawn, many_partitions):
    status, shown, _ = _in_terminal(spawn, "--data-dir", many_partitions, "topics", "describe")
    assert status == 0, shown[-2000:]
    assert _bar_shown(shown, b"describe topics"), shown[-2000:]
    done = run_cli("--data-dir", many_partitions, "topics", "describe", env=_ENV)
    assert done.returncode == 0 and done.stderr == b""
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 4 * 26 and b"\x1b" not in done.stdout
    assert lines[0].startswith("Topic: topic-0\tPartitionCount: 25\tConfigs: cleanup.policy=delete,")
    assert lines[1] == "\tTopic: topic-0\tPartition: 0\tStartOffset: 0\tEndOffset: 0\tSize: 0\tSegments: 0"


def test_produce_file_shows_progress_on_a_terminal_and_nothing_when_piped(spawn, tmp_path):
    source = tmp_path / "lines.txt"
    source.write_bytes(b"".join(b"line %d\n" % i for i in range(50_000)))
    data_dir = str(tmp_path / "data")
    status, shown, _ = _in_terminal(spawn, "--data-dir", data_dir, "produce", "t", "--file", str(source))
    assert status == 0, shown[-2000:]
    assert _bar_shown(shown, b"produce"), shown[-2000:]
    assert b"Produced 50000 records to t." in shown
    # stdout redirected, stderr on the terminal: the bar is on stderr, stdout gets nothing
    status, shown, piped = _in_terminal(
        spawn, "--data-dir", data_dir, "produce", "t", "--file", str(source), stdout_to_terminal=False
    )
    assert (status, piped) == (0, b"") and _bar_shown(shown, b"produce"), (piped[-500:], shown[-500:])
    done = run_cli("--data-dir", data_dir, "produce", "t", "--file", str(source), env=_ENV)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"Produced 50000 records to t.\n")


@pytest.mark.slow
def test_demo_shows_progress_on_a_terminal_and_nothing_when_piped(spawn):
    status, shown, _ = _in_terminal(spawn, "demo", "--records", "300000")
    assert status == 0, shown[-2000:]
    for phase in (b"send", b"send_batch", b"consume"):
        assert _bar_shown(shown, phase), (phase, shown[-2000:])
    done = run_cli("demo", "--records", "300000", env=_ENV, timeout=120)
    assert done.returncode == 0 and done.stderr == b""
    assert b"\x1b" not in done.stdout and "━".encode() not in done.stdout
    assert done.stdout.count(b"\n") == 10, done.stdout.decode()
