"""A producer process: acks='all' (flush="always"), small random steps of records whose value
carries (producer, seq); journals every acknowledged record with its offset, every failed one
with its error. Typed errors (KafkaliteError) are expected under faults and journaled; any other
exception escapes as a traceback on stderr, which the checker reports."""

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

STOP = Stop()  # SIGTERM handled from here on, before the slow import of kafkalite

from kafkalite import KafkaliteError, Producer  # noqa: E402 (after STOP, see above)
from kafkalite.errors import KafkaTimeoutError  # noqa: E402
from kafkalite.producer.partitioner import partition_for_key  # noqa: E402

KEYS = 40  # small key space, so compaction has work
FUTURE_TIMEOUT_S = 20


def step(
    producer: Producer,
    journal: Journal,
    rng: random.Random,
    topics: list[str],
    name: str,
    seq: int,
) -> int:
    topic = rng.choice(topics)
    keyed = topic.startswith("compact") or rng.random() < 0.5
    n = rng.randint(1, 40)
    records = []
    for _ in range(n):
        key = b"k%d" % rng.randrange(KEYS) if keyed else None
        records.append((seq, key, encode_value(name, seq, rng.randrange(200))))
        seq += 1
    send_t = time.monotonic_ns()
    if rng.random() < 0.2 and keyed:
        try:
            out = producer.send_batch(topic, [v for _, _, v in records], keys=[k for _, k, _ in records])
        except KafkaliteError as e:
            journal.write(
                "fail",
                send_t=send_t,
                topic=topic,
                recs=[[s, _k(k)] for s, k, _ in records],
                **error_fields(e),
            )
            time.sleep(0.05)
            return seq
        # send_batch groups by partition in order; offsets are consecutive per partition.
        partitions = len(producer.partitions_for(topic))
        next_offset = {p: first for p, (first, _) in out.items()}
        acks = []
        for s, k, _ in records:
            p = partition_for_key(k, partitions)
            acks.append([topic, p, next_offset[p], s, _k(k)])
            next_offset[p] += 1
        journal.write("ack", send_t=send_t, recs=acks)
        return seq
    futures = []
    flushed = "flush() returned"
    try:
        for s, k, v in records:
            futures.append((s, k, producer.send(topic, v, key=k)))
        producer.flush()
    except KafkaliteError as e:
        journal.write("error", where="send/flush", **error_fields(e))
        flushed = f"flush() raised {type(e).__name__} (the sender thread should still append them)"
    acks, fails = [], []
    failure = None
    deadline = time.monotonic() + FUTURE_TIMEOUT_S  # for all of them: one stuck step must not hang the child
    for s, k, f in futures:
        try:
            md = f.get(timeout=max(0.01, deadline - time.monotonic()))
        except KafkaTimeoutError as e:
            # every future should be done: a dead sender thread or a lost batch
            if failure is None:
                journal.write("stuck", what=f"a future still pending {FUTURE_TIMEOUT_S} s after {flushed}")
            failure = e
            fails.append([s, _k(k)])
            continue
        except KafkaliteError as e:
            failure = e
            fails.append([s, _k(k)])
            continue
        acks.append([md.topic, md.partition, md.offset, s, _k(k)])
    if acks:
        journal.write("ack", send_t=send_t, recs=acks)
    if fails:
        journal.write("fail", send_t=send_t, topic=topic, recs=fails, **error_fields(failure))  # type: ignore[arg-type]
    if fails:
        time.sleep(0.05)  # a full disk: do not spin
    return seq


def _k(key: bytes | None) -> str | None:
    return None if key is None else key.decode()


def main() -> None:
    args = child_args(__doc__ or "").parse_args()
    journal = Journal(args.journal)
    rng = random.Random(args.seed)
    lower_nofile(args.nofile)
    journal.write("start", name=args.name, nofile=args.nofile)
    topics = args.topics.split(",")
    try:
        producer = Producer(
            args.data,
            acks="all",
            linger_ms=rng.choice([0, 1, 5]),
            retention_check_interval_ms=400,
            cleaner_check_interval_ms=400,
        )
    except KafkaliteError as e:
        journal.write("fatal", where="Producer()", **error_fields(e))
        sys.exit(EXIT_TYPED_ERROR)
    seq = 0
    while not STOP.requested:
        seq = step(producer, journal, rng, topics, args.name, seq)
    try:
        producer.close(timeout=30)
    except KafkaliteError as e:
        journal.write("error", where="close", **error_fields(e))
    journal.write("closed")


if __name__ == "__main__":
    main()
