"""`mbds bench …`: one subcommand per benchmark; each module owns its command."""

from __future__ import annotations

import signal
import sys

import click


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    # A benchmark owns clusters of child processes and cgroups; SIGTERM (a stopped CI
    # job, `kill`, `timeout`) becomes an ordinary exit so every `finally` stops them.
    sys.exit(128 + signum)


@click.group()
def bench() -> None:
    """Benchmarks: the paper's Tables 3–8 and the seed documents' tests."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


from loadgen.paper_bench import paper  # noqa: E402

bench.add_command(paper)

from loadgen.paper_pool import paper_pool  # noqa: E402  (repeated runs, pooled)

bench.add_command(paper_pool)

from loadgen.kv import kv  # noqa: E402  (seed 002: key/value durability and threads)
from loadgen.tp import tp  # noqa: E402  (seed 001: transactions of random reads)
from loadgen.users import users  # noqa: E402  (seed 000: IDM tests 1 and 2)

bench.add_command(users)
bench.add_command(tp)
bench.add_command(kv)

from loadgen.memory import memory  # noqa: E402  (resident memory per 10,000 units)

bench.add_command(memory)
