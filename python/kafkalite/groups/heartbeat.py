"""A group member's heartbeat thread and failure detection: it stamps the member's file, leaves
the group for a member that stopped polling (``max_poll_interval_ms``), and evicts the members
that are gone: dead (their liveness flock is free) or silent past their session timeout (a
static member only when silent). Part of ``kafkalite.groups.member.GroupMember``."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalite.errors import typed_io_errors
from kafkalite.groups.assignment import rebalance
from kafkalite.groups.files import STAMPS, GroupFiles, logger, now_ms, static_member_waited_for

#: How often a member probes the others' liveness locks: the bound on detecting a death.
LIVENESS_PROBE_S = 0.05


class HeartbeatMixin:
    """What ``GroupMember`` (``groups/member.py``) sets up and this part uses."""

    files: GroupFiles
    group_id: str
    group_instance_id: str | None
    member_id: str | None
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    _partition_counts: Callable[[], dict[str, int]]
    _notify: Callable[[], None]
    _fd: int | None
    _left: bool
    _last_poll_ms: int
    _stop: threading.Event

    if TYPE_CHECKING:

        def _update_locked(  # groups/member.py
            self, change: Callable[[dict[str, Any]], None], why: str, require_member: bool = True
        ) -> None:
            raise NotImplementedError

    def _write_stamps(self) -> None:
        if self._fd is not None:
            with typed_io_errors(f"cannot write the heartbeat of member {self.member_id}"):
                os.pwrite(self._fd, STAMPS.pack(now_ms(), self._last_poll_ms), 0)

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
        if now_ms() - self._last_poll_ms > self.max_poll_interval_ms:
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
        return now_ms() - heartbeat > self.session_timeout_ms

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
