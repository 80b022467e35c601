"""A consumer's fetching: which partitions it may read now, reading from its positions, and
the poll loop (``poll``, ``poll_arrow``, iteration) that waits on the data directory's
notifier. Part of ``kafkalite.Consumer`` (``consumer/__init__.py``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from kafkalite import validate as args
from kafkalite._arrow import require_pyarrow
from kafkalite._native import ConsumerRecord
from kafkalite.consumer.state import ConsumerState
from kafkalite.errors import (
    KafkaliteError,
    OffsetOutOfRangeError,
)
from kafkalite.groups.assignors import TopicPartition
from kafkalite.log import Log
from kafkalite.transactions.manager import (
    ABORT_TIMED_OUT_INTERVAL_MS,
    abort_expired_transactions,
)

logger = logging.getLogger("kafkalite.consumer")  # one logger for the consumer's modules


#: Records per native call when iterating (positions are committed per chunk).
_ITER_CHUNK = 8192


class FetchMixin(ConsumerState):
    """``Consumer``'s fetching and poll loop."""

    # DECLS

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
