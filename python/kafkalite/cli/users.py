"""``kafkalite users add|list|delete``: the SASL/SCRAM users ``kafkalite serve`` accepts (what
``kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users`` does
for a Kafka cluster)."""

from __future__ import annotations

import argparse
import getpass
import sys

from kafkalite import users


def add_parser(sub: argparse._SubParsersAction, require_dir, subparser) -> None:  # type: ignore[type-arg]
    """`subparser(parent, name, **kw)` adds a subcommand that also takes --data-dir (cli/args.py)."""
    parser = subparser(sub, "users", help="add, list, delete the SASL/SCRAM users `kafkalite serve` accepts")
    actions = parser.add_subparsers(dest="action", required=True)
    add = subparser(actions, "add", help="add a user, or change its password")
    add.add_argument("name", help="the user name clients authenticate as")
    add.add_argument(
        "--mechanism",
        action="append",
        choices=users.MECHANISMS,
        help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default: both)",
    )
    add.add_argument(
        "--iterations",
        type=int,
        default=users.DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations, 4096 to 16384 (default {users.DEFAULT_ITERATIONS})",
    )
    add.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of standard input (default: prompt)",
    )
    subparser(actions, "list", help="users and their mechanisms")
    delete = subparser(actions, "delete", help="remove a user")
    delete.add_argument("name", help="the user to remove")
    parser.set_defaults(run=lambda args: run(args, require_dir(args)))


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif not sys.stdin.isatty():
        raise SystemExit("kafkalite: no terminal to ask for the password on; use --password-stdin")
    else:
        password = getpass.getpass(f"Password for {args.name}: ")
        if getpass.getpass("Again: ") != password:
            raise SystemExit("kafkalite: the passwords differ; nothing changed")
    if not password:
        raise SystemExit("kafkalite: the password is empty; nothing changed")
    return password


def run(args: argparse.Namespace, data_dir: str) -> int:
    from kafkalite.datadir import DataDir

    # Users belong to an existing data directory: a typo creates nothing (NotADataDirError
    # names `kafkalite init`, the command that creates one).
    DataDir(data_dir, create=False)
    if args.action == "add":
        mechanisms = args.mechanism or users.MECHANISMS
        users.add_user(data_dir, args.name, _password(args), mechanisms, args.iterations)
        print(f"kafkalite: user {args.name!r} can authenticate with {', '.join(mechanisms)}", file=sys.stderr)
    elif args.action == "list":
        listed = users.list_users(data_dir)
        if not listed:
            print("kafkalite: no users (add one with `kafkalite users add NAME`)", file=sys.stderr)
        for name, creds in listed.items():
            shown = ", ".join(f"{m} (iterations={i})" for m, i in creds.items())
            print(f"{name}\t{shown}")
    elif users.delete_user(data_dir, args.name):
        print(f"kafkalite: user {args.name!r} deleted", file=sys.stderr)
    else:
        print(f"kafkalite: no user {args.name!r}", file=sys.stderr)
        return 1
    return 0
