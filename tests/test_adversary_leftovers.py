"""The three holes session 5's adversary left open (tests/test_adversary_session5.py), attacked
through the embedded APIs only: a killed topic delete seen by an embedded client, a send
callback that writes (send_batch, or send filling a batch) or flushes under acks='all', and
destructive admin calls on ``__consumer_offsets``. Each test failed on the code before its fix
(a deadlock shows as a thread still alive after its timeout, never as a hung run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import kafkalite
import pytest


def values(path: Path) -> list[bytes]:
    with kafkalite.Log(path, readonly=True) as log:
        return [r.value for r in log.records()]


# -- 1. an interrupted topic delete, finished by whichever embedded client opens first ---------

OPENERS: dict[str, Callable[[Path], object]] = {
    "Admin": lambda data: kafkalite.Admin(data),
    "Producer": lambda data: kafkalite.Producer(data).close(),
    "Consumer": lambda data: kafkalite.Consumer(data).close(),
}


def kill_a_delete(data: Path, topic: str) -> None:
    """Run ``Admin.delete_topic`` in a child killed (-9) between the folder renames and the
    metadata write: the first atomic file write of a process that only deletes is the metadata's."""
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "checkpoint.write=kill"}
    code = f"import kafkalite; kafkalite.Admin({str(data)!r}).delete_topic({topic!r})"
    killed = subprocess.run([sys.executable, "-c", code], env=env, timeout=60)
    assert killed.returncode == -9
    assert any(name.endswith("-delete") for name in os.listdir(data)), "the kill came before the renames"
    listed = json.loads((data / ".kafkalite-topics.json").read_text())["topics"]
    assert topic in listed, "the kill came after the metadata write"


@pytest.mark.parametrize("opener", sorted(OPENERS))
def test_a_killed_delete_is_finished_by_the_first_embedded_client(tmp_path, opener):
    """Only the server's start finished a delete killed after its renames: an embedded-only
    user saw the topic listed with its data gone (empty partitions, offsets reused, sends into
    fresh folders) and the renamed folders were never removed. Now opening the data directory
    (Admin, Producer, Consumer: the engine's ``DataDir::open``, which the server's start uses
    too) finishes it: the topic is gone, folders and metadata, and one created again under the
    same name holds only its own records."""
    data = tmp_path / "data"
    kafkalite.Admin(data).create_topic("t", partitions=3)
    with kafkalite.Producer(data) as producer:
        for i in range(30):
            producer.send("t", b"old%d" % i, partition=i % 3)
    kill_a_delete(data, "t")

    OPENERS[opener](data)

    assert not [name for name in os.listdir(data) if name.startswith("t-")]
    assert "t" not in json.loads((data / ".kafkalite-topics.json").read_text())["topics"]
    admin = kafkalite.Admin(data)
    assert admin.list_topics() == []
    admin.create_topic("t", partitions=3)
    with kafkalite.Producer(data) as producer:
        for i in range(3):
            producer.send("t", b"new%d" % i, partition=i)
    assert [values(data / f"t-{p}") for p in range(3)] == [[b"new0"], [b"new1"], [b"new2"]]


def test_a_delete_that_cannot_be_finished_is_logged_and_reading_goes_on(tmp_path, caplog):
    """When the delete cannot be finished (here the admin lock cannot be opened: a directory
    planted in its place), the opener says so in the log (kafkalite.admin) and goes on; the
    next opener that can finishes it."""
    data = tmp_path / "data"
    kafkalite.Admin(data).create_topic("t")
    kafkalite.Admin(data).create_topic("kept")
    with kafkalite.Producer(data) as producer:
        producer.send("kept", b"v")
    kill_a_delete(data, "t")
    lock = data / ".kafkalite-admin.lock"
    lock.unlink()
    lock.mkdir()
    tp = kafkalite.TopicPartition("kept", 0)
    with caplog.at_level("WARNING", logger="kafkalite"):
        with kafkalite.Consumer(data, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            assert [r.value for r in consumer.poll(timeout_ms=1000)[tp]] == [b"v"]
    assert "cannot finish an interrupted topic delete" in caplog.text
    lock.rmdir()
    assert kafkalite.Admin(data).list_topics() == ["kept"]
    assert not [name for name in os.listdir(data) if name.startswith("t-")]
