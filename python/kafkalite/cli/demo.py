"""``kafkalite demo``: the README's quick start, an embedded stream appended and read back with
its throughput, in a temporary data directory."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING, Any

from kafkalite.cli.args import positive
from kafkalite.cli.progress import progress

if TYPE_CHECKING:
    pass


def _demo(args: argparse.Namespace) -> int:
    """Produce a stream into an embedded data directory and consume it back, with throughput."""
    from rich.console import Console

    # soft_wrap: piped output (80 columns) must not break the commands it suggests across lines.
    console = Console(soft_wrap=True)
    # Its own directory, never the user's (--data-dir / $KAFKALITE_DATA_DIR): the demo writes
    # millions of records and removes what it wrote unless --keep.
    data_dir = tempfile.mkdtemp(prefix="kafkalite-demo-")
    try:
        return _run_demo(console, data_dir, args.records)
    finally:
        if args.keep:
            console.print(
                f"kept the demo's data in [cyan]{data_dir}[/] (try: kafkalite --data-dir {data_dir} topics describe)"
            )
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
            console.print(f"removed the demo's data directory {data_dir} (run with --keep to look at it)")


def _run_demo(console: Any, data_dir: str, total: int) -> int:
    from kafkalite.admin import Admin
    from kafkalite.consumer import Consumer
    from kafkalite.producer import Producer

    admin = Admin(data_dir)
    topic = f"demo-{int(time.time())}"
    admin.create_topic(topic, partitions=3)
    per_call = 10_000
    console.print(
        f"[bold]kafkalite demo[/]: topic [cyan]{topic}[/] (3 partitions) in [cyan]{data_dir}[/], no broker"
    )

    with Producer(data_dir, batch_size=1 << 20, linger_ms=5) as producer:
        keyed = min(total, 200_000)
        began = time.perf_counter()
        with progress("send", total=keyed) as advance:
            for i in range(keyed):
                producer.send(topic, b"event-%d" % i, key=b"user-%d" % (i % 1000))
                if i % 1000 == 999:
                    advance(1000)
            producer.flush()
        send_s = time.perf_counter() - began
        console.print(
            f"send():     {keyed:>10,} keyed records in {send_s:.2f} s = [green]{keyed / send_s:,.0f} records/s[/]"
        )
        bulk = total - keyed
        values = [b"x" * 100] * per_call
        began = time.perf_counter()
        with progress("send_batch", total=bulk) as advance:
            done = 0
            while done < bulk:
                n = min(per_call, bulk - done)
                producer.send_batch(topic, values[:n], partition=done // per_call % 3)
                done += n
                advance(n)
        bulk_s = time.perf_counter() - began
        if bulk:
            console.print(
                f"send_batch: {bulk:>10,} records of 100 B in {bulk_s:.2f} s = [green]{bulk / bulk_s:,.0f} records/s[/], {bulk * 100 / bulk_s / 1e6:,.0f} MB/s"
            )

    from rich.markup import escape

    with Consumer(data_dir, topic, group_id="demo", auto_offset_reset="earliest") as consumer:
        began = time.perf_counter()
        first = consumer.poll(max_records=5)
        rows = sum(len(v) for v in first.values())
        try:
            import pyarrow  # noqa: F401  (the Arrow bulk path is the extra kafkalite[arrow])

            have_arrow, bulk_path = True, "poll + Arrow bulk path"
        except ImportError:
            have_arrow, bulk_path = False, "poll; pip install 'kafkalite[arrow]' for the Arrow bulk path"
        with progress("consume", total=total) as advance:
            advance(rows)
            while True:
                if have_arrow:
                    counts = [b.num_rows for b in consumer.poll_arrow().values()]
                else:
                    counts = [len(rs) for rs in consumer.poll(max_records=65536).values()]
                if not counts:
                    break
                rows += sum(counts)
                advance(sum(counts))
        read_s = time.perf_counter() - began
        sample = next(iter(first.values()))[0]
        console.print(
            f"consumed:   {rows:>10,} records in {read_s:.2f} s = [green]{rows / read_s:,.0f} records/s[/] ({escape(bulk_path)})"
        )
        console.print(
            f"first record: partition {sample.partition}, offset {sample.offset}, key {sample.key!r}, value {sample.value!r}"
        )
        consumer.commit()
    for p in admin.describe_topic(topic).partitions:
        console.print(
            f"  {topic}-{p.partition}: offsets [{p.start_offset}, {p.end_offset}), {p.size_bytes:,} bytes in {p.segments} segment(s)"
        )
    files = sorted(os.listdir(os.path.join(data_dir, f"{topic}-0")))
    console.print(
        "Kafka-format files in partition 0: " + ", ".join(f for f in files if not f.startswith("."))
    )
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    demo = sub.add_parser(
        "demo", help="append and read back a stream in a temporary data directory, with throughput"
    )
    demo.add_argument(
        "--records",
        type=positive,
        default=2_000_000,
        help="records to append, at least 1 (default 2,000,000)",
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep the demo's data directory (default: removed at the end)"
    )
    demo.set_defaults(run=_demo)
