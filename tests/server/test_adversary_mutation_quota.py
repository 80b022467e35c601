"""Hostile values of the controller mutation quota (``--controller-mutation-rate``,
``Server(controller_mutation_rate=...)``, ``server/topic_creation.rs``): a rate the start accepts
never makes a request panic, and one it cannot hold is a typed error that names the setting."""

from __future__ import annotations

import kafkalite
import pytest
from server_wire import THROTTLING_QUOTA_EXCEEDED

pytest.importorskip("kafka")
from test_server_mutation_quota import create_topics

pytest_plugins = ["kafkalite.testing"]

I32_MAX = 2**31 - 1


def test_a_tiny_rate_throttles_for_the_longest_time_the_field_holds(tmp_path):
    """At 1e-20 partitions/s the wait for the next token is ~1e20 s (past u64 seconds): the
    topic past the burst is refused with throttle_time_ms at its maximum, and the server goes
    on answering (the conversion panicked, and the connection was dropped)."""
    with kafkalite.Server(tmp_path, controller_mutation_rate=1e-20) as server:
        response = create_topics(server.address, ["tiny-0", "tiny-1"])
        codes = {t.name: t.error_code for t in response.topics}
        assert codes == {"tiny-0": 0, "tiny-1": THROTTLING_QUOTA_EXCEEDED}
        assert response.throttle_time_ms == I32_MAX
        again = create_topics(server.address, ["tiny-2"])
        assert [t.error_code for t in again.topics] == [THROTTLING_QUOTA_EXCEEDED]
        assert kafkalite.Admin(server.path).list_topics() == ["tiny-0"]


@pytest.mark.parametrize("rate", [10**400, 2**1024], ids=["10**400", "2**1024"])
def test_an_int_past_a_floats_range_is_a_config_error(tmp_path, rate):
    with pytest.raises(kafkalite.InvalidConfigError, match="controller_mutation_rate"):
        kafkalite.Server(tmp_path, controller_mutation_rate=rate)
