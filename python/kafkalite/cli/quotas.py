"""``kafkalite quotas describe|alter``: the client quotas ``kafkalite serve`` enforces, on a data
directory (what ``kafka-configs --entity-type users|clients|ips --describe|--alter`` does for a Kafka
cluster; that tool works on a running ``kafkalite serve`` too)."""

from __future__ import annotations

import argparse
import sys

from kafkalite import quotas


def _entity_options(parser: argparse.ArgumentParser) -> None:
    user = parser.add_mutually_exclusive_group()
    user.add_argument("--user", help="a user (its principal's name, e.g. alice for User:alice)")
    user.add_argument("--user-default", action="store_true", help="the default user")
    client = parser.add_mutually_exclusive_group()
    client.add_argument("--client-id", help="a client id")
    client.add_argument("--client-id-default", action="store_true", help="the default client id")
    ip = parser.add_mutually_exclusive_group()
    ip.add_argument("--ip", help="an address (its quota: connection_creation_rate, connections per second)")
    ip.add_argument("--ip-default", action="store_true", help="the default address")


def add_parser(sub: argparse._SubParsersAction, require_dir, subparser) -> None:  # type: ignore[type-arg]
    """`subparser(parent, name, **kw)` adds a subcommand that also takes --data-dir (cli/args.py)."""
    parser = subparser(sub, "quotas", help="describe, alter the client quotas `kafkalite serve` enforces")
    actions = parser.add_subparsers(dest="action", required=True)
    describe = subparser(actions, "describe", help="entities and their quotas (optionally of one entity)")
    _entity_options(describe)
    alter = subparser(actions, "alter", help="set or remove quotas of one entity")
    _entity_options(alter)
    alter.add_argument(
        "--add-config",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE]",
        help=f"quotas to set ({', '.join(quotas.KEYS)}): byte rates in bytes per second, "
        "request_percentage in percent of one request worker's time; of an ip, "
        f"connections per second ({', '.join(quotas.IP_KEYS)})",
    )
    alter.add_argument(
        "--delete-config", action="append", default=[], metavar="KEY[,KEY]", help="quotas to remove"
    )
    parser.set_defaults(run=lambda args: run(args, require_dir(args)))


def _entity(args: argparse.Namespace) -> dict[str, str | None]:
    entity: dict[str, str | None] = {}
    if args.user is not None or args.user_default:
        entity["user"] = args.user
    if args.client_id is not None or args.client_id_default:
        entity["client-id"] = args.client_id
    if args.ip is not None or args.ip_default:
        entity["ip"] = args.ip
    return entity


def _show(entity: dict[str, str | None]) -> str:
    return ", ".join(f"{kind} {'<default>' if name is None else repr(name)}" for kind, name in entity.items())


def _number(value: float) -> str:
    """A byte rate as the long it is, a percentage as given (12.5)."""
    return f"{value:.0f}" if value.is_integer() else repr(value)


def run(args: argparse.Namespace, data_dir: str) -> int:
    from kafkalite.datadir import DataDir

    DataDir(data_dir, create=False)
    entity = _entity(args)
    if args.action == "describe":
        for listed, values in quotas.describe_quotas(data_dir):
            if entity and listed != entity:
                continue
            shown = ",".join(f"{k}={_number(v)}" for k, v in sorted(values.items()))
            print(f"{_show(listed)}\t{shown}")
        return 0
    if not entity:
        raise SystemExit(
            "kafkalite: name the entity: --user NAME|--user-default and/or --client-id NAME|--client-id-default, "
            "or --ip ADDRESS|--ip-default"
        )
    changes: dict[str, float | None] = {}
    for pairs in args.add_config:
        for pair in pairs.split(","):
            key, _, value = pair.partition("=")
            try:
                changes[key.strip()] = float(value)
            except ValueError:
                raise SystemExit(
                    f"kafkalite: --add-config takes KEY=VALUE (a number), got {pair!r}"
                ) from None
    for keys in args.delete_config:
        changes.update({key.strip(): None for key in keys.split(",")})
    if not changes:
        raise SystemExit("kafkalite: give --add-config KEY=VALUE or --delete-config KEY")
    quotas.alter_quotas(data_dir, entity, changes)
    print(f"kafkalite: quotas of {_show(entity)} altered", file=sys.stderr)
    return 0
