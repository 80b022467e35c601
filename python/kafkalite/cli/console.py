"""``kafkalite produce`` and ``consume``: records from and to text lines (kafka-console-producer
and kafka-console-consumer)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from kafkalite import _native
from kafkalite.cli.args import require_dir, subparser
from kafkalite.cli.progress import progress, quiet
from kafkalite.errors import InvalidRecordError, RecordTooLargeError

if TYPE_CHECKING:
    pass


def _produce(args: argparse.Namespace) -> int:
    """One record per input line. Counts only records the log acknowledged; any failure makes
    the exit status 1 with one line naming how many records failed and the first error."""
    import threading

    from kafkalite.producer import Producer

    sep = args.key_separator.encode() if args.key_separator else None
    data_dir = require_dir(args)
    if args.partition is not None:
        _check_partition(data_dir, args.topic, args.partition)
    source = open(args.file, "rb") if args.file else sys.stdin.buffer
    total = os.path.getsize(args.file) if args.file else None
    sent = 0
    outcome = {"written": 0, "failed": 0}
    errors: list[BaseException] = []
    tally = threading.Lock()

    def written(_metadata: object) -> None:
        with tally:
            outcome["written"] += 1

    def failed(error: BaseException) -> None:
        with tally:
            outcome["failed"] += 1
            if not errors:
                errors.append(error)

    # Outside the try: a refused setting or data directory produced nothing to report.
    producer = Producer(
        data_dir,
        acks=args.acks,
        linger_ms=5,
        batch_size=256 * 1024,
        compression_type=args.compression_type,
    )
    try:
        # stdin gets no progress: a terminal's lines are being typed, a pipe's total is unknown.
        with (
            producer,
            progress("produce", total=total, in_bytes=True) if total is not None else quiet() as advance,
        ):
            for line in source:
                advance(len(line))
                line = line.rstrip(b"\n")
                key = None
                if sep is not None:
                    key, found, value = line.partition(sep)
                    if not found:
                        raise SystemExit(
                            f"kafkalite: line {sent + 1} has no key separator {args.key_separator!r}"
                        )
                else:
                    value = line
                try:
                    future = producer.send(args.topic, value, key=key, partition=args.partition)
                except (RecordTooLargeError, InvalidRecordError) as e:  # this record alone: count it, go on
                    failed(e)
                else:
                    future.add_callback(written).add_errback(failed)
                sent += 1
    finally:
        print(f"Produced {outcome['written']} records to {args.topic}.", file=sys.stderr)
    if outcome["failed"]:
        print(
            f"kafkalite: {outcome['failed']} of {sent} records were not written: {errors[0]}", file=sys.stderr
        )
        return 1
    return 0


def _check_partition(data_dir: str, topic: str, partition: int) -> None:
    """Refuse a partition the topic lacks, or would lack once auto-created, before the first
    write creates the topic (so a wrong --partition leaves nothing behind)."""
    from kafkalite.datadir import DataDir

    known = DataDir(data_dir, create=True)
    meta = known.topics().get(topic) if os.path.isdir(known.path) else None
    count = int(meta["partitions"]) if meta else int(known.dir_config()["num.partitions"])
    if not 0 <= partition < count:
        what = (
            f"topic {topic!r} has" if meta else f"topic {topic!r} does not exist; created now, it would have"
        )
        raise SystemExit(f"kafkalite: {what} partitions 0..{count - 1}, so there is no partition {partition}")


def _consume(args: argparse.Namespace) -> int:
    import base64
    import json

    from kafkalite.consumer import Consumer, TopicPartition
    from kafkalite.datadir import DataDir

    DataDir(require_dir(args), create=False).topic(args.topic)  # an unknown topic is an error here
    consumer = Consumer(
        require_dir(args),
        group_id=args.group,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        enable_auto_commit=args.group is not None,
    )
    if args.partition is not None or args.offset is not None:
        parts = [TopicPartition(args.topic, args.partition or 0)]
        consumer.assign(parts)
    else:
        consumer.subscribe([args.topic])
    assigned = sorted(consumer.assignment())
    if args.offset is not None:
        for tp in assigned:
            consumer.seek(tp, args.offset)
    if args.timestamp is not None:
        found = consumer.offsets_for_times({tp: args.timestamp for tp in assigned})
        for tp in assigned:
            hit = found[tp]
            consumer.seek(tp, hit.offset if hit is not None else consumer.end_offsets([tp])[tp])
    out = sys.stdout.buffer
    shown = 0

    def text(b: bytes | None) -> str | None:
        if b is None:
            return None
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(b).decode()

    # As kafka-console-consumer: starting at the end means waiting for new records; reading
    # from the beginning (or an offset) stops at the end unless --follow. --timeout-ms stops
    # after that long without a record in either case.
    starts_at_end = not (args.from_beginning or args.offset is not None or args.timestamp is not None)
    follow = args.follow or starts_at_end
    last_record = time.monotonic()
    try:
        while args.max_messages is None or shown < args.max_messages:
            batches = consumer.poll(timeout_ms=500 if follow else 0)
            if batches:
                last_record = time.monotonic()
            elif not follow:
                break
            elif args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                break
            for records in batches.values():
                for r in records:
                    if args.max_messages is not None and shown >= args.max_messages:
                        break
                    if args.format == "json":
                        doc = {
                            "topic": r.topic,
                            "partition": r.partition,
                            "offset": r.offset,
                            "timestamp": r.timestamp,
                            "key": text(r.key),
                            "value": text(r.value),
                            "headers": [[k, text(v)] for k, v in r.headers],
                        }
                        out.write(json.dumps(doc).encode() + b"\n")
                    else:
                        out.write((r.value or b"") + b"\n")
                    shown += 1
            out.flush()
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    print(f"Processed a total of {shown} messages", file=sys.stderr)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    produce = subparser(
        sub,
        "produce",
        help="one record per input line (stdin or --file); creates a missing topic (auto.create.topics.enable)",
    )
    produce.add_argument("topic", help="the topic to write (created if missing)")
    produce.add_argument("--file", help="read lines from this file instead of stdin")
    produce.add_argument("--key-separator", help="split each line into key and value at this string")
    produce.add_argument(
        "--partition", type=int, help="write every record to this partition (default: by key)"
    )
    produce.add_argument(
        "--acks",
        default=1,
        choices=[0, 1, -1, "all"],
        type=lambda v: v if v == "all" else int(v) if v.lstrip("-").isdigit() else v,
        help="1 (default): acknowledged once in the log; all (or -1): once on disk; 0: not waited for",
    )
    produce.add_argument(
        "--compression-type",
        default="none",
        choices=_native.COMPRESSION_TYPES,
        help="the batches' codec, Kafka's compression.type (default none; a topic's own compression.type wins)",
    )
    produce.set_defaults(run=_produce)

    consume = subparser(
        sub,
        "consume",
        help="print records, one value per line: from the end it waits for new ones (Ctrl-C stops); "
        "--from-beginning, --offset and --timestamp stop at the end unless --follow",
    )
    consume.add_argument("topic", help="the topic to read")
    consume.add_argument(
        "--from-beginning", action="store_true", help="start at the earliest offset (default: latest)"
    )
    consume.add_argument("--offset", type=int, help="start at this offset (of --partition, default 0)")
    consume.add_argument("--partition", type=int, help="read only this partition (default: every partition)")
    consume.add_argument("--timestamp", type=int, help="start at the first record at or after this time (ms)")
    consume.add_argument("--max-messages", type=int, help="stop after this many records")
    consume.add_argument(
        "--follow",
        action="store_true",
        help="with --from-beginning/--offset/--timestamp: keep waiting for new records at the end",
    )
    consume.add_argument("--timeout-ms", type=int, help="stop after this long without a new record")
    consume.add_argument("--group", help="consumer group: start from and commit its offsets")
    consume.add_argument(
        "--format",
        choices=["value", "json"],
        default="value",
        help="value (default): the value alone; json: topic, partition, offset, timestamp, key, value, headers",
    )
    consume.set_defaults(run=_consume)
