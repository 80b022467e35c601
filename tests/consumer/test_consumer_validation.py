"""Misuse of Consumer and its group APIs: each case raises a typed kafkalite error that is also
the matching builtin, says what to fix, and writes nothing (issue 9 point 12, issue 11 point 5)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from kafkalite import Admin, Consumer, Producer, TopicPartition
from kafkalite.errors import (
    IllegalStateError,
    InvalidConfigError,
    InvalidTopicError,
    InvalidTypeError,
    KafkaliteError,
    UnknownTopicError,
)

T0 = TopicPartition("t", 0)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("validation"))
    Admin(path).create_topic("t", 2)
    with Producer(path) as producer:
        for i in range(4):
            producer.send("t", value=b"%d" % i, partition=i % 2)
    return path


def state(path: str) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), path)] = (st.st_size, st.st_mtime_ns)
    return out


def assigned(data: str, **config: Any) -> Consumer:
    consumer = Consumer(data, group_id="g", enable_auto_commit=False, **config)
    consumer.assign([T0])
    return consumer


NAN, INF = float("nan"), float("inf")
# (case id, call(data), kafkalite error, builtin it also is, words the message must hold)
CONFIG_CASES: list[tuple[str, Callable[[str], Any], type, type, str]] = [
    (
        "unknown key",
        lambda d: Consumer(d, bootstrap_servers="x"),
        InvalidConfigError,
        ValueError,
        "unknown consumer config",
    ),
    ("path None", lambda d: Consumer(None), InvalidTypeError, TypeError, "path must be"),
    (
        "path missing",
        lambda d: Consumer(d + "/nope"),
        InvalidConfigError,
        FileNotFoundError,
        "not a kafkalite data directory",
    ),
    (
        "auto_offset_reset",
        lambda d: Consumer(d, auto_offset_reset="smallest"),
        InvalidConfigError,
        ValueError,
        "'earliest'",
    ),
    (
        "enable_auto_commit str",
        lambda d: Consumer(d, enable_auto_commit="no"),
        InvalidTypeError,
        TypeError,
        "True or False",
    ),
    (
        "exclude_internal_topics int",
        lambda d: Consumer(d, exclude_internal_topics=1),
        InvalidTypeError,
        TypeError,
        "True or False",
    ),
    (
        "auto_commit_interval_ms nan",
        lambda d: Consumer(d, auto_commit_interval_ms=NAN),
        InvalidTypeError,
        TypeError,
        "must be an int",
    ),
    (
        "auto_commit_interval_ms negative",
        lambda d: Consumer(d, auto_commit_interval_ms=-1),
        InvalidConfigError,
        ValueError,
        ">= 0",
    ),
    (
        "max_poll_records bool",
        lambda d: Consumer(d, max_poll_records=True),
        InvalidTypeError,
        TypeError,
        "must be an int",
    ),
    ("max_poll_records 0", lambda d: Consumer(d, max_poll_records=0), InvalidConfigError, ValueError, ">= 1"),
    (
        "max_poll_records float",
        lambda d: Consumer(d, max_poll_records=5.0),
        InvalidTypeError,
        TypeError,
        "must be an int",
    ),
    (
        "consumer_timeout_ms nan",
        lambda d: Consumer(d, consumer_timeout_ms=NAN),
        InvalidConfigError,
        ValueError,
        "finite",
    ),
    (
        "consumer_timeout_ms negative",
        lambda d: Consumer(d, consumer_timeout_ms=-5),
        InvalidConfigError,
        ValueError,
        ">= 0",
    ),
    (
        "consumer_timeout_ms str",
        lambda d: Consumer(d, consumer_timeout_ms="100"),
        InvalidTypeError,
        TypeError,
        "milliseconds",
    ),
    (
        "session_timeout_ms bool",
        lambda d: Consumer(d, session_timeout_ms=True),
        InvalidTypeError,
        TypeError,
        "must be an int",
    ),
    (
        "session_timeout_ms inf",
        lambda d: Consumer(d, session_timeout_ms=INF),
        InvalidTypeError,
        TypeError,
        "must be an int",
    ),
    (
        "max_poll_interval_ms 0",
        lambda d: Consumer(d, max_poll_interval_ms=0),
        InvalidConfigError,
        ValueError,
        ">= 1",
    ),
    (
        "heartbeat >= session",
        lambda d: Consumer(d, heartbeat_interval_ms=20_000),
        InvalidConfigError,
        ValueError,
        "lower than session_timeout_ms",
    ),
    (
        "deserializer not callable",
        lambda d: Consumer(d, value_deserializer="utf-8"),
        InvalidTypeError,
        TypeError,
        "callable",
    ),
    ("client_id int", lambda d: Consumer(d, client_id=5), InvalidTypeError, TypeError, "client_id"),
    (
        "strategy unknown",
        lambda d: Consumer(d, partition_assignment_strategy="fastest"),
        InvalidConfigError,
        ValueError,
        "must name some of",
    ),
    (
        "strategy int",
        lambda d: Consumer(d, partition_assignment_strategy=5),
        InvalidTypeError,
        TypeError,
        "strategy name",
    ),
    (
        "group_id empty",
        lambda d: Consumer(d, group_id=""),
        InvalidConfigError,
        ValueError,
        "must not be empty",
    ),
    ("group_id bytes", lambda d: Consumer(d, group_id=b"g"), InvalidTypeError, TypeError, "must be a str"),
    (
        "group_id surrogate",
        lambda d: Consumer(d, group_id="g\udcff"),
        InvalidConfigError,
        ValueError,
        "surrogate",
    ),
    ("topic int", lambda d: Consumer(d, 5), InvalidTypeError, TypeError, "topic names are str"),
    ("topic bad name", lambda d: Consumer(d, "a/b"), InvalidTopicError, ValueError, "invalid"),
    ("topic list of int", lambda d: Consumer(d, [5]), InvalidTypeError, TypeError, "topic names are str"),
]

CALL_CASES: list[tuple[str, Callable[[str], Any], type, type, str]] = [
    # commit
    ("commit -5", lambda d: assigned(d).commit({T0: -5}), InvalidConfigError, ValueError, ">= 0"),
    ("commit float", lambda d: assigned(d).commit({T0: 1.5}), InvalidTypeError, TypeError, "must be an int"),
    ("commit str", lambda d: assigned(d).commit({T0: "3"}), InvalidTypeError, TypeError, "must be an int"),
    ("commit bool", lambda d: assigned(d).commit({T0: True}), InvalidTypeError, TypeError, "must be an int"),
    ("commit list", lambda d: assigned(d).commit([(T0, 1)]), InvalidTypeError, TypeError, "must be a dict"),
    ("commit bad key", lambda d: assigned(d).commit({"t": 1}), InvalidTypeError, TypeError, "TopicPartition"),
    (
        "commit unknown topic",
        lambda d: assigned(d).commit({TopicPartition("nope", 0): 1}),
        UnknownTopicError,
        KeyError,
        "unknown topic",
    ),
    (
        "commit no partition 7",
        lambda d: assigned(d).commit({TopicPartition("t", 7): 1}),
        InvalidConfigError,
        ValueError,
        "no partition 7",
    ),
    (
        "commit negative partition",
        lambda d: assigned(d).commit({TopicPartition("t", -1): 1}),
        InvalidConfigError,
        ValueError,
        ">= 0",
    ),
    (
        "commit one bad of two",
        lambda d: assigned(d).commit({T0: 1, TopicPartition("t", 1): -1}),
        InvalidConfigError,
        ValueError,
        ">= 0",
    ),
    (
        "commit metadata int",
        lambda d: assigned(d).commit({T0: __import__("kafkalite.consumer").consumer.OffsetAndMetadata(1, 5)}),
        InvalidTypeError,
        TypeError,
        "metadata",
    ),
    (
        "commit_async callback",
        lambda d: assigned(d).commit_async({T0: 1}, callback=5),
        InvalidTypeError,
        TypeError,
        "callable",
    ),
    (
        "commit without group",
        lambda d: Consumer(d).commit({T0: 1}),
        IllegalStateError,
        RuntimeError,
        "needs a group_id",
    ),
    # seek and positions
    ("seek -1", lambda d: assigned(d).seek(T0, -1), InvalidConfigError, ValueError, ">= 0"),
    ("seek float", lambda d: assigned(d).seek(T0, 2.0), InvalidTypeError, TypeError, "must be an int"),
    ("seek None", lambda d: assigned(d).seek(T0, None), InvalidTypeError, TypeError, "must be an int"),
    (
        "seek unassigned",
        lambda d: assigned(d).seek(TopicPartition("t", 1), 0),
        IllegalStateError,
        RuntimeError,
        "not assigned",
    ),
    ("seek bad tp", lambda d: assigned(d).seek("t", 0), InvalidTypeError, TypeError, "TopicPartition"),
    (
        "seek_to_end one unassigned",
        lambda d: assigned(d).seek_to_end(T0, TopicPartition("t", 1)),
        IllegalStateError,
        RuntimeError,
        "not assigned",
    ),
    (
        "position bad tp",
        lambda d: assigned(d).position(("t", "0")),
        InvalidTypeError,
        TypeError,
        "must be an int",
    ),
    (
        "committed bad tp",
        lambda d: assigned(d).committed(None),
        InvalidTypeError,
        TypeError,
        "TopicPartition",
    ),
    # assignment
    (
        "assign a str",
        lambda d: Consumer(d).assign("t"),
        InvalidTypeError,
        TypeError,
        "list of TopicPartition",
    ),
    (
        "assign one tp unwrapped",
        lambda d: Consumer(d).assign(("t", 0)),
        InvalidTypeError,
        TypeError,
        "wrap it in a list",
    ),
    (
        "assign unknown topic",
        lambda d: Consumer(d).assign([TopicPartition("nope", 0)]),
        UnknownTopicError,
        KeyError,
        "unknown topic",
    ),
    (
        "assign partition 9",
        lambda d: Consumer(d).assign([TopicPartition("t", 9)]),
        InvalidConfigError,
        ValueError,
        "no partition 9",
    ),
    (
        "assign after subscribe",
        lambda d: Consumer(d, "t").assign([T0]),
        IllegalStateError,
        RuntimeError,
        "unsubscribe",
    ),
    (
        "subscribe after assign",
        lambda d: assigned(d).subscribe(["t"]),
        IllegalStateError,
        RuntimeError,
        "unsubscribe",
    ),
    (
        "subscribe both",
        lambda d: Consumer(d).subscribe(["t"], pattern="t.*"),
        IllegalStateError,
        RuntimeError,
        "either topics or a pattern",
    ),
    (
        "subscribe neither",
        lambda d: Consumer(d).subscribe(),
        IllegalStateError,
        RuntimeError,
        "either topics or a pattern",
    ),
    (
        "subscribe bad regex",
        lambda d: Consumer(d).subscribe(pattern="("),
        InvalidConfigError,
        ValueError,
        "not a valid regular expression",
    ),
    (
        "subscribe regex int",
        lambda d: Consumer(d).subscribe(pattern=5),
        InvalidTypeError,
        TypeError,
        "regular expression",
    ),
    (
        "subscribe bad listener",
        lambda d: Consumer(d).subscribe(["t"], listener=object()),
        InvalidTypeError,
        TypeError,
        "on_partitions_revoked",
    ),
    ("subscribe dict", lambda d: Consumer(d).subscribe({"t": 1}), InvalidTypeError, TypeError, "topic names"),
    (
        "pause unassigned",
        lambda d: assigned(d).pause(TopicPartition("t", 1)),
        IllegalStateError,
        RuntimeError,
        "not assigned",
    ),
    ("resume bad tp", lambda d: assigned(d).resume(5), InvalidTypeError, TypeError, "TopicPartition"),
    # polling and metadata
    ("poll nan", lambda d: assigned(d).poll(NAN), InvalidConfigError, ValueError, "finite"),
    ("poll inf", lambda d: assigned(d).poll(INF), InvalidConfigError, ValueError, "finite"),
    ("poll negative", lambda d: assigned(d).poll(-1), InvalidConfigError, ValueError, ">= 0"),
    ("poll str", lambda d: assigned(d).poll("100"), InvalidTypeError, TypeError, "milliseconds"),
    (
        "poll max_records 0",
        lambda d: assigned(d).poll(0, max_records=0),
        InvalidConfigError,
        ValueError,
        ">= 1",
    ),
    (
        "poll_arrow max_records -1",
        lambda d: assigned(d).poll_arrow(0, max_records=-1),
        InvalidConfigError,
        ValueError,
        ">= 1",
    ),
    (
        "end_offsets unknown",
        lambda d: Consumer(d).end_offsets([TopicPartition("nope", 0)]),
        UnknownTopicError,
        KeyError,
        "unknown topic",
    ),
    (
        "beginning_offsets a tp",
        lambda d: Consumer(d).beginning_offsets(T0),
        InvalidTypeError,
        TypeError,
        "wrap it in a list",
    ),
    (
        "offsets_for_times negative",
        lambda d: Consumer(d).offsets_for_times({T0: -1}),
        InvalidConfigError,
        ValueError,
        ">= 0",
    ),
    (
        "offsets_for_times str",
        lambda d: Consumer(d).offsets_for_times({T0: "now"}),
        InvalidTypeError,
        TypeError,
        "must be an int",
    ),
    (
        "offsets_for_times list",
        lambda d: Consumer(d).offsets_for_times([T0]),
        InvalidTypeError,
        TypeError,
        "must be a dict",
    ),
    (
        "partitions_for_topic int",
        lambda d: Consumer(d).partitions_for_topic(5),
        InvalidTypeError,
        TypeError,
        "topic names are str",
    ),
    ("poll after close", lambda d: closed(d).poll(0), IllegalStateError, RuntimeError, "closed"),
]


def closed(data: str) -> Consumer:
    consumer = Consumer(data)
    consumer.close()
    return consumer


@pytest.mark.parametrize(
    ("case", "call", "error", "builtin", "words"),
    CONFIG_CASES + CALL_CASES,
    ids=[c[0] for c in CONFIG_CASES + CALL_CASES],
)
def test_misuse_is_refused_with_a_typed_error_and_writes_nothing(data, case, call, error, builtin, words):
    before = state(data)
    with pytest.raises(error, match=None) as raised:
        call(data)
    assert isinstance(raised.value, KafkaliteError) and isinstance(raised.value, builtin), type(
        raised.value
    ).__mro__
    assert words in str(raised.value), str(raised.value)
    after = state(data)
    # A rejected call writes nothing (the group folder's lock file is the commit guard's).
    assert {k: v for k, v in after.items() if not k.startswith(".kafkalite-groups")} == {
        k: v for k, v in before.items() if not k.startswith(".kafkalite-groups")
    }


def test_a_list_of_topics_is_taken_as_kafka_python_takes_topics(data):
    for topics in (["t"], ("t",), [["t"]]):
        consumer = Consumer(data, topics, auto_offset_reset="earliest")
        assert consumer.subscription() == {"t"}
        assert sum(len(v) for v in consumer.poll(100).values()) == 4
        consumer.close()
    consumer = Consumer(data, "t", ["t"])
    assert consumer.subscription() == {"t"}
    consumer.close()


def test_valid_edge_values_are_accepted(data):
    consumer = Consumer(
        data, group_id="edge", consumer_timeout_ms=INF, auto_commit_interval_ms=0, enable_auto_commit=False
    )
    consumer.assign([T0])
    consumer.seek(T0, 0)
    consumer.poll(0.5, max_records=1)  # a float timeout, as kafka-python allows
    consumer.commit({T0: 0})
    assert consumer.committed(T0) == 0
    consumer.commit({T0: 10**6})  # beyond the end, as Kafka allows
    assert consumer.committed(T0) == 10**6
    consumer.close()
