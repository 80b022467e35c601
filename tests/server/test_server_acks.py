"""acks=all over the network means what the embedded ``acks='all'`` means (issue 21): the answer
waits for the group-commit sync that covers the batch, so a sync that fails (EIO, injected with
the ``group_commit.sync`` fail point) is answered with KAFKA_STORAGE_ERROR instead of success.
``--acks-all=page-cache`` answers at the page cache, as a Kafka broker does; acks=1 always does.

Before: acks=all was answered once the batch was in the page cache, whatever the sync would do."""

from __future__ import annotations

import os

import kafkalite
import pytest
from serve_proc import start_serve

confluent_kafka = pytest.importorskip("confluent_kafka")

KAFKA_STORAGE_ERROR = 56
FAIL_SYNCS = {"KAFKALITE_FAILPOINTS": "group_commit.sync=eio"}


def produce_one(bootstrap: str, acks: str, value: bytes = b"v") -> tuple[int | None, int]:
    """(error code or None, offset) of one record sent with ``acks``, not retried."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "retries": 0,
            "enable.idempotence": False,
            "message.timeout.ms": 20_000,
        }
    )
    outcome: list[tuple[int | None, int]] = []

    def report(err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message) -> None:
        outcome.append((None if err is None else err.code(), msg.offset()))

    producer.produce("t", value, partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    return outcome[0]


def serve(spawn, tmp_path, *args: str, env: dict[str, str] | None = None) -> tuple[object, str]:
    data = str(tmp_path / "data")
    kafkalite.Admin(data).create_topic("t", 1)
    return start_serve(
        lambda *a, **kw: spawn.module(*a, env={**os.environ, **(env or {})}, **kw),
        data,
        *args,
        "--log-level",
        "WARNING",
    )


def test_acks_all_is_answered_only_after_the_sync_succeeded(tmp_path, spawn):
    server, bootstrap = serve(spawn, tmp_path, env=FAIL_SYNCS)
    code, _ = produce_one(bootstrap, "all")
    assert code == KAFKA_STORAGE_ERROR, "a failed sync must not be acknowledged"
    # acks=1 is answered at the page cache (the partition reopens after the failed sync).
    code, offset = produce_one(bootstrap, "1")
    assert code is None and offset >= 0
    server.kill()
    stderr = server.communicate()[1]
    assert "not made durable" in stderr


def test_acks_all_after_a_roll_waits_for_the_new_segment_s_directory_entry(tmp_path, spawn):
    """A roll under the topic's default flush policy does not sync the directory: an acks=all
    batch in a new segment is answered only once a directory sync covering its entry returned
    (the second directory sync fails here: the first is the partition's first acks=all)."""
    data = str(tmp_path / "data")
    kafkalite.Admin(data).create_topic("t", 1, {"segment.bytes": 1024})
    server, bootstrap = start_serve(
        lambda *a, **kw: spawn.module(*a, env={**os.environ, "KAFKALITE_FAILPOINTS": "dir.sync=eio@2"}, **kw),
        data,
        "--log-level",
        "WARNING",
    )
    try:
        assert produce_one(bootstrap, "all", b"a" * 100) == (None, 0)  # the directory synced once
        assert produce_one(bootstrap, "all", b"b" * 100) == (None, 1)  # same segment: no new entry
        code, _ = produce_one(bootstrap, "all", b"c" * 900)  # rolls: a new segment file
        assert code == KAFKA_STORAGE_ERROR
    finally:
        server.kill()
        server.wait()
    assert len([f for f in os.listdir(os.path.join(data, "t-0")) if f.endswith(".log")]) == 2


def test_page_cache_mode_answers_acks_all_without_waiting_for_a_sync(tmp_path, spawn):
    server, bootstrap = serve(spawn, tmp_path, "--acks-all", "page-cache", env=FAIL_SYNCS)
    try:
        code, offset = produce_one(bootstrap, "all")
        assert code is None and offset == 0
    finally:
        server.kill()
        server.wait()


def test_acks_all_on_disk_is_acknowledged_and_readable(tmp_path, spawn):
    server, bootstrap = serve(spawn, tmp_path)
    try:
        assert [produce_one(bootstrap, "all", b"%d" % i) for i in range(3)] == [
            (None, 0),
            (None, 1),
            (None, 2),
        ]
    finally:
        server.kill()
        server.wait()
    log = kafkalite.Log(str(tmp_path / "data" / "t-0"))
    try:
        assert [r.value for r in log.records()] == [b"0", b"1", b"2"]
    finally:
        log.close()


def test_acks_all_is_checked(tmp_path):
    with pytest.raises(kafkalite.errors.InvalidConfigError, match="acks_all"):
        kafkalite.Server(str(tmp_path / "d"), acks_all="fsync")
