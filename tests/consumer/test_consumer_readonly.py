"""Read-only means read-only (issue 10 point 3, issue 9 point 12): a consumer without a group
creates, changes and locks nothing in the data directory; where the notify file cannot be used
it polls (``kafkalite.wakeup.POLL_INTERVAL_MS``); a group consumer that cannot write is refused
up front with a typed error."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import pytest
from kafkalite import Admin, Consumer, Producer, TopicPartition
from kafkalite.cli import main
from kafkalite.datadir import NOTIFY_FILE
from kafkalite.errors import ReadOnlyDataDirError
from kafkalite.wakeup import POLL_INTERVAL_MS, RECHECK_S
from test_broker_layout import write_broker_partition

NOBODY = 65534


def snapshot(root: str) -> dict[str, tuple[int, int, int, bytes]]:
    """Every path under root: mode, size, mtime and contents."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            data = open(path, "rb").read() if os.path.isfile(path) else b""
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, data)
    return out


@pytest.fixture
def broker_dir(tmp_path):
    path = str(tmp_path / "broker")
    os.makedirs(path)
    expected = write_broker_partition(os.path.join(path, "events-0"))
    return path, expected


def test_reading_a_broker_directory_changes_nothing(broker_dir, capsys):
    path, expected = broker_dir
    before = snapshot(path)
    time.sleep(0.01)  # a changed file would get a later mtime
    with Consumer(path, "events", auto_offset_reset="earliest") as consumer:
        assert consumer._notifier.polling
        got = []
        deadline = time.monotonic() + 10
        while len(got) < len(expected) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=100).values():
                got += [(r.offset, r.value) for r in records]
        assert got == expected
        assert consumer.poll(timeout_ms=120) == {}  # a caught-up poll waits by polling
    with Consumer(path, consumer_timeout_ms=200, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("events", 0)])
        assert [(r.offset, r.value) for r in consumer] == expected
    assert main(["--data-dir", path, "consume", "events", "--from-beginning", "--max-messages", "3"]) == 0
    assert main(["--data-dir", path, "topics", "describe", "events"]) == 0
    assert "events" in capsys.readouterr().out
    with pytest.raises(ReadOnlyDataDirError, match="broker's log directory") as err:
        Consumer(path, "events", group_id="g")
    assert isinstance(err.value, PermissionError)
    assert snapshot(path) == before


def test_a_plain_consumer_does_not_create_the_notify_file_and_attaches_when_a_producer_does(tmp_path):
    data = str(tmp_path)
    Admin(data).create_topic("t", 1)
    consumer = Consumer(data, "t", auto_offset_reset="earliest")
    assert consumer.poll(timeout_ms=60) == {}
    assert not os.path.exists(os.path.join(data, NOTIFY_FILE)) and consumer._notifier.polling
    with Producer(data) as producer:
        producer.send("t", value=b"a").get(timeout=5)
    time.sleep(RECHECK_S)
    assert [r.value for rs in consumer.poll(timeout_ms=1000).values() for r in rs] == [b"a"]
    assert not consumer._notifier.polling  # the producer made the file: futex wake-ups now
    consumer.close()


READ_ONLY_CONSUMER = r"""
import os, sys, time
from kafkalite import Consumer  # imported first: nobody may not read the interpreter's files
from kafkalite.errors import ReadOnlyDataDirError
os.setgid(65534)
os.setuid(65534)
data, expected = sys.argv[1], int(sys.argv[2])
try:
    Consumer(data, "t", group_id="g")
    print("group consumer accepted", flush=True)
except ReadOnlyDataDirError as e:
    print("refused", type(e).__name__, isinstance(e, PermissionError), flush=True)
consumer = Consumer(data, "t", auto_offset_reset="earliest")
print("polling", consumer._notifier.polling, flush=True)
seen = 0
while seen < expected:
    for records in consumer.poll(timeout_ms=5000).values():
        for r in records:
            print("record", r.offset, r.value.decode(), time.time(), flush=True)
            seen += 1
consumer.close()
print("done", flush=True)
"""


def test_a_read_only_data_directory_is_consumed_by_polling(tmp_path, spawn):
    if os.geteuid() != 0:
        pytest.skip("needs root to run the consumer as another user (nobody)")
    base = tempfile.mkdtemp(dir="/tmp", prefix="kafkalite-ro-")  # traversable by nobody
    try:
        os.chmod(base, 0o755)
        data = os.path.join(base, "data")
        Admin(data).create_topic("t", 1)
        with Producer(data) as producer:
            for i in range(5):
                producer.send("t", value=b"v%d" % i)
        for dirpath, _dirnames, filenames in os.walk(data):
            os.chmod(dirpath, 0o555)
            for name in filenames:
                os.chmod(os.path.join(dirpath, name), 0o444)
        top = sorted(os.listdir(data))
        proc = spawn.code(READ_ONLY_CONSUMER, data, 10, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().split() == ["refused", "ReadOnlyDataDirError", "True"]
            assert proc.stdout.readline().split() == ["polling", "True"]
            first = [proc.stdout.readline().split() for _ in range(5)]
            assert [line[2] for line in first] == [f"v{i}" for i in range(5)]
            # A writer (root: the permissions do not stop it) appends; the consumer sees each
            # record within the polling bound (plus scheduling on a loaded machine).
            with Producer(data, linger_ms=0) as producer:
                for i in range(5, 10):
                    sent = time.time()
                    producer.send("t", value=b"v%d" % i).get(timeout=5)
                    line = proc.stdout.readline().split()
                    assert line[:3] == ["record", str(i), f"v{i}"]
                    assert float(line[3]) - sent < POLL_INTERVAL_MS / 1000 + 2.0
            assert proc.stdout.readline().strip() == "done"
            assert proc.wait(timeout=10) == 0
        finally:
            proc.kill()
            proc.wait()
        assert sorted(os.listdir(data)) == top
        owned_by_nobody = [p for p in snapshot(base) if os.lstat(os.path.join(base, p)).st_uid == NOBODY]
        assert owned_by_nobody == []
    finally:
        for dirpath, _, _ in os.walk(base):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(base)
