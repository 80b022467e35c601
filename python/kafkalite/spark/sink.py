"""The Kafka sink's side of the Spark source: rows with a required ``value`` and optional
``key``, ``topic``, ``partition`` and ``headers`` columns appended through the producer's batch
path, and the per-sink record of committed micro-batches that makes streaming writes
exactly-once."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
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


def committed_batch(path: str, sink: str) -> int:
    try:
        with open(_marker(path, sink), encoding="utf-8") as f:
            return int(json.load(f)["batch_id"])
    except (FileNotFoundError, ValueError, KeyError):
        return -1


def record_batch_id(path: str, sink: str, batch_id: int) -> None:
    """Durably: temp file, fsync, rename."""
    marker = _marker(path, sink)
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    tmp = marker + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"batch_id": batch_id}, f)
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


def append_table(path: str, table: Any, default_topic: str | None) -> None:
    """Append a table of Kafka-sink rows: grouped by topic and partition, each group one
    ``send_batch`` (headers, if any row has them, go record by record)."""
    from kafkalite import Producer
    from kafkalite._native import partitions_for_keys
    from kafkalite.datadir import DataDir

    names = set(table.column_names)
    if "value" not in names:
        raise SparkOptionError("Required attribute 'value' not found")
    if "topic" not in names and not default_topic:
        raise SparkOptionError(
            "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
        )
    n = table.num_rows
    if n == 0:
        return
    topics = table.column("topic").to_pylist() if "topic" in names else None
    if topics is not None and default_topic:
        topics = [t or default_topic for t in topics]
    values = _binary(table, "value").to_pylist()
    keys = _binary(table, "key").to_pylist() if "key" in names else [None] * n
    explicit = table.column("partition").to_pylist() if "partition" in names else [None] * n
    headers = table.column("headers").to_pylist() if "headers" in names else None
    data_dir = DataDir(path, create=False)
    with Producer(path) as producer:
        for topic in sorted(set(topics)) if topics is not None else [default_topic]:
            rows = [i for i in range(n) if topics is None or topics[i] == topic]
            count = data_dir.partitions(topic)  # type: ignore[arg-type]
            keyed = [i for i in rows if explicit[i] is None and keys[i] is not None]
            by_key = dict(zip(keyed, partitions_for_keys([keys[i] for i in keyed], count))) if keyed else {}
            groups: dict[int | None, list[int]] = {}
            for i in rows:
                groups.setdefault(explicit[i] if explicit[i] is not None else by_key.get(i), []).append(i)
            for partition, idx in groups.items():
                if headers is not None and any(headers[i] for i in idx):
                    for i in idx:
                        pairs = [(h["key"], h["value"]) for h in headers[i] or []]
                        producer.send(topic, value=values[i], key=keys[i], headers=pairs, partition=partition)  # type: ignore[arg-type]
                    continue
                vals = [values[i] for i in idx]
                ks = [keys[i] for i in idx]
                if partition is None:
                    producer.send_batch(topic, vals)  # type: ignore[arg-type]
                else:
                    producer.send_batch(topic, vals, keys=ks if any(k is not None for k in ks) else None, partition=partition)  # type: ignore[arg-type]
        producer.flush()
