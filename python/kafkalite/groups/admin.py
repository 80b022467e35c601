"""Consumer groups seen from outside (what ``kafka-consumer-groups.sh`` does): list, describe
with lag, delete, and reset committed offsets of an inactive group. Used by ``Admin`` and by
``kafkalite groups``."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kafkalite.datadir import DataDir
from kafkalite.errors import (
    GroupIdNotFoundError,
    IllegalStateError,
    InvalidConfigError,
    InvalidTypeError,
    with_action,
)
from kafkalite.groups.assignors import TopicPartition
from kafkalite.groups.member import GroupFiles, describe, list_group_ids, members_refusal, partition_key
from kafkalite.groups.offsets import OFFSETS_TOPIC, OffsetStore, decode_key
from kafkalite.log import Log


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end_offset: int
    lag: int | None
    member_id: str | None
    client_id: str | None


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str  # Empty, Stable, PreparingRebalance (hand-overs pending) or Dead
    generation: int
    protocol: str | None
    members: dict[str, dict[str, Any]]
    partitions: list[PartitionLag]


def groups_with_offsets(data_dir: DataDir) -> set[str]:
    """Every group id that has a record in ``__consumer_offsets``."""
    if OFFSETS_TOPIC not in data_dir.topics():
        return set()
    live: dict[bytes, bool] = {}  # key -> its latest record is not a tombstone
    for p in range(data_dir.partitions(OFFSETS_TOPIC)):
        path = data_dir.partition_path(OFFSETS_TOPIC, p)
        if not os.path.isdir(path):
            continue
        with Log(path, readonly=True) as log:
            for r in log.records():
                if r.key:
                    live[r.key] = r.value is not None
    decoded = (decode_key(key) for key, present in live.items() if present)
    return {d[0] for d in decoded if d is not None}


def list_groups(data_dir: DataDir) -> list[str]:
    return sorted(set(list_group_ids(data_dir.path)) | groups_with_offsets(data_dir))


def _end_offset(data_dir: DataDir, topic: str, partition: int) -> int:
    path = data_dir.partition_path(topic, partition)
    if not os.path.isdir(path):
        return 0
    with Log(path, readonly=True) as log:
        return log.end_offset


def describe_group(data_dir: DataDir, group_id: str) -> GroupDescription:
    state = describe(data_dir.path, group_id)
    with OffsetStore(data_dir, group_id) as store:
        committed = store.load()
    live = {m: info for m, info in state["members"].items() if info["alive"]}
    owner_of = {tp: m for m, info in live.items() for tp in info["assignment"]}
    topics = data_dir.topics()
    keys = set(committed) | {(tp.topic, tp.partition) for tp in owner_of}
    rows = []
    for topic, p in sorted(keys):
        if topic not in topics:
            continue
        end = _end_offset(data_dir, topic, p)
        offset = committed.get((topic, p), (None, ""))[0]
        member = owner_of.get(TopicPartition(topic, p))
        rows.append(
            PartitionLag(
                topic,
                p,
                offset,
                end,
                None if offset is None else max(0, end - offset),
                member,
                live[member]["client_id"] if member else None,
            )
        )
    if live:
        handing_over = any(state["owners"].get(partition_key(tp)) != m for tp, m in owner_of.items())
        status = "PreparingRebalance" if handing_over else "Stable"
    else:
        status = "Empty" if committed else "Dead"
    return GroupDescription(group_id, status, state["generation"], state["protocol"], live, rows)


def _require_inactive(data_dir: DataDir, group_id: str, what: str) -> None:
    """Under ``GroupFiles.locked()``: refuse while the group has live members (embedded or
    network), as Kafka refuses an admin's offset change of a non-empty group."""
    refusal = members_refusal(data_dir.path, group_id)
    if refusal is not None:
        raise IllegalStateError(f"cannot {what} group {group_id!r}: {refusal}; stop its consumers first")


def delete_group(data_dir: DataDir, group_id: str) -> int:
    """Tombstone the group's committed offsets and remove its membership files. Returns how
    many offsets were deleted. A group with neither members nor committed offsets does not
    exist: GroupIdNotFoundError, as Kafka's DeleteGroups answers GROUP_ID_NOT_FOUND."""
    _require_inactive(data_dir, group_id, "delete")
    files = GroupFiles(data_dir.path, group_id)
    # Its folder counts even when it is no group (a planted symlink): deleting removes it.
    if not os.path.lexists(files.path) and group_id not in groups_with_offsets(data_dir):
        raise with_action(
            GroupIdNotFoundError,
            f"consumer group {group_id!r} does not exist in {data_dir.path} (no member, no committed offset)",
            "see the groups there",
            "Admin.list_groups",
        )
    with OffsetStore(data_dir, group_id) as store:
        deleted = store.delete()
    # files.path is one encoded component under the groups folder (never "..", never the data
    # directory); a symlink there is removed as a link, never followed.
    if os.path.dirname(files.path) != files.root or os.path.islink(files.root):
        raise IllegalStateError(f"refusing to delete {files.path}: not a group folder of {data_dir.path}")
    if os.path.islink(files.path):
        os.unlink(files.path)
    elif os.path.isdir(files.path):
        shutil.rmtree(files.path)
    return deleted


def plan_reset(
    data_dir: DataDir,
    group_id: str,
    partitions: list[tuple[str, int]],
    *,
    to_earliest: bool = False,
    to_latest: bool = False,
    to_datetime: str | None = None,
    to_offset: int | None = None,
    shift_by: int | None = None,
) -> dict[tuple[str, int], int]:
    """New offsets for ``partitions``, clamped to each partition's [start, end] as Kafka does."""
    chosen = [to_earliest, to_latest, to_datetime is not None, to_offset is not None, shift_by is not None]
    if sum(chosen) != 1:
        raise InvalidConfigError(
            "give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by"
        )
    timestamp = None
    if to_datetime is not None:
        try:
            timestamp = int(datetime.fromisoformat(to_datetime).timestamp() * 1000)
        except ValueError:
            raise InvalidConfigError(
                f"--to-datetime takes an ISO date like 2026-11-22T10:00:00.000, not {to_datetime!r}"
            ) from None
    wanted = []
    for entry in partitions:
        if isinstance(entry, str) or not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise InvalidTypeError(f"partitions must be (topic, partition) pairs, not {entry!r}")
        topic, p = entry
        count = data_dir.partitions(topic)  # a known topic (never a path), else a typed error
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < count:
            raise InvalidConfigError(f"topic {topic!r} has partitions 0..{count - 1}, not {p!r}")
        wanted.append((topic, p))
    with OffsetStore(data_dir, group_id) as store:
        committed = store.load()
    plan = {}
    for topic, p in wanted:
        with Log(data_dir.partition_path(topic, p), readonly=True) as log:
            start, end = log.start_offset, log.end_offset
            if to_earliest:
                target = start
            elif to_latest:
                target = end
            elif timestamp is not None:
                found = log.offset_for_timestamp(timestamp)
                target = end if found is None else found
            elif to_offset is not None:
                target = to_offset
            else:
                current = committed.get((topic, p), (start, ""))[0]
                target = current + int(shift_by or 0)
        plan[(topic, p)] = min(max(target, start), end)
    return plan


def execute_reset(data_dir: DataDir, group_id: str, plan: dict[tuple[str, int], int]) -> None:
    # Checked and written under the group's lock, so no member joins in between.
    with GroupFiles(data_dir.path, group_id).locked():
        _require_inactive(data_dir, group_id, "reset offsets of")
        with OffsetStore(data_dir, group_id) as store:
            store.commit({tp: (offset, "") for tp, offset in plan.items()})
