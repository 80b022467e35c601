"""Exactly-once consume-transform-produce over a data directory: read topic IN, write each
value upper-cased to topic OUT, and commit the input offsets in the same transaction as the
output (Kafka's transactional pattern). Killed at any moment and restarted, OUT holds every
input record exactly once for read_committed readers.

    python examples/consume_transform_produce.py DATA [--input in] [--output out]
        [--group ctp] [--transactional-id ctp-0] [--idle-seconds 2]

The producer's ``init_transactions()`` comes before the consumer reads its committed offsets:
it completes (or aborts) whatever a killed predecessor with the same transactional id left,
so the offsets the consumer starts from are final. A transaction whose offsets the group
refuses (it rebalanced since the poll: ``CommitFailedError``) is aborted and its input read again.
"""

from __future__ import annotations

import argparse
import time

from kafkalite import Consumer, Producer, TopicPartition
from kafkalite.errors import CommitFailedError


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("data")
    parser.add_argument("--input", default="in")
    parser.add_argument("--output", default="out")
    parser.add_argument("--group", default="ctp")
    parser.add_argument("--transactional-id", default="ctp-0")
    parser.add_argument("--idle-seconds", type=float, default=2.0, help="stop after this long without input")
    args = parser.parse_args()

    producer = Producer(args.data, transactional_id=args.transactional_id, linger_ms=5)
    producer.init_transactions()
    consumer = Consumer(
        args.data,
        group_id=args.group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    consumer.subscribe([args.input])
    idle_since = time.monotonic()
    processed = 0
    while time.monotonic() - idle_since < args.idle_seconds:
        batches = consumer.poll(timeout_ms=200, max_records=500)
        if not batches:
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        offsets = {}
        for tp, records in batches.items():
            for r in records:
                producer.send(args.output, r.value.upper(), key=r.key)
            offsets[TopicPartition(tp.topic, tp.partition)] = records[-1].offset + 1
            processed += len(records)
        try:
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        except CommitFailedError:
            # The group rebalanced since this poll (KIP-447 fencing): these partitions may be
            # another member's now. Abort, and read again from the committed offsets.
            producer.abort_transaction()
            processed -= sum(len(records) for records in batches.values())
            for tp in consumer.assignment():
                committed = consumer.committed(tp)
                if committed is not None:
                    consumer.seek(tp, committed)
                else:
                    consumer.seek_to_beginning(tp)
            continue
        producer.commit_transaction()
    consumer.close()
    producer.close()
    print(f"processed {processed} records", flush=True)


if __name__ == "__main__":
    main()
