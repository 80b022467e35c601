"""``kafkalite dump-log``: the batches of one partition directory with CRC and index checks
(kafka-dump-log)."""

from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import TYPE_CHECKING

from kafkalite import _native
from kafkalite.cli.progress import progress

if TYPE_CHECKING:
    pass


def _dump_log(args: argparse.Namespace) -> int:
    """Batches of one partition directory with CRC checks, and index sanity (kafka-dump-log)."""
    from kafkalite.dump import dump_partition

    folder = os.path.basename(os.path.normpath(args.partition))
    if not os.path.isdir(args.partition) or _native.partition_folder(folder) is None:
        raise SystemExit(
            f"kafkalite: {args.partition} is not a partition directory (a <topic>-<partition> folder)"
        )
    if not glob.glob(os.path.join(glob.escape(args.partition), "*.log")):
        raise SystemExit(
            f"kafkalite: {args.partition} holds no .log segment, so it is not a partition directory"
        )
    segments = glob.glob(os.path.join(glob.escape(args.partition), "*.log"))
    with progress("dump-log", total=sum(os.path.getsize(f) for f in segments), in_bytes=True) as advance:
        problems = dump_partition(
            args.partition,
            sys.stdout,  # rich's proxy within the block when stdout is the terminal
            print_batches=not args.summary,
            on_segment=lambda path: advance(os.path.getsize(path)),
        )
    print(f"{problems} problem(s) found", file=sys.stderr)
    return 1 if problems else 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    dump = sub.add_parser("dump-log", help="list the batches of a partition directory and check their CRCs")
    dump.add_argument("partition", help="a <topic>-<partition> directory")
    dump.add_argument(
        "--summary", action="store_true", help="only the index checks and problems, not every batch"
    )
    dump.set_defaults(run=_dump_log)
