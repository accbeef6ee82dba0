"""What a backend checks in every message it is sent, whoever sent it.

The controller checks requests before it sends them; a backend does not rely on
that. Every name in a traffic unit or a directory update must be one this backend's
directory knows (or, for a new file, a valid identifier), and every value must fit
its attribute's type, before any of it reaches DM's comparisons or RECP's SQL. A
message that fails fails its own unit (or call), never the bus.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from itertools import groupby

from backend.plan import DescriptorResults
from mbds import columns, traffic
from mbds.descriptors import AttrIndex, Descriptor
from mbds.directory import Directory, changes
from mbds.entries import EntryCheck, EntryError
from mbds.proto import mbds_pb2 as pb
from mbds.schema import Attribute, FileSchema
from mbds.values import Value, from_pb

AGGREGATES = ("", "AVG", "COUNT", "SUM", "MIN", "MAX")
ARITH = ("", "+", "-", "*", "/")


class BadMessage(ValueError):
    """A message names something this backend does not have, or a value of a wrong type."""


def _short(name: str) -> str:
    return repr(name if len(name) <= 64 else name[:64] + "…")


def _file(directory: Directory, name: str) -> FileSchema:
    schema = directory.files.get(name)
    if schema is None:
        raise BadMessage(f"unknown file {_short(name)}")
    return schema


def _attr(schema: FileSchema, name: str) -> Attribute:
    a = schema.by_name.get(name)
    if a is None:
        raise BadMessage(f"file {schema.name} has no attribute {_short(name)}")
    return a


def _fits(a: Attribute, value: Value, what: str) -> None:
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise BadMessage(f"{what}: {value!r} is not a finite number")
    if not a.accepts(value):
        raise BadMessage(f"{what}: {a.name} is {a.type}, got {type(value).__name__}")


# The attribute as a predicate compares it (any number for a number attribute), per
# name and type: made once, as every predicate of every unit is checked.
_AS_COMPARED: dict[tuple[str, str], Attribute] = {}


def _comparable(a: Attribute, value: Value, what: str) -> None:
    """A predicate's value: a number for a number attribute, a string for a string one."""
    if isinstance(value, str) != (a.type == "string"):
        raise BadMessage(f"{what}: {a.name} is {a.type}, got {type(value).__name__}")
    key = (a.name, "float" if a.type != "string" else "string")
    compared = _AS_COMPARED.get(key)
    if compared is None:
        compared = _AS_COMPARED[key] = Attribute(*key)
    _fits(compared, value, what)


def _retrieval(directory: Directory, r: pb.Retrieval, files: set[str]) -> None:
    for conj in r.query.conjunctions:
        schemas = [_file(directory, f) for f in conj.files]
        files.update(conj.files)
        for p in conj.predicates:
            if not 0 <= p.op < len(traffic.RELOPS):
                raise BadMessage(f"unknown comparison {p.op}")
            if p.attr == "FILE":
                if not isinstance(from_pb(p.value), str):
                    raise BadMessage("FILE compared with something other than a name")
                continue
            owners = [s for s in schemas if p.attr in s.by_name]
            if not owners:
                raise BadMessage(f"no file of the query has attribute {_short(p.attr)}")
            for s in owners:
                _comparable(s.by_name[p.attr], from_pb(p.value), "predicate")
    # Target names reach SQL only if the file has them (recp_read._select_list): no check.
    for t in r.targets:
        if t.agg not in AGGREGATES:
            raise BadMessage(f"unknown aggregate {_short(t.agg)}")


OPS = frozenset(pb.Op.values())     # built once: `values()` makes a new list per call


def traffic_unit(directory: Directory, tu: pb.TrafficUnit) -> None:
    """Every request of a unit against this backend's directory (its update applied)."""
    for req in tu.requests:
        if req.op not in OPS:
            raise BadMessage(f"unknown operation {req.op}")
        if req.op == pb.INSERT:
            schema = _file(directory, req.file)
            if req.load_columns:      # parsed once, here; RECP inserts `columns`
                try:
                    req.columns.ParseFromString(req.load_columns)
                except Exception:   # protobuf's DecodeError (its module has no stubs here)
                    raise BadMessage("a load batch that does not parse") from None
                req.load_columns = b""
            if req.HasField("columns"):
                _load_batch(directory, schema, req.columns)
            for rec in req.records:
                owner = directory.clusters.get(rec.cluster_id)
                if owner is None or owner[0] != schema.name:
                    raise BadMessage(f"cluster {rec.cluster_id} is not a cluster of "
                                     f"{schema.name}")
                if len(rec.values) != len(schema.attributes):
                    raise BadMessage(f"a record of {schema.name} has {len(rec.values)} "
                                     f"values for {len(schema.attributes)} attributes")
                for a, v in zip(schema.attributes, rec.values, strict=True):
                    _fits(a, from_pb(v), "inserted value")
            if req.records:
                positions = _directory_positions(schema)
                _placed(directory, schema, [r.cluster_id for r in req.records],
                        [_as_stored(schema.attributes[i],
                                    [from_pb(r.values[i]) for r in req.records])
                         for i in positions],
                        "inserted record {}")
            continue
        files: set[str] = set()
        _retrieval(directory, req.retrieval, files)
        if req.op == pb.RETRIEVE_COMMON:
            _retrieval(directory, req.right, files)
        if req.op == pb.UPDATE:
            _modifier(directory, req, files)


def _modifier(directory: Directory, req: pb.Request, files: set[str]) -> None:
    """An UPDATE's modifier, by the rules REQP applies: what it writes fits the attribute
    in every file, and whether records move is whether it is a directory attribute."""
    m = req.modifier
    if m.arith not in ARITH:
        raise BadMessage(f"unknown arithmetic {_short(m.arith)}")
    schemas = [directory.files[f] for f in sorted(files)]
    if req.moves_records != any(m.attr in s.directory_attributes for s in schemas):
        raise BadMessage(f"an UPDATE of {_short(m.attr)} that says records "
                         f"{'move' if req.moves_records else 'stay'}")
    value = from_pb(m.value)
    for schema in schemas:
        a = _attr(schema, m.attr)
        source = _attr(schema, m.source) if m.source else None
        if source is None:
            _fits(a, value, "modifier")
        elif not m.arith:
            if source.type != a.type and (a.type, source.type) != ("float", "integer"):
                raise BadMessage(f"modifier: cannot copy {source.type} {source.name} into "
                                 f"{a.type} {a.name}")
        elif "string" in (a.type, source.type) or isinstance(value, str) or value is None:
            raise BadMessage(f"modifier: arithmetic on {a.name} needs numbers")
        else:
            _comparable(a, value, "modifier")
            if a.type == "integer" and (source.type == "float" or isinstance(value, float)):
                raise BadMessage(f"modifier: {a.name} is integer, {source.name} {m.arith} "
                                 f"{value!r} a float")
            if m.arith == "/" and value == 0:
                raise BadMessage("modifier: division by zero")


def _load_batch(directory: Directory, schema: FileSchema, batch: pb.LoadColumns) -> None:
    """A columnar batch, per column: its clusters the file's, each column's length the
    batch's and its kind its attribute's type (values one by one only in a VALUES
    column). The error names the batch's bad record (`record`)."""
    n = batch.count
    if len(batch.cluster_ids) != n or len(batch.columns) != len(schema.attributes):
        raise BadMessage(f"a batch of {n} records of {schema.name} has "
                         f"{len(batch.cluster_ids)} cluster ids and {len(batch.columns)} "
                         f"columns for {len(schema.attributes)} attributes")
    foreign = set(batch.cluster_ids) - directory.file_clusters.get(schema.name, set())
    if foreign:
        raise BadMessage(f"cluster {min(foreign)} is not a cluster of {schema.name}")
    try:
        # Dictionary references are range-checked as RECP decodes them (`load.insert`):
        # one pass over them instead of two.
        for a, c in zip(schema.attributes, batch.columns, strict=True):
            columns.check(a, c, n, schema.name, refs=False)
        columns.check(Attribute("BODY", "string"), batch.bodies, n, schema.name, refs=False)
        # The directory attributes' columns decoded here (their references checked now).
        dvalues = [_as_stored(schema.attributes[i], columns.values(batch.columns[i], n),
                              batch.columns[i].kind == pb.FLOATS)
                   for i in _directory_positions(schema)]
    except columns.ColumnError as e:
        raise BadMessage(f"{record(batch, e.index)}: inserted value: {e}") from None
    except IndexError:
        raise BadMessage("a directory attribute's dictionary reference beyond its "
                         "column's values") from None
    _placed(directory, schema, batch.cluster_ids, dvalues, "", batch)


def _as_stored(a: Attribute, values: Iterable[Value], floats: bool = False) -> list[Value]:
    """Values as the attribute's column stores them, by which they are placed: an integer
    of a float attribute as its float (`LoadBatch.values`)."""
    if a.type != "float" or floats:
        return list(values)
    return [float(v) if type(v) is int else v for v in values]


def _directory_positions(schema: FileSchema) -> list[int]:
    """Where a record holds its directory values (FILE, the first, it holds nowhere)."""
    return [schema.index[a] for a in schema.directory_attributes[1:]]


def _placed(directory: Directory, schema: FileSchema, cluster_ids: Sequence[int],
            dvalues: list[list[Value]], what: str, batch: pb.LoadColumns | None = None
            ) -> None:
    """Each inserted record is in the cluster its directory values describe, or it would
    be stored where no search by those values finds it. `dvalues`: one list per directory
    attribute. Checked per cluster and attribute over the records' smallest and largest
    value or their one value, since a load batch holds tens of thousands of records."""
    file = schema.name
    names = schema.directory_attributes[1:]
    cids = list(cluster_ids)
    for cid, group in groupby(sorted(range(len(cids)), key=cids.__getitem__),
                              key=cids.__getitem__):
        idx = list(group)
        dids = directory.clusters[cid][1]     # the file's (checked before), FILE's first
        for j, (a, vals) in enumerate(zip(names, dvalues, strict=True)):
            index = directory.at[(file, a)]
            got = list(map(vals.__getitem__, idx))
            if _all_of(index, directory.descriptors[dids[j + 1]], got):
                continue
            i = idx[next(k for k, v in enumerate(got) if index.find(v) != dids[j + 1])]
            who = record(batch, i) if batch is not None else what.format(i + 1)
            shown = ", ".join(f"{a} {_value(vs[i])}"
                              for a, vs in zip(names, dvalues, strict=True))
            raise BadMessage(f"{who} is not of cluster {cid}: its {shown} describe "
                             "another cluster")


def _all_of(index: AttrIndex, d: Descriptor, values: list[Value]) -> bool:
    """Does every value fall in descriptor `d` (`AttrIndex.find`)? From the extremes for
    a range (every value between two of a range, below the next range's low, is of it)
    and from the one value for an equality; value by value otherwise (the no-descriptor
    class, nulls, and extremes that do not settle it, as when ranges a directory update
    added overlap or share a low)."""
    try:
        if d.kind == "A":
            i = bisect.bisect_left(index.lows, d.low)
            low, high = min(values), max(values)    # type: ignore[type-var]
            if (i < len(index.lows) and index.range_ids[i] == d.id
                    and index.lows[i] <= low and high <= index.highs[i]
                    and (i + 1 == len(index.lows) or high < index.lows[i + 1])):
                return True
        if d.kind != "N" and len(set(values)) == 1:
            return index.find(values[0]) == d.id
    except TypeError:       # a null among numbers or strings
        pass
    return all(index.find(v) == d.id for v in values)


def _value(v: Value) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:40] + "…"


def record(batch: pb.LoadColumns, i: int) -> str:
    """Record i of a batch, by its number in the load when the batch is a run of it, or
    by its place in this backend's share of a batch split over the backends."""
    if batch.first:
        return f"record {batch.first + i}"
    return f"record {i + 1} of this backend's share of its batch"


def directory_update(directory: Directory, update: pb.DirectoryUpdate
                     ) -> dict[int, Descriptor]:
    """New files, descriptors and clusters, before this backend applies them; the
    descriptors as the check read them, by id (for `Directory.apply`)."""
    if not changes(update):
        return {}   # most units: nothing new
    checked = EntryCheck(directory)
    try:
        checked.check(update)
    except EntryError as e:
        raise BadMessage(str(e)) from None
    return checked.descriptors


def peer_ids(directory: Directory, tu: pb.TrafficUnit, sender: int, n: int,
             found: DescriptorResults) -> None:
    """A peer's share of a unit's descriptor search, as cluster search will use it:
    exactly the predicates i with i mod n = `sender`, each unrestricted only where its
    attribute addresses nothing, each id a descriptor of its predicate's attribute. Ids
    that pass are still the peer's word (checking them would be searching again), but
    none of them can take a predicate or a descriptor out of the plan."""
    left = set(found)
    for i, conj, p in traffic.predicates(tu.requests):
        if i % n != sender:
            continue
        if i not in left:
            raise BadMessage(f"no ids for predicate {i}, one of its share")
        left.discard(i)
        ids = found[i]
        addressed = any((f, p.attr) in directory.at for f in conj.files)
        if (ids is None) == addressed:
            raise BadMessage(f"predicate {i} on {_short(p.attr)} sent " + (
                "unrestricted, but the attribute is a directory attribute" if addressed
                else "with ids, but the attribute has no descriptors"))
        for did in ids or ():
            d = directory.descriptors.get(did)
            if d is None or d.attr != p.attr or d.file not in conj.files:
                raise BadMessage(f"predicate {i} on {_short(p.attr)}: {did} is not one of "
                                 "its attribute's descriptors")
    if left:
        raise BadMessage(f"predicate {min(left)} is not its share (i mod {n} = {sender})")
