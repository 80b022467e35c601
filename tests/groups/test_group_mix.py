"""One group id used by embedded consumers (``kafkalite.Consumer``) and by network consumers
(over ``kafkalite serve``) at the same time: the side that comes second is refused, so a
partition never has two owners (issue 13). The server's claim lives in a flock on a file in
the group's folder, so a kill -9'd server (or embedded member) never locks the group out."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import kafkalite
import pytest
from kafkalite import InconsistentGroupProtocolError, KafkaliteError
from serve_proc import start_serve

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "mixed"
PARTITIONS = 3


def network_consumer(bootstrap: str, group: str):
    """A confluent-kafka member of ``group`` and what it sees: ``assigned`` partitions, ``errors``."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "enable.auto.commit": False,
        }
    )
    seen: dict[str, list] = {"assigned": [], "errors": []}
    consumer.subscribe(
        [TOPIC], on_assign=lambda c, parts: seen["assigned"].extend(p.partition for p in parts)
    )
    return consumer, seen


def poll_until(consumer, seen: dict[str, list], want: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not seen[want] and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is not None:
            seen["errors"].append(msg.error())


def close_in_background(consumer) -> None:
    """librdkafka's close may wait for a coordinator that was killed: not the test's business."""
    threading.Thread(target=consumer.close, daemon=True).start()


@pytest.fixture
def data_dir(tmp_path):
    kafkalite.Admin(str(tmp_path)).create_topic(TOPIC, partitions=PARTITIONS)
    return str(tmp_path)


def embedded_poll(consumer: kafkalite.Consumer, timeout: float = 10.0) -> set:
    deadline = time.monotonic() + timeout
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(timeout_ms=50)
    return {tp.partition for tp in consumer.assignment()}


def test_embedded_join_is_refused_while_network_members_hold_the_group_and_a_killed_server_frees_it(
    data_dir, spawn
):
    server, bootstrap = start_serve(spawn.module, data_dir, "--log-level", "WARNING")
    net, seen = network_consumer(bootstrap, "mix")
    poll_until(net, seen, "assigned")
    assert sorted(seen["assigned"]) == list(range(PARTITIONS)), seen
    embedded = kafkalite.Consumer(data_dir, group_id="mix")
    with pytest.raises(InconsistentGroupProtocolError) as refused:
        embedded.subscribe([TOPIC])  # joins the group
    assert isinstance(refused.value, KafkaliteError) and isinstance(refused.value, RuntimeError)
    message = str(refused.value)
    assert "'mix'" in message and "kafkalite serve" in message and str(server.pid) in message, message
    with pytest.raises(InconsistentGroupProtocolError):
        embedded.poll(timeout_ms=100)  # asked again at each poll, refused again
    assert embedded.assignment() == set()
    # Admin refuses to delete a group with network members too (its claim file would go).
    with pytest.raises(kafkalite.IllegalStateError, match="network members"):
        kafkalite.Admin(data_dir).delete_group("mix")

    os.kill(server.pid, signal.SIGKILL)
    server.wait(10)
    close_in_background(net)
    # The dead server's flock went with it: the embedded consumer joins and owns everything.
    assert embedded_poll(embedded) == set(range(PARTITIONS))
    embedded.close()


def test_network_join_is_refused_while_embedded_members_hold_the_group_and_a_killed_member_frees_it(
    data_dir, spawn
):
    holder = spawn("embedded_group_holder.py", data_dir, TOPIC, "mix2", stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().startswith("joined"), "the embedded member must join first"
    with kafkalite.Server(data_dir) as server:
        net, seen = network_consumer(server.bootstrap_servers, "mix2")
        poll_until(net, seen, "errors", timeout=15)
        assert seen["assigned"] == [], "the network consumer must not get partitions"
        assert seen["errors"][0].code() == confluent_kafka.KafkaError.INCONSISTENT_GROUP_PROTOCOL
        close_in_background(net)

        holder.kill()
        holder.wait(10)
        net, seen = network_consumer(server.bootstrap_servers, "mix2")
        poll_until(net, seen, "assigned")
        assert sorted(seen["assigned"]) == list(range(PARTITIONS)), seen
        net.close()


def test_the_group_is_given_back_when_its_network_members_leave(data_dir):
    with kafkalite.Server(data_dir) as server:
        net, seen = network_consumer(server.bootstrap_servers, "handover")
        poll_until(net, seen, "assigned")
        assert seen["assigned"]
        net.close()  # LeaveGroup: the group is empty, the server releases it
        embedded = kafkalite.Consumer(data_dir, TOPIC, group_id="handover")
        assert embedded_poll(embedded) == set(range(PARTITIONS))
        embedded.close()
        # ... and back: the embedded member left, the network may take the group again.
        net, seen = network_consumer(server.bootstrap_servers, "handover")
        poll_until(net, seen, "assigned")
        assert sorted(seen["assigned"]) == list(range(PARTITIONS)), seen
        net.close()


def test_a_second_server_on_the_same_data_directory_is_refused_the_group(data_dir):
    with kafkalite.Server(data_dir) as first, kafkalite.Server(data_dir) as second:
        net, seen = network_consumer(first.bootstrap_servers, "two-servers")
        poll_until(net, seen, "assigned")
        other, other_seen = network_consumer(second.bootstrap_servers, "two-servers")
        poll_until(other, other_seen, "errors", timeout=15)
        assert other_seen["assigned"] == []
        assert other_seen["errors"][0].code() == confluent_kafka.KafkaError.INCONSISTENT_GROUP_PROTOCOL
        other.close()
        net.close()


@pytest.mark.parametrize("round_", range(3))
def test_embedded_and_network_members_starting_together_never_share_the_group(data_dir, spawn, round_):
    """Two embedded processes and two network consumers race for one group id: whichever side
    claims it first gets every partition, the other side gets none (never two owners)."""
    group = f"race-{round_}"
    with kafkalite.Server(data_dir) as server:
        nets = [network_consumer(server.bootstrap_servers, group) for _ in range(2)]
        holders = [
            spawn("embedded_group_holder.py", data_dir, TOPIC, group, stdout=subprocess.PIPE, text=True)
            for _ in range(2)
        ]

        def poll_networks(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while (
                time.monotonic() < deadline
                # every partition owned by some network member (their callbacks run one poll apart)
                and {p for _, seen in nets for p in seen["assigned"]} != set(range(PARTITIONS))
                and not all(seen["errors"] for _, seen in nets)
            ):
                for consumer, seen in nets:
                    msg = consumer.poll(0.05)
                    if msg is not None and msg.error() is not None:
                        seen["errors"].append(msg.error())

        poll_networks(12)  # both sides race meanwhile
        outcomes = [h.stdout.readline().split()[0] for h in holders]  # each says joined or refused
        if "joined" not in outcomes:
            # The embedded side lost the race, so the network side must end up with the group; on a
            # loaded machine librdkafka's join can take longer than the race's 12 s.
            poll_networks(60)
        network_got = {p for _, seen in nets for p in seen["assigned"]}
        embedded_joined = outcomes.count("joined")
        assert (embedded_joined == 0) != (not network_got), (outcomes, network_got)
        if embedded_joined:
            assert outcomes.count("refused") == 0
        else:
            assert network_got == set(range(PARTITIONS))
        for consumer, _ in nets:
            consumer.close()


def test_a_long_group_id_is_served_and_shares_its_hashed_folder_with_embedded_members(data_dir):
    """An id whose folder name is hashed (over 200 bytes encoded): the server used to refuse it
    (INVALID_GROUP_ID, it could not compute the name); it now claims the same folder group.py
    uses, so the embedded side is refused while network members hold it, as for short ids."""
    group = "long-" + "é" * 120
    with kafkalite.Server(data_dir) as server:
        net, seen = network_consumer(server.bootstrap_servers, group)
        poll_until(net, seen, "assigned")
        assert sorted(seen["assigned"]) == list(range(PARTITIONS)), seen
        embedded = kafkalite.Consumer(data_dir, group_id=group)
        with pytest.raises(InconsistentGroupProtocolError):
            embedded.subscribe([TOPIC])
        embedded.close()
        net.close()
