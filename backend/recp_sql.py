"""RECP's record condition in SQL, shared by its reads (`recp_read.py`) and its writes
(`recp_write.py`): the OR of a plan's conjunctions, alone or restricted to the
plan's clusters (the CDT's address list). Names come only from validated
identifiers; every ABDL value is a bound parameter.
"""

from __future__ import annotations

import json

from backend.plan import FilePlan
from backend.store import col


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
