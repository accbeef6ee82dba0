"""REQP — request preparation (docs/spec.md §4 step 1): parse, check, form the traffic unit.

Everything that can be wrong with what a client sends — an ABDL request or a
bulk load — is found here, before anything is broadcast, so a rejected
request changes no data on any backend.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property

from controller.abdl import TextTooLong, ast, parse
from controller.checks import as_compared, check_value, modifier
from controller.checks import where as _where
from controller.reach import file_named, files_reached
from mbds.directory import Directory
from mbds.errors import SemanticError, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.schema import Attribute, FileSchema
from mbds.service import MAX_LOAD_RECORDS, MESSAGE_BUDGET, too_large
from mbds.traffic import RELOP_PB, predicate_count
from mbds.values import Value, from_pb, row_json_beyond, to_pb

# What a client may send; each bound is refused with its limit named (docs/abdl.md, "Limits").
# The characters of a request's or transaction's text outside record bodies: bodies are
# data, bounded by gRPC's message size alone, while the rest costs a parse.
MAX_TEXT = 1 << 20
# A record refused when a RETRIEVE could not return it whole (`row_json_beyond`).
ROW_AS_JSON = "the record as a RETRIEVE returns it (a row of JSON)"
MAX_REQUESTS = 1000        # requests in one transaction
# Predicates in one request: each deepens a backend's SQL condition by one level, and
# SQLite refuses an expression deeper than 1000.
MAX_PREDICATES = 500
# A request's timeout_s beyond this is taken as this; 0 means the controller's default.
MAX_TIMEOUT_S = 3600.0
# The prepared-request cache: at most so many entries, and so many characters of text.
CACHE_SIZE = 512
CACHE_TEXT = 16 << 20

OPS = {"INSERT": pb.INSERT, "DELETE": pb.DELETE, "UPDATE": pb.UPDATE, "RETRIEVE": pb.RETRIEVE,
       "RETRIEVE_COMMON": pb.RETRIEVE_COMMON}


@dataclass
class PreparedInsert:
    file: str
    values: list[Value]          # aligned with the file's attributes
    body: str | None


@dataclass
class Prepared:
    """One checked request: the wire form plus what PP needs to finish it."""
    op: str
    request: pb.Request
    columns: list[str] = field(default_factory=list)
    aggregates: list[tuple[str, str]] = field(default_factory=list)    # (agg, attr)
    by: str = ""
    common: tuple[str, str] = ("", "")
    left_width: int = 0
    inserts: list[PreparedInsert] = field(default_factory=list)
    # The serialized traffic unit of the request list this one heads (`same_unit`).
    units: dict[tuple[int, bool, int], bytes] = field(default_factory=dict, compare=False,
                                                      repr=False)

    @cached_property
    def header(self) -> pb.ReplyHeader:
        """PP's first reply to the request, built once (REQP keeps prepared requests)."""
        return pb.ReplyHeader(op=self.op, columns=self.columns)


def same_unit(prepared: list[Prepared], transaction: bool, backends: int,
              split_search_from: int) -> bytes:
    """The traffic unit of requests that place no records, the same for every backend and
    serialized without its seq (the bus adds it, `controller/bus.py`): formed once per
    prepared request list, which REQP keeps, and per number of backends."""
    key = (backends, transaction, split_search_from)
    body = prepared[0].units.get(key)
    if body is None:
        m = predicate_count(p.request for p in prepared)
        tu = pb.TrafficUnit(transaction=transaction, requests=[p.request for p in prepared],
                            predicate_count=m, split_search=m >= split_search_from,
                            one_phase=backends == 1)   # as Coordinator._one_phase decides
        tu.directory.SetInParent()     # as when the directory entries are copied in
        body = prepared[0].units[key] = tu.SerializeToString()
    return body


def _too_many(what: str, count: int, unit: str, limit: int) -> SemanticError:
    return SemanticError(f"{what} has {count} {unit}, at most {limit} allowed")


class Reqp:
    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        # Prepared traffic units by text, like a DBMS's prepared statements: a repeated
        # request skips parsing and checking. Valid while the set of files is the same
        # (preparation reads templates only); inserts are not kept (IIG places each).
        # Least recently used first; bounded in text too, as one entry may be 1 MiB.
        self._cache: OrderedDict[str, tuple[list[Prepared], bool]] = OrderedDict()
        self._cache_text = 0
        self._cache_files: tuple[str, ...] = ()

    def prepare(self, text: str) -> tuple[list[Prepared], bool]:
        files = tuple(self.directory.files)
        if files != self._cache_files:
            self._cache, self._cache_text, self._cache_files = OrderedDict(), 0, files
        hit = self._cache.get(text) if len(text) <= MAX_TEXT else None
        if hit is not None:
            self._cache.move_to_end(text)
            return hit
        try:
            tu = parse(text, MAX_TEXT)
        except TextTooLong:
            raise SemanticError(f"the request text is too long: {len(text)} characters, "
                                f"at most {MAX_TEXT} of them outside record bodies") from None
        if len(tu.requests) > MAX_REQUESTS:
            raise _too_many("the transaction", len(tu.requests), "requests", MAX_REQUESTS)
        prepared = [self._request(r) for r in tu.requests], tu.transaction
        if not any(p.inserts for p in prepared[0]):
            self._remember(text, prepared)
        return prepared

    def _remember(self, text: str, prepared: tuple[list[Prepared], bool]) -> None:
        while self._cache and (len(self._cache) >= CACHE_SIZE
                               or self._cache_text + len(text) > CACHE_TEXT):
            old, _ = self._cache.popitem(last=False)
            self._cache_text -= len(old)
        self._cache[text] = prepared
        self._cache_text += len(text)

    def prepare_load(self, chunk: pb.LoadRequest, first: int = 1) -> Prepared:
        """A bulk-load chunk as one INSERT request, checked like ABDL inserts; a record
        refused is named by its number in the load (the chunk's are `first`, …)."""
        schema = self._file(chunk.file, None)
        names = [a.upper() for a in chunk.attributes]
        for a in names:
            if a not in schema.by_name:
                raise SemanticError(f"unknown attribute {shorten(a)} in file {schema.name}")
        if len(chunk.records) > MAX_LOAD_RECORDS:
            raise SemanticError(f"a load batch of {len(chunk.records):,} records: a batch "
                                f"holds 1 to {MAX_LOAD_RECORDS:,}")
        inserts = []
        # As for columns (`load._rows_returnable`): only a chunk whose bytes, six times
        # over, pass the limit can hold a record no row of JSON carries.
        measured = 6 * chunk.ByteSize() + 25 * (len(names) + 1) > MESSAGE_BUDGET
        for r, row in enumerate(chunk.records, start=first):
            if len(row.values) != len(names):
                raise SemanticError(f"record {r}: {len(row.values)} values for "
                                    f"{len(names)} attributes")
            values: list[Value] = [None] * len(schema.attributes)
            for a, v in zip(names, row.values, strict=True):
                value = from_pb(v)
                if value is not None:
                    try:
                        values[schema.index[a]] = check_value(schema.by_name[a], value,
                                                              None, schema.name)
                    except SemanticError as e:
                        raise SemanticError(f"record {r}: {e}") from None
            body = row.body if row.HasField("body") else None
            if measured and (size := row_json_beyond(values, body, MESSAGE_BUDGET)):
                raise SemanticError(f"record {r}: {too_large(ROW_AS_JSON, size)}")
            inserts.append(PreparedInsert(schema.name, values, body))
        return Prepared("INSERT", pb.Request(op=OPS["INSERT"], file=schema.name),
                        inserts=inserts)

    @staticmethod
    def timeout(timeout: float | None) -> float | None:
        """A request's timeout_s, checked: None (0 on the wire) is the controller's
        default; NaN or a negative one would fail at once, blaming a healthy backend, and
        an infinite one would never fail; a long one is capped at MAX_TIMEOUT_S."""
        if timeout is None:
            return None
        if not math.isfinite(timeout) or timeout < 0:
            raise SemanticError(f"timeout_s must be a finite, non-negative number of "
                                f"seconds (0: the controller's default), got {timeout!r}")
        return min(timeout, MAX_TIMEOUT_S)

    def _file(self, name: str, pos: ast.Pos | None) -> FileSchema:
        return file_named(self.directory, name, pos)

    # -------------------------------------------------------------- query --
    def _query(self, q: ast.Query) -> tuple[pb.Query, list[FileSchema]]:
        out = pb.Query()
        all_files: dict[str, FileSchema] = {}
        for conj in q.conjunctions:
            files = files_reached(self.directory, conj)
            c = out.conjunctions.add(files=[f.name for f in files])
            for p in conj.predicates:
                value: Value = p.value
                if p.attr == "FILE":
                    value = str(value).upper()
                else:
                    for f in files:
                        a = f.by_name[p.attr]
                        if a.type == "integer" and isinstance(p.value, float):
                            a = Attribute(a.name, "float")   # 2 < 2.5 compares fine
                        check_value(a, p.value, p.pos, f.name)
                    value = as_compared(p.value, [f.by_name[p.attr] for f in files])
                c.predicates.add(attr=p.attr, op=RELOP_PB[p.op], value=to_pb(value))
            for f in files:
                all_files[f.name] = f
        return out, list(all_files.values())

    @staticmethod
    def _attr_in(files: list[FileSchema], name: str, pos: ast.Pos | None) -> Attribute:
        for f in files:
            a = f.attribute(name)
            if a is not None:
                return a
        if name == "BODY":
            return Attribute("BODY", "string")
        where = files[0].name if len(files) == 1 else "the files this query selects"
        raise SemanticError(f"{_where(pos)}unknown attribute {shorten(name)} in {where}")

    # ----------------------------------------------------------- requests --
    def _request(self, r: ast.Request) -> Prepared:
        queries = [] if isinstance(r, ast.Insert) else (
            [r.left.query, r.right.query] if isinstance(r, ast.RetrieveCommon) else [r.query])
        count = sum(len(c.predicates) for q in queries for c in q.conjunctions)
        if count > MAX_PREDICATES:
            raise _too_many(f"{_where(r.pos)}the request", count, "predicates", MAX_PREDICATES)
        if isinstance(r, ast.Insert):
            return self._insert(r)
        if isinstance(r, ast.Retrieve):
            return self._retrieve(r)
        if isinstance(r, ast.RetrieveCommon):
            return self._common(r)
        query, files = self._query(r.query)
        req = pb.Request(op=OPS[r.op], retrieval=pb.Retrieval(query=query))
        prepared = Prepared(r.op, req, columns=[])
        if isinstance(r, ast.Update):
            req.modifier.CopyFrom(modifier(r.modifier, files))
            req.moves_records = any(r.modifier.attr in f.directory_attributes for f in files)
        return prepared

    def _insert(self, r: ast.Insert) -> Prepared:
        first = r.keywords[0]
        if first.attr != "FILE":
            raise SemanticError(f"{_where(first.pos)}a record's first keyword must be "
                                f"<FILE, name>, got <{shorten(first.attr)}, ...>")
        if not isinstance(first.value, str):
            raise SemanticError(f"{_where(first.pos)}FILE must name a file")
        schema = self._file(first.value, first.pos)
        values: list[Value] = [None] * len(schema.attributes)
        seen = set()
        for k in r.keywords[1:]:
            if k.attr in seen or k.attr == "FILE":
                raise SemanticError(f"{_where(k.pos)}attribute {shorten(k.attr)} appears "
                                    "twice in the record")
            seen.add(k.attr)
            a = schema.by_name.get(k.attr)
            if a is None:
                raise SemanticError(f"{_where(k.pos)}unknown attribute {shorten(k.attr)} in "
                                    f"file {schema.name}")
            values[schema.index[k.attr]] = check_value(a, k.value, k.pos, schema.name)
        if size := row_json_beyond(values, r.body, MESSAGE_BUDGET):
            raise SemanticError(f"{_where(r.pos)}{too_large(ROW_AS_JSON, size)}")
        req = pb.Request(op=pb.INSERT, file=schema.name)
        return Prepared("INSERT", req, inserts=[PreparedInsert(schema.name, values, r.body)])

    def _targets(self, targets: tuple[ast.TargetItem, ...], files: list[FileSchema],
                 allow_aggregates: bool) -> tuple[list[pb.TargetItem], list[str]]:
        items: list[pb.TargetItem] = []
        names: list[str] = []
        shown: set[str] = set()     # by ALL: a plain item of one of them adds nothing
        for t in targets:
            if t.all:
                expanded = ["FILE"] + [a.name for f in files for a in f.attributes] + ["BODY"]
                for a in dict.fromkeys(expanded):
                    if a not in names:
                        items.append(pb.TargetItem(attr=a))
                        names.append(a)
                shown.update(expanded)
                continue
            if not t.agg and t.name in shown:
                continue        # `(ALL, A)` as `(A, ALL)`: A once, where it first came
            attr = self._attr_in(files, t.attr or "", t.pos)
            if t.agg:
                if not allow_aggregates:
                    raise SemanticError(f"{_where(t.pos)}aggregates are not allowed here")
                # In every file reached, whichever comes first: SQLite's sum would read
                # a string as a number.
                types = {f.name: typed.type for f in files
                         if (typed := f.attribute(attr.name)) is not None}
                texts = [name for name, kind in types.items() if kind == "string"]
                if t.agg in ("AVG", "SUM") and (texts or attr.type == "string"):
                    where = f" (a string in file {texts[0]})" if len(types) > 1 else ""
                    raise SemanticError(f"{_where(t.pos)}{t.agg} of string attribute "
                                        f"{attr.name}{where}")
            if t.name in names:
                raise SemanticError(f"{_where(t.pos)}target {shorten(t.name)} appears twice")
            items.append(pb.TargetItem(attr=attr.name, agg=t.agg or ""))
            names.append(t.name)
        return items, names

    def _retrieve(self, r: ast.Retrieve) -> Prepared:
        query, files = self._query(r.query)
        items, names = self._targets(r.targets, files, allow_aggregates=True)
        aggs = [(t.agg, t.attr) for t in items if t.agg]
        by = ""
        if r.by:
            by_pos = r.by_pos or r.pos
            by = self._attr_in(files, r.by, by_pos).name
            if not aggs:
                raise SemanticError(f"{_where(by_pos)}BY {by} needs at least one aggregate "
                                    "in the target list")
        if aggs:
            for t in items:
                if not t.agg and t.attr != by:
                    # Named where it is written, or where ALL brought it in.
                    at = next((w.pos for w in r.targets if not w.agg and (
                        w.all or (w.attr or "").upper() == t.attr)), r.pos)
                    raise SemanticError(
                        f"{_where(at)}{t.attr} must be the BY attribute or inside an "
                        "aggregate when the target list has aggregates")
            if by and by not in names:
                names.insert(0, by)
        req = pb.Request(op=pb.RETRIEVE, retrieval=pb.Retrieval(
            query=query, targets=items, by=by))
        return Prepared("RETRIEVE", req, columns=names, aggregates=aggs, by=by)

    def _common(self, r: ast.RetrieveCommon) -> Prepared:
        lq, lfiles = self._query(r.left.query)
        rq, rfiles = self._query(r.right.query)
        litems, lnames = self._targets(r.left.targets, lfiles, allow_aggregates=False)
        ritems, rnames = self._targets(r.right.targets, rfiles, allow_aggregates=False)
        lpos, rpos = r.common_pos or (r.pos, r.pos)
        la = self._attr_in(lfiles, r.common[0], lpos)
        ra = self._attr_in(rfiles, r.common[1], rpos)
        if (la.type == "string") != (ra.type == "string"):
            raise SemanticError(f"{_where(lpos)}COMMON ({la.name}, {ra.name}) compares "
                                f"{la.type} with {ra.type}")
        # The join attributes travel as one extra, hidden column on each side.
        litems.append(pb.TargetItem(attr=la.name))
        ritems.append(pb.TargetItem(attr=ra.name))
        prefix = rfiles[0].name if len(rfiles) == 1 else "RIGHT"
        columns = lnames + [f"{prefix}.{n}" if n in lnames else n for n in rnames]
        req = pb.Request(op=pb.RETRIEVE_COMMON,
                         retrieval=pb.Retrieval(query=lq, targets=litems),
                         right=pb.Retrieval(query=rq, targets=ritems))
        return Prepared("RETRIEVE_COMMON", req, columns=columns, common=(la.name, ra.name),
                        left_width=len(lnames))

