"""`kafkalite serve` against Apache Kafka in one run (issue 13's benchmark): the same client,
confluent-kafka, with 8-byte keys and 100-byte values, against each server on 127.0.0.1.

    python benches/bench_server.py [--records N] [--rounds 1] [--out benches/results] [--replace]
    python benches/bench_server.py --only kafkalite [--records N]   # no broker, no results file
    python benches/bench_server.py --rows cpu_acks1 --rows cpu_acks_all ...   # those rows alone
    python benches/bench_server.py --baseline ../main/python --rounds 5 --rows cpu_acks_all ...  # A/B

Rows: time from starting the server process to the first acknowledged produce (Kafka's storage
format runs before the clock starts), produce throughput at acks=1 and acks=all (kafkalite serve's
acks=all twice: answered on disk, its default, and with ``--acks-all=page-cache``, a second server
process, where Kafka answers; beside each, the broker's acks=all of the same round), consume
throughput, produce->consume latency p50/p99 at a fixed rate (the consumer in another process),
the server process's CPU seconds per million records while Kafka's own ProducerPerformance
(Java client, 1,000,000 x 100 B by default, ``--pp-records``, one partition) writes at acks=1 and
at acks=all, each without and with a consumer tailing the topic (utime+stime of the server
process, ``python -m kafkalite serve`` / the broker's JVM, from /proc/<pid>/stat before and
after the run, the tail included), and the server process's peak resident memory (VmHWM) after
the rest. Kafka is one KRaft node
with default settings (tests/support/kafka_broker.py, jars from Maven Central; needs Java 17+ and mvn).
Every figure counts its records back (end offsets, records read) and stops the run if any are
missing. kafkalite serve's memory is also sampled every 20 ms, so the report says what its
peak was made of (anonymous memory, or mapped segment files) and in which row it came.
Results: ``server-<date>.json``, ``.md`` and ``.png`` (ratios) in --out, a new name unless
--replace; ``--only kafkalite`` runs that side alone (printed, not saved): a quick look at its
figures without the broker's start. A ratio above 1 means kafkalite serve is ahead; the targets (throughput >= the
broker's, p99 <= the broker's, start <= 0.2 s, RSS <= 100 MB) are marked met or not.

``--baseline DIR`` runs an A/B of two kafkalite builds instead: the other side is ``kafkalite serve``
imported from DIR (another checkout's ``python/``, e.g. the build before a change), the rounds
alternate which side goes first, and ``server-ab-<date>.md`` gives each side's median with its
spread over the rounds (the machine is shared: CPU seconds of the server process are the figure,
steadier than wall time under load), with the load average before and after."""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
# tests/support/: kafka_broker.py, serve_proc.py: what the tests start
sys.path.insert(0, str(HERE.parent / "tests" / "support"))

import confluent_kafka as ck  # noqa: E402
import kafka_broker  # noqa: E402
import kafkalite  # noqa: E402
import maven_jars  # noqa: E402
import peers_common as pc  # noqa: E402 (what bench_peers.py measures with too)
from report import write_report  # noqa: E402
from serve_proc import start_serve  # noqa: E402

KAFKALITE = "kafkalite serve"
KAFKA = f"Apache Kafka {kafka_broker.KAFKA_VERSION}"
#: ``--baseline``: kafkalite serve of the other build
BASELINE = "kafkalite serve (baseline)"


class Row(NamedTuple):
    label: str
    unit: str
    larger_is_better: bool
    #: issue 13's target: ("ratio", r) = at least r times the broker's figure (either direction),
    #: ("absolute", x) = at most x in ``unit``; None where the issue sets none
    target: tuple[str, float] | None


ROWS = {
    "start": Row("process start → first acknowledged produce", "s", False, ("absolute", 0.2)),
    "produce_acks1": Row("produce, acks=1", "rec/s", True, ("ratio", 1.0)),
    # kafkalite's default acks=all syncs to disk, the broker's answers at the page cache: no target
    "produce_acks_all": Row("produce, acks=all (kafkalite: disk)", "rec/s", True, None),
    "produce_acks_all_page_cache": Row(
        "produce, acks=all (kafkalite: `--acks-all=page-cache`)", "rec/s", True, ("ratio", 1.0)
    ),
    "consume": Row("consume (`consume(10000)`)", "rec/s", True, ("ratio", 1.0)),
    "latency_p50": Row("produce→consume p50 (2,000 rec/s)", "µs", False, None),
    "latency_p99": Row("produce→consume p99 (2,000 rec/s)", "µs", False, ("ratio", 1.0)),
    # issue 25: the server's CPU is its lead; these rows guard it (no target: a ratio to watch)
    "cpu_acks1": Row("server CPU per 1 M records, ProducerPerformance acks=1", "s", False, None),
    "cpu_acks_all": Row("server CPU per 1 M records, ProducerPerformance acks=all", "s", False, None),
    "cpu_acks1_tail": Row("server CPU per 1 M records, acks=1, a consumer tailing", "s", False, None),
    "cpu_acks_all_tail": Row("server CPU per 1 M records, acks=all, a consumer tailing", "s", False, None),
    "rss": Row("server peak RSS (VmHWM)", "MB", False, ("absolute", 100.0)),
}
#: a producer of a user who wants throughput: big batches, a callback only on failure
THROUGHPUT_PRODUCER = {"linger.ms": 5, "batch.size": 1 << 20}
#: linger.ms=1, not 0: bench_peers measured librdkafka at linger.ms=0 against Kafka at ~100 ms p50
#: (a request per record), which would make the comparison about that, not about the servers.
LATENCY_PRODUCER = {"linger.ms": 1, "acks": 1, "socket.nagle.disable": True}


def status_mb(pid: int) -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon and RssFile of a process, in MB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) / 1024
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far, in seconds (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def producer_performance(tools: Path, bootstrap: str, topic: str, records: int, acks: str) -> None:
    """Kafka's ProducerPerformance writing ``records`` 100-byte records to ``topic`` as fast as it
    can with ``acks``; stops the run unless it reports them all sent."""
    cmd = [
        "java", "-Xmx256m", "-cp", f"{tools}/*", "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic, "--num-records", str(records), "--record-size", "100", "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    found = pc.PP_LINE.findall(done.stdout)
    if done.returncode != 0 or not found:
        raise pc.Missing(
            f"ProducerPerformance to {bootstrap} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    pc.expect(int(found[-1][0]), records, f"ProducerPerformance acks={acks}, sent")


class Tail:
    """A confluent-kafka consumer reading ``topic``'s one partition from the start while it is
    written, on a thread, until it has read ``n`` records (or 15 minutes passed)."""

    def __init__(self, bootstrap: str, topic: str, n: int) -> None:
        self.n, self.got = n, 0
        self.consumer = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"tail-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
        self.consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        self.consumer.consume(1, timeout=1)  # connected and fetching before the producer starts
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + 900
        while self.got < self.n and time.monotonic() < deadline:
            for m in self.consumer.consume(10000, timeout=1):
                if m.error() is None:
                    self.got += 1

    def finish(self) -> int:
        """Wait until it read everything (or gave up); the records it read."""
        self.thread.join()
        self.consumer.close()
        return self.got


class PeakSampler:
    """Samples a process's status every 20 ms on a thread and keeps the sample with the largest
    VmRSS, with the row it came in: what the peak (VmHWM, which the kernel keeps) was made of."""

    def __init__(self, pid: int) -> None:
        self.pid, self.row = pid, "start"
        self.peak: dict[str, float | str] = {"VmRSS": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                sample: dict[str, float | str] = {**status_mb(self.pid), "row": self.row}
            except OSError:  # the process ended
                return
            if float(sample["VmRSS"]) > float(self.peak["VmRSS"]):
                self.peak = sample

    def stop(self) -> dict[str, float | str]:
        self._stop.set()
        self._thread.join()
        return self.peak


def first_ack(bootstrap: str, began: float) -> float:
    """Seconds from ``began`` until a produce to a new (auto-created) topic is acknowledged."""
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "reconnect.backoff.ms": 5,
            "reconnect.backoff.max.ms": 20,
            "log_level": 2,  # the first connection attempts may be refused: not news
        }
    )
    errors: list = []
    while True:
        errors.clear()
        producer.produce("first", b"x", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(30)
        if errors == [None]:
            return time.perf_counter() - began
        if time.perf_counter() - began > 120:
            raise pc.Missing(f"no acknowledged produce within 120 s: {errors}")


class Side(pc.KafkaEndpoint):
    """One server under test: its process, when it started, and the endpoint's client view;
    ``env``: the environment a kafkalite serve of it was started with (another build's)."""

    def __init__(
        self, name: str, bootstrap: str, pid: int, start_s: float, env: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(bootstrap)
        self.name, self.pid, self.start_s, self.env = name, pid, start_s, env


def serve_process(
    data: Path, *extra: str, env: Mapping[str, str] | None = None, log_level: str = "WARNING"
) -> tuple[subprocess.Popen, str]:
    """``python -m kafkalite serve`` over ``data`` in a child process, once it listens on a free
    loopback port: the process and its ``bootstrap.servers``. ``extra``: more CLI arguments;
    ``env``: the child's environment (another build's ``PYTHONPATH``); the benches' other
    server starts (bench_server_memory.py) come through here too."""
    return start_serve(
        lambda *a, **kw: subprocess.Popen([sys.executable, "-m", *a], env=env, **kw),
        data,
        *extra,
        "--log-level",
        log_level,
    )


def start_kafkalite(
    work: Path,
    name: str = "kafkalite",
    *extra: str,
    side: str = KAFKALITE,
    env: Mapping[str, str] | None = None,
) -> tuple[Side, subprocess.Popen]:
    """A kafkalite serve over ``work/name``: this checkout's, or the build ``env`` imports."""
    data = work / name
    data.mkdir()
    began = time.perf_counter()
    proc, bootstrap = serve_process(data, *extra, env=env)
    return Side(side, bootstrap, proc.pid, first_ack(bootstrap, began), env), proc


def baseline_env(python_dir: str) -> dict[str, str]:
    """The environment of a kafkalite serve imported from ``python_dir`` (``--baseline``)."""
    if not (Path(python_dir) / "kafkalite" / "__init__.py").is_file():
        raise SystemExit(f"--baseline {python_dir}: no kafkalite package there (give a checkout's python/)")
    return {**os.environ, "PYTHONPATH": str(Path(python_dir).resolve())}


def in_process_start(work: Path) -> float:
    """Seconds from ``kafkalite.Server(...)`` (what a test suite's fixture does, in its own
    process) to the first acknowledged produce: the start without the interpreter's."""
    began = time.perf_counter()
    with kafkalite.Server(work / "in-process") as server:
        return first_ack(server.bootstrap_servers, began)


def start_kafka(work: Path) -> tuple[Side, kafka_broker.KafkaBroker]:
    kafka_broker.ensure_jars()
    broker = kafka_broker.KafkaBroker(work / "kafka-logs", work / "kafka")
    broker.format()  # a one-time step, as kafka-storage.sh: not part of the start
    began = time.perf_counter()
    try:
        broker.start()
        assert broker.process is not None
        return Side(
            KAFKA, broker.bootstrap_servers, broker.process.pid, first_ack(broker.bootstrap_servers, began)
        ), broker
    except BaseException:  # Ctrl-C while it starts: no JVM left behind
        broker.stop()
        raise


class Bench:
    def __init__(self, records: int, work: Path, pp_records: int) -> None:
        self.n, self.work, self.pp_records = records, work, pp_records
        self._tools: Path | None = None
        self.keys = [i.to_bytes(8, "big") for i in range(records)]
        self.read_topics: dict[str, str] = {}
        self.cache: dict[tuple[str, str], tuple[float, float]] = {}
        #: per kafkalite side: its build's kafkalite serve --acks-all=page-cache, started for its row
        self.page_cache: dict[str, tuple[Side, subprocess.Popen]] = {}

    def produce_page_cache(self, side: Side) -> float:
        """acks=all answered at the page cache: a second kafkalite serve with
        ``--acks-all=page-cache``; the broker's acks=all is that already, measured again."""
        if side.name == KAFKA:
            return self.produce(side, "all")
        if side.name not in self.page_cache:
            folder = f"{side.name}-page-cache".replace(" ", "-").replace("(", "").replace(")", "")
            self.page_cache[side.name] = start_kafkalite(
                self.work, folder, "--acks-all", "page-cache", side=side.name, env=side.env
            )
        return self.produce(self.page_cache[side.name][0], "all")

    def close(self) -> None:
        for side, proc in self.page_cache.values():
            side.close()
            stop(proc)

    def produce(self, side: Side, acks: str) -> float:
        topic = side.topic(f"p-{uuid.uuid4().hex[:8]}")
        s, _ = pc.timed(lambda: side.send(topic, self.keys, acks=acks, **THROUGHPUT_PRODUCER))
        pc.expect(side.count(topic), self.n, f"produce acks={acks} to {side.name}")
        return self.n / s

    def server_cpu(self, side: Side, acks: str, tail: bool) -> float:
        """The server process's CPU seconds (utime+stime) per million records while Kafka's
        ProducerPerformance writes --pp-records to a new one-partition topic (and, if ``tail``, a
        consumer reads them as they come, until it has them all)."""
        if self._tools is None:
            self._tools = maven_jars.kafka_tools_jars()
        topic = side.topic(f"cpu-{uuid.uuid4().hex[:8]}", 1)
        tailer = Tail(side.bootstrap, topic, self.pp_records) if tail else None
        os.sync()  # earlier rows' writeback must not land on this one
        before = cpu_seconds(side.pid)
        producer_performance(self._tools, side.bootstrap, topic, self.pp_records, acks)
        if tailer is not None:
            pc.expect(tailer.finish(), self.pp_records, f"tailing consumer on {side.name}")
        used = cpu_seconds(side.pid) - before
        pc.expect(side.count(topic), self.pp_records, f"ProducerPerformance acks={acks} to {side.name}")
        side.drop(topic)
        return used * 1e6 / self.pp_records

    def consume(self, side: Side) -> float:
        if side.name not in self.read_topics:
            topic = side.topic("read")
            side.send(topic, self.keys, **THROUGHPUT_PRODUCER)
            pc.expect(side.count(topic), self.n, f"read topic on {side.name}")
            self.read_topics[side.name] = topic
        s, got = pc.timed(lambda: side.consume(self.read_topics[side.name], self.n))
        pc.expect(int(got), self.n, f"consume from {side.name}")  # type: ignore[call-overload]
        return self.n / s

    def latency(self, side: Side, which: int) -> float:
        """p50 (which=0) or p99 (1); both rows come from one run per side and round."""
        key = (side.name, "latency")
        if key not in self.cache:
            topic = side.topic(f"lat-{uuid.uuid4().hex[:8]}", 1)
            total = pc.LATENCY_RECORDS + pc.LATENCY_WARMUP
            p, failed = side.producer(**LATENCY_PRODUCER)
            child = [
                sys.executable,
                str(HERE / "peers_child.py"),
                "latency",
                "confluent",
                side.bootstrap,
                topic,
            ]
            lat = pc.paced_latency(
                [*child, str(total)], lambda v: (p.produce(topic, v), p.poll(0)), lambda: p.flush(30), total
            )
            if failed:
                raise pc.Missing(f"latency producer on {side.name}: {len(failed)} records failed")
            pc.expect(len(lat), pc.LATENCY_RECORDS, f"latency records from {side.name}")
            pc.expect(side.count(topic), total + 1, f"latency topic on {side.name}")
            self.cache[key] = (statistics.median(lat), pc.percentile(lat, 0.99))
        return self.cache[key][which]

    def rows(self) -> dict[str, Callable[[Side], float]]:
        return {
            "start": lambda side: side.start_s,
            "produce_acks1": lambda side: self.produce(side, "1"),
            "produce_acks_all": lambda side: self.produce(side, "all"),
            "produce_acks_all_page_cache": self.produce_page_cache,
            "consume": self.consume,
            "latency_p50": lambda side: self.latency(side, 0),
            "latency_p99": lambda side: self.latency(side, 1),
            "cpu_acks1": lambda side: self.server_cpu(side, "1", tail=False),
            "cpu_acks_all": lambda side: self.server_cpu(side, "all", tail=False),
            "cpu_acks1_tail": lambda side: self.server_cpu(side, "1", tail=True),
            "cpu_acks_all_tail": lambda side: self.server_cpu(side, "all", tail=True),
            "rss": lambda side: status_mb(side.pid)["VmHWM"],
        }


def show(value: float, unit: str) -> str:
    """A figure of a results table."""
    return f"{value:.3f} s" if unit == "s" else pc.fmt(value, unit)


def target_met(row: str, kl: float, ratio: float) -> str:
    spec = ROWS[row]
    if spec.target is None:
        return ""
    kind, bound = spec.target
    if kind == "ratio":
        return (
            f"{'met' if ratio >= bound else 'NOT met'} ({'≥' if spec.larger_is_better else '≤'} the broker's)"
        )
    return f"{'met' if kl <= bound else 'NOT met'} (≤ {bound:g} {spec.unit})"


def report(
    args, figures: dict, memory: dict, in_process: float, load: tuple[float, float], seconds: float
) -> None:
    base = pc.output_base(args.out, "server", args.replace)
    table, plot_rows = [], []
    for row, sides in figures.items():
        unit, larger_better = ROWS[row].unit, ROWS[row].larger_is_better
        kl, peer = statistics.median(sides[KAFKALITE]), statistics.median(sides[KAFKA])
        ratio = kl / peer if larger_better else peer / kl
        kl_cell, peer_cell = (show(v, unit) for v in (kl, peer))
        table.append(
            f"| {ROWS[row].label} | {kl_cell} | {peer_cell} | {ratio:.2f}× | {target_met(row, kl, ratio)} |"
        )
        plot_rows.append((ROWS[row].label, ratio))
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    versions = {
        "kafkalite": kafkalite.__version__,
        "Kafka": f"{kafka_broker.KAFKA_VERSION} (KRaft, one node, 127.0.0.1, default settings, {kafka_broker.JVM_HEAP})",
        "confluent-kafka": f"{ck.version()} (librdkafka {ck.libversion()[0]})",
        "java": java,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
    }
    kl_mem, peak = memory[KAFKALITE], memory["kafkalite serve sampled peak"]
    lines = [
        f"# kafkalite serve against Apache Kafka (`python benches/bench_server.py {' '.join(sys.argv[1:])}`)",
        "",
        f"confluent-kafka against each server, {args.records:,} records of 8-byte keys and 100-byte values, "
        f"4 partitions (latency: 1); medians of {args.rounds} round(s); a ratio above 1 means kafkalite serve "
        f"is ahead. 1-minute load average {load[0]:.2f} at the start, {load[1]:.2f} at the end; "
        f"{seconds / 60:.1f} minutes.",
        *([f"Rows run: {', '.join(figures)} (`--rows`)."] if args.rows else []),
        "",
        f"| workload | {KAFKALITE} | {KAFKA} | ratio | issue 13's target |",
        "|---|---:|---:|---:|---|",
        *table,
        "",
        f"![ratios]({base.name}.png)",
        "",
        "Start: from launching the process (`python -m kafkalite serve`, including the interpreter's start; "
        "`java ... kafka.Kafka` after `kafka-storage format`) until the first produce to a new topic is "
        f"acknowledged; `kafkalite.Server()` in an already running Python process: {in_process:.3f} s. Producers: `linger.ms=5`, `batch.size=1 MiB`, `delivery.report.only.error=true`, "
        "murmur2_random partitioner. Latency: one record every 0.5 ms for "
        f"{pc.LATENCY_RECORDS:,} records after {pc.LATENCY_WARMUP:,} warm-up records, producer `linger.ms=1`, "
        "`acks=1`, Nagle off; the consumer in another process with `fetch.wait.max.ms=10`, "
        "`fetch.queue.backoff.ms=0`. RSS: the server process's VmHWM after all rows (kafkalite serve's VmRSS "
        f"then: {kl_mem['VmRSS']:.1f} MB, of which {kl_mem['RssFile']:.1f} MB mapped segment files and "
        f"{kl_mem['RssAnon']:.1f} MB anonymous; Kafka's VmRSS {memory[KAFKA]['VmRSS']:.1f} MB). kafkalite "
        f"serve's largest VmRSS sampled every 20 ms: {peak['VmRSS']:.1f} MB ({peak['RssFile']:.1f} MB mapped "
        f"files, {peak['RssAnon']:.1f} MB anonymous) in the {peak['row']} row. Server CPU: Kafka's "
        f"ProducerPerformance (`--record-size 100 --throughput -1`, `acks` as shown, other settings "
        f"default) writing {args.pp_records:,} records to a new one-partition topic; the server "
        "process's utime+stime (/proc/<pid>/stat) after the run minus before, scaled to 1 M records; "
        "'a consumer tailing': a confluent-kafka consumer (`fetch.wait.max.ms=100`) assigned to the "
        "partition before the producer starts, reading until it has every record; a ratio above 1 "
        "means kafkalite serve used less CPU.",
        "",
        "Versions: " + "; ".join(f"{k} {v}" for k, v in versions.items()) + ".",
    ]
    results = {
        "records": args.records,
        "rounds": args.rounds,
        "load_average_1min": {"start": load[0], "end": load[1]},
        "versions": versions,
        "units": {row: ROWS[row].unit for row in figures},
        "figures": figures,
        "memory_mb": memory,
        "in_process_start_s": in_process,
    }
    write_report(str(base.parent), base.name, results, lines)
    pc.plot(plot_rows, base.with_suffix(".png"), f"kafkalite serve / Apache Kafka, {args.records:,} records")


def report_ab(args, figures: dict, load: tuple[str, str], seconds: float) -> None:
    """``--baseline``: each row's median per build, its spread over the rounds, and their ratio."""
    base = pc.output_base(args.out, "server-ab", args.replace)
    table = []
    for row, sides in figures.items():
        unit, larger_better = ROWS[row].unit, ROWS[row].larger_is_better
        cells = []
        for name in (KAFKALITE, BASELINE):
            values = sides[name]
            median, low, high = statistics.median(values), min(values), max(values)
            spread = (high - low) / median * 100 if median else 0.0
            cells.append(f"{show(median, unit)} ({show(low, unit)}–{show(high, unit)}, ±{spread / 2:.0f}%)")
        new, old = statistics.median(sides[KAFKALITE]), statistics.median(sides[BASELINE])
        ratio = new / old if larger_better else old / new
        values = " / ".join(
            f"{a:.2f} vs {b:.2f}" for a, b in zip(sides[KAFKALITE], sides[BASELINE], strict=True)
        )
        table.append(f"| {ROWS[row].label} | {cells[0]} | {cells[1]} | {ratio:.2f}× | {values} |")
    lines = [
        f"# kafkalite serve: this build against {args.baseline} (`python benches/bench_server.py "
        f"{' '.join(sys.argv[1:])}`)",
        "",
        f"Medians of {args.rounds} rounds, each round running both builds' servers one after the other "
        "(which goes first alternates); in brackets the lowest and highest figure and half their "
        "distance from each other as a share of the median; a ratio above 1 means this build is ahead. "
        f"{seconds / 60:.1f} minutes. `uptime` at the start: {load[0]}; at the end: {load[1]}.",
        "",
        f"| workload | {KAFKALITE} (this build) | {BASELINE} | ratio | per round (this / baseline) |",
        "|---|---:|---:|---:|---|",
        *table,
        "",
        "Server CPU: Kafka's ProducerPerformance (`--record-size 100 --throughput -1`, `acks` as "
        f"shown, other settings default) writing {args.pp_records:,} records to a new one-partition "
        "topic; the server process's utime+stime (/proc/<pid>/stat) after the run minus before, "
        "scaled to 1 M records; 'a consumer tailing': a confluent-kafka consumer "
        "(`fetch.wait.max.ms=100`) assigned to the partition before the producer starts, reading "
        "until it has every record.",
        "",
        f"Versions: kafkalite {kafkalite.__version__}; python {platform.python_version()}; machine "
        f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}.",
    ]
    results = {"baseline": args.baseline, "rounds": args.rounds, "uptime": load, "figures": figures}
    write_report(str(base.parent), base.name, results, lines)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def stop(serve: subprocess.Popen) -> None:
    serve.terminate()
    try:
        serve.wait(10)
    except subprocess.TimeoutExpired:
        serve.kill()
        serve.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000, help="records per throughput row")
    ap.add_argument(
        "--pp-records", type=int, default=1_000_000, help="ProducerPerformance records (CPU rows)"
    )
    ap.add_argument("--rows", action="append", choices=list(ROWS), help="run only these rows (default: all)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds (interleaved; medians reported)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--replace", action="store_true", help="overwrite today's server-<date> files")
    ap.add_argument(
        "--only",
        choices=["kafkalite"],
        help="run kafkalite serve alone: figures printed, no broker, no results file",
    )
    ap.add_argument(
        "--baseline",
        metavar="DIR",
        help="an A/B against the kafkalite build in DIR (a checkout's python/) instead of the broker",
    )
    args = ap.parse_args()
    if args.records < 1000 or args.rounds < 1:
        ap.error("--records must be at least 1000, --rounds at least 1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below on kill, too
    load_start, uptime_start = os.getloadavg()[0], uptime()
    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="kafkalite-server-bench-"))
    serve = broker = baseline_serve = None
    bench: Bench | None = None
    sides: list[Side] = []
    sampler = None
    try:
        kl, serve = start_kafkalite(work)
        sides.append(kl)
        sampler = PeakSampler(kl.pid)
        if args.baseline is not None:
            old, old_serve = start_kafkalite(work, "baseline", side=BASELINE, env=baseline_env(args.baseline))
            sides.append(old)
            baseline_serve = old_serve
        elif args.only is None:
            kafka, broker = start_kafka(work)
            sides.append(kafka)
        bench = Bench(args.records, work, args.pp_records)
        rows = {row: measure for row, measure in bench.rows().items() if not args.rows or row in args.rows}
        figures: dict[str, dict[str, list[float]]] = {row: {side.name: [] for side in sides} for row in rows}
        for r in range(args.rounds):
            bench.cache.clear()
            for row, measure in rows.items():
                sampler.row = row
                for side in sides if r % 2 == 0 else sides[::-1]:
                    value = measure(side)
                    figures[row][side.name].append(value)
                    print(f"round {r + 1} {row:16} {side.name}: {value:,.3f} {ROWS[row].unit}", flush=True)
        memory: dict[str, Mapping[str, float | str]] = {side.name: status_mb(side.pid) for side in sides}
        memory["kafkalite serve sampled peak"] = sampler.stop()
        print(f"kafkalite serve: {memory[KAFKALITE]}; sampled peak {memory['kafkalite serve sampled peak']}")
        if args.baseline is not None:
            report_ab(args, figures, (uptime_start, uptime()), time.perf_counter() - began)
            return
        if args.only is not None:
            return
        in_process = in_process_start(work)
        report(
            args, figures, memory, in_process, (load_start, os.getloadavg()[0]), time.perf_counter() - began
        )
    finally:
        if sampler is not None:
            sampler.stop()
        for side in sides:
            side.close()
        if bench is not None:
            bench.close()
        for proc in (serve, baseline_serve):
            if proc is not None:
                stop(proc)
        pc.finish_run(broker, work)


if __name__ == "__main__":
    main()
