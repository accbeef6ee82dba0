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
from collections.abc import Iterable
from itertools import repeat

from backend.check import BadMessage, record
from backend.store import col, table
from backend.undo import UndoLog
from mbds import columns
from mbds.proto import mbds_pb2 as pb
from mbds.schema import FileSchema
from mbds.values import Value, from_pb


def cluster_ids(req: pb.Request) -> set[int]:
    """The clusters an INSERT writes, whichever form its records came in."""
    found = {r.cluster_id for r in req.records}
    found.update(req.columns.cluster_ids)
    return found


def insert(conn: sqlite3.Connection, schema: FileSchema, batch: pb.LoadColumns,
           undo: UndoLog | None = None) -> int:
    if not batch.count:
        return 0
    n = batch.count
    # An all-null column is left out (its default is NULL). A constant column's value
    # is one parameter, bound once per record however many columns hold it: binding
    # is most of SQLite's cost per value, and a record often repeats a value.
    kept = [(name, c) for name, c in zip((*(col(a.name) for a in schema.attributes), "_body"),
                                         (*batch.columns, batch.bodies), strict=True)
            if c.kind != pb.NULLS]
    base = 1 + sum(c.kind != pb.CONSTANT for _, c in kept)     # parameters per record
    names, slots = ["cluster_id"], ["?1"]
    per_record: list[Iterable[Value]] = [batch.cluster_ids]
    fixed: list[Value] = []
    slot: dict[tuple[type, str], int] = {}     # by type and repr: 1 == 1.0, 0.0 == -0.0
    for name, c in kept:
        names.append(name)
        if c.kind == pb.CONSTANT:
            v = from_pb(c.values[0])
            if (type(v), repr(v)) not in slot:
                fixed.append(v)
                slot[type(v), repr(v)] = base + len(fixed)
            slots.append(f"?{slot[type(v), repr(v)]}")
        else:
            per_record.append(columns.values(c, n))
            slots.append(f"?{len(per_record)}")
    before = undo.last_rid(schema) if undo is not None else 0
    try:
        conn.executemany(
            f"INSERT INTO {table(schema.name)} ({', '.join(names)}) "
            f"VALUES ({', '.join(slots)})",
            zip(*per_record, *(repeat(v, n) for v in fixed), strict=True))
    except IndexError:      # a dictionary reference out of range: the job rolls back
        for c in (*batch.columns, batch.bodies):
            i = columns.bad_reference(c)
            if i is not None:
                raise BadMessage(f"{record(batch, i)}: a dictionary reference "
                                 "beyond its column's values") from None
        raise
    if undo is not None:
        undo.inserted(schema, before)
    return batch.count
