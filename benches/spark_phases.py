"""Where a Spark query over kafkalite spends its time, phase by phase, for
``bench_spark.py phases``: Spark's own event log (SQL execution, jobs, tasks) merged with
timestamps taken inside kafkalite's source in the Python processes Spark runs it in (the
planner worker's ``reader()``/``pushFilters()``/``partitions()``, each task's ``read()``).

``format("kafkalite_traced")`` is kafkalite's source with those timestamps; Spark's Python
workers import this module, so ``benches/`` must be on their PYTHONPATH and
``KAFKALITE_PHASES_TRACE`` names the file they append to (both set before the session starts).
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

from kafkalite.spark.source import (
    KafkaliteDataSource,
    KafkalitePushdownReader,
    KafkaliteReader,
)

TRACE_ENV = "KAFKALITE_PHASES_TRACE"


def mark(event: str, **fields: Any) -> None:
    """One timestamp (epoch ms, as Spark's event log) from whichever process runs this."""
    path = os.environ.get(TRACE_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"t": time.time() * 1000, "pid": os.getpid(), "ev": event, **fields}) + "\n")


class _Traced:
    def partitions(self) -> list:
        mark("partitions<")
        tasks = super().partitions()  # type: ignore[misc]
        mark("partitions>", tasks=len(tasks))
        return tasks

    def read(self, partition: Any) -> Iterator[Any]:
        mark("read<")
        rows = 0
        for batch in super().read(partition):  # type: ignore[misc]
            rows += batch.num_rows
            yield batch
        mark("read>", rows=rows)


class TracedReader(_Traced, KafkaliteReader):
    pass


class TracedPushdownReader(_Traced, KafkalitePushdownReader):
    def pushFilters(self, filters: list[Any]) -> Any:
        mark("pushFilters<")
        kept = list(super().pushFilters(filters))
        mark("pushFilters>", kept=len(kept))
        return kept


class TracedSource(KafkaliteDataSource):
    @classmethod
    def name(cls) -> str:
        return "kafkalite_traced"

    def reader(self, schema: Any) -> KafkaliteReader:
        mark("reader<")
        plain = super().reader(schema)
        cls = TracedPushdownReader if isinstance(plain, KafkalitePushdownReader) else TracedReader
        reader = cls(plain.schema, plain.options)
        mark("reader>")
        return reader


def _spark_events(event_dir: str) -> list[tuple[float, str]]:
    """(epoch ms, what) of the SQL executions, jobs and tasks in the session's event log."""
    [path] = glob.glob(os.path.join(event_dir, "*"))
    out = []
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            kind = e["Event"]
            if kind.endswith("SQLExecutionStart"):
                out.append((e["time"], "sql start"))
            elif kind == "SparkListenerJobStart":
                out.append((e["Submission Time"], "job start"))
            elif kind == "SparkListenerJobEnd":
                out.append((e["Completion Time"], "job end"))
            elif kind == "SparkListenerTaskStart":
                out.append((e["Task Info"]["Launch Time"], "task launch"))
            elif kind == "SparkListenerTaskEnd":
                out.append((e["Task Info"]["Finish Time"], "task end"))
    return out


#: The phases of one count() query, in order; "ours" marks the time spent in kafkalite's code.
PHASES = [
    ("load(): Python planner creates the source, schema()", False),
    ("analysis until reader() (JVM, planner worker handoff)", False),
    ("reader(), pushFilters(), partitions() (ours, planner worker)", True),
    ("plan to job 1 (JVM physical planning, codegen, AQE stage)", False),
    ("job 1, task launch to read() (Python worker gets task)", False),
    ("job 1, read(): index lookups, decode, Arrow (ours) + JVM consuming", True),
    ("job 1, read() end to task end (worker ends, JVM drains)", False),
    ("job 1, first task end to job end (further tasks, stage end)", False),
    ("between jobs (AQE re-plans the final stage)", False),
    ("job 2 (final count over the shuffle)", False),
    ("count() returns to the driver", False),
]


#: What a source without timestamps inside (Spark's range, the minimal source) shows instead.
PLANNING = "planning until job 1 (JVM and Python planner)"
JOB_1 = "job 1 (tasks)"
TASKS = "tasks in job 1"
TOTAL = "total"
ORDER = [p for p, _ in PHASES[:4]] + [PLANNING] + [p for p, _ in PHASES[4:8]] + [JOB_1]
ORDER += [p for p, _ in PHASES[8:]] + [TASKS, TOTAL]


def phases(event_dir: str, trace_path: str, queries: list[tuple[str, float, float, float]]) -> dict:
    """Per query name, each phase's milliseconds per run: ``queries`` holds (name, start,
    DataFrame ready, end) epoch ms from the driver. A phase a query does not have (Python marks
    of a source that has none, a second job) is left out."""
    events = _spark_events(event_dir)
    trace = []
    if os.path.exists(trace_path):
        with open(trace_path) as f:
            trace = [json.loads(line) for line in f]
    out: dict[str, dict[str, list[float]]] = {}
    for name, start, loaded, end in queries:
        spark = [(t, what) for t, what in events if start <= t <= end]
        ours = [(m["t"], m["ev"]) for m in trace if start <= m["t"] <= end]

        def first(what: str, among: list[tuple[float, str]]) -> float | None:
            return next((t for t, w in among if w == what), None)

        def every(what: str, among: list[tuple[float, str]]) -> list[float]:
            return [t for t, w in among if w == what]

        jobs, job_ends = every("job start", spark), every("job end", spark)
        if not jobs or len(job_ends) < len(jobs):
            continue
        row: dict[str, float] = {PHASES[0][0]: loaded - start}
        reader, planned = first("reader<", ours), first("partitions>", ours)
        if reader is not None and planned is not None:
            row[PHASES[1][0]] = reader - loaded
            row[PHASES[2][0]] = planned - reader
            row[PHASES[3][0]] = jobs[0] - planned
        else:
            row[PLANNING] = jobs[0] - loaded
        launches = [t for t in every("task launch", spark) if t <= job_ends[0]]
        task_ends = [t for t in every("task end", spark) if t <= job_ends[0]]
        reads, read_ends = every("read<", ours), every("read>", ours)
        if reads and read_ends and launches:
            row[PHASES[4][0]] = reads[0] - launches[0]
            row[PHASES[5][0]] = read_ends[0] - reads[0]
            row[PHASES[6][0]] = min(task_ends) - read_ends[0]
            row[PHASES[7][0]] = job_ends[0] - min(task_ends)
        else:
            row[JOB_1] = job_ends[0] - jobs[0]
        if len(jobs) > 1:
            row[PHASES[8][0]] = jobs[1] - job_ends[0]
            row[PHASES[9][0]] = job_ends[1] - jobs[1]
        row[PHASES[10][0]] = end - job_ends[-1]
        row[TASKS] = len(launches)
        row[TOTAL] = end - start
        for phase, ms in row.items():
            out.setdefault(name, {}).setdefault(phase, []).append(ms)
    return out


def table(result: dict[str, dict[str, list[float]]], names: list[str]) -> list[str]:
    """Markdown: one column per query, the median of its runs per phase."""
    ours = {p for p, mine in PHASES if mine}
    rows = [p for p in ORDER if any(p in result.get(q, {}) for q in names)]
    lines = ["| phase (median ms) | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for p in rows:
        cells = []
        for q in names:
            v = result.get(q, {}).get(p)
            cells.append("" if v is None else f"{statistics.median(v):.0f}")
        label = f"**{p}**" if p in ours or p == TOTAL else p
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines
