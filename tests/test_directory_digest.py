"""The directory's digest (mbds/directory.py `Directory.digest`): equal on two directories
exactly when they hold the same files, descriptors and clusters, however they came to
hold them, and kept up to date as entries come and go, so asking for it (every Status,
every backend's Hello and `ApplyDirectory` reply) costs the size of the last change,
not the size of the directory."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mbds import directory
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.schema import FileSchema
from tests.conftest import backend_digests, start_cluster

Value = int | float | str | None


def files(revision: int = 0) -> list[pb.FileDef]:
    return [pb.FileDef(name=name, revision=revision, attributes=[
        pb.AttributeDef(name="K", type="string", directory="C"),
        pb.AttributeDef(name="N", type="float", directory="A", indexed=bool(revision))])
        for name in ("F", "G")]


def value(v: Value) -> pb.Value:
    if v is None:
        return pb.Value()
    if isinstance(v, str):
        return pb.Value(s=v)
    return pb.Value(f=v) if isinstance(v, float) else pb.Value(i=v)


def descriptor(did: int, v: Value, file: str = "F") -> pb.Descriptor:
    return pb.Descriptor(id=did, file=file, attr="K", kind="C", value=value(v))


def contents(d: Directory) -> tuple[object, ...]:
    """What a directory holds, independent of the order it was given in."""
    u = d.to_update()
    return (sorted(f.SerializeToString(deterministic=True) for f in u.files),
            [x.SerializeToString(deterministic=True) for x in u.descriptors],
            [x.SerializeToString(deterministic=True) for x in u.clusters])


entries = st.lists(st.tuples(st.integers(1, 40), st.sampled_from(["F", "G"]),
                             st.one_of(st.integers(-3, 3), st.floats(-2, 2, width=16),
                                       st.text(max_size=3))),
                   max_size=25, unique_by=lambda e: e[0])


def build(picked: list[tuple[int, str, Value]], chunks: int, revision: int = 0
          ) -> Directory:
    """A directory holding `picked` descriptors (and a cluster of each), given in
    `chunks` updates in reverse order, clusters before their file's descriptors end."""
    d = Directory()
    d.apply(pb.DirectoryUpdate(files=files(revision)))
    ds = [descriptor(i, v, f) for i, f, v in reversed(picked)]
    cs = [pb.Cluster(id=1000 + i, file=f, descriptor_ids=[i]) for i, f, _ in picked]
    step = max(1, len(ds) // max(1, chunks))
    for k in range(0, len(ds), step):
        d.apply(pb.DirectoryUpdate(descriptors=ds[k:k + step]))
    d.apply(pb.DirectoryUpdate(clusters=cs))
    return d


@settings(max_examples=200, deadline=None)
@given(entries, entries, st.integers(1, 5), st.integers(0, 1), st.integers(0, 1))
def test_digests_are_equal_exactly_when_the_contents_are(a: list, b: list, chunks: int,
                                                         ra: int, rb: int) -> None:
    x, y = build(a, 1, ra), build(b, chunks, rb)
    assert (x.digest() == y.digest()) == (contents(x) == contents(y))
    # The same contents in another order of updates: the same digest.
    assert build(a, chunks, ra).digest() == x.digest()


def test_every_field_of_every_entry_counts() -> None:
    base = build([(1, "F", "a"), (2, "G", 1)], 1)
    others = [
        build([(1, "F", "b"), (2, "G", 1)], 1),       # another value
        build([(1, "F", "a"), (2, "G", 1.0)], 1),     # the same number, another type
        build([(1, "F", "a"), (2, "F", 1)], 1),       # another file
        build([(1, "F", "a"), (3, "G", 1)], 1),       # another id
        build([(1, "F", "a")], 1),                    # one fewer
        build([(1, "F", "a"), (2, "G", 1)], 1, revision=1),    # a file re-indexed
    ]
    moved = build([(1, "F", "a"), (2, "G", 1)], 1)
    moved.apply(pb.DirectoryUpdate(clusters=[pb.Cluster(id=5, file="F",
                                                        descriptor_ids=[1])]))
    others.append(moved)
    digests = [base.digest(), *(o.digest() for o in others)]
    assert len(set(digests)) == len(digests)


def test_entries_taken_back_leave_the_digest_they_found() -> None:
    d = build([(1, "F", "a")], 1)
    digest, generation = d.digest(), d.generation
    update = pb.DirectoryUpdate(descriptors=[descriptor(7, "gone")],
                                clusters=[pb.Cluster(id=77, file="F", descriptor_ids=[7])])
    d.apply(update)
    assert d.digest() != digest and d.generation > generation
    d.retract(update)
    assert d.digest() == digest and d.generation > generation
    # A definition not adopted everywhere: a new file goes with its entries, a
    # re-indexed one gets its old definition back.
    before: dict[str, FileSchema | None] = {"F": d.files["F"], "H": None}
    generation = d.generation
    d.apply(pb.DirectoryUpdate(files=[files(1)[0], pb.FileDef(name="H", attributes=[
        pb.AttributeDef(name="K", type="integer", directory="C")])],
        descriptors=[pb.Descriptor(id=9, file="H", attr="K", kind="C", value=pb.Value(i=1))],
        clusters=[pb.Cluster(id=99, file="H", descriptor_ids=[9])]))
    assert d.digest() != digest and d.files["F"].revision == 1
    d.restore_files(before)
    assert d.digest() == digest and d.generation > generation
    assert d.digest() == build([(1, "F", "a")], 1).digest()


def test_asking_for_the_digest_hashes_the_change_not_the_directory(monkeypatch) -> None:
    """A digest after each new type-C value (a Status call after each, say) hashes that
    value's entries, not the directory's 200,000; counted, not timed."""
    big = build([(i, "F", f"value {i:06d}") for i in range(1, 100_001)], 4)
    first = big.digest()
    hashed: list[object] = []
    count = directory._entry_hash

    def counted(entry: object) -> int:
        hashed.append(entry)
        return count(entry)

    monkeypatch.setattr(directory, "_entry_hash", counted)
    assert big.digest() == first and hashed == []
    for i in range(20):
        did = 200_000 + i
        big.apply(pb.DirectoryUpdate(descriptors=[descriptor(did, f"new {i}")],
                                     clusters=[pb.Cluster(id=did, file="F",
                                                          descriptor_ids=[did])]))
        big.digest()
        big.digest()
    assert len(hashed) == 40                  # a descriptor and a cluster each


def test_digests_stay_equal_everywhere_as_records_move_to_new_values(tmp_path: Path
                                                                      ) -> None:
    """Records moved to type-C values new to the directory (IIG pushes the entries to
    the other backends outside bus order): every backend's digest and the controller's
    stay equal, kept up to date entry by entry, and the moved records are found."""
    r = start_cluster(tmp_path / "d", 2)
    try:
        c = r.client
        c.define("files:\n  BIG: {attributes: {ID: integer, T: string}, "
                 "directory: {T: {type: C}}}\n")
        for _ in c.load("BIG", ["ID", "T"], (([i, f"t{i}"], None) for i in range(2_000))):
            pass
        for i in range(10):
            c.execute(f"UPDATE ((FILE = Big) and (ID = {i})) <T = 'moved {i}'>")
        [res] = c.execute("RETRIEVE ((FILE = Big) and (T = 'moved 3')) (ID)")
        assert res.records == [{"ID": 3}]
        digests = backend_digests(r)
        assert len(set(digests)) == 1 and c.status().directory_digest == digests[0]
    finally:
        r.close()
