"""What idempotence costs on `kafkalite serve`, peers in one run (confluent-kafka, 100-byte
values, acks=all): produce throughput with `enable.idempotence` off and on (ratio), and the one
time cost of the producer state on a partition without snapshots (the embedded side wrote
it): the first idempotent produce scans its batch headers, the next one does not.
Run: PYTHONPATH=python python benches/bench_idempotence.py [records]"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
import time

import confluent_kafka
import kafkalite

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "support")
)
from helpers import produce_all  # tests/support/helpers.py: the produce loop the tests use too


def produce_rate(
    server: kafkalite.Server, topic: str, records: int, idempotent: bool, in_flight: int = 1_000_000
) -> float:
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": server.bootstrap_servers,
            "enable.idempotence": idempotent,
            "acks": "all",
            "linger.ms": 5,
            "max.in.flight.requests.per.connection": in_flight,
        }
    )
    value = b"v" * 100
    producer.produce(topic, value)  # connect, metadata, InitProducerId: not timed
    producer.flush(30)
    began = time.perf_counter()
    produce_all(producer, topic, value, itertools.repeat(None, records))
    assert producer.flush(60) == 0
    return records / (time.perf_counter() - began)


def first_idempotent_produce(server: kafkalite.Server, topics: list[str]) -> list[float]:
    """Seconds for the first acknowledged idempotent produce into each topic, after a warm-up
    produce elsewhere (connection, InitProducerId): each includes opening the partition."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": server.bootstrap_servers, "enable.idempotence": True, "linger.ms": 0}
    )
    producer.produce("plain", b"warm-up")
    assert producer.flush(60) == 0
    times = []
    for topic in topics:
        began = time.perf_counter()
        producer.produce(topic, b"x")
        assert producer.flush(60) == 0
        times.append(time.perf_counter() - began)
    return times


def main(records: int) -> None:
    data = tempfile.mkdtemp(prefix="kafkalite-bench-idem-")
    admin = kafkalite.Admin(data)
    for topic in ("plain", "plain5", "idempotent", "embedded", "fresh"):
        admin.create_topic(topic, partitions=1)
    with kafkalite.Producer(data, linger_ms=5) as embedded:
        for _ in range(records):
            embedded.send("embedded", b"e" * 100, partition=0)
    with kafkalite.Server(data) as server:
        plain = produce_rate(server, "plain", records, idempotent=False)
        plain5 = produce_rate(server, "plain5", records, idempotent=False, in_flight=5)
        idem = produce_rate(server, "idempotent", records, idempotent=True, in_flight=5)
        scanned, fresh = first_idempotent_produce(server, ["embedded", "fresh"])
    print(f"{records} records of 100 bytes, acks=all, confluent-kafka {confluent_kafka.version()[0]}")
    print(f"produce, idempotence off: {plain:,.0f} records/s")
    print(f"produce, idempotence off, max.in.flight 5 (idempotence's cap): {plain5:,.0f} records/s")
    print(f"produce, idempotence on:  {idem:,.0f} records/s  (on / off-at-5-in-flight {idem / plain5:.2f})")
    print(
        f"first idempotent produce into {records} embedded records without a snapshot (open + header scan): "
        f"{scanned * 1000:.1f} ms; into an empty partition (open): {fresh * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200_000)
