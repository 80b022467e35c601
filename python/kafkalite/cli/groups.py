"""``kafkalite groups list|describe|delete|reset-offsets``: kafka-consumer-groups.sh's commands
and columns."""

from __future__ import annotations

import argparse

from kafkalite.admin import Admin


def add_parser(sub: argparse._SubParsersAction, require_dir, subparser) -> None:  # type: ignore[type-arg]
    """`subparser(parent, name, **kw)` adds a subcommand that also takes --data-dir (cli/args.py)."""
    groups = subparser(sub, "groups", help="list, describe, delete consumer groups and reset their offsets")
    actions = groups.add_subparsers(dest="action", required=True)
    subparser(actions, "list", help="group ids")
    describe = subparser(actions, "describe", help="members, partitions, committed offsets and lag")
    describe.add_argument("group", help="the group id")
    delete = subparser(actions, "delete", help="delete an inactive group and its offsets")
    delete.add_argument("group", help="the group id")
    reset = subparser(actions, "reset-offsets", help="set an inactive group's committed offsets")
    reset.add_argument("group", help="the group id")
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", help="TOPIC or TOPIC:P,P,... (repeatable)")
    which.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    spec = reset.add_mutually_exclusive_group(required=True)
    spec.add_argument("--to-earliest", action="store_true", help="each partition's start offset")
    spec.add_argument("--to-latest", action="store_true", help="each partition's end offset")
    spec.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="the first offset at or after this time (local time unless it names a zone)",
    )
    spec.add_argument("--to-offset", type=int, help="this offset (kept within each partition's range)")
    spec.add_argument("--shift-by", type=int, help="the committed offset plus this (negative: back)")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument(
        "--execute", action="store_true", help="apply the new offsets (default: only show them)"
    )
    mode.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    groups.set_defaults(run=lambda args: run(args, require_dir(args)))


def _partitions(admin: Admin, args: argparse.Namespace) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted((p.topic, p.partition) for p in admin.describe_group(args.group).partitions)
    out = []
    for spec in args.topic:
        topic, _, numbers = spec.partition(":")
        count = admin.describe_topic(topic).partitions
        try:
            wanted = [int(n) for n in numbers.split(",")] if numbers else [p.partition for p in count]
        except ValueError:
            raise SystemExit(
                f"kafkalite: --topic takes TOPIC or TOPIC:P,P,... with partition numbers, got {spec!r}"
            ) from None
        out += [(topic, p) for p in wanted]
    return out


def run(args: argparse.Namespace, data_dir: str) -> int:
    admin = Admin(data_dir)
    if args.action == "list":
        for group in admin.list_groups():
            print(group)
    elif args.action == "describe":
        d = admin.describe_group(args.group)
        if d.state == "Dead":
            print(f"Consumer group '{args.group}' does not exist.")
            return 1
        print(
            f"Consumer group '{d.group_id}': state {d.state}, generation {d.generation}, protocol {d.protocol}, {len(d.members)} member(s)"
        )
        header = (
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "CLIENT-ID",
        )
        rows = [header] + [
            (
                d.group_id,
                p.topic,
                str(p.partition),
                _dash(p.committed),
                str(p.end_offset),
                _dash(p.lag),
                p.member_id or "-",
                p.client_id or "-",
            )
            for p in d.partitions
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for r in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    elif args.action == "delete":
        count = admin.delete_group(args.group)  # a missing group: GroupIdNotFoundError, exit 1
        print(
            f"Deletion of requested consumer group '{args.group}' was successful ({count} committed offsets deleted)."
        )
    elif args.action == "reset-offsets":
        spec = {
            "to_earliest": args.to_earliest,
            "to_latest": args.to_latest,
            "to_datetime": args.to_datetime,
            "to_offset": args.to_offset,
            "shift_by": args.shift_by,
        }
        plan = admin.reset_offsets(args.group, _partitions(admin, args), execute=args.execute, **spec)
        print(f"{'GROUP':<20} {'TOPIC':<20} {'PARTITION':<10} NEW-OFFSET")
        for (topic, p), offset in sorted(plan.items()):
            print(f"{args.group:<20} {topic:<20} {p:<10} {offset}")
        if not args.execute:
            print("(dry run: nothing changed; add --execute to apply)")
    return 0


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)
