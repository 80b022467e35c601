"""A writer whose open fails part-way raises a typed error (never pyo3's PanicException, which
`except Exception` does not catch) and leaves no clean-shutdown marker: it recovered nothing,
so the next writer must not trust the files."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from kafkalite import KafkaliteError, Log

MARKER = ".kafkalite-clean-shutdown"


def crashed_log(part_dir: str) -> None:
    """A partition whose writer died: a segment and no marker."""
    with Log(part_dir, segment_bytes=4096) as log:
        for i in range(50):
            log.append_values([b"%d" % i + b"x" * 100])
    os.remove(os.path.join(part_dir, MARKER))


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("existing", [False, True])
def test_a_failed_open_raises_a_typed_error_and_leaves_no_marker(part_dir, shared, existing):
    if existing:
        crashed_log(part_dir)
    else:
        os.makedirs(part_dir)
    # A "segment" the writer cannot open: a directory with a segment's name, after the others.
    os.mkdir(os.path.join(part_dir, "00000000000000099999.log"))
    # Run in a child: on the old code the panic in Drop could abort the interpreter.
    code = (
        "import sys, gc\n"
        "from kafkalite import Log, KafkaliteError\n"
        "try:\n"
        f"    Log(sys.argv[1], shared_writers={shared})\n"
        "except KafkaliteError as e:\n"
        "    assert isinstance(e, OSError), repr(e)\n"
        "    print('typed', e)\n"
        "gc.collect()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, part_dir],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "typed" in proc.stdout, proc.stdout + proc.stderr
    assert "PanicException" not in proc.stderr and "panicked" not in proc.stderr, proc.stderr
    assert not os.path.exists(os.path.join(part_dir, MARKER))
    os.rmdir(os.path.join(part_dir, "00000000000000099999.log"))
    if existing:
        with Log(part_dir) as log:  # recovered properly, as after a crash
            assert log.end_offset == 50


def test_open_failure_is_catchable_in_process(part_dir):
    os.makedirs(part_dir)
    os.mkdir(os.path.join(part_dir, "00000000000000000000.log"))
    with pytest.raises(KafkaliteError):
        Log(part_dir)
