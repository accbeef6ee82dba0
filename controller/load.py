"""REQP for a columnar bulk-load batch, and the window of batches a load keeps in flight.

A batch (`LoadColumns`) is checked per column against the file's template (its kind
against the attribute's type: one check per column, not per value) before anything is
broadcast, so a refused batch changes no data; the error names the first bad record
by its number in the load. Each batch is one INSERT traffic unit: IIG places it
(`Iig.place_batch`) and it commits on every backend or on none, as any write.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from controller.inbox import OnePhaseWrites
from controller.reqp import OPS, ROW_AS_JSON, Prepared
from mbds import columns
from mbds.directory import Directory
from mbds.errors import FAILURE_MESSAGE, SHOWN, MbdsError, SemanticError, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.schema import Attribute, FileSchema
from mbds.service import MAX_LOAD_RECORDS, MESSAGE_BUDGET, too_large
from mbds.values import Value, row_json_beyond

# Batches of one load in flight at once: the next is checked, placed and sent while
# the backends write the ones before it.
WINDOW = 4
BODY = Attribute("BODY", "string")


@dataclass
class LoadBatch:
    """A checked batch: the client's columns by the file's attribute order, decoded."""
    schema: FileSchema
    count: int
    first: int                                 # number of its first record in the load
    wire: list[pb.Column]                      # per file attribute (NULLS where not given)
    bodies: pb.Column = field(default_factory=pb.Column)
    source: pb.LoadColumns | None = None       # the client's, when already in file order
    _decoded: dict[int, list[Value]] = field(default_factory=dict)
    _entries: dict[int, list[Any]] = field(default_factory=dict)

    def values(self, i: int) -> list[Value] | None:
        """Attribute i's values (None: all null), decoded only when placement or a
        split over backends reads them."""
        col = self.wire[i]
        if col.kind == pb.NULLS:
            return None
        if i not in self._decoded:
            values = columns.decode(col, self.count)
            if self.schema.attributes[i].type == "float" and col.kind != pb.FLOATS:
                # Stored as floats (a REAL column): placed by the value stored, as an
                # INSERT's integer for a float attribute is.
                values = [float(v) if type(v) is int else v for v in values]
            self._decoded[i] = values
        return self._decoded[i]

    def entries(self, i: int) -> list[Any]:
        """Attribute i's column as it travels (`columns.per_record`), read once for
        every backend a split gives records to; i = -1: the bodies."""
        if i not in self._entries:
            col = self.bodies if i < 0 else self.wire[i]
            self._entries[i] = list(columns.per_record(col))
        return self._entries[i]


@dataclass
class PreparedLoad(Prepared):
    batch: LoadBatch | None = None


def prepare(directory: Directory, chunk: pb.LoadRequest) -> PreparedLoad:
    """A columnar load batch as one INSERT request, every column checked."""
    schema = directory.files.get(chunk.file.upper())
    if schema is None:
        raise SemanticError(f"unknown file {shorten(chunk.file.upper())}")
    names = [a.upper() for a in chunk.attributes]
    for a in names:
        if a not in schema.by_name:
            raise SemanticError(f"unknown attribute {shorten(a)} in file {schema.name}")
    if len(set(names)) != len(names):
        twice = next(a for a in names if names.count(a) > 1)
        raise SemanticError(f"attribute {shorten(twice)} appears twice in the load")
    cols = chunk.columns
    if chunk.records:
        raise SemanticError("a load request carries its records as rows or as columns, "
                            "not both")
    if len(cols.columns) != len(names):
        raise SemanticError(f"the batch has {len(cols.columns)} columns for "
                            f"{len(names)} attributes")
    count, first = cols.count, cols.first or 1
    if not 1 <= count <= MAX_LOAD_RECORDS:
        raise SemanticError(f"a load batch of {count} records: a batch holds 1 to "
                            f"{MAX_LOAD_RECORDS:,}")
    wire = [pb.Column() for _ in schema.attributes]

    def check(attr: Attribute, col: pb.Column) -> None:
        try:
            columns.check(attr, col, count, schema.name)
        except columns.ColumnError as e:
            # The batch goes whole or not at all: a caller goes on from its first record.
            raise SemanticError(f"record {first + e.index}: {e} (its batch, records "
                                f"{first}-{first + count - 1}, is not loaded)") from None

    for name, col in zip(names, cols.columns, strict=True):
        i = schema.index[name]
        check(schema.by_name[name], col)
        wire[i] = col
    check(BODY, cols.bodies)
    _rows_returnable(cols, len(names), first)
    if cols.cluster_ids:
        raise SemanticError("a load batch names no clusters: IIG places its records")
    in_order = names == [a.name for a in schema.attributes]
    batch = LoadBatch(schema, count, first, wire, cols.bodies, cols if in_order else None)
    return PreparedLoad("INSERT", pb.Request(op=OPS["INSERT"], file=schema.name), batch=batch)


Replies = list[pb.ExecuteReplies]
# How a load's failure words each batch that failed at the backends, by what its writes
# came to, and the batches acknowledged after the first of them (`_naming`); `mbds load
# file` reads these words back to say what is stored.
NOT_LOADED = "were not loaded"
MAYBE_STORED = "may have been stored"
STORED = "were stored"
LOADED_BESIDE = "(in flight beside them) were loaded"


async def pipelined(chunks: AsyncIterator[pb.LoadRequest],
                    check: Callable[[pb.LoadRequest, int], Prepared],
                    run: Callable[[Prepared], AsyncIterator[pb.ExecuteReplies]],
                    window: int = WINDOW) -> AsyncIterator[pb.ExecuteReplies]:
    """Each chunk checked as it comes, then its traffic unit run with up to `window` in
    flight; replies in order, each batch's as soon as it is done (not held until the
    next chunk comes: a slow source's batches are acknowledged as they are stored). Each
    acknowledgement carries its batch's first record, so that the client knows which
    batches are stored when some are not.

    A refused chunk is refused before any later one is taken, so the batches
    acknowledged are the load's first ones. A batch that fails at the backends stops the
    load taking more; the batches already in flight beside it are let finish (each
    commits or aborts on its own), their acknowledgements are passed on, and then the
    first failure is raised, naming every batch that failed by what became of it (not
    loaded, or, written in one phase by a backend the abort reached too late, stored or
    perhaps stored) and the batches acknowledged after the first of them."""
    async def one(p: Prepared) -> Replies:
        return [reply async for reply in run(p)]

    pending: deque[tuple[asyncio.Task[Replies], range]] = deque()
    failure: Exception | None = None
    failed: list[tuple[range, Exception]] = []    # batches that failed, in load order
    after: list[range] = []          # acknowledged after the first of them
    rows = 0                         # records of the load's chunks of rows so far
    source = aiter(chunks)
    coming: asyncio.Future[pb.LoadRequest] | None = None      # the next chunk, read
    try:
        while True:
            if coming is None and len(pending) < window:
                coming = asyncio.ensure_future(anext(source))
            await asyncio.wait([x for x in (coming, pending[0][0] if pending else None)
                                if x is not None], return_when=asyncio.FIRST_COMPLETED)
            if pending and pending[0][0].done():
                task, records = pending.popleft()
                try:
                    replies = task.result()
                except Exception as e:      # aborted: stop taking batches
                    failure = e
                    failed.append((records, e))
                    break
                for reply in _numbered(replies, records):
                    yield reply
                continue
            if coming is None or not coming.done():
                continue
            try:
                chunk = coming.result()
            except StopAsyncIteration:
                coming = None
                break
            coming = None
            try:
                first = rows + 1     # a chunk of rows is numbered by those before it
                p = check(chunk, first)
                rows += len(chunk.records)
            except Exception as e:    # refused: nothing more is taken
                failure = e
                break
            pending.append((asyncio.create_task(one(p)), _records(chunk, first)))
        while pending:
            task, records = pending.popleft()
            try:
                replies = await task
            except Exception as e:      # each is named: it may have committed in one phase
                failure = failure or e
                failed.append((records, e))
                continue
            for reply in _numbered(replies, records):
                yield reply
            if failed:
                after.append(records)
        if failure is not None:
            raise _naming(failure, failed, after)
    finally:
        if coming is not None:
            coming.cancel()
        for task, _ in pending:         # the client went away: each unit aborts (PP)
            task.cancel()


def _numbered(replies: Replies, records: range) -> Replies:
    """A batch's replies, its acknowledgement given the number of its first record."""
    for message in replies:
        for reply in message.replies:
            if reply.WhichOneof("body") == "done":
                reply.done.first_record = records.start
    return replies


def _records(chunk: pb.LoadRequest, first: int) -> range:
    """The numbers of a chunk's records in the load (from 1): a columnar batch carries
    its first; a chunk of rows starts at `first`, after the rows before it."""
    if chunk.HasField("columns"):
        first = chunk.columns.first or 1
        return range(first, first + chunk.columns.count)
    return range(first, first + len(chunk.records))


def _outcome(error: Exception) -> str:
    """What a batch that failed with `error` came to: not loaded (its unit rolled back
    everywhere), unless a backend writing it in one phase committed it or did not answer
    the abort (PP chains what it was told); a failure that is not the system's own says
    nothing of the unit, which may have committed."""
    written = error.__cause__
    if isinstance(written, OnePhaseWrites):
        return STORED if written.stored else MAYBE_STORED
    return NOT_LOADED if isinstance(error, MbdsError) else MAYBE_STORED


def _naming(failure: Exception, failed: list[tuple[range, Exception]], after: list[range]
            ) -> Exception:
    """The load's first failure, naming each batch that failed by its outcome and the
    batches acknowledged after the first of them (a client that went on from its last
    acknowledgement would load them twice), within what a failure's message carries."""
    if not failed or not isinstance(failure, MbdsError):
        return failure
    groups: dict[str, list[range]] = {}
    for records, error in failed:
        groups.setdefault(_outcome(error), []).append(records)
    if after:
        groups[LOADED_BESIDE] = after
    # By outcome, in the order their first batches come (the load's error's own first).
    told = ", ".join(f"records {_spans(spans)} {words}" for words, spans in groups.items())
    # The error itself is cut first: the batches named are what a client acts on.
    room = FAILURE_MESSAGE - len(told) - 2 - len("… (000000 characters)")
    return type(failure)(f"{shorten(str(failure), max(room, SHOWN))}; {told}")


def _spans(ranges: list[range]) -> str:
    return ", ".join(f"{r.start}-{r.stop - 1}" for r in ranges)


def _rows_returnable(cols: pb.LoadColumns, width: int, first: int) -> None:
    """Refuse a record a RETRIEVE could not return whole (`row_json_beyond`). A batch
    whose bytes, six times over, stay under the limit holds none: only larger ones are
    read record by record."""
    if 6 * cols.ByteSize() + 25 * (width + 1) <= MESSAGE_BUDGET:
        return
    count = cols.count
    decoded = [columns.decode(c, count) for c in (*cols.columns, cols.bodies)]
    for i in range(count):
        if size := row_json_beyond([c[i] for c in decoded], None, MESSAGE_BUDGET):
            raise SemanticError(f"record {first + i}: {too_large(ROW_AS_JSON, size)}")
