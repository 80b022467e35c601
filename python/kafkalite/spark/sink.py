"""The Kafka sink's side of the Spark source: rows with a required ``value`` and optional
``key``, ``topic``, ``partition`` and ``headers`` columns, planned into per-partition groups,
encoded, then appended.

What a write guarantees (README, "Spark"):

* Batch writes (``df.write``): rows become visible only in the driver's commit, after every
  task succeeded; a failed task leaves nothing. The commit first plans and encodes every
  partition's rows, so a row that cannot be written (unknown topic or partition, record too
  large, null key on a compacted topic) fails the write before anything is appended. The
  appends themselves go partition by partition, each one append call: an I/O error or a crash
  in the middle of the commit leaves the partitions appended before it visible (as Kafka's
  sink leaves what it sent); the error names them. There are no transactions to roll back.
* Streaming writes (``writeStream``): exactly once per (sink, micro-batch). The sink appends
  its batches as an idempotent Kafka producer would: a producer id derived from the sink id,
  and per partition a sequence number per record (``baseSequence`` in each batch header). Before
  appending it durably records the micro-batch as pending with each partition's end offset and
  first sequence; after appending, the micro-batch id as committed. A replayed micro-batch that
  is committed is skipped; one that is pending is finished: the sink reads the batch headers
  from the recorded offsets, finds its own batches by producer id and sequence (whatever other
  producers appended in between) and appends only the rows that are not there yet.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafkalite._files import write_atomically
from kafkalite._native import FIRST_SINK_PRODUCER_ID
from kafkalite.client_config import compression_type
from kafkalite.errors import InvalidConfigError
from kafkalite.spark.batches import SEQUENCE_MODULUS, Producer, encode, next_sequence, scan
from kafkalite.spark.checks import ensure_topics
from kafkalite.spark.options import SparkOptionError

if TYPE_CHECKING:
    from kafkalite.log import Log

SINKS_DIR = ".kafkalite-spark-sinks"
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
    """``{"batch_id": last committed micro-batch (-1), "sequences": {"topic:partition": next
    sequence number}, "pending": the micro-batch being appended, with each partition's end
    offset ("starts") and first sequence ("sequences") before its append}``. A damaged file is
    an error, not a fresh start: starting over would append committed micro-batches again."""
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


def save_state(path: str, sink: str, state: dict[str, Any]) -> None:
    """Durably (temp file, fsync, rename, fsync of the folder), through the Python layer's one
    atomic-write helper, so a link planted at the marker or its temp file is not followed."""
    marker = _marker(path, sink)
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    write_atomically(marker, json.dumps(state).encode("utf-8"))


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
    """The sink's Kafka producer identity, epoch 0: an id from the sink id, at or above
    ``FIRST_SINK_PRODUCER_ID`` (bit 62 set), where ``kafkalite serve``'s InitProducerId never
    reaches, so a network producer never shares a sink's producer state."""
    digest = int.from_bytes(hashlib.sha256(sink.encode()).digest()[:8], "big")
    return Producer((digest >> 2) | FIRST_SINK_PRODUCER_ID)


def _encode(
    path: str,
    groups: list[Group],
    producer: Producer | None = None,
    sequences: Mapping[str, int] | None = None,
    skips: Mapping[str, int] | None = None,
    compression: str | None = None,
) -> list[tuple[Group, bytes]]:
    """Every group's rows (after its first ``skips`` rows) as v2 batches, encoded by the engine
    with the partition's settings before any append."""
    from kafkalite.datadir import DataDir

    data_dir = DataDir(path, create=False)
    out = []
    for g in groups:
        skip = (skips or {}).get(_key(g), 0)
        if skip >= len(g.values):
            continue
        first_sequence = next_sequence((sequences or {}).get(_key(g), 0), skip)
        with _open(data_dir, g, compression) as log:
            data = encode(log, g.values[skip:], g.keys[skip:], g.headers[skip:], producer, first_sequence)
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


def _first_sequences(
    path: str, groups: list[Group], producer: Producer, committed: Mapping[str, int]
) -> dict[str, int]:
    """Each partition's first sequence number for a new micro-batch: the next one the sink
    recorded, else (a partition it never committed to, or its record was deleted) the next one
    the partition's producer state expects from it, else 0 (Kafka's first sequence)."""
    from kafkalite.datadir import DataDir

    data_dir = DataDir(path, create=False)
    out = {}
    for g in groups:
        if _key(g) in committed:
            out[_key(g)] = committed[_key(g)]
            continue
        with _open(data_dir, g) as log:
            known = log.producer_sequence(producer.id)
        if known is not None and known[0] == producer.epoch and known[1] >= 0:
            out[_key(g)] = next_sequence(known[1], 1)
        else:
            out[_key(g)] = 0
    return out


def _append_all(path: str, encoded: list[tuple[Group, bytes]]) -> None:
    """One append call per partition, through the engine's idempotent producer checks (the
    batches of a replay already in the log are a duplicate: nothing is written again); an
    error names the partitions already appended."""
    from kafkalite.datadir import DataDir

    data_dir = DataDir(path, create=False)
    done: list[str] = []
    for g, data in encoded:
        try:
            with data_dir.open_partition(g.topic, g.partition, shared_writers=True) as log:
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
                f"kafkalite Spark sink: appending to {g.topic}-{g.partition} failed; "
                + (
                    f"these partitions were appended before it and stay visible: {', '.join(done)}"
                    if done
                    else "nothing was appended"
                )
            )
            raise
        done.append(f"{g.topic}-{g.partition}")


def _end_offset(path: str, g: Group) -> int:
    from kafkalite.log import Log

    with Log(os.path.join(path, f"{g.topic}-{g.partition}"), readonly=True) as log:
        return log.end_offset


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


def publish(path: str, tables: list[Any], default_topic: str | None, compression: str | None = None) -> None:
    """Batch write: plan and encode every partition's rows, then append them partition by
    partition (what holds on failure: the module docstring)."""
    groups = plan_groups(path, tables, default_topic)
    _append_all(path, _encode(path, groups, compression=compression))


def publish_once(
    path: str,
    sink: str,
    batch_id: int,
    tables: list[Any],
    default_topic: str | None,
    compression: str | None = None,
) -> bool:
    """Streaming write, exactly once per (sink, micro-batch) (the module docstring says how).
    Returns whether anything was appended."""
    state = load_state(path, sink)
    if state["batch_id"] >= batch_id:
        return False
    groups = plan_groups(path, tables, default_topic)
    producer = producer_for(sink)
    committed: dict[str, int] = state["sequences"]
    pending = state["pending"] if state["pending"] and state["pending"].get("batch_id") == batch_id else None
    if pending is None:
        sequences = _first_sequences(path, groups, producer, committed)
        encoded = _encode(path, groups, producer, sequences, compression=compression)  # bad rows fail here
        starts = {_key(g): _end_offset(path, g) for g in groups}
        save_state(
            path,
            sink,
            {**state, "pending": {"batch_id": batch_id, "starts": starts, "sequences": sequences}},
        )
    else:
        starts = pending["starts"]
        sequences = {
            _key(g): pending.get("sequences", {}).get(_key(g), committed.get(_key(g), 0)) for g in groups
        }
        skips = {
            _key(g): _written(path, g, producer, starts[_key(g)], sequences[_key(g)])
            for g in groups
            if _key(g) in starts
        }
        encoded = _encode(path, groups, producer, sequences, skips, compression)
    _append_all(path, encoded)
    after = dict(committed)
    after.update({_key(g): next_sequence(sequences[_key(g)], len(g.values)) for g in groups})
    save_state(path, sink, {"batch_id": batch_id, "sequences": after, "pending": None})
    return bool(encoded)
