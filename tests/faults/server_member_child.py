"""A network consumer-group member for the server suite: kafka-python's KafkaConsumer with a
group_id against ``kafkalite serve``, driven as member_child drives the embedded Consumer
(member_child's ``Member``, so the journal is the same: ``poll``, ``commit`` only once accepted,
``assign`` at the entry of on_partitions_assigned, ``revoke``/``lost`` at the exit of the
callbacks), so the checker's ownership and commit rules apply to the server's coordinator
as they do to the embedded groups. kafka.errors.KafkaError is the typed error."""

from __future__ import annotations

import random
import sys
import time

from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from faults.journal import EXIT_TYPED_ERROR, Journal, child_args, error_fields, now, record_row
from faults.member_child import STOP, Member, tps


class Listener(ConsumerRebalanceListener):
    """Journals the callbacks as member_child's listeners do (``assign`` at the entry,
    ``revoke``/``lost`` at the exit), without their commit: kafka-python 3 runs the callbacks on
    its IO thread, where a blocking call (commit, position) raises RuntimeError. The member
    commits after every poll instead."""

    def __init__(self, member: Member) -> None:
        self.member = member

    def on_partitions_assigned(self, assigned: list) -> None:
        self.member.journal.write("assign", tps=tps(assigned), gen=None)

    def on_partitions_revoked(self, revoked: list) -> None:
        self.member.journal.write("revoke", tps=tps(revoked), gen=None)

    def on_partitions_lost(self, lost: list) -> None:
        self.member.journal.write("lost", tps=tps(lost), gen=None)


SESSION_TIMEOUT_MS = 6000
MAX_POLL_INTERVAL_MS = 10_000
CALL_TIMEOUT_MS = 10_000  # position() and commit(): a server that does not answer is a typed error


def main() -> None:
    parser = child_args(__doc__ or "")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    args = parser.parse_args()
    journal = Journal(args.journal)
    rng = random.Random(args.seed)
    # Every member offers the three assignors (a member with none in common with the group is
    # refused, INCONSISTENT_GROUP_PROTOCOL), in its own order of preference.
    strategies = [RangePartitionAssignor, RoundRobinPartitionAssignor, StickyPartitionAssignor]
    rng.shuffle(strategies)
    journal.write("start", name=args.name, strategies=[s.name for s in strategies])
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=args.bootstrap,
            client_id=args.name,
            group_id=args.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=1000,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
            request_timeout_ms=15_000,
            reconnect_backoff_max_ms=500,
            partition_assignment_strategy=strategies,
        )
    except KafkaError as e:  # NoBrokersAvailable while the server restarts
        journal.write("fatal", where="KafkaConsumer()", **error_fields(e))
        sys.exit(EXIT_TYPED_ERROR)
    member = Member(
        consumer,
        journal,
        False,
        typed=KafkaError,
        commit_failed=CommitFailedError,
        commit_offsets=lambda positions: consumer.commit(
            {tp: OffsetAndMetadata(o, "", -1) for tp, o in positions.items()}, timeout_ms=CALL_TIMEOUT_MS
        ),
        position=lambda tp: consumer.position(tp, timeout_ms=CALL_TIMEOUT_MS),
    )
    consumer.subscribe(args.topics.split(","), listener=Listener(member))
    while not STOP.requested:
        t0 = now()
        try:
            batches = consumer.poll(timeout_ms=200, max_records=300)
        except KafkaError as e:  # CommitFailedError from the listener's commit among them
            journal.write("poll_failed", t0=t0, **error_fields(e))
            time.sleep(0.05)
            continue
        if batches:
            got = {
                f"{tp.topic}:{tp.partition}": [record_row(r) for r in records]
                for tp, records in batches.items()
            }
            journal.write("poll", t0=t0, gen=member.generation(), records=got)
            try:
                member.commit("poll")
            except CommitFailedError:
                pass  # journaled in commit(); the next poll rejoins
    try:
        consumer.close(autocommit=False, timeout_ms=CALL_TIMEOUT_MS)
    except KafkaError as e:
        journal.write("error", where="close", **error_fields(e))
    journal.write("closed")


if __name__ == "__main__":
    main()
