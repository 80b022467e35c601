"""A consumer-group member process: subscribes to the topics, polls, commits after every poll
that returned records, and journals what it did:

- ``poll``    t0 (before poll), t (after), the generation it saw, and per partition the
              records returned as [offset, producer, seq, key]
- ``commit``  offsets committed, journaled only after commit() returned (so accepted)
- ``assign``  at the entry of on_partitions_assigned (the partitions are already acquired)
- ``revoke`` / ``lost``  at the exit of the callback (ownership moves only after it returned)
- ``stall``   a deliberate pause longer than max_poll_interval_ms (the member gets evicted)

Half of the incarnations use the README's CommitOnRevoke listener, whose commit raises
CommitFailedError out of poll() after an eviction (the application logs it and polls on, as an
application would); the others commit carefully and define on_partitions_lost."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from typing import Any

from faults.journal import (
    EXIT_TYPED_ERROR,
    Journal,
    Stop,
    child_args,
    error_fields,
    lower_nofile,
    now,
    record_row,
)

STOP = Stop()  # SIGTERM handled from here on, before the slow import of kafkalite

from kafkalite import Consumer, KafkaliteError, TopicPartition  # noqa: E402 (after STOP, see above)
from kafkalite.errors import CommitFailedError  # noqa: E402

MAX_POLL_INTERVAL_MS = 1500


def tps(parts) -> list[list]:
    return [[tp.topic, tp.partition] for tp in sorted(parts)]


class Member:
    """Commits the positions of the assignment and journals what was accepted. The client's
    types and calls are parameters, so that the server suite's kafka-python member
    (server_member_child) is this same member: ``typed`` its error base class,
    ``commit_failed`` its refused-commit error, ``commit_offsets(positions)`` and
    ``position(tp)`` (None: unknown) its calls."""

    def __init__(
        self,
        consumer: Any,
        journal: Journal,
        raising: bool,
        typed: type[Exception] = KafkaliteError,
        commit_failed: type[Exception] = CommitFailedError,
        commit_offsets: Callable[[dict], None] | None = None,
        position: Callable[[Any], int | None] | None = None,
    ) -> None:
        self.consumer = consumer
        self.journal = journal
        self.raising = raising
        self.typed = typed
        self.commit_failed = commit_failed
        self.commit_offsets = commit_offsets or consumer.commit
        self.position = position or consumer.position

    def generation(self) -> int | None:
        member = getattr(self.consumer, "_member", None)  # for the journal only: debugging aid
        return getattr(member, "generation", None)

    def commit(self, where: str) -> None:
        positions = {}
        for tp in self.consumer.assignment():
            try:
                position = self.position(tp)
            except self.typed as e:
                self.journal.write(
                    "error",
                    where="position",
                    tp=[tp.topic, tp.partition],
                    **error_fields(e),
                )
                continue
            if position is not None:
                positions[tp] = position
        if not positions:
            return
        t0 = now()
        try:
            self.commit_offsets(positions)
        except self.commit_failed as e:
            self.journal.write("commit_failed", where=where, **error_fields(e))
            if self.raising:
                raise
            return
        except self.typed as e:  # e.g. ENOSPC while appending to __consumer_offsets
            self.journal.write("error", where=f"commit ({where})", **error_fields(e))
            return
        self.journal.write(
            "commit",
            t0=t0,
            where=where,
            gen=self.generation(),
            offsets=[[tp.topic, tp.partition, o] for tp, o in positions.items()],
        )


class CommitOnRevoke:
    """The README's listener: commit in on_partitions_revoked (also called on loss)."""

    def __init__(self, member: Member) -> None:
        self.member = member

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        try:
            self.member.commit("revoke")
        finally:
            self.member.journal.write("revoke", tps=tps(revoked), gen=self.member.generation())

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        self.member.journal.write("assign", tps=tps(assigned), gen=self.member.generation())


class Careful(CommitOnRevoke):
    """Kafka's advice: commit on revoke, never on loss (the partitions are someone else's)."""

    def on_partitions_lost(self, lost: list[TopicPartition]) -> None:
        self.member.journal.write("lost", tps=tps(lost), gen=self.member.generation())


def main() -> None:
    parser = child_args(__doc__ or "")
    parser.add_argument("--group", required=True)
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--stall-probability", type=float, default=0.0)
    args = parser.parse_args()
    journal = Journal(args.journal)
    rng = random.Random(args.seed)
    lower_nofile(args.nofile)
    raising = rng.random() < 0.5
    journal.write("start", name=args.name, nofile=args.nofile, raising=raising)
    try:
        consumer = Consumer(
            args.data,
            group_id=args.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=[args.strategy],
            session_timeout_ms=3000,
            heartbeat_interval_ms=300,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        )
        member = Member(consumer, journal, raising)
        consumer.subscribe(
            args.topics.split(","),
            listener=(CommitOnRevoke if raising else Careful)(member),
        )
    except KafkaliteError as e:
        journal.write("fatal", where="Consumer()", **error_fields(e))
        sys.exit(EXIT_TYPED_ERROR)
    while not STOP.requested:
        t0 = now()
        try:
            batches = consumer.poll(timeout_ms=100, max_records=300)
        except CommitFailedError as e:  # from the listener's commit: log it and go on polling
            journal.write("poll_failed", t0=t0, **error_fields(e))
            continue
        except KafkaliteError as e:
            journal.write("poll_failed", t0=t0, **error_fields(e))
            time.sleep(0.05)
            continue
        if batches:
            got = {}
            for tp, records in batches.items():
                got[f"{tp.topic}:{tp.partition}"] = [record_row(r) for r in records]
            journal.write("poll", t0=t0, gen=member.generation(), records=got)
            try:
                member.commit("poll")
            except CommitFailedError:
                pass  # journaled in commit(); the next poll rejoins
        if args.stall_probability and rng.random() < args.stall_probability:
            pause = MAX_POLL_INTERVAL_MS / 1000.0 * rng.uniform(1.1, 2.0)
            journal.write("stall", seconds=pause)
            time.sleep(pause)
    try:
        consumer.close(autocommit=False)
    except KafkaliteError as e:
        journal.write("error", where="close", **error_fields(e))
    journal.write("closed")


if __name__ == "__main__":
    main()
