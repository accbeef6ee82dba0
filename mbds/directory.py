"""The directory: AT, DDIT and CDT (docs/spec.md §2), identical on the controller and every backend.

- AT   (attribute table): `(file, attribute) -> AttrIndex`, the attribute's descriptors;
- DDIT (descriptor-to-descriptor-id table): `descriptors`, id -> Descriptor;
- CDT  (cluster-definition table): `clusters`, cluster id -> the descriptor-id set.
  The addresses of a cluster's records are per backend (the backend's record
  table is indexed by cluster id), so they are not kept here.

Ids are only ever allocated by IIG on the controller and shipped as a
`DirectoryUpdate`; `apply` is idempotent so a backend can be sent an update
twice (for example after a restart) without harm.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from mbds.descriptors import AttrIndex, Descriptor
from mbds.proto import mbds_pb2 as pb
from mbds.schema import Attribute, FileSchema
from mbds.values import Value


def changes(update: pb.DirectoryUpdate) -> bool:
    """Whether an update has anything in it (most traffic units carry an empty one)."""
    return bool(update.files or update.descriptors or update.clusters)


# The digest is the sum of one hash per entry (file, descriptor, cluster), modulo 2**256:
# an entry added adds its hash, one taken back subtracts it, whatever the order, so two
# directories holding the same entries have the same sum however they came to hold them.
_SUM = 1 << 256
# Entries added or taken back that wait for `digest` to hash them; past this many they are
# hashed at once, so they neither pile up in memory nor make one `digest` call long.
_PENDING = 4096


def _file_entry(f: FileSchema) -> tuple[object, ...]:
    return ("F", f.name, f.revision, tuple((a.name, a.type, a.directory, a.indexed)
                                           for a in f.attributes))


def _entry_hash(entry: object) -> int:
    """One entry's hash. `repr` of a tuple of names, ints, floats, strings and None is
    unambiguous: a float keeps its type and every digit, a string is quoted and escaped."""
    return int.from_bytes(hashlib.sha256(repr(entry).encode()).digest(), "big")


def _entry(x: Descriptor | tuple[object, ...]) -> tuple[object, ...]:
    if isinstance(x, Descriptor):
        return ("D", x.id, x.file, x.attr, x.kind, x.low, x.high, x.value)
    return x


def file_schema_from_pb(f: pb.FileDef) -> FileSchema:
    return FileSchema(f.name, [Attribute(a.name, a.type, a.directory, a.indexed)
                               for a in f.attributes], revision=f.revision)


def file_schema_to_pb(f: FileSchema) -> pb.FileDef:
    return pb.FileDef(name=f.name, revision=f.revision, attributes=[
        pb.AttributeDef(name=a.name, type=a.type, directory=a.directory, indexed=a.indexed)
        for a in f.attributes])


class Directory:
    """AT + DDIT + CDT in memory. Not thread-safe: mutate on one event loop only."""

    def __init__(self) -> None:
        self.files: dict[str, FileSchema] = {}
        self.descriptors: dict[int, Descriptor] = {}
        self.at: dict[tuple[str, str], AttrIndex] = {}
        self.clusters: dict[int, tuple[str, tuple[int, ...]]] = {}
        self.cluster_ids: dict[tuple[str, tuple[int, ...]], int] = {}
        self.file_clusters: dict[str, set[int]] = {}
        self.by_did: dict[int, set[int]] = {}
        # Counts the changes: a plan made at one generation holds while it lasts.
        self.generation = 0
        # The digest's sum of entry hashes, and the entries added and taken back since it
        # was last brought up to date: `digest` hashes only those, not the whole directory.
        self._sum = 0
        self._added: list[Descriptor | tuple[object, ...]] = []
        self._removed: list[Descriptor | tuple[object, ...]] = []

    # ------------------------------------------------------------ updates --
    def apply(self, update: pb.DirectoryUpdate,
              made: Mapping[int, Descriptor] | None = None) -> pb.DirectoryUpdate:
        """Apply an update; return only the parts that were new here (to persist).
        `made`: the update's descriptors already read from it (by id), so that a large
        definition's are not read twice."""
        new = pb.DirectoryUpdate()
        for f in update.files:
            old, schema = self.files.get(f.name), file_schema_from_pb(f)
            if old is not None:
                # A stored file's template never changes (IIG refuses it); its
                # non-clustered indexes may: the newer revision wins, and the change is
                # persisted like a new file.
                if schema.revision > old.revision and old.template() == schema.template():
                    self.files[f.name] = schema
                    self._drop(_file_entry(old))
                    self._add(_file_entry(schema))
                    new.files.append(f)
            else:
                self.files[f.name] = schema
                self._add(_file_entry(schema))
                self.file_clusters.setdefault(f.name, set())
                for attr in self.files[f.name].directory_attributes:
                    kind = "B" if attr == "FILE" else self.files[f.name].by_name[attr].directory
                    self.at[(f.name, attr)] = AttrIndex(kind)
                new.files.append(f)
        for d in update.descriptors:
            if d.id not in self.descriptors:
                desc = (made and made.get(d.id)) or Descriptor.from_pb(d)
                self.descriptors[d.id] = desc
                self.at[(desc.file, desc.attr)].add(desc)
                self._add(desc)
                new.descriptors.append(d)
        for c in update.clusters:
            if c.id not in self.clusters:
                dids = tuple(c.descriptor_ids)
                self.clusters[c.id] = (c.file, dids)
                self.cluster_ids[(c.file, dids)] = c.id
                self._add(("C", c.id, c.file, dids))
                self.file_clusters[c.file].add(c.id)
                for did in dids:
                    self.by_did.setdefault(did, set()).add(c.id)
                new.clusters.append(c)
        if changes(new):
            self.generation += 1
        return new

    def restore_files(self, before: dict[str, FileSchema | None]) -> None:
        """Take back an update's files (a definition not adopted everywhere): a file that
        was new (None in `before`) goes with its descriptors and clusters; a re-indexed one
        gets its old schema back."""
        self.generation += 1
        for name, old in before.items():
            current = self.files.get(name) if old is not None else self.files.pop(name, None)
            if current is not None:
                self._drop(_file_entry(current))
            if old is not None:
                self.files[name] = old
                self._add(_file_entry(old))
                continue
            for cid in self.file_clusters.pop(name, set()):
                _, dids = self.clusters.pop(cid)
                del self.cluster_ids[(name, dids)]
                self._drop(("C", cid, name, dids))
                for did in dids:
                    self.by_did.get(did, set()).discard(cid)
            for did in [i for i, d in self.descriptors.items() if d.file == name]:
                self._drop(self.descriptors.pop(did))
                self.by_did.pop(did, None)
            for key in [k for k in self.at if k[0] == name]:
                del self.at[key]

    def retract(self, update: pb.DirectoryUpdate) -> None:
        """Take back the type-C descriptors and the clusters of `update`, allocated here
        for a traffic unit refused before it was sent: no backend has seen them, and kept
        they would travel with the next unit (a value too large for any message would
        then fail every unit after it)."""
        self.generation += 1
        for c in update.clusters:
            file, dids = self.clusters.pop(c.id)
            del self.cluster_ids[(file, dids)]
            self._drop(("C", c.id, file, dids))
            self.file_clusters[file].discard(c.id)
            for did in dids:
                self.by_did.get(did, set()).discard(c.id)
        for d in update.descriptors:
            desc = self.descriptors[d.id]
            if desc.kind != "C":
                raise ValueError(f"descriptor {d.id} is of type {desc.kind}: only type-C "
                                 "descriptors are allocated for a traffic unit")
            del self.descriptors[d.id]
            self._drop(desc)
            self.by_did.pop(d.id, None)
            self.at[(desc.file, desc.attr)].eq.pop(desc.value, None)

    def to_update(self) -> pb.DirectoryUpdate:
        """The whole directory as one update (for a backend that missed some)."""
        return pb.DirectoryUpdate(
            files=[file_schema_to_pb(f) for f in self.files.values()],
            descriptors=[self.descriptors[i].to_pb() for i in sorted(self.descriptors)],
            clusters=[pb.Cluster(id=cid, file=f, descriptor_ids=dids)
                      for cid, (f, dids) in sorted(self.clusters.items())])

    def digest(self) -> str:
        """A fingerprint that is equal on two backends exactly when their directories are
        (their files, descriptors and clusters; by 64 bits of SHA-256, as any fingerprint).

        Kept up to date as entries come and go: a call hashes only the entries added or
        taken back since the last one, so asking for it (every Status and Hello) costs
        nothing while the directory does not change, and the size of a change when it
        does, never the size of the directory."""
        self._fold()
        counts = f"{len(self.files)} {len(self.descriptors)} {len(self.clusters)} {self._sum:x}"
        return hashlib.sha256(counts.encode()).hexdigest()[:16]

    def _fold(self) -> None:
        """Bring the digest's sum up to date with the entries added and taken back."""
        if self._added or self._removed:
            total = self._sum
            for x in self._added:
                total += _entry_hash(_entry(x))
            for x in self._removed:
                total -= _entry_hash(_entry(x))
            self._sum = total % _SUM
            self._added, self._removed = [], []

    def _add(self, entry: Descriptor | tuple[object, ...]) -> None:
        self._added.append(entry)
        if len(self._added) + len(self._removed) >= _PENDING:
            self._fold()

    def _drop(self, entry: Descriptor | tuple[object, ...]) -> None:
        self._removed.append(entry)
        if len(self._added) + len(self._removed) >= _PENDING:
            self._fold()

    @property
    def max_descriptor_id(self) -> int:
        return max(self.descriptors, default=0)

    @property
    def max_cluster_id(self) -> int:
        return max(self.clusters, default=0)

    # ------------------------------------------------------------ lookups --
    def descriptor_key(self, file: str, directory_values: list[Value]) -> list[int | None]:
        """Each directory attribute's descriptor for a record (None: new type-C value)."""
        schema = self.files[file]
        return [self.at[(file, attr)].find(v)
                for attr, v in zip(schema.directory_attributes, directory_values, strict=True)]

    def descriptor_search(self, files: list[str], attr: str, op: str,
                          value: Value) -> set[int] | None:
        """Descriptor ids that may satisfy one predicate; None if `attr` addresses nothing."""
        found: set[int] | None = None
        for f in files:
            idx = self.at.get((f, attr))
            if idx is not None:
                found = (found or set()) | idx.search(op, value)
        return found

    def cluster_search(self, file: str, allowed: dict[str, set[int]]) -> set[int]:
        """Clusters of `file` whose descriptor for each restricted attribute is allowed."""
        clusters = self.file_clusters.get(file, set())
        if not allowed:
            return set(clusters)
        positions = {a: i for i, a in enumerate(self.files[file].directory_attributes)}
        # Start from the attribute whose descriptors cover the fewest clusters (FILE's
        # one descriptor covers them all), then filter on the rest.
        order = sorted(allowed.items(), key=lambda kv: sum(len(self.by_did.get(d, ()))
                                                           for d in kv[1]))
        first_attr, first_dids = order[0]
        candidates: set[int] = set()
        for did in first_dids:
            candidates |= self.by_did.get(did, set())
        candidates &= clusters
        rest = [(positions[a], dids) for a, dids in order[1:]]
        if not rest:        # one restricted attribute (e.g. FILE alone): nothing to filter
            return candidates
        return {cid for cid in candidates
                if all(self.clusters[cid][1][pos] in dids for pos, dids in rest)}
