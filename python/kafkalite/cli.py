"""The ``kafkalite`` command line. This first version has ``demo`` (the README's quick
start) and ``dump-log`` (like kafka-dump-log); topics, produce and consume come with the
client API."""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time

from kafkalite.log import Log


def _demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    console = Console()
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="kafkalite-demo-")
    path = os.path.join(data_dir, "events-0")
    total, per_batch = args.records, 1000
    payload = [b"x" * 100] * per_batch
    console.print(f"[bold]kafkalite demo[/]: {total:,} records of 100 bytes into [cyan]{path}[/]")
    with Log(path, segment_bytes=64 << 20) as log:
        start_offset = log.end_offset
        began = time.perf_counter()
        with Progress(transient=True, console=console) as progress:
            task = progress.add_task("appending", total=total)
            for done in range(0, total, per_batch):
                log.append_values(payload[: min(per_batch, total - done)])
                progress.advance(task, min(per_batch, total - done))
        write_s = time.perf_counter() - began
        began = time.perf_counter()
        rows = 0
        position = start_offset
        while position < log.end_offset:
            batch = log.read_arrow(position, max_records=65536)
            rows += batch.num_rows
            position += batch.num_rows
        read_s = time.perf_counter() - began
        segments = log.segments
        console.print(f"appended {total:,} records in {write_s:.2f} s: [green]{total / write_s:,.0f} records/s[/], {total * 100 / write_s / 1e6:,.0f} MB/s of values")
        console.print(f"read them back as Arrow in {read_s:.2f} s: [green]{rows / read_s:,.0f} records/s[/]")
        console.print(f"log offsets [{log.start_offset}, {log.end_offset}) in {len(segments)} segment(s), {sum(s.size for s in segments):,} bytes")
    files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(path, "0*")))
    console.print("Kafka-format files: " + ", ".join(files))
    return 0


def _dump_log(args: argparse.Namespace) -> int:
    """Batches of one partition directory: offsets, timestamps, sizes, CRC check."""
    log = Log(args.partition, readonly=True)
    from kafkalite import CorruptRecordError

    print(f"log start offset {log.start_offset}, log end offset {log.end_offset}")
    for seg in log.segments:
        print(f"segment {seg.base_offset:020d}.log: offsets [{seg.base_offset}, {seg.next_offset}), {seg.size} bytes, max timestamp {seg.max_timestamp}")
    position = log.start_offset
    try:
        while position < log.end_offset:
            batch = log.read_arrow(position, max_records=args.max_records)
            if batch.num_rows == 0:
                break
            offsets = batch.column("offset")
            print(f"records {offsets[0]}..{offsets[-1]}: {batch.num_rows} records, CRC ok")
            position = offsets[-1].as_py() + 1
    except CorruptRecordError as e:
        print(f"CORRUPT: {e}", file=sys.stderr)
        return 1
    finally:
        log.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafkalite", description="Kafka's commit log, embedded.")
    parser.add_argument("--data-dir", default=os.environ.get("KAFKALITE_DATA_DIR"), help="data directory (default: $KAFKALITE_DATA_DIR, or a temporary one for the demo)")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="append and read back a stream on an embedded data directory, with throughput")
    demo.add_argument("--records", type=int, default=2_000_000, help="records to append (default 2,000,000)")
    demo.set_defaults(run=_demo)
    dump = sub.add_parser("dump-log", help="list the batches of a partition directory and check their CRCs")
    dump.add_argument("partition", help="a <topic>-<partition> directory")
    dump.add_argument("--max-records", type=int, default=100_000)
    dump.set_defaults(run=_dump_log)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
