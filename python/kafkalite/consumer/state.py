"""What every part of a ``kafkalite.Consumer`` shares: its state, set by ``Consumer.__init__``
(``consumer/__init__.py``), the bookkeeping of its open partitions, and the methods one part calls in
another. ``Consumer`` is this state with its parts mixed in: positions and seeks
(``consumer/positions.py``), fetching and the poll loop (``consumer/fetch.py``), the group side
and commits (``consumer/group_membership.py``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kafkalite.client_metrics import StatsReporter
from kafkalite.datadir import DataDir
from kafkalite.errors import IllegalStateError
from kafkalite.groups.assignors import TopicPartition
from kafkalite.groups.member import GroupMember
from kafkalite.groups.offsets import OffsetStore
from kafkalite.log import Log
from kafkalite.wakeup import Wakeups


class ConsumerState:
    """The attributes below are set by ``Consumer.__init__``; declared here so that each part
    is type-checked against the one list."""

    config: dict[str, Any]
    group_id: str | None
    group_instance_id: str | None
    _dir: DataDir
    _notifier: Wakeups
    _store: OffsetStore | None
    _member: GroupMember | None
    _rebalancing: bool
    _strategies: list[str]
    _read_committed: bool
    _isolation_level: str
    _next_txn_sweep: float
    _logs: dict[TopicPartition, Log]
    _topic_names: dict[str, str]
    _assigned: list[TopicPartition]
    _manual: bool
    _subscription: set[str]
    _pattern: re.Pattern[str] | None
    _listener: Any
    _positions: dict[TopicPartition, int]
    _consumed: dict[TopicPartition, int]
    _paused: set[TopicPartition]
    _next_index: int
    _last_commit: float
    _closed: bool
    _missing_warned: set[str]
    _fetches: int
    _records_consumed: int
    _commits: int
    _stats: StatsReporter

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _log(self, tp: TopicPartition) -> Log:
        log = self._logs.get(tp)
        if log is None:
            log = Log(self._dir.partition_path(tp.topic, tp.partition), readonly=True)
            self._logs[tp] = log
            self._topic_names.setdefault(tp.topic, tp.topic)
        return log

    def _drop_partitions(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._positions.pop(tp, None)
            self._consumed.pop(tp, None)
            self._paused.discard(tp)
            log = self._logs.pop(tp, None)
            if log is not None:
                log.close()
        gone = set(partitions)
        self._assigned = [tp for tp in self._assigned if tp not in gone]

    if TYPE_CHECKING:
        # Defined by one part, called by another (each is in the module named).

        def _refresh_subscription(self) -> None:  # consumer/__init__.py
            raise NotImplementedError

        def _existing(self, tp: TopicPartition) -> TopicPartition:  # consumer/positions.py
            raise NotImplementedError

        def _reset(self, tp: TopicPartition) -> int:  # consumer/positions.py
            raise NotImplementedError

        def _end_of(self, log: Log) -> int:  # consumer/positions.py
            raise NotImplementedError

        def _position_of(self, tp: TopicPartition) -> int:  # consumer/positions.py
            raise NotImplementedError

        def _unstable(self, tp: TopicPartition) -> bool:  # consumer/fetch.py
            raise NotImplementedError

        def _maybe_auto_commit(self) -> None:  # consumer/group_membership.py
            raise NotImplementedError
