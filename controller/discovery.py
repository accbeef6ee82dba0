"""Finding the backend replicas: Docker's DNS answers a service name with every replica.

`docker-compose up --scale backend=N` starts the N backend containers before the
controller (depends_on), and each is in the compose network's DNS from its start. So
the controller takes the set the name resolves to once it has stopped changing for a
moment (SETTLE_S) and holds at least a minimum (--min-backends, default 1). Replicas
that appear later are admitted as they come (controller/server.py, `rediscover`).
"""

from __future__ import annotations

import socket
import time

# How long the resolved set must stay the same before the controller takes it: replicas
# of one `up` come within a second or two of each other.
SETTLE_S = 3.0
POLL_S = 0.5


def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    return sorted({f"{info[4][0]}:{port}" for info in infos})


def discover_backends(target: str, minimum: int = 1, *, settle: float = SETTLE_S,
                      timeout: float = 300.0, poll: float = POLL_S) -> list[str]:
    """Every replica `target`'s name resolves to, once at least `minimum` resolve and the
    set has been the same for `settle` seconds."""
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit(f"--discover {target[:200]!r}: expected HOST:PORT")
    minimum = max(minimum, 1)
    deadline = time.monotonic() + timeout
    found: list[str] = []
    since = time.monotonic()
    while True:
        now = resolve(host, int(port))
        if now != found:
            found, since = now, time.monotonic()
            # Printed, not logged: the container's log shows what the controller waits for.
            print(f"controller: {len(found)} backends at {target} (at least {minimum} "
                  f"needed): {', '.join(found) or 'none yet'}", flush=True)
        elif len(found) >= minimum and time.monotonic() - since >= settle:
            return found
        if time.monotonic() > deadline:
            raise SystemExit(f"expected at least {minimum} backends at {target}, found "
                             f"{len(found)}: {', '.join(found) or 'none'}")
        time.sleep(poll)
