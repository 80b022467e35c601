"""`.kafkalite-topics.json` has one owner, the engine (`rust/src/storage/datadir/mod.rs`): the wire-protocol
server and the Python clients read, check and write it through the same code (issue 12 point 1),
so a hand-damaged file is refused by both with the same CorruptMetadataError, and what Python
writes is checked by the engine's rules before it replaces the file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest
from kafkalite import Admin, CorruptMetadataError, KafkaliteError
from kafkalite.datadir import METADATA_FILE, DataDir
from kafkalite.server import Server

DAMAGED = {
    "not-json": b"{not json",
    "not-utf8": b'{"topics": {"\xff": 1}}',
    "no-topics-table": b'{"version": 1}',
    "topics-a-list": b'{"version": 1, "topics": []}',
    "dir-config-a-list": b'{"version": 1, "topics": {}, "config": [1]}',
    "entry-an-int": b'{"version": 1, "topics": {"t": 5}}',
    "partitions-a-string": b'{"version": 1, "topics": {"t": {"partitions": "3", "config": {}}}}',
    "partitions-a-float": b'{"version": 1, "topics": {"t": {"partitions": 1.0, "config": {}}}}',
    "partitions-zero": b'{"version": 1, "topics": {"t": {"partitions": 0, "config": {}}}}',
    "partitions-too-many": b'{"version": 1, "topics": {"t": {"partitions": 1000001, "config": {}}}}',
    "topic-config-a-string": b'{"version": 1, "topics": {"t": {"partitions": 1, "config": "x"}}}',
    "name-leaves-the-dir": b'{"version": 1, "topics": {"../../outside": {"partitions": 1, "config": {}}}}',
}


def _damaged_dir(tmp_path, raw: bytes) -> str:
    data = str(tmp_path / "data")
    os.makedirs(data)
    with open(os.path.join(data, METADATA_FILE), "wb") as f:
        f.write(raw)
    return data


@pytest.mark.parametrize("raw", list(DAMAGED.values()), ids=list(DAMAGED))
def test_server_and_admin_refuse_a_damaged_file_with_the_same_error(tmp_path, raw):
    data = _damaged_dir(tmp_path, raw)
    with pytest.raises(CorruptMetadataError) as by_admin:
        Admin(data).list_topics()
    with pytest.raises(CorruptMetadataError) as by_server:
        Server(data).stop()
    assert str(by_server.value) == str(by_admin.value)
    assert isinstance(by_admin.value, KafkaliteError) and isinstance(by_admin.value, ValueError)
    assert METADATA_FILE in str(by_admin.value) and "damaged" in str(by_admin.value)


def test_a_write_that_would_damage_the_file_is_refused_and_changes_nothing(tmp_path):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 2)
    before = open(os.path.join(data, METADATA_FILE), "rb").read()

    def damage(meta):
        meta["topics"]["t"]["partitions"] = -1

    with pytest.raises(CorruptMetadataError, match="outside 1"):
        DataDir(data).update_metadata(damage)
    assert open(os.path.join(data, METADATA_FILE), "rb").read() == before


def test_the_engine_writes_the_format_python_always_wrote(tmp_path):
    data = str(tmp_path / "data")
    admin = Admin(data)
    admin.create_topic("b", 2, {"retention.ms": 1000})
    admin.create_topic("a", 1)
    text = open(os.path.join(data, METADATA_FILE)).read()
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True)
    assert json.loads(text)["topics"]["b"] == {"partitions": 2, "config": {"retention.ms": 1000}}


def test_concurrent_updates_from_threads_lose_nothing(tmp_path):
    # The engine waits for the admin lock without the GIL: a thread holding the lock and running
    # its Python change must not deadlock against one waiting for it.
    data = str(tmp_path / "data")
    admin = Admin(data)
    errors: list[BaseException] = []

    def create(i: int) -> None:
        try:
            for j in range(5):
                admin.create_topic(f"t{i}-{j}", 1)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors
    assert len(admin.list_topics()) == 20


_CHILD = """
import sys
from kafkalite import Admin, KafkaliteError
try:
    Admin(sys.argv[1]).create_topic("b", 1)
except KafkaliteError as e:
    print(type(e).__name__, e)
    sys.exit(3)
"""


@pytest.mark.parametrize(
    "fault",
    ["topics.journal.append=kill", "topics.journal.mid_entry=kill", "topics.journal.mid_entry=enospc"],
)
def test_a_metadata_write_that_dies_midway_leaves_the_old_metadata(tmp_path, fault):
    # A change is one journal entry: a writer killed (or out of space) before or halfway through
    # it leaves the previous metadata whole, and the next writer cuts the half entry off and
    # succeeds. (The snapshot's atomic rewrites are killed at each step in
    # rust/tests/topics_journal.rs.)
    data = str(tmp_path / "data")
    admin = Admin(data)
    admin.create_topic("a", 1)
    env = {**os.environ, "KAFKALITE_FAILPOINTS": fault}
    child = subprocess.run([sys.executable, "-c", _CHILD, data], env=env, capture_output=True, timeout=60)
    assert child.returncode == (-signal.SIGKILL if fault.endswith("kill") else 3), child
    if fault.endswith("enospc"):
        assert b"No space left" in child.stdout, child
    assert admin.list_topics() == ["a"]
    admin.create_topic("b", 1)
    assert sorted(admin.list_topics()) == ["a", "b"]
