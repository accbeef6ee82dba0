"""A directory larger than a gRPC message (64 MiB, `MAX_MESSAGE`): it travels between the
controller and the backends in parts of a few MiB each (backend/server.py `Directory`,
controller/meeting.py `directory_of`, controller/membership.py `_sync`), so a cluster
that holds one starts again, and a backend that lost its copy gets the whole of it back."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from mbds.cluster import ProcessFailed
from mbds.directory import Directory
from mbds.directory_parts import DIRECTORY_PART, DirectoryParts, directory_entries, directory_parts
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import MAX_MESSAGE, MESSAGE_BUDGET
from tests.conftest import (
    Running,
    as_controller,
    backend_digests,
    internal_channel,
    start_cluster,
)

BIG = "files:\n  BIG: {attributes: {ID: integer, NAME: string}, directory: {NAME: {type: C}}}\n"
VALUE = 1_000_000          # characters of each record's type-C value: a descriptor each
RECORDS = 72               # 72 MB of descriptors: more than one message (67.1 MB) holds


def value(i: int) -> str:
    return f"{i:08d}".ljust(VALUE, "v")


def load(r: Running) -> None:
    r.client.define(BIG)
    # Client.load cuts the records into batches by bytes (16 MiB): several traffic units.
    dones = list(r.client.load("BIG", ["ID", "NAME"], (([i, value(i)], None)
                                                       for i in range(RECORDS))))
    assert len(dones) > 1 and sum(d.stats.records_retrieved for d in dones) == RECORDS


def read_parts(r: Running, i: int) -> list[pb.DirectoryReply]:
    """Backend i's directory as the controller reads it: part by part."""
    parts: list[pb.DirectoryReply] = []
    start = pb.DirectoryPosition()
    address = r.cluster.backends[i].address or ""
    metadata = as_controller(r.cluster, address)
    with internal_channel(r.cluster, address) as ch:
        while True:
            parts.append(rpc.BackendStub(ch).Directory(pb.DirectoryRequest(start=start),
                                                       timeout=30, metadata=metadata))
            if not parts[-1].HasField("next"):
                return parts
            start = parts[-1].next


def found(r: Running, i: int) -> list[int]:
    [res] = r.client.execute(f"RETRIEVE ((FILE = Big) and (NAME = '{value(i)}')) (ID)")
    return [x["ID"] for x in res.records]


def test_a_directory_larger_than_a_message_survives_restarts(tmp_path: Path) -> None:
    data = tmp_path / "d"
    t0 = time.monotonic()
    r = start_cluster(data, 2)
    try:
        load(r)
        parts = read_parts(r, 0)
        assert sum(p.directory.ByteSize() for p in parts) > MAX_MESSAGE
        assert len(parts) > 1 and max(p.ByteSize() for p in parts) < 2 * DIRECTORY_PART
        assert sum(len(p.directory.descriptors) for p in parts) == RECORDS + 2  # FILE, N
        assert {p.directory_digest for p in parts} == set(backend_digests(r))
    finally:
        r.close()

    # Started again on the same data: the controller reads each backend's directory.
    r = start_cluster(data, 2)
    try:
        assert found(r, 7) == [7]
        [res] = r.client.execute("RETRIEVE (FILE = Big) (COUNT(ID))")
        assert res.records == [{"COUNT(ID)": RECORDS}]
        digests = backend_digests(r)
        assert len(set(digests)) == 1 and r.client.status().directory_digest == digests[0]
    finally:
        r.close()

    # A backend whose data is gone (a new disk) is refused: it would answer without its
    # records. Once its loss is accepted (its name taken out of "served"), it starts with
    # an empty directory, and the controller sends it the whole directory, in parts,
    # before it opens its bus.
    shutil.rmtree(data / "b1")
    with pytest.raises(ProcessFailed) as err:
        start_cluster(data, 2)
    assert "backend b1" in str(err.value) and "holds no data of this cluster" in str(err.value)
    members = data / "controller" / "members.json"
    kept = json.loads(members.read_text())
    kept["served"].remove("b1")
    members.write_text(json.dumps(kept))
    r = start_cluster(data, 2)
    try:
        digests = backend_digests(r)
        assert len(set(digests)) == 1 and r.client.status().directory_digest == digests[0]
        assert sum(len(p.directory.descriptors) for p in read_parts(r, 1)) == RECORDS + 2
        r.client.execute(f"INSERT (<FILE, Big>, <ID, {RECORDS}>, <NAME, 'new'>)")
        assert found(r, 3) in ([], [3])       # b1's records went with its data
        [res] = r.client.execute("RETRIEVE ((FILE = Big) and (NAME = 'new')) (ID)")
        assert res.records == [{"ID": RECORDS}]
    finally:
        r.close()
    assert time.monotonic() - t0 < 60


def directory(descriptors: int, size: int) -> Directory:
    d = Directory()
    d.apply(pb.DirectoryUpdate(files=[pb.FileDef(name=f"F{k}", attributes=[
        pb.AttributeDef(name="K", type="string", directory="C")]) for k in range(3)]))
    d.apply(pb.DirectoryUpdate(descriptors=[
        pb.Descriptor(id=i + 1, file=f"F{i % 3}", attr="K", kind="C",
                      value=pb.Value(s=f"{i:06d}".ljust(size, "x")))
        for i in range(descriptors)]))
    d.apply(pb.DirectoryUpdate(clusters=[
        pb.Cluster(id=100_000 + i, file=f"F{i % 3}", descriptor_ids=[i + 1])
        for i in range(descriptors)]))
    return d


def test_a_backend_cuts_its_directory_in_bounded_parts_that_make_it_whole() -> None:
    d = directory(3_000, 5_000)           # 15 MB of descriptors
    whole = d.to_update()
    cut = DirectoryParts(d)
    parts, start = [], pb.DirectoryPosition()
    while True:
        part, following = cut.cut(start)
        parts.append(part)
        if following is None:
            break
        assert (following.section, following.after_file, following.after_id) > (
            start.section, start.after_file, start.after_id)
        start = following
    assert len(parts) > 3 and all(p.ByteSize() <= DIRECTORY_PART for p in parts)
    merged = pb.DirectoryUpdate()
    for p in parts:
        merged.MergeFrom(p)
    assert merged == whole
    copy = Directory()
    for p in parts:
        copy.apply(p)
    assert copy.digest() == d.digest()


@pytest.mark.parametrize("descriptors", [1, 2, 3])
def test_a_part_full_at_the_start_of_a_section_goes_on_from_that_sections_start(
        descriptors: int) -> None:
    """Descriptors each larger than a part: the part that holds the last one is full at
    the first cluster, and the next must start at that cluster, not after the last (the
    controller read no cluster at all, and gave their ids again). Files first too: a
    part full at the first descriptor."""
    d = directory(descriptors, DIRECTORY_PART + 10)
    cut = DirectoryParts(d)
    merged, start = pb.DirectoryUpdate(), pb.DirectoryPosition()
    while True:
        part, following = cut.cut(start)
        merged.MergeFrom(part)
        if following is None:
            break
        start = following
    assert merged == d.to_update()
    assert len(merged.clusters) == descriptors


def test_the_controller_sends_a_directory_in_bounded_parts_that_make_it_whole() -> None:
    d = directory(3_000, 5_000)
    parts = list(directory_parts(directory_entries(d)))
    assert len(parts) > 3 and all(p.ByteSize() <= DIRECTORY_PART for p in parts)
    copy = Directory()
    for p in parts:
        copy.apply(p)
    assert copy.digest() == d.digest() and copy.to_update() == d.to_update()
    # An entry larger than a part goes alone; none is larger than a message can carry.
    big = directory(3, DIRECTORY_PART + 10)
    sizes = [len(p.descriptors) for p in directory_parts(directory_entries(big))
             if p.descriptors]
    assert sizes == [1, 1, 1]
    assert DIRECTORY_PART < MESSAGE_BUDGET
