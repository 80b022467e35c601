"""A consumer's positions: where each assigned partition's next read starts (committed offset,
else ``auto_offset_reset``), ``seek`` and the offset lookups (beginning, end, by time).
Part of ``kafkalite.Consumer`` (``consumer/__init__.py``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from kafkalite import validate as args
from kafkalite.consumer.state import ConsumerState
from kafkalite.errors import (
    IllegalStateError,
    InvalidConfigError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
)
from kafkalite.groups.assignors import TopicPartition
from kafkalite.log import Log


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class NoOffsetForPartitionError(OffsetOutOfRangeError):
    """auto_offset_reset='none' and no committed offset (or it fell out of range)."""


#: Kafka's default.api.timeout.ms: how long ``position()`` waits for offsets held by a transaction.
DEFAULT_API_TIMEOUT_S = 60.0


class PositionsMixin(ConsumerState):
    """``Consumer``'s position bookkeeping and seeks."""

    # DECLS

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
