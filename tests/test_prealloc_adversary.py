"""Adversarial tests of the data directory's preallocation budget (issue 9 point 10,
rust/src/prealloc.rs): hostile config values, budget leaks, and writers/readers in several
processes while the budget is spent. Each test names what it attacks."""

from __future__ import annotations

import json
import os

import pytest
from kafkalite import Admin, KafkaliteError, Producer
from kafkalite.datadir import METADATA_FILE, DataDir
from kafkalite.errors import InvalidConfigError, InvalidTypeError


def _hand_written_budget(data_dir: str, value: object) -> None:
    """Set log.preallocate.budget.bytes in the metadata file as a person editing it would."""
    path = os.path.join(data_dir, METADATA_FILE)
    with open(path) as f:
        data = json.load(f)
    data.setdefault("config", {})["log.preallocate.budget.bytes"] = value
    with open(path, "w") as f:
        json.dump(data, f)


@pytest.mark.parametrize(
    "value, error",
    [
        ("abc", InvalidConfigError),
        ("1e3", InvalidConfigError),
        (None, InvalidTypeError),
        ([1], InvalidTypeError),
        ({"a": 1}, InvalidTypeError),
        (1.5, InvalidConfigError),
        (True, InvalidTypeError),
        (-5, InvalidConfigError),
        (2**64, InvalidConfigError),
    ],
)
def test_hand_written_budget_value_is_a_typed_error(tmp_path, value, error):
    """Before: open_partition ran int() on the stored value, so "abc", null, [1] raised a bare
    ValueError/TypeError from the producer's sender (with a logged traceback), and 1.5 / true
    were silently taken as a 1-byte budget."""
    data_dir = str(tmp_path / "d")
    Admin(data_dir).create_topic("t", partitions=1)
    _hand_written_budget(data_dir, value)
    with pytest.raises(error, match="log.preallocate.budget.bytes|preallocate_budget_bytes") as caught:
        DataDir(data_dir).open_partition("t", 0)
    assert isinstance(caught.value, KafkaliteError)
    producer = Producer(data_dir)
    try:
        with pytest.raises(error):
            producer.send("t", b"x").get(timeout=10)
    finally:
        producer.close()


@pytest.mark.parametrize("value, limit", [("4096", 4096), (8192.0, 8192), (0, 0)])
def test_hand_written_budget_in_kafka_string_form_is_accepted(tmp_path, value, limit):
    """Kafka's config strings ("4096") and whole floats stay accepted, as alter_data_dir_config does."""
    data_dir = str(tmp_path / "d")
    Admin(data_dir).create_topic("t", partitions=1)
    _hand_written_budget(data_dir, value)
    log = DataDir(data_dir).open_partition("t", 0)
    try:
        log.append_values([b"x"])
        assert [r.value for r in log.records()] == [b"x"]
    finally:
        log.close()
