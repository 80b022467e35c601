"""The ``kafkalite`` command line, shaped like Kafka's console tools: ``topics`` (like
kafka-topics), ``produce`` / ``consume`` (kafka-console-producer / -consumer), ``dump-log``
(kafka-dump-log) and ``demo`` (the README's quick start). The data directory comes from
``--data-dir`` or ``$KAFKALITE_DATA_DIR``."""

from __future__ import annotations

import argparse
import collections
import glob
import os
import shutil
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Any

from kafkalite import _native
from kafkalite.cli_progress import progress, quiet
from kafkalite.errors import InvalidRecordError, RecordTooLargeError

if TYPE_CHECKING:
    from kafkalite.server import TLS


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


def _require_dir(args: argparse.Namespace) -> str:
    if not args.data_dir:
        raise SystemExit("kafkalite: give --data-dir DIR or set KAFKALITE_DATA_DIR")
    return args.data_dir


def _parse_config(pairs: list[str] | None) -> dict[str, str]:
    config = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"kafkalite: --config takes key=value, got {pair!r}")
        config[key] = value
    return config


def _shown_topics(admin: Any, args: argparse.Namespace) -> list[str]:
    """Topics to list: internal ones (``__consumer_offsets``) only with --include-internal."""
    return [t for t in admin.list_topics() if args.include_internal or not t.startswith("__")]


def _topics(args: argparse.Namespace) -> int:
    from kafkalite.admin import Admin

    admin = Admin(_require_dir(args))
    if args.action == "create":
        admin.create_topic(args.name, partitions=args.partitions, config=_parse_config(args.config))
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
        changes: dict[str, object] = dict(_parse_config(args.config))
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

    path = args.dir or _require_dir(args)
    admin = Admin(path)
    if args.adopt:
        if admin._dir.managed:
            print(f"{admin.path} is already a kafkalite data directory; nothing to adopt.")
        else:
            topics = admin.adopt_broker_dir()
            print(
                f"Adopted {admin.path}: kafkalite now owns its {len(topics)} topic(s) {', '.join(topics)}. No broker may use it any more."
            )
    if admin.init(config=_parse_config(args.config)) and not args.adopt:
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

    admin = Admin(_require_dir(args))
    if args.action == "alter":
        changes: dict[str, object] = dict(_parse_config(args.add_config))
        changes.update({k: None for k in args.delete_config or []})
        if not changes:
            raise SystemExit("kafkalite: config alter needs --add-config KEY=VALUE or --delete-config KEY")
        admin.alter_data_dir_config(changes)
        print(f"Altered the config of {admin.path}.")
    else:
        for key, value in admin.describe_data_dir_config().items():
            print(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    return 0


def _produce(args: argparse.Namespace) -> int:
    """One record per input line. Counts only records the log acknowledged; any failure makes
    the exit status 1 with one line naming how many records failed and the first error."""
    import threading

    from kafkalite.producer import Producer

    sep = args.key_separator.encode() if args.key_separator else None
    data_dir = _require_dir(args)
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

    DataDir(_require_dir(args), create=False).topic(args.topic)  # an unknown topic is an error here
    consumer = Consumer(
        _require_dir(args),
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


def _serve(args: argparse.Namespace) -> int:
    """Serve the data directory over Kafka's wire protocol until Ctrl-C (or SIGTERM). The
    server's events (``kafkalite.server...`` loggers: connections at DEBUG, request errors at
    WARNING, group joins and rebalances at INFO) and the engine's go to stderr at
    ``--log-level``."""
    import logging
    import signal
    import threading

    from kafkalite.datadir import DataDir
    from kafkalite.server import Server

    # Serving creates no data directory: a typo is a NotADataDirError naming `kafkalite init`.
    DataDir(_require_dir(args), create=False)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    # SIGTERM (service managers, `kill`) stops as cleanly as Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Server(
        _require_dir(args),
        args.listen,
        advertised_listener=args.advertised_listener,
        sasl=args.sasl,
        tls=_serve_tls(args),
        allow_plaintext=args.allow_plaintext,
        metrics=args.metrics,
        acks_all=args.acks_all,
        max_open_partitions=args.max_open_partitions,
        group_consumer_session_timeout_ms=args.group_consumer_session_timeout_ms,
        authorizer=args.authorizer,
        super_users=[u for u in (args.super_users or "").split(";") if u],
        # Unset: the server's default (kafkalite.server.FETCH_MAX_BYTES).
        **({} if args.fetch_max_bytes is None else {"fetch_max_bytes": args.fetch_max_bytes}),
    ) as server:
        scrape = (
            f"; Prometheus metrics at http://{server.metrics_address}/metrics"
            if server.metrics_address
            else ""
        )
        limit = "unlimited" if server.open_file_limit is None else f"{server.open_file_limit:,}"
        print(
            f"kafkalite: serving {server.path} on {server.security_protocol}://{server.address} "
            f"(bootstrap.servers={server.bootstrap_servers}){scrape}; open-file limit {limit}, "
            f"up to {server.max_open_partitions:,} idle partitions kept open; Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    print("kafkalite: server stopped", file=sys.stderr, flush=True)
    return 0


def _serve_tls(args: argparse.Namespace) -> TLS | None:
    """``--tls-cert``/``--tls-key``/``--tls-client-ca`` as ``Server(tls=...)``; the certificate
    and key go together."""
    from kafkalite.errors import InvalidConfigError
    from kafkalite.server import TLS

    if args.tls_cert is None and args.tls_key is None:
        if args.tls_client_ca is not None:
            raise InvalidConfigError("--tls-client-ca needs --tls-cert and --tls-key (a TLS listener)")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise InvalidConfigError("TLS needs both --tls-cert PEM and --tls-key PEM")
    return TLS(cert=args.tls_cert, key=args.tls_key, client_ca=args.tls_client_ca)


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


def _data_dir_option(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument("--data-dir", default=default, help="data directory (default: $KAFKALITE_DATA_DIR)")


def _subparser(sub: argparse._SubParsersAction, name: str, **kw: Any) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """A subcommand that also takes --data-dir after its name (`kafkalite topics list --data-dir d`)."""
    parser = sub.add_parser(name, **kw)
    _data_dir_option(parser, argparse.SUPPRESS)
    return parser


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Every command and option (each with its help text)."""
    from kafkalite import __version__

    parser = argparse.ArgumentParser(prog="kafkalite", description="Kafka's commit log, embedded.")
    parser.add_argument("--version", action="version", version=f"kafkalite {__version__}")
    _data_dir_option(parser, os.environ.get("KAFKALITE_DATA_DIR"))
    sub = parser.add_subparsers(dest="command", required=True)

    topics = _subparser(sub, "topics", help="create, list, describe, delete and alter topics")
    actions = topics.add_subparsers(dest="action", required=True)
    create = _subparser(actions, "create", help="create a topic")
    create.add_argument("name", help="the topic's name")
    create.add_argument("--partitions", type=int, default=1, help="how many partitions (default 1)")
    create.add_argument(
        "--config", action="append", metavar="KEY=VALUE", help="topic config, Kafka names (repeatable)"
    )
    listing = _subparser(actions, "list", help="list topics")
    describe = _subparser(actions, "describe", help="partitions, offsets, sizes and config")
    describe.add_argument("name", nargs="?", help="one topic (default: every topic)")
    for p in (listing, describe):
        p.add_argument(
            "--include-internal", action="store_true", help="also internal topics (__consumer_offsets)"
        )
    delete = _subparser(actions, "delete", help="delete a topic and its data")
    delete.add_argument("name", help="the topic to delete")
    alter = _subparser(actions, "alter", help="change config or add partitions")
    alter.add_argument("name", help="the topic to change")
    alter.add_argument(
        "--config", action="append", metavar="KEY=VALUE", help="set a topic config, Kafka names (repeatable)"
    )
    alter.add_argument(
        "--delete-config", action="append", metavar="KEY", help="back to the default (repeatable)"
    )
    alter.add_argument("--partitions", type=int, help="new (larger) partition count")
    topics.set_defaults(run=_topics)

    init = _subparser(sub, "init", help="create a data directory (or --adopt a Kafka broker's log directory)")
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

    config = _subparser(
        sub, "config", help="the data directory's config (auto.create.topics.enable, num.partitions, log.*)"
    )
    config_actions = config.add_subparsers(dest="action", required=True)
    _subparser(config_actions, "describe", help="every setting, defaults included")
    alter_dir = _subparser(config_actions, "alter", help="set or reset settings")
    alter_dir.add_argument(
        "--add-config", action="append", metavar="KEY=VALUE", help="Kafka broker config name (repeatable)"
    )
    alter_dir.add_argument("--delete-config", action="append", metavar="KEY", help="back to Kafka's default")
    config.set_defaults(run=_config)

    produce = _subparser(
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

    consume = _subparser(
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

    from kafkalite import cli_groups

    cli_groups.add_parser(sub, _require_dir, _subparser)

    from kafkalite import cli_transactions

    cli_transactions.add_parser(sub, _require_dir, _subparser)

    from kafkalite import cli_users

    cli_users.add_parser(sub, _require_dir, _subparser)

    serve = _subparser(sub, "serve", help="serve the data directory over Kafka's wire protocol")
    serve.add_argument(
        "--listen",
        default="127.0.0.1:9092",
        help="HOST:PORT to listen on (default 127.0.0.1:9092); anything but loopback requires TLS "
        "(--tls-cert, --tls-key) and authenticated clients: SASL/SCRAM as a user (`kafkalite users add "
        "NAME`), or certificates (--tls-client-ca)",
    )
    serve.add_argument(
        "--sasl",
        action="store_true",
        help="require SASL/SCRAM (SASL_PLAINTEXT, or SASL_SSL with TLS) on a loopback listener too",
    )
    serve.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="the server's TLS certificate (then any intermediates), PEM: the listener is SSL, or "
        "SASL_SSL with SASL",
    )
    serve.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert, PEM, unencrypted")
    serve.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="CA certificates, PEM: every client must present a certificate they signed (Kafka's "
        "ssl.client.auth=required), and is then the principal User:<subject DN>",
    )
    serve.add_argument(
        "--allow-plaintext",
        action="store_true",
        help="listen beyond loopback without TLS (SASL_PLAINTEXT): records cross the network in clear",
    )
    serve.add_argument(
        "--advertised-listener",
        metavar="HOST:PORT",
        help="the address clients are told to connect to (default: --listen; required with 0.0.0.0)",
    )
    serve.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics (requests by API and error code, bytes in and out, partitions, "
        "groups, consumer lag) over HTTP at HOST:PORT",
    )
    serve.add_argument(
        "--fetch-max-bytes",
        type=int,
        metavar="BYTES",
        help="Kafka's fetch.max.bytes: the most record bytes in one Fetch response, whatever the "
        "request asks (default 57671680 = 55 MiB, at least 1024)",
    )
    serve.add_argument(
        "--acks-all",
        choices=["disk", "page-cache"],
        default="disk",
        help="when a Produce with acks=all is answered: disk (default) once synced to this host's disk, "
        "as the embedded acks='all'; page-cache once in the page cache, as a Kafka broker (acks=1 is "
        "always answered at the page cache)",
    )
    serve.add_argument(
        "--max-open-partitions",
        type=int,
        metavar="N",
        help="the most partitions kept open while no request uses them (each holds about 3 file "
        "descriptors; the least recently used is closed and reopened when needed); default: a share "
        "of the open-file limit, which the server raises to its hard limit (ulimit -Hn) at start",
    )
    serve.add_argument(
        "--group-consumer-session-timeout-ms",
        type=int,
        default=45_000,
        metavar="MS",
        help="Kafka's group.consumer.session.timeout.ms: a consumer-protocol (group.protocol=consumer) "
        "member without a heartbeat for this long is removed and its partitions reassigned (default: 45000)",
    )
    serve.add_argument(
        "--authorizer",
        action="store_true",
        help="enforce the ACLs (kafka-acls) on every request, even with none (then only --super-users "
        "may do anything); without it they are enforced never on a loopback listener and, on any "
        "other, as soon as one ACL exists",
    )
    serve.add_argument(
        "--super-users",
        metavar="PRINCIPALS",
        help="Kafka's super.users: principals the ACLs never restrict, separated by ';' "
        "(e.g. 'User:admin;User:ops')",
    )
    serve.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="what the server logs to stderr (default INFO: group joins and rebalances, request "
        "errors; DEBUG adds every connection opened and closed)",
    )
    serve.set_defaults(run=_serve)

    demo = sub.add_parser(
        "demo", help="append and read back a stream in a temporary data directory, with throughput"
    )
    demo.add_argument(
        "--records",
        type=_positive,
        default=2_000_000,
        help="records to append, at least 1 (default 2,000,000)",
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep the demo's data directory (default: removed at the end)"
    )
    demo.set_defaults(run=_demo)
    dump = sub.add_parser("dump-log", help="list the batches of a partition directory and check their CRCs")
    dump.add_argument("partition", help="a <topic>-<partition> directory")
    dump.add_argument(
        "--summary", action="store_true", help="only the index checks and problems, not every batch"
    )
    dump.set_defaults(run=_dump_log)
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
