"""``kafkalite transactions list|describe|abort|describe-producers|find-hanging``:
kafka-transactions.sh's verbs and columns (without its Coordinator column: a data directory has
no coordinator process)."""

from __future__ import annotations

import argparse
import sys
import time

from kafkalite.admin import Admin
from kafkalite.datadir import DataDir
from kafkalite.transactions import admin as transaction_admin
from kafkalite.transactions.admin import TransactionDescription


def add_parser(sub: argparse._SubParsersAction, require_dir, subparser) -> None:  # type: ignore[type-arg]
    """`subparser(parent, name, **kw)` adds a subcommand that also takes --data-dir (cli/args.py)."""
    txns = subparser(
        sub, "transactions", help="list, describe and abort transactions (kafka-transactions.sh)"
    )
    actions = txns.add_subparsers(dest="action", required=True)
    listing = subparser(actions, "list", help="transactional ids with their producer id and state")
    listing.add_argument(
        "--duration-filter",
        type=int,
        metavar="MS",
        help="only transactions started more than MS milliseconds ago",
    )
    describe = subparser(
        actions, "describe", help="producer id and epoch, state, timeout and partitions of a transactional id"
    )
    describe.add_argument("--transactional-id", required=True, help="the transactional id")
    abort = subparser(
        actions,
        "abort",
        help="abort the open transaction of a transactional id as its timeout would: ABORT markers "
        "written, its producer fenced",
    )
    which = abort.add_mutually_exclusive_group(required=True)
    which.add_argument("--transactional-id", help="the transactional id")
    which.add_argument(
        "--topic", help="with --partition and --start-offset: a hanging transaction's partition"
    )
    abort.add_argument("--partition", type=int, help="the hanging transaction's partition")
    abort.add_argument(
        "--start-offset",
        type=int,
        help="the first offset of the hanging transaction (find-hanging's StartOffset)",
    )
    producers = subparser(
        actions, "describe-producers", help="the producers of a partition (DescribeProducers)"
    )
    producers.add_argument("--topic", required=True, help="the partition's topic")
    producers.add_argument("--partition", type=int, required=True, help="the partition's number")
    hanging = subparser(
        actions,
        "find-hanging",
        help="transactions open in partitions for longer than any transaction may run, which no "
        "coordinator will end (abort them with abort --topic --partition --start-offset)",
    )
    where = hanging.add_mutually_exclusive_group(required=True)
    where.add_argument("--broker-id", type=int, help="every partition of the data directory (one broker)")
    where.add_argument("--topic", help="the partitions of this topic")
    hanging.add_argument("--partition", type=int, help="with --topic: only this partition")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=15,
        metavar="MINUTES",
        help="the longest transaction timeout of the producers (transaction.max.timeout.ms), in minutes "
        "(default 15)",
    )
    txns.set_defaults(run=lambda args: run(args, require_dir(args)))


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def _describe_row(d: TransactionDescription) -> tuple[str, ...]:
    start = d.transaction_start_time_ms
    ongoing = start is not None and d.state == "Ongoing"
    return (
        d.transactional_id,
        str(d.producer_id),
        str(d.producer_epoch),
        d.state,
        str(d.transaction_timeout_ms),
        str(start) if ongoing else "None",
        str(int(time.time() * 1000) - start) if ongoing and start is not None else "None",
        ",".join(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions),
    )


_DESCRIBE_HEADER = (
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)


def run(args: argparse.Namespace, data_dir: str) -> int:
    admin = Admin(data_dir)
    if args.action == "list":
        listed = admin.list_transactions(duration_ms=args.duration_filter)
        _table(
            ("TransactionalId", "ProducerId", "TransactionState"),
            [(t.transactional_id, str(t.producer_id), t.state) for t in listed],
        )
    elif args.action == "describe":
        # an unknown id: TransactionalIdNotFoundError, exit 1 with its message
        d = admin.describe_transactions([args.transactional_id])[args.transactional_id]
        _table(_DESCRIBE_HEADER, [_describe_row(d)])
    elif args.action == "abort" and args.transactional_id is not None:
        d = admin.abort_transaction(args.transactional_id)
        print(
            f"Aborted the open transaction of '{d.transactional_id}': producer id {d.producer_id} "
            f"is now at epoch {d.producer_epoch}, its earlier producer is fenced."
        )
    elif args.action == "abort":
        return _abort_hanging(admin, args)
    elif args.action == "describe-producers":
        described = admin.describe_producers([(args.topic, args.partition)])
        _table(
            _PRODUCERS_HEADER,
            [
                (
                    str(p.producer_id),
                    str(p.producer_epoch),
                    str(p.coordinator_epoch if p.coordinator_epoch is not None else -1),
                    str(p.last_sequence),
                    str(p.last_timestamp),
                    str(
                        p.current_transaction_start_offset
                        if p.current_transaction_start_offset is not None
                        else -1
                    ),
                )
                for ps in described.values()
                for p in ps
            ],
        )
    elif args.action == "find-hanging":
        return _find_hanging(data_dir, args)
    return 0


_PRODUCERS_HEADER = (
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
)


def _find_hanging(data_dir: str, args: argparse.Namespace) -> int:
    if args.topic is None and args.partition is not None:
        print("--partition needs --topic", file=sys.stderr)
        return 2
    if args.max_transaction_timeout < 1:
        print("--max-transaction-timeout must be at least 1 (minute)", file=sys.stderr)
        return 2
    if args.topic is None:
        partitions = transaction_admin.all_partitions(data_dir)
    elif args.partition is not None:
        partitions = [(args.topic, args.partition)]
    else:
        partitions = [(args.topic, p) for p in range(DataDir(data_dir).partitions(args.topic))]
    found = transaction_admin.find_hanging(data_dir, partitions, args.max_transaction_timeout * 60_000)
    _table(
        (
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ),
        [
            (
                h.topic,
                str(h.partition),
                str(h.producer_id),
                str(h.producer_epoch),
                str(h.coordinator_epoch),
                str(h.start_offset),
                str(h.last_timestamp),
                str(h.duration_ms // 60_000),
            )
            for h in found
        ],
    )
    return 0


def _abort_hanging(admin: Admin, args: argparse.Namespace) -> int:
    """kafka-transactions.sh's ``abort --topic --partition --start-offset``: the producer whose
    transaction in that partition starts at that offset, aborted with its epoch and its last
    coordinator epoch."""
    if args.partition is None or args.start_offset is None:
        print("abort --topic needs --partition and --start-offset", file=sys.stderr)
        return 2
    producers = admin.describe_producers([(args.topic, args.partition)])
    match = [
        p for ps in producers.values() for p in ps if p.current_transaction_start_offset == args.start_offset
    ]
    if not match:
        print(
            f"{args.topic}-{args.partition} has no open transaction starting at offset {args.start_offset}",
            file=sys.stderr,
        )
        return 1
    p = match[0]
    coordinator_epoch = p.coordinator_epoch if p.coordinator_epoch is not None else 0
    offset = admin.abort_hanging_transaction(
        args.topic, args.partition, p.producer_id, p.producer_epoch, coordinator_epoch
    )
    print(
        f"Aborted the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) in "
        f"{args.topic}-{args.partition} starting at offset {args.start_offset}: ABORT marker at offset {offset}."
    )
    return 0
