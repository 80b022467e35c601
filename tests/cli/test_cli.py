"""The command line behaves like Kafka's console tools and the usual CLI habits (issue 11):
--version, --data-dir before or after the subcommand, consume waiting for new records,
one-line errors with CLI hints, dump-log refusing what is not a partition, internal topics
hidden, and a demo that cleans up after itself and never touches the user's data dir."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from helpers import run_cli as kafkalite
from kafkalite import Admin, Producer, __version__


@pytest.fixture
def data(tmp_path):
    path = str(tmp_path / "data")
    assert kafkalite("--data-dir", path, "topics", "create", "t", "--partitions", "2").returncode == 0
    return path


def test_version():
    done = kafkalite("--version")
    assert done.returncode == 0 and done.stdout.decode().strip() == f"kafkalite {__version__}"


@pytest.mark.slow
def test_data_dir_before_or_after_the_subcommand(data):
    before = kafkalite("--data-dir", data, "topics", "list")
    after = kafkalite("topics", "list", "--data-dir", data)
    middle = kafkalite("topics", "--data-dir", data, "list")
    assert before.stdout == after.stdout == middle.stdout == b"t\n"
    groups_before = kafkalite("--data-dir", data, "groups", "list")
    groups_after = kafkalite("groups", "list", "--data-dir", data)
    assert groups_before.returncode == groups_after.returncode == 0
    assert groups_before.stdout == groups_after.stdout


@pytest.mark.slow
def test_internal_topics_hidden_unless_asked(data):
    with Producer(data) as producer:
        producer.send("t", b"x", partition=0).get(5)
    from kafkalite import Consumer

    with Consumer(data, group_id="g", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(["t"])
        consumer.poll(timeout_ms=1000)
        consumer.commit()
    assert kafkalite("--data-dir", data, "topics", "list").stdout == b"t\n"
    listed = kafkalite("--data-dir", data, "topics", "list", "--include-internal").stdout.decode().split()
    assert listed == ["__consumer_offsets", "t"]
    described = kafkalite("--data-dir", data, "topics", "describe").stdout.decode()
    assert "Topic: t" in described and "__consumer_offsets" not in described


@pytest.mark.slow
@pytest.mark.serial  # its 1.5 s head start (the consumer at the end before the record) needs the cores
def test_consume_without_from_beginning_waits_for_new_records(data, spawn):
    with Producer(data) as producer:
        producer.send("t", b"old", partition=0).get(5)
    consumer = spawn.module(
        "kafkalite",
        "--data-dir",
        data,
        "consume",
        "t",
        "--timeout-ms",
        "3000",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.5)  # the consumer has started at the end and is waiting
    with Producer(data) as producer:
        producer.send("t", b"new", partition=1).get(5)
    out, err = consumer.communicate(timeout=30)
    assert out == b"new\n", err
    assert consumer.returncode == 0
    assert b"Processed a total of 1 messages" in err


def test_consume_from_beginning_stops_at_the_end(data):
    with Producer(data) as producer:
        producer.send("t", b"a", partition=0).get(5)
    done = kafkalite("--data-dir", data, "consume", "t", "--from-beginning", timeout=30)
    assert done.returncode == 0 and done.stdout == b"a\n"


@pytest.mark.slow
def test_errors_are_one_line_with_cli_hints(data, tmp_path):
    done = kafkalite("--data-dir", data, "consume", "nope")
    assert done.returncode == 1
    err = done.stderr.decode()
    assert err.count("\n") == 1 and "kafkalite topics create" in err and "Admin." not in err
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a directory")
    done = kafkalite("--data-dir", str(blocker / "sub"), "topics", "create", "x")
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "Traceback" not in err and err.count("\n") == 1 and str(blocker) in err, err


@pytest.mark.slow
def test_dump_log_refuses_what_is_not_a_partition(data, tmp_path):
    with Producer(data) as producer:
        producer.send("t", b"a", partition=0).get(5)
    assert kafkalite("dump-log", os.path.join(data, "t-0")).returncode == 0
    for not_a_partition in (data, str(tmp_path / "missing-0"), str(tmp_path / "empty-3")):
        os.makedirs(str(tmp_path / "empty-3"), exist_ok=True)
        done = kafkalite("dump-log", not_a_partition)
        assert done.returncode != 0 and b"not a partition directory" in done.stderr, not_a_partition


@pytest.mark.slow
def test_demo_cleans_up_and_never_writes_the_users_data_dir(tmp_path):
    users = tmp_path / "users-data"
    users.mkdir()
    env = {**os.environ, "KAFKALITE_DATA_DIR": str(users), "TMPDIR": str(tmp_path)}
    done = kafkalite("demo", "--records", "50000", env=env, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert list(users.iterdir()) == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("kafkalite-demo-")]
    assert b"removed the demo's data directory" in done.stdout
    kept = kafkalite("demo", "--records", "50000", "--keep", env=env, timeout=300)
    assert kept.returncode == 0
    left = [p for p in tmp_path.iterdir() if p.name.startswith("kafkalite-demo-")]
    assert len(left) == 1 and str(left[0]) in kept.stdout.decode().replace("\n", "")


@pytest.mark.slow
def test_ctrl_c_in_produce_stops_cleanly_and_counts(data, spawn):
    import signal

    producer = spawn.module(
        "kafkalite",
        "--data-dir",
        data,
        "produce",
        "t",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    producer.stdin.write(b"one\ntwo\nthree\n")
    producer.stdin.flush()
    # Ctrl-C once the lines are read and written (linger 5 ms); stdin stays open, as a user
    # typing would leave it. Waiting for the records, not a fixed time, holds on a busy machine.
    admin = Admin(data)
    deadline = time.monotonic() + 60
    while sum(p.end_offset for p in admin.describe_topic("t").partitions) < 3:
        assert producer.poll() is None and time.monotonic() < deadline, "the CLI did not write the 3 lines"
        time.sleep(0.05)
    producer.send_signal(signal.SIGINT)
    out, err = producer.communicate(timeout=30)
    assert producer.returncode == 130, err
    assert b"Traceback" not in err
    assert b"Produced 3 records to t." in err
    done = kafkalite("--data-dir", data, "consume", "t", "--from-beginning")
    assert sorted(done.stdout.split()) == [b"one", b"three", b"two"]


def test_deleting_a_missing_group_is_an_error(data):
    # kafka-consumer-groups --delete of an unknown group fails (GroupIdNotFoundException).
    done = kafkalite("--data-dir", data, "groups", "delete", "nope")
    err = done.stderr.decode()
    assert done.returncode == 1 and done.stdout == b"", (done.stdout, err)
    assert err.count("\n") == 1 and "consumer group 'nope' does not exist" in err, err
    assert "kafkalite groups list" in err and "Admin." not in err and "successful" not in err


def test_hints_name_the_command_with_its_arguments(data, tmp_path):
    done = kafkalite("--data-dir", data, "consume", "orders", "--from-beginning")
    err = done.stderr.decode()
    assert done.returncode == 1 and "create it first: kafkalite topics create orders" in err, err
    typo = str(tmp_path / "TYPO")
    done = kafkalite("--data-dir", typo, "topics", "list")
    err = done.stderr.decode()
    assert done.returncode == 1 and f"kafkalite init {typo}" in err and "Admin." not in err, err
