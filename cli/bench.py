"""`mbds bench …`: one subcommand per benchmark; each loadgen module owns its command.

A benchmark owns clusters of child processes; it runs under `cli/supervise.py`, so
SIGTERM (a stopped CI job, `kill`, `timeout`) or Ctrl-C stops them with it."""

from __future__ import annotations

import os

import click

from cli.supervise import SupervisedGroup
from mbds.grpc_engine import IOMGR_ENDPOINTS, VARIABLE

# The harness's clients on the services' socket engine (mbds/grpc_engine.py), before
# any benchmark's module loads grpc.
os.environ.setdefault(VARIABLE, IOMGR_ENDPOINTS)

BENCHMARKS = {
    "paper": "loadgen.paper_bench:paper",              # the paper's Tables 3–8
    "paper-pool": "loadgen.paper_pool:paper_pool",     # repeated runs of it, pooled
    "users": "loadgen.users:users",                    # seed 000: IDM tests 1 and 2
    "tp": "loadgen.tp:tp",                             # seed 001: transactions of random reads
    "kv": "loadgen.kv:kv",                             # seed 002: key/value durability, threads
    "memory": "loadgen.memory:memory",                 # resident memory per 10,000 units
    "load": "loadgen.load_bench:load",                 # bulk-load records/s vs executemany
    "fixed-cost": "loadgen.fixed_cost:fixed_cost",     # CPU per small traffic unit, per process
}


@click.group(cls=SupervisedGroup, lazy=BENCHMARKS)
def bench() -> None:
    """Benchmarks: the paper's Tables 3–8, the seed documents' tests."""
