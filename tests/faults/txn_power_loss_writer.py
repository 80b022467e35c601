"""The workload of tests/transactions/test_power_loss_transactions.py: a transactional ``Producer`` (the
default acks=1, so its records are only in the page cache when sent) commits TXNS transactions
of RECORDS records to each of the 2 partitions of ``events`` (small segments, so a transaction's
records span a roll). The parent sets ``KAFKALITE_FAILPOINTS`` so the engine kills this process
(SIGKILL) inside the last commit, at a step of the coordinator: everything written is then in
the page cache, and the strace log says which of it had been synced.

usage: txn_power_loss_writer.py DATA_DIR TXNS RECORDS SEGMENT_BYTES"""

from __future__ import annotations

import sys

TOPIC = "events"
PARTITIONS = 2
TRANSACTIONAL_ID = "power-loss"


def value_for(txn: int, partition: int, i: int) -> bytes:
    return (b"t%d-p%d-%d;" % (txn, partition, i)) * (1 + i % 9)


def main(data: str, txns: int, records: int, segment_bytes: int) -> None:
    from kafkalite import Admin, Producer

    Admin(data).create_topic(TOPIC, PARTITIONS, {"segment.bytes": segment_bytes})
    p = Producer(data, transactional_id=TRANSACTIONAL_ID)
    p.init_transactions()
    for t in range(txns):
        p.begin_transaction()
        for i in range(records):
            for partition in range(PARTITIONS):
                p.send(TOPIC, value_for(t, partition, i), partition=partition)
        p.commit_transaction()  # the fail point kills the process inside the last one
    print("the fail point did not fire", file=sys.stderr)
    sys.exit(3)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], int(a[1]), int(a[2]), int(a[3]))
