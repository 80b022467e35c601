"""The options of Spark's Kafka source, parsed and validated with its defaults and messages
(``KafkaSourceProvider``), so a pipeline moves between a Kafka cluster and kafkalite by changing
the format name and the path. Offsets use the Kafka source's JSON: ``{"topic": {"0": 23}}``
with -2 for earliest and -1 for latest."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafkalite.errors import InvalidConfigError

EARLIEST, LATEST = -2, -1
STRATEGY_KEYS = ("assign", "subscribe", "subscribepattern")


class SparkOptionError(InvalidConfigError):
    """An option Spark's Kafka source would reject (its IllegalArgumentException), or a read or
    write whose target cannot be used."""


class DataDirNotFoundError(SparkOptionError, FileNotFoundError):
    """The path given to ``load()``/``save()``/``start()`` is not a kafkalite data directory."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: ``kind`` is earliest, latest, offsets (per partition, with -2/-1
    sentinels), timestamp (one for all) or timestamps (per partition)."""

    kind: str
    offsets: dict[tuple[str, int], int] | None = None
    timestamp: int | None = None


@dataclass(frozen=True)
class SourceOptions:
    path: str
    assign: dict[str, list[int]] | None
    subscribe: list[str] | None
    pattern: str | None
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: str
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    fail_on_data_loss: bool
    include_headers: bool
    #: ``kafka.isolation.level``: read_committed hides aborted transactions and ends at the LSO.
    read_committed: bool = False


def get(options: Mapping[str, str], name: str) -> str | None:
    """An option by its Kafka name (PySpark hands options over lower-cased)."""
    value = options.get(name.lower(), options.get(name))
    return None if value is None else str(value)


def _positive(options: Mapping[str, str], name: str) -> int | None:
    raw = get(options, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise SparkOptionError(
            f"Invalid value '{raw}' for option '{name}', must be a positive integer"
        ) from None
    if value <= 0:
        raise SparkOptionError(f"Invalid value '{raw}' for option '{name}', must be a positive integer")
    return value


def option_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = get(options, name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false"):
        raise SparkOptionError(f"Invalid value '{raw}' for option '{name}', must be true or false")
    return raw.lower() == "true"


def parse_duration_ms(raw: str) -> int:
    """Spark's duration strings: ``15m``, ``30s``, ``500ms``, ``1h``, or plain milliseconds."""
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", raw)
    if not m:
        raise SparkOptionError(
            f"Invalid value '{raw}' for option 'maxTriggerDelay', expected a duration such as 15m"
        )
    unit = {"ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}[m[2]]
    return int(m[1]) * unit


def _partition_json(raw: str, name: str) -> dict[tuple[str, int], int]:
    try:
        data = json.loads(raw)
        return {(topic, int(p)): int(v) for topic, parts in data.items() for p, v in parts.items()}
    except (ValueError, AttributeError, TypeError):
        raise SparkOptionError(
            f'Expected e.g. {{"topicA":{{"0":23,"1":-1}},"topicB":{{"0":-2}}}}, got {raw} for option {name}'
        ) from None


def _offset_spec(options: Mapping[str, str], prefix: str, default: str) -> OffsetSpec:
    timestamp = get(options, f"{prefix}Timestamp")
    if timestamp is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(timestamp))
        except ValueError:
            raise SparkOptionError(
                f"Invalid value '{timestamp}' for option '{prefix}Timestamp', must be epoch milliseconds"
            ) from None
    by_ts = get(options, f"{prefix}OffsetsByTimestamp")
    if by_ts is not None:
        return OffsetSpec("timestamps", offsets=_partition_json(by_ts, f"{prefix}OffsetsByTimestamp"))
    raw = get(options, f"{prefix}Offsets") or default
    if raw.strip().lower() in ("earliest", "latest"):
        return OffsetSpec(raw.strip().lower())
    return OffsetSpec("offsets", offsets=_partition_json(raw, f"{prefix}Offsets"))


def parse(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    path = get(options, "path")
    if not path:
        raise SparkOptionError("give the kafkalite data directory: .load('/path/to/data')")
    given = [k for k in STRATEGY_KEYS if get(options, k) is not None]
    if not given:
        raise SparkOptionError(
            "One of the following options must be specified for Kafka source: subscribe, subscribePattern, assign. "
            "See the docs for more details."
        )
    if len(given) > 1:
        raise SparkOptionError(
            "Only one of the following options can be specified for Kafka source: subscribe, subscribePattern, assign. "
            "See the docs for more details."
        )
    assign = subscribe = pattern = None
    if given[0] == "assign":
        raw = get(options, "assign") or ""
        if not raw.strip().startswith("{"):
            raise SparkOptionError(
                f"""No topicpartitions to assign as specified value for option 'assign' is '{raw}'"""
            )
        try:
            assign = {t: [int(p) for p in ps] for t, ps in json.loads(raw).items()}
        except (ValueError, AttributeError, TypeError):
            raise SparkOptionError(f'Expected e.g. {{"topicA":[0,1],"topicB":[0,1]}}, got {raw}') from None
    elif given[0] == "subscribe":
        subscribe = [t.strip() for t in (get(options, "subscribe") or "").split(",") if t.strip()]
        if not subscribe:
            raise SparkOptionError(
                "No topics to subscribe to as specified value for option 'subscribe' is ''"
            )
    else:
        pattern = get(options, "subscribePattern") or ""
        if not pattern.strip():
            raise SparkOptionError(
                "Pattern to subscribe is empty as specified value for option 'subscribePattern' is ''"
            )
    if streaming:
        for key in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
            if get(options, key) is not None:
                raise SparkOptionError(f"{key} option not valid in streaming queries")
    starting = _offset_spec(options, "starting", "latest" if streaming else "earliest")
    ending = _offset_spec(options, "ending", "latest")
    if not streaming:
        if starting.kind == "latest" or (
            starting.kind == "offsets" and LATEST in (starting.offsets or {}).values()
        ):
            raise SparkOptionError("starting offset can't be latest for batch queries on Kafka")
        if ending.kind == "earliest" or (
            ending.kind == "offsets" and EARLIEST in (ending.offsets or {}).values()
        ):
            raise SparkOptionError("ending offset can't be earliest for batch queries on Kafka")
    strategy = (get(options, "startingOffsetsByTimestampStrategy") or "error").lower()
    if strategy not in ("error", "latest"):
        raise SparkOptionError("startingOffsetsByTimestampStrategy must be 'error' or 'latest'")
    max_trigger = _positive(options, "maxOffsetsPerTrigger")
    min_trigger = _positive(options, "minOffsetsPerTrigger")
    if max_trigger is not None and min_trigger is not None and min_trigger > max_trigger:
        raise SparkOptionError(
            f"The value of minOffsetPerTrigger({min_trigger}) is higher than the "
            f"maxOffsetsPerTrigger({max_trigger})."
        )
    return SourceOptions(
        path=path,
        assign=assign,
        subscribe=subscribe,
        pattern=pattern,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        min_partitions=_positive(options, "minPartitions"),
        max_records_per_partition=_positive(options, "maxRecordsPerPartition"),
        max_offsets_per_trigger=max_trigger,
        min_offsets_per_trigger=min_trigger,
        max_trigger_delay_ms=parse_duration_ms(get(options, "maxTriggerDelay") or "15m"),
        fail_on_data_loss=option_bool(options, "failOnDataLoss", True),
        include_headers=option_bool(options, "includeHeaders", False),
        read_committed=_isolation_level(options) == "read_committed",
    )


def _isolation_level(options: Mapping[str, str]) -> str:
    """``kafka.isolation.level``, which Spark's Kafka source hands to its consumers (Kafka's
    default read_uncommitted, and its ConfigException message for other values)."""
    raw = get(options, "kafka.isolation.level")
    if raw is None:
        return "read_uncommitted"
    if raw not in ("read_uncommitted", "read_committed"):
        raise SparkOptionError(
            f"Invalid value {raw} for configuration isolation.level: String must be one of: read_committed, read_uncommitted"
        )
    return raw


def offsets_json(offsets: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    """The Kafka source's offset shape with a stable key order (Spark compares offsets as strings)."""
    out: dict[str, dict[str, int]] = {}
    for topic, p in sorted(offsets):
        out.setdefault(topic, {})[str(p)] = int(offsets[(topic, p)])
    return out


def offsets_from_json(data: Mapping[str, Any] | None) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(v) for topic, parts in (data or {}).items() for p, v in parts.items()}
