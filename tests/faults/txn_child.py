"""A transactional consume-transform-produce job (issue 22): an embedded transactional producer
(``transactional_id`` = its slot, the same in every incarnation, so a restart fences the one
before) reads its input through a read_committed consumer (``open_consumer``: one partition
assigned in the slot's own group, or a topic subscribed in a group the slots share, where
rebalances make zombies that KIP-447 must refuse), and per transaction writes one output record
per input record (key ``group:topic:partition:offset``, value ``fi|<name>|<seq>|``) and sends the
input offsets with ``send_offsets_to_transaction(offsets, consumer.group_metadata())``; then
commits, or at random aborts (and seeks back to where the transaction began). Offsets the group
refuses (``CommitFailedError``: it rebalanced since the poll) abort the transaction.

Journal (fsync'd before the step it announces):

- ``init``   t0, t, producer id and epoch after ``init_transactions()`` returned
- ``begin``  the transaction's number and its first seq, before any send
- ``end``    before commit/abort: its seq range, input ranges [topic, partition, from, to] and
             whether it commits
- ``ended``  after commit/abort returned (``refused``: the group refused its offsets)
- ``end_failed`` / ``error`` / ``fenced``: a typed error; the child then exits with
  EXIT_TYPED_ERROR (the controller restarts the slot; the next incarnation's init settles
  whatever this one left)

A transaction's outcome is only known from ``ended``; one whose commit began and did not end
is all or nothing, which the checker (``faults.txn_checker``) verifies from the log."""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from faults.journal import (
    EXIT_TYPED_ERROR,
    Journal,
    Stop,
    child_args,
    encode_value,
    error_fields,
    lower_nofile,
)
from faults.txn_checker import OUTPUT, group_of, input_key

STOP = Stop()  # SIGTERM handled from here on, before the slow import of kafkalite

from kafkalite import Consumer, KafkaliteError, Producer, TopicPartition  # noqa: E402 (after STOP)
from kafkalite.errors import (  # noqa: E402
    CommitFailedError,
    ConcurrentTransactionsError,
    ProducerFencedError,
)

#: Short, so a transaction abandoned by a SIGSTOPped child is aborted by the others' sweeps too.
TRANSACTION_TIMEOUT_MS = 10_000
INIT_PATIENCE_S = 30.0  # a SIGSTOPped holder of the id's lock: ConcurrentTransactionsError, retried


def init(producer: Producer, journal: Journal) -> None:
    deadline = time.monotonic() + INIT_PATIENCE_S
    while True:
        t0 = time.monotonic_ns()
        try:
            producer.init_transactions()
        except ConcurrentTransactionsError as e:
            journal.write("error", where="init_transactions", **error_fields(e))
            if time.monotonic() > deadline or STOP.requested:
                raise
            time.sleep(0.2)
            continue
        pid, epoch = producer._transactions().native.producer  # what the fencing rule compares
        journal.write("init", t0=t0, pid=pid, epoch=epoch)
        return


def fail(journal: Journal, where: str, e: KafkaliteError) -> None:
    journal.write("fenced" if isinstance(e, ProducerFencedError) else "error", where=where, **error_fields(e))
    sys.exit(EXIT_TYPED_ERROR)


def open_consumer(args: Any, rng: random.Random) -> Consumer:
    """``--input topic:partition``: assigned, in the slot's own group; ``--input topic``: a
    member of the shared group (rebalances, evictions when SIGSTOPped past its session: the
    KIP-447 path, where a zombie's offsets are refused and a new owner waits for its
    transaction)."""
    topic, _, part = args.input.partition(":")
    consumer = Consumer(
        args.data,
        group_id=group_of(args.slot, args.input),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
        max_poll_interval_ms=3000,
    )
    if part:
        consumer.assign([TopicPartition(topic, int(part))])
    else:
        consumer.subscribe([topic])
    return consumer


def main() -> None:
    parser = child_args(__doc__ or "")
    parser.add_argument("--slot", required=True)
    parser.add_argument("--input", required=True, help="topic:partition (assigned) or topic (subscribed)")
    args = parser.parse_args()
    journal = Journal(args.journal)
    rng = random.Random(args.seed)
    lower_nofile(args.nofile)
    journal.write("start", name=args.name, nofile=args.nofile)
    try:
        producer = Producer(
            args.data,
            transactional_id=args.slot,
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
            linger_ms=rng.choice([0, 1, 5]),
        )
        init(producer, journal)
        # After init: a commit the previous incarnation left half-done is complete by now, so
        # the committed offset read here is the one its outcome left.
        consumer = open_consumer(args, rng)
    except KafkaliteError as e:
        fail(journal, "start", e)
    group = group_of(args.slot, args.input)
    seq, number = 0, 0
    while not STOP.requested:
        try:
            batches = consumer.poll(timeout_ms=100, max_records=rng.randint(1, 60))
        except KafkaliteError as e:
            fail(journal, "poll", e)
        batches = {tp: records for tp, records in batches.items() if records}
        if not batches:
            continue
        number += 1
        first_seq = seq
        journal.write("begin", txn=number, seq=first_seq)
        inputs = [[tp.topic, tp.partition, rs[0].offset, rs[-1].offset + 1] for tp, rs in batches.items()]
        refused = None
        try:
            producer.begin_transaction()
            for tp, records in batches.items():
                for r in records:
                    key = input_key(group, tp.topic, tp.partition, r.offset)
                    producer.send(OUTPUT, encode_value(args.name, seq, rng.randrange(100)), key=key)
                    seq += 1
            offsets = {tp: records[-1].offset + 1 for tp, records in batches.items()}
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        except CommitFailedError as e:  # KIP-447: the group rebalanced since the poll
            refused = e
        except KafkaliteError as e:
            fail(journal, "transaction", e)
        commit = refused is None and (STOP.requested or rng.random() >= 0.25)
        journal.write("end", txn=number, seqs=[first_seq, seq], input=inputs, commit=commit)
        try:
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
        except KafkaliteError as e:
            journal.write("end_failed", txn=number, commit=commit, **error_fields(e))
            sys.exit(EXIT_TYPED_ERROR)
        journal.write(
            "ended", txn=number, commit=commit, **({"refused": error_fields(refused)} if refused else {})
        )
        if not commit:  # the aborted input is read again (where this member still owns it)
            owned = consumer.assignment()
            for tp, records in batches.items():
                if tp in owned:
                    consumer.seek(tp, records[0].offset)
    try:
        consumer.close(autocommit=False)
        producer.close(timeout=30)
    except KafkaliteError as e:
        journal.write("error", where="close", **error_fields(e))
    journal.write("closed")


if __name__ == "__main__":
    main()
