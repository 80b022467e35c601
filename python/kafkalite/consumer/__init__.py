"""``kafkalite.Consumer``: kafka-python's consumer API over an embedded data directory.

Partitions are opened read-only, so consumers never block producers. A caught-up ``poll``
sleeps on a futex in ``.kafkalite-notify`` that producers bump after each append, in any
process (``kafkalite.wakeup``: a consumer without a group creates no file in the data
directory, and polls every 50 ms where it cannot use that file). Consumers that ``subscribe`` with the same ``group_id`` share the partitions as a
Kafka consumer group (``kafkalite.groups.member``); committed offsets live in ``__consumer_offsets``
(``kafkalite.groups.offsets``).

``Consumer`` is split by role: this module is the public class (configuration, subscription
and assignment, metrics, pause/resume, close); its state is declared in ``consumer/state.py``,
and its parts are mixed in from ``consumer/positions.py`` (positions, seeks, offset lookups),
``consumer/fetch.py`` (fetching and the poll loop) and ``consumer/group_membership.py`` (the group side and
commits)."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable
from typing import Any

from kafkalite import validate as args
from kafkalite.client_config import CONSUMER_CONFIG
from kafkalite.client_metrics import StatsReporter, avg, rate
from kafkalite.consumer.fetch import FetchMixin
from kafkalite.consumer.group_membership import GroupMixin, OffsetAndMetadata
from kafkalite.consumer.positions import (
    DEFAULT_API_TIMEOUT_S,
    NoOffsetForPartitionError,
    OffsetAndTimestamp,
    PositionsMixin,
)
from kafkalite.datadir import DataDir
from kafkalite.errors import (
    CommitFailedError,
    IllegalStateError,
    InvalidConfigError,
    InvalidTypeError,
    ReadOnlyDataDirError,
    UnknownTopicError,
)
from kafkalite.groups.assignors import TopicPartition
from kafkalite.groups.member import STRATEGIES, GroupMember, encode_name
from kafkalite.groups.offsets import OffsetStore
from kafkalite.log import Log
from kafkalite.wakeup import Wakeups

logger = logging.getLogger("kafkalite.consumer")  # one logger for the consumer's modules

# The names ``kafkalite`` and tests import from here (before the split it held all of them).
__all__ = [
    "DEFAULTS",
    "DEFAULT_API_TIMEOUT_S",
    "ISOLATION_LEVELS",
    "Consumer",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "TopicPartition",
]


#: Consumer config keys (kafka-python's names) and their defaults (``CONSUMER_CONFIG``).
DEFAULTS: dict[str, Any] = CONSUMER_CONFIG.defaults()

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def _strategy_names(value: Any) -> list[str]:
    """``partition_assignment_strategy``: Kafka names, or kafka-python assignor classes (their
    ``name``), one or a list."""
    if isinstance(value, str) or hasattr(value, "name"):
        items = [value]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise InvalidTypeError(
            f"partition_assignment_strategy must be a strategy name or a list of them, not {value!r}"
        )
    names = [item if isinstance(item, str) else str(getattr(item, "name", item)) for item in items]
    bad = [n for n in names if n not in STRATEGIES]
    if not names or bad:
        raise InvalidConfigError(
            f"partition_assignment_strategy must name some of {', '.join(STRATEGIES)}; got {value!r}"
        )
    return names


def _read_committed(level: Any) -> bool:
    """kafka-python's ``isolation_level``: read_committed hides records of aborted transactions
    and reads only below the last stable offset."""
    if not isinstance(level, str):
        raise InvalidTypeError(f"isolation_level must be a str, not {type(level).__name__} {level!r}")
    if level not in ISOLATION_LEVELS:
        raise InvalidConfigError(
            f"isolation_level must be 'read_uncommitted' or 'read_committed', not {level!r}"
        )
    return level == "read_committed"


def _require_writable(data_dir: DataDir, group_id: str) -> None:
    """A group member writes committed offsets and membership files: refuse up front where it
    cannot (instead of failing at the first commit or rebalance)."""
    if data_dir.broker_owned():
        raise ReadOnlyDataDirError(
            f"group_id={group_id!r} needs to write offsets and group files, but {data_dir.path} is a Kafka broker's "
            "log directory, which kafkalite only reads; consume it without group_id (assign() or subscribe(), "
            "seek() to resume), or copy the partitions into a kafkalite data directory"
        )
    if not os.access(data_dir.path, os.W_OK | os.X_OK):
        raise ReadOnlyDataDirError(
            f"group_id={group_id!r} needs to write offsets and group files, but {data_dir.path} is not writable by "
            "this process (read-only permissions or file system); consume without group_id, or give write access"
        )


class Consumer(GroupMixin, PositionsMixin, FetchMixin):
    """``Consumer(path, *topics, group_id=None, **config)``: the data directory first, where
    kafka-python takes ``bootstrap_servers``. ``group_instance_id`` (with a ``group_id``) makes
    the consumer a static member, as Kafka's ``group.instance.id``: a restart within
    ``session_timeout_ms`` takes its old partitions back without a rebalance, and ``close()`` does
    not leave the group (see ``kafkalite.groups.member``).

    Thread safety: as kafka-python's ``KafkaConsumer``, a consumer is not thread-safe; use it
    from one thread at a time (one consumer per thread; several consumers in one group share the
    work). Its group heartbeats run in a daemon thread of its own."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *topics: str,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        **config: Any,
    ) -> None:
        self.config = CONSUMER_CONFIG.resolve(config)
        self._read_committed = _read_committed(self.config["isolation_level"])
        self._next_txn_sweep = 0.0  # see _unstable
        self._isolation_level = "read_committed" if self._read_committed else "read_uncommitted"
        self._strategies = _strategy_names(self.config["partition_assignment_strategy"])
        wanted_topics = args.topic_names(topics)
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidTypeError(
                f"path must be the data directory (str or os.PathLike), not {type(path).__name__}"
            )
        self._dir = DataDir(path, create=False)
        if group_id is not None:
            encode_name(group_id)  # any non-empty str, as Kafka's group.id; a typed error otherwise
            _require_writable(self._dir, group_id)
        if group_instance_id is not None:
            # A static member (Kafka's group.instance.id, see kafkalite.groups.member).
            if group_id is None:
                raise InvalidConfigError("group_instance_id requires group_id")
            encode_name(group_instance_id, "group_instance_id")
        self.group_instance_id = group_instance_id
        # Reading only, a consumer creates nothing in the data directory (kafkalite.wakeup).
        self._notifier = Wakeups(self._dir.path, may_create=group_id is not None)
        self.group_id = group_id
        self._store = OffsetStore(self._dir, group_id) if group_id is not None else None
        self._member: GroupMember | None = None
        self._rebalancing = False
        self._logs: dict[TopicPartition, Log] = {}
        self._topic_names: dict[str, str] = {}
        self._assigned: list[TopicPartition] = []
        self._manual = False
        self._subscription: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._listener: Any = None
        self._positions: dict[TopicPartition, int] = {}
        self._consumed: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._next_index = 0
        self._last_commit = time.monotonic()
        self._closed = False
        self._missing_warned: set[str] = set()
        #: metrics(): polls that returned records, the records, the commits (counted per poll).
        self._fetches = self._records_consumed = self._commits = 0
        self._stats = StatsReporter(self.config, "consumer", self._statistics)
        if wanted_topics:
            self.subscribe(wanted_topics)

    # -- assignment ------------------------------------------------------------------------
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (no subscription)."""
        self._check_open()
        if self._subscription or self._pattern:
            raise IllegalStateError("assign() cannot be mixed with subscribe(); call unsubscribe() first")
        parts = [self._existing(tp) for tp in args.partitions(partitions)]
        self._manual = bool(parts)
        self._set_assignment(parts)

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None, listener: Any = None) -> None:
        """Follow topics by name or a regex ``pattern`` (all their partitions; new topics and
        partitions are picked up as they appear)."""
        self._check_open()
        if self._manual:
            raise IllegalStateError("subscribe() cannot be mixed with assign(); call unsubscribe() first")
        names = set(args.topic_names(topics))
        compiled = args.pattern(pattern) if pattern is not None else None
        if bool(names) == (compiled is not None):
            raise IllegalStateError("subscribe() takes either topics or a pattern")
        self._subscription = names
        self._pattern = compiled
        self._listener = args.listener(listener)
        self._refresh_subscription()

    def unsubscribe(self) -> None:
        """Drop the subscription (and leave the group) and every assigned partition."""
        if self._member is not None:
            self._leave_group()
        self._set_assignment([])
        self._subscription, self._pattern, self._manual = set(), None, False

    def subscription(self) -> set[str]:
        """The subscribed topic names (empty without subscribe())."""
        return set(self._subscription) if not self._pattern else {tp.topic for tp in self._assigned}

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now."""
        return set(self._assigned)

    def _refresh_subscription(self) -> None:
        if not (self._subscription or self._pattern):
            return
        topics = self._dir.topics()
        if self._pattern:
            hide = self.config["exclude_internal_topics"]
            names = [t for t in topics if self._pattern.fullmatch(t) and not (hide and t.startswith("__"))]
        else:
            names = sorted(self._subscription)
            self._warn_missing([n for n in names if n not in topics], topics)
        if self.group_id is not None:
            self._maintain_group(sorted(n for n in names if n in topics))
            return
        wanted = []
        for name in sorted(names):
            if name not in topics:
                continue  # subscribed before creation: picked up once it exists
            wanted += [TopicPartition(name, p) for p in range(int(topics[name]["partitions"]))]
        if wanted != self._assigned:
            self._set_assignment(wanted)

    def _warn_missing(self, missing: list[str], topics: dict[str, Any]) -> None:
        """One WARNING per subscribed topic that does not exist (yet), as kafka-python logs
        UNKNOWN_TOPIC_OR_PARTITION: polls return nothing for it until it is created."""
        for name in missing:
            if name not in self._missing_warned:
                self._missing_warned.add(name)
                shown = sorted(t for t in topics if not t.startswith("__"))
                logger.warning(
                    "subscribed to topic %r, which does not exist in %s (UNKNOWN_TOPIC_OR_PARTITION): poll() "
                    "returns nothing for it until it is created; its topics: %s",
                    name,
                    self._dir.path,
                    ", ".join(shown[:20]) + (", ..." if len(shown) > 20 else "") if shown else "none",
                )

    def _set_assignment(self, parts: list[TopicPartition]) -> None:
        revoked = [tp for tp in self._assigned if tp not in parts]
        added = [tp for tp in parts if tp not in self._assigned]
        try:
            if revoked and self._listener is not None:
                self._listener.on_partitions_revoked(revoked)
        finally:  # the partitions go even when the listener raises (Kafka's invokePartitionsRevoked)
            self._drop_partitions(revoked)
            self._assigned = parts
        if added and self._listener is not None:
            self._listener.on_partitions_assigned(added)

    # -- metrics ---------------------------------------------------------------------------
    def _lags(self) -> dict[TopicPartition, int]:
        """Each assigned partition's lag: where reads end (``_end_of``) minus the position."""
        lags = {}
        for tp in list(self._assigned):
            if tp in self._positions:
                lags[tp] = max(0, self._end_of(self._log(tp)) - self._positions[tp])
        return lags

    def metrics(self, raw: bool = False) -> dict[str, dict[str, float]]:
        """kafka-python's ``KafkaConsumer.metrics()``: ``{group: {name: value}}``, with
        'consumer-fetch-manager-metrics' (records-consumed-rate, records-lag-max, and
        'TOPIC-PARTITION.records-lag' per partition with a position) and, with a group_id,
        'consumer-coordinator-metrics' (commit-rate, assigned-partitions). A fetch is one poll
        that returned records; lag is the log end (read_committed: last stable) offset minus the
        position. ``raw`` is accepted for kafka-python's signature; values are always plain."""
        self._check_open()
        since = self._stats.started
        lags = self._lags()
        fetch: dict[str, float] = {
            "records-consumed-total": self._records_consumed,
            "records-consumed-rate": rate(self._records_consumed, since),
            "fetch-total": self._fetches,
            "fetch-rate": rate(self._fetches, since),
            "records-per-request-avg": avg(self._records_consumed, self._fetches),
            "records-lag-max": max(lags.values(), default=0),
        }
        for tp, lag in lags.items():
            fetch[f"{tp.topic}-{tp.partition}.records-lag"] = lag
        out = {"consumer-fetch-manager-metrics": fetch}
        if self.group_id is not None:
            out["consumer-coordinator-metrics"] = {
                "commit-total": self._commits,
                "commit-rate": rate(self._commits, since),
                "assigned-partitions": len(self._assigned),
            }
        return out

    def _statistics(self) -> dict[str, Any]:
        """``stats_cb``'s fields beyond the common ones (librdkafka's names)."""
        topics: dict[str, Any] = {}
        for tp, lag in self._lags().items():
            part = {"partition": tp.partition, "app_offset": self._positions[tp], "consumer_lag": lag}
            topics.setdefault(tp.topic, {"topic": tp.topic, "partitions": {}})["partitions"][
                str(tp.partition)
            ] = part
        return {"rxmsgs": self._records_consumed, "topics": topics}

    # -- flow control and metadata ---------------------------------------------------------
    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning records of these partitions from poll() until resume()."""
        parts = args.partitions(partitions)
        for tp in parts:
            self._require_assigned(tp)
        self._paused.update(parts)

    def resume(self, *partitions: TopicPartition) -> None:
        """Return records of these paused partitions again."""
        self._paused.difference_update(args.partitions(partitions))

    def paused(self) -> set[TopicPartition]:
        """The partitions paused by pause()."""
        return set(self._paused)

    def topics(self) -> set[str]:
        """The topics of the data directory (kafka-python's ``KafkaConsumer.topics()``);
        internal ones such as ``__consumer_offsets`` only with ``exclude_internal_topics=False``."""
        hide = self.config["exclude_internal_topics"]
        return {t for t in self._dir.topics() if not (hide and t.startswith("__"))}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition numbers of ``topic``, or None when it does not exist."""
        args.topic_names([topic])
        try:
            return set(range(self._dir.partitions(topic)))
        except UnknownTopicError:
            return None

    def close(self, autocommit: bool = True) -> None:
        """Commit (with a group and auto-commit on), then release the partitions."""
        if self._closed:
            return
        if autocommit and self._store is not None and self.config["enable_auto_commit"] and self._consumed:
            try:
                self.commit()
            except CommitFailedError:
                pass  # evicted: these partitions are someone else's now
        try:
            self._leave_group()  # a raising listener's error reaches the caller after the rest closed
        finally:
            if self._store is not None:
                self._store.close()
            for log in self._logs.values():
                log.close()
            self._logs.clear()
            self._closed = True

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


CONSUMER_CONFIG.document(Consumer)
