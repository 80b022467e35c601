"""Issue 12 point 4: a thread that panics while it holds a lock (a bug, injected here with the
``panic`` fail point) leaves what the lock guards half-updated. The next call must raise
``LogPoisonedError``: not a ``PanicException``, not a hang, not success on that state."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import child_env

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
    from kafkalite import Admin, Consumer
    from serve_proc import free_port, serve_on

    data = tmp_path / "data"
    Admin(str(data)).create_topic("t", partitions=1)
    env = child_env()
    env["KAFKALITE_FAILPOINTS"] = "server.produce=panic@1"
    port = free_port()
    server = serve_on(spawn.module, data, port, env=env)
    producer = KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{port}",
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
    assert server.poll() is None, "the server must survive a request's panic"
    server.terminate()
    _, stderr = server.communicate(timeout=30)
    assert outcomes[0] is not int  # the panicking request got no acknowledgement
    assert isinstance(outcomes[0], type)
    assert outcomes[1] is KafkaStorageError
    assert outcomes[2] == 0  # reopened (recovered): the panicked request's record was never appended
    assert "ERROR" in stderr and "panicked while it held the log of" in stderr
    assert "PanicException" not in stderr
    with Consumer(str(data), "t", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        assert [r.value for r in c] == [b"v2"]
