"""The shell's `\\d` and `\\d FILE` (psql's describe commands) from the controller's
Status: the stored files, and one file's attributes, types, directory attributes
and descriptors (SPEC §2: the AT and DDIT rows of the file)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from cli.tables import console
from mbds.proto import mbds_pb2 as pb
from mbds.values import from_pb

# Descriptors shown per attribute; `\d FILE` says how many more there are.
SHOWN = 20
KINDS = {"A": "A (ranges)", "B": "B (values)", "C": "C (each value)", "": "-"}


def _row(t: Table, *cells: str) -> None:
    """Names and values as plain text: a `[` in them is no markup."""
    t.add_row(*(Text(c) for c in cells))


def list_files(s: pb.StatusReply) -> None:
    if not s.file_defs:
        console.print("no files: define some with `mbds define FILE.yaml`")
        return
    t = Table("file", "attributes", "directory attributes", "indexed", title="files")
    for f in s.file_defs:
        directory = [f"{a.name} {a.directory}" for a in f.attributes if a.directory]
        _row(t, f.name, str(len(f.attributes)), ", ".join(directory) or "-",
                  ", ".join(a.name for a in f.attributes if a.indexed) or "-")
    console.print(t)


def _shown(d: pb.Descriptor, attr_kind: str) -> str:
    if d.kind == "A":
        return f"{from_pb(d.low)} .. {from_pb(d.high)}"
    if d.kind == "N":        # the records no other descriptor of the attribute takes
        return "no value" if attr_kind == "C" else "any other value, or no value"
    v = from_pb(d.value)
    return f"= {v!r}" if isinstance(v, str) else f"= {v}"


def _order(d: pb.Descriptor) -> tuple[int, str, Any]:
    """Ranges by their low end, values by value, the no-descriptor class last."""
    v = from_pb(d.low if d.kind == "A" else d.value)
    return (d.kind == "N", type(v).__name__, v if v is not None else 0)


def describe_file(s: pb.StatusReply, name: str) -> None:
    [f] = [f for f in s.file_defs if f.name == name.upper()]
    t = Table("attribute", "type", "directory", "indexed", title=Text(f"file {f.name}"))
    _row(t, "FILE", "string", KINDS["B"], "-")
    for a in f.attributes:
        _row(t, a.name, a.type, KINDS.get(a.directory, a.directory),
                  "yes" if a.indexed else "-")
    console.print(t)
    by_attr: dict[str, list[pb.Descriptor]] = {}
    for d in s.descriptors:
        by_attr.setdefault(d.attr, []).append(d)
    if not by_attr:
        console.print("no descriptors yet: they are made as records are inserted")
        return
    t = Table("attribute", "kind", "descriptor", "id", title=Text(f"descriptors of {f.name}"))
    kinds = {"FILE": "B"} | {a.name: a.directory for a in f.attributes if a.directory}
    for attr, attr_kind in kinds.items():
        found = sorted(by_attr.get(attr, []), key=_order)
        for d in found[:SHOWN]:
            _row(t, attr, d.kind, _shown(d, attr_kind), str(d.id))
        more = s.descriptor_counts.get(attr, 0) - min(len(found), SHOWN)
        if more > 0:
            _row(t, attr, "", f"… {more} more", "")
    console.print(t)
