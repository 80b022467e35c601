"""The verification guard (KIP-890 part 1, Kafka's `VerificationGuard`) of `kafkalite serve`: a
transactional batch whose partition holds no open transaction of its producer is verified with
the coordinator before it is appended, and the transaction may end between the two (its client
sent EndTxn while the Produce was in flight, after a client-side timeout say). The batch must
then be refused, never appended after the transaction's marker: there it would be a hanging
transaction (the partition's last stable offset stuck at it for good, read_committed readers
stalled, no coordinator entry naming the partition to time it out).

The fault, injected: server A stops itself (fail point ``server.produce.verified``: SIGSTOP)
right after the coordinator verified its Produce; the transaction is ended meanwhile through
server B on the same data directory (a real EndTxn: the coordinator writes its marker into the
partition); then A goes on. Transaction version 0 (Produce v11, EndTxn v4: kafka-python,
librdkafka, Java 3.x), whose marker keeps the producer's epoch, so the epoch check cannot catch
the late batch. A fence meanwhile (a new producer instance's InitProducerId aborts the
transaction with its marker at a newer epoch) gets INVALID_PRODUCER_EPOCH, as Kafka checks the
epoch before the guard."""

from __future__ import annotations

import os
import signal

import kafkalite
import pytest
from helpers import wait_until_stopped
from serve_proc import free_port, serve_on

pytest.importorskip("kafka")
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
)
from server_wire import Wire, in_background
from test_server_transactions import values
from test_server_transactions_v2 import Client, control_epochs, landed

NONE, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE = 0, 47, 48
#: Transaction version 0's request versions (the partition is added with AddPartitionsToTxn).
PRODUCE_TV0, END_TXN_TV0, ADD_PARTITIONS_TV0 = 11, 4, 3


def add_partition(client: Client, tid: str, producer: tuple[int, int], topic: str, partition: int) -> None:
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=producer[0],
        v3_and_below_producer_epoch=producer[1],
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[partition])],
    )  # fmt: skip
    [result] = client.call(
        request, ADD_PARTITIONS_TV0, AddPartitionsToTxnResponse
    ).results_by_topic_v3_and_below
    assert [r.partition_error_code for r in result.results_by_partition] == [NONE]


@pytest.mark.parametrize("end", ["commit", "abort", "fence"])
def test_a_transaction_ended_between_the_verification_and_the_append_refuses_the_batch(tmp_path, spawn, end):
    data = tmp_path / "data"
    kafkalite.Admin(str(data)).create_topic("guard", 2)
    tid = "guard-tx"
    port_a, port_b = free_port(), free_port()
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "server.produce.verified=stop@1"}
    server_a = serve_on(spawn.module, data, port_a, "--log-level", "WARNING", env=env)
    server_b = serve_on(spawn.module, data, port_b, "--log-level", "WARNING")
    a, b = f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"
    try:
        client_b = Client(b)
        error, pid, epoch = client_b.init_producer_id(tid)
        assert error == NONE
        add_partition(client_b, tid, (pid, epoch), "guard", 0)
        add_partition(client_b, tid, (pid, epoch), "guard", 1)
        # guard-1's batch is the transaction's own (verified, appended, ended by the marker).
        assert client_b.produce(tid, "guard", 1, (pid, epoch), 0, [b"in"], version=PRODUCE_TV0) == NONE
        # guard-0's first batch of the transaction: verified by A's coordinator, then A stops.
        client_a = Client(a)
        produce = (tid, "guard", 0, (pid, epoch), 0, [b"late"], PRODUCE_TV0)
        thread, answer = in_background(client_a.produce, *produce)
        wait_until_stopped(server_a, "server A")
        commit = end == "commit"
        if end == "fence":
            error, pid2, epoch2 = client_b.init_producer_id(tid)
            assert (error, pid2) == (NONE, pid) and epoch2 > epoch
            [(_, marker_epoch, _)] = control_epochs(str(data), "guard", 0)
            assert epoch < marker_epoch <= epoch2
        else:
            assert client_b.end_txn(tid, (pid, epoch), commit, version=END_TXN_TV0) == (NONE, -1, -1)
            # The marker lands after the answer (`txn_ends`): A goes on only once it is there.
            assert landed(str(data), "guard", 0, [(pid, epoch, commit)]) == [(pid, epoch, commit)]
        server_a.send_signal(signal.SIGCONT)
        thread.join(60)
        assert not thread.is_alive() and "error" not in answer, answer
        # Kafka's answer to a failed verification guard (InvalidTxnStateException at the append),
        # and to a fenced epoch (checked first).
        expected_code = INVALID_PRODUCER_EPOCH if end == "fence" else INVALID_TXN_STATE
        assert answer["result"] == expected_code, "the batch was appended after its transaction's marker"
        with kafkalite.Log(str(data / "guard-0"), readonly=True) as log:
            assert (log.end_offset, log.last_stable_offset) == (1, 1), (
                "nothing after the marker, no hanging LSO"
            )
        # A read_committed reader goes past the marker to what comes next.
        wire = Wire(a)
        assert wire.produce("guard", 0, b"after") == NONE
        wire.close()
        expected = [b"after", b"in"] if commit else [b"after"]
        assert sorted(values(a, "guard", "read_committed", want=len(expected))) == expected
        client_a.close()
        client_b.close()
    finally:
        for server in (server_a, server_b):
            server.send_signal(signal.SIGCONT)
            server.kill()
    _, said = server_a.communicate(timeout=30)
    server_b.wait(30)
    # One WARNING line names the client and why.
    code_name = "INVALID_PRODUCER_EPOCH" if end == "fence" else "INVALID_TXN_STATE"
    [refused] = [line for line in said.splitlines() if code_name in line]
    assert (
        " WARNING " in refused and "refused Produce from /127.0.0.1:" in refused and "guard-0" in refused
    ), said
