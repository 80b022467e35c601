"""Static membership (issue 24 item 2): a group member is killed with SIGKILL and restarted; how
long until the group is whole again, and what the other member saw. Two members share a
4-partition topic; the restarted one is static (``group_instance_id``) or dynamic. Over
``kafkalite serve`` with kafka-python members, and embedded with ``kafkalite.Consumer`` members.

Per round: seconds from the restart to the moment both members hold one generation covering
every partition, the generations that passed, and the rebalances the other member went through.

  python benches/bench_static_rejoin.py [--rounds 3] [--session-ms 10000] [--out benches/results]
"""

from __future__ import annotations

import argparse
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date

from kafkalite import Admin
from kafkalite.server import Server
from report import machine, write_report

TOPIC = "t"
PARTITIONS = 4
GROUP = "g"

#: Both members print "ASSIGN <generation> <partition,...>" per assignment and poll until killed.
#: Instance id "-" means a dynamic member.
KAFKA_PYTHON_MEMBER = """
import sys
from kafka import KafkaConsumer, ConsumerRebalanceListener
bootstrap, topic, group, instance, session_ms = sys.argv[1:6]
consumer = None
class Report(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked):
        pass
    def on_partitions_assigned(self, assigned):
        parts = ",".join(str(p) for p in sorted(tp.partition for tp in assigned))
        print("ASSIGN", consumer._coordinator._generation.generation_id, parts, flush=True)
consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                         group_instance_id=None if instance == "-" else instance,
                         session_timeout_ms=int(session_ms), heartbeat_interval_ms=500, enable_auto_commit=False)
consumer.subscribe([topic], listener=Report())
while True:
    consumer.poll(timeout_ms=100)
"""

EMBEDDED_MEMBER = """
import sys
from kafkalite import Consumer
data, topic, group, instance, session_ms = sys.argv[1:6]
consumer = Consumer(data, group_id=group, group_instance_id=None if instance == "-" else instance,
                    session_timeout_ms=int(session_ms), heartbeat_interval_ms=500, enable_auto_commit=False)
class Report:
    def on_partitions_revoked(self, revoked):
        pass
    def on_partitions_assigned(self, assigned):
        print("ASSIGN", consumer._member.generation, ",".join(str(tp.partition) for tp in consumer.assignment()),
              flush=True)
consumer.subscribe([topic], listener=Report())
while True:
    consumer.poll(timeout_ms=50)
"""


class Member:
    def __init__(self, source: str, target: str, instance: str, session_ms: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", source, target, TOPIC, GROUP, instance, str(session_ms)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.reports: queue.Queue[tuple[int, list[int]]] = queue.Queue()
        self.last: tuple[int, list[int]] | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            _, generation, parts = (line.rstrip("\n").split(" ", 2) + [""])[:3]
            self.reports.put((int(generation), [int(p) for p in parts.split(",") if p]))

    def drain(self) -> int:
        """Take the reports that came; how many."""
        n = 0
        while not self.reports.empty():
            self.last = self.reports.get()
            n += 1
        return n

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def whole(a: Member, b: Member) -> bool:
    if a.last is None or b.last is None:
        return False
    return a.last[0] == b.last[0] and sorted(a.last[1] + b.last[1]) == list(range(PARTITIONS))


def wait_whole(a: Member, b: Member, timeout: float) -> int:
    """Until both members hold one generation covering the topic; a's reports meanwhile."""
    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        seen += a.drain()
        b.drain()
        if whole(a, b):
            return seen
        if time.monotonic() > deadline:
            raise RuntimeError(f"the group was not whole within {timeout} s: a={a.last} b={b.last}")
        time.sleep(0.01)


def run(where: str, static: bool, rounds: int, session_ms: int) -> dict:
    with tempfile.TemporaryDirectory() as path:
        Admin(path).create_topic(TOPIC, partitions=PARTITIONS)
        server = Server(path) if where == "server" else None
        source = KAFKA_PYTHON_MEMBER if server is not None else EMBEDDED_MEMBER
        target = server.bootstrap_servers if server is not None else path

        def start(instance: str) -> Member:
            return Member(source, target, instance if static else "-", session_ms)

        a, b = start("a"), start("b")
        try:
            wait_whole(a, b, 120)
            out = []
            for _ in range(rounds):
                assert a.last is not None
                generation = a.last[0]
                b.kill()
                started = time.monotonic()
                b = start("b")
                rebalances = wait_whole(a, b, session_ms / 1000 * 3 + 60)
                assert a.last is not None
                out.append(
                    {
                        "seconds": time.monotonic() - started,
                        "generations": a.last[0] - generation,
                        "rebalances_of_the_other": rebalances,
                    }
                )
                time.sleep(1)
            return {"where": where, "static": static, "rounds": out}
        finally:
            a.kill()
            b.kill()
            if server is not None:
                server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--session-ms", type=int, default=10_000)
    parser.add_argument("--out", default="benches/results")
    opts = parser.parse_args()
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    results = [run(w, s, opts.rounds, opts.session_ms) for w in ("server", "embedded") for s in (True, False)]
    lines = [
        f"# Static membership: restart of a SIGKILLed member ({date.today()})",
        "",
        f"`python benches/bench_static_rejoin.py --rounds {opts.rounds} --session-ms {opts.session_ms}`; "
        f"{machine()}; load before the run {load}.",
        "",
        "| where | member | restart → group whole again (median, max) | generations per restart | rebalances of the other member per restart |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        secs = [x["seconds"] for x in r["rounds"]]
        lines.append(
            f"| {r['where']} | {'static' if r['static'] else 'dynamic'} | "
            f"{statistics.median(secs):.2f} s, {max(secs):.2f} s | "
            f"{', '.join(str(x['generations']) for x in r['rounds'])} | "
            f"{', '.join(str(x['rebalances_of_the_other']) for x in r['rounds'])} |"
        )
    write_report(opts.out, f"static-rejoin-{date.today()}", {"load": load, "results": results}, lines)


if __name__ == "__main__":
    main()
