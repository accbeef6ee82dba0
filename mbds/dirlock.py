"""One process per data directory. A process that keeps data in a directory (a backend's
records and identity, the controller's decision log) holds an exclusive lock on
DIR/lock for its life, so a second process started on the same directory stops with an
error naming it instead of writing the same SQLite files from a directory and lock
table of its own."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

_held: dict[Path, int] = {}      # locked descriptors, kept open for the process's life


class DirInUse(Exception):
    """The directory is held by another running process."""


def try_hold(directory: Path) -> bool:
    """Lock `directory` for this process (creating it); False if another process holds it.
    Holding it already is holding it."""
    directory = directory.resolve()
    if directory in _held:
        return True
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())     # who holds it, for the error above
    _held[directory] = fd
    return True


def hold(directory: Path, what: str) -> None:
    """Lock `directory` for this process, or raise DirInUse naming the holder."""
    if try_hold(directory):
        return
    try:
        holder = (directory / "lock").read_text().strip()[:20]
    except OSError:
        holder = ""
    by = f" (process {holder})" if holder.isdigit() else ""
    raise DirInUse(f"{what} data directory {directory} is in use by another process{by}; "
                   "stop it first, or give another directory")
