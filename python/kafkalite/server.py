"""``kafkalite.Server``: the data directory served over Kafka's wire protocol, so any Kafka
client (confluent-kafka, kafka-python, ...) can produce to and consume from it while the
embedded ``Producer``/``Consumer``/``Admin`` keep using the same files.

The server is Rust (tokio) on its own background threads; Python only starts and stops it.
On loopback it needs no authentication (PLAINTEXT). ``tls=TLS(cert=..., key=...)`` (PEM files)
makes it a TLS listener (SSL); with ``client_ca=...`` every client must present a certificate
signed by that CA (Kafka's ``ssl.client.auth=required``) and is known as ``User:<subject DN>``
(RFC 2253, as Kafka's default principal builder: ``User:CN=alice,OU=eng,O=Example``).
``sasl=True`` asks for SASL/SCRAM (SASL_PLAINTEXT, or SASL_SSL with TLS): clients authenticate
with SCRAM-SHA-256/512 as the data directory's users (``kafkalite.users``), and the server
refuses to start without one. Any other address than loopback needs TLS and authenticated
clients (SASL_SSL, or SSL with client certificates); without TLS it starts only with
``allow_plaintext=True`` (SASL_PLAINTEXT, records in clear), logging a WARNING.
``metrics="HOST:PORT"`` also serves Prometheus's text format over HTTP there (``metrics_address``):
requests by API and error code, bytes in and out, topics, partitions, groups and consumer lag.
The page has neither TLS nor authentication and names every topic and group, so like the
listener it is loopback only unless ``metrics_allow_remote=True`` (then a WARNING).

Authorization follows Kafka's ACL model (``kafka-acls``, Admin's ``create_acls``): a client is the
principal it authenticated as (``User:<name>`` with SASL, ``User:<subject DN>`` with a client
certificate, ``User:ANONYMOUS`` without either), and the ACLs in
the data directory say what it may do. They are enforced with ``authorizer=True``; without it,
never on a loopback listener and, on any other, as soon as one ACL exists. ``super_users``
(Kafka's ``super.users``, e.g. ``["User:admin"]``) may do everything. The embedded API is the
data directory's owner and is never restricted.

``acks_all`` says when a Produce with ``acks=all`` is answered: ``"disk"`` (the default) once a
sync covering the batch returned, as the embedded ``Producer(acks='all')`` promises; ``"page-cache"``
once it is in the page cache, as a Kafka broker answers (its durability comes from replicas,
which a single server has not got). ``acks=1`` is always answered at the page cache, and so are
transactional batches: a transaction's records are made durable when it is committed or aborted
(EndTxn is answered after that), and a start after a restart of the machine (Linux's boot id)
aborts every transaction left open, fencing its producer, since its records may be lost.
``fetch_max_bytes`` is the broker's ``fetch.max.bytes``: the most record bytes in one Fetch
response (55 MiB, Kafka's default).
``max_open_partitions`` bounds the partitions kept open that no request is using (each holds
about 3 file descriptors; the least recently used is closed, and reopened when needed). The
default is a share of the process's open-file limit, which the server first raises to its hard
limit (RLIMIT_NOFILE), as Kafka asks of a broker's ``ulimit -n``.
``group_consumer_session_timeout_ms`` and ``group_consumer_heartbeat_interval_ms`` are Kafka's
``group.consumer.session.timeout.ms`` (45 s) and ``group.consumer.heartbeat.interval.ms`` (5 s)
for consumer-protocol groups (KIP-848, ``group.protocol=consumer``).
``controller_mutation_rate`` is Kafka's ``controller_mutation_rate`` quota (KIP-599): the
partitions CreateTopics and Metadata's auto-creation may create per second, for all clients
together, with a burst of 11 s of it; past it a topic is refused ``THROTTLING_QUOTA_EXCEEDED``
with ``throttle_time_ms``. None (the default, as Kafka's) is unlimited: creations still run one
request's batch at a time, off the request threads, within each request's timeout.
``max_connections`` (Kafka's ``max.connections``, 10,000 here), ``max_connections_per_ip``
(``max.connections.per.ip``, unlimited by default) and ``max_connections_per_ip_overrides``
(``{"10.0.0.5": 50}``, or Kafka's ``"10.0.0.5:50,host:10"``) bound the connections; when all are
taken (in all, or from one address), the oldest connection that has not authenticated yet (from
that address) is closed to make room, so clients that authenticated are never locked out by
sockets that did not. ``max_connection_creation_rate`` (Kafka's ``max.connection.creation.rate``,
unlimited by default) bounds the connections accepted per second: over it the server waits
before it accepts the next; the per-address rate is the ``connection_creation_rate`` quota of
an ip entity (``kafkalite.quotas``). With SASL, a connection not
authenticated ``authentication_timeout_ms`` (10 s) after it was accepted is closed, whatever it
sent meanwhile.

    with kafkalite.Server("data") as server:
        producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap_servers})
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from kafkalite import _native
from kafkalite._native import NativeServer
from kafkalite.errors import InvalidConfigError, InvalidTypeError
from kafkalite.validate import INT32_MAX, INT64_MAX

#: How long ``stop()`` waits for in-flight requests before closing connections.
STOP_TIMEOUT_MS = 5000
#: Kafka's ``fetch.max.bytes`` broker default (55 MiB) and its bounds: the server's own.
FETCH_MAX_BYTES: int = _native.FETCH_MAX_BYTES
FETCH_MAX_BYTES_RANGE = (_native.FETCH_MAX_BYTES_MIN, INT32_MAX)
#: The values of ``acks_all`` (``--acks-all``).
ACKS_ALL = ("disk", "page-cache")


@dataclass(frozen=True)
class TLS:
    """A TLS listener's PEM files: ``cert`` (the server's certificate, then any intermediates),
    ``key`` (its unencrypted private key) and optionally ``client_ca`` (the CA certificates that
    sign client certificates: given, every client must present one)."""

    cert: str | os.PathLike[str]
    key: str | os.PathLike[str]
    client_ca: str | os.PathLike[str] | None = None

    @classmethod
    def of(cls, value: object) -> TLS | None:
        """``tls=`` as given: None, a ``TLS``, or a mapping with its field names."""
        if value is None or isinstance(value, TLS):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"cert", "key", "client_ca"}
            if unknown or not {"cert", "key"} <= set(value):
                raise InvalidConfigError(
                    f"tls takes 'cert', 'key' and optionally 'client_ca', not {sorted(value)}"
                )
            value = TLS(**value)
            assert isinstance(value, TLS)
            return value
        raise InvalidTypeError(f"tls must be a kafkalite.TLS or a dict, not {type(value).__name__}")

    def paths(self) -> tuple[str, str, str | None]:
        """``cert``, ``key`` and ``client_ca`` as ``NativeServer`` takes them."""
        out: list[str | None] = []
        for name in ("cert", "key", "client_ca"):
            given = getattr(self, name)
            if given is None and name != "client_ca":
                raise InvalidTypeError(f"tls {name} must be a path (str or os.PathLike), not None")
            try:
                out.append(None if given is None else os.fspath(given))
            except TypeError:
                raise InvalidTypeError(
                    f"tls {name} must be a path (str or os.PathLike), not {type(given).__name__}"
                ) from None
        cert, key, client_ca = out
        assert cert is not None and key is not None
        return cert, key, client_ca


class Server:
    """A Kafka-protocol server on ``path``; starts at construction, stops on ``stop()``/exit."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        listen: str = "127.0.0.1:0",
        *,
        advertised_listener: str | None = None,
        auto_create_topics: bool = True,
        sasl: bool = False,
        fetch_max_bytes: int = FETCH_MAX_BYTES,
        acks_all: str = "disk",
        metrics: str | None = None,
        metrics_allow_remote: bool = False,
        max_open_partitions: int | None = None,
        authorizer: bool = False,
        super_users: Sequence[str] = (),
        tls: TLS | Mapping[str, str | os.PathLike[str]] | None = None,
        allow_plaintext: bool = False,
        group_consumer_session_timeout_ms: int = 45_000,
        group_consumer_heartbeat_interval_ms: int = 5_000,
        controller_mutation_rate: float | None = None,
        max_connections: int = 10_000,
        max_connections_per_ip: int | None = None,
        max_connections_per_ip_overrides: Mapping[str, int] | str | None = None,
        authentication_timeout_ms: int = 10_000,
        max_connection_creation_rate: int | None = None,
    ) -> None:
        try:
            self.path = os.path.abspath(os.fspath(path))
        except TypeError:
            raise InvalidTypeError(
                f"the data directory must be a path (str or os.PathLike), not {type(path).__name__}"
            ) from None
        for name, value in (
            ("listen", listen),
            ("advertised_listener", advertised_listener),
            ("metrics", metrics),
        ):
            if value is not None and not isinstance(value, str):
                raise InvalidTypeError(
                    f"{name} must be a 'HOST:PORT' str, not {type(value).__name__} ({value!r})"
                )
        if isinstance(super_users, str) or not all(isinstance(u, str) for u in super_users):
            raise InvalidTypeError("super_users must be a list of principals such as ['User:admin']")
        for flag, given in (
            ("auto_create_topics", auto_create_topics),
            ("sasl", sasl),
            ("authorizer", authorizer),
            ("allow_plaintext", allow_plaintext),
            ("metrics_allow_remote", metrics_allow_remote),
        ):
            if not isinstance(given, bool):
                raise InvalidTypeError(f"{flag} must be a bool, not {type(given).__name__}")
        check_fetch_max_bytes(fetch_max_bytes)
        # The upper bounds are Kafka's types (max.connections is an int, timeouts are longs):
        # above them the native call raised a bare OverflowError.
        for name, ms, most in (
            ("group_consumer_session_timeout_ms", group_consumer_session_timeout_ms, INT64_MAX),
            ("group_consumer_heartbeat_interval_ms", group_consumer_heartbeat_interval_ms, INT64_MAX),
            ("authentication_timeout_ms", authentication_timeout_ms, INT64_MAX),
            ("max_connections", max_connections, INT32_MAX),
        ):
            if isinstance(ms, bool) or not isinstance(ms, int) or not 1 <= ms <= most:
                raise InvalidConfigError(f"{name} must be an int between 1 and {most}, not {ms!r}")
        rate = max_connection_creation_rate
        if rate is not None and (
            isinstance(rate, bool) or not isinstance(rate, int) or not 1 <= rate <= INT32_MAX
        ):
            raise InvalidConfigError(
                f"max_connection_creation_rate must be an int between 1 and {INT32_MAX} "
                f"(connections per second) or None for unlimited, not {rate!r}"
            )
        per_ip = max_connections_per_ip
        if per_ip is not None and (
            isinstance(per_ip, bool) or not isinstance(per_ip, int) or not 0 <= per_ip <= INT32_MAX
        ):
            raise InvalidConfigError(
                f"max_connections_per_ip must be an int between 0 and {INT32_MAX} or None, not {per_ip!r}"
            )
        overrides = max_connections_per_ip_overrides
        if isinstance(overrides, Mapping):
            overrides = ",".join(f"{host}:{count}" for host, count in overrides.items())
        elif overrides is not None and not isinstance(overrides, str):
            raise InvalidTypeError(
                "max_connections_per_ip_overrides must be a {host: count} dict or 'host:count,...'"
            )
        check_max_open_partitions(max_open_partitions)
        check_controller_mutation_rate(controller_mutation_rate)
        if acks_all not in ACKS_ALL:
            raise InvalidConfigError(f"acks_all must be 'disk' or 'page-cache', not {acks_all!r}")
        tls_files = TLS.of(tls)
        cert, key, client_ca = tls_files.paths() if tls_files is not None else (None, None, None)
        self._native: NativeServer | None = NativeServer(
            self.path,
            listen,
            advertised_listener,
            auto_create_topics,
            sasl=sasl,
            fetch_max_bytes=fetch_max_bytes,
            acks_all=acks_all,
            metrics=metrics,
            metrics_allow_remote=metrics_allow_remote,
            max_open_partitions=max_open_partitions,
            authorizer=authorizer,
            super_users=list(super_users),
            tls_cert=cert,
            tls_key=key,
            tls_client_ca=client_ca,
            allow_plaintext=allow_plaintext,
            group_consumer_session_timeout_ms=group_consumer_session_timeout_ms,
            group_consumer_heartbeat_interval_ms=group_consumer_heartbeat_interval_ms,
            controller_mutation_rate=(
                None if controller_mutation_rate is None else float(controller_mutation_rate)
            ),
            max_connections=max_connections,
            max_connections_per_ip=per_ip,
            max_connections_per_ip_overrides=overrides,
            max_connection_creation_rate=rate,
            authentication_timeout_ms=authentication_timeout_ms,
        )
        self.address: str = self._native.local_addr
        #: What Kafka clients take as ``bootstrap.servers`` (the advertised listener).
        self.bootstrap_servers: str = self._native.advertised
        #: Kafka's name for the listener's protocol: ``PLAINTEXT``, ``SASL_PLAINTEXT``, ``SSL`` or
        #: ``SASL_SSL``.
        self.security_protocol: str = self._native.security_protocol
        #: HOST:PORT of the Prometheus text endpoint (``metrics="127.0.0.1:0"`` picks a port), or None.
        self.metrics_address: str | None = self._native.metrics_addr
        #: The process's open-file limit (RLIMIT_NOFILE) after the server raised it to its hard
        #: limit, or None if unlimited.
        self.open_file_limit: int | None = self._native.open_file_limit
        #: The most partitions kept open while no request uses them (``max_open_partitions``).
        self.max_open_partitions: int = self._native.max_open_partitions

    def stop(self) -> None:
        """Stop serving: close connections and partitions. Bounded; calling it again is a no-op."""
        native, self._native = self._native, None
        if native is not None:
            native.stop(STOP_TIMEOUT_MS)

    close = stop

    @property
    def running(self) -> bool:
        """True while the server accepts connections."""
        return self._native is not None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"Server({self.path!r}, bootstrap_servers={self.bootstrap_servers!r}, {state})"


def check_fetch_max_bytes(value: object) -> None:
    """``fetch_max_bytes`` is an int in Kafka's range for ``fetch.max.bytes``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"fetch_max_bytes must be an int, not {type(value).__name__}")
    low, high = FETCH_MAX_BYTES_RANGE
    if not low <= value <= high:
        raise InvalidConfigError(f"fetch_max_bytes must be between {low} and {high}, not {value}")


def check_max_open_partitions(value: object) -> None:
    """``max_open_partitions`` is None (the default: a share of the open-file limit) or an int >= 1."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"max_open_partitions must be an int or None, not {type(value).__name__}")
    if value < 1:
        raise InvalidConfigError(f"max_open_partitions must be at least 1, not {value}")


def check_controller_mutation_rate(value: object) -> None:
    """``controller_mutation_rate`` is None (unlimited) or a finite number of partitions per
    second above 0."""
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidTypeError(
            f"controller_mutation_rate must be a number (partitions per second) or None, "
            f"not {type(value).__name__}"
        )
    try:
        positive = math.isfinite(value) and value > 0
    except OverflowError:  # an int past a float's range
        raise InvalidConfigError(
            "controller_mutation_rate must be a positive number of partitions per second that a float "
            "holds, not an int too large for one"
        ) from None
    if not positive:
        raise InvalidConfigError(
            f"controller_mutation_rate must be a positive number of partitions per second, not {value!r}"
        )
