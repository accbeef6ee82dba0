"""What `Status` tells of the stored files, for `mbds shell`'s \\d: every file's
definition and, for one named file, its descriptors (the DDIT rows of its directory
attributes), bounded, since a type-C attribute has one descriptor per distinct value."""

from __future__ import annotations

from mbds.directory import Directory, file_schema_to_pb
from mbds.errors import SemanticError, shorten
from mbds.proto import mbds_pb2 as pb

# Descriptors sent per attribute; the reply counts all of them.
DESCRIPTORS_SHOWN = 200


def describe(out: pb.StatusReply, directory: Directory, file: str) -> None:
    out.file_defs.extend(file_schema_to_pb(f) for _, f in sorted(directory.files.items()))
    if not file:
        return
    name = file.upper()          # file names are case-insensitive, stored upper-case
    if name not in directory.files:
        raise SemanticError(f"unknown file {shorten(name)}")
    counts: dict[str, int] = {}
    for did in sorted(directory.descriptors):
        d = directory.descriptors[did]
        if d.file == name:
            counts[d.attr] = counts.get(d.attr, 0) + 1
            if counts[d.attr] <= DESCRIPTORS_SHOWN:
                out.descriptors.append(d.to_pb())
    out.descriptor_counts.update(counts)
