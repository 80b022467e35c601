"""Facts both the Python layers and the server need are the engine's, and Python asks it: the
topic-name rules, the offsets topic's config, the served fetch.max.bytes default and bounds, and
Kafka's transaction state names. Each test fails if a Python copy comes back and drifts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafkalite import Admin, _native, datadir, server
from kafkalite.errors import InvalidTopicError, InvalidTopicTypeError, InvalidTypeError
from kafkalite.groups import offsets
from kafkalite.transactions import admin as transaction_admin


def test_python_topic_name_rule_is_the_engines() -> None:
    assert datadir.validate_topic_name is _native.validate_topic_name


# Hostile names: each one is refused by the engine's rule, so by every caller. "abc\n" passed the
# old Python copy (a regex whose "$" also matches before a final newline) and became a folder.
REFUSED = [
    ("trailing newline", "abc\n"),
    ("inner newline", "a\nb"),
    ("slash", "a/b"),
    ("dot", "."),
    ("dot dot", ".."),
    ("empty", ""),
    ("too long", "a" * 250),
    ("non-ASCII letter", "caf\u00e9"),
    ("non-ASCII digit", "t\u0661"),
    ("lone surrogate", "t\udcff"),
    ("NUL", "t\x00"),
    ("space", "a b"),
]


@pytest.mark.parametrize("name", [n for _, n in REFUSED], ids=[i for i, _ in REFUSED])
def test_a_broken_name_is_refused_with_what_to_fix(name: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidTopicError) as refused:
        datadir.validate_topic_name(name)
    assert isinstance(refused.value, ValueError)
    assert "not allowed" in str(refused.value) or "1-249 characters" in str(refused.value)
    with pytest.raises(InvalidTopicError):
        Admin(str(tmp_path / "d")).create_topic(name, partitions=1)
    made = os.listdir(tmp_path / "d") if (tmp_path / "d").exists() else []
    assert not [entry for entry in made if entry.endswith("-0")]  # no partition folder


@pytest.mark.parametrize("name", ["a", "a" * 249, "A.b_c-9", "..a", "__consumer_offsets"])
def test_a_valid_name_comes_back(name: str) -> None:
    assert datadir.validate_topic_name(name) == name


def test_a_str_subclass_is_a_name_and_other_types_are_type_errors() -> None:
    class Name(str):
        pass

    assert datadir.validate_topic_name(Name("t")) == "t"
    for bad in (5, b"t", None, ["t"]):
        with pytest.raises(InvalidTopicTypeError, match="topic names are str") as refused:
            datadir.validate_topic_name(bad)
        assert isinstance(refused.value, InvalidTypeError) and isinstance(refused.value, TypeError)
    with pytest.raises(InvalidTopicTypeError) as long_one:
        datadir.validate_topic_name(b"x" * 500)
    assert len(str(long_one.value)) < 160  # the value is shown cut to 100 characters


def test_the_other_shared_facts_are_the_engines() -> None:
    assert offsets.OFFSETS_CONFIG == _native.OFFSETS_TOPIC_CONFIG
    assert offsets.OFFSETS_CONFIG == {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}
    assert server.FETCH_MAX_BYTES == _native.FETCH_MAX_BYTES == 55 * 1024 * 1024
    assert server.FETCH_MAX_BYTES_RANGE[0] == _native.FETCH_MAX_BYTES_MIN
    assert transaction_admin.STATES == tuple(_native.TRANSACTION_STATES)
