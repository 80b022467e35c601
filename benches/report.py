"""What every benchmark script shares: where it leaves its figures (``<name>.json`` raw and
``<name>.md``, the table quoted in the README and the issue notes, in ``benches/results`` by
default), the machine line of each table, and the process's resident memory."""

from __future__ import annotations

import json
import os
import platform


def machine() -> str:
    """The machine line of a results table: architecture, cores and Python version."""
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def memory_status(fields: tuple[str, ...] = ("VmRSS", "RssFile")) -> dict[str, int]:
    """This process's resident memory in bytes, from /proc/self/status (Linux): ``VmRSS`` is all
    of it, ``RssFile`` the file-backed pages (the log's maps), ``RssAnon`` the rest."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in fields:
                out[key] = int(value.split()[0]) * 1024
    return out


def write_report(out_dir: str, name: str, results: dict, lines: list[str]) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
