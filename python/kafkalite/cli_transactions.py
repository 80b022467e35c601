"""``kafkalite transactions list|describe|abort``: kafka-transactions.sh's verbs and columns
(without its Coordinator column: a data directory has no coordinator process)."""

from __future__ import annotations

import argparse
import time

from kafkalite.admin import Admin
from kafkalite.transaction_admin import TransactionDescription


def add_parser(sub: argparse._SubParsersAction, require_dir, subparser) -> None:  # type: ignore[type-arg]
    """`subparser(parent, name, **kw)` adds a subcommand that also takes --data-dir (cli_args.py)."""
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
    abort.add_argument("--transactional-id", required=True, help="the transactional id")
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
    elif args.action == "abort":
        d = admin.abort_transaction(args.transactional_id)
        print(
            f"Aborted the open transaction of '{d.transactional_id}': producer id {d.producer_id} "
            f"is now at epoch {d.producer_epoch}, its earlier producer is fenced."
        )
    return 0
