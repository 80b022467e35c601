"""The ``kafkalite`` command line, shaped like Kafka's console tools: ``topics`` (like
kafka-topics), ``produce`` / ``consume`` (kafka-console-producer / -consumer), ``dump-log``
(kafka-dump-log) and ``demo`` (the README's quick start). The data directory comes from
``--data-dir`` or ``$KAFKALITE_DATA_DIR``."""

from __future__ import annotations

import argparse
import collections
import os
import sys
from typing import TYPE_CHECKING

from kafkalite.cli.args import data_dir_option, require_dir, subparser

if TYPE_CHECKING:
    pass


#: The command line's rendering of the fixes errors name in API terms (``KafkaliteError.action``);
#: ``{name}`` takes the error's ``action_args``, "..." standing in for one it lacks.
_CLI_ACTIONS = {
    "Admin.init": "kafkalite init {path}",
    "Admin.create_topic": "kafkalite topics create {topic}",
    "Admin.delete_topic": "kafkalite topics delete {topic}",
    "Admin.create_partitions": "kafkalite topics alter {topic} --partitions ...",
    "Admin.alter_config": "kafkalite topics alter {topic} --config ...",
    "Admin.alter_data_dir_config": "kafkalite config alter --add-config ...",
    "Admin.list_groups": "kafkalite groups list",
    "Admin.delete_group": "kafkalite groups delete {group}",
    "Admin.reset_offsets": "kafkalite groups reset-offsets {group}",
}


def _cli_action(action: str, args: dict[str, str]) -> str:
    template = _CLI_ACTIONS.get(action)
    if template is None:  # an API call without a command of its own: name the call
        return f"{action}(...)"
    return template.format_map(collections.defaultdict(lambda: "...", args))


def build_parser() -> argparse.ArgumentParser:
    """Every command and option (each with its help text). Each command family is a module of
    its own (``cli/<family>.py``), registered here in the order ``kafkalite --help`` lists them."""
    from kafkalite import __version__
    from kafkalite.cli import (
        console,
        demo,
        dump,
        groups,
        quotas,
        serve,
        topics,
        transactions,
        users,
    )

    parser = argparse.ArgumentParser(prog="kafkalite", description="Kafka's commit log, embedded.")
    parser.add_argument("--version", action="version", version=f"kafkalite {__version__}")
    data_dir_option(parser, os.environ.get("KAFKALITE_DATA_DIR"))
    sub = parser.add_subparsers(dest="command", required=True)
    topics.add_parser(sub)
    console.add_parser(sub)
    groups.add_parser(sub, require_dir, subparser)
    transactions.add_parser(sub, require_dir, subparser)
    users.add_parser(sub, require_dir, subparser)
    quotas.add_parser(sub, require_dir, subparser)
    serve.add_parser(sub)
    demo.add_parser(sub)
    dump.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from kafkalite.errors import KafkaliteError

    try:
        return args.run(args)
    except KafkaliteError as e:
        print(f"kafkalite: {e.message_for(_cli_action)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head` and closed early
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:  # Ctrl-C: the command already said what it did; no traceback
        return 130
    except OSError as e:  # the file system's answer, in one line: what failed and on which path
        where = f": {e.filename}" if e.filename else ""
        print(f"kafkalite: {e.strerror or e}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
