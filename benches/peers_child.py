"""Child processes of bench_peers.py, one per measurement that needs a process of its own:

    latency KIND TARGET TOPIC N   consume N records after a probe; print their latencies (µs)
    rss KIND TARGET TOPIC N       send N keyed records with send() defaults; print peak memory

KIND is ``kafkalite`` (TARGET a data directory) or ``confluent`` (TARGET the broker's
bootstrap servers). Latency values hold the producer's ``time.monotonic_ns()``
(CLOCK_MONOTONIC is shared by all processes on Linux)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

VALUE = b"v" * 100

#: librdkafka settings of a user tuning the consumer for latency rather than throughput: no
#: back-off after an empty fetch queue, a short broker-side wait, Nagle off.
CONFLUENT_LATENCY_CONSUMER = {
    "fetch.wait.max.ms": 10,
    "fetch.queue.backoff.ms": 0,
    "socket.nagle.disable": True,
}


def latency_kafkalite(data_dir: str, topic: str, n: int) -> list[float]:
    from kafkalite import Consumer

    c = Consumer(data_dir, topic, auto_offset_reset="earliest")
    out: list[float] = []
    probe_seen = False
    while len(out) < n:
        for records in c.poll(timeout_ms=1000).values():
            now = time.monotonic_ns()
            for r in records:
                if r.value == b"probe":
                    probe_seen = True
                    print("ready", flush=True)
                else:
                    out.append((now - int(r.value)) / 1e3)
    c.close()
    assert probe_seen
    return out


def latency_confluent(bootstrap: str, topic: str, n: int) -> list[float]:
    import confluent_kafka as ck

    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-latency",
            "enable.auto.commit": False,
            **CONFLUENT_LATENCY_CONSUMER,
        }
    )
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    out: list[float] = []
    while len(out) < n:
        m = c.poll(1.0)
        if m is None:
            continue
        now = time.monotonic_ns()
        if m.error():
            raise SystemExit(f"confluent consumer: {m.error()}")
        if m.value() == b"probe":
            print("ready", flush=True)
        else:
            out.append((now - int(m.value())) / 1e3)
    c.close()
    return out


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def rss(kind: str, target: str, topic: str, n: int) -> dict:
    """VmHWM (peak resident set, file-backed pages included) after sending and closing, and the
    largest file-backed share seen by a 20 Hz sampler."""
    peak_file = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            peak_file[0] = max(peak_file[0], _status_kb("RssFile"))

    sampler = threading.Thread(target=sample, daemon=True)
    keys = (i.to_bytes(8, "big") for i in range(n))  # made as sent: a list would be most of the peak
    sampler.start()
    began = time.perf_counter()
    if kind == "kafkalite":
        from kafkalite import Producer

        with Producer(target) as p:
            send = p.send
            for k in keys:
                send(topic, VALUE, key=k)
    else:
        import confluent_kafka as ck

        # tests/support/helpers.py (imported here, not at the top: the kafkalite side's peak stays its own)
        sys.path.insert(
            0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "support")
        )
        from helpers import produce_all

        failed = []
        p = ck.Producer(
            {
                "bootstrap.servers": target,
                "acks": 1,
                "delivery.report.only.error": True,
                "on_delivery": lambda err, msg: failed.append(err),
            }
        )
        produce_all(p, topic, VALUE, keys)
        if p.flush(60) or failed:
            raise SystemExit(f"confluent producer: {len(failed)} records failed")
    seconds = time.perf_counter() - began
    stop.set()
    sampler.join()
    peak_file[0] = max(peak_file[0], _status_kb("RssFile"))
    return {
        "vmhwm_mb": _status_kb("VmHWM") / 1024,
        "rss_file_peak_mb": peak_file[0] / 1024,
        "seconds": seconds,
    }


if __name__ == "__main__":
    what, kind, target, topic, count = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    if what == "latency":
        lat = (latency_kafkalite if kind == "kafkalite" else latency_confluent)(target, topic, count)
        print(" ".join(f"{x:.1f}" for x in lat), flush=True)
    else:
        print(json.dumps(rss(kind, target, topic, count)), flush=True)
