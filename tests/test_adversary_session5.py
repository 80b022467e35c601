"""Adversary findings on session 5's changes (issues 13 and 14): the admin APIs, idempotent
produce and SASL of ``kafkalite serve``, and the native send path. Each test attacks as a hostile
client or a crash would and failed on the code before its fix."""

from __future__ import annotations

import pytest

import kafkalite
from kafkalite.server import Server

kafka = pytest.importorskip("kafka")
from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType  # noqa: E402
from kafka.errors import InvalidTopicError  # noqa: E402

OFFSETS_PARTITIONS = 50


def committed(server: Server, group: str, tp: TopicPartition) -> int | None:
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap_servers, group_id=group, enable_auto_commit=False)
    try:
        return consumer.committed(tp)
    finally:
        consumer.close()


def test_delete_records_of_consumer_offsets_is_refused_whatever_its_policy(tmp_path):
    """Kafka refuses DeleteRecords on an internal topic (INVALID_TOPIC_EXCEPTION). kafkalite only
    refused it while ``__consumer_offsets`` was compacted: a client that first set its
    cleanup.policy to ``delete`` (AlterConfigs is allowed, as in Kafka) then wiped every group's
    committed offsets with DeleteRecords."""
    data = tmp_path / "data"
    tp = TopicPartition("t", 0)
    with Server(data) as server:
        kafkalite.Admin(server.path).create_topic("t")
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap_servers, group_id="g", enable_auto_commit=False)
        consumer.commit({tp: OffsetAndMetadata(3, "", -1)})
        consumer.close()
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_servers)
        try:
            admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "__consumer_offsets", configs={"cleanup.policy": "delete"})]
            )
            for partition in range(OFFSETS_PARTITIONS):
                with pytest.raises(InvalidTopicError):
                    admin.delete_records({TopicPartition("__consumer_offsets", partition): -1})
        finally:
            admin.close()
        assert committed(server, "g", tp) == 3
    with Server(data) as server:
        assert committed(server, "g", tp) == 3
