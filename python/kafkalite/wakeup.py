"""How a caught-up consumer waits for new records without writing to a directory it only reads.

Producers bump a futex counter in ``.kafkalite-notify`` after each append (``Notifier``), and a
consumer sleeps on it. Opening a ``Notifier`` creates the file (and extends a short one), so a
consumer that only reads opens it only when it already exists in full, is a regular file it may
map for writing, in a kafkalite data directory. Otherwise (a Kafka broker's log directory, a
read-only directory or file system, a directory no producer has opened yet) it polls: it sleeps
``POLL_INTERVAL_MS`` at most between looks, so new records arrive within that bound, and looks
again for the notify file once a second. A consumer in a group writes anyway (offsets, group
files), so it creates the file as a producer does.
"""

from __future__ import annotations

import os
import stat
import time

from kafkalite import _native
from kafkalite._native import Notifier
from kafkalite.datadir import METADATA_FILE, NOTIFY_FILE
from kafkalite.errors import KafkaliteError

#: The longest a polling consumer sleeps before it looks at its partitions again. Each look
#: is one end-offset read per partition (no I/O when nothing changed), so 50 ms costs little.
POLL_INTERVAL_MS = 50
#: How often a polling consumer checks whether the notify file appeared.
RECHECK_S = 1.0
#: The size the engine gives the notify file (rust/src/storage/notify.rs FILE_LEN): a shorter file
#: would be extended by opening it, which a reader must not do.
NOTIFY_FILE_LEN: int = _native.NOTIFY_FILE_LEN


def _usable(data_dir: str) -> bool:
    """True when a reader may open the notify file without creating or changing anything."""
    path = os.path.join(data_dir, NOTIFY_FILE)
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISREG(st.st_mode)
        and st.st_size >= NOTIFY_FILE_LEN
        and os.path.exists(os.path.join(data_dir, METADATA_FILE))
        and os.access(path, os.R_OK | os.W_OK)  # also False on a read-only file system
    )


class Wakeups:
    """``sequence()`` / ``wait(seen, timeout_ms)`` / ``notify()`` as ``Notifier``'s, falling
    back to bounded polling where the notify file cannot be used."""

    def __init__(self, data_dir: str, *, may_create: bool) -> None:
        self._dir = data_dir
        self._path = os.path.join(data_dir, NOTIFY_FILE)
        self._notifier: Notifier | None = Notifier(self._path) if may_create else None
        self._next_check = 0.0
        self._attach()

    @property
    def polling(self) -> bool:
        return self._notifier is None

    def _attach(self) -> None:
        if self._notifier is not None or time.monotonic() < self._next_check:
            return
        self._next_check = time.monotonic() + RECHECK_S
        if _usable(self._dir):
            try:
                self._notifier = Notifier(self._path)
            except (KafkaliteError, OSError):
                pass  # removed or made read-only meanwhile: keep polling

    def sequence(self) -> int:
        self._attach()
        return self._notifier.sequence() if self._notifier is not None else 0

    def wait(self, seen: int, timeout_ms: int) -> bool:
        """Sleep until a producer announces data (or, polling, at most ``POLL_INTERVAL_MS``)."""
        if self._notifier is not None:
            return self._notifier.wait(seen, timeout_ms)
        time.sleep(min(timeout_ms, POLL_INTERVAL_MS) / 1000.0)
        return True

    def notify(self) -> None:
        if self._notifier is not None:
            self._notifier.notify()
