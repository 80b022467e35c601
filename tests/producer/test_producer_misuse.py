"""Issue 9 point 12 / issue 11 point 5 (producer, admin and Log side): every misuse gets a typed
kafkalite error that is also the matching builtin, says what to fix, and writes nothing."""

from __future__ import annotations

import os

import kafkalite
import pytest
from kafkalite import Admin, Log, Producer
from kafkalite.errors import InvalidConfigError, InvalidTypeError, KafkaliteError

NAN, INF = float("nan"), float("inf")
T = TypeError
V = ValueError

# (id, builtin base, what the message must contain (or None), call(data_dir, producer, log))
CONFIG_CASES = [
    ("acks-bool", V, "acks", {"acks": True}),
    ("acks-2", V, "acks", {"acks": 2}),
    ("batch-zero", V, "batch_size", {"batch_size": 0}),
    ("batch-negative", V, "batch_size", {"batch_size": -1}),
    ("batch-float", T, "batch_size", {"batch_size": 1.5}),
    ("batch-bool", T, "batch_size", {"batch_size": True}),
    ("batch-huge", V, "batch_size", {"batch_size": 2**40}),
    ("linger-nan", V, "linger_ms", {"linger_ms": NAN}),
    ("linger-inf", V, "linger_ms", {"linger_ms": INF}),
    ("linger-negative", V, "linger_ms", {"linger_ms": -1}),
    ("linger-str", T, "linger_ms", {"linger_ms": "5"}),
    ("max-request-zero", V, "max_request_size", {"max_request_size": 0}),
    ("compression-brotli", V, "compression_type", {"compression_type": "brotli"}),
    ("compression-int", T, "compression_type", {"compression_type": 5}),
    ("retention-interval-zero", V, "retention_check_interval_ms", {"retention_check_interval_ms": 0}),
    ("cleaner-interval-nan", V, "cleaner_check_interval_ms", {"cleaner_check_interval_ms": NAN}),
    ("serializer-not-callable", T, "value_serializer", {"value_serializer": 5}),
    ("client-id-int", T, "client_id", {"client_id": 5}),
    ("unknown-key", V, "bootstrap_servers", {"bootstrap_servers": "localhost:9092"}),
]


@pytest.mark.parametrize(
    "builtin, words, config", [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES]
)
def test_bad_producer_config_is_refused(tmp_path, builtin, words, config):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    with pytest.raises(KafkaliteError, match=words) as info:
        Producer(data_dir, **config)
    assert isinstance(info.value, builtin)


def _rec(n):
    return [kafkalite.Record(b"v", key=b"k") for _ in range(n)]


# Calls on a producer of topic "t" (2 partitions) and "c" (compacted), a Log of "t-0" opened as a
# shared writer, and an Admin: (id, builtin, message words, call).
CALL_CASES = [
    ("send-str-value", T, r"value must be bytes.*\.encode\(\)", lambda p, log, a: p.send("t", "text")),
    ("send-str-key", T, r"key must be bytes.*\.encode\(\)", lambda p, log, a: p.send("t", b"v", key="k")),
    ("send-int-value", T, "value must be bytes", lambda p, log, a: p.send("t", 5)),
    ("send-partition-negative", V, "no partition -1", lambda p, log, a: p.send("t", b"v", partition=-1)),
    ("send-partition-too-big", V, "no partition 2", lambda p, log, a: p.send("t", b"v", partition=2)),
    ("send-partition-bool", T, "partition", lambda p, log, a: p.send("t", b"v", partition=True)),
    ("send-partition-str", T, "partition", lambda p, log, a: p.send("t", b"v", partition="0")),
    ("send-partition-float", T, "partition", lambda p, log, a: p.send("t", b"v", partition=1.0)),
    ("send-timestamp-negative", V, "timestamp_ms", lambda p, log, a: p.send("t", b"v", timestamp_ms=-5)),
    ("send-timestamp-huge", V, "timestamp_ms", lambda p, log, a: p.send("t", b"v", timestamp_ms=2**64)),
    ("send-timestamp-float", T, "timestamp_ms", lambda p, log, a: p.send("t", b"v", timestamp_ms=1.5)),
    ("send-header-str-value", T, "headers", lambda p, log, a: p.send("t", b"v", headers=[("h", "x")])),
    ("send-headers-str", T, "headers", lambda p, log, a: p.send("t", b"v", headers="x")),
    ("send-topic-int", T, "topic", lambda p, log, a: p.send(5, b"v")),
    ("send-topic-list", T, "topic", lambda p, log, a: p.send(["t"], b"v")),
    ("send-nothing", V, "key or a value", lambda p, log, a: p.send("t")),
    ("send-keyless-compacted", V, "needs a key", lambda p, log, a: p.send("c", b"v")),
    ("send-too-large", V, "max_request_size", lambda p, log, a: p.send("t", b"x" * 2_000_000)),
    ("send-partitioner-out-of-range", V, "partitioner returned 7", None),
    (
        "batch-str-values",
        T,
        r"values\[0\] must be bytes.*\.encode\(\)",
        lambda p, log, a: p.send_batch("t", ["a"]),
    ),
    ("batch-one-bad-value", T, r"values\[1\]", lambda p, log, a: p.send_batch("t", [b"a", "b"])),
    (
        "batch-str-key",
        T,
        r"keys\[1\] must be bytes.*\.encode\(\)",
        lambda p, log, a: p.send_batch("t", [b"a", b"b"], keys=[b"k", "k"]),
    ),
    (
        "batch-partition-negative",
        V,
        "no partition -1",
        lambda p, log, a: p.send_batch("t", [b"a"], partition=-1),
    ),
    (
        "batch-keyed-partition-too-big",
        V,
        "no partition 9",
        lambda p, log, a: p.send_batch("t", [b"a"], keys=[b"k"], partition=9),
    ),
    (
        "batch-key-count",
        V,
        "1 values but 2 keys",
        lambda p, log, a: p.send_batch("t", [b"a"], keys=[b"k", b"j"]),
    ),
    (
        "batch-timestamp-negative",
        V,
        "timestamp_ms",
        lambda p, log, a: p.send_batch("t", [b"a"], timestamp_ms=-1),
    ),
    ("batch-none-value", V, "key or a value", lambda p, log, a: p.send_batch("t", [None])),
    ("batch-keyless-compacted", V, "needs a key", lambda p, log, a: p.send_batch("c", [b"a"])),
    ("flush-nan", V, "timeout", lambda p, log, a: p.flush(timeout=NAN)),
    ("flush-negative", V, "timeout", lambda p, log, a: p.flush(timeout=-1)),
    ("close-str", T, "timeout", lambda p, log, a: p.close(timeout="1")),
    ("create-huge-partitions", V, "MAX_PARTITIONS", lambda p, log, a: a.create_topic("x", partitions=10**9)),
    ("create-zero-partitions", V, "partitions", lambda p, log, a: a.create_topic("x", partitions=0)),
    ("create-bool-partitions", T, "partitions", lambda p, log, a: a.create_topic("x", partitions=True)),
    ("create-float-partitions", T, "partitions", lambda p, log, a: a.create_topic("x", partitions=2.0)),
    ("create-topic-int", T, "topic", lambda p, log, a: a.create_topic(5)),
    ("create-config-str", T, "config", lambda p, log, a: a.create_topic("x", config="retention.ms=1")),
    (
        "create-config-inf",
        V,
        "retention.ms",
        lambda p, log, a: a.create_topic("x", config={"retention.ms": INF}),
    ),
    (
        "create-config-bool",
        T,
        "retention.ms",
        lambda p, log, a: a.create_topic("x", config={"retention.ms": True}),
    ),
    (
        "create-config-huge-segment",
        V,
        "segment.bytes",
        lambda p, log, a: a.create_topic("x", config={"segment.bytes": 2**40}),
    ),
    (
        "create-config-policy-int",
        T,
        "cleanup.policy",
        lambda p, log, a: a.create_topic("x", config={"cleanup.policy": 5}),
    ),
    (
        "create-config-ratio-nan",
        V,
        "min.cleanable.dirty.ratio",
        lambda p, log, a: a.create_topic("x", config={"min.cleanable.dirty.ratio": NAN}),
    ),
    (
        "create-config-unknown",
        V,
        "unknown topic config",
        lambda p, log, a: a.create_topic("x", config={"nope": 1}),
    ),
    ("grow-bool", T, "total", lambda p, log, a: a.create_partitions("t", True)),
    ("grow-huge", V, "total", lambda p, log, a: a.create_partitions("t", 10**9)),
    ("grow-not-larger", V, "must be larger", lambda p, log, a: a.create_partitions("t", 1)),
    ("alter-config-str", T, "config", lambda p, log, a: a.alter_config("t", "retention.ms=1")),
    (
        "alter-config-bad-int",
        V,
        "retention.ms",
        lambda p, log, a: a.alter_config("t", {"retention.ms": "abc"}),
    ),
    ("retention-topics-str", T, "topics", lambda p, log, a: a.enforce_retention("t")),
    ("retention-now-negative", V, "now_ms", lambda p, log, a: a.enforce_retention(now_ms=-1)),
    ("compact-not-compacted", V, "cleanup.policy", lambda p, log, a: a.compact_topic("t")),
    ("admin-path-int", T, "path", lambda p, log, a: Admin(5)),
    ("producer-path-int", T, "path", lambda p, log, a: Producer(5)),
    (
        "log-append-values-str",
        T,
        r"values\[0\] must be bytes.*\.encode\(\)",
        lambda p, log, a: log.append_values(["a"]),
    ),
    ("log-append-values-one-bad", T, r"values\[1\]", lambda p, log, a: log.append_values([b"a", 5])),
    (
        "log-append-values-timestamp",
        V,
        "timestamp",
        lambda p, log, a: log.append_values([b"a"], timestamp=-1),
    ),
    ("log-append-values-bytes", T, "values", lambda p, log, a: log.append_values(b"abc")),
    ("log-append-not-records", T, "Record", lambda p, log, a: log.append([b"x"])),
    (
        "log-append-batches-str",
        T,
        r"data must be bytes.*\.encode\(\)",
        lambda p, log, a: log.append_batches("x"),
    ),
    ("log-clean-not-compacted", V, "compact=True", lambda p, log, a: log.clean()),
    ("log-read-negative-max", V, "max_bytes", lambda p, log, a: log.read(0, max_bytes=-1)),
    ("log-read-str-offset", T, "offset", lambda p, log, a: log.read("0")),
    ("log-delete-before-negative", V, "offset", lambda p, log, a: log.delete_records_before(-5)),
    ("log-records-str", T, "start", lambda p, log, a: list(log.records(start="a"))),
    (
        "log-open-segment-zero",
        V,
        "segment_bytes",
        lambda p, log, a: Log(log.path + "x", any_folder=True, segment_bytes=0),
    ),
    (
        "log-open-segment-bool",
        T,
        "segment_bytes",
        lambda p, log, a: Log(log.path + "x", any_folder=True, segment_bytes=True),
    ),
    (
        "log-open-segment-huge",
        V,
        "segment_bytes",
        lambda p, log, a: Log(log.path + "x", any_folder=True, segment_bytes=2**40),
    ),
    (
        "log-open-max-message",
        V,
        "max_message_bytes",
        lambda p, log, a: Log(log.path + "x", any_folder=True, max_message_bytes=-1),
    ),
    (
        "log-open-flush-word",
        V,
        "flush",
        lambda p, log, a: Log(log.path + "x", any_folder=True, flush="sometimes"),
    ),
    ("log-open-flush-zero", V, "flush", lambda p, log, a: Log(log.path + "x", any_folder=True, flush=0)),
    (
        "log-open-readonly-str",
        T,
        "readonly",
        lambda p, log, a: Log(log.path + "x", any_folder=True, readonly="yes"),
    ),
    (
        "log-open-retention-negative",
        V,
        "retention_ms",
        lambda p, log, a: Log(log.path + "x", any_folder=True, retention_ms=-5),
    ),
    (
        "log-open-compression-int",
        T,
        "compression",
        lambda p, log, a: Log(log.path + "x", any_folder=True, compression=5),
    ),
    ("log-open-path-int", T, "path", lambda p, log, a: Log(5)),
]


def _partitioner_out_of_range(p, log, a):
    return p.send("t", b"v", key=b"k")


def _folders(data_dir: str) -> list[str]:
    """The data directory's folders (topics, groups): what a refused call must not create. Files
    such as Kafka's checkpoints are written by the clean close at the end, not by the call."""
    return sorted(n for n in os.listdir(data_dir) if os.path.isdir(os.path.join(data_dir, n)))


@pytest.mark.parametrize("known", [False, True], ids=["new-topics", "known-topics"])
@pytest.mark.parametrize("builtin, words, call", [c[1:] for c in CALL_CASES], ids=[c[0] for c in CALL_CASES])
def test_misuse_is_refused_typed_and_writes_nothing(tmp_path, builtin, words, call, known):
    """``known``: the producer has looked the topics up already, so send() takes its native
    path (ProducerCore.send) first, which must hand every refused call to the Python rules."""
    data_dir = str(tmp_path / "data")
    admin = Admin(data_dir)
    admin.create_topic("t", partitions=2)
    admin.create_topic("c", config={"cleanup.policy": "compact"})
    config = {}
    if call is None:  # a custom partitioner that answers a partition the topic does not have
        config["partitioner"] = lambda key, all_partitions, available: 7
        call = _partitioner_out_of_range
    producer = Producer(data_dir, linger_ms=0, **config)
    log = Log(os.path.join(data_dir, "t-0"), shared_writers=True)
    before = _folders(data_dir)
    if known:
        assert producer.partitions_for("t") == {0, 1} and producer.partitions_for("c") == {0}
    try:
        with pytest.raises(KafkaliteError, match=words) as info:
            call(producer, log, admin)
        assert isinstance(info.value, builtin), f"{type(info.value).__mro__} is not a {builtin.__name__}"
        if builtin is TypeError:
            assert isinstance(info.value, InvalidTypeError)
        else:
            assert isinstance(
                info.value, (InvalidConfigError, kafkalite.RecordTooLargeError, kafkalite.InvalidRecordError)
            )
        producer.flush()
    finally:
        producer.close()
        log.close()
    assert _folders(data_dir) == before  # no folder created or removed
    for name, partitions in (("t", 2), ("c", 1)):
        for p in range(partitions):
            with Log(os.path.join(data_dir, f"{name}-{p}"), readonly=True) as check:
                assert check.end_offset == 0, f"{name}-{p} was written"


def test_send_batch_applies_the_serializers(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    with Producer(data_dir, value_serializer=str.encode, key_serializer=str.encode) as p:
        assert p.send_batch("t", ["a", "b"], keys=["k1", "k2"], partition=0) == {0: (0, 1)}
        assert p.send_batch("t", ["c"], partition=0) == {0: (2, 2)}
    with Log(os.path.join(data_dir, "t-0"), readonly=True) as log:
        assert [(r.key, r.value) for r in log.records()] == [(b"k1", b"a"), (b"k2", b"b"), (None, b"c")]


def test_the_str_wording_is_the_same_on_every_path(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    messages = []
    with Producer(data_dir) as p, Log(os.path.join(data_dir, "t-0"), shared_writers=True) as log:
        for call in (
            lambda: p.send("t", "x"),
            lambda: p.send_batch("t", ["x"]),
            lambda: log.append_values(["x"]),
        ):
            with pytest.raises(InvalidTypeError) as info:
                call()
            # The fix differs (a Log takes no serializer); what is wrong is worded once.
            messages.append(str(info.value).split(" must be ", 1)[1].split(";")[0])
    assert len(set(messages)) == 1, messages


@pytest.mark.parametrize("timeout, builtin", [(NAN, ValueError), (-1, ValueError), ("1", TypeError)])
def test_a_future_refuses_a_bad_timeout(tmp_path, timeout, builtin):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    with Producer(data_dir, linger_ms=10_000) as p:
        future = p.send("t", b"v")
        with pytest.raises(KafkaliteError, match="timeout") as info:
            future.get(timeout=timeout)
        assert isinstance(info.value, builtin)
