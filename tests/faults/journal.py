"""What a client observed, one JSON object per line, fsync'd before the client goes on, so a
SIGKILL (or the machine stopping) never loses an event the client acted upon.

Every event has ``ev`` (its kind) and ``t`` (``time.monotonic_ns()``: CLOCK_MONOTONIC is one
clock for every process of the machine, so events of different processes compare)."""

from __future__ import annotations

import argparse
import errno
import json
import os
import resource
import signal
import time
from collections.abc import Iterator
from typing import Any

#: Exit status of a child that stopped on a typed kafkalite error it could not go on after
#: (e.g. EMFILE while opening the producer); the controller restarts it.
EXIT_TYPED_ERROR = 3

#: A record's value: ``fi|<producer>|<seq>|`` and padding. The producer id names one
#: incarnation of one producer slot, so (producer, seq) is unique across the whole run.
VALUE_PREFIX = b"fi|"


def now() -> int:
    return time.monotonic_ns()


def encode_value(producer: str, seq: int, pad: int) -> bytes:
    return b"fi|%s|%d|" % (producer.encode(), seq) + b"x" * pad


def decode_value(value: bytes | None) -> tuple[str, int] | None:
    """(producer, seq) of a value written by producer_child, None for anything else."""
    if not value or not value.startswith(VALUE_PREFIX):
        return None
    parts = value.split(b"|", 3)
    if len(parts) < 4:
        return None
    try:
        return parts[1].decode(), int(parts[2])
    except ValueError:
        return None


def record_row(r: Any) -> list:
    """How a consumed record is journaled: [offset, producer, seq, key] (kafkalite's and
    kafka-python's records both have offset, value, key)."""
    ident = decode_value(r.value)
    return [r.offset, *(ident or (None, None)), None if r.key is None else r.key.decode(errors="replace")]


class Journal:
    """``fsync=False`` for an observer that is never killed (the server suite's probe): its
    lines reach the file at once all the same (one write(2) each, O_APPEND)."""

    def __init__(self, path: str, fsync: bool = True) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.fsync = fsync

    def write(self, ev: str, **fields: Any) -> None:
        fields["ev"] = ev
        fields.setdefault("t", now())
        os.write(self.fd, (json.dumps(fields, separators=(",", ":")) + "\n").encode())
        if self.fsync:
            os.fsync(self.fd)


def read(path: str) -> Iterator[dict[str, Any]]:
    """The events of one journal; a torn last line (a kill inside write) is skipped."""
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
    except FileNotFoundError:
        return


def error_fields(e: BaseException) -> dict[str, Any]:
    """How a typed error is journaled, and which injected fault it is (ENOSPC, EMFILE, ...)."""
    code = getattr(e, "errno", None)
    text = str(e)
    if type(e).__module__.partition(".")[0] == "kafka":  # kafka-python's errno is Kafka's error code
        return {"err": type(e).__name__, "errno": code, "fault": None, "msg": text[:300]}
    fault = None
    if code == errno.ENOSPC or "No space left" in text:
        fault = "ENOSPC"
    elif code in (errno.EMFILE, errno.ENFILE) or "Too many open files" in text:
        fault = "EMFILE"
    elif code == errno.EIO or "Input/output error" in text:
        fault = "EIO"
    return {"err": type(e).__name__, "errno": code, "fault": fault, "msg": text[:300]}


def child_args(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--name", required=True, help="unique per incarnation, e.g. p1.3")
    parser.add_argument("--topics", required=True, help="comma-separated")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument(
        "--nofile",
        type=int,
        default=0,
        help="lower RLIMIT_NOFILE to this (0: leave it)",
    )
    return parser


class Stop:
    """SIGTERM asks a child to finish its step, close its client cleanly and exit 0."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._on_term)

    def _on_term(self, *_: object) -> None:
        self.requested = True


def lower_nofile(limit: int) -> None:
    """Called after the journal is open and kafkalite imported, so the limit bites kafkalite."""
    if limit > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
