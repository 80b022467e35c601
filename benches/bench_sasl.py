"""What SASL/SCRAM costs on `kafkalite serve` (issue 13), PLAINTEXT and SASL_PLAINTEXT side by side
in one run, same server build, same client (confluent-kafka, 100-byte values):

- a new producer's first acknowledged produce (connect, ApiVersions, [SaslHandshake, two
  SaslAuthenticate round trips], Metadata, Produce), median of `--connects` fresh producers;
- produce throughput at acks=1 once connected (authentication happens per connection, so this
  should not move).

Rounds are interleaved and medians reported with the SASL/PLAINTEXT ratio. Writes
`benches/results/sasl.md`. Run: PYTHONPATH=python python benches/bench_sasl.py [--records N]"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import confluent_kafka
import kafkalite
import kafkalite.users

USER, PASSWORD = "bench", "bench-secret"
MODES = {
    "PLAINTEXT": {},
    "SCRAM-SHA-256": {"sasl.mechanisms": "SCRAM-SHA-256"},
    "SCRAM-SHA-512": {"sasl.mechanisms": "SCRAM-SHA-512"},
}


def client(server: kafkalite.Server, mode: str) -> dict:
    extra = MODES[mode]
    if not extra:
        return {"bootstrap.servers": server.bootstrap_servers}
    return {
        "bootstrap.servers": server.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
        **extra,
    }


def first_ack_ms(server: kafkalite.Server, mode: str) -> float:
    began = time.perf_counter()
    producer = confluent_kafka.Producer({**client(server, mode), "linger.ms": 0})
    producer.produce("connect", b"x")
    assert producer.flush(10) == 0
    return (time.perf_counter() - began) * 1000


def produce_rate(server: kafkalite.Server, mode: str, records: int) -> float:
    producer = confluent_kafka.Producer(
        {
            **client(server, mode),
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"x" * 100
    topic = f"rate-{mode}"
    producer.produce(topic, value)  # connect and authenticate outside the timing
    producer.flush(10)
    began = time.perf_counter()
    for _ in range(records):  # librdkafka's queue holds them all (queue.buffering.max.messages)
        producer.produce(topic, value)
    assert producer.flush(60) == 0
    return records / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--connects", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not 0 < args.records <= 1_000_000:
        parser.error("--records must be between 1 and 1,000,000 (what the producer's queue holds)")
    root = tempfile.mkdtemp(prefix="kafkalite-bench-sasl-")
    try:
        plain_dir, sasl_dir = os.path.join(root, "plain"), os.path.join(root, "sasl")
        kafkalite.users.add_user(sasl_dir, USER, PASSWORD)
        connects: dict[str, list[float]] = {m: [] for m in MODES}
        rates: dict[str, list[float]] = {m: [] for m in MODES}
        with kafkalite.Server(plain_dir) as plain, kafkalite.Server(sasl_dir, sasl=True) as sasl:
            for round_ in range(args.rounds):
                order = list(MODES)[round_ % len(MODES) :] + list(MODES)[: round_ % len(MODES)]
                for mode in order:  # rotated, so no mode always runs first
                    server = plain if mode == "PLAINTEXT" else sasl
                    connects[mode] += [first_ack_ms(server, mode) for _ in range(args.connects)]
                    rates[mode].append(produce_rate(server, mode, args.records))
        lines = [
            f"# SASL/SCRAM cost on `kafkalite serve` ({args.rounds} interleaved rounds, medians)",
            "",
            f"`PYTHONPATH=python python benches/bench_sasl.py --records {args.records} "
            f"--connects {args.connects} --rounds {args.rounds}`",
            "",
            "| client | new producer -> first ack (ms) | ratio | produce acks=1 (records/s) | ratio |",
            "|---|---|---|---|---|",
        ]
        base_c, base_r = statistics.median(connects["PLAINTEXT"]), statistics.median(rates["PLAINTEXT"])
        for mode in MODES:
            c, r = statistics.median(connects[mode]), statistics.median(rates[mode])
            lines.append(f"| {mode} | {c:.1f} | {c / base_c:.2f} | {r:,.0f} | {r / base_r:.2f} |")
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        lines += ["", f"{os.cpu_count()} CPUs, load average {load} at the end (a shared machine: noisy)."]
        text = "\n".join(lines) + "\n"
        print(text)
        out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "sasl.md")
        with open(out, "w") as f:
            f.write(text)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
