"""A directory cut into parts of a few MiB, both ways between the controller and a backend.

A directory can be far larger than a gRPC message, so it travels as `DirectoryUpdate`
parts: a backend's to the controller (`DirectoryParts`, the `Directory` call), the
controller's to a backend (`directory_parts`, `ApplyDirectory`). Both sides measure an
entry and fill a part by the same rule, so a part sent either way fits the same bound.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from mbds.directory import Directory, file_schema_to_pb
from mbds.errors import SemanticError
from mbds.proto import mbds_pb2 as pb
from mbds.service import MESSAGE_BUDGET, too_large

# The bytes of one part: parts of a few MiB keep the event loop turning between them, on
# both sides. An entry larger than a part goes alone in its own.
DIRECTORY_PART = MESSAGE_BUDGET // 16

# What a cluster adds to a part a backend cuts: its record count there (`ClusterCount`,
# at most 24 bytes), which travels in the same reply.
_CLUSTER_COUNT = 24

Entry = pb.FileDef | pb.Descriptor | pb.Cluster


class TooLarge(SemanticError):
    """A directory entry no message can carry (a client's bound exceeded: its limit named)."""


def entry_size(entry: Entry) -> int:
    """An entry's bytes in a part: its own, and its field's key and length. One that no
    message can carry is refused (`TooLarge`), by name."""
    n = entry.ByteSize()
    if n > MESSAGE_BUDGET:
        what = f"file {entry.name}" if isinstance(entry, pb.FileDef) else \
            f"{type(entry).__name__.lower()} {entry.id}"
        raise TooLarge(too_large(f"directory entry {what}", n))
    return n + 11


class _Part:
    """A part being filled, and its bytes so far."""

    __slots__ = ("size", "update")

    def __init__(self) -> None:
        self.update = pb.DirectoryUpdate()
        self.size = 0

    def full(self, n: int) -> bool:
        """Whether an entry of `n` bytes must start the next part instead: it would take
        this one past `DIRECTORY_PART`, and this one holds an entry already."""
        return self.size > 0 and self.size + n > DIRECTORY_PART

    def add(self, entry: Entry, n: int) -> None:
        if isinstance(entry, pb.FileDef):
            self.update.files.append(entry)
        elif isinstance(entry, pb.Descriptor):
            self.update.descriptors.append(entry)
        else:
            self.update.clusters.append(entry)
        self.size += n


def update_entries(update: pb.DirectoryUpdate) -> Iterator[Entry]:
    yield from update.files
    yield from update.descriptors
    yield from update.clusters


def directory_entries(directory: Directory) -> Iterator[Entry]:
    """The whole directory, entry by entry: files by name, descriptors by id, clusters by
    id (so that an entry refers only to those before it). The keys are taken when the
    first entry is asked for, each entry when it is reached (between parts, units go on):
    one gone by then is left out, one made since is not sent (the next traffic unit
    carries it, `Coordinator.unsent`), so no cluster goes without its descriptors."""
    names, dids, cids = sorted(directory.files), sorted(directory.descriptors), \
        sorted(directory.clusters)
    for name in names:
        f = directory.files.get(name)
        if f is not None:
            yield file_schema_to_pb(f)
    for did in dids:
        d = directory.descriptors.get(did)
        if d is not None:
            yield d.to_pb()
    for cid in cids:
        c = directory.clusters.get(cid)
        if c is not None:
            yield pb.Cluster(id=cid, file=c[0], descriptor_ids=c[1])


def directory_parts(entries: Iterable[Entry]) -> Iterator[pb.DirectoryUpdate]:
    """`entries` in order, in updates of at most `DIRECTORY_PART` bytes each (an entry
    larger than that alone in one); none when there are no entries. An entry no message
    can carry is refused, naming the limit (`TooLarge`, a `SemanticError`)."""
    part = _Part()
    for entry in entries:
        n = entry_size(entry)
        if part.full(n):
            yield part.update
            part = _Part()
        part.add(entry, n)
    if part.size:
        yield part.update


class DirectoryParts:
    """A backend's directory cut into parts in the order `DirectoryPosition` names: files
    by name, descriptors by id, clusters by id. Each part is cut from the directory as it
    is when asked for; the digest it travels with tells the reader whether the directory
    changed between parts. The sorted keys are kept while the directory's generation
    lasts, so a part costs its own entries, not a sort of the whole directory."""

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self._keys: tuple[int, list[str], list[int], list[int]] | None = None

    def _sorted(self) -> tuple[list[str], list[int], list[int]]:
        d = self.directory
        if self._keys is None or self._keys[0] != d.generation:
            self._keys = (d.generation, sorted(d.files), sorted(d.descriptors),
                          sorted(d.clusters))
        return self._keys[1:]

    def cut(self, start: pb.DirectoryPosition
            ) -> tuple[pb.DirectoryUpdate, pb.DirectoryPosition | None]:
        """The part from `start`, and where the next one starts (None: this is the last)."""
        d = self.directory
        files, descriptors, clusters = self._sorted()
        part = _Part()
        if start.section == 0:
            for i in range(bisect.bisect_right(files, start.after_file), len(files)):
                f = file_schema_to_pb(d.files[files[i]])
                n = entry_size(f)
                if part.full(n):     # the next part starts at file i (after none: "")
                    return part.update, pb.DirectoryPosition(
                        section=0, after_file=files[i - 1] if i else "")
                part.add(f, n)
        for section, ids in ((1, descriptors), (2, clusters)):
            if start.section > section:
                continue
            after = start.after_id if start.section == section else 0
            for i in range(bisect.bisect_right(ids, after), len(ids)):
                entry: pb.Descriptor | pb.Cluster
                if section == 1:
                    entry = d.descriptors[ids[i]].to_pb()
                    n = entry_size(entry)
                else:
                    file, dids = d.clusters[ids[i]]
                    entry = pb.Cluster(id=ids[i], file=file, descriptor_ids=dids)
                    n = entry_size(entry) + _CLUSTER_COUNT
                if part.full(n):     # the next part starts at entry i (after none: 0)
                    return part.update, pb.DirectoryPosition(
                        section=section, after_id=ids[i - 1] if i else 0)
                part.add(entry, n)
        self._keys = None              # read to the end: nothing to keep for the next part
        return part.update, None
