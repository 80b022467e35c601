"""Group and client ids are plain strings, as in Kafka: any of them works, and none names a
path outside its own folder (issue 9 point 3). Decoys stand for files outside the data
directory."""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafkalite import Admin, Consumer, Producer, TopicPartition
from kafkalite.cli import main
from kafkalite.errors import GroupIdNotFoundError, InvalidConfigError, InvalidTopicError, InvalidTypeError
from kafkalite.groups.member import GROUPS_DIR, MAX_NAME, decode_name, encode_name

HOSTILE_IDS = [
    "..",
    ".",
    "../x",
    "../../decoy",
    "/abs",
    "a/b",
    "a\x00b",
    "x2e2e",  # what the old encoding made of ".."
    "%2E%2E",  # what the new one makes of it
    "=abc",
    "-dash",
    " spaced out ",
    "é日本\u200b",
    "g" * 255,
    "日" * 200,  # 600 bytes of UTF-8
    "../" * 100,
    "state.json",
]


def tree(root: str) -> dict[str, tuple[int, bytes]]:
    """Every path under root (but the data dir) with its mode and contents."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) != os.path.join(root, "data")]
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = (
                os.lstat(path).st_mode,
                b"" if os.path.isdir(path) else open(path, "rb").read(),
            )
    return out


@pytest.fixture
def setup(tmp_path):
    """A data dir with a topic and a second group, next to decoys outside it."""
    data = str(tmp_path / "data")
    Admin(data).create_topic("t", 1)
    with Producer(data) as producer:
        for i in range(5):
            producer.send("t", value=b"%d" % i)
    (tmp_path / "decoy").write_bytes(b"decoy")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "decoy").write_bytes(b"decoy")
    keeper = Consumer(data, group_id="keeper")
    keeper.assign([TopicPartition("t", 0)])
    keeper.commit({TopicPartition("t", 0): 2})
    keeper.close()
    return data, str(tmp_path)


def use_group(data: str, group_id: str, client_id: str | None = None) -> None:
    consumer = Consumer(
        data,
        "t",
        group_id=group_id,
        client_id=client_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    assert sum(len(v) for v in consumer.poll(200).values()) == 5
    consumer.commit()
    consumer.close()


@pytest.mark.parametrize("group_id", HOSTILE_IDS)
def test_any_group_id_round_trips_and_deletes_only_itself(setup, group_id):
    data, root = setup
    outside = tree(root)
    use_group(data, group_id)
    admin = Admin(data)
    assert group_id in admin.list_groups()
    assert "state.json" not in admin.list_groups() or group_id == "state.json"
    d = admin.describe_group(group_id)
    assert d.group_id == group_id and [(p.topic, p.partition, p.committed) for p in d.partitions] == [
        ("t", 0, 5)
    ]
    assert admin.delete_group(group_id) == 1
    assert admin.list_groups() == ["keeper"]
    assert admin.describe_group("keeper").partitions[0].committed == 2
    assert admin.describe_topic("t").partitions[0].end_offset == 5
    assert tree(root) == outside
    assert sorted(os.listdir(os.path.join(data, GROUPS_DIR))) == [
        "keeper"
    ]  # the lock of its assign-mode commit


@pytest.mark.parametrize("group_id", ["..", ".", "../x", "/abs", "a/b", "x2e2e"])
def test_deleting_a_group_that_never_existed_touches_nothing(setup, group_id):
    data, root = setup
    outside = tree(root)
    before = sorted(os.listdir(data))
    with pytest.raises(GroupIdNotFoundError, match="does not exist"):  # Kafka's GROUP_ID_NOT_FOUND
        Admin(data).delete_group(group_id)
    assert sorted(os.listdir(data)) == before and tree(root) == outside
    assert Admin(data).list_groups() == ["keeper"]


def test_ids_that_look_like_each_others_encodings_stay_apart(setup):
    data, _ = setup
    for group_id in ("..", "x2e2e", "%2E%2E"):
        use_group(data, group_id)
    admin = Admin(data)
    assert admin.list_groups() == sorted(["..", "x2e2e", "%2E%2E", "keeper"])
    admin.delete_group("x2e2e")
    assert admin.list_groups() == sorted(["..", "%2E%2E", "keeper"])
    assert admin.describe_group("..").partitions[0].committed == 5


def test_a_client_id_cannot_place_a_member_file_outside(setup):
    data, root = setup
    outside = tree(root)
    consumer = Consumer(data, "t", group_id="g", client_id="../../x")
    consumer.poll(50)
    member_id = consumer._member.member_id
    assert member_id.startswith("../../x-")  # Kafka's member id: client id + "-" + uuid
    group_folder = os.path.join(data, GROUPS_DIR, "g")
    assert os.path.exists(os.path.join(group_folder, encode_name(member_id) + ".member"))
    assert tree(root) == outside
    consumer.close()
    assert tree(root) == outside


def test_the_encoding_is_one_path_component_and_reversible():
    for value in HOSTILE_IDS + ["g", "a.b", "A-Z_0.9", "%", "%%", "x", "\n", "\udcff"[:0] + "z"]:
        name = encode_name(value)
        assert (
            "/" not in name and "\x00" not in name and name not in (".", "..") and 0 < len(name) <= MAX_NAME
        )
        assert decode_name(name) == value or name.startswith("=")
    names = [encode_name(v) for v in HOSTILE_IDS]
    assert len(set(names)) == len(names)
    for junk in ("state.json.123.tmp", "%2e%2e", "%2", "%ZZ", "%41", "..", ".", "%C3", "=abc", "a%2Fb%"):
        assert decode_name(junk) is None or encode_name(decode_name(junk)) == junk
    with pytest.raises(InvalidTypeError):
        encode_name(b"g")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="empty"):
        encode_name("")
    with pytest.raises(InvalidConfigError, match="surrogate"):
        encode_name("a\udcff")


def test_list_ignores_what_is_not_a_group(setup):
    data, root = setup
    folder = os.path.join(data, GROUPS_DIR)
    os.makedirs(os.path.join(folder, "%zz"))  # not a name encode_name writes
    os.makedirs(os.path.join(folder, "=" + "0" * 64))  # a hashed name with no state to prove it
    open(os.path.join(folder, "stray-file"), "w").close()
    os.symlink(root, os.path.join(folder, "link"))
    assert Admin(data).list_groups() == ["keeper"]
    assert Admin(data).delete_group("link") == 0  # the symlink goes, not what it points to
    assert os.path.exists(os.path.join(root, "decoy")) and not os.path.lexists(os.path.join(folder, "link"))


def test_a_hostile_state_file_names_no_file(setup, caplog):
    """state.json is data: member ids in it are encoded like any id, and a malformed state is
    ignored with a warning."""
    data, root = setup
    outside = tree(root)
    folder = os.path.join(data, GROUPS_DIR, "g")
    os.makedirs(folder)
    member = {"client_id": "c", "topics": ["t"], "strategies": ["range"], "pid": 1, "joined": 0.0}
    state = {
        "generation": 3,
        "protocol": "range",
        "members": {"../../../decoy": member},
        "assignment": {"../../../decoy": ["t:0"]},
        "owners": {},
        "partitions": {"t": 1},
        "group_id": "g",
    }
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump(state, f)
    use_group(data, "g")  # evicts the dead member and removes its (encoded) file
    assert tree(root) == outside
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump({**state, "owners": {"t:0": 7}, "members": {"m": {"client_id": 1}}}, f)
    assert Admin(data).describe_group("g").members == {}
    assert "damaged group state" in caplog.text
    consumer = Consumer(data, "t", group_id="g")  # a damaged state is rebuilt by the next join
    consumer.poll(50)
    assert consumer.assignment() == {TopicPartition("t", 0)}
    consumer.close()
    assert tree(root) == outside


def test_a_group_folder_in_the_old_encoding_is_still_read(setup):
    data, _ = setup
    old = os.path.join(data, GROUPS_DIR, "x" + b"a b".hex())
    os.makedirs(old)
    with open(os.path.join(old, "state.json"), "w") as f:
        json.dump(
            {
                "generation": 1,
                "protocol": None,
                "members": {},
                "assignment": {},
                "owners": {},
                "partitions": {},
                "group_id": "a b",
            },
            f,
        )
    admin = Admin(data)
    assert admin.list_groups() == ["a b", "keeper"]
    assert admin.describe_group("a b").generation == 1
    admin.delete_group("a b")
    assert not os.path.exists(old) and admin.list_groups() == ["keeper"]


CLI_IDS = [g for g in HOSTILE_IDS if "\x00" not in g]  # argv cannot carry a NUL


@pytest.mark.parametrize("group_id", CLI_IDS)
def test_the_command_line_round_trips_every_id(setup, group_id, capsys):
    data, root = setup
    outside = tree(root)
    use_group(data, group_id)

    def run(*argv):
        return main(["--data-dir", data, "groups", *argv])

    assert run("list") == 0
    assert group_id in capsys.readouterr().out.split("\n")
    assert run("describe", "--", group_id) == 0
    assert f"Consumer group '{group_id}'" in capsys.readouterr().out
    assert run("delete", "--", group_id) == 0
    capsys.readouterr()
    assert run("list") == 0 and capsys.readouterr().out.split() == ["keeper"]
    assert run("describe", "--", group_id) == 1
    assert tree(root) == outside and Admin(data).describe_topic("t").partitions[0].end_offset == 5


def test_reset_offsets_takes_only_partitions_of_known_topics(setup):
    data, _ = setup
    admin = Admin(data)
    for bad in ([("../t", 0)], [("t", 5)], [("t", -1)], [("nope", 0)]):
        with pytest.raises((InvalidConfigError, InvalidTopicError, KeyError)):
            admin.reset_offsets("keeper", bad, to_earliest=True)
    with pytest.raises(InvalidTypeError):
        admin.reset_offsets("keeper", ["t"], to_earliest=True)
    assert admin.describe_group("keeper").partitions[0].committed == 2


# -- the folder name's one owner is the engine: names must never change -------------------------
# group.py's encode_name as it was before the engine owned the rule, frozen here: every group
# folder on disk was named by it, so the engine's names must equal its names for every id.
_FROZEN_PLAIN = re.compile(r"[A-Za-z0-9._-]+")
_FROZEN_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_FROZEN_HEX = "0123456789ABCDEF"


def _frozen_encode_name(value: str) -> str:
    import hashlib

    raw = value.encode("utf-8")
    if _FROZEN_PLAIN.fullmatch(value) and value not in (".", ".."):
        name = value
    else:
        name = "".join(
            chr(b) if b in _FROZEN_KEPT else "%" + _FROZEN_HEX[b >> 4] + _FROZEN_HEX[b & 15] for b in raw
        )
    return name if len(name) <= 200 else "=" + hashlib.sha256(raw).hexdigest()


_ID_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from("abcXYZ019._-%=/ \x00\n"), st.characters(blacklist_categories=("Cs",))
    ),
    min_size=1,
    max_size=260,
)


_PLAIN_LONG = st.text(alphabet="abcXYZ019._-", min_size=150, max_size=260)  # around the hashing edge


@settings(max_examples=400, deadline=None)
@given(value=st.one_of(_ID_TEXT, _PLAIN_LONG))
def test_folder_names_are_byte_identical_to_the_old_python_rule(value):
    assert encode_name(value) == _frozen_encode_name(value)


def test_folder_names_at_the_hashing_edge_match_the_old_rule():
    for value in [
        "x" * 200,
        "x" * 201,
        "é" * 33,
        "é" * 34,
        "." * 67,
        "." * 66,
        "..",
        ".",
        "日" * 22,
        "日" * 23,
    ]:
        assert encode_name(value) == _frozen_encode_name(value), value
