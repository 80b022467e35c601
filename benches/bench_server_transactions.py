"""Transactional produce through `kafkalite serve` (issue 22's served figures): records/s and
commit latency at 100, 1,000 and 10,000 records per transaction, with confluent-kafka and
kafka-python transactional producers (8-byte keys, 100-byte values, one partition), against a
`kafkalite serve` child process on 127.0.0.1 with its defaults (acks=all answered on disk).

    python benches/bench_server_transactions.py [--records 20000] [--out benches/results]

Each row's records are counted back with a read_committed consumer (the run stops if any is
missing). No Kafka broker beside it: bench_transactions_peers.py runs these confluent-kafka rows
and ProducerPerformance --transactional-id against a Kafka 4.x broker in the same run. Results:
``server-transactions-<date>.json`` and ``.md`` in --out."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "support"))  # serve_proc.py: how the tests start the server
sys.path.insert(0, str(HERE))

import confluent_kafka as ck  # noqa: E402
import kafkalite  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from peers_common import percentile, timed_transactions  # noqa: E402
from serve_proc import start_serve  # noqa: E402

SIZES = (100, 1_000, 10_000)
VALUE = b"v" * 100


def start_module(name: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", name, *args], **kwargs)


def confluent_run(bootstrap: str, topic: str, per_txn: int, txns: int) -> tuple[float, list[float]]:
    """(seconds from the first begin_transaction() to the last commit's return, each
    commit_transaction()'s seconds); init_transactions() is not timed. Also the peers bench's
    confluent-kafka rows, against a Kafka broker and `kafkalite serve` alike
    (bench_transactions_peers.py)."""
    producer = ck.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"bench-ck-{topic}", "linger.ms": 5}
    )
    producer.init_transactions(30)

    def send(_t: int, i: int) -> None:
        producer.produce(topic, VALUE, key=b"%08d" % i, partition=0)
        if i % 10_000 == 9_999:
            producer.poll(0)

    # commit_transaction flushes, then sends EndTxn
    return timed_transactions(producer, txns, per_txn, send, lambda: producer.commit_transaction(60))


def kafka_python_run(bootstrap: str, topic: str, per_txn: int, txns: int) -> tuple[float, list[float]]:
    """As ``confluent_run``, with kafka-python."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"bench-kp-{topic}", linger_ms=5)
    producer.init_transactions()
    timed = timed_transactions(
        producer,
        txns,
        per_txn,
        lambda _t, i: producer.send(topic, VALUE, key=b"%08d" % i, partition=0),
        producer.commit_transaction,
    )
    producer.close()
    return timed


def count_committed(bootstrap: str, topic: str, expected: int) -> int:
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, isolation_level="read_committed", auto_offset_reset="earliest"
    )
    seen, quiet = 0, 0
    while seen < expected and quiet < 20:
        batch = consumer.poll(timeout_ms=500, max_records=100_000)
        n = sum(len(r) for r in batch.values())
        seen, quiet = seen + n, 0 if n else quiet + 1
    consumer.close()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=20_000, help="records per row (rounded to whole transactions)"
    )
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        runs = (("confluent-kafka", confluent_run), ("kafka-python", kafka_python_run))
        for client, _ in runs:
            for per_txn in SIZES:
                kafkalite.Admin(str(data)).create_topic(f"{client}-{per_txn}", 1)  # creates the directory too
        proc, bootstrap = start_serve(start_module, data, "--log-level", "WARNING")
        try:
            for client, run in runs:
                for per_txn in SIZES:
                    txns = max(1, args.records // per_txn)
                    topic = f"{client}-{per_txn}"
                    seconds, commits = run(bootstrap, topic, per_txn, txns)
                    total = txns * per_txn
                    counted = count_committed(bootstrap, topic, total)
                    if counted != total:
                        raise SystemExit(f"{client} {per_txn}/txn: {counted} of {total} records read back")
                    rows.append(
                        {
                            "client": client,
                            "records_per_txn": per_txn,
                            "transactions": txns,
                            "records_per_s": round(total / seconds),
                            "commit_ms_p50": round(statistics.median(commits) * 1000, 2),
                            "commit_ms_p99": round(percentile(commits, 0.99) * 1000, 2),
                            "commit_ms_max": round(max(commits) * 1000, 2),
                        }
                    )
                    print(rows[-1], flush=True)
        finally:
            proc.kill()
            proc.wait(30)
    load = os.getloadavg()
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        "command": "python benches/bench_server_transactions.py " + " ".join(sys.argv[1:]),
    }
    out = Path(args.out)
    stem = out / f"server-transactions-{time.strftime('%Y-%m-%d', time.gmtime())}"
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        "# Transactional produce through kafkalite serve",
        "",
        f"{meta['date']}; {meta['machine']}; `{meta['command']}`. One partition, 8-byte keys, 100-byte values;",
        "commit = the client's commit_transaction call (its flush of the last batches, then EndTxn);",
        "records/s from the first begin_transaction to the last commit (init_transactions not timed).",
        "Every record counted back with a read_committed consumer. No Kafka broker in this run",
        "(bench_transactions_peers.py runs one beside).",
        "",
        "| client | records/txn | txns | records/s | commit p50 ms | commit p99 ms | commit max ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['client']} | {r['records_per_txn']} | {r['transactions']} | {r['records_per_s']} | "
            f"{r['commit_ms_p50']} | {r['commit_ms_p99']} | {r['commit_ms_max']} |"
        )
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {stem}.md and .json")


if __name__ == "__main__":
    main()
