"""The Java client (kafka-clients 4.x) over TLS against `kafkalite serve`, with its PEM trust and
key stores (``ssl.truststore.type=PEM``, ``ssl.keystore.type=PEM``): SSL with a required client
certificate and SASL_SSL with SCRAM produce and read back; an expired server certificate, a
server certificate of another CA and a missing client certificate fail with an SSL error on the
client, and a good client is served after each. Marker ``broker`` (Java and Maven)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kafkalite.users
import maven_jars
import pytest
from kafkalite.server import TLS, Server
from tls_certs import Pki, make_pki

pytestmark = pytest.mark.broker

SOURCE = Path(__file__).parents[1] / "java-client" / "TlsRoundTrip.java"
USER, PASSWORD = "alice", "alice-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    classpath = maven_jars.compiled(maven_jars.java_client_jars, SOURCE, tmp_path_factory.mktemp("classes"))

    def run(props: dict[str, str], topic: str, n: int = 10) -> list[str]:
        path = Path(tmp_path_factory.mktemp("props")) / "client.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        done = subprocess.run(
            ["java", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=off", "-cp", classpath,
             "TlsRoundTrip", str(path), topic, str(n)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        return done.stdout.splitlines()

    return run


def ssl_props(server: Server, ca: Path, keystore: Path | None = None) -> dict[str, str]:
    props = {
        "bootstrap.servers": server.bootstrap_servers,
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca),
    }
    if keystore is not None:
        props |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}
    return props


def expect_round_trip(lines: list[str], n: int = 10) -> None:
    assert lines == [f"ACKED {n}", f"READ {n} " + ",".join(f"v{i}" for i in range(n))], lines


def expect_ssl_failure(lines: list[str]) -> None:
    """One line: the client's exception chain names the TLS failure (SSLHandshakeException,
    or Kafka's SslAuthenticationException)."""
    assert len(lines) == 1 and lines[0].startswith("ERROR ") and "Ssl" in lines[0], lines


def test_java_client_over_ssl_with_a_client_certificate(tmp_path, pki, java):
    tls = TLS(cert=pki.server.cert, key=pki.server.key, client_ca=pki.ca)
    with Server(tmp_path, tls=tls) as server:
        good = ssl_props(server, pki.ca, pki.client.bundle())
        expect_round_trip(java(good, "java-ssl"))
        expect_ssl_failure(java(ssl_props(server, pki.ca), "java-no-cert"))  # no client certificate
        expect_round_trip(java(good, "java-ssl-after"))


def test_java_client_over_sasl_ssl(tmp_path, pki, java):
    kafkalite.users.add_user(tmp_path, USER, PASSWORD)
    with Server(tmp_path, tls=TLS(cert=pki.server.cert, key=pki.server.key), sasl=True) as server:
        props = ssl_props(server, pki.ca) | {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{USER}" password="{PASSWORD}";',
        }
        expect_round_trip(java(props, "java-sasl-ssl"))


def test_java_client_refuses_bad_server_certificates(tmp_path, pki, java):
    for name, pair in [("expired", pki.expired_server), ("other-ca", pki.other_server)]:
        with Server(tmp_path / name, tls=TLS(cert=pair.cert, key=pair.key)) as server:
            expect_ssl_failure(java(ssl_props(server, pki.ca), f"java-{name}"))
            if name == "other-ca":  # served to a client that trusts its CA
                expect_round_trip(java(ssl_props(server, pki.other_ca), f"java-{name}-trusted"))
