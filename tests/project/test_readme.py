"""The README is true verbatim, read top to bottom as a new user would: every ```python and
```bash block runs in order in ONE working directory (later blocks build on earlier ones, bash
and Python interleaved as the README has them), each Python block in a fresh interpreter, so a
block that forgets an import fails here as it would for a reader.

What a block prints is checked too. The README's convention: a comment holding an arrow states
what is printed, ``# -> 7``, with any explanation before the arrow (``# a retry writes nothing
-> Produced(...)``); several printed lines are separated by ``; `` and ``...`` stands for any
text. The claims of a block must appear in its standard output in order (lines no claim speaks
of may come between; whitespace runs compare equal).

Not run: the quick start's install commands and ```console examples. The Spark blocks (and
the ``kafkalite serve`` walkthrough that ends with Spark) run only in the full suite (marker
``spark``), which runs every block in order; the quick loop runs the others in order, which is
why no other block may depend on a Spark block.

Two things differ from a reader's machine, nothing else: the Kafka port 9092 becomes a free port
(other tests and servers share the host), and Spark's Kafka connector, which a snippet fetches
with ``spark.jars.packages`` (Ivy), comes as the same artifacts through Maven (``maven_jars``): Ivy
also searches ~/.m2, and fails where Maven left a pom without its jar there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import maven_jars
import pytest
from serve_proc import free_port

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
#: A comment stating output: everything after the arrow.
CLAIM = re.compile(r"#.*?-> (.+)$")


class Block(NamedTuple):
    number: int  # among all fenced blocks of the README, from 0
    language: str
    code: str

    @property
    def spark(self) -> bool:
        return "spark." in self.code or "SparkSession" in self.code

    @property
    def install(self) -> bool:
        return "pip install" in self.code

    def claims(self) -> list[str]:
        """The printed lines the block's comments state, in order."""
        out = []
        for line in self.code.splitlines():
            found = CLAIM.search(line)
            if found:
                out += [part.strip() for part in found.group(1).split("; ")]
        return out


def blocks() -> list[Block]:
    return [Block(i, lang, body) for i, (lang, body) in enumerate(BLOCK.findall(README.read_text()))]


def runnable() -> list[Block]:
    return [b for b in blocks() if b.language in ("python", "bash") and not b.install]


def _normal(line: str) -> str:
    return " ".join(line.split())


def _matches(claim: str, line: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in _normal(claim).split("..."))
    return re.fullmatch(pattern, _normal(line)) is not None


def missing_claims(claims: list[str], stdout: str) -> list[str]:
    """The claims (in order) that the output does not bear out."""
    lines = iter(stdout.splitlines())
    for i, claim in enumerate(claims):
        if not any(_matches(claim, line) for line in lines):
            return claims[i:]
    return []


SPARK_KAFKA_PACKAGE = re.compile(
    r'\.config\("spark\.jars\.packages", "org\.apache\.spark:spark-sql-kafka-0-10_2\.13:([0-9.]+)"\)'
)


def as_tested(code: str, port: int) -> str:
    """The snippet with a free port for 9092 and, where it asks Ivy for spark-sql-kafka-0-10,
    the same release's jars fetched by Maven (checking that the release it names exists)."""
    code = code.replace("127.0.0.1:9092", f"127.0.0.1:{port}")
    wanted = SPARK_KAFKA_PACKAGE.search(code)
    if wanted:
        import pyspark

        version, jars = maven_jars.require(lambda: maven_jars.spark_kafka_jars(pyspark.__version__))
        assert wanted.group(1) == version, (
            f"the README names spark-sql-kafka {wanted.group(1)}, Maven has {version}"
        )
        code = SPARK_KAFKA_PACKAGE.sub(f'.config("spark.jars", "{",".join(jars)}")', code)
    return code


def reader_env(tmp_path: Path) -> dict[str, str]:
    """A reader's shell: `python` is this interpreter and `kafkalite` the checkout's command
    (kafkalite is not installed into the test environment; PYTHONPATH points at python/)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "kafkalite"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kafkalite "$@"\n')
    shim.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path}
    env.pop("KAFKALITE_DATA_DIR", None)
    return env


def run_block(block: Block, cwd: Path, env: dict[str, str], timeout: float = 300) -> None:
    code = as_tested(block.code, free_port())
    command = ["bash", "-e", "-c", code] if block.language == "bash" else [sys.executable, "-c", code]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    where = f"README block {block.number} ({block.language})"
    assert done.returncode == 0, (
        f"{where} failed:\n{block.code}\n--- stdout ---\n{done.stdout[-2000:]}\n--- stderr ---\n{done.stderr[-4000:]}"
    )
    unmet = missing_claims(block.claims(), done.stdout)
    assert not unmet, (
        f"{where} does not print what its comments say: {unmet}\n--- stdout ---\n{done.stdout[-4000:]}"
    )


def run_in_order(tmp_path: Path, *, spark: bool) -> None:
    work = tmp_path / "reader"
    work.mkdir()
    env = reader_env(tmp_path)
    for block in runnable():
        if block.spark and not spark:
            continue
        run_block(block, work, env, timeout=600 if block.spark else 300)


# -- the checks of the convention itself --------------------------------------------------------


def test_claims_are_read_from_comments():
    block = Block(
        0, "python", "print(x)  # a retry -> Produced(a=1)\n# why -> 3600000\nprint(1)  # no arrow\n"
    )
    assert block.claims() == ["Produced(a=1)", "3600000"]
    assert Block(0, "bash", "cmd  # from the files -> /home; /cart\n").claims() == ["/home", "/cart"]


def test_claims_must_be_printed_in_order():
    assert missing_claims(["1", "3"], "1\n2\n3\n") == []
    assert missing_claims(["3", "1"], "1\n2\n3\n") == ["1"]
    assert missing_claims(["alice SCRAM (x)"], "alice\tSCRAM  (x)\n") == []
    assert missing_claims(["R(t='e', offset=0, ts=...)"], "R(t='e', offset=0, ts=17)\n") == []
    assert missing_claims(["0"], "1\n") == ["0"]


def test_readme_has_the_blocks_this_test_runs():
    all_blocks = runnable()
    assert sum(b.language == "python" for b in all_blocks) >= 3
    assert any(b.spark and b.language == "python" for b in all_blocks)
    assert any(b.spark and b.language == "bash" for b in all_blocks)
    assert any(b.install for b in blocks())
    # The checks of printed values must not silently vanish with a reworded README.
    assert sum(len(b.claims()) for b in all_blocks if not b.spark) >= 10


def test_every_python_block_imports_what_it_uses():
    """Each block runs in an interpreter of its own: the names it uses from kafkalite are
    imported in the block itself (the runs below find the rest)."""
    for block in runnable():
        if block.language != "python":
            continue
        code = "\n".join(line.split("#")[0] for line in block.code.splitlines())  # not comments
        for name in ("Admin", "Producer", "Consumer", "Log", "Record"):
            used = re.search(rf"(?<![\w.]){name}\b", code)
            imported = re.search(rf"^from kafkalite import .*\b{name}\b", code, re.M)
            assert not used or imported, f"README block {block.number} uses {name} without importing it"
        if re.search(r"(?<![\w.])kafkalite\.", code):
            assert re.search(r"^import kafkalite\b", code, re.M), (
                f"README block {block.number}: import kafkalite"
            )


def test_readme_blocks_run_in_order_and_print_what_they_say(tmp_path):
    """Every block but Spark's, in order, in one directory (the quick loop's reading)."""
    run_in_order(tmp_path, spark=False)


@pytest.mark.spark
def test_every_readme_block_runs_in_order_with_spark(tmp_path):
    """The whole README in order, Spark blocks included."""
    run_in_order(tmp_path, spark=True)
