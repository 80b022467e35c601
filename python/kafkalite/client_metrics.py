"""Client metrics: what ``Producer.metrics()`` and ``Consumer.metrics()`` return (kafka-python's
shape, ``{group: {name: value}}``, with its metric names), and confluent-kafka's ``stats_cb``
(a JSON str every ``statistics_interval_ms``, librdkafka's field names).

Nothing here runs per record: the producer counts per batch (natively, as its accumulator hands
a batch to be appended, ``Accumulator.taken``), the consumer per poll. Rates are averages since
the client was created (kafka-python's are over its last 30-60 s)."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("kafkalite.metrics")


def rate(total: float, since: float) -> float:
    """Per second since ``since`` (a ``time.monotonic()``)."""
    return total / max(time.monotonic() - since, 1e-3)


def avg(total: float, count: float) -> float:
    return total / count if count else 0.0


class StatsReporter:
    """Calls ``stats_cb(json_str)`` every ``statistics_interval_ms`` (0: never) with what
    ``build()`` returns, from whichever thread calls ``maybe_report``. A raising callback is
    logged and the caller carries on."""

    def __init__(self, config: dict[str, Any], kind: str, build: Callable[[], dict[str, Any]]) -> None:
        self.callback = config["stats_cb"]
        interval = config["statistics_interval_ms"]
        self.interval = interval / 1000.0 if self.callback is not None and interval > 0 else None
        self.kind = kind
        self.name = config["client_id"] or f"kafkalite-{kind}-{os.getpid()}"
        self.build = build
        self.started = time.monotonic()
        self.due = self.started + (self.interval or 0.0)

    def timeout(self, now: float) -> float | None:
        """Seconds until the next report (None: none are made)."""
        return None if self.interval is None else max(0.0, self.due - now)

    def maybe_report(self) -> None:
        if self.interval is None:
            return
        now = time.monotonic()
        if now < self.due:
            return
        self.due = now + self.interval
        try:
            stats = {
                "name": self.name,
                "client_id": self.name,
                "type": self.kind,
                "ts": int(now * 1_000_000),
                "time": int(time.time()),
                "age": int((now - self.started) * 1_000_000),
                **self.build(),
            }
            self.callback(json.dumps(stats))
        except Exception:
            logger.exception(
                "the %s's stats_cb failed (it is called again in %s s)", self.kind, self.interval
            )
