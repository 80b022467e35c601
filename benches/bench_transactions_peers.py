"""Transactions beside a real Kafka broker, in one run (issue 22's bench): records/s and commit
latency (p50/p99) of transactions of 100, 1,000 and 10,000 records

- embedded: ``kafkalite.Producer(transactional_id=...)`` over a data directory, in this process;
- served: confluent-kafka's transactional producer against ``kafkalite serve`` (a child process);
- broker: the same confluent-kafka producer against Apache Kafka 4.x (KRaft, one node on
  127.0.0.1, default settings, started and stopped here as in bench_peers.py);

and Kafka's own ``ProducerPerformance --transactional-id --transaction-duration-ms`` (Java client,
transactions ended by time, not count) against the broker and against ``kafkalite serve``; with
``--pp-plain-acks all`` (or ``1``) also ProducerPerformance without transactions at those acks, to
tell the transactions' own cost from the Produce path's. ``--sizes ''``: ProducerPerformance rows only.

    python benches/bench_transactions_peers.py [--records 20000] [--rounds 1] [--sizes 100,1000,10000]
        [--pp-records 200000] [--pp-duration-ms 100 ...] [--pp-plain-acks all ...] [--out benches/results]
        [--replace]

One partition per row's topic; 8-byte keys and 100-byte values (ProducerPerformance: 100-byte
values, no key). Each row sends max(--records, 10 x size) records (at least 10 transactions) and is
then counted back with a read_committed consumer (kafkalite's for embedded rows, confluent-kafka's
otherwise): the run stops if a committed record is missing or extra, or if the partition does not
hold exactly one COMMIT marker per transaction (its end offset minus the records). Records/s runs
from the first begin_transaction to the last commit's return (init_transactions not timed);
commit = the client's commit_transaction call (the flush of the last batches, then EndTxn).
ProducerPerformance rows also give the CPU seconds of the server (kafkalite serve or the broker's JVM)
and of the client's JVM during the row: on a machine of few cores the client's share is the budget.
Rounds are interleaved (the order of the sides reversed every other round); medians reported.
Results: ``transactions-peers-<date>.json``, ``.md`` and ``.png`` in --out (a new name unless
--replace). Ratios are kafkalite ÷ broker: the issue's targets are >= 1.5 for records/s and
<= 0.5 for commit latency (the plot shows broker ÷ kafkalite for latency, so above 1 is ahead)."""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "support"))  # kafka_broker.py, maven_jars.py, serve_proc.py

import confluent_kafka as ck  # noqa: E402
import kafka_broker  # noqa: E402
import kafkalite  # noqa: E402
import maven_jars  # noqa: E402
from bench_peers import Broker  # noqa: E402
from bench_server_transactions import confluent_run, start_module  # noqa: E402
from bench_transactions import transactions  # noqa: E402
from peers_common import PP_LINE, KafkaEndpoint, Missing, expect, finish_run, output_base, percentile, plot  # noqa: E402
from report import write_report  # noqa: E402
from serve_proc import start_serve  # noqa: E402

EMBEDDED, SERVED, BROKER = "embedded", "kafkalite serve", "Kafka broker"


# -- counting back ---------------------------------------------------------------------------------
def counted_embedded(data: str, topic: str) -> tuple[int, int]:
    """(records a read_committed embedded consumer reads, the partition's end offset)."""
    c = kafkalite.Consumer(data, topic, auto_offset_reset="earliest", isolation_level="read_committed")
    tp = kafkalite.TopicPartition(topic, 0)
    end = c.end_offsets([tp])[tp]
    seen, quiet = 0, 0
    while quiet < 3:
        n = sum(len(rs) for rs in c.poll(timeout_ms=200, max_records=100_000).values())
        seen, quiet = seen + n, 0 if n else quiet + 1
    c.close()
    return seen, end


def counted_served(bootstrap: str, topic: str) -> tuple[int, int]:
    """(records a read_committed confluent-kafka consumer reads, the partition's end offset)."""
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    end = c.get_watermark_offsets(ck.TopicPartition(topic, 0), 30)[1]
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    seen, quiet = 0, 0
    while quiet < 3:
        msgs = c.consume(10_000, timeout=1)
        for m in msgs:
            if m.error():
                raise Missing(f"read_committed consumer of {topic}: {m.error()}")
        seen, quiet = seen + len(msgs), 0 if msgs else quiet + 1
    c.close()
    return seen, end


def check(counted: tuple[int, int], records: int, txns: int | None, what: str) -> int:
    """Stops the run unless every record is read back committed and each transaction left one
    marker (None: count the markers). Returns the number of transactions."""
    seen, end = counted
    expect(seen, records, f"{what}, read_committed")
    markers = end - records
    if txns is not None and markers != txns:
        raise Missing(f"{what}: {markers} markers for {txns} transactions (end offset {end})")
    return markers


# -- CPU accounting --------------------------------------------------------------------------------
#: A ProducerPerformance row: transactions of this many ms, or "acks=all" / "acks=1" without any.
PPRow = int | str


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's children waited for (the client runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- the rows --------------------------------------------------------------------------------------
class Sides:
    """The three targets of one run and how each row is run against them."""

    def __init__(self, work: Path) -> None:
        self.embedded_data = str(work / "embedded")
        self.served_data = work / "served"
        kafkalite.Admin(str(self.served_data)).create_topic("warm-up", 1)  # creates the directory
        self.tools = maven_jars.kafka_tools_jars()
        self.broker = Broker(work)
        try:
            self.serve, bootstrap = start_serve(start_module, self.served_data, "--log-level", "WARNING")
        except BaseException:
            self.broker.stop()
            raise
        self.served = KafkaEndpoint(bootstrap)

    def endpoint(self, side: str) -> KafkaEndpoint:
        return self.served if side == SERVED else self.broker

    def server_pid(self, side: str) -> int:
        process = self.serve if side == SERVED else self.broker.broker.process
        assert process is not None
        return process.pid

    def close(self) -> None:
        self.served.close()
        self.serve.kill()
        self.serve.wait(30)

    def count_size(self, side: str, per_txn: int, records: int) -> dict:
        txns = max(10, records // per_txn)
        topic = f"tx-{per_txn}-{uuid.uuid4().hex[:8]}"
        if side == EMBEDDED:
            kafkalite.Admin(self.embedded_data).create_topic(topic, 1)
            seconds, commits = transactions(self.embedded_data, topic, per_txn, txns, f"bench-{topic}")
            counted = counted_embedded(self.embedded_data, topic)
        else:
            endpoint = self.endpoint(side)
            endpoint.topic(topic, 1)
            seconds, commits = confluent_run(endpoint.bootstrap, topic, per_txn, txns)
            counted = counted_served(endpoint.bootstrap, topic)
        check(counted, txns * per_txn, txns, f"{side} {per_txn}/txn")
        return {
            "records": txns * per_txn,
            "transactions": txns,
            "records_per_s": txns * per_txn / seconds,
            "commit_ms_p50": percentile(commits, 0.5) * 1000,
            "commit_ms_p99": percentile(commits, 0.99) * 1000,
        }

    def producer_performance(self, side: str, row: PPRow, records: int) -> dict:
        """Kafka's ProducerPerformance with transactions ended every ``row`` ms (or, for
        "acks=..." rows, without transactions at those acks): its own records/s and per-record
        latency; transactions counted from the markers; the CPU seconds of server and client."""
        endpoint = self.endpoint(side)
        topic = endpoint.topic(f"pp-{str(row).replace('=', '-')}-{uuid.uuid4().hex[:8]}", 1)
        cmd = [
            "java", "-Xmx256m", "-cp", f"{self.tools}/*", "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic, "--num-records", str(records), "--record-size", "100", "--throughput", "-1",
        ]  # fmt: skip
        if isinstance(row, int):
            cmd += ["--transactional-id", f"pp-{topic}", "--transaction-duration-ms", str(row)]
        cmd += ["--producer-props", f"bootstrap.servers={endpoint.bootstrap}"]
        if isinstance(row, str):
            cmd.append(row)
        server_before, client_before = cpu_seconds(self.server_pid(side)), children_cpu_seconds()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        server_cpu, client_cpu = (
            cpu_seconds(self.server_pid(side)) - server_before,
            children_cpu_seconds() - client_before,
        )
        found = PP_LINE.findall(done.stdout)
        if done.returncode != 0 or not found:
            raise Missing(
                f"ProducerPerformance against {side} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        sent, rate, _avg, _max, p50, _p95, p99 = found[-1]
        expect(int(sent), records, f"ProducerPerformance against {side}, sent")
        if isinstance(row, int):
            txns = check(
                counted_served(endpoint.bootstrap, topic), records, None, f"ProducerPerformance, {side}"
            )
        else:
            txns = 0
            expect(endpoint.count(topic), records, f"ProducerPerformance {row} against {side}, end offset")
        return {
            "records": records,
            "transactions": txns,
            "records_per_s": float(rate),
            "record_latency_ms_p50": float(p50),
            "record_latency_ms_p99": float(p99),
            "server_cpu_s": server_cpu,
            "client_cpu_s": client_cpu,
        }


# -- the report ------------------------------------------------------------------------------------
def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def versions() -> dict[str, str]:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    return {
        "kafkalite": kafkalite.__version__,
        "Kafka broker": f"{kafka_broker.KAFKA_VERSION} (KRaft, one node, 127.0.0.1, default settings)",
        "ProducerPerformance": f"kafka-tools {maven_jars.JAVA_CLIENT_VERSION}",
        "confluent-kafka": f"{ck.version()} (librdkafka {ck.libversion()[0]})",
        "java": java,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
    }


def report(args, figures: dict, pp: dict, uptime: tuple[str, str], seconds: float) -> None:
    base = output_base(args.out, "transactions-peers", args.replace)
    lines = [
        "# Transactions beside a Kafka broker",
        "",
        f"`python benches/bench_transactions_peers.py {shlex.join(sys.argv[1:])}`; medians of {args.rounds} "
        f"interleaved round(s); {seconds / 60:.1f} minutes.",
        "",
        f"`uptime` at the start: `{uptime[0]}`; at the end: `{uptime[1]}`.",
    ]
    confluent = [
        "",
        "One partition, 8-byte keys, 100-byte values; max(--records, 10 x size) records a row. Every row was read",
        "back with read_committed (all records, nothing more) and held exactly one COMMIT marker per transaction.",
        "Commit = the client's commit_transaction (flush of the last batches, then EndTxn). Ratio = kafkalite ÷",
        "broker (targets: records/s >= 1.5, commit latency <= 0.5). Durability differs: the broker (Kafka's",
        "defaults) fsyncs nothing on a commit; kafkalite's commit returns once its records and markers are on disk.",
        "",
        "| records/txn | side | records/s | commit p50 ms | commit p99 ms | records/s ÷ broker | p50 ÷ broker | p99 ÷ broker |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += confluent if args.sizes else []
    plot_rows = []
    for size in args.sizes:
        broker = figures[(BROKER, size)]
        b_rate, b50, b99 = (median_of(broker, k) for k in ("records_per_s", "commit_ms_p50", "commit_ms_p99"))
        for side in (EMBEDDED, SERVED, BROKER):
            runs = figures[(side, size)]
            rate, p50, p99 = (median_of(runs, k) for k in ("records_per_s", "commit_ms_p50", "commit_ms_p99"))
            label = f"{side} (confluent-kafka)" if side != EMBEDDED else "embedded `Producer`"
            ratios = (
                "| | |" if side == BROKER else f"{rate / b_rate:.2f} | {p50 / b50:.2f} | {p99 / b99:.2f} |"
            )
            lines.append(f"| {size:,} | {label} | {rate:,.0f} | {p50:.2f} | {p99:.2f} | {ratios}")
            if side != BROKER:
                plot_rows.append((f"{side}, {size:,}/txn: records/s", rate / b_rate))
                plot_rows.append((f"{side}, {size:,}/txn: commit p50 (broker ÷ kafkalite)", b50 / p50))
    lines += [
        "",
        "Kafka's ProducerPerformance (Java client, `--throughput -1 --record-size 100`, transactions ended by",
        "time, or none at the acks named), its own records/s and per-record send latency; transactions counted",
        "from the markers; CPU seconds of the server (kafkalite serve, or the broker's JVM) and of the client's",
        "JVM during the row:",
        "",
        "| --transaction-duration-ms | target | records | transactions | records/s | latency p50 ms | latency p99 ms "
        "| server CPU s | client CPU s | records/s ÷ broker |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for pp_row in args.pp_rows:
        b_rate = median_of(pp[(BROKER, pp_row)], "records_per_s")
        for side in (SERVED, BROKER):
            runs = pp[(side, pp_row)]
            rate = median_of(runs, "records_per_s")
            r = "" if side == BROKER else f"{rate / b_rate:.2f}"
            lines.append(
                f"| {pp_row} | {side} | {runs[0]['records']:,} | {median_of(runs, 'transactions'):.0f} | "
                f"{rate:,.0f} | {median_of(runs, 'record_latency_ms_p50'):.0f} | "
                f"{median_of(runs, 'record_latency_ms_p99'):.0f} | {median_of(runs, 'server_cpu_s'):.1f} | "
                f"{median_of(runs, 'client_cpu_s'):.1f} | {r} |"
            )
            if side == SERVED:
                what = f"{pp_row} ms txns" if isinstance(pp_row, int) else f"{pp_row}, no txns"
                plot_rows.append((f"ProducerPerformance {what} vs broker: records/s", rate / b_rate))
    ver = versions()
    lines += [
        "",
        f"![ratios]({base.name}.png)",
        "",
        "Versions: " + "; ".join(f"{k} {v}" for k, v in ver.items()),
    ]
    results = {
        "command": "python benches/bench_transactions_peers.py " + shlex.join(sys.argv[1:]),
        "uptime": {"start": uptime[0], "end": uptime[1]},
        "versions": ver,
        "rows": [{"side": s, "records_per_txn": n, "runs": runs} for (s, n), runs in figures.items()],
        "producer_performance": [
            {"side": s, **({"duration_ms": d} if isinstance(d, int) else {"plain": d}), "runs": runs}
            for (s, d), runs in pp.items()
        ],
    }
    write_report(str(base.parent), base.name, results, lines)
    load = uptime[0].split("load average:")[-1].strip()
    title = f"kafkalite / Kafka 4.x broker, transactions, median of {args.rounds}; load average {load} at the start"
    plot(plot_rows, base.with_suffix(".png"), title)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20_000, help="records a row (at least 10 transactions)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--pp-records", type=int, default=200_000, help="ProducerPerformance --num-records")
    ap.add_argument("--pp-duration-ms", type=int, action="append", help="default: 100")
    ap.add_argument(
        "--pp-plain-acks", choices=["all", "1"], action="append", default=[],
        help="also ProducerPerformance without transactions at these acks",
    )  # fmt: skip
    ap.add_argument(
        "--sizes", default="100,1000,10000", help="records per transaction, comma-separated ('': none)"
    )
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--replace", action="store_true")
    args = ap.parse_args()
    args.pp_duration_ms = args.pp_duration_ms or [100]
    args.sizes = [int(n) for n in args.sizes.split(",") if n]
    args.pp_rows = [*args.pp_duration_ms, *(f"acks={a}" for a in args.pp_plain_acks)]
    kafka_broker.ensure_jars()
    began, up_start = time.monotonic(), uptime()
    print(f"start: {up_start}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="kafkalite-txn-peers-"))
    sides: Sides | None = None
    figures: dict[tuple[str, int], list[dict]] = {}
    pp: dict[tuple[str, PPRow], list[dict]] = {}
    try:
        sides = Sides(work)
        for r in range(args.rounds):
            order = [EMBEDDED, SERVED, BROKER]
            for size in args.sizes:
                for side in order if r % 2 == 0 else order[::-1]:
                    row = sides.count_size(side, size, args.records)
                    figures.setdefault((side, size), []).append(row)
                    print(f"round {r + 1} {side} {size}/txn: {row}", flush=True)
            for pp_row in args.pp_rows:
                for side in [SERVED, BROKER] if r % 2 == 0 else [BROKER, SERVED]:
                    row = sides.producer_performance(side, pp_row, args.pp_records)
                    pp.setdefault((side, pp_row), []).append(row)
                    print(f"round {r + 1} ProducerPerformance {side} {pp_row}: {row}", flush=True)
        report(args, figures, pp, (up_start, uptime()), time.monotonic() - began)
    finally:
        if sides is not None:
            sides.close()
        finish_run(sides.broker if sides is not None else None, work)


if __name__ == "__main__":
    main()
