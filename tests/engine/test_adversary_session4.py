"""Adversary findings on session 4's error mapping and config tables (issues 11 and 12).

A topic entry of ``.kafkalite-topics.json`` edited by hand into the wrong shape (not an object,
``partitions`` not a positive integer) must give a typed error naming the file and what to fix,
as a damaged file does (CorruptMetadataError, a KafkaliteError and ValueError); today the
Producer and Consumer raise bare AttributeError / TypeError / ValueError / OverflowError from
deep inside (producer.py _Topic.configure, consumer.py _refresh_subscription), and a consumer
of "partitions": -1 silently reads nothing. datadir._read_metadata now checks every entry."""

from __future__ import annotations

import json
import os

import pytest
from kafkalite import Admin, Consumer, KafkaliteError, Producer
from kafkalite.datadir import METADATA_FILE

BAD_ENTRIES = {
    "entry-is-int": 5,
    "entry-is-list": [1],
    "partitions-str": {"partitions": "abc", "config": {}},
    "partitions-null": {"partitions": None, "config": {}},
    "partitions-negative": {"partitions": -1, "config": {}},
}


def _hand_written_topic(data_dir: str, entry: object) -> None:
    os.makedirs(os.path.join(data_dir, "t-0"))
    with open(os.path.join(data_dir, METADATA_FILE), "w") as f:
        json.dump({"version": 1, "topics": {"t": entry}}, f)


def _typed(error: BaseException) -> bool:
    return isinstance(error, KafkaliteError) and isinstance(error, ValueError)


@pytest.mark.parametrize("entry", list(BAD_ENTRIES.values()), ids=list(BAD_ENTRIES))
def test_producer_on_hand_edited_topic_entry_is_a_typed_error(tmp_path, entry):
    data_dir = str(tmp_path / "data")
    _hand_written_topic(data_dir, entry)
    with Producer(data_dir) as producer:
        with pytest.raises(Exception) as info:
            producer.send("t", b"v", key=b"k").get(timeout=5)
    assert _typed(info.value), f"{type(info.value).__name__}: {info.value}"
    assert METADATA_FILE in str(info.value)


@pytest.mark.parametrize("entry", list(BAD_ENTRIES.values()), ids=list(BAD_ENTRIES))
def test_consumer_on_hand_edited_topic_entry_is_a_typed_error(tmp_path, entry):
    data_dir = str(tmp_path / "data")
    _hand_written_topic(data_dir, entry)
    with pytest.raises(Exception) as info:
        with Consumer(data_dir, "t", auto_offset_reset="earliest", consumer_timeout_ms=100) as consumer:
            list(consumer)
    assert _typed(info.value), f"{type(info.value).__name__}: {info.value}"
    assert METADATA_FILE in str(info.value)


@pytest.mark.parametrize("name", ["../../outside", ".."])
def test_hand_edited_topic_name_leaving_the_data_directory_is_refused(tmp_path, name):
    """A topic name in the metadata file is a folder prefix: '../../outside' was listed by
    Admin.list_topics and its partition folders would lie outside the data directory."""
    data_dir = str(tmp_path / "data")
    os.makedirs(data_dir)
    with open(os.path.join(data_dir, METADATA_FILE), "w") as f:
        json.dump({"version": 1, "topics": {name: {"partitions": 1, "config": {}}}}, f)
    with pytest.raises(Exception) as info:
        Admin(data_dir).list_topics()
    assert _typed(info.value), f"{type(info.value).__name__}: {info.value}"
    assert not os.path.exists(tmp_path / "outside-0")


@pytest.mark.parametrize("config", [[1], "x", 5])
def test_hand_edited_data_directory_config_of_the_wrong_shape_is_a_typed_error(tmp_path, config):
    """The top-level "config" not an object gave a bare TypeError ('list' object is not a
    mapping) from DataDir.dir_config in every Producer.send."""
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t", partitions=1)
    path = os.path.join(data_dir, METADATA_FILE)
    with open(path) as f:
        meta = json.load(f)
    meta["config"] = config
    with open(path, "w") as f:
        json.dump(meta, f)
    with Producer(data_dir) as producer:
        with pytest.raises(Exception) as info:
            producer.send("t", b"v", key=b"k").get(timeout=5)
    assert _typed(info.value), f"{type(info.value).__name__}: {info.value}"
    assert METADATA_FILE in str(info.value)
