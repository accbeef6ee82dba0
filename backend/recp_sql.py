"""The SQL RECP's reads (`recp_read.py`, `recp_groups.py`) and writes (`recp_write.py`,
and their undo log, `undo.py`) share: a plan's record condition, the OR of its
conjunctions, alone or restricted to the plan's clusters (the CDT's address list); a
row as one JSON array, however many values it has; what a target names, as SQL; and
the statement texts kept per file. Names come only from validated identifiers; every
ABDL value is a bound parameter.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from backend.plan import FilePlan
from backend.store import as_json, col
from mbds.schema import FileSchema

T = TypeVar("T")


def condition(plan: FilePlan) -> tuple[str, list[object]]:
    """The record condition alone: the OR of the conjunctions' predicates ("1" if none)."""
    params: list[object] = []
    terms = []
    for conj in plan.conjunctions:
        if not conj:
            return "1", []    # one conjunction with no record condition: every record
        parts = []
        for attr, op, value in conj:
            parts.append(f"{col(attr)} {op} ?")
            params.append(value)
        terms.append("(" + " AND ".join(parts) + ")")
    return ("(" + " OR ".join(terms) + ")" if terms else "1"), params


def where(plan: FilePlan) -> tuple[str, list[object]]:
    """The condition restricted to the plan's clusters (the CDT's address list)."""
    cond, params = condition(plan)
    if plan.every_cluster:
        return cond, params
    return (f"cluster_id IN (SELECT value FROM json_each(?)) AND {cond}",
            [json.dumps(plan.clusters), *params])


# The most arguments SQLite lets one function call have (SQLITE_MAX_FUNCTION_ARG, 127 in
# a stock build, and no connection may raise it): a row of a file of 256 attributes has
# 258 values (with FILE and BODY, or with the cluster and body the undo log keeps).
MAX_FUNCTION_ARGS = 127


def json_array(exprs: Sequence[str]) -> str:
    """SQL giving the JSON array of `exprs`, any number of them, as the text one
    `json_array` call would give (byte for byte). Up to MAX_FUNCTION_ARGS it is that
    call; past it, calls of at most MAX_FUNCTION_ARGS (each non-empty) spliced together:
    the first without its closing `]`, the next ones without their `[`, joined by `,`.

    Each expression must be a scalar (a number, a string or null, as a column, a bound
    parameter or `store.as_json` give): an element then neither starts with `[` nor ends
    with `]`, so trimming a chunk's edges takes exactly its own brackets. The result is
    text without JSON's subtype, which is all a row needs (fetched, stored, or joined by
    `group_concat`).
    """
    if len(exprs) <= MAX_FUNCTION_ARGS:
        return f"json_array({', '.join(exprs)})"
    calls = [f"json_array({', '.join(exprs[i:i + MAX_FUNCTION_ARGS])})"
             for i in range(0, len(exprs), MAX_FUNCTION_ARGS)]
    first, *middle, last = calls
    parts = [f"rtrim({first}, ']')", *(f"trim({c}, '[]')" for c in middle),
             f"ltrim({last}, '[')"]
    return "(" + " || ',' || ".join(parts) + ")"


# Statement texts of a file by what they depend on (targets, conditions): a two-record
# request spent more Python on building its SQL than SQLite spent running it. Keyed
# by the schema object, which a redefinition replaces; bounded, cleared when full.
TEXTS: dict[tuple[object, ...], tuple[FileSchema, Any]] = {}
TEXTS_KEPT = 1024


def cached(schema: FileSchema, key: tuple[object, ...], build: Callable[[], T]) -> T:
    full = (id(schema), *key)
    hit = TEXTS.get(full)
    if hit is not None and hit[0] is schema:
        return cast(T, hit[1])
    value = build()
    if len(TEXTS) >= TEXTS_KEPT:
        TEXTS.clear()
    TEXTS[full] = (schema, value)
    return value


def term(plan: FilePlan, a: str, encoded: bool = False) -> tuple[str, list[object]]:
    """What a target, aggregate item or BY names, as SQL on the plan's file: FILE is the
    file's name, BODY the record body, an attribute the file lacks is null. (An unknown
    double-quoted name would be a string to SQLite, not a column.)"""
    if a == "FILE":
        return "?", [plan.schema.name]
    if a == "BODY":
        return "_body", []
    attr = plan.schema.by_name.get(a)
    if attr is None:
        return "NULL", []
    return (as_json(attr) if encoded else col(a)), []
