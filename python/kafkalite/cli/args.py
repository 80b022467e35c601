"""What the ``kafkalite`` commands share: the data directory option and its check, ``--config
KEY=VALUE`` pairs, and argparse types."""

import argparse
from typing import Any


def data_dir_option(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument("--data-dir", default=default, help="data directory (default: $KAFKALITE_DATA_DIR)")


def subparser(sub: argparse._SubParsersAction, name: str, **kw: Any) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """A subcommand that also takes --data-dir after its name (`kafkalite topics list --data-dir d`)."""
    parser = sub.add_parser(name, **kw)
    data_dir_option(parser, argparse.SUPPRESS)
    return parser


def require_dir(args: argparse.Namespace) -> str:
    if not args.data_dir:
        raise SystemExit("kafkalite: give --data-dir DIR or set KAFKALITE_DATA_DIR")
    return args.data_dir


def parse_config(pairs: list[str] | None) -> dict[str, str]:
    config = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"kafkalite: --config takes key=value, got {pair!r}")
        config[key] = value
    return config


def positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
