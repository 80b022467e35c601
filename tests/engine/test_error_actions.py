"""Errors whose fix is a call carry it in API terms (``action``, ``action_args``) instead of each
front end rewriting message text (issue 12): the Python message renders the call
(``Admin.create_topic(...)``), and ``message_for`` lets the CLI render its own command; a
missing group is an error (kafka-python's GroupIdNotFoundError), not a successful deletion."""

from __future__ import annotations

import kafkalite
import pytest
from kafkalite import Admin, Consumer, Producer
from kafkalite.errors import GroupIdNotFoundError, NotADataDirError, UnknownTopicError, with_action


def test_unknown_topic_names_the_api_call(tmp_path):
    admin = Admin(str(tmp_path / "data"))
    admin.create_topic("t")
    with pytest.raises(UnknownTopicError) as failure:
        admin.describe_topic("orders")
    e = failure.value
    assert e.action == "Admin.create_topic" and e.action_args == {"topic": "orders"}
    assert str(e).endswith("create it first: Admin.create_topic(...)"), str(e)
    rendered = e.message_for(lambda action, args: f"<{action} {args['topic']}>")
    assert (
        rendered.endswith("create it first: <Admin.create_topic orders>")
        and "Admin.create_topic(" not in rendered
    )


def test_not_a_data_dir_names_init(tmp_path):
    with pytest.raises(NotADataDirError) as failure:
        Consumer(str(tmp_path / "typo"), "t")
    e = failure.value
    assert e.action == "Admin.init" and e.action_args == {"path": str(tmp_path / "typo")}
    assert "Admin.init(...)" in str(e)


def test_record_too_large_for_the_topic_names_alter_config(tmp_path):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", config={"max.message.bytes": 1000})
    with Producer(data) as producer, pytest.raises(kafkalite.RecordTooLargeError) as failure:
        producer.send("t", b"x" * 5000)
    assert failure.value.action == "Admin.alter_config" and failure.value.action_args == {"topic": "t"}
    assert "Admin.alter_config(...)" in str(failure.value)


def test_errors_without_a_fix_to_call_render_as_their_message():
    e = kafkalite.InvalidConfigError("bad value")
    assert e.action is None and e.message_for(lambda *_: "unused") == "bad value"
    made = with_action(kafkalite.InvalidConfigError, "bad value", "fix it", "Admin.alter_config")
    assert isinstance(made, ValueError) and str(made) == "bad value; fix it: Admin.alter_config(...)"


def test_deleting_a_missing_group_raises_group_id_not_found(tmp_path):
    data = str(tmp_path / "data")
    Admin(data).create_topic("t")
    with pytest.raises(GroupIdNotFoundError) as failure:
        Admin(data).delete_group("nope")
    e = failure.value
    assert isinstance(e, kafkalite.KafkaliteError) and isinstance(e, KeyError)
    assert str(e).startswith("consumer group 'nope' does not exist") and e.action == "Admin.list_groups"
