"""kafkalite.aio against the sync API and against aiokafka on the served path, in one run:
records/s of producing (``send`` per record, then ``flush``) and of consuming (iteration from
the start of a topic) N records with 8-byte keys and 100-byte values, one partition.

    python benches/bench_aio.py [--records 200000] [--rounds 3] [--out benches/results]

Rows: the sync ``Producer``/``Consumer``; ``AIOProducer.send`` (awaited per record, the
returned futures checked after ``flush``) and ``async for`` over an ``AIOConsumer``; aiokafka's
``AIOKafkaProducer.send`` / ``async for`` over ``AIOKafkaConsumer`` against ``kafkalite serve``
(a separate process on 127.0.0.1), when aiokafka is installed (the ``bench`` extra). Each
figure is the median of --rounds, each round on a fresh data directory.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kafkalite import Admin, Consumer, Producer
from kafkalite.aio import AIOConsumer, AIOProducer
from report import machine, write_report

HERE = Path(__file__).resolve().parent
# tests/support/: serve_proc.py: how the tests start `kafkalite serve`
sys.path.insert(0, str(HERE.parent / "tests" / "support"))
from serve_proc import start_serve  # noqa: E402

VALUE = b"v" * 100
TOPIC = "bench"


def keys(n: int) -> list[bytes]:
    return [i.to_bytes(8, "big") for i in range(n)]


def fresh(work: str) -> str:
    data = tempfile.mkdtemp(dir=work)
    Admin(data).create_topic(TOPIC, 1)
    return data


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    os.sync()
    began = time.perf_counter()
    count = fn()
    return time.perf_counter() - began, count


def sync_produce(data: str, n: int) -> int:
    ks = keys(n)
    with Producer(data) as p:
        futures = [p.send(TOPIC, VALUE, key=k) for k in ks]
        p.flush()
    assert all(f.succeeded() for f in futures)
    return n


def sync_consume(data: str, n: int) -> int:
    got = 0
    with Consumer(data, TOPIC, auto_offset_reset="earliest", consumer_timeout_ms=2000) as c:
        for _ in c:
            got += 1
            if got == n:
                break
    return got


async def aio_produce(data: str, n: int) -> int:
    ks = keys(n)
    async with AIOProducer(data) as p:
        futures = [await p.send(TOPIC, VALUE, key=k) for k in ks]
        await p.flush()
    await asyncio.sleep(0)  # the last resolutions reach their futures
    assert all(f.done() and f.exception() is None for f in futures)
    return n


async def aio_consume(data: str, n: int) -> int:
    got = 0
    async with AIOConsumer(TOPIC, path=data, auto_offset_reset="earliest") as c:
        async for _ in c:
            got += 1
            if got == n:
                break
    return got


async def aiokafka_produce(bootstrap: str, n: int) -> int:
    from aiokafka import AIOKafkaProducer

    ks = keys(n)
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await p.start()
    try:
        futures = [await p.send(TOPIC, VALUE, key=k) for k in ks]
        await p.flush()
        await asyncio.gather(*futures)
    finally:
        await p.stop()
    return n


async def aiokafka_consume(bootstrap: str, n: int) -> int:
    from aiokafka import AIOKafkaConsumer

    got = 0
    c = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await c.start()
    try:
        async for _ in c:
            got += 1
            if got == n:
                break
    finally:
        await c.stop()
    return got


def run_rounds(name: str, rounds: int, n: int, one: Callable[[], tuple[float, int]]) -> float:
    rates = []
    for _ in range(rounds):
        seconds, count = one()
        assert count == n, f"{name}: {count} of {n} records"
        rates.append(n / seconds)
    rate = statistics.median(rates)
    print(f"{name}: {rate:,.0f} records/s", flush=True)
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results"))
    opts = ap.parse_args()
    n, rounds = opts.records, opts.rounds
    load_before = os.getloadavg()
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as work:
        produced: list[str] = []

        def produce_sync() -> tuple[float, int]:
            data = fresh(work)
            produced.append(data)
            return timed(lambda: sync_produce(data, n))

        def produce_aio() -> tuple[float, int]:
            data = fresh(work)
            return timed(lambda: asyncio.run(aio_produce(data, n)))

        results["sync Producer.send"] = run_rounds("sync Producer.send", rounds, n, produce_sync)
        results["AIOProducer.send"] = run_rounds("AIOProducer.send", rounds, n, produce_aio)
        source = produced[0]
        results["sync Consumer iteration"] = run_rounds(
            "sync Consumer iteration", rounds, n, lambda: timed(lambda: sync_consume(source, n))
        )
        results["AIOConsumer async for"] = run_rounds(
            "AIOConsumer async for", rounds, n, lambda: timed(lambda: asyncio.run(aio_consume(source, n)))
        )
        try:
            import aiokafka  # noqa: F401
        except ImportError:
            print("aiokafka is not installed (pip install 'kafkalite[bench]'): its rows are left out")
        else:
            served = os.path.join(work, "served")
            os.mkdir(served)
            proc, bootstrap = start_serve(
                lambda *a, **kw: subprocess.Popen([sys.executable, "-m", *a], **kw),
                served,
                "--log-level",
                "WARNING",
            )
            try:
                Admin(served).create_topic(TOPIC, 1)
                results["aiokafka send (kafkalite serve)"] = run_rounds(
                    "aiokafka send (kafkalite serve)",
                    rounds,
                    n,
                    lambda: timed(lambda: asyncio.run(aiokafka_produce(bootstrap, n))),
                )
                results["aiokafka async for (kafkalite serve)"] = run_rounds(
                    "aiokafka async for (kafkalite serve)",
                    rounds,
                    n,
                    lambda: timed(lambda: asyncio.run(aiokafka_consume(bootstrap, n))),
                )
            finally:
                proc.kill()
                proc.wait()
    load_after = os.getloadavg()
    date = datetime.date.today().isoformat()
    command = f"python benches/bench_aio.py --records {n} --rounds {rounds}"
    lines = [
        f"# kafkalite.aio, {date}",
        "",
        f"`{command}`: {n:,} records (8-byte key, 100-byte value), one partition, median of {rounds} rounds.",
        f"Machine: {machine()}. Load average {load_before[0]:.2f} before, {load_after[0]:.2f} after.",
        "aiokafka rows: aiokafka against `kafkalite serve` in another process on 127.0.0.1; "
        "each consume round reads the first N records its produce rounds wrote.",
        "",
        "| path | records/s |",
        "|---|---:|",
        *(f"| {name} | {rate:,.0f} |" for name, rate in results.items()),
    ]
    write_report(opts.out, f"aio-{date}", {"records": n, "rounds": rounds, "records_per_s": results}, lines)


if __name__ == "__main__":
    main()
