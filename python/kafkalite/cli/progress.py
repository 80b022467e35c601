"""Progress of the command line's long commands (``produce --file``, ``demo``, ``dump-log``,
``topics describe``): a rich bar on stderr when stderr is a terminal, and nothing at all
otherwise, so piped or redirected output stays byte for byte what it was. rich decides what a terminal is (``isatty``, and its ``FORCE_COLOR`` / ``TTY_COMPATIBLE``
environment overrides)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def quiet() -> Iterator[Callable[[float], None]]:
    """No progress (``advance`` does nothing)."""
    yield lambda n: None


@contextmanager
def progress(description: str, total: float, in_bytes: bool = False) -> Iterator[Callable[[float], None]]:
    """Yield ``advance(n)`` towards ``total`` (items, or bytes shown as a percentage). The
    display is transient: it is erased when the block ends, so a terminal keeps only the
    command's own output."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        with quiet() as advance:
            yield advance
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    done = TaskProgressColumn() if in_bytes else MofNCompleteColumn()
    # Lines printed to stdout meanwhile go above the bar only when stdout is that terminal too;
    # redirected stdout is left alone (rich would otherwise send it to stderr).
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        done,
        TimeRemainingColumn(),
        console=console,
        transient=True,
        redirect_stdout=sys.stdout.isatty(),
        redirect_stderr=False,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
