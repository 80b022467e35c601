"""A transactional consume-transform-produce job (issue 22): an embedded transactional producer
(``transactional_id`` = its slot, the same in every incarnation, so a restart fences the one
before) reads one input partition through a consumer of its own group (``assign()``), and per
transaction writes one output record per input record (key ``topic:partition:offset``, value
``fi|<name>|<seq>|``) and sends the input offsets with ``send_offsets_to_transaction``; then
commits, or at random aborts (and seeks back to where the transaction began).

Journal (fsync'd before the step it announces):

- ``init``   t0, t, producer id and epoch after ``init_transactions()`` returned
- ``begin``  the transaction's number and its first seq, before any send
- ``end``    before commit/abort: its seq range, input range [from, to) and whether it commits
- ``ended``  after commit/abort returned
- ``end_failed`` / ``error`` / ``fenced``: a typed error; the child then exits with
  EXIT_TYPED_ERROR (the controller restarts the slot; the next incarnation's init settles
  whatever this one left)

A transaction's outcome is only known from ``ended``; one whose commit began and did not end
is all or nothing, which the checker (``faults.txn_checker``) verifies from the log."""

from __future__ import annotations

import random
import sys
import time

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
from kafkalite.errors import ConcurrentTransactionsError, ProducerFencedError  # noqa: E402

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


def main() -> None:
    parser = child_args(__doc__ or "")
    parser.add_argument("--slot", required=True)
    parser.add_argument("--input", required=True, help="topic:partition")
    args = parser.parse_args()
    journal = Journal(args.journal)
    rng = random.Random(args.seed)
    lower_nofile(args.nofile)
    journal.write("start", name=args.name, nofile=args.nofile)
    topic, _, part = args.input.rpartition(":")
    tp = TopicPartition(topic, int(part))
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
        consumer = Consumer(
            args.data, group_id=group_of(args.slot), enable_auto_commit=False, auto_offset_reset="earliest"
        )
        consumer.assign([tp])
    except KafkaliteError as e:
        fail(journal, "start", e)
    seq, number = 0, 0
    while not STOP.requested:
        try:
            start = consumer.position(tp)
            records = consumer.poll(timeout_ms=100, max_records=rng.randint(1, 60)).get(tp, [])
        except KafkaliteError as e:
            fail(journal, "poll", e)
        if not records:
            continue
        number += 1
        first_seq = seq
        journal.write("begin", txn=number, seq=first_seq)
        try:
            producer.begin_transaction()
            for r in records:
                producer.send(
                    OUTPUT,
                    encode_value(args.name, seq, rng.randrange(100)),
                    key=input_key(tp.topic, tp.partition, r.offset),
                )
                seq += 1
            end = records[-1].offset + 1
            producer.send_offsets_to_transaction({tp: end}, consumer.group_metadata())
        except KafkaliteError as e:
            fail(journal, "transaction", e)
        commit = STOP.requested or rng.random() >= 0.25
        journal.write("end", txn=number, seqs=[first_seq, seq], input=[start, end], commit=commit)
        try:
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
        except KafkaliteError as e:
            journal.write("end_failed", txn=number, commit=commit, **error_fields(e))
            sys.exit(EXIT_TYPED_ERROR)
        journal.write("ended", txn=number, commit=commit)
        if not commit:
            consumer.seek(tp, start)  # the aborted input is read again
    try:
        consumer.close(autocommit=False)
        producer.close(timeout=30)
    except KafkaliteError as e:
        journal.write("error", where="close", **error_fields(e))
    journal.write("closed")


if __name__ == "__main__":
    main()
