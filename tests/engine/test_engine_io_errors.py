"""Engine I/O errors carry their cause (issue 11 point 5): each arrives as the kafkalite class that
is also the builtin Python raises for its errno (FileNotFoundError, PermissionError,
NotADirectoryError, OSError for ENOSPC/EMFILE), with ``errno`` and ``filename`` set and a
message naming the path, as ``kafkalite.errors.typed_io_errors`` does for the Python layer.

Faults that need a process of their own (fail points are read once per process, a lowered
descriptor limit, a non-root user for permissions) run in a child that reports the exception."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import kafkalite
import pytest
from kafkalite import Log

REPORT = r"""
import json, os, sys
import kafkalite
def report(e):
    print("RESULT " + json.dumps({
        "classes": [c.__name__ for c in type(e).__mro__],
        "errno": e.errno, "filename": e.filename, "message": str(e),
        "kafkalite": isinstance(e, kafkalite.KafkaliteIOError),
    }), flush=True)
"""


def run_child(code: str, *args: str, failpoints: str | None = None) -> dict:
    env = dict(os.environ)
    env.pop("KAFKALITE_FAILPOINTS", None)
    if failpoints:
        env["KAFKALITE_FAILPOINTS"] = failpoints
    done = subprocess.run(
        [sys.executable, "-c", REPORT + code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"child failed ({done.returncode}): {done.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def test_readonly_open_of_a_missing_partition_is_file_not_found(tmp_path):
    missing = str(tmp_path / "nope" / "t-0")
    with pytest.raises(FileNotFoundError) as failure:
        Log(missing, readonly=True)
    e = failure.value
    assert isinstance(e, kafkalite.KafkaliteFileNotFoundError)
    assert isinstance(e, kafkalite.KafkaliteIOError) and isinstance(e, kafkalite.KafkaliteError)
    assert e.errno == errno.ENOENT
    assert e.filename == missing
    assert missing in str(e)
    assert not (tmp_path / "nope").exists(), "a read-only open must not create anything"


def test_readonly_open_of_a_file_is_not_a_directory(tmp_path):
    decoy = tmp_path / "decoy-0"
    decoy.write_bytes(b"not a partition")
    with pytest.raises(NotADirectoryError) as failure:
        Log(str(decoy), readonly=True)
    e = failure.value
    assert isinstance(e, kafkalite.KafkaliteNotADirectoryError)
    assert e.errno == errno.ENOTDIR
    assert e.filename == str(decoy)
    assert "is not a partition directory" in str(e) and str(decoy) in str(e)


PERMISSION_DENIED = r"""
from kafkalite import Log
path = sys.argv[1]
if os.geteuid() == 0:
    os.setuid(65534)  # root reads any file: drop to nobody so the mode counts
try:
    Log(path, readonly=True)
    print("opened", flush=True)
except Exception as e:
    report(e)
"""


def test_permission_denied_segment_is_permission_error():
    # A world-traversable directory of the test's own: pytest's tmp_path sits under a 0700
    # directory, which the unprivileged child could not enter at all.
    root = pathlib.Path(tempfile.mkdtemp(prefix="kafkalite-permission-"))
    try:
        os.chmod(root, 0o755)
        part = root / "t-0"
        log = Log(str(part))
        log.append_values([b"a", b"b"])
        log.close()
        segment = part / "00000000000000000000.log"
        os.chmod(segment, 0o000)
        got = run_child(PERMISSION_DENIED, str(part))
    finally:
        shutil.rmtree(root)
    assert got["kafkalite"] and "PermissionError" in got["classes"], got
    assert "KafkalitePermissionError" in got["classes"]
    assert got["errno"] == errno.EACCES
    assert got["filename"] == str(segment), got
    assert str(segment) in got["message"]


ENOSPC_ON_APPEND = r"""
from kafkalite import Log
log = Log(sys.argv[1])  # a new partition's open reserves blocks twice (fail point hits 1, 2)
log.append_values([b"small"])
try:
    # Past the first 64 KiB reservation: the third reservation, for this append, fails.
    log.append_values([b"x" * 1000] * 200)
    print("appended", flush=True)
except Exception as e:
    report(e)
"""


def test_enospc_on_append_is_oserror_with_errno_and_segment(tmp_path):
    part = tmp_path / "t-0"
    got = run_child(ENOSPC_ON_APPEND, str(part), failpoints="segment.reserve=enospc@3")
    assert got["kafkalite"] and "OSError" in got["classes"], got
    assert got["errno"] == errno.ENOSPC
    assert got["filename"] == str(part / "00000000000000000000.log")
    assert "00000000000000000000.log" in got["message"] and "disk full" in got["message"]


EMFILE_ON_OPEN = r"""
import resource
from kafkalite import Log
root = sys.argv[1]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 24, hard))
logs = []
try:
    for i in range(1000):
        logs.append(Log(os.path.join(root, f"t-{i}")))
    print("no limit hit", flush=True)
except Exception as e:
    report(e)
"""


def test_descriptor_limit_is_oserror_emfile_naming_the_file(tmp_path):
    got = run_child(EMFILE_ON_OPEN, str(tmp_path))
    assert got["kafkalite"] and "OSError" in got["classes"], got
    assert got["errno"] == errno.EMFILE
    assert got["filename"] and got["filename"].startswith(str(tmp_path)), got
    assert got["filename"] in got["message"] or os.path.dirname(got["filename"]) in got["message"]


EMFILE_FAILPOINT = r"""
from kafkalite import Log
try:
    Log(sys.argv[1])
    print("opened", flush=True)
except Exception as e:
    report(e)
"""


def test_failpoint_emfile_without_a_file_of_its_own_names_the_partition(tmp_path):
    # The fail point's error names no file; the binding names the partition it was opening.
    part = tmp_path / "t-0"
    got = run_child(EMFILE_FAILPOINT, str(part), failpoints="segment.create.log=emfile")
    assert got["kafkalite"] and got["errno"] == errno.EMFILE, got
    assert got["filename"] == str(part)
    assert str(part) in got["message"]


def test_python_layer_io_errors_use_the_same_classes(tmp_path):
    with pytest.raises(FileNotFoundError) as failure:
        with kafkalite.errors.typed_io_errors("cannot read the decoy"):
            open(tmp_path / "missing")
    assert isinstance(failure.value, kafkalite.KafkaliteFileNotFoundError)
    assert failure.value.filename == str(tmp_path / "missing")
    made = kafkalite.errors.io_error(errno.ENOSPC, "cannot write x", "x")
    assert type(made) is kafkalite.KafkaliteIOError and made.errno == errno.ENOSPC and made.filename == "x"
