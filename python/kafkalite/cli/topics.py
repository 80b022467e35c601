"""``kafkalite topics``, ``init`` and ``config``: a data directory's topics and config (what
kafka-topics and kafka-configs do for a cluster)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kafkalite.cli.args import parse_config, require_dir, subparser
from kafkalite.cli.progress import progress

if TYPE_CHECKING:
    pass


def _shown_topics(admin: Any, args: argparse.Namespace) -> list[str]:
    """Topics to list: internal ones (``__consumer_offsets``) only with --include-internal."""
    return [t for t in admin.list_topics() if args.include_internal or not t.startswith("__")]


def _topics(args: argparse.Namespace) -> int:
    from kafkalite.admin import Admin

    admin = Admin(require_dir(args))
    if args.action == "create":
        admin.create_topic(args.name, partitions=args.partitions, config=parse_config(args.config))
        print(f"Created topic {args.name}.")
    elif args.action == "list":
        for name in _shown_topics(admin, args):
            print(name)
    elif args.action == "describe":
        names = [args.name] if args.name else _shown_topics(admin, args)
        with progress("describe topics", total=len(names)) as advance:
            for name in names:
                d = admin.describe_topic(name)
                config = ",".join(f"{k}={v}" for k, v in sorted(d.config.items()))
                print(f"Topic: {d.name}\tPartitionCount: {len(d.partitions)}\tConfigs: {config}")
                for p in d.partitions:
                    print(
                        f"\tTopic: {d.name}\tPartition: {p.partition}\tStartOffset: {p.start_offset}\tEndOffset: {p.end_offset}\tSize: {p.size_bytes}\tSegments: {p.segments}"
                    )
                advance(1)
    elif args.action == "delete":
        admin.delete_topic(args.name)
        print(f"Deleted topic {args.name}.")
    elif args.action == "alter":
        changes: dict[str, object] = dict(parse_config(args.config))
        changes.update({k: None for k in args.delete_config or []})
        if args.partitions is not None:  # 0 too: create_partitions says why it is refused
            admin.create_partitions(args.name, args.partitions)
        if changes:
            admin.alter_config(args.name, changes)
        print(f"Altered topic {args.name}.")
    return 0


def _init(args: argparse.Namespace) -> int:
    """Make a kafkalite data directory (the only command besides `topics create` and `produce`
    that may create one), or adopt a broker's log directory on purpose."""
    from kafkalite.admin import Admin

    path = args.dir or require_dir(args)
    admin = Admin(path)
    if args.adopt:
        if admin._dir.managed:
            print(f"{admin.path} is already a kafkalite data directory; nothing to adopt.")
        else:
            topics = admin.adopt_broker_dir()
            print(
                f"Adopted {admin.path}: kafkalite now owns its {len(topics)} topic(s) {', '.join(topics)}. No broker may use it any more."
            )
    if admin.init(config=parse_config(args.config)) and not args.adopt:
        print(f"Created kafkalite data directory {admin.path}.")
    elif not args.adopt:
        print(
            f"{admin.path} is already a kafkalite data directory"
            + ("; config updated." if args.config else ".")
        )
    return 0


def _config(args: argparse.Namespace) -> int:
    """The data directory's config under Kafka's broker names (kafka-configs --entity-type brokers)."""
    from kafkalite.admin import Admin

    admin = Admin(require_dir(args))
    if args.action == "alter":
        changes: dict[str, object] = dict(parse_config(args.add_config))
        changes.update({k: None for k in args.delete_config or []})
        if not changes:
            raise SystemExit("kafkalite: config alter needs --add-config KEY=VALUE or --delete-config KEY")
        admin.alter_data_dir_config(changes)
        print(f"Altered the config of {admin.path}.")
    else:
        for key, value in admin.describe_data_dir_config().items():
            print(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    topics = subparser(sub, "topics", help="create, list, describe, delete and alter topics")
    actions = topics.add_subparsers(dest="action", required=True)
    create = subparser(actions, "create", help="create a topic")
    create.add_argument("name", help="the topic's name")
    create.add_argument("--partitions", type=int, default=1, help="how many partitions (default 1)")
    create.add_argument(
        "--config", action="append", metavar="KEY=VALUE", help="topic config, Kafka names (repeatable)"
    )
    listing = subparser(actions, "list", help="list topics")
    describe = subparser(actions, "describe", help="partitions, offsets, sizes and config")
    describe.add_argument("name", nargs="?", help="one topic (default: every topic)")
    for p in (listing, describe):
        p.add_argument(
            "--include-internal", action="store_true", help="also internal topics (__consumer_offsets)"
        )
    delete = subparser(actions, "delete", help="delete a topic and its data")
    delete.add_argument("name", help="the topic to delete")
    alter = subparser(actions, "alter", help="change config or add partitions")
    alter.add_argument("name", help="the topic to change")
    alter.add_argument(
        "--config", action="append", metavar="KEY=VALUE", help="set a topic config, Kafka names (repeatable)"
    )
    alter.add_argument(
        "--delete-config", action="append", metavar="KEY", help="back to the default (repeatable)"
    )
    alter.add_argument("--partitions", type=int, help="new (larger) partition count")
    topics.set_defaults(run=_topics)

    init = subparser(sub, "init", help="create a data directory (or --adopt a Kafka broker's log directory)")
    init.add_argument("dir", nargs="?", help="the directory (default: --data-dir / $KAFKALITE_DATA_DIR)")
    init.add_argument(
        "--adopt",
        action="store_true",
        help="take over a broker's log directory: kafkalite owns its topics afterwards",
    )
    init.add_argument(
        "--config",
        action="append",
        metavar="KEY=VALUE",
        help="data directory config, Kafka broker names (repeatable)",
    )
    init.set_defaults(run=_init)

    config = subparser(
        sub, "config", help="the data directory's config (auto.create.topics.enable, num.partitions, log.*)"
    )
    config_actions = config.add_subparsers(dest="action", required=True)
    subparser(config_actions, "describe", help="every setting, defaults included")
    alter_dir = subparser(config_actions, "alter", help="set or reset settings")
    alter_dir.add_argument(
        "--add-config", action="append", metavar="KEY=VALUE", help="Kafka broker config name (repeatable)"
    )
    alter_dir.add_argument("--delete-config", action="append", metavar="KEY", help="back to Kafka's default")
    config.set_defaults(run=_config)
