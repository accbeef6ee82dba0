"""Finding the backend replicas: Docker's DNS answers a service name with every replica."""

from __future__ import annotations

import logging
import socket
import time

log = logging.getLogger("mbds.controller")


def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    return sorted({f"{info[4][0]}:{port}" for info in infos})


def discover_backends(target: str, expect: int, *, timeout: float = 300.0) -> list[str]:
    """Wait until `target`'s name resolves to at least `expect` addresses; return them."""
    host, _, port = target.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        found = resolve(host, int(port))
        if found and len(found) >= max(expect, 1):
            return found
        if time.monotonic() > deadline:
            raise SystemExit(f"expected {expect} backends at {target}, found {len(found)}: "
                             f"{', '.join(found) or 'none'}")
        log.info("waiting for backends at %s: %d of %d", target, len(found), expect)
        time.sleep(1)
