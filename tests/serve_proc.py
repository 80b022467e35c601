"""``kafkalite serve`` in a child process on a free loopback port, for the tests that need the
server in another process (to kill -9 it, or to run the CLI) and for benches/bench_server.py."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_serve(
    start: Callable[..., subprocess.Popen], data_dir: object, *extra: str
) -> tuple[subprocess.Popen, str]:
    """Run ``kafkalite serve`` through ``start`` (``spawn.module`` in tests: called as
    ``start("kafkalite", "serve", ARGS..., stderr=PIPE, text=True)``), wait for the line that
    says where it listens, and return the process and its ``bootstrap.servers``. ``extra``:
    more CLI arguments (``--log-level WARNING`` keeps an unread stderr pipe from filling)."""
    port = free_port()
    kwargs: dict[str, Any] = {"stderr": subprocess.PIPE, "text": True}
    proc = start(
        "kafkalite", "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}", *extra, **kwargs
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if f"127.0.0.1:{port}" not in line:
        proc.kill()
        raise RuntimeError(f"kafkalite serve did not start: {line!r}{proc.stderr.read()}")
    return proc, f"127.0.0.1:{port}"
