"""A new user's first hour (issue 23, round two): what a fresh clone's reader tried and tripped
on. A directory kafkalite made is never taken for a Kafka broker's; a typo creates no directory
(`Log`, `serve`, `users add`); a consumer of a missing topic says so; the CLI refuses bad
arguments before it does anything; the messages name what exists."""

from __future__ import annotations

import logging
import os

import pytest
from helpers import run_cli as kafkalite
from kafkalite import Admin, Consumer, Log, Producer
from kafkalite.errors import (
    BrokerAddressError,
    InvalidConfigError,
    InvalidTypeError,
    LogClosedError,
    NotAPartitionDirError,
)

# -- a directory kafkalite made is not a broker's ----------------------------------------------


def test_log_then_admin_in_a_fresh_directory(tmp_path):
    """The README's Log block run first, then its Admin block: the folder Log made is
    kafkalite's, so the directory takes topics and the Log's partition becomes a topic."""
    data = str(tmp_path / "L")
    with Log(os.path.join(data, "x-0")) as log:
        log.append_values([b"a", b"b"])
    admin = Admin(data)
    admin.create_topic("events", partitions=2)
    assert sorted(admin.list_topics()) == ["events", "x"]
    assert admin.describe_topic("x").partitions[0].end_offset == 2
    with Producer(data) as producer:  # writable: no ReadOnlyDataDirError
        producer.send("x", b"c").get(timeout=10)
    assert admin.describe_topic("x").partitions[0].end_offset == 3


def test_the_server_takes_topics_in_a_directory_log_made(tmp_path):
    """The same rule in the engine (the server's CreateTopics): no 'broker's log directory'."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafkalite import Server

    data = str(tmp_path / "L")
    with Log(os.path.join(data, "x-0")) as log:
        log.append_values([b"a"])
    with Server(data) as server:
        client = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        client.create_topics([NewTopic("y", 1)])["y"].result(timeout=30)
    assert sorted(Admin(data).list_topics()) == ["x", "y"]


def test_a_brokers_partition_folder_still_makes_a_brokers_directory(tmp_path):
    """The detection still fires where a broker wrote (its own files in a partition folder)."""
    from kafkalite.errors import ReadOnlyDataDirError

    data = tmp_path / "kafka-logs"
    with Log(str(data / "t-0")) as log:
        log.append_values([b"a"])
    (data / "t-0" / "partition.metadata").write_text("version: 0\ntopic_id: B3_HiNPgSQ6oxG9ZZ6ED5A")
    with pytest.raises(ReadOnlyDataDirError, match="broker"):
        Admin(str(data)).create_topic("new")


# -- Log takes a partition folder --------------------------------------------------------------


def test_log_refuses_a_folder_that_is_not_topic_partition(tmp_path):
    with pytest.raises(NotAPartitionDirError, match="any_folder=True"):
        Log(str(tmp_path / "L2" / "tp"))
    assert not os.path.exists(tmp_path / "L2")  # nothing created
    with Log(str(tmp_path / "L2" / "tp"), any_folder=True) as log:  # on purpose
        log.append_values([b"a"])
        assert log.end_offset == 1


def test_log_refuses_a_data_directory(tmp_path):
    data = str(tmp_path / "data-0")  # even one named like a partition
    Admin(data).create_topic("t")
    for any_folder in (False, True):
        with pytest.raises(NotAPartitionDirError, match="is a data directory"):
            Log(data, any_folder=any_folder)
    assert not [f for f in os.listdir(data) if f.endswith(".log")]


def test_log_end_offset_after_close_raises_as_every_other_call(tmp_path):
    log = Log(str(tmp_path / "t-0"))
    log.append_values([b"a"])
    log.close()
    for read in (lambda: log.end_offset, lambda: log.start_offset, lambda: log.segments):
        with pytest.raises(LogClosedError, match="closed"):
            read()
    assert log.closed and "closed" in repr(log)


def test_append_values_suggests_nothing_log_lacks(tmp_path):
    with Log(str(tmp_path / "t-0")) as log, pytest.raises(InvalidTypeError) as info:
        log.append_values(["x"])
    assert "serializer" not in str(info.value) and ".encode()" in str(info.value)


# -- clients -----------------------------------------------------------------------------------


def test_bootstrap_servers_is_a_broker_address_error(tmp_path):
    for client in (Producer, Consumer):
        with pytest.raises(BrokerAddressError, match="kafkalite serve"):
            client(bootstrap_servers="localhost:9092")


def test_bounds_are_shown_as_integers(tmp_path):
    with pytest.raises(InvalidConfigError) as info:
        Producer(str(tmp_path / "d"), linger_ms=2**40)
    assert "2147483647" in str(info.value) and "e+" not in str(info.value)


def test_a_consumer_of_a_missing_topic_warns_once_and_lists_topics(tmp_path, caplog):
    data = str(tmp_path / "data")
    Admin(data).create_topic("events")
    with Producer(data) as producer:
        producer.send("events", b"x").get(timeout=10)
    with Consumer(data, group_id="g", auto_offset_reset="earliest") as c:
        c.subscribe(["events"])
        c.poll(timeout_ms=100)
        c.commit()  # __consumer_offsets exists now
    caplog.set_level(logging.WARNING, logger="kafkalite.consumer")
    with Consumer(data, "missing", "events") as consumer:
        for _ in range(3):
            consumer.poll(timeout_ms=10)
        warned = [
            r for r in caplog.records if r.name == "kafkalite.consumer" and r.levelno == logging.WARNING
        ]
        assert len(warned) == 1, [r.getMessage() for r in warned]
        assert "'missing'" in warned[0].getMessage() and "events" in warned[0].getMessage()
        assert consumer.topics() == {"events"}  # internal topics hidden, as kafka-python
    with Consumer(data, exclude_internal_topics=False) as consumer:
        assert consumer.topics() == {"events", "__consumer_offsets"}


# -- the command line --------------------------------------------------------------------------


def test_serve_creates_no_data_directory(tmp_path):
    typo = tmp_path / "srv-typo"
    done = kafkalite("serve", "--data-dir", str(typo), "--listen", "127.0.0.1:0", timeout=30, text=True)
    assert done.returncode == 1 and "kafkalite init" in done.stderr, done.stderr
    assert not typo.exists()


def test_users_add_creates_no_data_directory(tmp_path):
    typo = tmp_path / "data"
    done = kafkalite(
        "users", "add", "alice", "--data-dir", str(typo), "--password-stdin", input=b"secret\n", text=False
    )
    assert done.returncode == 1 and b"kafkalite init" in done.stderr, done.stderr
    assert not typo.exists()


def test_produce_refuses_a_bad_acks_before_producing(tmp_path):
    data = str(tmp_path / "d")
    done = kafkalite("--data-dir", data, "produce", "b", "--acks", "2", input=b"x\n", text=False)
    assert done.returncode == 2 and b"Produced" not in done.stderr and b"--acks" in done.stderr
    assert not os.path.exists(data)


def test_produce_to_a_missing_partition_creates_no_topic(tmp_path):
    data = str(tmp_path / "d")
    Admin(data).create_topic("other")
    done = kafkalite("--data-dir", data, "produce", "e", "--partition", "7", input="x\n", text=True)
    assert done.returncode == 1 and "no partition 7" in done.stderr, done.stderr
    assert "Produced" not in done.stderr
    assert Admin(data).list_topics() == ["other"]


@pytest.mark.parametrize("records", ["0", "-5"])
def test_demo_refuses_a_record_count_below_one(records):
    done = kafkalite("demo", "--records", records, text=True)
    assert done.returncode == 2 and "at least 1" in done.stderr and "Traceback" not in done.stderr
    assert "records/s" not in done.stdout


def test_demo_output_never_wraps_a_command_it_suggests(tmp_path):
    done = kafkalite(
        "demo", "--records", "2000", "--keep", env={"TMPDIR": str(tmp_path), "COLUMNS": "60"}, text=True
    )
    assert done.returncode == 0, done.stderr
    kept = next(line for line in done.stdout.splitlines() if line.startswith("kept the demo's data"))
    path = kept.split(" in ", 1)[1].split(" ")[0]
    assert f"(try: kafkalite --data-dir {path} topics describe)" in kept


def test_every_option_and_argument_has_help():
    import argparse

    from kafkalite.cli import build_parser

    missing = []

    def walk(parser: argparse.ArgumentParser, where: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{where} {name}")
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)) and not action.help:
                missing.append(f"{where} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "kafkalite")
    assert not missing


def test_consume_help_says_when_it_stops():
    done = kafkalite("--help", text=True)
    line = " ".join(done.stdout.split())
    assert "--from-beginning, --offset and --timestamp stop at the end unless --follow" in line
