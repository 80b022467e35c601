"""Issue 12 point 4: a thread that panics while it holds a lock (a bug, injected here with the
``panic`` fail point) leaves what the lock guards half-updated. The next call must raise
``LogPoisonedError``: not a ``PanicException``, not a hang, not success on that state."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import child_env
from kafkalite import Admin, Consumer
from serve_proc import free_port, serve_on

# The third send panics after its record went into the batch and before it had a future.
PRODUCER = r"""
import json, sys
from kafkalite import Admin, Producer, LogPoisonedError, KafkaliteError

def outcome(f):
    try:
        f()
        return "ok"
    except BaseException as e:
        return type(e).__name__ + ("/poisoned" if isinstance(e, LogPoisonedError) else "")

data = sys.argv[1]
Admin(data).create_topic("t", partitions=1)
p = Producer(data, linger_ms=60_000)
first = [p.send("t", b"v%d" % i) for i in range(2)]
errbacks = []
first[0].add_errback(lambda e: errbacks.append(type(e).__name__))
got = {
    "panicking_send": outcome(lambda: p.send("t", b"v2")),
    "next_send": outcome(lambda: p.send("t", b"v3")),
    "queued_futures": [outcome(lambda f=f: f.get(timeout=5)) for f in first],
    "errbacks": errbacks,
    "close": outcome(lambda: p.close(timeout=5)),
}
print("RESULT " + json.dumps(got), flush=True)
"""


def run(code: str, *args: str, failpoints: str) -> dict:
    env = child_env()
    env["KAFKALITE_FAILPOINTS"] = failpoints
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"child failed ({done.returncode}): {done.stderr[-3000:]}"
    assert "PanicException" not in done.stderr
    return json.loads(lines[-1][len("RESULT ") :])


def serve_with_failpoint(spawn, tmp_path, failpoints: str) -> tuple[subprocess.Popen, str]:
    """``kafkalite serve`` (INFO log on stderr) on a data directory with topic "t" (1 partition),
    its fail points set; returns the process and its bootstrap address."""
    data = tmp_path / "data"
    Admin(str(data)).create_topic("t", partitions=1)
    env = child_env()
    env["KAFKALITE_FAILPOINTS"] = failpoints
    port = free_port()
    return serve_on(spawn.module, data, port, env=env), f"127.0.0.1:{port}"


def stop_survivor(server: subprocess.Popen) -> str:
    """Stop a server that must have survived its request's panic; its stderr."""
    assert server.poll() is None, "the server must survive a request's panic"
    server.terminate()
    stderr = server.communicate(timeout=30)[1]
    assert "PanicException" not in stderr
    return stderr


def test_a_panic_in_the_producers_accumulator_fails_its_futures_and_later_sends(tmp_path):
    got = run(PRODUCER, str(tmp_path / "data"), failpoints="producer.accumulate=panic@3")
    assert got["panicking_send"] == "LogPoisonedError/poisoned"
    assert got["next_send"] == "LogPoisonedError/poisoned"
    # The records queued before the panic are in a batch nobody will append: their futures fail
    # (rather than wait forever), and their errbacks run.
    assert got["queued_futures"] == ["LogPoisonedError/poisoned"] * 2
    assert got["errbacks"] == ["LogPoisonedError"]
    # Closing must not hang; it may report the poisoned accumulator, typed.
    assert got["close"] in ("ok", "LogPoisonedError/poisoned")


def test_a_panic_holding_a_served_partition_answers_storage_errors_until_it_is_reopened(tmp_path, spawn):
    """The server: a Produce request panics holding the partition's log. The next request on it
    gets KAFKA_STORAGE_ERROR (with an ERROR line on the server's log), not the half-updated log;
    the partition is then reopened (which recovers) and takes records again."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaStorageError

    server, bootstrap = serve_with_failpoint(spawn, tmp_path, "server.produce=panic@1")
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        retries=0,
        enable_idempotence=False,
        request_timeout_ms=5000,
    )
    try:
        outcomes = []
        for i in range(3):
            try:
                outcomes.append(producer.send("t", b"v%d" % i).get(timeout=15).offset)
            except Exception as e:  # the failure's type is what is checked
                outcomes.append(type(e))
    finally:
        producer.close(timeout=5)
    stderr = stop_survivor(server)
    assert isinstance(outcomes[0], type)  # the panicking request got no acknowledgement (an error type)
    assert outcomes[1] is KafkaStorageError
    assert outcomes[2] == 0  # reopened (recovered): the panicked request's record was never appended
    assert "ERROR" in stderr and "panicked while it held the log of" in stderr
    with Consumer(str(tmp_path / "data"), "t", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        assert [r.value for r in c] == [b"v2"]


def test_a_panic_holding_the_groups_state_drops_it_and_the_members_rejoin(tmp_path, spawn):
    """The server: a Heartbeat panics holding the consumer groups' state. The next request does
    not carry on with that state: it is dropped (logged at ERROR), as when Kafka's coordinator
    moves, and the member, told UNKNOWN_MEMBER_ID, rejoins and is assigned its partition again."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    server, bootstrap = serve_with_failpoint(spawn, tmp_path, "server.group_heartbeat=panic@1")
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "g",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
    )
    assigned: list[int] = []
    consumer.subscribe(["t"], on_assign=lambda c, parts: assigned.extend(p.partition for p in parts))
    deadline = time.monotonic() + 40
    while len(assigned) < 2 and time.monotonic() < deadline:
        consumer.poll(0.1)
    consumer.close()
    stderr = stop_survivor(server)
    assert assigned == [0, 0], stderr[-3000:]  # assigned, then again after rejoining
    assert "ERROR" in stderr and "dropped the state of 1 group(s)" in stderr, stderr[-3000:]
