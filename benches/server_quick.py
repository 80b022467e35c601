"""Rough figures for `kafkalite serve` with confluent-kafka (100-byte values): time from
spawning the server process to the first acknowledged produce, produce and consume
throughput, and the server's resident memory. Not the issue's full benchmark (no Apache Kafka
side by side yet). Run: PYTHONPATH=python python benches/server_quick.py [records]"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import tempfile
import time

import confluent_kafka
import kafkalite

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "support")
)
from helpers import produce_all  # tests/support/helpers.py: the produce loop the tests use too


def rss_mb(pid: int) -> str:
    """Resident memory; the file-backed part is the mapped segments (page cache, shared)."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                fields[key] = int(rest.split()[0]) / 1024
    return f"{fields['VmRSS']:.1f} MB (anonymous {fields['RssAnon']:.1f} MB, mapped files {fields['RssFile']:.1f} MB)"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def main(records: int) -> None:
    data = tempfile.mkdtemp(prefix="kafkalite-bench-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bootstrap = f"127.0.0.1:{port}"
    began = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "kafkalite", "serve", "--data-dir", data, "--listen", bootstrap],
        stderr=subprocess.DEVNULL,
    )
    try:
        acked = None
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 0,
                "reconnect.backoff.ms": 5,
                "reconnect.backoff.max.ms": 20,
            }
        )
        while acked is None:
            producer.produce("first", b"x", on_delivery=lambda err, msg: None)
            producer.flush(10)
            acked = time.perf_counter() - began
        print(f"spawn `kafkalite serve` -> first acknowledged produce: {acked * 1000:.0f} ms")
        began = time.perf_counter()
        with kafkalite.Server(os.path.join(data, "in-process")) as inproc:
            p = confluent_kafka.Producer({"bootstrap.servers": inproc.bootstrap_servers, "linger.ms": 0})
            p.produce("first", b"x")
            p.flush(10)
            print(
                f"kafkalite.Server() -> first acknowledged produce (in process): {(time.perf_counter() - began) * 1000:.0f} ms"
            )
        print(f"server RSS at rest: {rss_mb(server.pid)}")
        value = b"x" * 100
        for acks in ("1", "all"):
            topic = f"bench-{acks}"
            producer = confluent_kafka.Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "acks": acks,
                    "linger.ms": 5,
                    "batch.size": 1_000_000,
                    "queue.buffering.max.messages": 1_000_000,
                }
            )
            start = time.perf_counter()
            produce_all(producer, topic, value, itertools.repeat(None, records))
            producer.flush(60)
            took = time.perf_counter() - start
            print(
                f"produce acks={acks}: {records / took:,.0f} records/s ({records * 100 / took / 1e6:.1f} MB/s of values)"
            )
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "bench",
                "enable.auto.commit": False,
                "fetch.max.bytes": 52428800,
            }
        )
        consumer.assign([confluent_kafka.TopicPartition("bench-1", 0, 0)])
        got = 0
        start = time.perf_counter()
        while got < records:
            got += len([m for m in consumer.consume(10000, 1.0) if m.error() is None])
        took = time.perf_counter() - start
        consumer.close()
        print(f"consume: {records / took:,.0f} records/s")
        print(
            f"server RSS after the run: {rss_mb(server.pid)}; server CPU time {cpu_seconds(server.pid):.1f} s"
        )
    finally:
        server.terminate()
        server.wait(10)
        subprocess.run(["rm", "-rf", data], check=False)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
