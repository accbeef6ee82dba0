"""What a directory update may hold (AT, DDIT and CDT entries, docs/spec.md §2), checked before
`Directory.apply`, which trusts what it is given. Only IIG makes entries; a backend checks
those the controller sends it, and the controller those it reads from the backends.

Files are named as a definition names them; a descriptor belongs to a directory
attribute, of its type (or its "none" class N) with finite values of the attribute's
type, FILE's being the file's own name; a cluster is one descriptor of each directory
attribute, in order (as IIG keys it), and not another cluster's. An entry the directory
already holds must be the same.
"""

from __future__ import annotations

import math

from mbds.descriptors import Descriptor
from mbds.directory import Directory, file_schema_from_pb
from mbds.errors import shorten
from mbds.proto import mbds_pb2 as pb
from mbds.schema import IDENT, MAX_NAME, RESERVED, TYPES, Attribute, FileSchema
from mbds.values import Value, describe


class EntryError(ValueError):
    """A directory entry that no definition or IIG could have made, or that differs from
    the one held."""


def _name(name: str, what: str) -> None:
    """A file or attribute name as a definition stores it."""
    if not IDENT.match(name) or len(name) > MAX_NAME or name != name.upper() or \
            name in RESERVED:
        raise EntryError(f"{what} {shorten(repr(name))} is not a name a definition makes")


def _value(a: Attribute, value: Value, what: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise EntryError(f"{what}: {value!r} is not a finite number")
    if value is not None and not a.accepts(value):
        raise EntryError(f"{what}: {a.name} is {a.type}, got {describe(value)}")


class EntryCheck:
    """Directory updates checked against a directory and against the updates checked
    before by the same check (the backends' directories met at the controller's start,
    or the entries of one update), so that a bad one is refused before any is applied."""

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.files: dict[str, FileSchema] = dict(directory.files)
        self.descriptors: dict[int, Descriptor] = {}
        self.clusters: dict[int, tuple[str, tuple[int, ...]]] = {}
        self.cluster_ids: dict[tuple[str, tuple[int, ...]], int] = {}

    def check(self, update: pb.DirectoryUpdate) -> None:
        """Raise EntryError naming the first entry of `update` that is wrong."""
        for f in update.files:
            self._file(f)
        for d in update.descriptors:
            self._descriptor(d)
        for c in update.clusters:
            self._cluster(c)

    def _file(self, f: pb.FileDef) -> None:
        _name(f.name, "file")
        for a in f.attributes:
            _name(a.name, f"file {f.name}: attribute")
            if a.type not in TYPES or a.directory not in ("", "A", "B", "C"):
                raise EntryError(f"file {f.name}: attribute {a.name} has type "
                                 f"{shorten(repr(a.type))}, directory type "
                                 f"{shorten(repr(a.directory))}")
        schema = file_schema_from_pb(f)
        if len(schema.by_name) != len(f.attributes):
            raise EntryError(f"file {f.name}: attribute names repeat")
        held = self.files.get(f.name)
        if held is not None and held.template() != schema.template():
            raise EntryError(f"file {f.name} differs from the one the directory holds")
        self.files.setdefault(f.name, schema)

    def _descriptor(self, d: pb.Descriptor) -> None:
        what = f"descriptor {d.id}"
        schema = self.files.get(d.file)
        if schema is None:
            raise EntryError(f"{what}: unknown file {shorten(repr(d.file))}")
        a = schema.attribute(d.attr)
        if a is None or not a.directory:
            raise EntryError(f"{what}: file {d.file} has no directory attribute "
                             f"{shorten(repr(d.attr))}")
        kinds = ("B",) if d.attr == "FILE" else (a.directory, "N")
        if d.kind not in kinds:
            raise EntryError(f"{what}: kind {shorten(repr(d.kind))} on {d.file}.{d.attr}, "
                             f"which takes {' or '.join(kinds)}")
        new = Descriptor.from_pb(d)
        low, high, value = new.low, new.high, new.value
        for v in (low, high, value):
            _value(a, v, what)
        if d.kind == "A":      # a range
            fits = low is not None and high is not None and value is None and \
                low <= high  # type: ignore[operator]
        elif d.kind == "N":    # the attribute's values outside every other descriptor
            fits = low is None and high is None and value is None
        else:                  # one value (FILE's: the file's name)
            fits = low is None and high is None and value is not None and (
                d.attr != "FILE" or value == d.file)
        if not fits:
            raise EntryError(f"{what}: not a type-{d.kind} descriptor of "
                             f"{d.file}.{d.attr} (its low, high and value)")
        held = self.directory.descriptors.get(d.id, self.descriptors.get(d.id))
        if held is not None and held != new:
            raise EntryError(f"{what} differs from the one the directory holds")
        self.descriptors[d.id] = new

    def _cluster(self, c: pb.Cluster) -> None:
        what = f"cluster {c.id}"
        schema = self.files.get(c.file)
        if schema is None:
            raise EntryError(f"{what}: unknown file {shorten(repr(c.file))}")
        attrs = schema.directory_attributes
        if len(c.descriptor_ids) != len(attrs):
            raise EntryError(f"{what}: {len(c.descriptor_ids)} descriptors for the "
                             f"{len(attrs)} directory attributes of {c.file}")
        for did, attr in zip(c.descriptor_ids, attrs, strict=True):
            d = self.directory.descriptors.get(did, self.descriptors.get(did))
            if d is None or (d.file, d.attr) != (c.file, attr):
                raise EntryError(f"{what}: {did} is not a descriptor of {c.file}.{attr}")
        key = (c.file, tuple(c.descriptor_ids))
        held = self.directory.clusters.get(c.id, self.clusters.get(c.id))
        if held is not None and held != key:
            raise EntryError(f"{what} differs from the one the directory holds")
        other = self.directory.cluster_ids.get(key, self.cluster_ids.get(key, c.id))
        if other != c.id:
            raise EntryError(f"{what} has the descriptors of cluster {other}")
        self.clusters[c.id] = key
        self.cluster_ids[key] = c.id
