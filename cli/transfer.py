"""`mbds load file` and `mbds dump`: a file's records from and to CSV or JSON Lines.

Both stream: a load reads its input record by record into `Client.load`, a dump writes
each row batch of one `RETRIEVE (FILE = NAME) (ALL)` as it arrives. JSON Lines carries
every value as stored (64-bit integers, floats by their shortest exact literal, null
apart from the empty string); CSV writes null as an empty cell, and reads one as null.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import click

from cli.database import load_progress, track_load
from cli.interrupts import TwoStepInterrupt
from cli.load_outcome import Acknowledged, cut_short, interrupted_load, load_failed, stored_summary
from cli.options import controller_option, fail
from cli.records_in import BAD_INPUT, Record, csv_records, json_records
from mbds.client import LOAD_CHUNK, Client, ClientError
from mbds.proto import mbds_pb2 as pb
from mbds.replies import Answer
from mbds.service import MAX_LOAD_RECORDS, MAX_MESSAGE

FORMATS = ("jsonl", "csv")
SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
# What str.splitlines (and readers like it) take for a line break and json.dumps leaves
# raw in a string: escaped, so that every reader sees one record a line.
LINE_BREAKS = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"})


def _until_refused(records: Iterable[Record], failed: list[Exception],
                   stopped: threading.Event, sent: list[int]) -> Iterator[Record]:
    """`records` up to the first refused, whose error is kept in `failed`: raised in
    gRPC's request thread it would come back as UNKNOWN, unnamed. Once `stopped` (Ctrl-C),
    no more: the load ends with the batches taken so far. `sent[0]` counts them."""
    try:
        for record in records:
            if stopped.is_set():
                return
            sent[0] += 1
            yield record
    except BAD_INPUT as e:
        failed.append(e)
    except ValueError:
        if not stopped.is_set():
            raise


def _count(path: str, fmt: str) -> int:
    """A regular file's records by its lines, for the progress bar (a CSV record with a
    quoted line break counts for more)."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip()) - (fmt == "csv")


def _definition(c: Client, name: str) -> tuple[str, dict[str, str]]:
    """The file's name and its attributes' types, as `mbds shell`'s `\\d FILE` asks."""
    [f] = [f for f in c.status(name).file_defs if f.name == name.upper()]
    return f.name, {a.name: a.type for a in f.attributes}


def _format(path: str, fmt: str | None, default: str | None) -> str:
    found = fmt or (None if path == "-" else SUFFIXES.get(Path(path).suffix.lower())) or default
    if found is None:
        raise click.UsageError(f"give --format for {'standard input' if path == '-' else path}"
                               " (or name it .csv, .jsonl or .ndjson)")
    return found


@click.command("file")
@controller_option
@click.argument("name")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="[default: from PATH's suffix: .csv, .jsonl or .ndjson]")
@click.option("--chunk", type=click.IntRange(1, MAX_LOAD_RECORDS), default=LOAD_CHUNK,
              show_default=True,
              help="Records per batch (one traffic unit each).")
@click.option("--progress/--no-progress", default=None,
              help="Show a progress bar on stderr [default: as `mbds load paper`; none "
                   "for standard input].")
def load_file(controller: str, name: str, path: str, fmt: str | None, chunk: int,
              progress: bool | None) -> None:
    """Load a defined file's records from CSV or JSON Lines.

    Into the file NAME (`mbds define`) from PATH (- for standard input)."""
    fmt = _format(path, fmt, None)
    csv.field_size_limit(MAX_MESSAGE)       # csv's own limit (128 kB) would refuse a body
    failed: list[Exception] = []
    acknowledged = Acknowledged()
    file = name.upper()
    t0 = time.perf_counter()

    stopped = threading.Event()     # the input ends: Ctrl-C, or the load ended
    sent = [0]              # records taken from the input into batches
    ctrl_c = TwoStepInterrupt("interrupting: the batches sent finish first (Ctrl-C again "
                              "to leave at once)", then=stopped)
    try:
        with ctrl_c, Client(controller) as c, click.open_file(path, "rb") as binary:
            file, types = _definition(c, name)
            read = csv_records if fmt == "csv" else json_records
            where = "standard input" if path == "-" else path
            records = _until_refused(read(binary, where, file, types), failed, stopped, sent)
            regular = path != "-" and progress is not False and Path(path).is_file()
            total = _count(path, fmt) if regular else 0
            try:
                done = track_load(
                    acknowledged.counted(c.load(file, list(types), records, chunk=chunk)),
                    total, load_progress(total, progress) if total else None)
            finally:
                stopped.set()       # before the input closes under gRPC's reading thread
    except KeyboardInterrupt:
        interrupted_load(file, acknowledged, sent[0])
    except ClientError as e:
        load_failed(e, file, acknowledged, sent[0])
    except BAD_INPUT as e:
        fail(e)
    if failed:      # every record before the refused one is loaded, none after it
        fail(f"{failed[0]} ({stored_summary(file, acknowledged.ranges, None, None)})")
    if ctrl_c.asked.is_set():
        click.echo(f"error: interrupted; loaded {done} records into {file}: the input's "
                   f"first {done}, and none after them", err=True)
        sys.exit(130)
    seconds = time.perf_counter() - t0
    click.echo(f"loaded {done} records into {file} in {seconds:.1f} s "
               f"({done / seconds:,.0f} records/s)")


class Interrupted(Exception):
    """A dump stopped by Ctrl-C between two row batches."""


def _write(replies: Iterable[pb.ExecuteReply], out: io.TextIOBase, fmt: str,
           written: list[int], stopped: threading.Event) -> None:
    """The rows of a `RETRIEVE (ALL)` into `out` as they arrive, without FILE (a dump is
    of one file), each checked as the client checks an answer (`Answer`); `written[0]`
    counts them. Raises ClientError if the answer ends without its `done`, Interrupted
    once `stopped` (at a batch's end, so every record written is whole): then the file
    holds only part of the records."""
    answer, keep, names = Answer(), [], []
    writer = csv.writer(out) if fmt == "csv" else None
    for reply in replies:
        if stopped.is_set():
            raise Interrupted
        rows = answer.take(reply)
        if reply.WhichOneof("body") == "header":
            keep = [i for i, c in enumerate(reply.header.columns) if c != "FILE"]
            names = [reply.header.columns[i] for i in keep]
            if writer:
                writer.writerow(names)
        if rows:
            rows = [[row[i] for i in keep] for row in rows]
            if writer:
                writer.writerows(rows)      # None as an empty cell
            else:
                for r in rows:
                    line = json.dumps(dict(zip(names, r, strict=True)), ensure_ascii=False)
                    out.write((line if line.isascii() else line.translate(LINE_BREAKS)) + "\n")
            written[0] += len(rows)
    answer.finish()


@click.command()
@controller_option
@click.argument("name")
@click.option("--out", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="The file to write [default: standard output].")
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="[default: from --out's suffix (.csv, .jsonl, .ndjson), else jsonl]")
@click.option("--timeout", type=float, default=3600.0, show_default=True,
              help="Seconds the whole dump may take.")
def dump(controller: str, name: str, out: str, fmt: str | None, timeout: float) -> None:
    """Write every record of file NAME as JSON Lines or CSV.

    Its attributes and its body, from one RETRIEVE: a snapshot."""
    fmt = _format(out, fmt, "jsonl")
    t0 = time.perf_counter()
    written = [0]
    file = name.upper()
    where = "standard output" if out == "-" else out
    ctrl_c = TwoStepInterrupt()
    try:
        with ctrl_c, Client(controller, timeout=timeout) as c:
            file, _ = _definition(c, name)
            # One request, one traffic unit: a snapshot no concurrent write splits.
            replies = c.stream(f"RETRIEVE (FILE = {file}) (ALL)")
            with click.open_file(out, "wb") as binary:
                text = io.TextIOWrapper(binary, encoding="utf-8", newline="")
                try:
                    _write(replies, text, fmt, written, ctrl_c.asked)
                except ClientError as e:
                    raise ClientError(e.code, f"{e}; the dump is incomplete: {written[0]} "
                                      f"records of {file} written to {where}") from None
                finally:
                    text.detach()       # flushed; the binary stream stays open
    except (Interrupted, KeyboardInterrupt) as e:
        # The unit ends with the stream; what was written stays, said to be a part (left
        # at once, a record may be cut).
        cut_short("interrupted", f"the dump is incomplete: {written[0]} records of {file} "
                   f"written to {where}" + ("" if isinstance(e, Interrupted) else
                                            ", and perhaps part of the next"), 130)
    except BrokenPipeError:
        # The reader left (`mbds dump NAME | head`): end quietly, as a shell tool does,
        # the unit aborted with the stream.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except (ClientError, OSError) as e:
        fail(e)
    click.echo(f"dumped {written[0]} records of {file} in {time.perf_counter() - t0:.1f} s",
               err=True)
