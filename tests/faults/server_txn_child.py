"""A network transactional consume-transform-produce job for the server suite (issue 22): what
``txn_child`` does embedded, through ``kafkalite serve`` with confluent-kafka (librdkafka).
Its producer's ``transactional.id`` is its slot, the same in every incarnation, so a restart
fences the one before; its read_committed consumer is assigned one input partition in the
slot's own group (``txn_checker.group_of``). Per transaction it writes one output record per
input record (key ``group:topic:partition:offset``, value ``fi|<name>|<seq>|``), sends the
input offsets with ``send_offsets_to_transaction``, then commits, or at random aborts (and
seeks back to where the transaction began).

Paced: one pause of PAUSE_S per transaction, after a step chosen at random (records
produced, offsets sent, or the transaction ended), so a kill -9 of the child or of the server
still finds transactions open at each of those steps, while the server has a couple of
transactions a second per child to run, not the ~9 a child ran unpaced (with those the soak's
fresh-connection ApiVersions probe once took 2.06 s, past its 2 s bound, on 2 cores: seed
1694283495).

Journal: ``txn_child``'s events, in its format, so ``faults.txn_checker`` checks both; ``init``
carries no producer id or epoch (librdkafka does not expose them). Every KafkaException is the
typed error: journaled (``fenced`` when fatal, as PRODUCER_FENCED is), then the child exits
with EXIT_TYPED_ERROR and the controller restarts the slot, whose next init settles whatever
this one left. Anything else escapes as a traceback, which the checker reports."""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from faults.journal import EXIT_TYPED_ERROR, Journal, Stop, child_args, encode_value
from faults.txn_checker import OUTPUT, group_of, input_key

STOP = Stop()  # SIGTERM handled from here on, before the slow import of confluent_kafka

import confluent_kafka  # noqa: E402 (after STOP)
from confluent_kafka import KafkaException, TopicPartition  # noqa: E402

#: As txn_child's: a transaction a killed child left open is aborted by the coordinator soon.
TRANSACTION_TIMEOUT_MS = 10_000
#: Past a server restart (kill -9, up to 2 s down, then recovery): init is retried meanwhile.
INIT_PATIENCE_S = 60.0
CALL_TIMEOUT_S = 10.0  # each transactional call (librdkafka retries inside it), as the txn timeout
#: librdkafka's send_offsets_to_transaction() can block past its timeout after its group
#: coordinator went away (librdkafka issues #5456, #5511: seen here after a server kill -9 and
#: restart): a call still blocked this long after its timeout ends the child as a typed error.
HANG_SLACK_S = 5.0
#: The pause per transaction (seconds) and the steps it may come after.
PAUSE_S = (0.2, 0.6)
PAUSE_STEPS = ("produced", "offsets_sent", "ended")
#: Input records a transaction takes at most.
MAX_RECORDS = 40


def error_fields(e: KafkaException) -> dict[str, Any]:
    err = e.args[0] if e.args else None
    if not isinstance(err, confluent_kafka.KafkaError):
        return {"err": type(e).__name__, "errno": None, "fault": None, "msg": str(e)[:300]}
    return {"err": err.name(), "errno": err.code(), "fault": None, "msg": err.str()[:300]}


def fatal(e: KafkaException) -> bool:
    err = e.args[0] if e.args else None
    return isinstance(err, confluent_kafka.KafkaError) and err.fatal()


def fail(journal: Journal, where: str, e: KafkaException) -> NoReturn:
    journal.write("fenced" if fatal(e) else "error", where=where, **error_fields(e))
    sys.exit(EXIT_TYPED_ERROR)


def bounded(journal: Journal, where: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args, CALL_TIMEOUT_S)``; if it has not returned HANG_SLACK_S past that timeout,
    the child journals it and exits (os._exit: the main thread is blocked in librdkafka)."""

    def hung() -> None:
        journal.write(
            "error", where=where, err="Hang", errno=None, fault=None,
            msg=f"blocked {CALL_TIMEOUT_S + HANG_SLACK_S:.0f} s, past its timeout of {CALL_TIMEOUT_S:.0f} s",
        )  # fmt: skip
        os._exit(EXIT_TYPED_ERROR)

    timer = threading.Timer(CALL_TIMEOUT_S + HANG_SLACK_S, hung)
    timer.daemon = True
    timer.start()
    try:
        return call(*args, CALL_TIMEOUT_S)
    finally:
        timer.cancel()


def init(producer: confluent_kafka.Producer, journal: Journal) -> None:
    deadline = time.monotonic() + INIT_PATIENCE_S
    while True:
        t0 = time.monotonic_ns()
        try:
            bounded(journal, "init_transactions", producer.init_transactions)
        except KafkaException as e:
            if fatal(e) or time.monotonic() > deadline or STOP.requested:
                fail(journal, "init_transactions", e)
            journal.write("error", where="init_transactions", **error_fields(e))
            time.sleep(0.2)
            continue
        journal.write("init", t0=t0, pid=None, epoch=None)
        return


def pause(rng: random.Random, here: bool) -> None:
    """The transaction's one pause (PAUSE_S), if it comes at this step; none once stopping."""
    if here and not STOP.requested:
        time.sleep(rng.uniform(*PAUSE_S))


def main() -> None:
    parser = child_args(__doc__ or "")
    parser.add_argument("--slot", required=True)
    parser.add_argument("--input", required=True, help="topic:partition (assigned)")
    parser.add_argument("--bootstrap", required=True)
    args = parser.parse_args()
    journal = Journal(args.journal)
    rng = random.Random(args.seed)
    journal.write("start", name=args.name)
    topic, _, part = args.input.partition(":")
    partition = int(part)
    group = group_of(args.slot, args.input)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "client.id": args.name,
            "transactional.id": args.slot,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "linger.ms": rng.choice([0, 5]),
            "reconnect.backoff.max.ms": 500,
        }
    )
    init(producer, journal)
    # After init: a commit the previous incarnation left half-done is complete by now, so the
    # committed offset the assignment starts from is the one its outcome left.
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "client.id": args.name,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "reconnect.backoff.max.ms": 500,
            # A paced job reads a few records a second: prefetch that much, not librdkafka's
            # default 64 MiB of the input (fetched again after every kill, for nothing).
            "queued.max.messages.kbytes": 1024,
            "queued.min.messages": 1000,
        }
    )
    consumer.assign([TopicPartition(topic, partition)])
    seq, number = 0, 0
    while not STOP.requested:
        try:
            messages = consumer.consume(num_messages=rng.randint(1, MAX_RECORDS), timeout=0.1)
        except KafkaException as e:
            fail(journal, "consume", e)
        records = [m for m in messages if m.error() is None]  # the others: transport, retried
        if not records:
            continue
        number += 1
        pause_after = rng.choice(PAUSE_STEPS)
        first_seq, first, last = seq, records[0].offset(), records[-1].offset()
        journal.write("begin", txn=number, seq=first_seq)
        try:
            producer.begin_transaction()
            for m in records:
                key = input_key(group, topic, partition, m.offset())
                producer.produce(OUTPUT, encode_value(args.name, seq, rng.randrange(100)), key=key)
                seq += 1
            pause(rng, pause_after == "produced")
            bounded(
                journal,
                "send_offsets_to_transaction",
                producer.send_offsets_to_transaction,
                [TopicPartition(topic, partition, last + 1)],
                consumer.consumer_group_metadata(),
            )
        except KafkaException as e:  # before ``end``: the checker expects none of it visible
            fail(journal, "transaction", e)
        pause(rng, pause_after == "offsets_sent")
        commit = STOP.requested or rng.random() >= 0.25
        inputs = [[topic, partition, first, last + 1]]
        journal.write("end", txn=number, seqs=[first_seq, seq], input=inputs, commit=commit)
        try:
            end = producer.commit_transaction if commit else producer.abort_transaction
            bounded(journal, "commit_transaction" if commit else "abort_transaction", end)
        except KafkaException as e:
            journal.write("end_failed", txn=number, commit=commit, **error_fields(e))
            sys.exit(EXIT_TYPED_ERROR)
        journal.write("ended", txn=number, commit=commit)
        if not commit:  # the aborted input is read again
            consumer.assign([TopicPartition(topic, partition, first)])  # seek, in any fetch state
        pause(rng, pause_after == "ended")
    consumer.close()
    producer.flush(CALL_TIMEOUT_S)
    journal.write("closed")


if __name__ == "__main__":
    main()
