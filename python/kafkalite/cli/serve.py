"""``kafkalite serve``: the data directory over Kafka's wire protocol until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from kafkalite.cli.args import require_dir, subparser

if TYPE_CHECKING:
    from kafkalite.server import TLS


def _serve(args: argparse.Namespace) -> int:
    """Serve the data directory over Kafka's wire protocol until Ctrl-C (or SIGTERM). The
    server's events (``kafkalite.server...`` loggers: connections at DEBUG, request errors at
    WARNING, group joins and rebalances at INFO) and the engine's go to stderr at
    ``--log-level``."""
    import logging
    import signal
    import threading

    from kafkalite.datadir import DataDir
    from kafkalite.server import Server

    # Serving creates no data directory: a typo is a NotADataDirError naming `kafkalite init`.
    DataDir(require_dir(args), create=False)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    # SIGTERM (service managers, `kill`) stops as cleanly as Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Server(
        require_dir(args),
        args.listen,
        advertised_listener=args.advertised_listener,
        sasl=args.sasl,
        tls=_serve_tls(args),
        allow_plaintext=args.allow_plaintext,
        metrics=args.metrics,
        metrics_allow_remote=args.metrics_allow_remote,
        acks_all=args.acks_all,
        max_open_partitions=args.max_open_partitions,
        group_consumer_session_timeout_ms=args.group_consumer_session_timeout_ms,
        controller_mutation_rate=_mutation_rate(args.controller_mutation_rate),
        max_connections=args.max_connections,
        max_connections_per_ip=args.max_connections_per_ip,
        max_connections_per_ip_overrides=args.max_connections_per_ip_overrides,
        max_connection_creation_rate=args.max_connection_creation_rate,
        authentication_timeout_ms=args.authentication_timeout_ms,
        authorizer=args.authorizer,
        # Entries are trimmed and checked by the server (a malformed one stops the start).
        super_users=(args.super_users or "").split(";"),
        # Unset: the server's default (kafkalite.server.FETCH_MAX_BYTES).
        **({} if args.fetch_max_bytes is None else {"fetch_max_bytes": args.fetch_max_bytes}),
    ) as server:
        scrape = (
            f"; Prometheus metrics at http://{server.metrics_address}/metrics"
            if server.metrics_address
            else ""
        )
        limit = "unlimited" if server.open_file_limit is None else f"{server.open_file_limit:,}"
        print(
            f"kafkalite: serving {server.path} on {server.security_protocol}://{server.address} "
            f"(bootstrap.servers={server.bootstrap_servers}){scrape}; open-file limit {limit}, "
            f"up to {server.max_open_partitions:,} idle partitions kept open; Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    print("kafkalite: server stopped", file=sys.stderr, flush=True)
    return 0


def _mutation_rate(given: str | None) -> float | None:
    """``--controller-mutation-rate`` as ``Server(controller_mutation_rate=...)``: a number
    (``kafkalite.server`` checks it is positive), or a typed error naming the flag."""
    from kafkalite.errors import InvalidConfigError

    if given is None:
        return None
    try:
        return float(given)
    except ValueError:
        raise InvalidConfigError(
            f"--controller-mutation-rate takes a number of partitions per second, not {given!r}"
        ) from None


def _serve_tls(args: argparse.Namespace) -> TLS | None:
    """``--tls-cert``/``--tls-key``/``--tls-client-ca`` as ``Server(tls=...)``; the certificate
    and key go together."""
    from kafkalite.errors import InvalidConfigError
    from kafkalite.server import TLS

    if args.tls_cert is None and args.tls_key is None:
        if args.tls_client_ca is not None:
            raise InvalidConfigError("--tls-client-ca needs --tls-cert and --tls-key (a TLS listener)")
        return None
    if args.tls_cert is None or args.tls_key is None:
        raise InvalidConfigError("TLS needs both --tls-cert PEM and --tls-key PEM")
    return TLS(cert=args.tls_cert, key=args.tls_key, client_ca=args.tls_client_ca)


#: The command line's rendering of the fixes errors name in API terms (``KafkaliteError.action``);


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = subparser(sub, "serve", help="serve the data directory over Kafka's wire protocol")
    serve.add_argument(
        "--listen",
        default="127.0.0.1:9092",
        help="HOST:PORT to listen on (default 127.0.0.1:9092); anything but loopback requires TLS "
        "(--tls-cert, --tls-key) and authenticated clients: SASL/SCRAM as a user (`kafkalite users add "
        "NAME`), or certificates (--tls-client-ca)",
    )
    serve.add_argument(
        "--sasl",
        action="store_true",
        help="require SASL/SCRAM (SASL_PLAINTEXT, or SASL_SSL with TLS) on a loopback listener too",
    )
    serve.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="the server's TLS certificate (then any intermediates), PEM: the listener is SSL, or "
        "SASL_SSL with SASL",
    )
    serve.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert, PEM, unencrypted")
    serve.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="CA certificates, PEM: every client must present a certificate they signed (Kafka's "
        "ssl.client.auth=required), and is then the principal User:<subject DN>",
    )
    serve.add_argument(
        "--allow-plaintext",
        action="store_true",
        help="listen beyond loopback without TLS (SASL_PLAINTEXT): records cross the network in clear",
    )
    serve.add_argument(
        "--advertised-listener",
        metavar="HOST:PORT",
        help="the address clients are told to connect to (default: --listen; required with 0.0.0.0)",
    )
    serve.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics (requests by API and error code, bytes in and out, partitions, "
        "groups, consumer lag) over HTTP at HOST:PORT; loopback only unless --metrics-allow-remote",
    )
    serve.add_argument(
        "--metrics-allow-remote",
        action="store_true",
        help="serve --metrics beyond loopback: the page has neither TLS nor authentication and names "
        "every topic and group, with each group's lag, to anyone who can reach it (default: refused)",
    )
    serve.add_argument(
        "--fetch-max-bytes",
        type=int,
        metavar="BYTES",
        help="Kafka's fetch.max.bytes: the most record bytes in one Fetch response, whatever the "
        "request asks (default 57671680 = 55 MiB, at least 1024)",
    )
    serve.add_argument(
        "--acks-all",
        choices=["disk", "page-cache"],
        default="disk",
        help="when a Produce with acks=all is answered: disk (default) once synced to this host's disk, "
        "as the embedded acks='all'; page-cache once in the page cache, as a Kafka broker (acks=1 is "
        "always answered at the page cache; so are a transaction's records, made durable when it "
        "commits or aborts: a start after a machine restart aborts the transactions left open)",
    )
    serve.add_argument(
        "--max-open-partitions",
        type=int,
        metavar="N",
        help="the most partitions kept open while no request uses them (each holds about 3 file "
        "descriptors; the least recently used is closed and reopened when needed); default: a share "
        "of the open-file limit, which the server raises to its hard limit (ulimit -Hn) at start",
    )
    serve.add_argument(
        "--group-consumer-session-timeout-ms",
        type=int,
        default=45_000,
        metavar="MS",
        help="Kafka's group.consumer.session.timeout.ms: a consumer-protocol (group.protocol=consumer) "
        "member without a heartbeat for this long is removed and its partitions reassigned (default: 45000)",
    )
    serve.add_argument(
        "--controller-mutation-rate",
        metavar="N",
        help="Kafka's controller_mutation_rate quota: partitions CreateTopics and auto-creation may "
        "create per second, for all clients together (a burst of 11 s of it), past it refused "
        "THROTTLING_QUOTA_EXCEEDED with a throttle time; default: unlimited, as Kafka's",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=10_000,
        metavar="N",
        help="Kafka's max.connections: the most connections open at once; when all are taken, the "
        "oldest one that has not authenticated is closed to make room (default: 10000)",
    )
    serve.add_argument(
        "--max-connections-per-ip",
        type=int,
        metavar="N",
        help="Kafka's max.connections.per.ip: the most connections from one address (default: unlimited)",
    )
    serve.add_argument(
        "--max-connections-per-ip-overrides",
        metavar="HOST:N,...",
        help="Kafka's max.connections.per.ip.overrides: per-address limits, e.g. '10.0.0.5:50,myhost:10'",
    )
    serve.add_argument(
        "--max-connection-creation-rate",
        type=int,
        metavar="N",
        help="Kafka's max.connection.creation.rate: connections accepted per second; over it the "
        "server waits before accepting the next (default: unlimited; per address: the ip "
        "entities' connection_creation_rate quota, `kafkalite quotas alter --ip`)",
    )
    serve.add_argument(
        "--authentication-timeout-ms",
        type=int,
        default=10_000,
        metavar="MS",
        help="with SASL: close a connection not authenticated this long after it was accepted, "
        "whatever it sent meanwhile (default: 10000)",
    )
    serve.add_argument(
        "--authorizer",
        action="store_true",
        help="enforce the ACLs (kafka-acls) on every request, even with none (then only --super-users "
        "may do anything); without it they are enforced never on a loopback listener and, on any "
        "other, as soon as one ACL exists",
    )
    serve.add_argument(
        "--super-users",
        metavar="PRINCIPALS",
        help="Kafka's super.users: principals the ACLs never restrict, separated by ';', each "
        "trimmed (e.g. 'User:admin; User:ops'); a malformed one stops the start",
    )
    serve.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="what the server logs to stderr (default INFO: group joins and rebalances, request "
        "errors; DEBUG adds every connection opened and closed)",
    )
    serve.set_defaults(run=_serve)
