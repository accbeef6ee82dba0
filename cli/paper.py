"""`mbds load paper` and `mbds paper table2`: the paper's test database and its Table 2."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

import click

from cli.database import LARGE_LOAD, load_progress, track_load
from cli.interrupts import TwoStepInterrupt
from cli.load_outcome import Acknowledged, interrupted_load, load_failed
from cli.options import controller_option, fail
from cli.transfer import load_file
from loadgen import paper_db as P
from loadgen.paper_summary import console_for_summary, show, table2_table
from loadgen.table2 import run_table2
from mbds.client import LOAD_CHUNK, Client, ClientError
from mbds.service import MAX_LOAD_RECORDS

T = TypeVar("T")


@click.group()
def load() -> None:
    """Load the paper's test database, or a file's records."""


load.add_command(load_file)


@load.command("paper")
@controller_option
@click.option("--scale", type=int, default=1, show_default=True, help="k: 1000k records.")
@click.option("--multi", type=int, default=1, show_default=True,
              help="M copies of every record (MULTI = One, Two, ...).")
@click.option("--record-bytes", type=int, default=200, show_default=True,
              help="Each record's size in bytes, as the paper counts it: its 30 string "
                   "fields are sized to fill it (the paper's 200).")
@click.option("--chunk", type=click.IntRange(1, MAX_LOAD_RECORDS), default=LOAD_CHUNK,
              show_default=True,
              help="Records per batch (one traffic unit each).")
@click.option("--progress/--no-progress", default=None,
              help="Show a progress bar on stderr [default: on a terminal, or from "
                   f"{LARGE_LOAD} records].")
@click.option("--append", is_flag=True,
              help="Load even if the file already holds records (each is then there twice).")
def load_paper(controller: str, scale: int, multi: int, record_bytes: int, chunk: int,
               progress: bool | None, append: bool) -> None:
    """Define and load the paper's test database (file PAPER).

    1000 x SCALE records of RECORD_BYTES bytes, MULTI copies of each
    (docs/benchmarks.md)."""
    total = 1000 * scale * multi
    t0 = time.perf_counter()
    acknowledged, sent = Acknowledged(), [0]

    ctrl_c = TwoStepInterrupt("interrupting: the batches sent finish first (Ctrl-C again "
                              "to leave at once)")

    def taken(records: Iterable[T]) -> Iterator[T]:
        # The records taken from the input: those beyond the acknowledged may be stored.
        # Ctrl-C ends the input; the batches sent are answered.
        for record in records:
            if ctrl_c.asked.is_set():
                return
            sent[0] += 1
            yield record

    try:
        with ctrl_c, Client(controller) as c:
            c.define(P.definition_yaml(scale))
            if not append and (held := P.held(c)):
                fail(f"file {P.FILE} already holds {held:,} records: a second load would "
                     f"add {total:,} more, and Table 2 counts those of one load; load into "
                     "a cluster started on an empty --data-dir (compose: after `down -v`), "
                     "or give --append")
            done = track_load(acknowledged.counted(c.load(
                P.FILE, P.ATTRIBUTES, taken(P.records(scale, multi, record_bytes)),
                chunk=chunk)), total, load_progress(total, progress))
    except KeyboardInterrupt:
        interrupted_load(P.FILE, acknowledged, sent[0])
    except ClientError as e:
        load_failed(e, P.FILE, acknowledged, sent[0])
    if ctrl_c.asked.is_set():
        click.echo(f"error: interrupted; loaded {done:,} of the {total:,} records into "
                   f"{P.FILE}: the database's first {done:,}, and none after them (Table 2 "
                   "counts a whole load: start again on an empty --data-dir)", err=True)
        sys.exit(130)
    seconds = time.perf_counter() - t0
    click.echo(f"loaded {done} records into {P.FILE} in {seconds:.1f} s "
               f"({done / seconds:,.0f} records/s)")


@click.group()
def paper() -> None:
    """The paper's request set."""


@paper.command("table2")
@controller_option
@click.option("--scale", type=int, default=1, show_default=True,
              help="The --scale the database was loaded with (`mbds load paper`).")
@click.option("--multi", type=int, default=1, show_default=True,
              help="The --multi the database was loaded with (`mbds load paper`).")
@click.option("--runs", type=int, default=1, show_default=True,
              help="Run each request this many times and report the median response time.")
@click.option("--warmup", type=click.IntRange(min=0), default=0, show_default=True,
              help="Run each request this many times untimed first (steady-state times).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per request per line.")
@click.option("--save", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the table as JSON (for `mbds bench paper --table2`).")
def table2(controller: str, scale: int, multi: int, runs: int, warmup: int, as_json: bool,
           save: Path | None) -> None:
    """Run the paper's nine requests beside its Table 2.

    Each request's clusters examined and records retrieved beside the paper's, and its
    median response time."""
    try:
        with Client(controller) as c:
            rows = run_table2(c, scale, multi, runs, warmup)
            backends = len(c.status().backends)
    except ClientError as e:
        fail(e)
    t2 = {"scale": scale, "multi": multi, "runs": runs, "warmup": warmup,
          "backends": backends, "rows": rows}
    if save is not None:
        save.write_text(json.dumps(t2, indent=2))
    if as_json:
        for r in rows:
            click.echo(json.dumps(r))
    else:
        show(console_for_summary(), table2_table(t2))
    if not all(r["match"] for r in rows):
        click.echo(f"the counts differ from the paper's: was the database loaded once, with "
                   f"`mbds load paper --scale {scale} --multi {multi}`?", err=True)
        sys.exit(1)
