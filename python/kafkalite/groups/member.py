"""Consumer-group membership across processes on one host, with no coordinator process.

The group's files (``kafkalite.groups.files`` describes them): ``state.json``, changed under a
flock and replaced by rename; ``network-owner.lock``, held by a ``kafkalite serve`` that
coordinates network members of the group (``join`` refuses the group then); and one
``.member`` file per member, flocked for life, so that others see a death by probing the lock
every ``LIVENESS_PROBE_S``, and holding its last heartbeat and poll times for members alive but
stuck (``session_timeout_ms``, ``max_poll_interval_ms``). This module is a member's side:
joining and leaving, following rebalances and the hand-over; its heartbeat thread, which
evicts dead or silent members, is ``kafkalite.groups.heartbeat``.

Static members (``group_instance_id``, Kafka's KIP-345, as ``kafkalite serve`` applies it to network
members): a member with an instance id is not presumed dead when its process dies, only when it is
silent past ``session_timeout_ms``; until then its partitions wait for it. A process that joins
with the instance id of a member still in the group takes that member's place under a new member
id: its assignment, its owned partitions and the generation, with no rebalance unless its
subscription or strategies changed. The member it replaced is fenced (``FencedInstanceIdError``).
A static member's ``close()`` does not leave the group, as Kafka's static members send no
LeaveGroup.

Rebalancing is done by whoever notices the change (a join, a leave, a death, new partitions):
it recomputes the assignment with the group's strategy and bumps the generation
(``kafkalite.groups.assignment``). Ownership
moves only by hand-over: a member gives up a partition after its ``on_partitions_revoked``
ran (so it can commit), and the new owner takes it only once it is free, or once its previous
owner is dead or evicted. So no two live members ever consume a partition at once, and a member
that was evicted is fenced: its commits are rejected.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kafkalite._files import open_nofollow
from kafkalite.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    typed_io_errors,
)
from kafkalite.groups.assignment import EAGER, choose_protocol, rebalance, static_member
from kafkalite.groups.assignors import TopicPartition
from kafkalite.groups.files import (
    GROUPS_DIR,
    MAX_NAME,
    STRATEGIES,
    GroupFiles,
    decode_name,
    describe,
    empty_state,
    encode_name,
    group_dir,
    group_id_of,
    list_group_ids,
    live_members,
    logger,
    members_refusal,
    now_ms,
    partition_key,
    partition_of_key,
    static_member_waited_for,
)
from kafkalite.groups.heartbeat import LIVENESS_PROBE_S, HeartbeatMixin

# The names other modules and tests import from ``kafkalite.groups.member`` (before the split it held all).
__all__ = [
    "EAGER",
    "GROUPS_DIR",
    "LIVENESS_PROBE_S",
    "MAX_NAME",
    "STRATEGIES",
    "Changes",
    "GroupFiles",
    "GroupMember",
    "choose_protocol",
    "decode_name",
    "describe",
    "empty_state",
    "encode_name",
    "group_dir",
    "group_id_of",
    "list_group_ids",
    "live_members",
    "members_refusal",
    "partition_key",
    "rebalance",
    "static_member",
    "static_member_waited_for",
]


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


class GroupMember(HeartbeatMixin):
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
        self._last_poll_ms = now_ms()
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
        self._last_poll_ms = now_ms()

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
        target = sorted(partition_of_key(k) for k in state["assignment"].get(self.member_id, []))
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
