"""A backend whose data dir is an older copy of itself (restored from a backup, or a disk
that lost writes it had reported durable) is refused, naming what it lacks, by the
running controller and by one started again, rather than admitted without writes it
acknowledged: after a two-phase unit and after one-phase inserts. Its latest data dir
is admitted. Real backend processes, a controller in the test's own process."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from controller.carried import Carried
from controller.coordinator import Coordinator
from mbds.cluster import Proc
from mbds.errors import BackendUnavailable
from mbds.service import COMMITTED_RUNS
from tests.crashes import prepared, wait_for
from tests.test_members_kept import COUNT, _execute, backend, census, run

OLDER = "its data dir is an older copy of itself"


def _commits(data: Path) -> tuple[int, int]:
    """(two-phase, any) highest seq committed in the backend's latest epoch, from its file,
    once it has carried out every commit (the client is answered before that)."""
    wait_for(lambda: prepared(data / "backend.db") == 0, 30, "commit carried out")
    with closing(sqlite3.connect(f"file:{data / 'backend.db'}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT seq, max(seq, carried) FROM committed "
                            "ORDER BY rowid DESC LIMIT 1").fetchone()


async def _answered(c: Coordinator, text: str) -> list:
    """`text` once the cluster answers again (a restarted backend is rejoining)."""
    for _ in range(100):
        try:
            return await _execute(c, text)
        except BackendUnavailable:
            await asyncio.sleep(0.1)
    return await _execute(c, text)


async def _refusal(c: Coordinator) -> str:
    """What a request is told once the controller has met the restarted backend."""
    for _ in range(100):
        with pytest.raises(BackendUnavailable) as err:     # never an answer
            await _execute(c, COUNT)
        if OLDER in str(err.value):
            break
        await asyncio.sleep(0.1)
    return str(err.value)


def test_a_backend_restored_from_an_older_copy_is_refused(tmp_path: Path) -> None:
    saved = tmp_path / "saved"

    def restart(procs: list[Proc], addr: str, *, keep: str = "", put: str = "") -> None:
        """b1 stopped; its data dir kept as `keep`, or replaced by copy `put`; started."""
        procs[1].stop()
        if keep:
            shutil.copytree(tmp_path / "b1", saved / keep)
        if put:
            shutil.rmtree(tmp_path / "b1")
            shutil.copytree(saved / put, tmp_path / "b1")
        procs[1] = backend(tmp_path / "b1", addr)
        procs[1].wait_ready(30)

    async def scenario(procs: list[Proc], addrs: list[str]) -> None:
        c = await census(addrs, tmp_path / "c")
        restart(procs, addrs[1], keep="before-update")
        # A two-phase unit: every record changed, on both backends.
        await _answered(c, "UPDATE ((FILE = Census)) <AREA = 2.5>")
        two_phase, _ = _commits(tmp_path / "b1")
        restart(procs, addrs[1], keep="after-update", put="before-update")
        why = await _refusal(c)
        assert why.startswith(f"backend b1 ({addrs[1]}): {OLDER}: of the traffic units of "
                              "controller run "), why
        assert f"it told this controller it had committed seq {two_phase}" in why, why

        # Its latest data dir is admitted; then one-phase inserts into an existing
        # cluster, half of them placed on b1.
        restart(procs, addrs[1], put="after-update")
        [res] = await _answered(c, COUNT)
        assert res.records == [{"COUNT(CITY)": 10}]
        for i in range(4):
            await _execute(c, f"INSERT (<FILE, Census>, <CITY, c0>, <POP, {i}>)")
        after_two_phase, carried = _commits(tmp_path / "b1")
        assert after_two_phase == two_phase and carried > two_phase   # one phase only
        restart(procs, addrs[1], keep="latest", put="after-update")
        why = await _refusal(c)
        assert f"holds the writes of up to seq {two_phase}, but it told this controller " \
               f"it had committed seq {carried}" in why, why
        await c.close()

        # A controller started again refuses it too; its latest data dir is admitted.
        again = Coordinator(addrs, connect_timeout=10, log_path=tmp_path / "c" / "decisions.db")
        with pytest.raises(BackendUnavailable, match=OLDER):
            await again.start()
        await again.close()
        restart(procs, addrs[1], put="latest")
        again = Coordinator(addrs, connect_timeout=10, log_path=tmp_path / "c" / "decisions.db")
        await again.start()
        [res] = await _execute(again, COUNT)
        assert res.records == [{"COUNT(CITY)": 14}]
        await again.close()

    run(tmp_path, scenario)


def test_a_backend_restored_empty_and_let_go_starts_anew(tmp_path: Path) -> None:
    """Taken out of "served" and started empty (its records given up), a backend that
    told of commits is admitted, and what it told before no longer holds."""
    async def scenario(procs: list[Proc], addrs: list[str]) -> None:
        c = await census(addrs, tmp_path / "c")
        assert c.decisions.carried.by_backend["b1"]
        procs[1].stop()
        shutil.rmtree(tmp_path / "b1")
        c.membership.members.served.discard("b1")
        procs[1] = backend(tmp_path / "b1", addrs[1])
        procs[1].wait_ready(30)
        [res] = await _answered(c, COUNT)
        assert res.records[0]["COUNT(CITY)"] < 10        # b1's records are gone
        assert "b1" not in c.decisions.carried.by_backend
        await c.close()
        with closing(sqlite3.connect(tmp_path / "c" / "decisions.db")) as conn:
            assert conn.execute("SELECT COUNT(*) FROM carried WHERE backend = 'b1' "
                                "AND epoch != ?", (c.bus.epoch,)).fetchone()[0] == 0

    run(tmp_path, scenario)


def _carried(told: dict[str, dict[str, int]]) -> Carried:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE epochs (epoch TEXT PRIMARY KEY, decided INTEGER)")
    carried = Carried(conn)
    for name, epochs in told.items():
        for epoch, seq in epochs.items():
            carried.told(name, (epoch, seq))
    return carried


def test_what_a_backend_lists_is_checked_against_what_it_told() -> None:
    c = _carried({"b1": {"e1": 7, "e2": 3}})
    assert c.older("b1", [("e1", 7), ("e2", 3)]) == ""
    assert c.older("b1", [("e0", 2), ("e1", 9), ("e2", 4)]) == ""    # more is fine
    assert c.older("b0", []) == ""                                   # it told nothing
    assert "holds the writes of up to seq 2, but it told this controller it had " \
           "committed seq 3" in c.older("b1", [("e1", 7), ("e2", 2)])
    # An epoch not listed: none carried out in it, unless the backend lists as many
    # epochs as it keeps (the one told may be older than them all).
    assert "holds the writes of none, but it told this controller it had committed " \
           "seq 3" in c.older("b1", [("e1", 7)])
    full = [(f"x{i}", 1) for i in range(COMMITTED_RUNS - 1)] + [("e1", 7)]
    assert c.older("b1", full) == ""
    assert c.older("b1", full[:-1] + [("e1", 6)]) != ""
    c.forget("b1")
    assert c.older("b1", []) == ""
