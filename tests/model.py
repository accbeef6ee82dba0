"""An independent, in-memory evaluation of ABDL, for checking the system's answers.

It shares only the parser with the system (the parser has its own tests);
query evaluation, aggregates, BY, COMMON and modifiers are written again here,
plainly, over Python lists — no directory, clusters, SQL or placement.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from controller.abdl import ast, parse

OPS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
       ">": operator.gt, ">=": operator.ge}
ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul}


class Model:
    def __init__(self, schemas: dict[str, dict[str, str]]) -> None:
        self.schemas = schemas                      # file -> {attr: type}
        self.records: list[dict[str, Any]] = []     # each with "FILE"

    def _match(self, rec: dict[str, Any], q: ast.Query) -> bool:
        for conj in q.conjunctions:
            ok = True
            for p in conj.predicates:
                v = rec.get(p.attr)
                want = p.value.upper() if p.attr == "FILE" else p.value
                if v is None or not OPS[p.op](v, want):
                    ok = False
                    break
            if ok:
                return True
        return False

    def select(self, q: ast.Query) -> list[dict[str, Any]]:
        return [r for r in self.records if self._match(r, q)]

    def reached(self, q: ast.Query) -> set[str]:
        """The files a query reaches, whatever records they hold: those its FILE
        predicates select that have every other attribute a conjunction names."""
        return {f for conj in q.conjunctions for f, attrs in self.schemas.items()
                if all(OPS[p.op](f, p.value.upper()) if p.attr == "FILE"
                       else p.attr in attrs for p in conj.predicates)}

    def run(self, text: str) -> list[dict[str, Any]]:
        """Apply a traffic unit; one {"op", "records", "count"} per request."""
        out = []
        for r in parse(text).requests:
            out.append(self._request(r))
        return out

    def _request(self, r: ast.Request) -> dict[str, Any]:
        if isinstance(r, ast.Insert):
            rec = {k.attr: self._typed(r.keywords[0].value.upper(), k.attr, k.value)
                   for k in r.keywords}
            rec["FILE"] = str(r.keywords[0].value).upper()
            if r.body is not None:
                rec["BODY"] = r.body
            self.records.append(rec)
            return {"op": "INSERT", "count": 1}
        if isinstance(r, ast.Delete):
            hit = self.select(r.query)
            self.records = [x for x in self.records if not any(x is h for h in hit)]
            return {"op": "DELETE", "count": len(hit)}
        if isinstance(r, ast.Update):
            hit = self.select(r.query)
            for rec in hit:
                rec[r.modifier.attr] = self._modified(rec, r.modifier)
            return {"op": "UPDATE", "count": len(hit)}
        if isinstance(r, ast.RetrieveCommon):
            left = self.select(r.left.query)
            right = self.select(r.right.query)
            la, ra = r.common
            lnames = [t.name for t in r.left.targets]
            # A clashing right-side name takes its file's, or RIGHT's when the right
            # side reaches several files: one name for the column, not one per row.
            rfiles = self.reached(r.right.query)
            prefix = next(iter(rfiles)) if len(rfiles) == 1 else "RIGHT"
            rows = []
            for rr in right:
                for lr in left:
                    if lr.get(la) is not None and lr.get(la) == rr.get(ra):
                        row = {n: lr.get(n) for n in lnames}
                        for t in r.right.targets:
                            key = t.name if t.name not in lnames else f"{prefix}.{t.name}"
                            row[key] = rr.get(t.name)
                        rows.append(row)
            return {"op": "RETRIEVE_COMMON", "records": rows, "count": len(left) + len(right)}
        return self._retrieve(r)

    def _typed(self, file: str, attr: str, value: Any) -> Any:
        if self.schemas.get(file, {}).get(attr) == "float":
            return float(value)
        return value

    def _modified(self, rec: dict[str, Any], m: ast.Modifier) -> Any:
        typ = self.schemas[rec["FILE"]][m.attr]
        source = m.source
        if m.bare_word and isinstance(m.value, str) and m.value.upper() in \
                self.schemas[rec["FILE"]]:
            source = m.value.upper()
        if source is None:
            return float(m.value) if typ == "float" else m.value
        v = rec.get(source)
        if v is None or m.arith is None:
            return v
        if m.arith == "/":
            if isinstance(v, int) and isinstance(m.value, int):
                return int(v / m.value)        # SQL integer division truncates
            return v / m.value
        return ARITH[m.arith](v, m.value)

    def _retrieve(self, r: ast.Retrieve) -> dict[str, Any]:
        hit = self.select(r.query)
        aggs = [t for t in r.targets if t.agg]
        if not aggs:
            names: list[str] = []
            for t in r.targets:
                if t.all:
                    files = sorted({h["FILE"] for h in hit}) or []
                    names += ["FILE"] + [a for f in files for a in self.schemas[f]] + ["BODY"]
                else:
                    names.append(t.name)
            names = list(dict.fromkeys(names))
            return {"op": "RETRIEVE", "count": len(hit),
                    "records": [{n: h.get(n) for n in names} for h in hit]}
        groups: dict[Any, list[dict[str, Any]]] = {}
        for h in hit:
            groups.setdefault(h.get(r.by) if r.by else None, []).append(h)
        if not r.by and not groups:
            groups[None] = []
        rows = []
        for key in sorted(groups, key=lambda k: (k is not None, k)):
            row: dict[str, Any] = {r.by: key} if r.by else {}
            for t in aggs:
                vals = [g[t.attr] for g in groups[key] if g.get(t.attr) is not None]
                if t.agg == "COUNT":
                    row[t.name] = len(vals)
                elif not vals:
                    row[t.name] = None
                else:
                    row[t.name] = {"SUM": sum, "MIN": min, "MAX": max,
                                   "AVG": lambda v: sum(v) / len(v)}[t.agg](vals)
            rows.append(row)
        return {"op": "RETRIEVE", "count": len(hit), "records": rows}


def canon(records: list[dict[str, Any]]) -> list[tuple]:
    """Order-free, float-tolerant form of a record list for comparing answers."""
    def norm(v: Any) -> Any:
        return round(v, 6) if isinstance(v, float) and math.isfinite(v) else v
    return sorted((tuple(sorted((k, norm(v)) for k, v in r.items())) for r in records),
                  key=repr)
