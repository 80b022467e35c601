"""A consumer group's files on disk, and what can be read from them without joining.

Files, under ``<data dir>/.kafkalite-groups/<encoded group id>/`` (``encode_name``: group and
client ids are any string, as in Kafka, and never name a path outside their own folder):

- ``state.json``: the group as Kafka's coordinator would hold it: generation, protocol,
  members with their subscriptions, the assignment, and which member currently *owns* each
  partition. Every change is a read-modify-write under ``state.lock`` (a flock), replaced by
  rename, followed by a wake-up of every consumer through the data directory's notifier.
- ``network-owner.lock`` (``_native.GROUP_NETWORK_OWNER_FILE``): a ``kafkalite serve`` holds a flock
  on it while network consumers are members of the group (the server coordinates them). A group
  id has one coordinator at a time, so ``join`` refuses the group while the flock is held
  (``InconsistentGroupProtocolError``), and the server refuses network members while embedded
  ones are alive (a static one, see below, until its session expires). Both sides decide under ``state.lock``. A killed server's flock is gone with it.
- ``<encoded member id>.member``: each member holds an exclusive flock on its own file for life. The
  kernel drops it when the process dies, however it dies, so others detect a death by probing
  the lock (every ``group.LIVENESS_PROBE_S``) rather than by waiting for a session timeout. The
  file also holds two timestamps (last heartbeat, last poll) for members alive but stuck:
  ``session_timeout_ms`` and ``max_poll_interval_ms``.

Membership itself (joining, heartbeats, eviction, the hand-over) is ``kafkalite.groups.member``; the
assignment a rebalance computes is ``kafkalite.groups.assignment``. Here: the ids as file names,
the state's schema and its locked read/write, liveness probes, and the read-only questions the
admin and ``kafkalite groups`` ask (``describe``, ``live_members``, ``members_refusal``,
``list_group_ids``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kafkalite import _native
from kafkalite._files import open_nofollow, write_atomically
from kafkalite.errors import InvalidConfigError, InvalidTypeError, typed_io_errors
from kafkalite.groups.assignors import TopicPartition

GROUPS_DIR = _native.GROUPS_DIR
STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")
#: A member file's two stamps: last heartbeat ms, last poll ms.
STAMPS = struct.Struct("<qq")
logger = logging.getLogger("kafkalite.group")  # one logger for the group's modules, as before the split

# -- ids as file names -------------------------------------------------------------------------
# The engine owns the rule (``_native.id_file_name``, Rust's ``files::id_file_name``), so this
# side and ``kafkalite serve`` name a group's folder alike; decoding it back stays here.
_HEX = "0123456789ABCDEF"
#: Longer encoded names are hashed: ``_HASHED`` + SHA-256 of the id (the id itself is then read
#: back from the group's state.json).
MAX_NAME = _native.ID_NAME_MAX
_HASHED = _native.HASHED_ID_PREFIX


def encode_name(value: str, what: str = "group_id") -> str:
    """The file-name component that stands for an id (a group id or a member id): one path
    component, never "." or "..", never longer than ``MAX_NAME``, different for every id."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be a str, not {type(value).__name__}")
    try:
        return _native.id_file_name(value, what)
    except UnicodeEncodeError:
        raise InvalidConfigError(
            f"{what} {value!r} is not valid Unicode text (it holds a lone surrogate)"
        ) from None


def decode_name(name: str) -> str | None:
    """The id that ``encode_name`` turned into ``name``; None for a hashed name (see
    ``group_id_of``) or for anything ``encode_name`` would not have written."""
    if "%" not in name:
        value = name
    else:
        raw = bytearray()
        i = 0
        while i < len(name):
            if name[i] != "%":
                raw += name[i].encode("ascii", "replace")
                i += 1
                continue
            pair = name[i + 1 : i + 3]
            if len(pair) != 2 or any(c not in _HEX for c in pair):
                return None
            raw.append(int(pair, 16))
            i += 3
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        return value if value and encode_name(value) == name else None
    except InvalidConfigError:
        return None


def group_dir(data_dir: str, group_id: str) -> str:
    return os.path.join(data_dir, GROUPS_DIR, encode_name(group_id))


def _legacy_group_dir(data_dir: str, group_id: str) -> str:
    """Where kafkalite before the encoding above kept a group whose id had other characters
    than [a-zA-Z0-9._-]: "x" + hex. Read (and deleted) only when its state.json names the group."""
    return os.path.join(data_dir, GROUPS_DIR, "x" + group_id.encode("utf-8").hex())


def now_ms() -> int:
    return int(time.time() * 1000)


def partition_key(tp: TopicPartition) -> str:
    return f"{tp.topic}:{tp.partition}"  # ':' cannot occur in a topic name


def partition_of_key(key: str) -> TopicPartition:
    topic, _, p = key.rpartition(":")
    return TopicPartition(topic, int(p))


def empty_state() -> dict[str, Any]:
    return {
        "generation": 0,
        "protocol": None,
        "members": {},
        "assignment": {},
        "owners": {},
        "partitions": {},
    }


def _is_key(k: object) -> bool:
    if not isinstance(k, str):
        return False
    topic, sep, p = k.rpartition(":")
    return bool(sep and topic and p.isdigit() and p.isascii())


def _state_problem(state: dict[str, Any]) -> str | None:
    """What makes ``state`` not a group state as ``save`` writes it, or None."""
    members, assignment, owners, partitions = (
        state.get(k) for k in ("members", "assignment", "owners", "partitions")
    )
    if type(state.get("generation")) is not int:
        return "generation is not an integer"
    if not (state.get("protocol") is None or state.get("protocol") in STRATEGIES):
        return "unknown protocol"
    if (
        not isinstance(members, dict)
        or not isinstance(assignment, dict)
        or not isinstance(owners, dict)
        or not isinstance(partitions, dict)
    ):
        return "members, assignment, owners and partitions must be objects"
    for member_id, info in members.items():
        try:
            encode_name(member_id, "member id")
        except InvalidConfigError as e:
            return str(e)
        if not (
            isinstance(info, dict)
            and isinstance(info.get("client_id"), str)
            and isinstance(info.get("topics"), list)
            and all(isinstance(t, str) for t in info["topics"])
            and isinstance(info.get("strategies"), list)
            and info["strategies"]
            and all(x in STRATEGIES for x in info["strategies"])
            and isinstance(info.get("joined"), (int, float))
            and isinstance(info.get("instance_id"), (str, type(None)))
            and type(info.get("session_timeout_ms", 0)) is int
        ):
            return f"member {member_id!r} is malformed"
    if not all(isinstance(v, list) and all(_is_key(k) for k in v) for v in assignment.values()):
        return "malformed assignment"
    if not all(_is_key(k) and isinstance(m, str) for k, m in owners.items()):
        return "malformed owners"
    if not all(isinstance(t, str) and type(n) is int and n >= 0 for t, n in partitions.items()):
        return "malformed partition counts"
    return None


class GroupFiles:
    """The group's directory: state under a lock, and the members' liveness files."""

    def __init__(self, data_dir: str, group_id: str) -> None:
        self.group_id = group_id
        self.root = os.path.join(data_dir, GROUPS_DIR)
        self.path = group_dir(data_dir, group_id)
        if not os.path.isdir(self.path):
            legacy = _legacy_group_dir(data_dir, group_id)
            if (
                legacy != self.path
                and len(os.path.basename(legacy)) <= 255
                and self.load_at(legacy).get("group_id") == group_id
            ):
                self.path = legacy
        self.state_path = os.path.join(self.path, "state.json")

    def exists(self) -> bool:
        return os.path.exists(self.state_path)

    @contextmanager
    def locked(self) -> Iterator[None]:
        with typed_io_errors(f"cannot lock the state of group {self.group_id!r}"):
            os.makedirs(self.path, exist_ok=True)
            fd = open_nofollow(os.path.join(self.path, _native.GROUP_STATE_LOCK_FILE), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def load(self) -> dict[str, Any]:
        return {**self.load_at(self.path), "group_id": self.group_id}

    @staticmethod
    def load_at(path: str) -> dict[str, Any]:
        """The state in ``path`` (empty when there is none). The file is data: a state that is
        not what ``save`` writes is logged and treated as empty (membership is rebuilt as the
        members rejoin), never used to name a file."""
        try:
            with open(os.path.join(path, "state.json"), encoding="utf-8") as f:
                state = {**empty_state(), **json.load(f)}
        except (FileNotFoundError, NotADirectoryError):
            return empty_state()
        except (ValueError, TypeError, OSError) as e:
            logger.warning("ignoring unreadable group state %s: %s", path, e)
            return empty_state()
        problem = _state_problem(state)
        if problem is not None:
            logger.warning("ignoring damaged group state %s: %s", path, problem)
            return empty_state()
        return state

    def save(self, state: dict[str, Any]) -> None:
        """Under ``locked()``. Membership does not outlive a reboot, so no fsync."""
        write_atomically(self.state_path, json.dumps(state, sort_keys=True).encode(), durable=False)

    def stamp(self) -> tuple[int, int, int] | None:
        """Changes whenever the state is replaced."""
        try:
            st = os.stat(self.state_path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def network_owner(self) -> str | None:
        """Who coordinates this group over the network (the text a ``kafkalite serve`` wrote in
        its claim file), or None when no live server holds the claim."""
        try:
            fd = open_nofollow(os.path.join(self.path, _native.GROUP_NETWORK_OWNER_FILE), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "kafkalite serve"
        finally:
            os.close(fd)  # also drops the probe's lock if it got it
        return None

    def member_path(self, member_id: str) -> str:
        return os.path.join(self.path, encode_name(member_id, "member id") + ".member")

    def member_alive(self, member_id: str) -> bool:
        """True while the member's process holds its lock (the kernel drops it on death)."""
        try:
            fd = os.open(self.member_path(member_id), os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # also drops the probe's lock if it got it
        return False

    def member_stamps(self, member_id: str) -> tuple[int, int] | None:
        try:
            with open(self.member_path(member_id), "rb") as f:
                data = f.read(STAMPS.size)
        except FileNotFoundError:
            return None
        return STAMPS.unpack(data) if len(data) == STAMPS.size else None

    def remove_member_file(self, member_id: str) -> None:
        try:
            os.unlink(self.member_path(member_id))
        except FileNotFoundError:
            pass


def describe(data_dir: str, group_id: str) -> dict[str, Any]:
    """The group's state with each member's liveness, for ``kafkalite groups describe``."""
    files = GroupFiles(data_dir, group_id)
    state = files.load()
    for member_id, info in state["members"].items():
        info["alive"] = files.member_alive(member_id)
        info["assignment"] = sorted(partition_of_key(k) for k in state["assignment"].get(member_id, []))
    return state


def static_member_waited_for(files: GroupFiles, member_id: str, info: dict[str, Any], alive: bool) -> bool:
    """Whether a static member still holds its place: it heartbeated within its session
    timeout, whether its process is alive or not."""
    stamps = files.member_stamps(member_id)
    if stamps is None:
        return alive
    return now_ms() - stamps[0] <= int(info.get("session_timeout_ms", 0))


def live_members(data_dir: str, group_id: str) -> list[str]:
    """Members alive, and static members whose place waits for them (their session has not
    expired): the group is not empty while they hold partitions."""
    files = GroupFiles(data_dir, group_id)
    members = files.load()["members"].items()
    return [
        m
        for m, info in members
        if files.member_alive(m)
        or (info.get("instance_id") is not None and static_member_waited_for(files, m, info, False))
    ]


def members_refusal(data_dir: str, group_id: str) -> str | None:
    """Why the group's offsets may not be changed from outside the group (an ``assign()``ed
    consumer's commit, an admin's reset or delete), or None: it has live members, embedded or
    network (a ``kafkalite serve`` holds its claim). Kafka accepts such commits only for an empty
    group; the server applies the same rule to network commits (``server/offset_commit.rs``).
    Ask under ``GroupFiles.locked()``, which every embedded join and the server's claim take."""
    live = live_members(data_dir, group_id)
    if live:
        return (
            f"group {group_id!r} has active members ({len(live)} alive, or static and within their session)"
        )
    server = GroupFiles(data_dir, group_id).network_owner()
    if server is not None:
        return f"group {group_id!r} has network members, coordinated by {server}"
    return None


def group_id_of(root: str, name: str) -> str | None:
    """The group whose folder under ``root`` is called ``name``; None for anything else (a
    stray file, a symlink, a name ``encode_name`` would not write)."""
    path = os.path.join(root, name)
    if os.path.islink(path) or not os.path.isdir(path):
        return None
    stored = GroupFiles.load_at(path).get("group_id")
    if isinstance(stored, str) and stored and name == "x" + stored.encode("utf-8", "replace").hex():
        try:
            if encode_name(stored) != name:
                return stored  # a folder in the encoding of kafkalite before encode_name
        except InvalidConfigError:
            pass
    if name.startswith(_HASHED):
        # A long id: the name is its hash, so the id comes from the state, checked against it.
        try:
            return stored if isinstance(stored, str) and encode_name(stored) == name else None
        except InvalidConfigError:
            return None
    return decode_name(name)


def list_group_ids(data_dir: str) -> list[str]:
    """Groups that have (or had) members in this data directory."""
    root = os.path.join(data_dir, GROUPS_DIR)
    if os.path.islink(root) or not os.path.isdir(root):
        return []
    found = (group_id_of(root, name) for name in sorted(os.listdir(root)))
    return sorted(g for g in found if g is not None)
