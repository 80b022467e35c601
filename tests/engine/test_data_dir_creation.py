"""Issue 11 point 2: a data directory is never created by mistake. Only what creates
(Admin.create_topic, a produce that auto-creates its topic, `kafkalite init`, `kafkalite topics
create`) makes a missing data directory; everything else reports "not a kafkalite data
directory" with the path (NotADataDirError: a FileNotFoundError), and a host:port gets an
error saying kafkalite takes a directory and how to reach a broker instead.

Issue 10 point 8: a Producer on a broker's log directory is refused at construction (it used to
accept send() and fail later in future.get()), saying why and how to adopt the directory."""

from __future__ import annotations

import os

import kafkalite
import pytest
from helpers import run_cli
from kafkalite import Admin, Consumer, Log, Producer
from kafkalite.errors import BrokerAddressError, NotADataDirError, ReadOnlyDataDirError


def _cli(*args, cwd, stdin=None, env=None):
    environment = {k: v for k, v in os.environ.items() if k != "KAFKALITE_DATA_DIR"}
    environment.update(env or {})
    return run_cli(*args, input=stdin, cwd=cwd, env=environment)


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "list"],
        ["topics", "describe"],
        ["topics", "describe", "t"],
        ["topics", "delete", "t"],
        ["topics", "alter", "t", "--config", "retention.ms=1"],
        ["consume", "t", "--from-beginning"],
        ["groups", "list"],
        ["groups", "describe", "g"],
        ["config", "describe"],
        ["config", "alter", "--add-config", "num.partitions=2"],
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_a_typo_in_the_data_dir_creates_nothing_and_says_so(tmp_path, args):
    out = _cli("--data-dir", "TYPO", *args, cwd=tmp_path)
    assert out.returncode == 1, out
    err = out.stderr.decode()
    assert f"{tmp_path / 'TYPO'} is not a kafkalite data directory" in err, err
    assert "kafkalite init" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "make",
    [
        lambda p: Admin(p).list_topics(),
        lambda p: Admin(p).describe_topic("t"),
        lambda p: Admin(p).enforce_retention(),
        lambda p: Admin(p).list_groups(),
        lambda p: Admin(p).describe_data_dir_config(),
        lambda p: Admin(p).alter_data_dir_config({"num.partitions": 2}),
        lambda p: Consumer(p),
        lambda p: Consumer(p, "t", group_id="g"),
        lambda p: Consumer(p, "t"),
    ],
    ids=[
        "list_topics",
        "describe_topic",
        "enforce_retention",
        "list_groups",
        "describe_config",
        "alter_config",
        "consumer",
        "group-consumer",
        "consumer-topic",
    ],
)
def test_the_api_reports_a_missing_data_directory_typed(tmp_path, make):
    missing = str(tmp_path / "nope")
    with pytest.raises(NotADataDirError, match="nope is not a kafkalite data directory") as info:
        make(missing)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, kafkalite.KafkaliteError)
    assert not os.path.exists(missing)


def test_a_file_is_not_a_data_directory(tmp_path):
    decoy = tmp_path / "decoy"
    decoy.write_bytes(b"not a directory")
    with pytest.raises(NotADataDirError, match="is a file"):
        Admin(str(decoy)).list_topics()
    with pytest.raises(NotADataDirError):
        Admin(str(decoy)).create_topic("t")
    with pytest.raises(NotADataDirError):  # refused at construction: a path that exists must be a data dir
        Producer(str(decoy))
    assert decoy.read_bytes() == b"not a directory"


@pytest.mark.parametrize(
    "address",
    ["localhost:9092", "127.0.0.1:9092", "PLAINTEXT://broker:9092", "b1:9092,b2:9093", "[::1]:9092"],
)
def test_a_broker_address_gets_an_error_that_says_what_to_use(tmp_path, address, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for make in (Producer, Consumer, lambda a: Admin(a).create_topic("t"), Admin):
        with pytest.raises(
            BrokerAddressError,
            match="broker address.*kafkalite takes the path of a data directory.*kafka-python",
        ) as info:
            make(address)
        assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, ValueError)
    out = _cli("--data-dir", address, "produce", "t", cwd=tmp_path, stdin=b"x\n")
    assert out.returncode == 1 and b"confluent-kafka" in out.stderr, out.stderr
    assert b"kafkalite serve --data-dir DIR --listen HOST:PORT" in out.stderr, out.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_what_creates_may_create(tmp_path):
    Admin(str(tmp_path / "a")).create_topic("t")
    assert Admin(str(tmp_path / "a")).list_topics() == ["t"]
    producer = Producer(str(tmp_path / "b"))
    assert not os.path.exists(tmp_path / "b")  # a Producer alone creates nothing
    producer.send("t", b"v").get(timeout=10)  # its first record auto-creates the topic
    producer.close()
    assert Admin(str(tmp_path / "b")).list_topics() == ["t"]
    assert _cli("topics", "create", "t", "--data-dir", "c", cwd=tmp_path).returncode == 0
    assert _cli("produce", "t", "--data-dir", "d", cwd=tmp_path, stdin=b"x\n").returncode == 0
    out = _cli("init", "e", cwd=tmp_path)
    assert out.returncode == 0 and b"Created kafkalite data directory" in out.stdout, out
    out = _cli("init", cwd=tmp_path, env={"KAFKALITE_DATA_DIR": "e"})
    assert out.returncode == 0 and b"already a kafkalite data directory" in out.stdout, out
    assert Admin(str(tmp_path / "e")).list_topics() == []
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "c", "d", "e"]


# -- issue 10 point 8: writers on a broker's log directory ------------------------------------


def _broker_dir(tmp_path) -> tuple[str, list[tuple[int, bytes]]]:
    from test_broker_layout import write_broker_partition

    path = tmp_path / "kafka-logs"
    path.mkdir()
    (path / "meta.properties").write_text("version=1\nnode.id=1\n")
    return str(path), write_broker_partition(str(path / "orders-0"))


def _listing(path: str) -> dict[str, list[str]]:
    return {root: sorted(files) for root, _, files in os.walk(path)}


def test_a_producer_on_a_brokers_directory_is_refused_at_construction(tmp_path):
    path, _ = _broker_dir(tmp_path)
    before = _listing(path)
    with pytest.raises(
        ReadOnlyDataDirError,
        match="Kafka broker's log directory.*metadata log owns its topics.*kafkalite init --adopt",
    ) as info:
        Producer(path)
    assert isinstance(info.value, PermissionError)
    out = _cli("--data-dir", path, "produce", "orders", cwd=tmp_path, stdin=b"x\n")
    assert (
        out.returncode == 1 and b"kafkalite init --adopt" in out.stderr and b"Traceback" not in out.stderr
    ), out.stderr
    assert _listing(path) == before  # nothing created, changed or locked


def test_a_directory_with_only_metaproperties_is_a_brokers(tmp_path):
    path = tmp_path / "kafka-logs"
    path.mkdir()
    (path / "meta.properties").write_text("version=1\n")
    with pytest.raises(ReadOnlyDataDirError):
        Producer(str(path))
    with pytest.raises(ReadOnlyDataDirError):
        Admin(str(path)).create_topic("t")


def test_kafkalite_init_adopt_takes_the_directory_over_on_purpose(tmp_path):
    path, expected = _broker_dir(tmp_path)
    out = _cli("init", "--adopt", path, cwd=tmp_path)
    assert out.returncode == 0 and b"Adopted" in out.stdout and b"orders" in out.stdout, out
    with Producer(path) as p:
        meta = p.send("orders", b"after adoption").get(timeout=10)
    assert meta.offset == expected[-1][0] + 1
    with Log(os.path.join(path, "orders-0"), readonly=True) as log:
        assert [(r.offset, r.value) for r in log.records()] == [*expected, (meta.offset, b"after adoption")]
    assert Admin(path).adopt_broker_dir() == ["orders"]  # again: a no-op


def test_admin_adopt_broker_dir_keeps_consumer_offsets_compacted(tmp_path):
    path, _ = _broker_dir(tmp_path)
    os.makedirs(os.path.join(path, "__consumer_offsets-0"))
    admin = Admin(path)
    assert admin.adopt_broker_dir() == ["__consumer_offsets", "orders"]
    assert admin.describe_topic("__consumer_offsets").config["cleanup.policy"] == "compact"
    assert admin.describe_topic("orders").config["cleanup.policy"] == "delete"
