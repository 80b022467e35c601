"""A consumer's group side: joining, following rebalances (hand-over with the listener),
leaving, and committing offsets (members only what they own in the current generation).
Part of ``kafkalite.Consumer`` (``consumer/__init__.py``); the group itself is ``kafkalite.groups.member``."""

from __future__ import annotations

import logging
import time
from typing import Any, NamedTuple

from kafkalite import validate as args
from kafkalite.consumer.state import ConsumerState
from kafkalite.errors import (
    CommitFailedError,
    IllegalStateError,
    InvalidTypeError,
)
from kafkalite.groups.assignors import TopicPartition
from kafkalite.groups.member import GroupFiles, GroupMember, members_refusal
from kafkalite.transactions.manager import (
    ConsumerGroupMetadata,
)

logger = logging.getLogger("kafkalite.consumer")  # one logger for the consumer's modules


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""


class GroupMixin(ConsumerState):
    """``Consumer``'s group membership and commits."""

    # DECLS

    def _maintain_group(self, topics: list[str]) -> None:
        """Join, follow rebalances, hand partitions over (kafkalite.groups.member). Not re-entered from
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
