"""A confluent-kafka group member for tests/test_server.py: subscribes to TOPIC in GROUP,
appends "partition offset" for every record to OUT (before committing it, synchronously),
and prints its assignment changes to stdout. Runs until killed."""

from __future__ import annotations

import sys

import confluent_kafka


def main(bootstrap: str, topic: str, group: str, out: str) -> None:
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
        [topic], on_assign=lambda c, parts: print("assigned", sorted(p.partition for p in parts), flush=True)
    )
    with open(out, "a") as log:
        while True:
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            log.write(f"{msg.partition()} {msg.offset()}\n")
            log.flush()
            try:
                consumer.commit(message=msg, asynchronous=False)
            except confluent_kafka.KafkaException as e:  # a rebalance began: the next owner re-reads it
                print("commit failed:", e, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
