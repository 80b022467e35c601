"""The ``spawn`` fixture's promises (tests/conftest.py): a child imports the kafkalite under
test and the test helpers, ``run`` returns a child's output, a hung child is killed and reported, and every child (even a
SIGSTOPped one) is killed and reaped when the test ends."""

from __future__ import annotations

import signal
import subprocess

import kafkalite
import pytest
from conftest import Spawn

SLEEP = "import time; time.sleep(120)"


def test_a_child_imports_the_kafkalite_under_test_and_the_test_helpers(spawn):
    proc = spawn.code(
        "import kafkalite, procs.crash_writer; print(kafkalite.__file__)", stdout=subprocess.PIPE, text=True
    )
    assert proc.communicate(timeout=60)[0].strip() == kafkalite.__file__
    assert proc.returncode == 0


def test_a_hung_child_is_killed_after_its_timeout_and_reported():
    children = Spawn()
    proc = children.code(SLEEP, timeout=0.5)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    children.close()
    assert len(children.hung) == 1 and "still running after" in children.hung[0]


def test_run_returns_the_output_and_a_hung_run_is_killed_and_reported():
    children = Spawn()
    done = children.run("import sys; print(sys.argv[1]); sys.exit(3)", "arg")
    assert (done.returncode, done.stdout) == (3, "arg\n")
    hung = children.run(SLEEP, timeout=0.5)
    assert hung.returncode == -signal.SIGKILL
    children.close()
    assert len(children.hung) == 1 and "still running after" in children.hung[0]


def test_close_kills_and_reaps_every_child_even_a_stopped_one():
    children = Spawn()
    running, stopped = children.code(SLEEP), children.code(SLEEP)
    stopped.send_signal(signal.SIGSTOP)
    children.close()
    assert running.returncode == -signal.SIGKILL and stopped.returncode == -signal.SIGKILL
    assert children.hung == []


def test_an_unknown_script_names_the_folder():
    with pytest.raises(FileNotFoundError, match="tests/support/procs"):
        Spawn()("no_such_child.py")
