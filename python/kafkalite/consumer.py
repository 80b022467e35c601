"""``kafkalite.Consumer``: kafka-python's consumer API over an embedded data directory.

Partitions are opened read-only, so consumers never block producers. A caught-up ``poll``
sleeps on a futex in ``.kafkalite-notify`` that producers bump after each append, in any
process (``kafkalite.wakeup``: a consumer without a group creates no file in the data
directory, and polls every 50 ms where it cannot use that file). Consumers that ``subscribe`` with the same ``group_id`` share the partitions as a
Kafka consumer group (``kafkalite.group``); committed offsets live in ``__consumer_offsets``
(``kafkalite.offsets``)."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from kafkalite import validate as args
from kafkalite._arrow import require_pyarrow
from kafkalite._native import ConsumerRecord
from kafkalite.assignors import TopicPartition
from kafkalite.client_config import CONSUMER_CONFIG
from kafkalite.client_metrics import StatsReporter, avg, rate
from kafkalite.datadir import DataDir
from kafkalite.errors import (
    CommitFailedError,
    IllegalStateError,
    InvalidConfigError,
    InvalidTypeError,
    KafkaliteError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    ReadOnlyDataDirError,
    UnknownTopicError,
)
from kafkalite.group import STRATEGIES, GroupFiles, GroupMember, encode_name, members_refusal
from kafkalite.log import Log
from kafkalite.offsets import OffsetStore
from kafkalite.transactions import (
    ABORT_TIMED_OUT_INTERVAL_MS,
    ConsumerGroupMetadata,
    abort_expired_transactions,
)
from kafkalite.wakeup import Wakeups

logger = logging.getLogger("kafkalite.consumer")

#: Kafka's default.api.timeout.ms: how long ``position()`` waits for offsets held by a transaction.
DEFAULT_API_TIMEOUT_S = 60.0


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """auto_offset_reset='none' and no committed offset (or it fell out of range)."""


#: Consumer config keys (kafka-python's names) and their defaults (``CONSUMER_CONFIG``).
DEFAULTS: dict[str, Any] = CONSUMER_CONFIG.defaults()

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")

#: Records per native call when iterating (positions are committed per chunk).
_ITER_CHUNK = 8192


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


class Consumer:
    """``Consumer(path, *topics, group_id=None, **config)``: the data directory first, where
    kafka-python takes ``bootstrap_servers``. ``group_instance_id`` (with a ``group_id``) makes
    the consumer a static member, as Kafka's ``group.instance.id``: a restart within
    ``session_timeout_ms`` takes its old partitions back without a rebalance, and ``close()`` does
    not leave the group (see ``kafkalite.group``).

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
            # A static member (Kafka's group.instance.id, see kafkalite.group).
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
    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

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

    # -- group membership ------------------------------------------------------------------
    def _maintain_group(self, topics: list[str]) -> None:
        """Join, follow rebalances, hand partitions over (kafkalite.group). Not re-entered from
        the rebalance listener (which may call position() and commit())."""
        if self._rebalancing:
            return
        self._rebalancing = True
        try:
            self._follow_group(topics)
        finally:
            self._rebalancing = False

    def _follow_group(self, topics: list[str]) -> None:
        member = self._member
        if member is None:
            member = GroupMember(
                self._dir.path,
                self.group_id,  # type: ignore[arg-type]
                client_id=self.config["client_id"] or "kafkalite",
                strategies=self._strategies,
                session_timeout_ms=self.config["session_timeout_ms"],
                heartbeat_interval_ms=self.config["heartbeat_interval_ms"],
                max_poll_interval_ms=self.config["max_poll_interval_ms"],
                partition_counts=lambda: {t: int(m["partitions"]) for t, m in self._dir.topics().items()},
                notify=self._notifier.notify,
                group_instance_id=self.group_instance_id,
            )
            member.join(topics)  # refused (raises) when the group is in use over the network
            self._member = member
        else:
            member.set_topics(topics)
        member.touch_poll()
        changes = member.changes()
        if changes is not None and changes.lost:
            # Evicted (presumed dead or stuck): the partitions are already someone else's. As
            # Kafka's invokePartitionsLost: the assignment is dropped and the member rejoins even
            # when the listener raises; its error then reaches the caller (once).
            lost = list(self._assigned)
            try:
                if lost and self._listener is not None:
                    (
                        getattr(self._listener, "on_partitions_lost", None)
                        or self._listener.on_partitions_revoked
                    )(lost)
            finally:
                self._drop_partitions(lost)
                member.rejoin()
            changes = member.changes()
        if changes is None:
            return
        if changes.revoke:
            if self.config["enable_auto_commit"]:
                self._commit_quietly([tp for tp in changes.revoke if tp in self._consumed])
            try:
                if self._listener is not None:
                    self._listener.on_partitions_revoked(changes.revoke)
            except BaseException:
                # Kafka's onJoinPrepare drops the assignment before it re-raises the listener's
                # error: everything revoked is released (partitions the member keeps are taken
                # again on the next poll, which then reports them as assigned).
                self._drop_partitions(changes.revoke)
                member.release(changes.revoke)
                member.mark_pending()
                raise
            released = [tp for tp in changes.revoke if tp not in changes.target]
            self._drop_partitions(released)
            member.release(released)
        got = member.acquire(changes.target)
        for tp in got:
            self._positions.pop(tp, None)
        kept = [tp for tp in changes.revoke if tp in changes.target] if changes.eager else []
        self._assigned = sorted(set(self._assigned) | set(got))
        if (got or kept) and self._listener is not None:
            self._listener.on_partitions_assigned(sorted(set(got) | set(kept)))

    def _drop_partitions(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.pop(tp, None)
            self._consumed.pop(tp, None)
            self._paused.discard(tp)
            log = self._logs.pop(tp, None)
            if log is not None:
                log.close()
        gone = set(partitions)
        self._assigned = [tp for tp in self._assigned if tp not in gone]

    def _leave_group(self) -> None:
        member = self._member
        if member is None:
            return
        self._rebalancing = True  # the listener must not rejoin
        try:
            if self._assigned and self._listener is not None:
                self._listener.on_partitions_revoked(list(self._assigned))
        finally:  # leave even when the listener raises: the partitions must not stay held
            self._rebalancing = False
            self._member = None
            self._drop_partitions(list(self._assigned))
            member.close()

    def _log(self, tp: TopicPartition) -> Log:
        log = self._logs.get(tp)
        if log is None:
            log = Log(self._dir.partition_path(tp.topic, tp.partition), readonly=True)
            self._logs[tp] = log
            self._topic_names.setdefault(tp.topic, tp.topic)
        return log

    # -- positions -------------------------------------------------------------------------
    def _initial_position(self, tp: TopicPartition) -> int:
        if self._store is not None:
            committed = self._store.load().get((tp.topic, tp.partition))
            if committed is not None:
                return committed[0]
        return self._reset(tp)

    def _reset(self, tp: TopicPartition) -> int:
        policy = self.config["auto_offset_reset"]
        log = self._log(tp)
        if policy == "earliest":
            return log.start_offset
        if policy == "latest":
            return self._end_of(log)
        raise NoOffsetForPartitionError(f"no valid offset for {tp} and auto_offset_reset='none'")

    def _end_of(self, log: Log) -> int:
        """Where this consumer's reads end: the log end offset, or under read_committed the
        last stable offset (Kafka's ListOffsets latest for that isolation level)."""
        return log.last_stable_offset if self._read_committed else log.end_offset

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record this consumer will return for ``tp``. A read_committed
        consumer with no position yet waits while an open transaction holds the group's offsets
        of ``tp`` (see ``_unstable``), up to Kafka's default.api.timeout.ms, then raises
        ``KafkaTimeoutError``."""
        tp = args.topic_partition(tp)
        self._require_assigned(tp)
        if tp not in self._positions and self._read_committed and self._store is not None:
            deadline = time.monotonic() + DEFAULT_API_TIMEOUT_S
            while self._unstable(tp):
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(
                        f"position of {tp}: an open transaction still holds the committed offsets of group "
                        f"{self.group_id!r} for it after {DEFAULT_API_TIMEOUT_S:.0f} s (Kafka's UNSTABLE_OFFSET_COMMIT)"
                    )
                seen = self._notifier.sequence()
                self._notifier.wait(seen, 200)
        return self._position_of(tp)

    def _position_of(self, tp: TopicPartition) -> int:
        if tp not in self._positions:
            self._positions[tp] = self._initial_position(tp)
        return self._positions[tp]

    def _require_assigned(self, tp: TopicPartition) -> None:
        if self.group_id is None:  # a group's assignment changes only in poll, as in Kafka
            self._refresh_subscription()
        if tp not in self._assigned:
            raise IllegalStateError(f"{tp} is not assigned to this consumer")

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Make the next poll() of ``tp`` start at ``offset``."""
        tp = args.topic_partition(tp)
        args.offset("offset", offset)
        self._require_assigned(tp)
        self._positions[tp] = self._consumed[tp] = offset

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Move to the first offset of these partitions (every assigned one when none given)."""
        for tp in self._seekable(partitions):
            self.seek(tp, self._log(tp).start_offset)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Move past the last record of these partitions (every assigned one when none given)."""
        for tp in self._seekable(partitions):
            self.seek(tp, self._end_of(self._log(tp)))

    def _seekable(self, partitions: tuple[Any, ...]) -> list[TopicPartition]:
        """All given partitions checked (and assigned) before the first seek."""
        parts = args.partitions(partitions) if partitions else list(self._assigned)
        for tp in parts:
            self._require_assigned(tp)
        return parts

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The first offset of each partition (its log start offset)."""
        parts = [self._existing(tp) for tp in args.partitions(partitions)]
        return {tp: self._log(tp).start_offset for tp in parts}

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset after the last record of each partition (for read_committed: the last stable offset)."""
        parts = [self._existing(tp) for tp in args.partitions(partitions)]
        return {tp: self._end_of(self._log(tp)) for tp in parts}

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition: the earliest offset whose timestamp >= the given one, or None."""
        wanted = {
            self._existing(args.topic_partition(tp)): args.integer(f"the timestamp for {tp}", ts, 0)
            for tp, ts in args.mapping("timestamps", timestamps).items()
        }
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, ts in wanted.items():
            found = self._log(tp)._native.offset_for_timestamp(ts)
            out[tp] = None if found is None else OffsetAndTimestamp(*found)
        return out

    def _existing(self, tp: TopicPartition) -> TopicPartition:
        """``tp`` (already shape-checked) if its topic has that partition."""
        count = self._dir.partitions(tp.topic)  # UnknownTopicError when there is no such topic
        if tp.partition >= count:
            raise InvalidConfigError(
                f"topic {tp.topic!r} has partitions 0..{count - 1}; there is no partition {tp.partition}"
            )
        return tp

    # -- fetching --------------------------------------------------------------------------
    def _unstable(self, tp: TopicPartition) -> bool:
        """Whether a partition with no position yet waits for an open transaction holding
        offsets of it for the group (Kafka's read_committed consumers fetch committed offsets
        with require_stable, KIP-447: a new owner must not start before the input of a
        transaction that may still commit). Its records are fetched once it ended. There is no
        coordinator process to abort a transaction its producer abandoned: past its timeout,
        this consumer aborts it (every ``ABORT_TIMED_OUT_INTERVAL_MS`` at most), as a
        transactional producer's sender thread does."""
        assert self._store is not None
        if not self._store.unstable((tp.topic, tp.partition)):
            return False
        now = time.monotonic()
        if now >= self._next_txn_sweep:
            self._next_txn_sweep = now + ABORT_TIMED_OUT_INTERVAL_MS / 1000.0
            try:
                abort_expired_transactions(self._dir.path)
            except KafkaliteError as e:  # a read-only or full data directory: wait for others
                logger.warning(
                    "consumer of group %r could not abort expired transactions: %s", self.group_id, e
                )
        return True

    def _fetchable(self) -> list[TopicPartition]:
        parts = [tp for tp in self._assigned if tp not in self._paused]
        if self._member is not None:
            # A group member fetches only what the group's state says it owns now (one stat
            # when nothing changed): a member evicted since its last rebalance step returns no
            # record of a partition that a new owner may be reading, and forgets its positions.
            owned = self._member.verified_owned()
            gone = [tp for tp in parts if tp not in owned]
            for tp in gone:
                self._positions.pop(tp, None)
            parts = [tp for tp in parts if tp in owned]
        if self._read_committed and self._store is not None:
            parts = [tp for tp in parts if tp in self._positions or not self._unstable(tp)]
        if parts:  # rotate so that one busy partition does not starve the others
            k = self._next_index % len(parts)
            parts = parts[k:] + parts[:k]
            self._next_index += 1
        return parts

    def _fetch(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        return self._collect(max_records, self._fetch_one, len)

    def _collect(self, max_records: int, read_one: Any, count: Any) -> dict[TopicPartition, Any]:
        """Read from the fetchable partitions in turn until ``max_records`` are gathered."""
        out = {}
        budget = max_records
        for tp in self._fetchable():
            if budget <= 0:
                break
            got = read_one(tp, budget)
            if got:
                out[tp] = got
                budget -= count(got)
        return out

    def _read_at_position(self, tp: TopicPartition, limit: int, read: Any) -> Any:
        """``read(log, position, limit) -> (items, next offset)`` from this consumer's position.
        A position deleted by retention (or past the end) gets Kafka's reset policy first."""
        log = self._log(tp)
        position = self._position_of(tp)
        try:
            items, nxt = read(log, position, limit)
        except OffsetOutOfRangeError:
            if not (position < log.start_offset or position > log.end_offset):
                raise
            position = self._positions[tp] = self._reset(tp)
            items, nxt = read(log, position, limit)
        self._positions[tp] = nxt
        return items

    def _fetch_one(self, tp: TopicPartition, limit: int) -> list[ConsumerRecord]:
        topic = self._topic_names.setdefault(tp.topic, tp.topic)

        def read(log: Log, pos: int, n: int) -> Any:
            return log._native.read_consumer_records(
                topic, tp.partition, pos, n, isolation_level=self._isolation_level
            )

        records = self._read_at_position(tp, limit, read)
        if records and (self.config["key_deserializer"] or self.config["value_deserializer"]):
            records = [self._deserialize(r) for r in records]
        return records

    def _deserialize(self, r: ConsumerRecord) -> ConsumerRecord:
        kd, vd = self.config["key_deserializer"], self.config["value_deserializer"]
        key = kd(r.key) if kd is not None and r.key is not None else r.key
        value = vd(r.value) if vd is not None and r.value is not None else r.value
        return r._with_key_value(key, value)

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None, update_offsets: bool = True
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from the assigned partitions, ``{TopicPartition: [ConsumerRecord]}``. Waits
        up to ``timeout_ms`` for data to arrive from any process."""
        return self._wait_for(
            self._fetch, timeout_ms, self._max_records(max_records, self.config["max_poll_records"])
        )

    @staticmethod
    def _max_records(value: Any, default: int) -> int:
        return default if value is None else args.integer("max_records", value, 1)

    def poll_arrow(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, Any]:
        """The bulk path: ``{TopicPartition: pyarrow.RecordBatch}`` with columns offset,
        timestamp, key, value, headers, decoded in Rust with no per-record Python objects.
        Deserializers do not apply. ``max_records`` defaults to 65,536 per call."""
        return self._wait_for(self._fetch_arrow, timeout_ms, self._max_records(max_records, 65536))

    def _fetch_arrow(self, max_records: int) -> dict[TopicPartition, Any]:
        pa = require_pyarrow("Consumer.poll_arrow")

        def read_one(tp: TopicPartition, limit: int) -> Any:
            def read(log: Log, pos: int, n: int) -> Any:
                return log._native.read_arrow(pos, None, n, isolation_level=self._isolation_level)

            batch = self._read_at_position(tp, limit, read)
            return pa.record_batch(batch) if len(batch) else None

        return self._collect(max_records, read_one, lambda batch: batch.num_rows)

    def _wait_for(self, fetch: Any, timeout_ms: int, limit: int) -> dict:
        self._check_open()
        args.milliseconds("timeout_ms", timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            self._maybe_auto_commit()
            self._stats.maybe_report()
            self._refresh_subscription()
            seen = self._notifier.sequence()
            records = fetch(limit)
            if records:
                self._fetches += 1
                for tp, got in records.items():
                    self._consumed[tp] = self._positions[tp]
                    self._records_consumed += len(got) if isinstance(got, list) else got.num_rows
                return records
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            # Producers bump the notifier after every append; sleep until one does (or a
            # stats_cb report is due).
            stats_due = self._stats.timeout(time.monotonic())
            wait = min(remaining, 1.0, 1.0 if stats_due is None else stats_due)
            self._notifier.wait(seen, max(1, int(wait * 1000)))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Iterate records forever (or until ``consumer_timeout_ms`` passes with none)."""
        idle_limit = self.config["consumer_timeout_ms"]
        idle_since = time.monotonic()
        while not self._closed:
            self._refresh_subscription()  # follows rebalances between chunks
            got = False
            for tp in self._fetchable():
                records = self._fetch_one(tp, _ITER_CHUNK)
                if records:
                    got = True
                    self._fetches += 1
                    self._records_consumed += len(records)
                    yield from records
                    self._consumed[tp] = self._positions[tp]
            self._maybe_auto_commit()
            self._stats.maybe_report()
            if got:
                idle_since = time.monotonic()
                continue
            waited_ms = (time.monotonic() - idle_since) * 1000
            if waited_ms >= idle_limit:
                return
            seen = self._notifier.sequence()
            self._refresh_subscription()
            if not any(self._end_of(self._log(tp)) > self._position_of(tp) for tp in self._fetchable()):
                self._notifier.wait(seen, int(max(1, min(1000, idle_limit - waited_ms))))

    # -- commits ---------------------------------------------------------------------------
    def group_metadata(self) -> ConsumerGroupMetadata:
        """What ``Producer.send_offsets_to_transaction`` takes to commit this consumer's offsets
        in a transaction (Kafka's ``groupMetadata()``): its group id, generation, member id and
        group instance id (-1, "" and None outside a group's membership, as Kafka's)."""
        self._check_open()
        if self.group_id is None:
            raise IllegalStateError("group_metadata() needs a group_id")
        member = self._member
        if member is None or member.member_id is None:
            return ConsumerGroupMetadata(self.group_id)
        return ConsumerGroupMetadata(
            self.group_id, member.generation, member.member_id, member.group_instance_id
        )

    def commit(self, offsets: dict[TopicPartition, Any] | None = None) -> None:
        """Store offsets for ``group_id`` (default: the positions of everything consumed)."""
        self._check_open()
        if self._store is None:
            raise IllegalStateError("commit() needs a group_id")
        if offsets is None:
            entries = {(tp.topic, tp.partition): (pos, "") for tp, pos in self._consumed.items()}
        else:
            entries = self._commit_entries_of(offsets)
        if entries:
            self._commit_entries(entries)
        self._last_commit = time.monotonic()

    def _commit_entries_of(self, offsets: Any) -> dict[tuple[str, int], tuple[int, str]]:
        """``commit(offsets)``'s argument, every entry checked before anything is written."""
        entries = {}
        for key, value in args.mapping("offsets", offsets).items():
            tp = self._existing(args.topic_partition(key))
            if isinstance(value, OffsetAndMetadata):
                offset, metadata = value.offset, value.metadata
            elif hasattr(value, "offset"):  # kafka-python's OffsetAndMetadata(offset, metadata, leader_epoch)
                offset, metadata = value.offset, getattr(value, "metadata", "") or ""
            else:
                offset, metadata = value, ""
            args.offset(f"the offset to commit for {tp}", offset)
            args.metadata(f"the metadata committed for {tp}", metadata)
            entries[(tp.topic, tp.partition)] = (offset, metadata)
        return entries

    def _commit_entries(self, entries: dict[tuple[str, int], tuple[int, str]]) -> None:
        """Members commit only what they own in the current generation; a consumer outside
        the group (assign()) only while the group has no live members, as Kafka requires."""
        assert self._store is not None and self.group_id is not None
        partitions = [TopicPartition(t, p) for t, p in entries]
        if self._member is not None and self._member.member_id is not None:
            with self._member.commit_guard(partitions):
                self._store.commit(entries)
            self._commits += 1
            return
        files = GroupFiles(self._dir.path, self.group_id)
        with files.locked():
            refusal = members_refusal(self._dir.path, self.group_id)
            if refusal is not None:
                raise CommitFailedError(
                    f"commit rejected: {refusal}; a consumer outside the group (assign()) may commit only "
                    "to an empty group"
                )
            self._store.commit(entries)
        self._commits += 1  # as kafka-python's commit-rate: commits that succeeded

    def _commit_quietly(self, partitions: list[TopicPartition]) -> None:
        """Auto-commit before a rebalance takes partitions away (failures are the rebalance's)."""
        entries = {
            (tp.topic, tp.partition): (self._consumed[tp], "") for tp in partitions if tp in self._consumed
        }
        try:
            if entries:
                self._commit_entries(entries)
        except CommitFailedError:
            pass

    def commit_async(self, offsets: dict[TopicPartition, Any] | None = None, callback: Any = None) -> None:
        """Committing is a local file write, so this commits now and then calls ``callback``."""
        if callback is not None and not callable(callback):
            raise InvalidTypeError(
                f"callback must be callable(offsets, exception), not {type(callback).__name__}"
            )
        self.commit(offsets)
        if callback is not None:
            callback(offsets, None)

    def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp``, or None."""
        if self._store is None:
            raise IllegalStateError("committed() needs a group_id")
        tp = args.topic_partition(tp)
        entry = self._store.load().get((tp.topic, tp.partition))
        return None if entry is None else entry[0]

    def _maybe_auto_commit(self) -> None:
        if (
            self._store is not None
            and self.config["enable_auto_commit"]
            and self._consumed
            and (time.monotonic() - self._last_commit) * 1000 >= self.config["auto_commit_interval_ms"]
        ):
            try:
                self.commit()
            except CommitFailedError as e:
                # As kafka-python's auto-commit: a rejected commit (the group rebalanced, or this
                # member was evicted) is logged; the poll that follows handles the rebalance.
                self._last_commit = time.monotonic()
                logger.warning("auto-commit of group %r failed: %s", self.group_id, e)

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
