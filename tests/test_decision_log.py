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

from controller.coordinator import Coordinator
from controller.decisions import EARLIER_RUNS, Decisions
from mbds.errors import BackendUnavailable
from mbds.proto import mbds_pb2 as pb


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
            await c.membership._hello(link, 1)  # type: ignore[arg-type]
        # Its own unit is presumed aborted; the other one is not resolved at all.
        [sent] = link.stub.resolved
        assert [(o.unit.epoch, o.unit.seq, o.commit) for o in sent.outcomes] == [
            (ours, 1, False)]
        await c.close()

    asyncio.run(run())


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
