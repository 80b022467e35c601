"""A consumer-group member for the multi-process group tests: logs every ownership change,
record and commit to its own file (unbuffered writes, so a SIGKILL loses none of it).

usage: group_member_proc.py DATA_DIR LOG_FILE GROUP STRATEGY
Lines: ``ASSIGN ns t:p,...``, ``REVOKE ns t:p,...``, ``R t p offset``, ``C t p offset``,
``CLOSED ns``. SIGTERM closes the consumer cleanly."""

from __future__ import annotations

import os
import signal
import sys
import time

from kafkalite import Consumer
from kafkalite.errors import CommitFailedError

data_dir, log_file, group, strategy = sys.argv[1:5]
fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
stop = False


def emit(line: str) -> None:
    os.write(fd, (line + "\n").encode())


def on_term(*_: object) -> None:
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
consumer = Consumer(
    data_dir,
    group_id=group,
    auto_offset_reset="earliest",
    enable_auto_commit=False,
    partition_assignment_strategy=[strategy],
    session_timeout_ms=6000,
    heartbeat_interval_ms=500,
)


def commit() -> None:
    positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
    try:
        consumer.commit({tp: off for tp, off in positions.items()})
    except CommitFailedError as e:
        emit(f"FENCED {e}")
        return
    for tp, off in positions.items():
        emit(f"C {tp.topic} {tp.partition} {off}")


class Listener:
    def on_partitions_revoked(self, revoked):
        commit()
        emit(f"REVOKE {time.monotonic_ns()} " + ",".join(f"{t}:{p}" for t, p in revoked))

    def on_partitions_assigned(self, assigned):
        emit(f"ASSIGN {time.monotonic_ns()} " + ",".join(f"{t}:{p}" for t, p in assigned))


consumer.subscribe(["t"], listener=Listener())
emit(f"READY {os.getpid()}")
while not stop:
    batches = consumer.poll(timeout_ms=50, max_records=200)
    for tp, records in batches.items():
        for r in records:
            emit(f"R {tp.topic} {tp.partition} {r.offset}")
    if batches:
        commit()
consumer.close(autocommit=False)
emit(f"CLOSED {time.monotonic_ns()}")
