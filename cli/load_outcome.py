"""What a load stored, told when it ends short: from the batches the controller
acknowledged and from its failure's own account of the batches that failed
(`controller/load.py`), or, its answer never come, from the records taken from the
input (`mbds load file`, `mbds load paper`)."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import NoReturn

import click

from cli.options import fail
from mbds.client import ClientError
from mbds.proto import mbds_pb2 as pb

# A load's call ended without the controller's answer (it is gone, or the call timed
# out): batches sent after the last acknowledged may have committed.
UNANSWERED = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNKNOWN",
                        "INTERNAL"})
# How the controller ends a load's failure (`controller/load.py`, `_naming`): each batch
# that failed, and those acknowledged after the first of them, by their records and what
# became of them: stored (True), not (False) or perhaps (None).
TOLD = {"were not loaded": False, "may have been stored": None, "were stored": True,
        "(in flight beside them) were loaded": True}
_SPAN = re.compile(r"(\d+)-(\d+)")
_GROUP = re.compile(r"records (\d+-\d+(?:, \d+-\d+)*) (" + "|".join(map(re.escape, TOLD))
                    + ")")
_TOLD = re.compile(f"(?<=; )(?:{_GROUP.pattern}, )*{_GROUP.pattern}$")


def cut_short(what: str, loaded: str, code: int) -> NoReturn:
    click.echo(f"error: {what} ({loaded})", err=True)
    sys.exit(code)


def _told(message: str) -> list[tuple[range, str]] | None:
    """What a load's failure says of the batches that failed and those acknowledged after
    the first of them, each batch's records with its words (`TOLD`); None when it names
    none (the load refused before any failed, or the controller's answer never came)."""
    tail = _TOLD.search(message)
    if tail is None:
        return None
    told = []
    for group in _GROUP.finditer(tail[0]):
        told += [(range(int(a), int(b) + 1), group[2]) for a, b in _SPAN.findall(group[1])]
    return told


def _merged(ranges: Iterable[range]) -> list[range]:
    out: list[range] = []
    for r in sorted(ranges, key=lambda r: r.start):
        if out and r.start <= out[-1].stop:
            out[-1] = range(out[-1].start, max(out[-1].stop, r.stop))
        elif r:
            out.append(r)
    return out


def _spans(ranges: list[range]) -> str:
    return ", ".join(f"{r.start}-{r.stop - 1}" for r in ranges)


def stored_summary(file: str, acknowledged: list[range], told: list[tuple[range, str]] | None,
            sent: int | None) -> str:
    """`records loaded into FILE: N`: the input's first N records, every one of them
    stored. Then the records stored beyond them (a load that goes on from record N + 1
    must leave them out), and those that may be stored: the batches the failure says so
    of (`told`) or, its answer not come, every record taken from the input (`sent`) and
    not acknowledged."""
    stored = _merged([*acknowledged, *(r for r, w in told or () if TOLD[w] is True)])
    prefix = stored[0].stop - 1 if stored and stored[0].start == 1 else 0
    beyond = [r for r in stored if r.start > 1]
    maybe = _merged(r for r, w in told or () if TOLD[w] is None)
    unsure: list[range] = []
    if sent is not None:        # the gaps of what is stored, up to the last record sent
        at = 1
        for r in stored:
            if at < r.start and at <= sent:
                unsure.append(range(at, min(r.start, sent + 1)))
            at = r.stop
        if at <= sent:
            unsure.append(range(at, sent + 1))
    text = f"records loaded into {file}: {prefix}"
    if beyond:
        text += f"; records {_spans(beyond)} are stored too"
    if maybe:
        text += f"; records {_spans(maybe)} may be stored too"
    if unsure:
        text += f"; records {_spans(unsure)} were in flight and may be stored too"
    if maybe or unsure:
        return text + ": count the file's records before going on"
    if beyond:
        return text + f": going on from record {prefix + 1}, leave them out"
    return text


class Acknowledged:
    """The records of each batch a load's controller acknowledged (`ranges`), numbered
    as the load numbers them; `loading` once the load's call began."""

    def __init__(self) -> None:
        self.ranges: list[range] = []
        self.loading = threading.Event()

    def counted(self, dones: Iterable[pb.RequestDone]) -> Iterator[pb.RequestDone]:
        self.loading.set()
        for d in dones:
            # Numbered by the controller: past a failed batch, the batches in flight beside
            # it are acknowledged (a controller that numbers none answers in order).
            first = d.first_record or (self.ranges[-1].stop if self.ranges else 1)
            self.ranges.append(range(first, first + d.stats.records_retrieved))
            yield d


def load_failed(e: ClientError, file: str, acknowledged: Acknowledged, sent: int) -> NoReturn:
    """A load's failure, with what of it is stored: the batches the controller names, or,
    its answer not come, every record taken from the input and not acknowledged."""
    if not acknowledged.loading.is_set():
        fail(e)
    told = _told(str(e))
    if told is None and e.code in UNANSWERED:   # what the batches in flight came to
        cut_short(str(e), stored_summary(file, acknowledged.ranges, None, sent), 1)
    # The controller's own failure: the batches in flight beside it were answered, and
    # those that failed are named.
    fail(f"{e} ({stored_summary(file, acknowledged.ranges, told, None)})")


def interrupted_load(file: str, acknowledged: Acknowledged, sent: int) -> NoReturn:
    cut_short("interrupted", stored_summary(file, acknowledged.ranges, None, sent), 130)
