"""Kafka's MirrorMaker 2 between two ``kafkalite serve`` instances (issue 21): it mirrors a
topic's records and, every ``sync.topic.configs.interval.seconds``, the topic's config. Its
config sync sends every topic config Kafka 4.x knows (remote.log.delete.on.disable among them);
the finding was that the server refused that one, so the sync failed every cycle."""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

import kafkalite
import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

MIRROR_MAKER = "org.apache.kafka.connect.mirror.MirrorMaker"
#: The whole test's bound: MirrorMaker's start (its Connect workers join a group on each
#: cluster and create their internal topics) plus two config syncs.
BOUND = 120.0


def mm2_properties(a: str, b: str) -> str:
    lines = {
        "clusters": "a, b",
        "a.bootstrap.servers": a,
        "b.bootstrap.servers": b,
        "a->b.enabled": "true",
        "b->a.enabled": "false",
        "topics": "cfg.*",
        "groups": "none-such",
        "sync.topic.configs.enabled": "true",
        "sync.topic.configs.interval.seconds": "1",
        "refresh.topics.interval.seconds": "1",
        "sync.topic.acls.enabled": "false",  # kafkalite serves no ACL APIs
        "sync.group.offsets.enabled": "false",
        "emit.checkpoints.enabled": "false",
        # One broker per cluster: every topic MirrorMaker creates has one replica.
        "replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "config.storage.replication.factor": "1",
    }
    return "".join(f"{k} = {v}\n" for k, v in lines.items())


def until(predicate, what: str, deadline: float, mm2: subprocess.Popen, log: Path) -> None:
    while not predicate():
        if mm2.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-6000:]
            pytest.fail(
                f"{what}: not within the bound (MirrorMaker exit {mm2.poll()}); its log ends:\n{tail}"
            )
        time.sleep(0.25)


@pytest.mark.broker
@pytest.mark.slow
def test_mirror_maker_2_mirrors_records_and_syncs_topic_configs(tmp_path, caplog, spawn):
    import maven_jars

    classpath = str(maven_jars.require(maven_jars.mirror_maker_jars) / "*")
    caplog.set_level(logging.INFO, logger="kafkalite.server")
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    # Set on the source topic, so MirrorMaker syncs it (it sends only configs not at their default).
    source_config = {"retention.ms": 12345, "remote.log.delete.on.disable": "true"}
    kafkalite.Admin(str(a_dir)).create_topic("cfg1", config=source_config)
    kafkalite.Admin(str(b_dir)).init()
    deadline = time.monotonic() + BOUND
    with kafkalite.Server(a_dir) as a, kafkalite.Server(b_dir) as b:
        producer = confluent_kafka.Producer({"bootstrap.servers": a.bootstrap_servers})
        for i in range(5):
            producer.produce("cfg1", value=b"record-%d" % i)
        assert producer.flush(30) == 0
        props = tmp_path / "mm2.properties"
        props.write_text(mm2_properties(a.bootstrap_servers, b.bootstrap_servers))
        log = tmp_path / "mm2.log"
        with log.open("w") as out:
            mm2 = spawn._start(
                ["java", "-Xmx512m", "-cp", classpath, MIRROR_MAKER, str(props)],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=BOUND + 30,
            )
        b_admin = kafkalite.Admin(str(b_dir))

        def mirrored() -> bool:
            if "a.cfg1" not in b_admin.list_topics():
                return False
            described = b_admin.describe_topic("a.cfg1")
            return (
                described.partitions[0].end_offset >= 5
                and int(described.config["retention.ms"]) == 12345
                and str(described.config.get("remote.log.delete.on.disable")).lower() == "true"
            )

        until(mirrored, "a.cfg1 on b with the 5 records and the source's config", deadline, mm2, log)

        kafkalite.Admin(str(a_dir)).alter_config("cfg1", {"retention.ms": 67890})
        until(
            lambda: int(b_admin.describe_topic("a.cfg1").config["retention.ms"]) == 67890,
            "the altered retention.ms synced to b",
            deadline,
            mm2,
            log,
        )
        mm2.kill()
        mm2.wait(timeout=30)
    config_refusals = [
        r.getMessage()
        for r in caplog.records
        if "refused" in r.getMessage() and "AlterConfigs" in r.getMessage()
    ]
    assert not config_refusals, config_refusals
