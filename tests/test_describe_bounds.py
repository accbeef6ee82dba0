"""`\\d FILE` (Status with a file, controller/describe.py) is bounded in bytes as well as
in descriptors: a descriptor's value (a type-C value may be megabytes) is cut to its first
`VALUE_SHOWN` characters, the reply says which were cut and their full length, and the
shell shows them ending in "…" with that length."""

from __future__ import annotations

import re
from pathlib import Path

from controller.describe import DESCRIBE_BYTES, DESCRIPTORS_SHOWN, VALUE_SHOWN, describe
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.service import MAX_MESSAGE
from tests.conftest import Running
from tests.test_shell import spawn_shell

LONG = 1_000_000           # characters of each type-C value
RECORDS = 80               # 80 MB of values: the first 200 of them would pass a message


def long_values(values: int, size: int, *, attrs: int = 1, name: str = "T") -> Directory:
    d = Directory()
    d.apply(pb.DirectoryUpdate(files=[pb.FileDef(name=name, attributes=[
        pb.AttributeDef(name="R", type="string", directory="A"),
        *(pb.AttributeDef(name=f"A{k}", type="string", directory="C")
          for k in range(attrs))])]))
    ds = [pb.Descriptor(id=1, file=name, attr="FILE", kind="B", value=pb.Value(s=name)),
          pb.Descriptor(id=2, file=name, attr="R", kind="A", low=pb.Value(s="a"),
                        high=pb.Value(s="z" * 500))]
    ds += [pb.Descriptor(id=10 + i * attrs + k, file=name, attr=f"A{k}", kind="C",
                         value=pb.Value(s=f"{i:05d}".ljust(size, "v")))
           for i in range(values) for k in range(attrs)]
    d.apply(pb.DirectoryUpdate(descriptors=ds))
    return d


def test_each_value_is_shortened_and_the_reply_says_so() -> None:
    out = pb.StatusReply()
    describe(out, long_values(5, 10_000), "t")
    values = [d for d in out.descriptors if d.kind == "C"]
    assert [d.value.s for d in values] == [f"{i:05d}".ljust(VALUE_SHOWN, "v")
                                           for i in range(5)]
    assert {i: c.value for i, c in out.shortened.items() if c.value} == {
        d.id: 10_000 for d in values}
    [r] = [d for d in out.descriptors if d.attr == "R"]     # a range's long end, alone
    assert (r.low.s, len(r.high.s)) == ("a", VALUE_SHOWN)
    assert (out.shortened[r.id].low, out.shortened[r.id].high) == (0, 500)
    assert 1 not in out.shortened                            # FILE's value is short
    assert dict(out.descriptor_counts) == {"FILE": 1, "R": 1, "A0": 5}


def test_the_reply_is_bounded_in_bytes_whatever_the_names_and_values() -> None:
    """Wide files of long names: every attribute gets its share, a round at a time, and
    the counts still tell how many there are."""
    name = "F" * 120
    d = long_values(DESCRIPTORS_SHOWN, 1_000, attrs=200, name=name)
    for k in range(300):       # many other wide files, listed by name
        d.apply(pb.DirectoryUpdate(files=[pb.FileDef(name=f"W{k:03d}", attributes=[
            pb.AttributeDef(name=f"{'X' * 120}{j:03d}", type="string")
            for j in range(256)])]))
    out = pb.StatusReply()
    describe(out, d, name)
    assert out.ByteSize() <= DESCRIBE_BYTES + (64 << 10)
    assert out.file_defs_left_out > 0 and name in [f.name for f in out.file_defs]
    assert len(out.file_defs) + out.file_defs_left_out == 301
    per_attr = {}
    for x in out.descriptors:
        per_attr[x.attr] = per_attr.get(x.attr, 0) + 1
    shares = [v for a, v in per_attr.items() if a.startswith("A")]
    assert len(per_attr) == 202 and 0 < max(shares) - 1 <= min(shares) < DESCRIPTORS_SHOWN
    assert all(out.descriptor_counts[f"A{k}"] == DESCRIPTORS_SHOWN for k in range(200))
    listing = pb.StatusReply()
    describe(listing, d, "")
    assert listing.ByteSize() <= DESCRIBE_BYTES and listing.file_defs_left_out > 0


def test_describe_a_file_of_megabyte_values(cluster_factory, tmp_path: Path) -> None:
    r: Running = cluster_factory(1)
    r.client.define("files:\n  BIG: {attributes: {ID: integer, NAME: string}, "
                    "directory: {NAME: {type: C}}}\n")
    dones = list(r.client.load("BIG", ["ID", "NAME"], (
        ([i, f"{i:04d}".ljust(LONG, "n")], None) for i in range(RECORDS))))
    assert len(dones) > 1
    s = r.client.status("big")
    assert s.descriptor_counts["NAME"] == RECORDS + 1
    values = [d for d in s.descriptors if d.kind == "C"]
    assert len(values) == RECORDS and s.ByteSize() < (1 << 20) < MAX_MESSAGE
    assert all(len(d.value.s) == VALUE_SHOWN and s.shortened[d.id].value == LONG
               for d in values)
    child = spawn_shell(r.cluster.address, tmp_path)
    try:
        child.expect("mbds>")
        child.send("\\d big\r")
        child.expect("descriptors of BIG")
        child.expect("mbds>")
        table = child.before
    finally:
        child.close(force=True)
    assert "values ending in … are shortened: their full length follows" in table, table
    # The cell may wrap: its value's first characters, the mark, the full length.
    assert re.search(r"NAME +│ C +│ = '0000n+", table) and "… (1000000" in table, table
