"""Backend identity for replicas that share one volume (docker-compose --scale).

Each replica claims a slot directory ROOT/bK it can lock (mbds/dirlock.py); the lock is
held for the life of the process, so a restarted or re-created container takes a free
slot again and, with it, that slot's identity and data. A replica first takes back the
slot it held before (its host name, the container's, is kept in the slot): replicas
restarted together keep their names, and with them their addresses, instead of trading
them in the order they happen to start.
"""

from __future__ import annotations

import socket
from pathlib import Path

from mbds.dirlock import try_hold

HOLDER = "holder"      # in a slot: the host name of the replica that last held it


def claim_slot(root: Path, limit: int = 1024, host: str | None = None) -> Path:
    host = host or socket.gethostname()
    root.mkdir(parents=True, exist_ok=True)
    slots = [root / f"b{k}" for k in range(limit)]
    mine = [s for s in slots if _holder(s) == host]
    for slot in (*mine, *slots):
        if try_hold(slot):
            if _holder(slot) != host:
                (slot / HOLDER).write_text(host)
            return slot
    raise RuntimeError(f"no free backend slot under {root} (all {limit} are in use)")


def _holder(slot: Path) -> str:
    try:
        return (slot / HOLDER).read_text()
    except OSError:
        return ""
