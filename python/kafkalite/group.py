"""Consumer-group membership across processes on one host, with no coordinator process.

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
  the lock (every ``LIVENESS_PROBE_S``) rather than by waiting for a session timeout. The
  file also holds two timestamps (last heartbeat, last poll) for members alive but stuck:
  ``session_timeout_ms`` and ``max_poll_interval_ms``.

Static members (``group_instance_id``, Kafka's KIP-345, as ``kafkalite serve`` applies it to network
members): a member with an instance id is not presumed dead when its process dies, only when it is
silent past ``session_timeout_ms``; until then its partitions wait for it. A process that joins
with the instance id of a member still in the group takes that member's place under a new member
id: its assignment, its owned partitions and the generation, with no rebalance unless its
subscription or strategies changed. The member it replaced is fenced (``FencedInstanceIdError``).
A static member's ``close()`` does not leave the group, as Kafka's static members send no
LeaveGroup.

Rebalancing is done by whoever notices the change (a join, a leave, a death, new partitions):
it recomputes the assignment with the group's strategy and bumps the generation. Ownership
moves only by hand-over: a member gives up a partition after its ``on_partitions_revoked``
ran (so it can commit), and the new owner takes it only once it is free, or once its previous
owner is dead or evicted. So no two live members ever consume a partition at once, and a member
that was evicted is fenced: its commits are rejected.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kafkalite import _native
from kafkalite._files import open_nofollow, write_atomically
from kafkalite.assignors import ASSIGNORS, TopicPartition, sticky_assign
from kafkalite.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    InvalidTypeError,
    typed_io_errors,
)

GROUPS_DIR = _native.GROUPS_DIR
#: How often a member probes the others' liveness locks: the bound on detecting a death.
LIVENESS_PROBE_S = 0.05
STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")
EAGER = ("range", "roundrobin")
_STAMPS = struct.Struct("<qq")  # last heartbeat ms, last poll ms
logger = logging.getLogger("kafkalite.group")

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


def _now_ms() -> int:
    return int(time.time() * 1000)


def partition_key(tp: TopicPartition) -> str:
    return f"{tp.topic}:{tp.partition}"  # ':' cannot occur in a topic name


def _tp(key: str) -> TopicPartition:
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
                data = f.read(_STAMPS.size)
        except FileNotFoundError:
            return None
        return _STAMPS.unpack(data) if len(data) == _STAMPS.size else None

    def remove_member_file(self, member_id: str) -> None:
        try:
            os.unlink(self.member_path(member_id))
        except FileNotFoundError:
            pass


def static_member(state: dict[str, Any], instance_id: str) -> str | None:
    """The member id ``instance_id`` maps to in the group (Kafka's staticMemberId), or None."""
    return next((m for m, info in state["members"].items() if info.get("instance_id") == instance_id), None)


def choose_protocol(members: dict[str, dict[str, Any]]) -> str:
    """The first strategy of the longest-standing member that every member supports."""
    ordered = sorted(members.values(), key=lambda m: m["joined"])
    for strategy in ordered[0]["strategies"]:
        if all(strategy in m["strategies"] for m in ordered):
            return strategy
    raise InvalidConfigError(
        "the members of this group share no partition_assignment_strategy: "
        + "; ".join(f"{m['client_id']} supports {m['strategies']}" for m in ordered)
    )


def rebalance(state: dict[str, Any], partition_counts: dict[str, int], why: str) -> None:
    """Recompute the assignment for the current members and start a new generation. Owners
    that left the group lose their claim. ``why`` (a member joined, left...) is logged with the
    new assignment at INFO, as a broker's group coordinator logs each rebalance."""
    members = state["members"]
    state["generation"] += 1
    state["owners"] = {k: m for k, m in state["owners"].items() if m in members}
    if not members:
        state.update(protocol=None, assignment={}, partitions={})
        logger.info(
            "group %r rebalanced (%s): generation %d, no members",
            state.get("group_id"),
            why,
            state["generation"],
        )
        return
    protocol = choose_protocol(members)
    subscriptions = {m: sorted(info["topics"]) for m, info in members.items()}
    wanted = set().union(*map(set, subscriptions.values()))
    counts = {t: n for t, n in partition_counts.items() if t in wanted}
    if protocol in EAGER:
        assignment = ASSIGNORS[protocol](counts, subscriptions)
    else:
        # sticky and cooperative-sticky share the target; the hand-over makes it cooperative.
        owned = {m: [_tp(k) for k in state["assignment"].get(m, [])] for m in members}
        assignment = sticky_assign(counts, subscriptions, owned)
    state["protocol"] = protocol
    state["assignment"] = {m: [partition_key(tp) for tp in tps] for m, tps in assignment.items()}
    state["partitions"] = counts
    logger.info(
        "group %r rebalanced (%s): generation %d, %d member(s), protocol %s, assignment %s",
        state.get("group_id"),
        why,
        state["generation"],
        len(members),
        protocol,
        {m: [f"{tp.topic}-{tp.partition}" for tp in tps] for m, tps in assignment.items()},
    )


@dataclass
class Changes:
    """What a member must do after a rebalance: stop consuming ``revoke`` (after the listener
    ran), then take what it can of ``target``. ``lost``: the member was evicted (fenced)."""

    revoke: list[TopicPartition]
    target: list[TopicPartition]
    generation: int
    lost: bool = False
    #: Eager protocols revoke everything at each new generation (and re-assign what stays).
    eager: bool = False


class GroupMember:
    """One consumer's membership. The consumer drives it from ``poll``; a daemon thread
    heartbeats and evicts dead or stuck members."""

    def __init__(
        self,
        data_dir: str,
        group_id: str,
        *,
        client_id: str,
        strategies: list[str],
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_poll_interval_ms: int,
        partition_counts: Callable[[], dict[str, int]],
        notify: Callable[[], None],
        group_instance_id: str | None = None,
    ) -> None:
        self.files = GroupFiles(data_dir, group_id)
        self.group_instance_id = group_instance_id
        self.group_id = group_id
        self.client_id = client_id
        self.strategies = strategies
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self._partition_counts = partition_counts
        self._notify = notify
        self.member_id: str | None = None
        self.generation = -1
        self.owned: set[TopicPartition] = set()
        self._topics: list[str] = []
        self._seen_stamp: tuple[int, int, int] | None = None
        self._pending = False
        self._left = False
        self._fd: int | None = None
        self._last_poll_ms = _now_ms()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- joining and leaving ---------------------------------------------------------------
    def join(self, topics: list[str]) -> None:
        self._left = False
        # Kafka names members `<group.instance.id or client.id>-<unique>`.
        self.member_id = f"{self.group_instance_id or self.client_id}-{uuid.uuid4()}"
        with typed_io_errors(f"cannot join group {self.group_id!r}"):
            os.makedirs(self.files.path, exist_ok=True)
            self._fd = open_nofollow(self.files.member_path(self.member_id), os.O_RDWR | os.O_CREAT)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._write_stamps()
        self._topics = sorted(topics)
        with self.files.locked():
            server = self.files.network_owner()
            if server is not None:
                self._drop_member_file()
                self.member_id = None
                raise InconsistentGroupProtocolError(
                    f"consumer group {self.group_id!r} is in use over the network by {server} on this data "
                    "directory, which coordinates its network members; a group id has one coordinator at a "
                    "time, so embedded consumers cannot join it now. Use another group_id, or join once the "
                    "network consumers have left the group"
                )
            state = self.files.load()
            self._evict_locked(state)
            info: dict[str, Any] = {
                "client_id": self.client_id,
                "topics": self._topics,
                "strategies": self.strategies,
                "pid": os.getpid(),
                "joined": time.time(),
                "instance_id": self.group_instance_id,
                # How long a static member's place waits for it, for every member to judge alike.
                "session_timeout_ms": self.session_timeout_ms,
            }
            old = static_member(state, self.group_instance_id) if self.group_instance_id is not None else None
            try:
                if old is not None:
                    self._replace_locked(state, old, info)
                else:
                    state["members"][self.member_id] = info
                    rebalance(state, self._partition_counts(), f"member {self.member_id} joined")
            except InvalidConfigError:
                self._drop_member_file()
                raise
            self.files.save(state)
        self._notify()
        self._seen_stamp = None
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._heartbeat_loop, name="kafkalite-group-heartbeat", daemon=True
            )
            self._thread.start()

    def _replace_locked(self, state: dict[str, Any], old: str, info: dict[str, Any]) -> None:
        """A restarted static member takes the place of ``old`` (its previous member id, with
        the same instance id): its seniority, assignment and owned partitions, in the same
        generation. A rebalance only when what it asks for changed (as Kafka rebalances a Stable
        group only when the selected protocol changes; here the assignment is computed from the
        subscriptions, so a changed subscription rebalances too)."""
        assert self.member_id is not None
        before = state["members"].pop(old)
        info["joined"] = before["joined"]
        state["members"][self.member_id] = info
        if old in state["assignment"]:
            state["assignment"][self.member_id] = state["assignment"].pop(old)
        state["owners"] = {k: (self.member_id if m == old else m) for k, m in state["owners"].items()}
        if not self.files.member_alive(old):
            self.files.remove_member_file(old)
        logger.info(
            "group %r: static member with instance id %r rejoined as %s; it replaces member %s, which is fenced",
            self.group_id,
            self.group_instance_id,
            self.member_id,
            old,
        )
        if (before["topics"], before["strategies"]) != (info["topics"], info["strategies"]):
            rebalance(
                state, self._partition_counts(), f"static member {self.member_id} rejoined with changes"
            )
        else:
            logger.info(
                "group %r: static member %s takes its old assignment with no rebalance (generation stays %d)",
                self.group_id,
                self.member_id,
                state["generation"],
            )

    def fenced_by(self, state: dict[str, Any]) -> str | None:
        """The member that took this static member's instance id (a newer process with the same
        ``group_instance_id``), or None."""
        if self.group_instance_id is None:
            return None
        holder = static_member(state, self.group_instance_id)
        return holder if holder is not None and holder != self.member_id else None

    def set_topics(self, topics: list[str]) -> None:
        """The subscription (or what a pattern matches) changed: rebalance."""
        topics = sorted(topics)
        if topics == self._topics or self.member_id is None:
            return
        self._topics = topics
        self._update_locked(
            lambda state: state["members"][self.member_id].__setitem__("topics", topics),
            f"member {self.member_id} subscribed to {topics}",
        )

    def leave(self) -> None:
        """Leave the group (after the consumer revoked and committed): others rebalance now."""
        if self.member_id is None:
            return
        member_id = self.member_id

        def drop(state: dict[str, Any]) -> None:
            state["members"].pop(member_id, None)

        self._update_locked(drop, f"member {member_id} left", require_member=False)
        self.owned.clear()
        self._drop_member_file()
        self.member_id = None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        if self.group_instance_id is None:
            self.leave()
            return
        # A static member does not leave: its place, assignment and partitions wait for it (a
        # restart with the same instance id takes them back) until its session times out. Its
        # file stays, for its last heartbeat; a fenced member has no place, and drops it.
        self.owned.clear()
        if self.member_id is not None and self.fenced_by(self.files.load()) is not None:
            self._drop_member_file()
        else:
            self._close_member_file()
        self.member_id = None

    def _drop_member_file(self) -> None:
        if self.member_id is not None:
            self.files.remove_member_file(self.member_id)
        self._close_member_file()

    def _close_member_file(self) -> None:
        """Give up the liveness lock but keep the file: a static member's last heartbeat, read
        by the others until its session expires (or a restart of it replaces it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _update_locked(
        self, change: Callable[[dict[str, Any]], None], why: str, require_member: bool = True
    ) -> None:
        with self.files.locked():
            state = self.files.load()
            if require_member and self.member_id not in state["members"]:
                return  # evicted meanwhile: the next poll rejoins
            change(state)
            rebalance(state, self._partition_counts(), why)
            self.files.save(state)
        self._notify()

    # -- the consumer's side of a rebalance ------------------------------------------------
    def touch_poll(self) -> None:
        self._last_poll_ms = _now_ms()

    def changes(self) -> Changes | None:
        """What changed since the last call (one stat when nothing did)."""
        stamp = self.files.stamp()
        if stamp == self._seen_stamp and not self._pending:
            return None
        self._seen_stamp = stamp
        state = self.files.load()
        if self.member_id not in state["members"] or (self._left and self.group_instance_id is not None):
            lost = sorted(self.owned)
            self._confirm_owned(state)
            return Changes(revoke=lost, target=[], generation=state["generation"], lost=True)
        self._confirm_owned(state)
        counts = self._partition_counts()
        subscribed = set(self._topics)
        if {t: n for t, n in counts.items() if t in subscribed} != {
            t: n for t, n in state["partitions"].items() if t in subscribed
        }:
            self._update_locked(lambda s: None, "partitions were added")
            return self.changes()
        target = sorted(_tp(k) for k in state["assignment"].get(self.member_id, []))
        if state["generation"] == self.generation and not self._pending:
            return None
        eager = state["protocol"] in EAGER and state["generation"] != self.generation
        revoke = sorted(self.owned) if eager else sorted(self.owned - set(target))
        self.generation = state["generation"]
        return Changes(revoke=revoke, target=target, generation=self.generation, eager=eager)

    def release(self, partitions: list[TopicPartition]) -> None:
        """Give up partitions (their revocation listener has run)."""
        if not partitions:
            return
        with self.files.locked():
            state = self.files.load()
            for tp in partitions:
                if state["owners"].get(partition_key(tp)) == self.member_id:
                    del state["owners"][partition_key(tp)]
            self.files.save(state)
        self.owned -= set(partitions)
        self._notify()

    def acquire(self, target: list[TopicPartition]) -> list[TopicPartition]:
        """Take the partitions of ``target`` that are free (or held by a member that is gone).
        Returns the newly owned ones; the rest stay pending until their owner lets go."""
        wanted = [tp for tp in target if tp not in self.owned]
        if not wanted:
            self._pending = False
            return []
        got = []
        with self.files.locked():
            state = self.files.load()
            if self.member_id not in state["members"]:
                return []
            assigned = set(state["assignment"].get(self.member_id, []))
            for tp in wanted:
                k = partition_key(tp)
                holder = state["owners"].get(k)
                if k in assigned and (
                    holder is None or holder == self.member_id or holder not in state["members"]
                ):
                    state["owners"][k] = self.member_id
                    got.append(tp)
            if got:
                self.files.save(state)
        self.owned |= set(got)
        self._pending = len(got) < len(wanted)
        return got

    def verified_owned(self) -> set[TopicPartition]:
        """The partitions this member may fetch now: ``owned`` as the group's state confirmed it
        at the last ``changes()`` (which the consumer calls right before each fetch; it re-reads
        the state whenever the file changed), and nothing once the heartbeat thread left the
        group. So no path returns records of a partition that another member may own."""
        if self._left or self.member_id is None:
            self.owned = set()  # left (max_poll_interval_ms) or not joined: owns nothing
        return set(self.owned)

    def _confirm_owned(self, state: dict[str, Any]) -> None:
        """Keep only what the group's state records as this member's: after an eviction (or
        anything else that took a partition away) the member stops fetching at once, whatever
        its listener does."""
        if self.member_id not in state["members"]:
            self.owned = set()
        else:
            self.owned = {tp for tp in self.owned if state["owners"].get(partition_key(tp)) == self.member_id}

    def mark_pending(self) -> None:
        """Re-check the assignment on the next ``changes()`` (a rebalance step was cut short)."""
        self._pending = True

    def rejoin(self) -> None:
        """After being evicted: a new member id, a new generation. A static member that a newer
        process with the same instance id replaced is fenced instead (fatal, as in Kafka)."""
        fenced_by = self.fenced_by(self.files.load())
        if fenced_by is not None:
            raise FencedInstanceIdError(
                f"member {self.member_id} of group {self.group_id!r} was fenced: another consumer joined with the "
                f"same group_instance_id {self.group_instance_id!r} (now member {fenced_by}) and took its place; "
                "two consumers must not share an instance id"
            )
        self.owned.clear()
        if self.group_instance_id is not None:
            self._close_member_file()  # its place may still be there to take back (see join)
        else:
            self._drop_member_file()
        self.member_id = None
        self.generation = -1
        self.join(self._topics)

    @contextmanager
    def commit_guard(self, partitions: list[TopicPartition]) -> Iterator[None]:
        """Hold the group lock while committing, after checking that this member still owns
        every partition in the current generation (Kafka's generation fencing)."""
        with self.files.locked():
            state = self.files.load()
            fenced_by = self.fenced_by(state)
            if fenced_by is not None:
                raise FencedInstanceIdError(
                    f"commit rejected: member {self.member_id} of group {self.group_id!r} was fenced by member "
                    f"{fenced_by}, which joined with the same group_instance_id {self.group_instance_id!r}"
                )
            if self.member_id not in state["members"]:
                raise CommitFailedError(
                    f"commit rejected: member {self.member_id} of group {self.group_id!r} was removed from the group "
                    f"(generation is now {state['generation']}; it was presumed dead, or exceeded session_timeout_ms "
                    "or max_poll_interval_ms) and its partitions were given to other members. Poll again to rejoin."
                )
            foreign = [tp for tp in partitions if state["owners"].get(partition_key(tp)) != self.member_id]
            if foreign:
                raise CommitFailedError(
                    f"commit rejected: {foreign} are not owned by member {self.member_id} in generation "
                    f"{state['generation']} of group {self.group_id!r} (the group rebalanced)"
                )
            yield

    # -- heartbeats and failure detection --------------------------------------------------
    def _write_stamps(self) -> None:
        if self._fd is not None:
            with typed_io_errors(f"cannot write the heartbeat of member {self.member_id}"):
                os.pwrite(self._fd, _STAMPS.pack(_now_ms(), self._last_poll_ms), 0)

    def _heartbeat_loop(self) -> None:
        next_beat = 0.0
        last_problem = ""
        while not self._stop.wait(LIVENESS_PROBE_S):
            try:
                # A static member past max_poll_interval_ms stops heartbeating (its session then
                # expires, unless it polls and rejoins first), as Kafka's static members do.
                if time.monotonic() >= next_beat and not (self._left and self.group_instance_id is not None):
                    self._write_stamps()
                    next_beat = time.monotonic() + self.heartbeat_interval_ms / 1000.0
                self._check_members()
                last_problem = ""
            except (OSError, ValueError) as e:  # retried on the next tick; said once, not every tick
                if str(e) != last_problem:
                    logger.warning(
                        "heartbeat of member %s of group %r failed; retrying: %s",
                        self.member_id,
                        self.group_id,
                        e,
                    )
                last_problem = str(e)
            except Exception:  # a bug: the thread must not die silently, nor stop heartbeating
                logger.exception("heartbeat of member %s of group %r failed", self.member_id, self.group_id)

    def _check_members(self) -> None:
        if self.member_id is None:
            return
        if _now_ms() - self._last_poll_ms > self.max_poll_interval_ms:
            # kafka-python's heartbeat thread leaves the group for a consumer that stopped polling.
            if not self._left:
                self._left = True
                if self.group_instance_id is not None:
                    logger.warning(
                        "static member %s (instance id %r) of group %r stops heartbeating: no poll() for more than "
                        "max_poll_interval_ms (%d ms); its partitions go to other members when its session expires "
                        "(session_timeout_ms %d), unless it polls again before",
                        self.member_id,
                        self.group_instance_id,
                        self.group_id,
                        self.max_poll_interval_ms,
                        self.session_timeout_ms,
                    )
                    return
                logger.warning(
                    "member %s of group %r leaves the group: no poll() for more than max_poll_interval_ms (%d ms); "
                    "its partitions go to other members and its next commit fails (poll more often, or raise "
                    "max_poll_interval_ms / lower max_poll_records)",
                    self.member_id,
                    self.group_id,
                    self.max_poll_interval_ms,
                )
                self._update_locked(
                    lambda s: s["members"].pop(self.member_id, None),
                    f"member {self.member_id} exceeded max_poll_interval_ms",
                )
            return
        state = self.files.load()
        if any(self._is_gone(m, info) for m, info in state["members"].items() if m != self.member_id):
            with self.files.locked():
                state = self.files.load()
                if self._evict_locked(state):
                    rebalance(state, self._partition_counts(), "members were evicted")
                    self.files.save(state)
                    self._notify()

    def _is_gone(self, member_id: str, info: dict[str, Any]) -> bool:
        """Dead (its lock is free), or alive but silent past ``session_timeout_ms``. A static
        member's death alone does not count: it is gone once silent (or dead without a file)."""
        alive = self.files.member_alive(member_id)
        if info.get("instance_id") is not None:
            return not static_member_waited_for(self.files, member_id, info, alive)
        return not alive or self._is_silent(member_id)

    def _is_silent(self, member_id: str) -> bool:
        stamps = self.files.member_stamps(member_id)
        if stamps is None:
            return False
        heartbeat, _ = stamps
        return _now_ms() - heartbeat > self.session_timeout_ms

    def _evict_locked(self, state: dict[str, Any]) -> bool:
        """Remove dead and silent members (under the lock); a dead one's file goes too."""
        evicted = False
        for m, info in [(m, info) for m, info in state["members"].items() if m != self.member_id]:
            if not self._is_gone(m, info):
                continue
            alive = self.files.member_alive(m)
            static = info.get("instance_id") is not None
            del state["members"][m]
            if not alive:
                self.files.remove_member_file(m)
            if static:
                why = (
                    f"no heartbeat for more than its session_timeout_ms ({info.get('session_timeout_ms')} ms)"
                )
            elif alive:
                why = f"no heartbeat for more than session_timeout_ms ({self.session_timeout_ms} ms)"
            else:
                why = "its process is gone"
            logger.warning(
                "group %r evicted %smember %s: %s; its partitions are reassigned and its commits are fenced",
                self.group_id,
                "static " if static else "",
                m,
                why,
            )
            evicted = True
        return evicted


def describe(data_dir: str, group_id: str) -> dict[str, Any]:
    """The group's state with each member's liveness, for ``kafkalite groups describe``."""
    files = GroupFiles(data_dir, group_id)
    state = files.load()
    for member_id, info in state["members"].items():
        info["alive"] = files.member_alive(member_id)
        info["assignment"] = sorted(_tp(k) for k in state["assignment"].get(member_id, []))
    return state


def static_member_waited_for(files: GroupFiles, member_id: str, info: dict[str, Any], alive: bool) -> bool:
    """Whether a static member still holds its place: it heartbeated within its session
    timeout, whether its process is alive or not."""
    stamps = files.member_stamps(member_id)
    if stamps is None:
        return alive
    return _now_ms() - stamps[0] <= int(info.get("session_timeout_ms", 0))


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
