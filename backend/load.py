"""RECP's insert of a columnar load batch: one `executemany` for the backend's records.

The batch was checked when it arrived (`check.traffic_unit`): its clusters are the
file's, and each column's kind fits its attribute. Its dictionary references are
checked here, as they are decoded (a bad one fails the unit's job, which rolls back).
Rows are built by `zip` over the columns, so no Python code runs per value between the
message and SQLite. It runs in the writer's transaction like any INSERT, with its undo
range when two-phase.
"""

from __future__ import annotations

import sqlite3

from backend.check import BadMessage
from backend.store import col, table
from backend.undo import UndoLog
from mbds import columns
from mbds.proto import mbds_pb2 as pb
from mbds.schema import FileSchema


def cluster_ids(req: pb.Request) -> set[int]:
    """The clusters an INSERT writes, whichever form its records came in."""
    found = {r.cluster_id for r in req.records}
    found.update(req.columns.cluster_ids)
    return found


def insert(conn: sqlite3.Connection, schema: FileSchema, batch: pb.LoadColumns,
           undo: UndoLog | None = None) -> int:
    if not batch.count:
        return 0
    names = [a.name for a in schema.attributes]
    values = [columns.values(c, batch.count) for c in batch.columns]
    bodies = columns.values(batch.bodies, batch.count)
    before = undo.last_rid(schema) if undo is not None else 0
    try:
        conn.executemany(
            f"INSERT INTO {table(schema.name)} (cluster_id, {', '.join(map(col, names))}, "
            f"_body) VALUES (?, {', '.join('?' * len(names))}, ?)",
            zip(batch.cluster_ids, *values, bodies, strict=True))
    except IndexError:      # a dictionary reference out of range: the job rolls back
        for c in (*batch.columns, batch.bodies):
            i = columns.bad_reference(c)
            if i is not None:
                raise BadMessage(f"record {batch.first + i}: a dictionary reference "
                                 "beyond its column's values") from None
        raise
    if undo is not None:
        undo.inserted(schema, before)
    return batch.count
