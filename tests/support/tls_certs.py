"""Certificates for the TLS tests, made with the ``openssl`` command line in a tmp dir: a CA, a
server certificate for 127.0.0.1/localhost, a client certificate, an expired server and client
certificate, and another CA with a server and a client certificate of its own. EC P-256 keys in
PKCS#8 PEM, which rustls, OpenSSL (librdkafka, kafka-python) and Java's PEM key stores all read."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

#: The client certificate's subject as ``-subj`` takes it (first RDN first), and the principal
#: Kafka's default principal builder makes of it (RFC 2253: last RDN first).
CLIENT_SUBJECT = "/C=FR/O=kafkalite tests/OU=eng, core/CN=alice"
CLIENT_PRINCIPAL = "User:CN=alice,OU=eng\\, core,O=kafkalite tests,C=FR"

CA_CONFIG = """
[ca]
default_ca = signing
[signing]
dir = {dir}
database = {dir}/index.txt
new_certs_dir = {dir}/issued
serial = {dir}/serial
default_md = sha256
policy = anything
unique_subject = no
[anything]
commonName = supplied
[req]
distinguished_name = dn
[dn]
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
"""


def openssl(*args: object, cwd: Path) -> None:
    done = subprocess.run(
        ["openssl", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"openssl {' '.join(map(str, args))}:\n{done.stderr}"


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path

    def bundle(self) -> Path:
        """The key then the certificate in one file: Java's ``ssl.keystore.type=PEM`` store."""
        out = self.cert.with_suffix(".keystore.pem")
        out.write_text(self.key.read_text() + self.cert.read_text())
        return out


class Authority:
    """One CA in ``folder``, signing with ``openssl ca`` (which alone sets past dates)."""

    def __init__(self, folder: Path, name: str) -> None:
        self.dir = folder / name
        (self.dir / "issued").mkdir(parents=True)
        (self.dir / "index.txt").write_text("")
        (self.dir / "serial").write_text("1000\n")
        self.config = self.dir / "ca.cnf"
        self.config.write_text(CA_CONFIG.format(dir=self.dir))
        self.key = self.new_key("ca")
        self.cert = self.dir / "ca.pem"
        openssl(
            "req", "-x509", "-new", "-key", self.key, "-subj", f"/O=kafkalite tests/CN={name}",
            "-days", 30, "-config", self.config, "-extensions", "ca_ext", "-out", self.cert, cwd=self.dir,
        )  # fmt: skip

    def new_key(self, name: str) -> Path:
        key = self.dir / f"{name}.key"
        openssl(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key, cwd=self.dir
        )
        return key

    def issue(self, name: str, subject: str, ext: str, dates: tuple[str, str] | None = None) -> Pair:
        """A certificate for ``subject`` with the ``ext`` section; ``dates``: notBefore and
        notAfter as YYYYMMDDHHMMSSZ (default: from now, 30 days)."""
        key = self.new_key(name)
        csr = self.dir / f"{name}.csr"
        openssl(
            "req", "-new", "-key", key, "-subj", subject, "-config", self.config, "-out", csr, cwd=self.dir
        )
        when = ["-startdate", dates[0], "-enddate", dates[1]] if dates else ["-days", 30]
        cert = self.dir / f"{name}.pem"
        openssl(
            "ca", "-batch", "-notext", "-preserveDN", "-config", self.config, "-cert", self.cert,
            "-keyfile", self.key, "-extensions", ext, *when, "-in", csr, "-out", cert, cwd=self.dir,
        )  # fmt: skip
        return Pair(cert, key)


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: Pair
    client: Pair
    expired_server: Pair
    expired_client: Pair
    other_ca: Path
    other_server: Pair
    other_client: Pair


PAST = ("20200101000000Z", "20200201000000Z")


def make_pki(folder: Path) -> Pki:
    if not shutil.which("openssl"):
        pytest.skip("the openssl command is missing (apt-get install openssl)")
    ca, other = Authority(folder, "test-ca"), Authority(folder, "other-ca")
    return Pki(
        ca=ca.cert,
        server=ca.issue("server", "/O=kafkalite tests/CN=localhost", "server_ext"),
        client=ca.issue("client", CLIENT_SUBJECT, "client_ext"),
        expired_server=ca.issue("expired-server", "/CN=localhost", "server_ext", PAST),
        expired_client=ca.issue("expired-client", "/CN=mallory", "client_ext", PAST),
        other_ca=other.cert,
        other_server=other.issue("server", "/CN=localhost", "server_ext"),
        other_client=other.issue("client", "/CN=eve", "client_ext"),
    )
