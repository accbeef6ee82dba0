"""Options and error handling that several commands share."""

from __future__ import annotations

import sys
from typing import NoReturn

import click

from mbds import eventloop
from mbds.client import DEFAULT_CONTROLLER

controller_option = click.option(
    "--controller", default=DEFAULT_CONTROLLER, show_default=True,
    help="Controller address HOST:PORT (env MBDS_CONTROLLER).")

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
    click.echo(f"error: {e}", err=True)
    sys.exit(1)
