"""The package is typed: the hand-written stubs match the native module (mypy's stubtest),
and the Python sources type-check against them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=HERE)


@pytest.mark.slow
def test_stubs_match_the_native_module():
    pytest.importorskip("mypy")
    result = run(
        "mypy.stubtest", "kafkalite._native", "--allowlist", os.path.join(HERE, "stubtest-allowlist.txt")
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow  # mypy over the package: make lint runs it too
def test_package_type_checks():
    pytest.importorskip("mypy")
    import kafkalite

    installed = os.path.dirname(kafkalite.__file__)
    # -p checks the imported package as a package (a path inside site-packages would make
    # mypy treat site-packages itself as source); pyproject.toml's [tool.mypy] is the one
    # configuration `make lint` uses too (pyarrow has no stubs: ignored there, not here).
    config = os.path.join(HERE, os.pardir, os.pardir, "pyproject.toml")
    result = run("mypy", "--config-file", config, "--no-incremental", "-p", "kafkalite")
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.path.exists(os.path.join(installed, "py.typed"))
