"""The files kafkalite's Python layer writes in a data directory (topic metadata, group state,
locks), opened so that a symlink planted in the directory is refused instead of followed: a
writer that followed one could overwrite or create a file anywhere (the engine does the same
for segments with O_NOFOLLOW). Replacing a file goes through a uniquely named temp file
created exclusively, then a rename, which replaces a link at the target instead of following
it. The one atomic-write helper of the Python layer."""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from kafkalite.errors import KafkaliteIOError, io_error


def open_nofollow(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symlink at ``path`` with a KafkaliteIOError naming it."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise KafkaliteIOError(
                errno.ELOOP,
                f"{path} is a symbolic link; kafkalite does not follow links in a data directory, remove it",
                path,
            ) from None
        raise io_error(e.errno, f"cannot open {path}: {e.strerror}", path) from e


@contextmanager
def locked(path: str) -> Iterator[int]:
    """Hold an exclusive flock on ``path`` (created if missing, never through a link)."""
    import fcntl

    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data``: exclusive temp file, (fsync), rename, (fsync the folder)."""
    folder = os.path.dirname(path) or "."
    tmp = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        if durable:
            dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except KafkaliteIOError:
        _remove_quietly(tmp)
        raise
    except OSError as e:
        _remove_quietly(tmp)
        raise io_error(e.errno, f"cannot write {path}: {e.strerror}", path) from e


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
