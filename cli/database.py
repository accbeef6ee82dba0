"""`mbds exec`, `mbds define` and `mbds status`: requests to a running controller; and the
progress bar of `mbds load`."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, BinaryIO

import click

from cli.options import NotUtf8, controller_option, fail, utf8
from mbds.client import Client, ClientError, Result
from mbds.errors import shorten
from mbds.proto import mbds_pb2 as pb
from mbds.schema import MAX_DEFINITION

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

# A load of at least so many records shows its progress even when stderr is no terminal
# (a log then gets the bar's final state: how far the load came).
LARGE_LOAD = 100_000


def print_results(results: list[Result], as_json: bool) -> None:
    from cli.tables import render_result
    for r in results:
        if as_json:
            click.echo(json.dumps(r.to_json()))
        else:
            render_result(r)


@click.command("exec")
@controller_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per request per line.")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds the request may take before it fails.")
@click.argument("abdl")
def exec_(controller: str, as_json: bool, timeout: float, abdl: str) -> None:
    """Run one ABDL request or transaction.

    ABDL is the text, or - to read it from standard input."""
    try:
        text = (utf8(sys.stdin.buffer.read(), "standard input") if abdl == "-"
                else utf8(abdl, "the request"))
        with Client(controller, timeout=timeout) as c:
            print_results(c.execute(text), as_json)
    except (NotUtf8, ClientError) as e:
        fail(e)


@click.command()
@controller_option
@click.argument("path", type=click.File("rb"))
def define(controller: str, path: BinaryIO) -> None:
    """Apply a database definition (YAML)."""
    try:
        name = "standard input" if path.name == "<stdin>" else path.name
        # Read no further than a definition can be (a character is at most 4 bytes): a
        # data file given by mistake, or an endless stream, is not read whole first.
        data = path.read(4 * MAX_DEFINITION + 1)
        if len(data) > 4 * MAX_DEFINITION:
            fail(f"{shorten(name)} holds more than a definition may: at most "
                 f"{MAX_DEFINITION} characters")
        text = utf8(data, name)
        with Client(controller) as c:
            reply = c.define(text)
    except (NotUtf8, ClientError) as e:
        fail(e)
    for f in reply.files_created:
        click.echo(f"created {f}")
    for f in reply.files_unchanged:
        click.echo(f"unchanged {f}")
    for f in reply.files_reindexed:
        click.echo(f"reindexed {f}")


@click.command()
@controller_option
def status(controller: str) -> None:
    """Show the controller's backends and whether each is up.

    Exit code 0 when every backend is up; 2 when one is not (each backend holds part of
    every cluster, so every request fails until it is back); 1 when the controller
    cannot be asked."""
    try:
        with Client(controller) as c:
            s = c.status()
    except ClientError as e:
        fail(e)
    click.echo(f"cluster {s.cluster}; backends {len(s.backends)}; files "
               f"{', '.join(s.files) or '-'}; directory {s.directory_digest}")
    for b in s.backends:
        click.echo(f"  {b.name:8} {b.address:24} {'up' if b.reachable else 'DOWN ' + b.error}"
                   + (f"  {b.metrics_url}" if b.metrics_url else ""))
    if s.metrics_url:
        click.echo(f"controller metrics {s.metrics_url}; internal timing "
                   f"{'on' if s.internal_timing else 'off'}")
    if not all(b.reachable for b in s.backends):
        sys.exit(2)


def load_progress(total: int, show: bool | None, console: Console | None = None
                  ) -> Progress | None:
    """The bar for a load of `total` records on stderr, or None when not shown: `show`
    None shows it on a terminal or for a large load (`--progress/--no-progress`)."""
    # Imported here: `mbds exec` and the rest of this module start without rich.
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    console = console or Console(stderr=True)
    if show is None:
        show = console.is_terminal or total >= LARGE_LOAD
    if not show:
        return None
    return Progress(TextColumn("loading"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("records"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=console)


def track_load(dones: Iterable[pb.RequestDone], total: int, bar: Progress | None) -> int:
    """The records acknowledged batch by batch, advancing `bar` (if any) with each."""
    done = 0
    if bar is None:
        for d in dones:
            done += d.stats.records_retrieved
        return done
    with bar:
        task = bar.add_task("loading", total=total)
        for d in dones:
            done += d.stats.records_retrieved
            bar.update(task, completed=done)
    return done
