"""pyarrow is the optional extra ``kafkalite[arrow]``: the producer, consumer, CLI and Log work
without it, the pyarrow-returning methods say which extra to install, and Arrow data still
leaves through the PyCapsule interface (polars takes it with no pyarrow at all)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Make `import pyarrow` fail in the child, as in an environment without the extra.
NO_PYARROW = "import sys; sys.modules['pyarrow'] = None\n"


def run(code: str, cwd) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-c", NO_PYARROW + textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_clients_and_log_work_without_pyarrow(tmp_path):
    run(
        """
        from kafkalite import Admin, Consumer, Log, Producer
        from kafkalite.errors import MissingDependencyError

        Admin("data").create_topic("t", 2)
        with Producer("data") as p:
            p.send("t", b"v", key=b"k").get(5)
            p.send_batch("t", [b"a", b"b"], partition=1)
        with Consumer("data", "t", auto_offset_reset="earliest") as c:
            got = sorted(r.value for rs in c.poll(timeout_ms=1000).values() for r in rs)
        assert got == [b"a", b"b", b"v"], got
        with Log("data/t-1", readonly=True) as log:
            assert [r.value for r in log.records(0)] == [b"a", b"b"]
            try:
                log.read_arrow(0)
            except MissingDependencyError as e:
                assert "kafkalite[arrow]" in str(e) and isinstance(e, ImportError)
            else:
                raise AssertionError("read_arrow without pyarrow must say what to install")
            capsule_batch = log.read_arrow_c(0)
            assert hasattr(capsule_batch, "__arrow_c_array__")
        with Consumer("data", "t", auto_offset_reset="earliest") as c:
            try:
                c.poll_arrow()
            except MissingDependencyError as e:
                assert "kafkalite[arrow]" in str(e)
            else:
                raise AssertionError("poll_arrow without pyarrow must say what to install")
        """,
        tmp_path,
    )


@pytest.mark.slow
def test_polars_takes_arrow_data_without_pyarrow(tmp_path):
    run(
        """
        import polars as pl
        from kafkalite import Log

        with Log("data/t-0") as log:
            log.append_values([b"x", b"y", b"z"])
            frame = pl.DataFrame(log.read_arrow_c(0))
        assert frame.height == 3 and frame["value"].to_list() == [b"x", b"y", b"z"], frame
        assert "pyarrow" not in {m for m in sys.modules if sys.modules[m] is not None}
        """,
        tmp_path,
    )


def test_demo_runs_without_pyarrow(tmp_path):
    done = run(
        """
        import sys
        from kafkalite.cli import main
        sys.exit(main(["demo", "--records", "20000"]))
        """,
        tmp_path,
    )
    assert "kafkalite[arrow]" in done.stdout.replace("\n", "")
