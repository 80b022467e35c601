"""Committed offsets of a consumer group, stored durably in the data directory
(``.kafkalite-group-<id>.json``, replaced atomically under a lock). Offsets follow Kafka's
meaning: the next offset to read."""

from __future__ import annotations

import fcntl
import json
import os
import re

from kafkalite.errors import InvalidConfigError

_SAFE = re.compile(r"^[a-zA-Z0-9._-]{1,200}$")


def group_file(data_dir: str, group_id: str) -> str:
    if not isinstance(group_id, str) or not group_id:
        raise InvalidConfigError(f"group_id must be a non-empty str, not {group_id!r}")
    name = group_id if _SAFE.match(group_id) else "x" + group_id.encode("utf-8").hex()
    return os.path.join(data_dir, f".kafkalite-group-{name}.json")


class OffsetStore:
    def __init__(self, data_dir: str, group_id: str) -> None:
        self.path = group_file(data_dir, group_id)
        self.group_id = group_id

    def load(self) -> dict[tuple[str, int], tuple[int, str]]:
        """``{(topic, partition): (offset, metadata)}``."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        return {
            (topic, int(p)): (int(entry["offset"]), entry.get("metadata", ""))
            for topic, parts in data["offsets"].items()
            for p, entry in parts.items()
        }

    def commit(self, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        """Merge ``offsets`` into the stored ones, durably."""
        with open(self.path + ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = self.load()
            current.update(offsets)
            data: dict = {"version": 1, "group_id": self.group_id, "offsets": {}}
            for (topic, p), (offset, meta) in sorted(current.items()):
                data["offsets"].setdefault(topic, {})[str(p)] = {"offset": offset, "metadata": meta}
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, self.path)
            fd = os.open(os.path.dirname(self.path), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
