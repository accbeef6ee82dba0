"""The decision log answers only for the epochs it began (controller/decisions.py): a
unit of any other epoch is left in doubt, never presumed aborted. The whole cluster:
tests/test_faults.py (a controller on a new --data-dir)."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from backend import undo
from controller.coordinator import Coordinator
from controller.decisions import Decisions
from controller.epochs import EARLIER_RUNS
from mbds.errors import BackendUnavailable
from mbds.proto import mbds_pb2 as pb
from mbds.service import COMMITTED_RUNS, MAX_EPOCH


def test_a_log_covers_the_epochs_it_began_and_no_other(tmp_path: Path) -> None:
    path = tmp_path / "decisions.db"

    async def first() -> None:
        d = Decisions(path, "NORMAL")
        assert not d.covers(("e1", 1))
        d.begin("e1")
        assert d.covers(("e1", 1)) and not d.covers(("e2", 1))
        await d.commit(("e1", 1), ["b0", "b1"])
        await d.close()

    async def second() -> None:
        d = Decisions(path, "NORMAL")
        d.begin("e2")
        assert d.covers(("e1", 7)) and d.covers(("e2", 1)) and not d.covers(("e3", 1))
        assert await d.outcome(("e1", 1)) is True
        assert await d.outcome(("e1", 2)) is False       # presumed abort, as ever
        await d.close()

    asyncio.run(first())
    asyncio.run(second())
    with closing(sqlite3.connect(path)) as conn:
        assert {e for (e,) in conn.execute("SELECT epoch FROM epochs")} == {"e1", "e2"}


def test_a_log_from_before_epochs_covers_its_earlier_runs_until_every_backend_is_met(
        tmp_path: Path) -> None:
    """Its decisions name some of its epochs; the rest of its runs it covers only until
    a start has met every backend, then just what it lists."""
    path = tmp_path / "decisions.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE decisions (epoch TEXT NOT NULL, seq INTEGER NOT NULL, "
                     "waiting TEXT NOT NULL, PRIMARY KEY (epoch, seq))")
        conn.execute("""INSERT INTO decisions VALUES ('old', 3, '["b1"]')""")
        conn.commit()

    async def upgraded() -> None:
        d = Decisions(path, "NORMAL")
        assert d.epochs == {"old", EARLIER_RUNS}
        assert d.covers(("old", 3)) and d.covers(("earlier", 1))
        d.begin("new")
        d.met_every_backend()
        assert d.covers(("old", 3)) and d.covers(("new", 1))
        assert not d.covers(("earlier", 1))
        assert await d.outcome(("old", 3)) is True
        await d.close()

    async def after() -> None:
        d = Decisions(path, "NORMAL")
        assert d.epochs == {"old", "new"}
        assert not d.covers(("earlier", 1))
        await d.close()

    asyncio.run(upgraded())
    asyncio.run(after())


def test_a_log_interrupted_before_it_met_every_backend_still_covers_its_earlier_runs(
        tmp_path: Path) -> None:
    path = tmp_path / "decisions.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE decisions (epoch TEXT NOT NULL, seq INTEGER NOT NULL, "
                     "waiting TEXT NOT NULL, PRIMARY KEY (epoch, seq))")
        conn.commit()

    async def run() -> bool:
        d = Decisions(path, "FULL")
        d.begin("new")
        covered = d.covers(("earlier", 1))
        await d.close()
        return covered

    assert asyncio.run(run()) is True
    assert asyncio.run(run()) is True


def test_what_the_log_does_not_cover_is_said_in_bounded_size_and_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        one = d.outside("b1", [("abc", 4)])
        assert one == (f"backend b1 holds in-doubt unit (epoch abc, seq 4) that this "
                       f"controller's decision log ({path}) does not cover (its --data-dir "
                       "is new or was replaced): its outcome is unknown here; start the "
                       "controller on the --data-dir that made it")
        many = d.outside("b2", [("x" * 10_000, i) for i in range(1, 5001)])
        assert "holds 5000 in-doubt units (epoch xxx" in many
        assert "seq 1, and 4999 more)" in many and "their outcome is unknown" in many
        assert len(many) < 600
        d.outside("b1", [("abc", 4)])
        await d.close()

    with caplog.at_level(logging.ERROR, logger="mbds.controller"):
        asyncio.run(run())
    assert [r.getMessage()[:19] for r in caplog.records] == ["backend b1 holds in",
                                                              "backend b2 holds 50"]


def test_a_log_that_never_decided_a_commit_a_backend_carried_out_is_an_older_copy(
        tmp_path: Path) -> None:
    """Each epoch's highest decided seq is kept with the decisions; a backend that has
    committed past it in that epoch shows the log to be an older copy, which then
    covers none of that epoch's units (no presumed abort), and says why."""
    path = tmp_path / "decisions.db"

    async def first() -> None:
        d = Decisions(path, "NORMAL")
        d.begin("e1")
        await d.commit(("e1", 3), ["b0", "b1"])
        await d.commit(("e1", 2), ["b0"])
        await d.close()

    async def second() -> None:
        d = Decisions(path, "FULL")
        assert d.decided == {"e1": 3}
        d.heard("b0", [("e1", 3), ("elsewhere", 50)])   # as far as it decided: current
        assert d.covers(("e1", 4)) and not d.behind
        d.heard("b2", [("e1", 7)])
        d.heard("b0", [("e1", 5)])
        assert not d.covers(("e1", 4)) and d.behind == {"e1": ("b2", 7)}
        why = d.outside("b1", [("e1", 4)])
        assert why == (f"backend b1 holds in-doubt unit (epoch e1, seq 4) that this "
                       f"controller's decision log ({path}) cannot tell the outcome of: "
                       "backend b2 has carried out the commit of seq 7 of that epoch, "
                       "which this log never decided (it decided up to seq 3), so the log "
                       "is an older copy of itself; start the controller on its latest "
                       "--data-dir")
        await d.close()

    asyncio.run(first())
    asyncio.run(second())


def test_a_log_made_before_decided_seqs_were_kept_checks_only_its_new_epochs(
        tmp_path: Path) -> None:
    path = tmp_path / "decisions.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE decisions (epoch TEXT NOT NULL, seq INTEGER NOT NULL, "
                     "waiting TEXT NOT NULL, PRIMARY KEY (epoch, seq))")
        conn.execute("CREATE TABLE epochs (epoch TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO epochs VALUES ('old')")
        conn.commit()

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        d.begin("new")
        d.heard("b0", [("old", 90), ("new", 1)])
        assert d.covers(("old", 5)) and not d.covers(("new", 1))
        await d.commit(("new", 1), ["b0"])
        await d.close()

    asyncio.run(run())
    with closing(sqlite3.connect(path)) as conn:
        assert dict(conn.execute("SELECT epoch, decided FROM epochs")) == {
            "old": None, "new": 1}


class _Stub:
    def __init__(self) -> None:
        self.resolved: list[pb.Outcomes] = []

    async def Resolve(self, outcomes: pb.Outcomes, timeout: float,
                      metadata: object = ()) -> pb.HelloReply:
        self.resolved.append(outcomes)
        return pb.HelloReply(name="b1", in_doubt=[
            pb.UnitId(epoch=e, seq=s) for e, s in LEFT])


LEFT = [("gone", 9)]


class _Link:
    """A backend in doubt about a unit of this controller's epoch and one of another's."""

    name, address = "b1", "127.0.0.1:1"
    metadata: tuple[tuple[str, str], ...] = ()

    def __init__(self, units: list[tuple[str, int]]) -> None:
        self.units = units
        self.stub = _Stub()

    async def hello(self, timeout: float) -> pb.HelloReply:
        return pb.HelloReply(name="b1", in_doubt=[pb.UnitId(epoch=e, seq=s)
                                                  for e, s in self.units])

    def unavailable(self, detail: str) -> BackendUnavailable:
        return BackendUnavailable(detail)


def test_a_hello_resolves_the_units_the_log_covers_and_leaves_the_others_in_doubt(
) -> None:
    async def run() -> None:
        c = Coordinator([])
        ours = c.bus.epoch
        assert c.decisions.covers((ours, 1))
        link = _Link([(ours, 1), LEFT[0]])
        c.membership.members.identify({})      # as `start` does with no backend yet
        with pytest.raises(BackendUnavailable, match=r"backend b1 holds in-doubt unit "
                           r"\(epoch gone, seq 9\) that this controller's decision log "
                           r"does not cover"):
            await c.membership.meet.hello(link, 1)  # type: ignore[arg-type]
        # Its own unit is presumed aborted; the other one is not resolved at all.
        [sent] = link.stub.resolved
        assert [(o.unit.epoch, o.unit.seq, o.commit) for o in sent.outcomes] == [
            (ours, 1, False)]
        await c.close()

    asyncio.run(run())


class _Committed(_Link):
    def __init__(self, committed: list[tuple[str, int]]) -> None:
        super().__init__([])
        self.committed = committed

    async def hello(self, timeout: float) -> pb.HelloReply:
        return pb.HelloReply(name="b1", committed=[pb.UnitId(epoch=e, seq=s)
                                                   for e, s in self.committed])


@pytest.mark.parametrize("committed", [[(f"e{i}", 1) for i in range(COMMITTED_RUNS + 1)],
                                       [("", 1)], [("x" * (MAX_EPOCH + 1), 1)]])
def test_a_hello_listing_its_commits_beyond_their_bounds_is_refused(
        committed: list[tuple[str, int]]) -> None:
    async def run() -> None:
        c = Coordinator([])
        c.membership.members.identify({})      # as `start` does with no backend yet
        with pytest.raises(BackendUnavailable, match=r"lists \d+ epochs it committed in "
                           rf"\(at most {COMMITTED_RUNS}\), or one empty or longer than "
                           rf"{MAX_EPOCH} characters"):
            await c.membership.meet.hello(_Committed(committed), 1)  # type: ignore[arg-type]
        assert not c.decisions.behind
        await c.close()

    asyncio.run(run())


def test_a_backend_keeps_the_highest_seq_it_committed_of_its_latest_epochs() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(undo.SCHEMA)
    for epoch, seq in [("a", 5), ("a", 3), ("b", 1), ("c", 2), ("a", 9), ("d", 4)]:
        unit = undo.UndoLog(conn, (epoch, seq)).unit
        assert undo.commit(conn, unit) == (epoch, seq)
    assert conn.execute("SELECT COUNT(*) FROM prepared").fetchone()[0] == 0
    assert undo.commit(conn, unit) is None          # carried out already: nothing changes
    assert undo.committed_through(conn, 3) == {"b": 1, "c": 2, "d": 4}
    assert undo.committed_through(conn, 3) == {"b": 1, "c": 2, "d": 4}
    # A one-phase unit's seq counts as carried out, not as a two-phase commit.
    undo.carried_out(conn, ("d", 7))
    undo.carried_out(conn, ("e", 2))
    undo.carried_out(conn, ("d", 6))
    assert undo.committed_through(conn, 4) == {"b": 1, "c": 2, "d": 4}
    assert undo.carried_through(conn) == {"b": 1, "c": 2, "d": 7, "e": 2}


def test_a_file_made_before_one_phase_seqs_were_kept_is_upgraded() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE committed (epoch TEXT PRIMARY KEY, seq INTEGER NOT NULL)")
    conn.execute("INSERT INTO committed VALUES ('a', 5)")
    conn.executescript(undo.SCHEMA)
    undo.upgrade(conn)
    undo.upgrade(conn)                               # once only
    undo.carried_out(conn, ("b", 3))
    assert undo.committed_through(conn, 64) == {"a": 5}
    assert undo.carried_through(conn) == {"a": 5, "b": 3}


def test_a_full_disk_is_named_as_what_failed_the_decision(tmp_path: Path) -> None:
    """The log's disk full: a decision fails naming the full disk (SQLite has rolled the
    transaction back itself; a ROLLBACK after it would fail and hide that error), and
    once there is room the next decision is written."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the log needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        async def main() -> None:
            d = Decisions(mnt / "decisions.db", "FULL")
            d.begin("e")
            filler = mnt / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
            try:
                while os.write(fd, b"x" * 4096):
                    pass
            except OSError:             # the disk is full
                pass
            finally:
                os.close(fd)
            participants = [f"b{i}" * 2000 for i in range(40)]   # more than a page
            with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
                for seq in range(1, 200):
                    await d.commit(("e", seq), participants)
            filler.unlink()
            await d.commit(("e", 500), ["b0"])
            assert await d.outcome(("e", 500))
            await d.close()
        asyncio.run(main())
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=True)


class _StillInDoubt(_Stub):
    """A backend that cannot carry the commit out yet (its disk is full): after Resolve
    it still lists the unit in doubt."""

    def __init__(self, unit: tuple[str, int]) -> None:
        super().__init__()
        self.unit = unit

    async def Resolve(self, outcomes: pb.Outcomes, timeout: float,
                      metadata: object = ()) -> pb.HelloReply:
        self.resolved.append(outcomes)
        return pb.HelloReply(name="b1", in_doubt=[pb.UnitId(epoch=self.unit[0],
                                                            seq=self.unit[1])])


def test_a_decision_is_kept_while_the_backend_still_lists_its_unit_after_resolve() -> None:
    """Dropped, the decision would be presumed abort at the backend's next Hello, and its
    part rolled back under the others' committed ones."""
    async def run() -> None:
        c = Coordinator([])
        unit = (c.bus.epoch, 1)
        await c.decisions.commit(unit, ["b1"])
        link = _Link([unit])
        link.stub = _StillInDoubt(unit)
        c.membership.members.identify({})      # as `start` does with no backend yet
        with pytest.raises(BackendUnavailable, match="1 units still in doubt"):
            await c.membership.meet.hello(link, 1)  # type: ignore[arg-type]
        [sent] = link.stub.resolved
        assert [(o.unit.seq, o.commit) for o in sent.outcomes] == [(1, True)]
        assert c.decisions.logged == {unit: {"b1"}}
        assert await c.decisions.outcome(unit)
        await c.close()

    asyncio.run(run())
