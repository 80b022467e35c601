"""The Kafka sink's side of the Spark source: rows with a required ``value`` and optional
``key``, ``topic``, ``partition`` and ``headers`` columns, planned into per-partition groups,
encoded, then appended.

What a write guarantees (README, "Spark"):

* Batch writes (``df.write``): rows become visible only in the driver's commit, after every
  task succeeded; a failed task leaves nothing. The commit first plans and encodes every
  partition's rows, so a row that cannot be written (unknown topic or partition, record too
  large, null key on a compacted topic) fails the write before anything is appended. It then
  appends them as one Kafka transaction over all the partitions (``spark/transactional.py``
  says under which transactional id): read_committed readers (``kafka.isolation.level`` /
  ``isolation_level="read_committed"``) see every row of the write at its COMMIT or none of
  them, whether an append fails (the transaction is aborted) or the driver is killed midway
  (the next commit, or the transaction's timeout, aborts it). read_uncommitted readers, as
  Kafka's, also see the records of an aborted commit.
* Streaming writes (``writeStream``): exactly once per (sink, micro-batch), each micro-batch
  one transaction under a transactional id derived from the sink id (or
  ``kafka.transactional.id``), so read_committed readers see a micro-batch whole or not at
  all. The transaction also commits the micro-batch id, as the offset of the group
  ``kafkalite-spark-sink-<sink id>`` (``BATCH_ID_PARTITION``), the way a consume-transform-
  produce job commits its input offsets: the rows and the id are committed together. A commit
  first ends the sink's previous transaction (InitProducerId: a killed micro-batch is aborted,
  or completed if it was killed after its commit decision), then skips a micro-batch whose id
  is committed, and otherwise appends it whole. A second query writing with the same sink id
  fences the first, as two Kafka producers with one transactional id do.
  Sinks written by an older kafkalite kept their state in ``.kafkalite-spark-sinks/<sink
  id>.json``: its committed micro-batch id still counts, and a micro-batch it left pending is
  finished without the rows it had appended (found by the idempotent producer id and
  sequence numbers that version stamped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafkalite import _native
from kafkalite._native import FIRST_SINK_PRODUCER_ID
from kafkalite.client_config import compression_type
from kafkalite.errors import InvalidConfigError
from kafkalite.spark.batches import SEQUENCE_MODULUS, Producer, encode, scan
from kafkalite.spark.checks import ensure_topics
from kafkalite.spark.options import SparkOptionError
from kafkalite.spark.transactional import DEFAULT_TIMEOUT_MS, batch_transaction, open_transaction

if TYPE_CHECKING:
    from kafkalite.log import Log

SINKS_DIR = ".kafkalite-spark-sinks"
#: A streaming sink's transactional id (without ``kafka.transactional.id``) and the group whose
#: offset of ``BATCH_ID_PARTITION`` is the next micro-batch id: both end with the sink id.
SINK_TRANSACTIONAL_ID_PREFIX = "kafkalite-spark-sink-"
SINK_GROUP_PREFIX = "kafkalite-spark-sink-"
BATCH_ID_PARTITION = ("__kafkalite_spark_batch_id", 0)
log_ = logging.getLogger("kafkalite.spark")


def sink_id(options: Mapping[str, str]) -> str:
    """A streaming sink's identity: its checkpoint location (what Spark replays from), or the
    ``sinkId`` option."""
    ident = (
        options.get("sinkid")
        or options.get("sinkId")
        or options.get("checkpointlocation")
        or options.get("checkpointLocation")
    )
    if not ident:
        raise SparkOptionError(
            "a kafkalite streaming sink needs .option('checkpointLocation', ...) (or .option('sinkId', ...)) "
            "to recognise replayed micro-batches"
        )
    return hashlib.sha256(str(ident).encode()).hexdigest()[:32]


def sink_compression(options: Mapping[str, str]) -> str | None:
    """The sink's producer codec, Spark's Kafka sink option ``kafka.compression.type`` (default
    none); what a topic with ``compression.type=producer`` is written with
    (``kafkalite.datadir.target_compression``)."""
    codec = options.get("kafka.compression.type")
    try:
        return compression_type("option 'kafka.compression.type'", codec)  # type: ignore[no-any-return]
    except InvalidConfigError as e:
        raise SparkOptionError(str(e)) from None


def _marker(path: str, sink: str) -> str:
    return os.path.join(path, SINKS_DIR, f"{sink}.json")


def load_state(path: str, sink: str) -> dict[str, Any]:
    """The state an older kafkalite kept for a sink (read, never written now): ``{"batch_id":
    last committed micro-batch (-1), "sequences": {"topic:partition": next sequence number},
    "pending": the micro-batch being appended, with each partition's end offset ("starts") and
    first sequence ("sequences") before its append}``. A damaged file is an error, not a fresh
    start: starting over would append committed micro-batches again."""
    try:
        with open(_marker(path, sink), encoding="utf-8") as f:
            state = json.load(f)
        return {
            "batch_id": int(state.get("batch_id", -1)),
            "sequences": dict(state.get("sequences") or {}),
            "pending": state.get("pending"),
        }
    except FileNotFoundError:
        return {"batch_id": -1, "sequences": {}, "pending": None}
    except (ValueError, TypeError, AttributeError) as e:
        raise SparkOptionError(
            f"the sink's commit record {_marker(path, sink)} is damaged ({e}); restore it, or delete it "
            "accepting that micro-batches Spark replays are appended again"
        ) from None


def _binary(table: Any, name: str) -> Any:
    import pyarrow as pa

    col = table.column(name)
    if (
        pa.types.is_string(col.type)
        or pa.types.is_large_string(col.type)
        or pa.types.is_large_binary(col.type)
    ):
        col = col.cast(pa.binary())
    if not pa.types.is_binary(col.type):
        raise SparkOptionError(f"{name} attribute type must be a String or BinaryType, not {col.type}")
    return col


@dataclass
class Group:
    """The rows bound for one partition, in order."""

    topic: str
    partition: int
    values: list[bytes] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] = field(default_factory=list)


def plan_groups(path: str, tables: list[Any], default_topic: str | None) -> list[Group]:
    """Kafka-sink rows -> per-partition groups: the ``partition`` column, else murmur2 of the
    key, else round robin. Deterministic, so a replayed micro-batch plans the same groups."""
    from kafkalite._native import partitions_for_keys

    groups: dict[tuple[str, int], Group] = {}
    round_robin: dict[str, int] = {}
    for table in tables:
        names = set(table.column_names)
        if "value" not in names:
            raise SparkOptionError("Required attribute 'value' not found")
        if "topic" not in names and not default_topic:
            raise SparkOptionError(
                "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
            )
        n = table.num_rows
        raw_topics = table.column("topic").to_pylist() if "topic" in names else [None] * n
        if any(not (t or default_topic) for t in raw_topics):
            raise SparkOptionError("a row has a null 'topic' and no topic option is set")
        topics: list[str] = [str(t or default_topic) for t in raw_topics]
        values: list[Any] = _binary(table, "value").to_pylist()
        keys: list[Any] = _binary(table, "key").to_pylist() if "key" in names else [None] * n
        explicit: list[Any] = table.column("partition").to_pylist() if "partition" in names else [None] * n
        headers: list[Any] = table.column("headers").to_pylist() if "headers" in names else [None] * n
        existing = ensure_topics(
            path, set(topics), lambda t: "option 'topic'" if t == default_topic else "a row's 'topic' column"
        )
        counts = {t: existing[t] for t in set(topics)}
        by_key: dict[int, int] = {}
        for topic, count in counts.items():  # toPositive(murmur2(key)) % partitions, as Kafka
            rows = [i for i in range(n) if topics[i] == topic and explicit[i] is None and keys[i] is not None]
            if rows:
                by_key.update(zip(rows, partitions_for_keys([keys[i] for i in rows], count), strict=True))
        for i in range(n):
            topic = topics[i]
            if explicit[i] is not None:
                partition = int(explicit[i])
            elif i in by_key:
                partition = by_key[i]
            else:
                partition = round_robin.get(topic, 0) % counts[topic]
                round_robin[topic] = partition + 1
            g = groups.get((topic, partition))
            if g is None:
                g = groups[(topic, partition)] = Group(topic, partition)
            g.values.append(values[i])
            g.keys.append(keys[i])
            g.headers.append([(h["key"], h["value"]) for h in headers[i] or []])
    return [groups[k] for k in sorted(groups)]


def _key(g: Group) -> str:
    return f"{g.topic}:{g.partition}"


def producer_for(sink: str) -> Producer:
    """The idempotent producer identity an older kafkalite stamped a sink's batches with, epoch 0: an id from the sink id, at or above
    ``FIRST_SINK_PRODUCER_ID`` (bit 62 set), where ``kafkalite serve``'s InitProducerId never
    reaches, so a network producer never shares a sink's producer state."""
    digest = int.from_bytes(hashlib.sha256(sink.encode()).digest()[:8], "big")
    return Producer((digest >> 2) | FIRST_SINK_PRODUCER_ID)


def _encode(
    path: str,
    groups: list[Group],
    producer: Producer,
    skips: Mapping[str, int] | None = None,
    compression: str | None = None,
) -> list[tuple[Group, bytes]]:
    """Every group's rows (after its first ``skips`` rows) as ``producer``'s transactional v2
    batches (its first in the partition at this epoch: sequence 0), encoded by the engine with
    the partition's settings before any append."""
    from kafkalite.datadir import DataDir

    data_dir = DataDir(path, create=False)
    out = []
    for g in groups:
        skip = (skips or {}).get(_key(g), 0)
        if skip >= len(g.values):
            continue
        with _open(data_dir, g, compression) as log:
            data = encode(
                log, g.values[skip:], g.keys[skip:], g.headers[skip:], producer, 0, transactional=True
            )
        out.append((g, data))
    return out


def _open(data_dir: Any, g: Group, compression: str | None = None) -> Log:
    """``g``'s partition as a writer; rows for a missing partition or a broker's folder fail
    with a message naming them."""
    meta = data_dir.topic(g.topic)
    if not 0 <= g.partition < int(meta["partitions"]):
        raise SparkOptionError(
            f"a row asks for partition {g.partition} of topic {g.topic!r}, which has partitions 0..{int(meta['partitions']) - 1}"
        )
    if meta.get("discovered"):
        raise SparkOptionError(
            f"{data_dir.path} is a Kafka broker's log directory without kafkalite metadata: it can be read, not written"
        )
    log: Log = data_dir.open_partition(
        g.topic, g.partition, producer_compression=compression, shared_writers=True
    )
    return log


def _append_all(
    path: str, encoded: list[tuple[Group, bytes]], txn: _native.Transaction | None = None
) -> None:
    """One append call per partition, through the engine's idempotent producer checks (the
    batches of a replay already in the log are a duplicate: nothing is written again), in
    ``txn``'s open transaction when given; an error names the partitions already appended."""
    from kafkalite.datadir import DataDir

    data_dir = DataDir(path, create=False)
    done: list[str] = []
    for g, data in encoded:
        try:
            with data_dir.open_partition(g.topic, g.partition, shared_writers=True) as log:
                if txn is not None:
                    log._native.attach_transaction(txn)
                produced = log.append_produce(data)
            if produced.duplicate:
                log_.info(
                    "kafkalite Spark sink: %s-%d already holds these batches (offsets %d..%d); not appended again",
                    g.topic,
                    g.partition,
                    produced.first_offset,
                    produced.last_offset,
                )
        except Exception as e:
            e.add_note(
                f"kafkalite Spark sink: appending to {g.topic}-{g.partition} failed"
                + (f" after {', '.join(done)}" if done else "")
            )
            raise
        done.append(f"{g.topic}-{g.partition}")


def _written(path: str, g: Group, producer: Producer, start: int, first_sequence: int) -> int:
    """How many of ``g``'s rows a crashed commit already appended: its own batches (producer
    id and epoch) found from offset ``start``, by sequence number relative to ``first_sequence``.
    Read through a writer handle, so a torn tail a killed writer left is recovered first."""
    from kafkalite.datadir import DataDir

    done = 0
    with DataDir(path, create=False).open_partition(g.topic, g.partition, shared_writers=True) as log:
        for info in scan(log, max(start, log.start_offset)):
            if info.control or (info.producer_id, info.producer_epoch) != (producer.id, producer.epoch):
                continue
            relative = (info.base_sequence - first_sequence) % SEQUENCE_MODULUS
            if relative < len(g.values):
                done = max(done, relative + info.records)
    return min(done, len(g.values))


def _legacy_written(path: str, sink: str, groups: list[Group], legacy: dict[str, Any]) -> dict[str, int]:
    """How many rows of each group an older kafkalite's killed commit of this micro-batch
    appended (visible: it wrote outside any transaction), from the offsets it recorded."""
    producer = producer_for(sink)
    pending = legacy["pending"]
    starts, sequences = pending.get("starts") or {}, pending.get("sequences") or {}
    return {
        _key(g): _written(
            path, g, producer, starts[_key(g)], sequences.get(_key(g), legacy["sequences"].get(_key(g), 0))
        )
        for g in groups
        if _key(g) in starts
    }


def publish(
    path: str,
    tables: list[Any],
    default_topic: str | None,
    compression: str | None = None,
    transactional_id: str | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> None:
    """Batch write: plan and encode every partition's rows, then append them all in one
    transaction (what holds on failure: the module docstring)."""
    groups = plan_groups(path, tables, default_topic)
    if not groups:
        return
    with batch_transaction(path, transactional_id, timeout_ms) as txn:
        _commit(txn, path, _encode(path, groups, _producer(txn), compression=compression))


def publish_once(
    path: str,
    sink: str,
    batch_id: int,
    tables: list[Any],
    default_topic: str | None,
    compression: str | None = None,
    transactional_id: str | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> bool:
    """Streaming write, exactly once per (sink, micro-batch) (the module docstring says how).
    Returns whether anything was appended."""
    group = f"{SINK_GROUP_PREFIX}{sink}"
    with open_transaction(
        path, transactional_id or f"{SINK_TRANSACTIONAL_ID_PREFIX}{sink}", timeout_ms
    ) as txn:
        legacy = load_state(path, sink)
        if max(legacy["batch_id"], _committed_batch(path, group)) >= batch_id:
            return False
        groups = plan_groups(path, tables, default_topic)
        pending = legacy["pending"]
        skips = (
            _legacy_written(path, sink, groups, legacy)
            if pending and pending.get("batch_id") == batch_id
            else {}
        )
        encoded = _encode(path, groups, _producer(txn), skips, compression)
        _commit(txn, path, encoded, (group, [(*BATCH_ID_PARTITION, batch_id + 1, None)]))
        return bool(encoded)


def _committed_batch(path: str, group: str) -> int:
    """The last micro-batch id the sink's transactions committed (-1: none)."""
    from kafkalite.groups.offsets import OffsetStore

    with OffsetStore(path, group) as store:
        committed = store.load().get(BATCH_ID_PARTITION)
    return -1 if committed is None else committed[0] - 1


def _producer(txn: _native.Transaction) -> Producer:
    pid, epoch = txn.producer or (-1, -1)
    return Producer(pid, epoch)


def _commit(
    txn: _native.Transaction,
    path: str,
    encoded: list[tuple[Group, bytes]],
    offsets: tuple[str, list[tuple[str, int, int, str | None]]] | None = None,
) -> None:
    """Append ``encoded`` (and commit ``offsets`` for a group) in one transaction of ``txn``."""
    txn.begin()
    try:
        txn.add_partitions([(g.topic, g.partition) for g, _ in encoded])
        _append_all(path, encoded, txn)
        if offsets is not None:
            txn.send_offsets(*offsets)
    except BaseException as e:
        _abort(txn, e)
        raise
    try:
        txn.end(True)
    except BaseException as e:
        e.add_note(
            "kafkalite Spark sink: committing the transaction failed; read_committed readers see all of this "
            f"write or none of it, decided by the next use of transactional id {txn.transactional_id!r}"
        )
        raise


def _abort(txn: _native.Transaction, e: BaseException) -> None:
    """After a failed append: abort the transaction, saying on ``e`` what readers see."""
    try:
        txn.end(False)
    except Exception as abort_error:
        e.add_note(
            f"kafkalite Spark sink: aborting the transaction failed too ({abort_error}); it stays open until "
            f"the next commit under transactional id {txn.transactional_id!r} or its timeout aborts it: "
            "read_committed readers see none of this write"
        )
        return
    e.add_note(
        "kafkalite Spark sink: the transaction was aborted: read_committed readers see none of this write"
    )
