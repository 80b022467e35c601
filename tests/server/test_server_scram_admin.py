"""SCRAM credentials managed over the wire (issue 24, item 5): AlterUserScramCredentials and
DescribeUserScramCredentials on `kafkalite serve` over the users file `kafkalite users` edits,
with Kafka's error codes; a credential added over the wire authenticates a new connection of the
running server; only principals with ALTER/DESCRIBE on the cluster may call them; the users file
stays whole and private when the server is killed while writing it; the quota APIs are the cluster
admin's; Kafka's `kafka-configs` adds, describes and deletes a user's credential and quotas."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import time
from pathlib import Path

import kafkalite
import kafkalite.users
import pytest
from kafkalite.server import Server
from serve_proc import free_port, serve_on

pytest_plugins = ["kafkalite.testing"]

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402
from kafka.admin import (  # noqa: E402
    KafkaAdminClient,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.protocol.admin.client_quotas import (  # noqa: E402
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
)
from kafka.protocol.admin.users import (  # noqa: E402
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
)

USERS_FILE = ".kafkalite-users.json"
PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw"}
INVALID_REQUEST, CLUSTER_AUTHORIZATION_FAILED, UNSUPPORTED_SASL_MECHANISM = 42, 31, 33
UNSUPPORTED_VERSION = 35
RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 91, 92, 93


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "data"
    for user, password in PASSWORDS.items():
        kafkalite.users.add_user(path, user, password)
    return path


@pytest.fixture
def server(data):
    with Server(data, sasl=True, authorizer=True, super_users=["User:admin"]) as s:
        yield s


def client(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
        sasl_plain_username=user, sasl_plain_password=password, request_timeout_ms=5000,
    )  # fmt: skip


def send(admin: KafkaAdminClient, request):
    """Any request on `admin`'s authenticated connection; its decoded response."""
    return admin._manager.run(admin._manager.send, request)


def authenticates(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> bool:
    """Whether the server takes this login: librdkafka lists the topics with it (True) or reports
    the server's refusal (``_AUTHENTICATION``: False); neither within 30 s fails the test. Not
    kafka-python: it retries a refused login until its 30 s bootstrap timeout, so each refusal
    cost this module 30 s (and a timeout would pass for a refusal)."""
    refused: list = []

    def on_error(error) -> None:
        if error.code() == confluent_kafka.KafkaError._AUTHENTICATION:
            refused.append(error)

    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password,
            "error_cb": on_error,
        }
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return True
        except confluent_kafka.KafkaException:
            admin.poll(0.1)  # serves error_cb
            if refused:
                return False
    raise AssertionError(f"{user}'s login was neither taken nor refused within 30 s")


def upsert(user: str, mechanism: int, iterations: int, salted: bytes = b"\x01" * 32, salt: bytes = b"salt"):
    return (user, mechanism, iterations, salt, salted)


def test_credentials_added_described_and_deleted_over_the_wire(server, data):
    """kafka-python's admin adds carol's SHA-256 credential (8192 iterations): she connects to
    the running server at once; a SHA-512 one is added beside it; deleting SHA-256 leaves
    SHA-512 working; the file holds no password and stays 0600."""
    admin = client(server.bootstrap_servers, "admin", PASSWORDS["admin"])
    done = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", ScramMechanism.SCRAM_SHA_256, "carol-secret", iterations=8192)]
    )
    assert done == {"carol": None}
    assert authenticates(server.bootstrap_servers, "carol", "carol-secret"), "no restart needed"
    assert not authenticates(server.bootstrap_servers, "carol", "wrong")
    done = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", ScramMechanism.SCRAM_SHA_512, "carol-512")]
    )
    assert done == {"carol": None}
    described = admin.describe_user_scram_credentials(["carol"])["carol"]
    assert described["error"] is None
    assert sorted((c["mechanism"], c["iterations"]) for c in described["credential_infos"]) == [
        (ScramMechanism.SCRAM_SHA_256, 8192),
        (ScramMechanism.SCRAM_SHA_512, 4096),
    ]
    assert set(admin.describe_user_scram_credentials()) == {"admin", "alice", "carol"}
    assert kafkalite.users.list_users(data)["carol"] == {"SCRAM-SHA-256": 8192, "SCRAM-SHA-512": 4096}
    text = (data / USERS_FILE).read_text()
    assert "carol-secret" not in text and "carol-512" not in text
    assert stat.S_IMODE((data / USERS_FILE).stat().st_mode) == 0o600

    assert admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", "SCRAM-SHA-256")]) == {
        "carol": None
    }
    assert not authenticates(server.bootstrap_servers, "carol", "carol-secret")
    assert authenticates(server.bootstrap_servers, "carol", "carol-512", "SCRAM-SHA-512")
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", "SCRAM-SHA-512")])
    assert "carol" not in kafkalite.users.list_users(data), "no credential left: no user"
    missing = admin.describe_user_scram_credentials(["carol"])["carol"]
    assert missing["error"] and "does not exist" in missing["error"]
    admin.close()


def test_kafka_error_codes(server, data, caplog):
    """Each of Kafka's refusals with its code, and the refused changes not applied."""
    admin = client(server.bootstrap_servers, "admin", PASSWORDS["admin"])
    before = (data / USERS_FILE).read_text()
    caplog.set_level(logging.WARNING, logger="kafkalite.server")
    request = AlterUserScramCredentialsRequest(
        deletions=[("alice", 0), ("nobody", 1), ("twice", 1)],
        upsertions=[
            upsert("low", 1, 4095),
            upsert("high", 2, 16385),
            upsert("unknown-mech", 3, 4096),
            upsert("twice", 2, 4096),
            upsert("", 1, 4096),
        ],
    )
    results = {r.user: r.error_code for r in send(admin, request).results}
    assert results == {
        "alice": UNSUPPORTED_SASL_MECHANISM,
        "nobody": RESOURCE_NOT_FOUND,
        "twice": DUPLICATE_RESOURCE,
        "low": UNACCEPTABLE_CREDENTIAL,
        "high": UNACCEPTABLE_CREDENTIAL,
        "unknown-mech": UNSUPPORTED_SASL_MECHANISM,
        "": UNACCEPTABLE_CREDENTIAL,
    }
    assert (data / USERS_FILE).read_text() == before, "nothing refused was written"
    assert sum("AlterUserScramCredentials" in r.message for r in caplog.records) == len(results)

    described = send(admin, DescribeUserScramCredentialsRequest(users=[("alice",), ("nobody",), ("alice",)]))
    assert described.error_code == 0
    assert {r.user: r.error_code for r in described.results} == {
        "alice": DUPLICATE_RESOURCE,
        "nobody": RESOURCE_NOT_FOUND,
    }
    # A valid upsert beside a refused user is applied (Kafka answers per user).
    mixed = AlterUserScramCredentialsRequest(
        deletions=[], upsertions=[upsert("dave", 1, 4096), upsert("eve", 1, 1)]
    )
    assert {r.user: r.error_code for r in send(admin, mixed).results} == {
        "dave": 0,
        "eve": UNACCEPTABLE_CREDENTIAL,
    }
    assert kafkalite.users.list_users(data)["dave"] == {"SCRAM-SHA-256": 4096}
    admin.close()


def test_only_cluster_alter_and_describe_may_call_them(server, data, caplog):
    """alice (no ACL) is refused with CLUSTER_AUTHORIZATION_FAILED, one WARNING line each, and
    cannot give herself a credential; the quota APIs are checked the same way."""
    alice = client(server.bootstrap_servers, "alice", PASSWORDS["alice"])
    caplog.set_level(logging.WARNING, logger="kafkalite.server")
    request = AlterUserScramCredentialsRequest(
        deletions=[("admin", 1)], upsertions=[upsert("alice", 1, 4096)]
    )
    results = {r.user: r.error_code for r in send(alice, request).results}
    assert results == {"admin": CLUSTER_AUTHORIZATION_FAILED, "alice": CLUSTER_AUTHORIZATION_FAILED}
    assert kafkalite.users.list_users(data)["admin"], "the refused deletion did nothing"
    assert authenticates(server.bootstrap_servers, "alice", PASSWORDS["alice"]), (
        "the refused upsert did nothing"
    )
    described = send(alice, DescribeUserScramCredentialsRequest(users=None))
    assert described.error_code == CLUSTER_AUTHORIZATION_FAILED and not described.results
    quotas = send(alice, DescribeClientQuotasRequest(components=[("user", 0, "alice")], strict=False))
    assert quotas.error_code == CLUSTER_AUTHORIZATION_FAILED
    refused = [r.message for r in caplog.records if "CLUSTER_AUTHORIZATION_FAILED" in r.message]
    assert len(refused) == 3 and all("User:alice" in m for m in refused), refused
    alice.close()


def test_client_quotas_described_and_altered_by_the_cluster_admin(server):
    admin = client(server.bootstrap_servers, "admin", PASSWORDS["admin"])
    for version in (0, 1):
        described = send(
            admin,
            DescribeClientQuotasRequest(components=[("user", 0, "alice")], strict=False, max_version=version),
        )
        assert (described.error_code, described.entries) == (0, [])
    bad = send(admin, DescribeClientQuotasRequest(components=[("colour", 0, "red")], strict=False))
    assert bad.error_code == UNSUPPORTED_VERSION  # Kafka: "Unsupported entity type colour"
    altered = send(
        admin,
        AlterClientQuotasRequest(
            entries=[([("user", "alice")], [("producer_byte_rate", 1024.0, False)])], validate_only=False
        ),
    )
    [entry] = altered.entries
    assert entry.error_code == 0, entry
    described = send(admin, DescribeClientQuotasRequest(components=[("user", 0, "alice")], strict=False))
    assert [(list(map(tuple, e)), dict(v)) for e, v in described.entries] == [
        ([("user", "alice")], {"producer_byte_rate": 1024.0})
    ]
    admin.close()


def serve(spawn, data: Path, port: int, failpoints: str | None = None):
    env = {**os.environ, "KAFKALITE_FAILPOINTS": failpoints} if failpoints else None
    return serve_on(
        spawn.module, data, port, "--sasl", "--authorizer", "--super-users", "User:admin", env=env
    )


@pytest.mark.parametrize("fault", ["checkpoint.write=kill", "checkpoint.rename=kill", "dir.sync=kill"])
def test_users_file_is_old_or_new_after_a_kill_during_alter(tmp_path, spawn, fault):
    """The server killed (-9) while AlterUserScramCredentials writes the users file, before the
    rename, or after it: the file parses, is 0600, holds the old users or the new one, and the
    next start authenticates every user it holds."""
    data = tmp_path / "data"
    kafkalite.users.add_user(data, "admin", PASSWORDS["admin"])
    port = free_port()
    proc = serve(spawn, data, port, failpoints=fault + "@1")
    admin = client(f"127.0.0.1:{port}", "admin", PASSWORDS["admin"])
    with pytest.raises(kafka.errors.KafkaError):
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("carol", ScramMechanism.SCRAM_SHA_256, "carol-secret")]
        )
    admin.close()
    assert proc.wait(10) == -9
    path = data / USERS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    users = sorted(json.loads(path.read_text())["users"])
    expected = ["admin", "carol"] if fault.startswith("dir.sync") else ["admin"]
    assert users == expected, (fault, users)
    proc = serve(spawn, data, port)
    assert authenticates(f"127.0.0.1:{port}", "admin", PASSWORDS["admin"])
    assert authenticates(f"127.0.0.1:{port}", "carol", "carol-secret") == ("carol" in users)
    proc.terminate()
    assert proc.wait(10) == 0


@pytest.mark.broker
def test_kafka_configs_adds_describes_and_deletes_a_credential(server, tmp_path):
    """Kafka 4.1.1's ConfigCommand (`kafka-configs --entity-type users`), which also asks
    DescribeClientQuotas on --describe."""
    import maven_jars

    classpath = str(maven_jars.require(maven_jars.kafka_tools_jars) / "*")
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="admin" password="{PASSWORDS["admin"]}";\n'
    )

    def configs(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [
            "java", "-Xmx256m", "-cp", classpath, "kafka.admin.ConfigCommand",
            "--bootstrap-server", server.bootstrap_servers, "--command-config", str(props),
            "--entity-type", "users", "--entity-name", "alice", *args,
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        assert (done.returncode == 0) == ok, done.stdout + done.stderr
        return done

    configs("--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]")
    assert authenticates(server.bootstrap_servers, "alice", "alice-secret")
    described = configs("--describe").stdout
    assert "SCRAM-SHA-256=iterations=8192" in described, described
    assert "SCRAM-SHA-512=iterations=4096" in described, described
    configs("--alter", "--delete-config", "SCRAM-SHA-256")
    assert not authenticates(server.bootstrap_servers, "alice", "alice-secret")
    described = configs("--describe").stdout
    assert "SCRAM-SHA-256" not in described and "SCRAM-SHA-512=iterations=4096" in described, described
    configs("--alter", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    described = configs("--describe").stdout
    assert "producer_byte_rate=1024" in described and "consumer_byte_rate=2048" in described, described
    configs("--alter", "--delete-config", "producer_byte_rate")
    described = configs("--describe").stdout
    assert "producer_byte_rate" not in described and "consumer_byte_rate=2048" in described, described
    configs("--alter", "--add-config", "request_percentage=50")
    assert "request_percentage=50" in configs("--describe").stdout
    refused = configs("--alter", "--add-config", "controller_mutation_rate=50", ok=False)
    assert "not enforced" in refused.stdout + refused.stderr
