"""Options and error handling that several commands share."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from mbds import eventloop
from mbds.client import DEFAULT_CONTROLLER
from mbds.errors import shorten
from mbds.service import port_beyond


def port_in_range(ctx: click.Context | None, param: click.Parameter | None,
                  address: str) -> str:
    """A usage error before anything runs, where the client would refuse it later, or
    gRPC take it as another port (modulo 65536) without a word."""
    if not address.isprintable():           # gRPC would repeat it raw in its error
        raise click.BadParameter(f"{shorten(address)!r} holds a character HOST:PORT "
                                 "cannot hold")
    host, colon, port = address.rpartition(":")
    if port[:1] == "-" and port[1:].isdigit():     # which gRPC takes as 65536 - N
        raise click.BadParameter(f"{shorten(address)}: a port is not negative")
    if port.isdigit() and len(port) > 5:
        # Its leading zeros dropped first: int() refuses more than 4,300 digits.
        port = port.lstrip("0") or "0"
        if len(port) > 5:
            raise click.BadParameter(f"{shorten(address)}: a port is at most 65535")
        address = f"{host}{colon}{port}"
    if port_beyond(address):
        raise click.BadParameter(f"{shorten(address)}: a port is at most 65535")
    return address


controller_option = click.option(
    "--controller", default=DEFAULT_CONTROLLER, show_default=True, callback=port_in_range,
    help="Controller address HOST:PORT (env MBDS_CONTROLLER). A TLS client port takes "
         "the cluster's CA from env MBDS_CA, and a token from env MBDS_TOKEN.")

split_search_option = click.option(
    "--split-search-from", type=click.IntRange(min=1), default=1,
    envvar="MBDS_SPLIT_SEARCH_FROM", show_default=True,
    help="Split descriptor search over the backends (ids exchanged between them, the "
         "paper's design) for traffic units with at least this many predicates; smaller "
         "ones are searched whole on every backend.")

event_loop_option = click.option(
    "--event-loop", type=click.Choice(eventloop.CHOICES), default=eventloop.DEFAULT,
    envvar=eventloop.ENV, show_default=True,
    help="The service's event loop: uvloop (libuv's, in C; less CPU per message) or "
         "the standard library's asyncio (env MBDS_EVENT_LOOP).")


def fail(e: object) -> NoReturn:
    """End the command with the error on stderr and exit code 1 (no traceback)."""
    click.echo(f"error: {printable(str(e))}", err=True)
    sys.exit(1)


# Control characters an error may repeat from its input (a name, an address), written
# escaped: raw, they would move the cursor or recolour the terminal. Line breaks and
# tabs stay: a YAML error points at its place over several lines.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0)) if c not in (9, 10)}


def printable(text: str) -> str:
    """`text` with its control characters but line breaks and tabs escaped."""
    return text.translate(_CONTROL)


def os_error(e: OSError) -> str:
    """A file system's refusal in one line: the file it names (cut short), and why."""
    if e.filename:
        return f"{shorten(str(e.filename))}: {e.strerror or e}"
    return e.strerror or str(e)


class NotUtf8(ValueError):
    """Input that is not UTF-8 text, named by its first bad byte."""


def utf8(data: bytes | str, what: str) -> str:
    """`data` as text, or NotUtf8 naming `what` and where its first bad byte is (its
    offset in the input's bytes). A str is input Python decoded with surrogate escapes
    (the command line, stdin in a C or UTF-8 locale, a terminal's keys read by
    prompt_toolkit): each escape stands for the byte it could not decode."""
    if isinstance(data, str):
        try:
            data = data.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:     # a surrogate no byte decodes to
            raise NotUtf8(f"{what} is not valid UTF-8 (character "
                          f"U+{ord(e.object[e.start]):04X} at position {e.start})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotUtf8(f"{what} is not valid UTF-8 (byte 0x{data[e.start]:02x} at position "
                      f"{e.start})") from None
