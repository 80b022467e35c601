"""``kafkalite.Admin``: topics of a data directory, with Kafka's names and rules."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalite import _native, validate
from kafkalite.client_config import topic_docstring
from kafkalite.compaction import CompactionResult, clean_if_dirty, clean_partition
from kafkalite.datadir import (
    BROKER_SYNONYMS,
    MAX_PARTITIONS,
    TOPIC_DEFAULTS,
    DataDir,
    is_compacted,
    validate_config,
    validate_topic_name,
)
from kafkalite.errors import InvalidConfigError, InvalidTypeError
from kafkalite.groups import admin as group_admin
from kafkalite.groups.assignors import TopicPartition
from kafkalite.log import Log
from kafkalite.transactions import admin as transaction_admin


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as ``describe_topic`` reports it."""

    partition: int
    start_offset: int
    end_offset: int
    size_bytes: int
    segments: int


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionInfo]
    config: dict[str, Any] = field(default_factory=dict)


class Admin:
    """Create, list, describe, alter and delete topics; the first argument is the data
    directory, where a Kafka client takes ``bootstrap_servers``. Only ``create_topic`` (and
    ``init``) create a missing data directory; every other call on a missing one raises
    ``NotADataDirError``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._dir = DataDir(validate.path("path", path), create=True)

    @property
    def path(self) -> str:
        """The data directory (an absolute path)."""
        return self._dir.path

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None) -> None:
        """Create a topic with ``partitions`` partitions (1 to ``MAX_PARTITIONS``) and
        Kafka-named ``config``. An internal topic (``__consumer_offsets``, ``__transaction_state``)
        raises ``InvalidTopicError``, as Kafka refuses to create one by hand: kafkalite creates
        ``__consumer_offsets`` itself, with its 50 partitions, at the first commit."""
        validate_topic_name(name)  # a name of the wrong type is a type error before anything else
        _native.refuse_internal(name, "create_topic")
        self._dir.create(name, partitions, config)

    def init(self, config: Mapping[str, Any] | None = None) -> bool:
        """Make the path a kafkalite data directory (create it and its metadata), with optional
        data-directory ``config`` (see ``alter_data_dir_config``). Returns False when it already
        was one. ``kafkalite init DIR`` on the command line."""
        return self._dir.init(config=config)

    def adopt_broker_dir(self) -> list[str]:
        """Take over a Kafka broker's log directory on purpose: write kafkalite's metadata for
        the topics found in it, so kafkalite may write it from now on. Run it only on a copy,
        or once no broker uses the directory: the broker's metadata log no longer owns these
        topics afterwards. Returns the adopted topics."""
        self._dir.init(adopt=True)
        return self.list_topics()

    def describe_data_dir_config(self) -> dict[str, Any]:
        """The data directory's config under Kafka's broker names, defaults filled in:
        ``auto.create.topics.enable`` (True), ``num.partitions`` (1) and the topic defaults
        (``log.retention.ms``, ``log.segment.bytes``, ``compression.type``, ...; see
        ``kafkalite.datadir.BROKER_SYNONYMS``), as ``kafka-configs --entity-type brokers --describe``."""
        self._dir.require()
        settings = self._dir.dir_config()
        for broker_key, topic_key in BROKER_SYNONYMS.items():
            settings.setdefault(broker_key, TOPIC_DEFAULTS[topic_key])
        return dict(sorted(settings.items()))

    def alter_data_dir_config(self, config: Mapping[str, Any]) -> None:
        """Set data-directory config keys (``None`` restores Kafka's default). The topic
        defaults apply to every topic that does not set the key itself, as a broker's
        ``log.*`` settings do; ``auto.create.topics.enable`` / ``num.partitions`` govern topics
        that producers create by writing to them."""
        self._dir.alter_dir_config(config)

    def list_topics(self) -> list[str]:
        """The topic names, sorted (internal topics such as __consumer_offsets included)."""
        return sorted(self._dir.topics())

    def describe_topic(self, name: str) -> TopicDescription:
        """Partitions (start/end offsets, size on disk) and the full config with defaults."""
        meta = self._dir.topic(name)
        infos = []
        for p in range(int(meta["partitions"])):
            path = self._dir.partition_path(name, p)
            if not os.path.isdir(path):
                infos.append(PartitionInfo(p, 0, 0, 0, 0))
                continue
            with Log(path, readonly=True) as log:
                segments = log.segments
                infos.append(
                    PartitionInfo(
                        p, log.start_offset, log.end_offset, sum(s.size for s in segments), len(segments)
                    )
                )
        return TopicDescription(name, infos, self._dir.resolve(meta.get("config", {})))

    def delete_topic(self, name: str) -> None:
        """Remove the topic and its data. Folders are first renamed the way Kafka marks them
        (``<topic>-<p>.<uuid>-delete``) so an interrupted delete never looks like live data.
        Open producers then get ``UnknownTopicOrPartitionError`` for the topic's partitions.

        Each rename happens while holding the partition's append lock: a shared writer checks
        (under that lock) that its directory is still the one it opened before appending, so an
        append either finished before the rename (and is deleted with the topic, as in Kafka)
        or fails; none is acknowledged into the renamed folder. An exclusive writer (a ``Log``
        opened without ``shared_writers``) holds the append lock for its lifetime; its next
        append fails the same check, but one already running when the rename lands completes
        into the deleted folder. The engine does it (``DataDir::delete_topic``, which the
        wire-protocol server's DeleteTopics uses too), which refuses the internal
        ``__consumer_offsets`` (``InvalidTopicError``), as Kafka does."""
        self._dir.topic(name)  # a typed error naming the fix for a missing topic
        self._dir.check_writable()
        _native.delete_topic(self.path, name)

    def create_partitions(self, name: str, total: int) -> None:
        """Grow the topic to ``total`` partitions (Kafka never shrinks a topic). The engine does
        it (``DataDir::create_partitions``, the server's CreatePartitions too)."""
        validate_topic_name(name)
        validate.integer("total", total, 1, MAX_PARTITIONS)
        self._dir.topic(name)
        self._dir.check_writable()
        _native.create_partitions(self.path, name, total)

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Kafka's ``AdminClient.delete_records``: make each ``(topic, partition)``'s given offset
        its new log start offset (``-1``: the high watermark, i.e. everything); whole segments
        below it are deleted. Returns the new log start offset (low watermark) of each. An offset
        beyond the high watermark raises ``OffsetOutOfRangeError`` (nothing after it is applied).
        An internal topic (``__consumer_offsets``) raises ``InvalidTopicError`` before anything is
        applied, as Kafka's broker refuses it (INVALID_TOPIC_EXCEPTION) whatever its cleanup.policy."""
        if not isinstance(offsets, Mapping):
            raise InvalidTypeError(
                f"offsets must be a dict of (topic, partition) -> offset, not {type(offsets).__name__}"
            )
        checked: list[tuple[str, int, int]] = []
        for entry, offset in offsets.items():
            if isinstance(entry, str) or not isinstance(entry, tuple) or len(entry) != 2:
                raise InvalidTypeError(f"offsets' keys are (topic, partition) pairs, not {entry!r}")
            topic, partition = entry
            validate_topic_name(topic)
            # The server's DeleteRecords rule (the engine's): never on __consumer_offsets.
            _native.refuse_internal(topic, "delete_records")
            checked.append((topic, partition, validate.integer("offset", offset, -1)))
        out: dict[tuple[str, int], int] = {}
        for topic, partition, offset in checked:
            with self._dir.open_partition(topic, partition, shared_writers=True) as log:
                out[(topic, partition)] = log.delete_records_before(
                    log.end_offset if offset == -1 else offset
                )
        return out

    def alter_config(self, name: str, config: Mapping[str, Any]) -> None:
        """Set topic config keys (``None`` as a value restores the default). Clients pick the
        new settings up when they next open the partition. The engine stores it
        (``DataDir::alter_topic_config``, the server's AlterConfigs too)."""
        validate_topic_name(name)
        if not isinstance(config, Mapping):
            raise InvalidTypeError(
                f"config must be a dict of Kafka topic config keys, not {type(config).__name__}"
            )
        removals = [k for k, v in config.items() if v is None]
        checked = validate_config({k: v for k, v in config.items() if v is not None})
        validate_config({k: TOPIC_DEFAULTS.get(k) for k in removals if k in TOPIC_DEFAULTS})
        unknown = [k for k in removals if k not in TOPIC_DEFAULTS]
        if unknown:
            raise InvalidConfigError(f"unknown topic config {unknown[0]!r}")

        self._dir.topic(name)  # a typed error naming the fix for a missing topic
        self._dir.check_writable()
        _native.alter_topic_config(self.path, name, checked, removals)

    def enforce_retention(self, topics: list[str] | None = None, now_ms: int | None = None) -> dict[str, int]:
        """Apply each topic's ``retention.ms`` / ``retention.bytes`` now (Kafka's broker does
        this every 5 minutes; kafkalite producers call this on that schedule). Returns the
        number of segments deleted per topic. Partitions are opened as shared writers, so this
        runs safely beside producers."""
        topics = None if topics is None else validate.str_list("topics", topics)
        now_ms = validate.optional_integer("now_ms", now_ms, 0)
        deleted: dict[str, int] = {}
        self._dir.require()
        if not self._dir.managed:
            return deleted
        for name in topics if topics is not None else self.list_topics():
            deleted[name] = sum(
                self._each_partition(name, lambda log: log.enforce_retention(now_ms)).values()
            )
        return deleted

    def _each_partition(self, name: str, run: Any) -> dict[int, Any]:
        """``run(log)`` on each existing partition of ``name``, opened as a shared writer (safe
        beside producers); ``{partition: result}``."""
        results = {}
        for p in range(self._dir.partitions(name)):
            if os.path.isdir(self._dir.partition_path(name, p)):
                with self._dir.open_partition(name, p, shared_writers=True) as log:
                    results[p] = run(log)
        return results

    def compact_topic(self, name: str, now_ms: int | None = None) -> CompactionResult:
        """Run a full log-compaction pass over every partition of a compacted topic now and
        return what it removed. Appends to a partition wait while it is cleaned."""
        now_ms = validate.optional_integer("now_ms", now_ms, 0)
        meta = self._dir.topic(name)
        config = self._dir.resolve(meta.get("config", {}))
        if not is_compacted(config):
            raise InvalidConfigError(
                f"topic {name!r} has cleanup.policy={config.get('cleanup.policy', 'delete')!r}; "
                "set it to 'compact' (alter_config) to compact it"
            )
        if meta.get("discovered"):
            raise InvalidConfigError(
                f"topic {name!r} belongs to a broker's log directory, which kafkalite only reads"
            )
        return CompactionResult.of(
            name, self._each_partition(name, lambda log: clean_partition(log, config, now_ms))
        )

    def compact_dirty_topics(self, topics: list[str] | None = None) -> dict[str, CompactionResult]:
        """Clean the partitions of compacted topics whose dirty ratio reached
        ``min.cleanable.dirty.ratio`` (what Kafka's cleaner threads do in the background;
        producers call this every ``cleaner_check_interval_ms``)."""
        topics = None if topics is None else validate.str_list("topics", topics)
        out: dict[str, CompactionResult] = {}
        self._dir.require()
        if not self._dir.managed:
            return out
        for name in topics if topics is not None else self.list_topics():
            config = self._dir.effective_config(name)
            if not is_compacted(config):
                continue
            cleaned = self._each_partition(name, lambda log, config=config: clean_if_dirty(log, config))
            results = {p: stats for p, stats in cleaned.items() if stats is not None}
            if results:
                out[name] = CompactionResult.of(name, results)
        return out

    # -- consumer groups (kafka-consumer-groups.sh) ------------------------------------------
    def list_groups(self) -> list[str]:
        """Groups with members or committed offsets."""
        return group_admin.list_groups(self._dir)

    def describe_group(self, group_id: str) -> group_admin.GroupDescription:
        """State, generation, live members, and per partition: committed offset, end offset, lag, owner."""
        return group_admin.describe_group(self._dir, group_id)

    def delete_group(self, group_id: str) -> int:
        """Delete an inactive group's committed offsets (tombstones) and membership files.
        Returns how many offsets were deleted; GroupIdNotFoundError if the group does not exist."""
        return group_admin.delete_group(self._dir, group_id)

    def reset_offsets(
        self, group_id: str, partitions: list[tuple[str, int]], *, execute: bool = True, **spec: Any
    ) -> dict[tuple[str, int], int]:
        """Set an inactive group's committed offsets: one of ``to_earliest``, ``to_latest``,
        ``to_datetime`` (ISO), ``to_offset``, ``shift_by``. Returns the new offsets (only a plan
        when ``execute=False``)."""
        plan = group_admin.plan_reset(self._dir, group_id, partitions, **spec)
        if execute:
            group_admin.execute_reset(self._dir, group_id, plan)
        return plan

    # -- transactions (Kafka's Admin listTransactions / describeTransactions, kafka-transactions.sh) --
    def list_transactions(
        self,
        states: list[str] | None = None,
        producer_ids: list[int] | None = None,
        duration_ms: int | None = None,
    ) -> list[transaction_admin.TransactionListing]:
        """Transactional ids with their producer id and state (Kafka's state names: Empty,
        Ongoing, PrepareCommit, ...), optionally only those in ``states``, of ``producer_ids``, or
        whose transaction started more than ``duration_ms`` ago."""
        return transaction_admin.list_transactions(self.path, states, producer_ids, duration_ms)

    def describe_transactions(
        self, transactional_ids: list[str]
    ) -> dict[str, transaction_admin.TransactionDescription]:
        """Per id: producer id and epoch, state, timeout, start time and the partitions of its
        open transaction. An unknown id raises TransactionalIdNotFoundError."""
        return transaction_admin.describe_transactions(self.path, transactional_ids)

    def abort_transaction(self, transactional_id: str) -> transaction_admin.TransactionDescription:
        """Abort the open transaction of ``transactional_id`` (``kafkalite transactions abort``):
        ABORT markers written and its producer fenced by an epoch bump, as when the transaction
        times out. InvalidTxnStateError when none is open. (Kafka's Java ``abortTransaction``
        takes a partition's hanging transaction instead; here the coordinator knows every
        partition of the id's transaction.)"""
        return transaction_admin.abort_transaction(self.path, transactional_id)

    def describe_producers(
        self, partitions: list[tuple[str, int]]
    ) -> dict[TopicPartition, list[transaction_admin.ProducerState]]:
        """Kafka's ``describeProducers``: each partition's producers (id, epoch, last sequence
        and timestamp, coordinator epoch, the start offset of an open transaction)."""
        return transaction_admin.describe_producers(self.path, partitions)

    def abort_hanging_transaction(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> int:
        """Kafka's ``abortTransaction(AbortTransactionSpec)``: an ABORT marker for a hanging
        transaction of one partition (``kafkalite transactions find-hanging`` lists them).
        Returns the marker's offset."""
        return transaction_admin.abort_hanging(
            self.path, topic, partition, producer_id, producer_epoch, coordinator_epoch
        )

    def close(self) -> None:
        """Nothing to release; for symmetry with Kafka's admin client."""

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Admin.__doc__ = inspect.cleandoc(Admin.__doc__ or "") + "\n" + topic_docstring()
