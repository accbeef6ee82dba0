"""What `Status` tells of the stored files, for `mbds shell`'s \\d: every file's
definition and, for one named file, its descriptors (the DDIT rows of its directory
attributes), bounded, since a type-C attribute has one descriptor per distinct value and
a value may be megabytes long: each value shown is cut to its first `VALUE_SHOWN`
characters (the reply names the descriptors cut, with each value's full length), and what is
added here stays within `DESCRIBE_BYTES`."""

from __future__ import annotations

import heapq

from mbds.descriptors import Descriptor
from mbds.directory import Directory, file_schema_to_pb
from mbds.errors import SHOWN, SemanticError, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.values import Value

# Descriptors sent per attribute; the reply counts all of them.
DESCRIPTORS_SHOWN = 200
# Characters of a descriptor's value (or of a range's end) shown, as an error repeats them.
VALUE_SHOWN = SHOWN
# The bytes of file definitions and descriptors one reply carries at most, far under a
# message (MESSAGE_BUDGET): past it, definitions are left out (but the named file's; they
# take at most half when a file is named) and fewer descriptors of each attribute are sent.
DESCRIBE_BYTES = 4 << 20


def describe(out: pb.StatusReply, directory: Directory, file: str) -> None:
    name = file.upper()          # file names are case-insensitive, stored upper-case
    if file and name not in directory.files:
        raise SemanticError(f"unknown file {shorten(name)}")
    # With a file named, its descriptors keep at least half of the room.
    used, room = 0, DESCRIBE_BYTES // 2 if file else DESCRIBE_BYTES
    for n, f in sorted(directory.files.items()):
        d = file_schema_to_pb(f)
        size = d.ByteSize() + 4
        if n != name and used + size > room:
            out.file_defs_left_out += 1
            continue
        out.file_defs.append(d)
        used += size
    if file:
        _descriptors(out, directory, name, DESCRIBE_BYTES - used)


def _descriptors(out: pb.StatusReply, directory: Directory, name: str, room: int) -> None:
    """The file's descriptors: the first `DESCRIPTORS_SHOWN` of each attribute by id, their
    values shortened, taken a round at a time (each attribute's first, then each one's
    second, ...) while they fit in `room` bytes; and every attribute's count."""
    shown: list[list[int]] = []
    for attr in directory.files[name].directory_attributes:
        index = directory.at[(name, attr)]
        ids = [*index.eq.values(), *index.range_ids]
        if index.none_id is not None:
            ids.append(index.none_id)
        out.descriptor_counts[attr] = len(ids)
        shown.append(heapq.nsmallest(DESCRIPTORS_SHOWN, ids))
    for i in range(DESCRIPTORS_SHOWN):
        for ids in shown:
            if i >= len(ids):
                continue
            d, cut = _shortened(directory.descriptors[ids[i]])
            room -= d.ByteSize() + cut.ByteSize() + 24
            if room < 0:
                return
            out.descriptors.append(d)
            if cut.ByteSize():
                out.shortened[d.id].CopyFrom(cut)


def _shortened(d: Descriptor) -> tuple[pb.Descriptor, pb.ShortenedValues]:
    """The descriptor with each string value cut to `VALUE_SHOWN` characters, and the
    full length of each value cut."""
    lengths = pb.ShortenedValues()

    def cut(v: Value, which: str) -> Value:
        if isinstance(v, str) and len(v) > VALUE_SHOWN:
            setattr(lengths, which, len(v))
            return v[:VALUE_SHOWN]
        return v

    return Descriptor(d.id, d.file, d.attr, d.kind, cut(d.low, "low"), cut(d.high, "high"),
                      cut(d.value, "value")).to_pb(), lengths
