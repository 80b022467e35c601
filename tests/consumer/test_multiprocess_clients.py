"""Producers and consumers in separate processes, with no broker: every record arrives
exactly once per consumer, each producer's order holds, the files stay valid Kafka, a
consumer wakes for a record produced after it began waiting, and the CLI round-trips."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from conftest import kafka_python_records
from helpers import run_cli
from kafkalite import Admin, Producer


@pytest.mark.slow
def test_four_producer_processes_two_consumer_processes(tmp_path, spawn):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("events", partitions=2)
    per_producer, producers_n = 100_000, 4
    total = per_producer * producers_n
    outs = [str(tmp_path / f"consumer{i}.txt") for i in range(2)]
    consumers = [
        spawn("consumer_proc.py", data_dir, "events", total, out, stdout=subprocess.PIPE, text=True)
        for out in outs
    ]
    for c in consumers:
        assert c.stdout.readline().strip() == "ready"
    producers = [
        spawn("producer_proc.py", data_dir, "events", pid, per_producer, stdout=subprocess.PIPE, text=True)
        for pid in range(producers_n)
    ]
    for p in producers:
        p.wait(timeout=300)
        assert p.returncode == 0
    for c in consumers:
        c.wait(timeout=300)
        assert c.returncode == 0
    for out in outs:
        lines = [line.split() for line in open(out)]
        assert len(lines) == total, f"{out}: {len(lines)} of {total} records"
        seen = {(int(p), int(o)) for p, o, _, _ in lines}
        assert len(seen) == total, "a record arrived twice"
        last_seq: dict[int, int] = {}
        for _, _, value, _ in lines:  # each producer's records in its own order
            pid, seq = map(int, value.split(":"))
            assert seq == last_seq.get(pid, -1) + 1, f"producer {pid}: {seq} after {last_seq.get(pid)}"
            last_seq[pid] = seq
        assert last_seq == {pid: per_producer - 1 for pid in range(producers_n)}
    for partition in (0, 1):
        records = kafka_python_records(os.path.join(data_dir, f"events-{partition}"))
        assert [r[0] for r in records] == list(range(len(records)))


@pytest.mark.serial  # woken within 0.5 s of the send: the guarantee
def test_a_waiting_consumer_wakes_for_a_new_record(tmp_path, spawn):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", partitions=1)
    out = str(tmp_path / "c.txt")
    consumer = spawn("consumer_proc.py", data_dir, "t", 1, out, stdout=subprocess.PIPE, text=True)
    assert consumer.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # the consumer is now asleep in poll()
    with Producer(data_dir) as p:
        sent = time.time()
        p.send("t", b"wake up").get(5)
    consumer.wait(timeout=30)
    line = open(out).read().split()
    assert line[2] == "wake" and float(line[-1]) - sent < 0.5, (
        f"woke {float(line[-1]) - sent:.3f} s after the send"
    )


@pytest.mark.slow
def test_cli_produce_pipes_into_consume(tmp_path):
    env = {**os.environ, "KAFKALITE_DATA_DIR": str(tmp_path / "data")}

    def run(*args, **kw):
        return run_cli(*args, env=env, **kw)

    assert run("topics", "create", "lines", "--partitions", "1").returncode == 0
    text = "".join(f"key{i}\tline {i}\n" for i in range(1000)).encode()
    produced = run("produce", "lines", "--key-separator", "\t", input=text)
    assert produced.returncode == 0, produced.stderr
    consumed = run("consume", "lines", "--from-beginning")
    assert consumed.returncode == 0
    assert consumed.stdout.decode().splitlines() == [f"line {i}" for i in range(1000)]
    as_json = run("consume", "lines", "--from-beginning", "--format", "json", "--max-messages", "1")
    assert b'"key": "key0"' in as_json.stdout
    assert run("consume", "nope").returncode == 1
    bad = run("topics", "create", "../escape")
    assert bad.returncode == 1 and b"invalid" in bad.stderr
    assert not os.path.exists(tmp_path / "escape-0")
    for cmd in (
        ["--help"],
        ["topics", "--help"],
        ["produce", "--help"],
        ["consume", "--help"],
        ["dump-log", "--help"],
        ["demo", "--help"],
    ):
        assert run(*cmd).returncode == 0
    dump = run("dump-log", str(tmp_path / "data" / "lines-0"))
    assert dump.returncode == 0 and b"baseOffset: 0" in dump.stdout and b"isValid: true" in dump.stdout
    log_file = tmp_path / "data" / "lines-0" / "00000000000000000000.log"
    damaged = bytearray(log_file.read_bytes())
    damaged[100] ^= 0xFF
    log_file.write_bytes(bytes(damaged))
    dump = run("dump-log", str(tmp_path / "data" / "lines-0"))
    assert dump.returncode == 1 and b"isValid: false" in dump.stdout
