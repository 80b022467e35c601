"""The README is true verbatim: every ```python block runs, in order, as one script in a fresh
working directory (later blocks build on earlier ones, as a reader would run them), and every
```bash block except the quick start's install commands runs with `bash -e` after them. The
Spark block runs in its own test (marker ``spark``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text()) if lang == language]


def is_spark(code: str) -> bool:
    return "spark." in code


def is_install(code: str) -> bool:
    return "pip install" in code


def run_python(code: str, cwd: Path, timeout: float) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"README code failed:\n{code}\n--- stderr ---\n{done.stderr[-4000:]}"


def test_readme_has_the_blocks_this_test_runs():
    assert len(blocks("python")) >= 3 and any(is_spark(b) for b in blocks("python"))
    assert any(is_install(b) for b in blocks("bash")) and any(not is_install(b) for b in blocks("bash"))


@pytest.mark.slow
def test_python_blocks_run_as_written(tmp_path):
    code = "\n\n".join(b for b in blocks("python") if not is_spark(b))
    run_python(code, tmp_path, timeout=300)


@pytest.mark.slow
def test_bash_blocks_run_as_written(tmp_path):
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    env.pop("KAFKALITE_DATA_DIR", None)
    for code in blocks("bash"):
        if is_install(code):
            continue
        done = subprocess.run(
            ["bash", "-e", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"README commands failed:\n{code}\n--- stderr ---\n{done.stderr[-4000:]}"


@pytest.mark.spark
def test_spark_block_runs_as_written(tmp_path):
    (spark_block,) = [b for b in blocks("python") if is_spark(b)]
    setup = "\n\n".join(b for b in blocks("python") if not is_spark(b))  # the topics it reads
    run_python(setup + "\n\n" + spark_block, tmp_path, timeout=600)
