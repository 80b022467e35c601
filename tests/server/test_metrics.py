"""Client metrics (``Producer.metrics()``, ``Consumer.metrics()``, confluent-kafka's ``stats_cb``)
and ``kafkalite serve``'s Prometheus endpoint, scraped over HTTP."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.request

import kafkalite
import pytest
from kafkalite import Admin, Consumer, Producer, TopicPartition
from kafkalite.server import Server


def test_producer_metrics_count_what_was_sent(tmp_path):
    Admin(tmp_path).create_topic("t", partitions=2)
    with Producer(tmp_path, batch_size=4096) as p:
        for i in range(1000):
            p.send("t", b"v" * 100, key=str(i).encode())
        p.flush()
        m = p.metrics()
    total = m["producer-metrics"]
    assert total["record-send-total"] == 1000
    assert total["record-error-total"] == 0
    assert m["producer-topic-metrics.t"]["record-send-total"] == 1000
    # Batches of at most batch_size bytes: more than one append, each of several records.
    assert total["request-total"] > 1
    assert total["records-per-request-avg"] == pytest.approx(1000 / total["request-total"])
    assert 100 < total["record-size-avg"] < 200
    assert 100 < total["batch-size-avg"] <= total["batch-size-max"] <= 4096 + 200
    assert total["record-send-rate"] > 0
    assert total["record-queue-count"] == 0


def test_consumer_lag_is_end_offset_minus_position(tmp_path):
    Admin(tmp_path).create_topic("t", partitions=1)
    with Producer(tmp_path) as p:
        for _ in range(100):
            p.send("t", b"x")
    tp = TopicPartition("t", 0)
    with Consumer(tmp_path, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.assign([tp])
        got = c.poll(timeout_ms=1000, max_records=30)
        c.commit()
        m = c.metrics()
        fetch = m["consumer-fetch-manager-metrics"]
        assert sum(len(v) for v in got.values()) == 30
        assert fetch["records-consumed-total"] == 30
        assert fetch["records-lag-max"] == c.end_offsets([tp])[tp] - c.position(tp) == 70
        assert fetch["t-0.records-lag"] == 70
        coord = m["consumer-coordinator-metrics"]
        assert coord["commit-total"] == 1
        assert coord["assigned-partitions"] == 1


def test_stats_cb_is_called_periodically_with_json(tmp_path):
    Admin(tmp_path).create_topic("t")
    seen: list[str] = []
    with Producer(tmp_path, stats_cb=seen.append, statistics_interval_ms=50, client_id="me") as p:
        p.send("t", b"x").get(5)
        deadline = time.monotonic() + 10
        while len(seen) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(seen) >= 4, "stats_cb was not called every statistics_interval_ms"
    last = json.loads(seen[-1])
    assert last["type"] == "producer" and last["name"] == "me"
    assert last["txmsgs"] == 1 and last["topics"]["t"]["txmsgs"] == 1
    assert [json.loads(s)["ts"] for s in seen] == sorted(json.loads(s)["ts"] for s in seen)


def test_consumer_stats_cb_from_poll(tmp_path):
    Admin(tmp_path).create_topic("t")
    with Producer(tmp_path) as p:
        for _ in range(10):
            p.send("t", b"x")
    seen: list[str] = []
    with Consumer(
        tmp_path, stats_cb=seen.append, statistics_interval_ms=20, auto_offset_reset="earliest"
    ) as c:
        c.assign([TopicPartition("t", 0)])
        c.poll(timeout_ms=100, max_records=4)
        time.sleep(0.05)
        c.poll(timeout_ms=0, max_records=1)
    stats = json.loads(seen[-1])
    assert stats["type"] == "consumer"
    assert stats["topics"]["t"]["partitions"]["0"]["consumer_lag"] == 6


def test_a_raising_stats_cb_is_logged_and_the_sender_goes_on(tmp_path, caplog):
    Admin(tmp_path).create_topic("t")
    calls = threading.Event()

    def broken(_stats: str) -> None:
        calls.set()
        raise RuntimeError("the callback broke")

    with caplog.at_level(logging.ERROR, logger="kafkalite.metrics"):
        with Producer(tmp_path, stats_cb=broken, statistics_interval_ms=20, linger_ms=50) as p:
            assert calls.wait(10)
            time.sleep(0.1)
            # The sender thread still appends lingering batches.
            assert p.send("t", b"after").get(10).offset == 0
    assert any("stats_cb failed" in r.getMessage() for r in caplog.records)
    assert any("the callback broke" in (r.exc_text or "") for r in caplog.records)


def _scrape(address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if m:
            samples[m.group(1)] = float(m.group(2))
    return samples


def test_prometheus_endpoint_counts_requests_errors_and_lag(tmp_path):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    Admin(tmp_path).create_topic("t", partitions=2)
    with Server(tmp_path, metrics="127.0.0.1:0") as server:
        assert server.metrics_address is not None
        before = _scrape(server.metrics_address)
        assert before["kafkalite_partitions"] == 2
        n = 20
        p = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers, "linger.ms": 0})
        for _ in range(n):
            p.produce("t", b"x" * 10, partition=0)
            assert p.flush(10) == 0  # one Produce request per record
        after = _scrape(server.metrics_address)
        produced = 'kafkalite_requests_total{api="Produce"}'
        assert after[produced] - before.get(produced, 0) == n
        assert after["kafkalite_bytes_in_total"] > before["kafkalite_bytes_in_total"] + n * 10
        assert after["kafkalite_bytes_out_total"] > before["kafkalite_bytes_out_total"]

        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        with pytest.raises(confluent_kafka.KafkaException):
            admin.create_topics([NewTopic("t", num_partitions=1)])["t"].result(10)
        errors = _scrape(server.metrics_address)
        exists = 'kafkalite_request_errors_total{api="CreateTopics",error="TOPIC_ALREADY_EXISTS",code="36"}'
        assert errors[exists] == 1

        with Consumer(tmp_path, group_id="g", auto_offset_reset="earliest") as c:
            c.assign([TopicPartition("t", 0)])
            c.poll(timeout_ms=1000, max_records=5)
            c.commit()
        lag = _scrape(server.metrics_address)
        assert lag['kafkalite_consumer_lag{group="g",topic="t",partition="0"}'] == n - 5
        assert lag["kafkalite_groups"] == 1


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:99999", "no.such.host.invalid:9"])
def test_a_bad_metrics_address_is_refused(tmp_path, address):
    Admin(tmp_path).create_topic("unused")
    with pytest.raises(kafkalite.KafkaliteError, match="metrics endpoint") as refused:
        Server(tmp_path, metrics=address)
    assert str(refused.value).count("invalid configuration") <= 1, str(refused.value)


def test_consumer_stats_cb_during_a_long_poll(tmp_path):
    Admin(tmp_path).create_topic("t")
    seen: list[str] = []
    with Consumer(tmp_path, stats_cb=seen.append, statistics_interval_ms=100) as c:
        c.assign([TopicPartition("t", 0)])
        c.poll(timeout_ms=1000)  # nothing arrives: the poll waits, and reports meanwhile
    assert len(seen) >= 5


def test_metrics_beyond_loopback_need_an_explicit_opt_in(tmp_path, caplog):
    """The metrics page has neither TLS nor authentication and names every topic and group with
    its lag: like the Kafka listener, it is refused beyond loopback unless accepted
    (`metrics_allow_remote`, `--metrics-allow-remote`), and then a WARNING. 192.0.2.1 (TEST-NET-1,
    never this machine's) is not loopback: the guard answers before any bind, and with the opt-in
    the bind itself fails, so nothing listens beyond loopback here."""
    with pytest.raises(kafkalite.InvalidConfigError, match="--metrics-allow-remote"):
        Server(tmp_path, metrics="192.0.2.1:9404")
    caplog.set_level(logging.WARNING, logger="kafkalite.server")
    with pytest.raises(kafkalite.KafkaliteError, match="cannot listen for metrics on 192.0.2.1:9404"):
        Server(tmp_path, metrics="192.0.2.1:9404", metrics_allow_remote=True)
    assert any("metrics" in r.getMessage() and "WARNING" in r.getMessage() for r in caplog.records)
    with Server(tmp_path, metrics="127.0.0.1:0") as server:  # loopback: as before
        assert server.metrics_address is not None
