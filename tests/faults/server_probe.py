"""The probe of the server suite: a process that asks ``kafkalite serve`` small questions all
run long, each kind on its own connection and thread (Kafka answers a connection's requests in
order, so one slow kind must not delay another's measurement), and journals every answer's
latency (``probe``: kind, t0, latency_s, outcome, errors):

- ``api_versions``        ApiVersions on a connection kept open, every 100-200 ms
- ``api_versions_fresh``  connect + ApiVersions on a new connection, every 100-200 ms
- ``metadata``            Metadata of the suite's topics (no auto-creation)
- ``produce``             Produce acks=-1 (timeout_ms PRODUCE_TIMEOUT_MS) to a partition that
                          embedded producers hold locks on
- ``fetch``               Fetch of such a partition (max_wait_ms 500)
- ``offset_fetch``        OffsetFetch of the embedded and the network groups (group locks)

With ``--user`` every connection logs in (SASL/SCRAM-SHA-256) before its first request, the
login counted in that request's latency.

Outcomes: ``ok`` (an answer, maybe with an error code: a retriable error is an answer),
``late`` (none within the kind's bound + LATE_GRACE_S; the connection is dropped),
``closed`` (the server closed or reset the connection), ``refused`` (connect failed). The
bounds are the checker's (``server_checker.BOUNDS``)."""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import server_wire as W

from faults.journal import Journal, Stop, now
from faults.server_checker import BOUNDS

STOP = Stop()
LATE_GRACE_S = 3.0  # waited past the bound, so a late answer's latency is measured, not cut at the bound
PRODUCE_TIMEOUT_MS = 5000


def probe_loop(
    kind: str,
    address: str,
    journal: Journal,
    rng: random.Random,
    request: Callable[[], Any],
    fresh: bool,
    pause: tuple[float, float],
    login: tuple[str, str] | None = None,
) -> None:
    bound = BOUNDS[kind]
    wire: W.Wire | None = None
    while not STOP.requested:
        t0 = now()
        started = time.monotonic()
        outcome, errors = "ok", []
        try:
            if wire is None:
                wire = W.Wire(address, timeout=bound + LATE_GRACE_S, client_id=f"probe-{kind}")
                if login is not None and wire.login(*login):
                    raise W.Closed(f"{login[0]} not authenticated")
            errors = W.errors_of(wire.call(request(), bound + LATE_GRACE_S))
        except W.Late:
            outcome = "late"
        except W.Closed:
            outcome = "closed"
        except OSError:  # connect refused or timed out: the server is down (or refuses)
            outcome = "refused" if wire is None else "closed"
        latency = time.monotonic() - started
        if outcome != "ok" or fresh:
            if wire is not None:
                wire.close()
            wire = None
        journal.write(
            "probe",
            kind=kind,
            t0=t0,
            latency_s=round(latency, 4),
            outcome=outcome,
            errors=sorted(set(errors)),
        )
        time.sleep(rng.uniform(*pause) if outcome in ("ok", "late") else 0.2)
    if wire is not None:
        wire.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--topics", required=True, help="comma-separated topic:partitions")
    parser.add_argument("--hot", required=True, help="topic:partition the embedded producers write")
    parser.add_argument("--groups", required=True, help="comma-separated")
    parser.add_argument("--user", help="a SASL/SCRAM server's user each connection logs in as")
    parser.add_argument("--password", default="")
    args = parser.parse_args()
    journal = Journal(args.journal, fsync=False)
    rng = random.Random(args.seed)
    topics = [t.split(":")[0] for t in args.topics.split(",")]
    hot_topic, hot_part = args.hot.rsplit(":", 1)
    hot = (hot_topic, int(hot_part))
    value = b"probe"
    kinds: dict[str, tuple[Callable[[], Any], bool, tuple[float, float]]] = {
        "api_versions": (W.api_versions, False, (0.1, 0.2)),
        "api_versions_fresh": (W.api_versions, True, (0.1, 0.2)),
        "metadata": (lambda: W.metadata(topics), False, (0.2, 0.4)),
        "produce": (lambda: W.produce(*hot, W.record_batch([value]), PRODUCE_TIMEOUT_MS), False, (0.2, 0.4)),
        "fetch": (lambda: W.fetch([(*hot, 0)], 500, 1 << 20, 1 << 20), False, (0.2, 0.4)),
        "offset_fetch": (
            lambda: W.offset_fetch(rng.choice(args.groups.split(",")), [hot]),
            False,
            (0.2, 0.4),
        ),
    }
    login = None if args.user is None else (args.user, args.password)
    threads = [
        threading.Thread(
            target=probe_loop,
            args=(kind, args.bootstrap, journal, random.Random(rng.random()), req, fresh, pause, login),
            name=kind,
            daemon=True,
        )
        for kind, (req, fresh, pause) in kinds.items()
    ]
    for t in threads:
        t.start()
    while not STOP.requested:
        time.sleep(0.1)
    for t in threads:
        t.join(timeout=max(BOUNDS.values()) + LATE_GRACE_S + 1)
    journal.write("closed")


if __name__ == "__main__":
    main()
