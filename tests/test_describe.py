"""Status's description of the stored files (controller/describe.py): every file's
definition, and one file's descriptors, bounded per attribute and counted in full."""

from __future__ import annotations

import pytest

from controller.describe import DESCRIPTORS_SHOWN, describe
from mbds.directory import Directory
from mbds.errors import SemanticError
from mbds.proto import mbds_pb2 as pb


def directory(values: int) -> Directory:
    d = Directory()
    files = [pb.FileDef(name="TOWNS", attributes=[
        pb.AttributeDef(name="NAME", type="string", directory="C"),
        pb.AttributeDef(name="POP", type="integer", directory="A"),
        pb.AttributeDef(name="NOTE", type="string")]),
        pb.FileDef(name="OTHER", attributes=[pb.AttributeDef(name="K", type="integer",
                                                              directory="C")])]
    descriptors = [pb.Descriptor(id=1, file="TOWNS", attr="FILE", kind="B",
                                 value=pb.Value(s="TOWNS")),
                   pb.Descriptor(id=2, file="TOWNS", attr="NAME", kind="N"),
                   pb.Descriptor(id=3, file="TOWNS", attr="POP", kind="N"),
                   pb.Descriptor(id=4, file="TOWNS", attr="POP", kind="A",
                                 low=pb.Value(i=0), high=pb.Value(i=9)),
                   pb.Descriptor(id=5, file="OTHER", attr="FILE", kind="B",
                                 value=pb.Value(s="OTHER")),
                   pb.Descriptor(id=6, file="OTHER", attr="K", kind="N")]
    descriptors += [pb.Descriptor(id=10 + i, file="TOWNS", attr="NAME", kind="C",
                                  value=pb.Value(s=f"T{i}")) for i in range(values)]
    d.apply(pb.DirectoryUpdate(files=files, descriptors=descriptors))
    return d


def test_every_file_is_defined_and_none_described_without_a_name() -> None:
    out = pb.StatusReply()
    describe(out, directory(3), "")
    assert [f.name for f in out.file_defs] == ["OTHER", "TOWNS"]
    towns = out.file_defs[1]
    assert [(a.name, a.type, a.directory) for a in towns.attributes] == [
        ("NAME", "string", "C"), ("POP", "integer", "A"), ("NOTE", "string", "")]
    assert not out.descriptors and not out.descriptor_counts


def test_one_files_descriptors_bounded_per_attribute() -> None:
    many = DESCRIPTORS_SHOWN + 50
    out = pb.StatusReply()
    describe(out, directory(many), "towns")            # any case
    assert dict(out.descriptor_counts) == {"FILE": 1, "NAME": many + 1, "POP": 2}
    names = [d for d in out.descriptors if d.attr == "NAME"]
    assert len(names) == DESCRIPTORS_SHOWN
    assert [d.id for d in names] == sorted(d.id for d in names)      # the first, by id
    assert {d.file for d in out.descriptors} == {"TOWNS"}
    assert {d.attr for d in out.descriptors} == {"FILE", "NAME", "POP"}


def test_an_unknown_file_is_named_and_bounded() -> None:
    with pytest.raises(SemanticError, match="unknown file NOWHERE"):
        describe(pb.StatusReply(), directory(0), "nowhere")
    with pytest.raises(SemanticError) as e:
        describe(pb.StatusReply(), directory(0), "x" * 10_000)
    assert len(str(e.value)) < 200 and "10000 characters" in str(e.value)
