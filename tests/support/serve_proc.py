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


def serve_on(
    start: Callable[..., subprocess.Popen], data_dir: object, port: int, *extra: str, **kwargs: Any
) -> subprocess.Popen:
    """Run ``kafkalite serve`` on 127.0.0.1:``port`` through ``start`` (``spawn.module`` in tests:
    called as ``start("kafkalite", "serve", ARGS..., stderr=PIPE, text=True, **kwargs)``) and
    return the process once the line that says where it listens came. ``extra``: more CLI
    arguments (``--log-level WARNING`` keeps an unread stderr pipe from filling); ``kwargs``: more
    for ``start`` (``env=``)."""
    kwargs = {"stderr": subprocess.PIPE, "text": True, **kwargs}
    proc = start(
        "kafkalite", "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}", *extra, **kwargs
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if f"127.0.0.1:{port}" not in line:
        proc.kill()
        raise RuntimeError(f"kafkalite serve did not start: {line!r}{proc.stderr.read()}")
    return proc


def start_serve(
    start: Callable[..., subprocess.Popen], data_dir: object, *extra: str
) -> tuple[subprocess.Popen, str]:
    """``serve_on`` a free port; returns the process and its ``bootstrap.servers``."""
    port = free_port()
    return serve_on(start, data_dir, port, *extra), f"127.0.0.1:{port}"
