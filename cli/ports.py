"""Whether a service's port is free, found before gRPC binds it: gRPC logs a raw line of
its own (`add_port.cc`) before the error it raises, so a clash is named here first."""

from __future__ import annotations

import errno
import socket

from cli.options import fail


def port_in_use(address: str) -> bool:
    """Whether a server binding HOST:PORT would find it in use, found by binding as gRPC
    does (SO_REUSEADDR, no SO_REUSEPORT: `mbds.service.SERVER_OPTIONS`);
    in use only when every address HOST names is, as gRPC fails. Anything else is left
    to gRPC to name."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or not 0 < int(port) <= 65535:
        return False            # any port (0), or one `listen_on` refuses by name
    try:
        found = socket.getaddrinfo(host.strip("[]") or None, int(port),
                                   type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return False
    for family, kind, proto, _, where in found:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(where)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    continue
            return False        # free, or failing otherwise: gRPC says how
    return bool(found)


def check_free(address: str, what: str) -> None:
    if port_in_use(address):
        fail(f"{what} cannot listen on {address}: the port is in use")
