"""The shell's `\\d` and `\\d FILE` (psql's describe commands) from the controller's
Status: the stored files, and one file's attributes, types, directory attributes
and descriptors (docs/spec.md §2: the AT and DDIT rows of the file)."""

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
    if s.file_defs_left_out:
        _row(t, f"… {s.file_defs_left_out} more", "", "", "")
    console.print(t)


def _shown(d: pb.Descriptor, attr_kind: str,
           cut: pb.ShortenedValues | None = None) -> str:
    """A descriptor as a cell. `cut`: the full length of each value the controller cut
    short, which is shown ending in "…", followed by that length."""
    cut = cut or pb.ShortenedValues()

    def value(v: pb.Value, length: int) -> str:
        x = from_pb(v)
        shown = repr(x) if isinstance(x, str) else str(x)
        return f"{shown}… ({length} characters)" if length else shown

    if d.kind == "A":
        return f"{value(d.low, cut.low)} .. {value(d.high, cut.high)}"
    if d.kind == "N":        # the records no other descriptor of the attribute takes
        return "no value" if attr_kind == "C" else "any other value, or no value"
    return f"= {value(d.value, cut.value)}"


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
            _row(t, attr, d.kind, _shown(d, attr_kind, s.shortened.get(d.id)), str(d.id))
        more = s.descriptor_counts.get(attr, 0) - min(len(found), SHOWN)
        if more > 0:
            _row(t, attr, "", f"… {more} more", "")
    if any(d.id in s.shortened for d in s.descriptors):
        t.caption = Text("values ending in … are shortened: their full length follows")
    console.print(t)
