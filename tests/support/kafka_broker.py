"""A real Apache Kafka broker for the tests marked ``broker``: one KRaft node (broker and
controller in one JVM) listening on 127.0.0.1 only, started and stopped by the test.

The jars come from Maven Central through ``tests/broker/pom.xml`` (``maven_jars.py``) into a cache folder
(``$KAFKALITE_KAFKA_JARS``, default ``~/.cache/kafkalite/kafka_2.13-<version>``); `.ci/run`
fetches them, and a test run outside CI without them (or without Java/Maven) skips the broker
tests with the reason. ``dump_log_segments`` runs Kafka's own ``DumpLogSegments`` tool, the
reference for what a broker accepts on disk."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import maven_jars

KAFKA_VERSION = "4.1.1"
POM = Path(__file__).parents[1] / "broker" / "pom.xml"
JVM_HEAP = "-Xmx512m"


def commit_as_group(
    bootstrap_servers: str, topic: str, group_id: str, read: int, commits: list[tuple[int, str]]
) -> None:
    """kafka-python's consumer joins ``group_id`` through the broker's coordinator, reads ``read``
    records of ``topic`` from the earliest, commits each ``(offset, metadata)`` of ``commits``
    for partition 0 in order, and leaves: the group coordinator's records for the tests."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    )
    for n, _ in enumerate(consumer, 1):
        if n == read:
            break
    for offset, metadata in commits:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, metadata, -1)})
    consumer.close()


def jars_dir() -> Path:
    default = Path.home() / ".cache" / "kafkalite" / f"kafka_2.13-{KAFKA_VERSION}"
    return Path(os.environ.get("KAFKALITE_KAFKA_JARS", default))


def ensure_jars() -> Path:
    """The broker's classpath folder, fetched with Maven when missing. Raises RuntimeError
    saying what is missing."""
    return maven_jars.copy_dependencies(POM, jars_dir(), **{"kafka.version": KAFKA_VERSION})


def require_jars() -> Path:
    """``ensure_jars`` for a test: skip when the broker cannot be had, except in CI, where a
    missing broker is a failure (CI installs what it needs)."""
    return maven_jars.require(ensure_jars)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_kafka_class(main: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's JVM entry points (a tool) with the broker's classpath."""
    cmd = ["java", JVM_HEAP, "-cp", str(require_jars() / "*"), main, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def dump_log_segments(*files: str | os.PathLike[str]) -> str:
    """Kafka's DumpLogSegments with ``--deep-iteration --index-sanity-check`` (no broker needs
    to run). Returns its output; RuntimeError if the tool fails."""
    args = ["--deep-iteration", "--index-sanity-check", "--files", ",".join(map(str, files))]
    done = run_kafka_class("kafka.tools.DumpLogSegments", *args)
    if done.returncode != 0:
        raise RuntimeError(f"DumpLogSegments failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout + done.stderr


class KafkaBroker:
    """One KRaft node over ``log_dir``. ``start()`` formats the directory on first use (as
    ``kafka-storage.sh format`` does) and returns once the listener accepts connections."""

    def __init__(
        self, log_dir: str | os.PathLike[str], work_dir: str | os.PathLike[str], **config: str
    ) -> None:
        self.jars = require_jars()
        self.log_dir = Path(log_dir)
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.controller_port = _free_port()
        self.config = config
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _properties(self) -> Path:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "50",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.partitions": "1",
            **self.config,
        }
        path = self.work_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def format(self) -> Path:
        """Write the properties and format the log directory on first use (``kafka-storage.sh
        format``); returns the properties file. ``start`` calls it; a caller timing the broker's
        start calls it first, so the timing is the broker process's alone."""
        props = self._properties()  # new ports are fine: KRaft keeps them only in this file
        if not (self.log_dir / "meta.properties").exists():
            cluster_id = "-"
            while cluster_id.startswith("-"):  # as Kafka's Uuid.randomUuid: a leading '-' reads as an option
                cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            done = run_kafka_class("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props))
            if done.returncode != 0:
                raise RuntimeError(f"formatting {self.log_dir} failed:\n{done.stdout}{done.stderr}")
        return props

    def start(self, timeout: float = 90) -> KafkaBroker:
        props = self.format()
        log = open(self.work_dir / "broker.log", "ab")
        self.process = subprocess.Popen(
            ["java", JVM_HEAP, "-cp", str(self.jars / "*"), "kafka.Kafka", str(props)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the broker exited with {self.process.returncode}:\n{self.broker_log()[-3000:]}"
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the broker did not listen within {timeout} s:\n{self.broker_log()[-3000:]}")

    def broker_log(self) -> str:
        path = self.work_dir / "broker.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, timeout: float = 60) -> None:
        """Controlled shutdown (SIGTERM): the broker flushes, writes its checkpoints and
        `.kafka_cleanshutdown`, as an operator's stop would."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
