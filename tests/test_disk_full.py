"""One backend's disk fills up: the units it cannot write fail everywhere (the other
backend keeps none of their records), every acknowledged unit is whole, reads go on,
and once there is room again the system takes new units and deletes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mbds.client import ClientError
from tests.conftest import Running, start_cluster
from tests.crashes import retry, wait_for

PHOTO_YAML = """
files:
  PHOTO:
    attributes: {NAME: string, UNIT: integer, SIZE: integer}
    directory:
      UNIT: {type: A, ranges: [[0, 999], [1000, 1999]]}
      NAME: {type: C}
"""
BACKENDS = ["b0", "b1"]
BODY = 20_000               # bytes of record body: b0's 8 MB hold a few hundred
MAX_UNITS = 2000
FAILURES = 20               # disk-full failures wanted before the checks
FULL = "database or disk is full"


def unit_text(n: int) -> str:
    """Two inserts with new NAME values (type C): two new clusters, so IIG puts the
    first on the backend with the fewest records and the second on the other one."""
    return "[" + "; ".join(
        f"INSERT (<FILE, Photo>, <NAME, 'u{n}-{j}'>, <UNIT, {n}>, <SIZE, {BODY}>) "
        f"{{{chr(ord('a') + n % 26) * BODY}}}" for j in range(2)) + "]"


Key = tuple[str, int]       # a traffic unit: (epoch, seq)


def stored(db: Path) -> tuple[dict[str, int], set[Key], int]:
    """From a backend's SQLite file, read-only: each NAME it holds (and how often), the
    units its `prepared` table lists and how many rows its `undo` table holds."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        names = dict(conn.execute('SELECT "NAME", COUNT(*) FROM "r_PHOTO" GROUP BY "NAME"'))
        prepared = set(conn.execute("SELECT epoch, seq FROM prepared").fetchall())
        [(undo,)] = conn.execute("SELECT COUNT(*) FROM undo").fetchall()
    return names, prepared, undo


def on_disk(r: Running) -> dict[str, tuple[dict[str, int], set[Key], int]]:
    return {b: stored(r.cluster.data_dir / b / "backend.db") for b in BACKENDS}


def decided(r: Running) -> set[Key]:
    """The units the controller's decision log holds (committed, not yet forgotten by
    every backend), read-only."""
    db = r.cluster.data_dir / "controller" / "decisions.db"
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return set(conn.execute("SELECT epoch, seq FROM decisions").fetchall())


@pytest.fixture
def small_b0(tmp_path: Path) -> Iterator[Running]:
    """A 2-backend cluster whose b0 keeps its data on an 8 MB tmpfs."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for b0's data directory needs root")
    data = tmp_path / "data"
    mnt = data / "b0"
    mnt.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], check=True)
    try:
        r = start_cluster(data, 2)
        try:
            yield r
        finally:
            r.close()
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=True)


@dataclass
class Filled:
    acked: list[int] = field(default_factory=list)
    full: list[int] = field(default_factory=list)          # failed naming a full disk
    other: dict[int, str] = field(default_factory=dict)    # failed for another reason

    def __str__(self) -> str:
        return (f"{len(self.acked)} acknowledged, {len(self.full)} failed with a full disk, "
                f"{len(self.other)} failed otherwise")


def fill(r: Running) -> Filled:
    """Units of two big records until FAILURES of them have failed naming a full disk."""
    r.client.define(PHOTO_YAML)
    out = Filled()
    for n in range(MAX_UNITS):
        try:
            r.client.execute(unit_text(n))
            out.acked.append(n)
        except ClientError as e:
            if FULL in str(e):
                out.full.append(n)
            else:
                out.other[n] = f"{e.code}: {e}"
            if len(out.full) >= FAILURES:
                break
    assert len(out.full) >= FAILURES, (
        f"b0's disk never filled: {out}; {list(out.other.items())[:3]}")
    assert len(out.acked) >= 50, out
    assert not out.other, f"{out}: {list(out.other.items())[:5]}"
    return out


def space(r: Running) -> str:
    """What b0's files take of its tmpfs."""
    mnt = r.cluster.data_dir / "b0"
    st = os.statvfs(mnt)
    files = ", ".join(f"{p.name} {p.stat().st_size:,}" for p in sorted(mnt.iterdir()))
    return f"b0's tmpfs: {st.f_bavail * st.f_frsize:,} bytes free; {files}"


def test_a_full_disk_on_one_backend_fails_its_units_everywhere(small_b0: Running) -> None:
    """Units of two big records, one per backend, until b0's disk is full and at least
    20 have failed naming it. Every acknowledged unit has its two records, one on each
    backend; no failed one left a record anywhere — not on b1, which had room; b1 holds
    no prepared unit, and b0 only committed ones it had no room to forget."""
    r = small_b0
    filled = fill(r)
    log = decided(r)             # first: a decision is dropped only after b0 forgot its unit
    disk = on_disk(r)
    where: dict[str, str] = {}
    for b, (names, _, _) in disk.items():
        for name, k in names.items():
            assert k == 1 and name not in where, f"{name} is stored twice ({filled})"
            where[name] = b
    # Every acknowledged unit is whole, one record on each backend.
    broken = {n: [where.get(f"u{n}-{j}") for j in range(2)] for n in filled.acked}
    broken = {n: w for n, w in broken.items() if sorted(map(str, w)) != BACKENDS}
    assert not broken, f"acknowledged units not whole: {list(broken.items())[:10]} ({filled})"
    # No failed unit left a record anywhere.
    left = {n: [where.get(f"u{n}-{j}") for j in range(2)] for n in filled.full}
    left = {n: w for n, w in left.items() if w != [None, None]}
    on_b1 = sum(w.count("b1") for w in left.values())
    assert not left, (f"{len(left)} of {len(filled.full)} failed units left records "
                      f"({on_b1} on b1): {list(left.items())[:10]} ({filled})")
    assert len(where) == 2 * len(filled.acked), (len(where), str(filled))
    # b1 rolled every failed unit back: nothing is left prepared there. b0 never prepared
    # a failed unit; it may keep the marker of a committed one it had no room to remove.
    _, prepared, undo = disk["b1"]
    assert not prepared and not undo, (
        f"b1 holds {len(prepared)} prepared units and {undo} undo rows ({filled})")
    _, prepared, _ = disk["b0"]
    undecided = prepared - log
    assert not undecided, (f"b0 holds {len(undecided)} prepared units the controller did "
                           f"not decide to commit: {sorted(undecided)} ({filled})")
    # Through the system: the same records.
    [res] = retry(r.client, "RETRIEVE (FILE = Photo) (NAME)")
    assert sorted(x["NAME"] for x in res.records) == sorted(where), str(filled)


def test_a_full_disk_refuses_writes_until_there_is_room_again(small_b0: Running) -> None:
    """While b0's disk is full its writes fail, naming it, and reads still answer; once
    room is added (the tmpfs grown, as an operator would), what b0 could not finish is
    finished, a new unit goes through, and so does a delete."""
    r = small_b0
    filled = fill(r)
    c = r.client
    [res] = c.execute("RETRIEVE (FILE = Photo) (COUNT(NAME))")
    assert res.records[0]["COUNT(NAME)"] == 2 * len(filled.acked), str(filled)
    with pytest.raises(ClientError, match=FULL):
        c.execute(unit_text(MAX_UNITS))
    mnt = r.cluster.data_dir / "b0"
    subprocess.run(["mount", "-o", "remount,size=32m", str(mnt)], check=True)
    try:
        c.execute(unit_text(MAX_UNITS + 1))
        last = filled.acked[49]
        c.execute(f"DELETE ((FILE = Photo) and (UNIT <= {last}))")
    except ClientError as e:
        raise AssertionError(f"a write with room again failed: {e.code}: {e} ({filled}; "
                             f"{space(r)})") from None
    [res] = c.execute(f"RETRIEVE ((FILE = Photo) and (UNIT = {MAX_UNITS + 1})) (NAME)")
    assert sorted(x["NAME"] for x in res.records) == [
        f"u{MAX_UNITS + 1}-0", f"u{MAX_UNITS + 1}-1"]
    [res] = c.execute("RETRIEVE (FILE = Photo) (COUNT(NAME))")
    assert res.records[0]["COUNT(NAME)"] == 2 * (len(filled.acked) - 50 + 1), str(filled)
    # Nothing stays prepared anywhere: b0 retried what it had no room for.
    wait_for(lambda: all(not p and not u for _, p, u in on_disk(r).values()), 10,
             "empty prepared and undo tables on both backends")


def test_a_decision_a_full_disk_cannot_carry_out_is_named_and_kept_until_there_is_room(
        small_b0: Running) -> None:
    """b0 crashes once PP's commit has come (its part prepared, the decision in the
    controller's log) and comes back on a full disk, where the commit cannot be written:
    requests are refused naming the full disk and the unit (not held to their deadline
    while the backend retries), the unit stays in doubt there, and once there is room it
    commits on b0 like everywhere else."""
    r = small_b0
    r.client.define(PHOTO_YAML)
    r.cluster.backends[0].kill()
    r.cluster.restart_backend(0, env={"MBDS_FAULTS": "backend.before_commit=crash"})
    read = "RETRIEVE (FILE = Photo) (NAME)"
    retry(r.client, read, timeout=30)                # b0 has rejoined
    r.client.execute(unit_text(0))                   # its decision is on disk: acknowledged
    r.cluster.backends[0].popen.wait(30)             # b0 crashed before committing its part
    assert on_disk(r)["b0"][1], "b0 kept no prepared unit"
    mnt = r.cluster.data_dir / "b0"
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)   # every block of b0's tmpfs
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        r.cluster.restart_backend(0)
        with pytest.raises(ClientError) as err:
            r.client.execute(read)
        assert FULL in str(err.value) and "commit of in-doubt unit" in str(err.value), \
            f"{err.value.code}: {err.value}"
        assert on_disk(r)["b0"][1], "the unit left b0's prepared table with no room"
    finally:
        (mnt / "filler").unlink()
    [res] = retry(r.client, read, timeout=30)
    assert sorted(x["NAME"] for x in res.records) == ["u0-0", "u0-1"]
    assert all(not p and not u for _, p, u in on_disk(r).values()), on_disk(r)
