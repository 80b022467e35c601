"""The controller mutation quota of `kafkalite serve` (issue 34 item 3) is Kafka's
``controller_mutation_rate`` (KIP-599): unlimited unless set, so many CreateTopics in parallel
(kafka-python's protocol classes at CreateTopics v7) are all created, as a broker creates them; ``--controller-mutation-rate N``
(``Server(controller_mutation_rate=N)``) sets one, and past its burst CreateTopics v6+ answers
THROTTLING_QUOTA_EXCEEDED with the response's ``throttle_time_ms``. A rate that is not a
positive number stops the start with a typed error."""

from __future__ import annotations

import subprocess
import sys
import threading

import kafkalite
import pytest
from server_wire import THROTTLING_QUOTA_EXCEEDED

pytest.importorskip("kafka")
from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse
from test_server_transactions_v2 import Client

pytest_plugins = ["kafkalite.testing"]

THREADS, PER_THREAD, PER_REQUEST, PARTITIONS = 4, 100, 10, 3


def test_parallel_create_topics_are_never_refused_without_a_quota(tmp_path):
    """400 topics of 3 partitions in 4 threads, 10 per CreateTopics v7 (the strict quota's
    versions, which the Java and kafka-python admins send; librdkafka's v4 is never refused,
    only throttled): every one is created (a fixed quota of 50 partitions/s with a burst of 200
    refused most of them)."""
    with kafkalite.Server(tmp_path) as server:
        refused: list[tuple[str, int]] = []

        def create(thread: int) -> None:
            for first in range(0, PER_THREAD, PER_REQUEST):
                names = [f"many-{thread}-{i}" for i in range(first, first + PER_REQUEST)]
                response = create_topics(server.address, names, PARTITIONS)
                refused.extend((t.name, t.error_code) for t in response.topics if t.error_code != 0)

        threads = [threading.Thread(target=create, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert refused == []
        assert len(kafkalite.Admin(server.path).list_topics()) == THREADS * PER_THREAD


def create_topics(address: str, names: list[str], partitions: int = 1) -> CreateTopicsResponse:
    """CreateTopics v7 (strict quota) of ``names``, each of ``partitions``."""
    topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        topics=[
            topic(name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])
            for n in names
        ],
        timeout_ms=30_000,
        validate_only=False,
    )
    client = Client(address)
    try:
        return client.call(request, 7, CreateTopicsResponse)
    finally:
        client.close()


def test_a_set_rate_throttles_past_its_burst(tmp_path):
    """At 1 partition/s the bucket holds 11 s of it: of 40 topics in one request the first ones
    are created and the rest refused with THROTTLING_QUOTA_EXCEEDED and a throttle time."""
    with kafkalite.Server(tmp_path, controller_mutation_rate=1) as server:
        names = [f"quota-{i}" for i in range(40)]
        response = create_topics(server.address, names)
        codes = {t.name: t.error_code for t in response.topics}
        created = [n for n in names if codes[n] == 0]
        refused = [n for n in names if codes[n] == THROTTLING_QUOTA_EXCEEDED]
        assert created == names[: len(created)] and refused == names[len(created) :], codes
        assert 1 <= len(created) <= 12 and refused, codes
        assert response.throttle_time_ms > 0
        assert sorted(kafkalite.Admin(server.path).list_topics()) == sorted(created)


@pytest.mark.parametrize(
    "rate, error",
    [
        (0, kafkalite.InvalidConfigError),
        (-5, kafkalite.InvalidConfigError),
        (float("nan"), kafkalite.InvalidConfigError),
        (float("inf"), kafkalite.InvalidConfigError),
        ("50", kafkalite.InvalidTypeError),
        (True, kafkalite.InvalidTypeError),
    ],
)
def test_a_rate_that_is_not_a_positive_number_is_refused_at_start(tmp_path, rate, error):
    with pytest.raises(error, match="controller_mutation_rate"):
        kafkalite.Server(tmp_path, controller_mutation_rate=rate)


@pytest.mark.parametrize("flag", ["fast", "0", "-1"])
def test_serve_refuses_a_bad_controller_mutation_rate(tmp_path, flag):
    kafkalite.Admin(str(tmp_path)).list_topics()  # a data directory
    done = subprocess.run(
        [sys.executable, "-m", "kafkalite", "--data-dir", str(tmp_path), "serve", "--listen", "127.0.0.1:0",
         "--controller-mutation-rate", flag],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "controller" in done.stderr and "mutation" in done.stderr and "rate" in done.stderr, done.stderr
