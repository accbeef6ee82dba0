"""Backend identity for replicas that share one volume (docker-compose --scale).

Each replica claims the first slot directory ROOT/bK it can lock; the lock is
held for the life of the process, so a restarted or re-created container takes
a free slot again and, with it, that slot's identity and data.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

_held: list[int] = []    # keep the locked descriptors open for the process's life


def claim_slot(root: Path, limit: int = 1024) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for k in range(limit):
        slot = root / f"b{k}"
        slot.mkdir(exist_ok=True)
        fd = os.open(slot / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _held.append(fd)
        return slot
    raise RuntimeError(f"no free backend slot under {root} (all {limit} are in use)")
