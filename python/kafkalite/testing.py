"""pytest support, registered as a pytest plugin (entry point ``pytest11``), so any project
that installs kafkalite gets the ``kafkalite_server`` fixture: a Kafka broker in a temporary
data directory, started in milliseconds.

    def test_roundtrip(kafkalite_server):
        producer = confluent_kafka.Producer({"bootstrap.servers": kafkalite_server.bootstrap_servers})
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kafkalite.server import Server


@pytest.fixture
def kafkalite_server(tmp_path: Any) -> Iterator[Server]:
    """A ``kafkalite.Server`` on 127.0.0.1 (free port) over a fresh data directory
    (``server.path``); stopped after the test."""
    with Server(tmp_path / "kafkalite-data") as server:
        yield server
