"""`mbds bench …`: one subcommand per benchmark; each module owns its command."""

from __future__ import annotations

import click


@click.group()
def bench() -> None:
    """Benchmarks: the paper's Tables 3–8 and the seed documents' tests."""


from loadgen.paper_bench import paper  # noqa: E402

bench.add_command(paper)
