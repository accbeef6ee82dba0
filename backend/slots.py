"""Backend identity for replicas that share one volume (docker-compose --scale).

Each replica claims the first slot directory ROOT/bK it can lock (mbds/dirlock.py); the
lock is held for the life of the process, so a restarted or re-created container takes
a free slot again and, with it, that slot's identity and data.
"""

from __future__ import annotations

from pathlib import Path

from mbds.dirlock import try_hold


def claim_slot(root: Path, limit: int = 1024) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for k in range(limit):
        slot = root / f"b{k}"
        if try_hold(slot):
            return slot
    raise RuntimeError(f"no free backend slot under {root} (all {limit} are in use)")
