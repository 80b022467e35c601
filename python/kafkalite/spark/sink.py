"""The Kafka sink's side of the Spark source: rows with a required ``value`` and optional
``key``, ``topic``, ``partition`` and ``headers`` columns appended through the producer's batch
path, and the per-sink record of committed micro-batches that makes streaming writes
exactly-once."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalite.spark.options import SparkOptionError

SINKS_DIR = ".kafkalite-spark-sinks"


def check_path(options: Mapping[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise SparkOptionError("give the kafkalite data directory: .save('/path/to/data') or .start('/path/to/data')")
    if not os.path.isdir(path):
        raise SparkOptionError(f"{path} is not a kafkalite data directory (create topics with kafkalite.Admin first)")
    return os.path.abspath(path)


def sink_id(options: Mapping[str, str]) -> str:
    """A streaming sink's identity: its checkpoint location (what Spark replays from), or the
    ``sinkId`` option."""
    ident = options.get("sinkid") or options.get("sinkId") or options.get("checkpointlocation") or options.get("checkpointLocation")
    if not ident:
        raise SparkOptionError(
            "a kafkalite streaming sink needs .option('checkpointLocation', ...) (or .option('sinkId', ...)) "
            "to recognise replayed micro-batches"
        )
    return hashlib.sha256(str(ident).encode()).hexdigest()[:32]


def _marker(path: str, sink: str) -> str:
    return os.path.join(path, SINKS_DIR, f"{sink}.json")


def load_state(path: str, sink: str) -> dict[str, Any]:
    """``{"batch_id": last committed micro-batch (-1), "pending": the one being appended}``."""
    try:
        with open(_marker(path, sink), encoding="utf-8") as f:
            state = json.load(f)
        return {"batch_id": int(state.get("batch_id", -1)), "pending": state.get("pending")}
    except (FileNotFoundError, ValueError):
        return {"batch_id": -1, "pending": None}


def save_state(path: str, sink: str, state: dict[str, Any]) -> None:
    """Durably: temp file, fsync, rename."""
    marker = _marker(path, sink)
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    tmp = marker + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, marker)


def _binary(table: Any, name: str) -> Any:
    import pyarrow as pa

    col = table.column(name)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type):
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
    from kafkalite.datadir import DataDir

    data_dir = DataDir(path, create=False)
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
        counts = {t: data_dir.partitions(t) for t in set(topics)}
        by_key: dict[int, int] = {}
        for topic, count in counts.items():  # toPositive(murmur2(key)) % partitions, as Kafka
            rows = [i for i in range(n) if topics[i] == topic and explicit[i] is None and keys[i] is not None]
            if rows:
                by_key.update(zip(rows, partitions_for_keys([keys[i] for i in rows], count)))
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


def _append(path: str, g: Group, skip: int = 0) -> None:
    from kafkalite.datadir import DataDir
    from kafkalite.log import Record

    if skip >= len(g.values):
        return
    with DataDir(path, create=False).open_partition(g.topic, g.partition, shared_writers=True) as log:
        rows = range(skip, len(g.values))
        if not any(g.keys[i] is not None or g.headers[i] for i in rows):
            log.append_values([g.values[i] for i in rows])
        else:
            log.append([Record(g.values[i], key=g.keys[i], headers=g.headers[i] or None) for i in rows])


def _end_offset(path: str, g: Group) -> int:
    from kafkalite.log import Log

    with Log(os.path.join(path, f"{g.topic}-{g.partition}"), readonly=True) as log:
        return log.end_offset


def _appended_prefix(path: str, g: Group, start: int) -> int:
    """How many of ``g``'s rows are already in the log from offset ``start`` (a commit that
    crashed after appending some or all of them)."""
    from kafkalite.log import Log

    with Log(os.path.join(path, f"{g.topic}-{g.partition}"), readonly=True) as log:
        done = 0
        for r in log.records(start, min(log.end_offset, start + len(g.values))):
            if r.offset != start + done or (r.value, r.key) != (g.values[done], g.keys[done]):
                break
            done += 1
        return done


def publish(path: str, tables: list[Any], default_topic: str | None) -> None:
    """Batch write: append every group."""
    for g in plan_groups(path, tables, default_topic):
        _append(path, g)


def publish_once(path: str, sink: str, batch_id: int, tables: list[Any], default_topic: str | None) -> bool:
    """Streaming write, exactly once per (sink, micro-batch): a batch id already committed is
    skipped; before appending, the partitions' end offsets are recorded as pending, so a commit
    that crashed midway is finished (rows already in the log are not appended again) when Spark
    replays the batch. Returns whether anything was appended."""
    state = load_state(path, sink)
    if state["batch_id"] >= batch_id:
        return False
    groups = plan_groups(path, tables, default_topic)
    pending = state["pending"] if state["pending"] and state["pending"]["batch_id"] == batch_id else None
    if pending is None:
        starts = {f"{g.topic}:{g.partition}": _end_offset(path, g) for g in groups}
        save_state(path, sink, {"batch_id": state["batch_id"], "pending": {"batch_id": batch_id, "starts": starts}})
        skips = {}
    else:
        starts = pending["starts"]
        skips = {(g.topic, g.partition): _appended_prefix(path, g, starts[f"{g.topic}:{g.partition}"]) for g in groups if f"{g.topic}:{g.partition}" in starts}
    for g in groups:
        _append(path, g, skips.get((g.topic, g.partition), 0))
    save_state(path, sink, {"batch_id": batch_id, "pending": None})
    return True
