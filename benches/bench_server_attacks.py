"""An authenticated client's Produce and Fetch latency on `kafkalite serve` with SASL/SCRAM and the
authorizer on, quiet and under each of issue 35's attacks (target: p99 within 2x of quiet).

The server is the soak suite's authenticated configuration (tests/faults/server_controller.py:
AUTH_SERVE_FLAGS, ~2,000 SCRAM users, mallory allowed to read the big topic) and each attack is
that suite's own episode, run as it runs there: `python -m faults.server_attacks ATTACK --seconds S`
in its own process (tests/faults/server_attacks.py: scram_flood, preauth_stall, silent, per_ip,
unread_fetch, coordinator_denied; and connect_flood, scram_flood's connections asking ApiVersions
instead, which tells what SCRAM costs from what the connections cost). The measured client logs in as admin on two connections: one
sends Produce v3 acks=-1 of one record every 20 ms, the other Fetch v4 (no wait, 1 MiB) of a
partition of 100 records that does not grow, every 20 ms. A phase measures from 1.5 s after its
attack starts until the attack's end; `quiet` comes first and again last (`quiet_after`: the
drift of the run). Each phase also reports the CPU the server and the attacker's process used
(cores: CPU seconds per second of the phase), since on 2 shared cores an attacker's own CPU
delays the server as much as the work it causes there.

With `--ip-connection-rate N` the attackers' address (127.0.0.1, the measured client's too, which
connects before the attacks) has Kafka's `connection_creation_rate` quota N (KIP-612): connections
over it are closed unserved; `--attacks` runs only the phases named.

  python benches/bench_server_attacks.py [--seconds 12] [--name server-attacks-DATE]
      [--attacks scram_flood,connect_flood] [--ip-connection-rate 100]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
# tests/ for faults/, tests/support/ for serve_proc.py, server_wire.py: what the soak suite uses
sys.path[:0] = [str(TESTS), str(TESTS / "support")]

import kafkalite  # noqa: E402
import kafkalite.quotas  # noqa: E402
from bench_server_isolation import summary  # noqa: E402
from faults import server_controller as C  # noqa: E402
from faults.server_attacks import AUTHENTICATION_DEADLINE_S, DEADLINE_SLACK_S  # noqa: E402
from report import write_report  # noqa: E402
from serve_proc import start_serve  # noqa: E402
from server_wire import Wire  # noqa: E402

ATTACKS = (*C.AUTH_EPISODES, "connect_flood")  # connect_flood: scram_flood without SCRAM, its control
WARMUP_S = 1.5  # the attack opens its connections
PAUSE_S = 0.02
TOPIC, FETCHED = "measured", "fetched"
TICKS = os.sysconf("SC_CLK_TCK")


def start_module(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], **kwargs)


def logged_in(address: str, kind: str) -> Wire:
    """The measured client's connection for `kind`, logged in as admin before the attack starts
    (an established client; under a connection_creation_rate quota of 127.0.0.1 a new one from
    the attackers' address is throttled with them, and for up to the rate's 11 s window after
    a flood: it retries, as a Kafka client reconnects)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            wire = Wire(address, timeout=60, client_id=f"measured-{kind}")
            assert wire.login("admin", C.PASSWORDS["admin"]) == 0, "admin not authenticated"
            return wire
        except (OSError, ConnectionError) as e:
            if time.monotonic() > deadline:
                raise
            print(f"measured {kind}: {e}; reconnecting", file=sys.stderr, flush=True)
            time.sleep(0.5)


def measured(wire: Wire, stop: threading.Event, kind: str, samples: list[float], errors: dict) -> None:
    """One logged-in connection asking `kind` until `stop`; each answer's latency in ms."""
    while not stop.is_set():
        started = time.monotonic()
        error = wire.produce(TOPIC, 0, b"x" * 100) if kind == "produce" else wire.fetch(FETCHED, 0, 0)
        samples.append((time.monotonic() - started) * 1000)
        if error:
            errors[error] = errors.get(error, 0) + 1
        time.sleep(PAUSE_S)
    wire.close()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def phase(address: str, attack: str | None, seconds: float, server_pid: int, journals: str) -> dict:
    argv = [
        "faults.server_attacks", attack or "",
        "--bootstrap", address,
        "--journal", os.path.join(journals, f"{attack}.jsonl"),
        "--seed", "1",
        "--seconds", str(seconds),
        "--big", f"{C.BIG_TOPIC}:0",
        "--groups", f"{C.EMBEDDED_GROUP},{C.NETWORK_GROUP}",
        "--user", "mallory", "--password", C.PASSWORDS["mallory"],
        "--users", str(C.SCRAM_USERS),
        "--per-ip", str(C.PER_IP),
    ]  # fmt: skip
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(TESTS), str(TESTS / "support"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    )
    samples: dict[str, list[float]] = {"produce": [], "fetch": []}
    errors: dict[str, dict] = {"produce": {}, "fetch": {}}
    wires = {kind: logged_in(address, kind) for kind in samples}
    proc = start_module(*argv, env=env) if attack else None
    time.sleep(WARMUP_S)
    stop = threading.Event()
    threads = [
        threading.Thread(target=measured, args=(wires[kind], stop, kind, samples[kind], errors[kind]))
        for kind in samples
    ]
    server_cpu, started = cpu_seconds(server_pid), time.monotonic()
    for t in threads:
        t.start()
    attacker_cpu = 0.0
    if proc is None:
        time.sleep(seconds - WARMUP_S)
    else:
        _, status, usage = os.wait4(proc.pid, 0)  # the attacker's own CPU, all its threads
        proc.returncode = os.waitstatus_to_exitcode(status)
        attacker_cpu = usage.ru_utime + usage.ru_stime
    elapsed = time.monotonic() - started
    server_cores = (cpu_seconds(server_pid) - server_cpu) / elapsed
    stop.set()
    for t in threads:
        t.join(60)
    out: dict = {kind: dict(summary(samples[kind]), errors=errors[kind]) for kind in samples}
    out["server_cores"] = round(server_cores, 2)
    out["attacker_cores"] = round(attacker_cpu / (elapsed + WARMUP_S), 2)
    if attack:
        with open(os.path.join(journals, f"{attack}.jsonl")) as f:
            events = [json.loads(line) for line in f]
        (figures,) = [ev for ev in events if ev["ev"] == "attack"]
        out["attack"] = {k: v for k, v in figures.items() if k not in ("ev", "t", "attack")}
        out["attack_exit"] = proc.returncode if proc else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--name", default=f"server-attacks-{datetime.date.today()}")
    parser.add_argument("--attacks", default=",".join(ATTACKS), help="the attack phases, comma-separated")
    parser.add_argument("--ip-connection-rate", type=int, help="127.0.0.1's connection_creation_rate quota")
    args = parser.parse_args()
    attacks = [a for a in args.attacks.split(",") if a]
    unknown = set(attacks) - set(ATTACKS)
    if unknown:
        parser.error(f"unknown attacks {sorted(unknown)}; known: {', '.join(ATTACKS)}")
    results: dict = {"load_before": os.getloadavg(), "seconds": args.seconds}
    with tempfile.TemporaryDirectory() as data, tempfile.TemporaryDirectory() as journals:
        admin = kafkalite.Admin(data)
        admin.create_topic(TOPIC, 1)
        admin.create_topic(FETCHED, 1)
        admin.create_topic(C.BIG_TOPIC, 1)
        with kafkalite.Producer(data, acks=1) as producer:
            for _ in range((16 << 20) // C.BIG_VALUE):
                producer.send(C.BIG_TOPIC, b"b" * C.BIG_VALUE, partition=0)
            producer.send(TOPIC, b"first", partition=0)
            for _ in range(100):
                producer.send(FETCHED, b"f" * 100, partition=0)
        C.add_users(data)
        if args.ip_connection_rate:
            kafkalite.quotas.alter_quotas(
                data, {"ip": "127.0.0.1"}, {"connection_creation_rate": args.ip_connection_rate}
            )
        flags = (*C.AUTH_SERVE_FLAGS, "--acks-all", "page-cache", "--log-level", "ERROR")
        proc, address = start_serve(start_module, data, *flags)
        try:
            C.grant_mallory(address)
            results["quiet"] = phase(address, None, args.seconds, proc.pid, journals)
            for attack in attacks:
                seconds = args.seconds
                if attack == "silent":  # held past the authentication deadline, as in the soak
                    seconds = max(seconds, AUTHENTICATION_DEADLINE_S + DEADLINE_SLACK_S + 1)
                results[attack] = phase(address, attack, seconds, proc.pid, journals)
                print(attack, {k: results[attack][k] for k in ("produce", "fetch")}, flush=True)
            results["quiet_after"] = phase(address, None, args.seconds, proc.pid, journals)
        finally:
            proc.terminate()
            proc.wait(30)
    results["load_after"] = os.getloadavg()
    quiet = results["quiet"]
    lines = [
        "# An authenticated client's latency under issue 35's attacks",
        "",
        f"`python benches/bench_server_attacks.py {' '.join(sys.argv[1:])}`; load average "
        f"{results['load_before'][0]:.2f} before, {results['load_after'][0]:.2f} after (2 cores shared with "
        "other work). `kafkalite serve --sasl --authorizer` with ~2,000 SCRAM users, `--max-connections-per-ip "
        f"{C.PER_IP}`, `--acks-all page-cache`; the client logs in as admin and sends Produce acks=-1 of one "
        "100-byte record and Fetch (no wait) on two connections, each every 20 ms. Each attack is the soak "
        "suite's episode (tests/faults/server_attacks.py) in its own process. Ratio: p99 / quiet p99 (target <= 2). "
        + (
            f"127.0.0.1's connection_creation_rate quota: {args.ip_connection_rate}/s."
            if args.ip_connection_rate
            else "No connection_creation_rate quota."
        ),
        "",
        "| phase | produce n | p50 ms | p99 ms | ratio | fetch n | p50 ms | p99 ms | ratio | server cores | attacker cores | attack |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("quiet", *attacks, "quiet_after"):
        r = results[name]
        p, f = r["produce"], r["fetch"]
        pr, fr = p["p99_ms"] / quiet["produce"]["p99_ms"], f["p99_ms"] / quiet["fetch"]["p99_ms"]
        r["ratio_p99"] = {"produce": round(pr, 2), "fetch": round(fr, 2)}
        lines.append(
            f"| {name} | {p['count']} | {p['p50_ms']} | {p['p99_ms']} | {pr:.2f} | {f['count']} | {f['p50_ms']} | "
            f"{f['p99_ms']} | {fr:.2f} | {r['server_cores']} | {r['attacker_cores']} | "
            f"{json.dumps(r.get('attack', ''))[:200]} |"
        )
    write_report(str(HERE / "results"), args.name, results, lines)


if __name__ == "__main__":
    main()
