"""RECP — record processing (docs/spec.md §4 step 6): writing this backend's SQLite records.

INSERT, DELETE and UPDATE (also of a directory attribute, which moves records to
other clusters) in the writer thread's transaction, each with the rows that undo it
when the unit is two-phase (`undo.py`), on the plans DM made (`backend/plan.py`; the
record condition, `recp_sql.py`). Every statement is built from validated
identifiers only; every ABDL value is a bound parameter, so no value can change a
statement.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from backend import recp_sql
from backend.plan import FilePlan
from backend.store import col, table
from backend.undo import UndoLog
from mbds.proto import mbds_pb2 as pb
from mbds.schema import FileSchema
from mbds.values import INT64_RANGE, Value, from_pb

Place = Callable[[str, list[Value]], int]


def delete(conn: sqlite3.Connection, plan: FilePlan, undo: UndoLog | None = None) -> int:
    if not plan.clusters:
        return 0
    where, params = recp_sql.where(plan)
    if undo is not None:
        undo.rows(plan.schema, where, params)
    return conn.execute(f"DELETE FROM {table(plan.schema.name)} WHERE {where}", params).rowcount


def _modifier_sql(m: pb.Modifier) -> tuple[str, list[object]]:
    value = from_pb(m.value)
    if not m.source:
        return "?", [value]
    if not m.arith:
        return col(m.source), []
    return f"({col(m.source)} {m.arith} ?)", [value]


class OutOfRange(ValueError):
    """An UPDATE's arithmetic would store a value its attribute's type cannot hold."""


# A STRICT column refusing a value of another type (Python's sqlite3 has no name for it).
SQLITE_CONSTRAINT_DATATYPE = 3091

# Where SQLite's arithmetic leaves a type's range: a float overflows to ±Inf (which no
# answer's JSON can carry), an integer to a float.
_OVERFLOWED = {"float": "abs({e}) > 1.7976931348623157e308", "integer": "typeof({e}) = 'real'"}


def _exact(m: pb.Modifier, source: Value, result: Value) -> Value:
    """What integer arithmetic gives exactly, where SQLite's overflowed to a float
    (9.223372036854776e+18 for 9223372036854775807 + 1)."""
    operand = from_pb(m.value)
    if type(source) is not int or type(operand) is not int:
        return result
    if m.arith == "+":
        return source + operand
    if m.arith == "-":
        return source - operand
    if m.arith == "*":
        return source * operand
    if m.arith == "/" and operand:          # truncates toward zero, as SQLite's does
        quotient = abs(source) // abs(operand)
        return quotient if (source < 0) == (operand < 0) else -quotient
    return result


def _out_of_range(plan: FilePlan, m: pb.Modifier, result: Value, source: Value
                  ) -> OutOfRange:
    """The refusal naming what the modifier gives a record whose `m.source` is `source`."""
    a = plan.schema.by_name[m.attr]
    bounds = f" ({INT64_RANGE})" if a.type == "integer" else ""
    if a.type == "integer":
        result = _exact(m, source, result)
    return OutOfRange(f"{plan.schema.name}.{m.attr} = {m.source} {m.arith} "
                      f"{from_pb(m.value)!r} gives {result!r} for a record, out of the "
                      f"range of {a.type}{bounds}; nothing was updated")


def _guarded(plan: FilePlan, m: pb.Modifier, expr: str, params: list[object]
             ) -> tuple[str, list[object]]:
    """`expr` as an UPDATE sets it: where its arithmetic leaves the attribute's type it
    gives a BLOB instead, which the STRICT column refuses, ending the statement with
    nothing written (`update` then names the value). One scan, not a check and a write."""
    test = _OVERFLOWED.get(plan.schema.by_name[m.attr].type) if m.arith else None
    if test is None:
        return expr, params
    return f"CASE WHEN {test.format(e=expr)} THEN x'' ELSE {expr} END", params + params


def _first_out_of_range(conn: sqlite3.Connection, plan: FilePlan, m: pb.Modifier,
                        expr: str, params: list[object], where: str,
                        wparams: list[object]) -> OutOfRange | None:
    """The refusal naming a value out of its type's range that `expr` gives a record."""
    test = _OVERFLOWED[plan.schema.by_name[m.attr].type]
    row = conn.execute(f"SELECT {expr}, {col(m.source)} FROM {table(plan.schema.name)} "
                       f"WHERE {test.format(e=expr)} AND ({where}) LIMIT 1",
                       params + params + wparams).fetchone()
    return None if row is None else _out_of_range(plan, m, row[0], row[1])


def _in_range(kind: str, value: Value) -> bool:
    """A value SQLite computed, as `_OVERFLOWED` tests it."""
    if kind == "float":
        return not isinstance(value, float) or abs(value) <= 1.7976931348623157e308
    return kind != "integer" or not isinstance(value, float)


def update(conn: sqlite3.Connection, plan: FilePlan, m: pb.Modifier,
           undo: UndoLog | None = None) -> int:
    """UPDATE of a non-directory attribute: records stay in their clusters."""
    if not plan.clusters:
        return 0
    expr, eparams = _modifier_sql(m)
    where, wparams = recp_sql.where(plan)
    if undo is not None:
        undo.rows(plan.schema, where, wparams)
    value, vparams = _guarded(plan, m, expr, eparams)
    try:
        return conn.execute(f"UPDATE {table(plan.schema.name)} SET {col(m.attr)} = {value} "
                            f"WHERE {where}", vparams + wparams).rowcount
    except sqlite3.IntegrityError as e:
        if value is expr or e.sqlite_errorcode != SQLITE_CONSTRAINT_DATATYPE:
            raise
        raise _first_out_of_range(conn, plan, m, expr, eparams, where, wparams) or e from None


def update_moving(conn: sqlite3.Connection, plan: FilePlan, m: pb.Modifier,
                  cluster_of: Place, undo: UndoLog | None = None) -> int:
    """UPDATE of a directory attribute: each record may move to another cluster.

    SQLite computes the new value (so arithmetic is the same as in `update`);
    `cluster_of` maps the record's new directory values to a cluster id, asking
    IIG to allocate one when the combination is new.
    """
    if not plan.clusters:
        return 0
    expr, eparams = _modifier_sql(m)
    dir_attrs = plan.schema.directory_attributes[1:]      # FILE never changes
    sel = ", ".join(expr if a == m.attr else col(a) for a in dir_attrs)
    where, wparams = recp_sql.where(plan)
    rows = conn.execute(f"SELECT rid, {sel} FROM {table(plan.schema.name)} WHERE {where}",
                        eparams * dir_attrs.count(m.attr) + wparams).fetchall()
    pos = dir_attrs.index(m.attr)
    kind = plan.schema.by_name[m.attr].type if m.arith else ""
    if undo is not None:
        undo.rows(plan.schema, where, wparams)
    changes = []
    for rid, *values in rows:
        if not _in_range(kind, values[pos]):
            [source] = conn.execute(f"SELECT {col(m.source)} FROM {table(plan.schema.name)} "
                                    "WHERE rid = ?", (rid,)).fetchone()
            raise _out_of_range(plan, m, values[pos], source)
        cid = cluster_of(plan.schema.name, [plan.schema.name, *values])
        changes.append((values[pos], cid, rid))
    conn.executemany(f"UPDATE {table(plan.schema.name)} SET {col(m.attr)} = ?, cluster_id = ? "
                     f"WHERE rid = ?", changes)
    return len(changes)


def insert(conn: sqlite3.Connection, schema: FileSchema, records: list[pb.PlacedRecord],
           undo: UndoLog | None = None) -> int:
    names = [a.name for a in schema.attributes]
    before = undo.last_rid(schema) if undo is not None else 0
    sql = (f"INSERT INTO {table(schema.name)} (cluster_id, {', '.join(map(col, names))}, _body) "
           f"VALUES (?, {', '.join('?' * len(names))}, ?)")
    conn.executemany(sql, [
        (r.cluster_id, *[from_pb(v) for v in r.values], r.body if r.HasField("body") else None)
        for r in records])
    if undo is not None:
        undo.inserted(schema, before)
    return len(records)
