"""A confluent-kafka group member for the server's group tests: subscribes to TOPIC in GROUP and
keeps a journal in OUT, one line per event with CLOCK_MONOTONIC nanoseconds (the same clock in
every process of the host), flushed at once so a SIGKILL loses at most the line being written:

    A <t> <partitions,>    partitions assigned (after a rebalance)
    R <t> <partition> <offset>    a record handed to the application (written before its commit)
    C <t> <partition> <offset>    a synchronous commit of <offset> (the next to read) succeeded

Runs until killed."""

from __future__ import annotations

import sys
import time

import confluent_kafka


def main(bootstrap: str, topic: str, group: str, out: str) -> None:
    journal = open(out, "a", buffering=1)

    def note(*fields: object) -> None:
        journal.write(" ".join(map(str, fields)) + "\n")
        journal.flush()

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        }
    )
    consumer.subscribe(
        [topic],
        on_assign=lambda c, parts: note(
            "A",
            time.monotonic_ns(),
            ",".join(str(p.partition) for p in sorted(parts, key=lambda p: p.partition)),
        ),
    )
    while True:
        msg = consumer.poll(0.2)
        if msg is None or msg.error() is not None:
            continue
        note("R", time.monotonic_ns(), msg.partition(), msg.offset())
        try:
            consumer.commit(message=msg, asynchronous=False)
        except confluent_kafka.KafkaException as e:  # a rebalance began: the next owner re-reads it
            print("commit failed:", e, flush=True)
            continue
        note("C", time.monotonic_ns(), msg.partition(), msg.offset() + 1)


if __name__ == "__main__":
    main(*sys.argv[1:5])
