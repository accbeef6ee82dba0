"""`mbds` — the command line: run the system, talk to it, load and measure the paper's database.

A thin layer: every command calls the typed modules (the client, the local cluster,
the servers, the benchmarks), and each is imported only when it is invoked.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

from cli.lazy import LazyGroup

COMMANDS = {
    "backend": "cli.services:backend",
    "controller": "cli.services:controller",
    "up": "cli.services:up",
    "certs": "cli.certs:certs",
    "health": "cli.services:health",
    "exec": "cli.database:exec_",
    "define": "cli.database:define",
    "status": "cli.database:status",
    "shell": "cli.shell:shell",
    "load": "cli.paper:load",
    "dump": "cli.transfer:dump",
    "paper": "cli.paper:paper",
    "report": "cli.report:report",
    "bench": "cli.bench:bench",
}
# The commands that do their work and end, starting no process of their own: a running
# cluster's clients, and `mbds certs`.
ONE_SHOT = frozenset({"health", "exec", "define", "status", "shell", "load", "dump",
                      "paper", "report", "certs"})
# What a process killed by SIGPIPE exits with in a shell: what `mbds dump` exits with too.
READER_LEFT = 141


class Commands(LazyGroup):
    """The one-shot commands report a failure in one `error:` line and leave quietly when
    their reader does."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in ONE_SHOT and not _verbose(ctx) and "grpc" not in sys.modules:
            # gRPC's own log lines (a TLS handshake that failed, a CA it cannot load)
            # would come before the error line that names the failure. gRPC reads this
            # as it loads, which the command's module makes it do.
            os.environ.setdefault("GRPC_VERBOSITY", "NONE")
        if cmd_name in ONE_SHOT and sys.stdin is None:
            # Standard input closed (`mbds shell <&-`) reads as empty, as /dev/null does.
            sys.stdin = open(os.devnull)      # the process's own, never closed
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            if ctx.invoked_subcommand not in ONE_SHOT:
                raise
            # The reader left (`mbds status | head -1`): not the command's failure, whose
            # exit code (1, or `mbds status`'s 2) a script would take it for.
            _drop_output()
            sys.exit(READER_LEFT)
        except OSError as e:
            if ctx.invoked_subcommand not in ONE_SHOT:
                raise
            # An output that cannot be written (`mbds status > f` on a full disk), say:
            # named in one line, as the commands' own errors are.
            from cli.options import fail, os_error
            try:
                sys.stdout.flush()
            except OSError:
                _drop_output()
            fail(os_error(e))


def _drop_output() -> None:
    """What is left of standard output goes nowhere: it cannot be written, and flushed
    again as Python exits it would fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _verbose(ctx: click.Context) -> bool:
    return bool(ctx.params.get("verbose") or os.environ.get("MBDS_VERBOSE"))


@click.group(cls=Commands, lazy=COMMANDS)
@click.version_option(package_name="mbds", prog_name="mbds")
@click.option("-v", "--verbose", is_flag=True,
              help="Log at INFO level (and show gRPC's own log lines).")
def main(verbose: bool) -> None:
    """MBDS: one controller and N backends over gRPC, each backend on SQLite."""
    verbose = verbose or bool(os.environ.get("MBDS_VERBOSE"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
