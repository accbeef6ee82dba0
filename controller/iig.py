"""IIG — insert information generation (docs/spec.md §4): the only place ids are allocated.

For each new record IIG finds its cluster (allocating new type-C descriptor
ids and cluster ids centrally, so every backend's directory stays
identical) and chooses the backend that stores it: the one holding the
fewest of that cluster's records, so each cluster is spread evenly (±1) and
every request touching it gets all backends working. A bulk load's batch is
placed by the same rule, worked out per cluster (iig_batch.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controller import iig_batch
from controller.load import LoadBatch, PreparedLoad
from controller.reqp import MAX_TEXT
from mbds import metrics
from mbds.descriptors import Descriptor
from mbds.directory import Directory, file_schema_to_pb
from mbds.errors import DefinitionError, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.schema import FileSchema
from mbds.traffic import predicate_count
from mbds.values import Value, to_pb

if TYPE_CHECKING:
    from controller.reqp import Prepared


@dataclass
class Defined:
    """What a definition did: the directory update to broadcast, and per file its fate."""
    update: pb.DirectoryUpdate
    # The update's descriptors as made here, by id (`Directory.apply` reads them from
    # these rather than from the messages again).
    made: dict[int, Descriptor] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    reindexed: list[str] = field(default_factory=list)


class Iig:
    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.next_descriptor = directory.max_descriptor_id + 1
        self.next_cluster = directory.max_cluster_id + 1
        # cluster id -> backend name -> records there (placement state). Keyed by name,
        # not position, so a backend joining the set changes nothing already counted.
        self.counts: dict[int, dict[str, int]] = {}
        self.totals: dict[str, int] = {}           # backend name -> records there

    def count_backend(self, name: str, counts: Iterable[pb.ClusterCount]) -> None:
        """Placement state of a backend that joins: its records per cluster, as it
        reports them."""
        total = 0
        for c in counts:
            self.counts.setdefault(c.cluster_id, {})[name] = c.records
            total += c.records
        self.totals[name] = total

    def resync(self) -> None:
        """Id allocation past every id of the directory (after a backend's was merged)."""
        self.next_descriptor = max(self.next_descriptor, self.directory.max_descriptor_id + 1)
        self.next_cluster = max(self.next_cluster, self.directory.max_cluster_id + 1)

    # ------------------------------------------------------------- define --
    def define(self, schemas: list[FileSchema]) -> Defined:
        """A definition (`definition`) applied to IIG's directory at once."""
        out = self.definition(schemas)
        self.directory.apply(out.update, out.made)
        return out

    def definition(self, schemas: list[FileSchema]) -> Defined:
        """Directory entries for new files, their ids allocated; identical re-definitions
        are no-ops. Nothing is applied: the controller adopts a definition only once
        every backend has stored it (`definitions.py`).

        A stored file keeps its template and directory; only its non-clustered
        indexes may change (the backends build or drop them). A file that may not is
        refused (DefinitionError), and with it the whole definition: the ids allocated
        for the files before it are left unused.
        """
        out = Defined(pb.DirectoryUpdate())
        update = out.update
        for s in schemas:
            old = self.directory.files.get(s.name)
            if old is not None:
                if old.template() != s.template() or not self._same_descriptors(s):
                    raise DefinitionError(
                        f"file {s.name} is already defined differently; "
                        "a stored file's template and directory cannot be changed "
                        "(its indexes can); to start over, stop the cluster and start "
                        "it on an empty --data-dir (compose: `down -v` first)")
                if old.indexes == s.indexes:
                    out.unchanged.append(s.name)
                else:
                    s.revision = old.revision + 1
                    update.files.append(file_schema_to_pb(s))
                    out.reindexed.append(s.name)
                continue
            update.files.append(file_schema_to_pb(s))
            update.descriptors.append(self._new_descriptor(
                s.name, "FILE", "B", value=s.name, made=out.made))
            for a in s.attributes:
                if not a.directory:
                    continue
                update.descriptors.append(self._new_descriptor(s.name, a.name, "N",
                                                                made=out.made))
                for spec in s.descriptor_specs.get(a.name, []):
                    update.descriptors.append(self._new_descriptor(
                        s.name, a.name, spec.kind, low=spec.low, high=spec.high,
                        value=spec.value, made=out.made))
            out.created.append(s.name)
        return out

    def _same_descriptors(self, s: FileSchema) -> bool:
        for attr, specs in s.descriptor_specs.items():
            have = sorted((d.kind, d.low, d.high, d.value)
                          for d in self.directory.descriptors.values()
                          if d.file == s.name and d.attr == attr and d.kind in "AB")
            want = sorted((d.kind, d.low, d.high, d.value) for d in specs)
            if have != want:
                return False
        return True

    def _new_descriptor(self, file: str, attr: str, kind: str, *, low: Value = None,
                        high: Value = None, value: Value = None,
                        made: dict[int, Descriptor] | None = None) -> pb.Descriptor:
        d = Descriptor(self.next_descriptor, file, attr, kind, low, high, value)
        self.next_descriptor += 1
        if made is not None:
            made[d.id] = d
        return d.to_pb()

    # -------------------------------------------------------------- place --
    def cluster_of(self, file: str, directory_values: list[Value],
                   update: pb.DirectoryUpdate) -> int:
        """The cluster of a record with these directory values, allocating what is new.

        New descriptors and clusters are applied to the controller's directory at once
        and appended to `update`, which travels to the backends.
        """
        d = self.directory
        key = d.descriptor_key(file, directory_values)
        attrs = d.files[file].directory_attributes
        ids: list[int] = []
        for i, did in enumerate(key):
            if did is None:      # a type-C value seen for the first time
                did = self.new_type_c(file, attrs[i], directory_values[i], update)
            ids.append(did)
        return self.cluster_of_ids(file, tuple(ids), update)

    def new_type_c(self, file: str, attr: str, value: Value, update: pb.DirectoryUpdate) -> int:
        """A descriptor for a type-C value seen for the first time."""
        new = self._new_descriptor(file, attr, "C", value=value)
        self.directory.apply(pb.DirectoryUpdate(descriptors=[new]))
        update.descriptors.append(new)
        return int(new.id)

    def cluster_of_ids(self, file: str, dids: tuple[int, ...],
                       update: pb.DirectoryUpdate) -> int:
        """The cluster of these descriptor ids, allocated if new."""
        cid = self.directory.cluster_ids.get((file, dids))
        if cid is None:
            cid = self.next_cluster
            self.next_cluster += 1
            cluster = pb.Cluster(id=cid, file=file, descriptor_ids=dids)
            self.directory.apply(pb.DirectoryUpdate(clusters=[cluster]))
            update.clusters.append(cluster)
        return cid

    def place_unit(self, prepared: list[Prepared], transaction: bool, backends: list[str],
                   update: pb.DirectoryUpdate, split_search_from: int
                   ) -> tuple[dict[int, pb.TrafficUnit], list[int]]:
        """A traffic unit with inserts, one copy per backend (by index into `backends`):
        each with the records placed there and the directory entries `update` has then.
        Returns the copies and the number of clusters each request touched."""
        units = {b: pb.TrafficUnit(transaction=transaction) for b in range(len(backends))}
        for p in prepared:
            for tu in units.values():
                tu.requests.append(p.request)
        insert_clusters = self.place_inserts(prepared, backends, update, units)
        m = predicate_count(p.request for p in prepared)
        for tu in units.values():
            tu.directory.CopyFrom(update)
            tu.predicate_count = m
            tu.split_search = m >= split_search_from
        return units, insert_clusters

    def place_inserts(self, prepared: list[Prepared], backends: list[str],
                      update: pb.DirectoryUpdate, units: dict[int, pb.TrafficUnit]) -> list[int]:
        """Put every inserted record into the traffic unit of the backend that stores it
        (`units` by index into `backends`), with its cluster; new entries go to `update`.
        Returns the number of clusters each request touched."""
        clusters_per_request = []
        for i, p in enumerate(prepared):
            if isinstance(p, PreparedLoad) and p.batch is not None:
                with metrics.handler("IIG", "place_batch"):
                    clusters_per_request.append(
                        self.place_batch(i, p.batch, backends, update, units))
                continue
            clusters: set[int] = set()
            for ins in p.inserts:
                schema = self.directory.files[ins.file]
                dvals = [ins.file] + [ins.values[schema.index[a]]
                                      for a in schema.directory_attributes[1:]]
                with metrics.handler("IIG", "place"):
                    cid = self.cluster_of(ins.file, dvals, update)
                    b = self.choose_backend(cid, backends)
                clusters.add(cid)
                rec = units[b].requests[i].records.add(cluster_id=cid)
                for v in ins.values:
                    to_pb(v, rec.values.add())
                if ins.body is not None:
                    rec.body = ins.body
            for b in units:
                units[b].requests[i].record_count = len(p.inserts)
            clusters_per_request.append(len(clusters))
        return clusters_per_request

    def unplace(self, backends: list[str], units: dict[int, pb.TrafficUnit]) -> None:
        """Take back the placement of a traffic unit that failed: under the commit
        protocol no backend stored its records, so the next records of their clusters go
        where these were meant to. (The counts only steer placement; a one-phase unit
        whose commit crossed its abort is taken back too, and the controller counts
        again at its next start.)"""
        for b, tu in units.items():
            name = backends[b]
            for req in tu.requests:
                placed = Counter(rec.cluster_id for rec in req.records)
                placed.update(pb.LoadColumns.FromString(req.load_columns).cluster_ids)
                for cid, n in placed.items():
                    self.counts[cid][name] -= n
                    self.totals[name] -= n

    def place_moved(self, file: str, directory_values: list[Value]
                    ) -> tuple[int, pb.DirectoryUpdate]:
        """The cluster of a record an UPDATE moved, and what was allocated for it (which
        every backend must learn before the mover writes into it)."""
        schema = self.directory.files.get(file)
        if schema is None:
            raise DefinitionError(f"unknown file {shorten(file)}")
        names = schema.directory_attributes
        if len(directory_values) != len(names) or directory_values[0] != file:
            raise DefinitionError(f"a record of {file} has {len(names)} directory values, "
                                  f"{', '.join(names)}, the first the file's name")
        for name, value in zip(names[1:], directory_values[1:], strict=True):
            a = schema.by_name[name]
            if value is not None and not a.accepts(value):
                raise DefinitionError(f"{file}.{name} is {a.type}, got "
                                      f"{type(value).__name__}")
            if isinstance(value, float) and not math.isfinite(value):
                raise DefinitionError(f"{file}.{name}: {value!r} is not a finite number")
            if isinstance(value, str) and len(value) > MAX_TEXT:
                # No request could have given it (REQP's MAX_TEXT); unbounded, the entries
                # made for it would make every next traffic unit too large to send.
                raise DefinitionError(f"{file}.{name}: a value of {len(value):,} characters,"
                                      f" more than a request may hold ({MAX_TEXT:,})")
        update = pb.DirectoryUpdate()
        return self.cluster_of(file, directory_values, update), update

    def cluster_definition(self, cid: int) -> pb.DirectoryUpdate:
        """A cluster with its descriptors, for a backend that must learn of it."""
        file, dids = self.directory.clusters[cid]
        return pb.DirectoryUpdate(
            descriptors=[self.directory.descriptors[i].to_pb() for i in dids],
            clusters=[pb.Cluster(id=cid, file=file, descriptor_ids=dids)])

    def choose_backend(self, cid: int, backends: list[str]) -> int:
        """The backend (index into `backends`) with the fewest records of this cluster;
        on ties the one with the fewest records overall, so many small clusters (say,
        one per type-C value) still spread over every backend."""
        counts = self.counts.setdefault(cid, {})
        best = min(range(len(backends)), key=lambda i: (
            counts.get(backends[i], 0), self.totals.get(backends[i], 0), i))
        name = backends[best]
        counts[name] = counts.get(name, 0) + 1
        self.totals[name] = self.totals.get(name, 0) + 1
        return best

    # ------------------------------------------------------- bulk load --
    def place_batch(self, i: int, batch: LoadBatch, backends: list[str],
                    update: pb.DirectoryUpdate, units: dict[int, pb.TrafficUnit]) -> int:
        """Place a columnar load batch into request `i` of each unit, per cluster rather
        than per record (`iig_batch.place_batch`). Returns the number of clusters the
        batch touched."""
        return iig_batch.place_batch(self, i, batch, backends, update, units)
