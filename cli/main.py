"""`mbds` — the command line: run the system, talk to it, load and measure the paper's database.

A thin layer: every command calls the typed modules (the client, the local cluster,
the servers, the benchmarks), and each is imported only when it is invoked.
"""

from __future__ import annotations

import logging
import os

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


@click.group(cls=LazyGroup, lazy=COMMANDS)
@click.version_option(package_name="mbds", prog_name="mbds")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def main(verbose: bool) -> None:
    """MBDS: one controller and N backends over gRPC, each backend on SQLite."""
    verbose = verbose or bool(os.environ.get("MBDS_VERBOSE"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
