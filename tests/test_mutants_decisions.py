"""The controller's decision log (controller/decisions.py) in process, on real SQLite files:
what it keeps on disk and reads back, group commit, where each synchronous mode writes,
checkpoints, dropping forgotten decisions, presumed abort and what it says it cannot
cover. Listed in docs/mutation.md."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest

from controller import carried, decisions
from controller.decisions import Decisions, Key, PresumedAborted
from mbds import metrics

ME = threading.current_thread().name


def _rows(path: Path) -> dict[Key, str]:
    with closing(sqlite3.connect(path)) as conn:
        return {(e, s): w for e, s, w in conn.execute("SELECT epoch, seq, waiting FROM decisions")}


def _epochs(path: Path) -> dict[str, int | None]:
    with closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT epoch, decided FROM epochs"))


def _in_file_itself(path: Path, copy: Path) -> set[int]:
    """The seqs the database file holds without its WAL (what checkpoints copied)."""
    shutil.copyfile(path, copy)
    try:
        with closing(sqlite3.connect(copy)) as conn:
            return {s for (s,) in conn.execute("SELECT seq FROM decisions")}
    except sqlite3.OperationalError:        # not even the table yet
        return set()
    finally:
        copy.unlink()


async def _checkpoint_done(d: Decisions) -> None:
    if d._checkpointing is not None:
        await asyncio.wait([d._checkpointing])


def _group_sizes() -> tuple[float, int]:
    child = metrics.child(metrics.COMMIT_GROUP, "")
    return child.sum, sum(child.counts)


def _refuse_epoch(path: Path, epoch: str) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON decisions WHEN NEW.epoch = "
                     f"'{epoch}' BEGIN SELECT RAISE(ABORT, 'refused'); END")
        conn.commit()


@pytest.mark.parametrize("mode, level, inline", [
    (None, 1, True), ("NORMAL", 1, True), ("normal", 1, True), ("1", 1, True),
    ("OFF", 0, True), ("off", 0, True), ("0", 0, True),
    ("FULL", 2, False), ("2", 2, False), ("EXTRA", 3, False)])
def test_each_synchronous_mode_writes_where_it_should(
        tmp_path: Path, mode: str | None, level: int, inline: bool) -> None:
    """OFF and NORMAL write a decision on the event loop, FULL and EXTRA in the log's
    thread; an epoch is always written synced, then the mode is restored; only NORMAL
    turns SQLite's own checkpoints off (the log runs them)."""
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path) if mode is None else Decisions(path, mode)
        seen: list[tuple[str, str]] = []
        d.conn.set_trace_callback(
            lambda s: seen.append((threading.current_thread().name, s.lower())))
        d.begin("e")
        await d.commit(("e", 1), ["b0"])
        d.conn.set_trace_callback(None)
        stmts = [s for _, s in seen]
        full = stmts.index("pragma synchronous=full")
        assert full < next(i for i, s in enumerate(stmts) if "into epochs" in s)
        assert d.conn.execute("PRAGMA synchronous").fetchone()[0] == level
        writers = {t for t, s in seen if "into decisions" in s}
        if inline:
            assert writers == {ME}
        else:
            assert len(writers) == 1 and writers.pop().startswith("decision-log_")
        assert d.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == (
            0 if level == 1 else 1000)
        await d.close()

    asyncio.run(run())
    assert _rows(path) == {("e", 1): '["b0"]'} and _epochs(path) == {"e": 1}


def test_decisions_and_decided_seqs_are_read_back_after_a_reopen(tmp_path: Path) -> None:
    """The log makes its directory, keeps each decision with the backends it waits for and
    each epoch's highest decided seq, on disk and in memory, and reads them back."""
    path = tmp_path / "a" / "b" / "decisions.db"

    async def first() -> None:
        d = Decisions(path, "NORMAL")
        d.begin("e")
        await d.commit(("e", 5), ["b1", "b0"])
        await d.commit(("e", 3), ["b2"])
        assert d.decided == {"e": 5}
        d.heard("b0", [("e", 5)])
        assert d.covers(("e", 6)) and not d.behind
        d.heard("b1", [("e", 6)])
        d.heard("b2", [("e", 6)])
        assert d.behind == {"e": ("b1", 6)}      # the first backend that showed it
        await d.close()

    async def second() -> None:
        d = Decisions(path, "FULL")
        assert d.decided == {"e": 5}
        assert d.logged == {("e", 5): {"b0", "b1"}, ("e", 3): {"b2"}}
        assert await d.outcome(("e", 3)) is True
        await d.close()

    asyncio.run(first())
    assert _rows(path) == {("e", 5): '["b0", "b1"]', ("e", 3): '["b2"]'}
    assert _epochs(path) == {"e": 5}
    asyncio.run(second())


def test_a_log_upgraded_to_decided_seqs_opens_again(tmp_path: Path) -> None:
    """A log whose epochs table lacked the decided column gets it once, and opens again."""
    path = tmp_path / "decisions.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE decisions (epoch TEXT NOT NULL, seq INTEGER NOT NULL, "
                     "waiting TEXT NOT NULL, PRIMARY KEY (epoch, seq))")
        conn.execute("CREATE TABLE epochs (epoch TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO epochs VALUES ('old')")
        conn.commit()

    async def run() -> dict[str, int | None]:
        d = Decisions(path, "NORMAL")
        d.begin("new")
        decided = dict(d.decided)
        await d.close()
        return decided

    assert asyncio.run(run()) == {"old": None, "new": 0}
    assert asyncio.run(run()) == {"old": None, "new": 0}


def test_an_upgrade_that_fails_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    """An old log the upgrade cannot read fails with SQLite's own error, and the upgrade's
    changes are rolled back."""
    path = tmp_path / "decisions.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE decisions (unit TEXT)")
        conn.commit()

    async def run() -> None:
        with pytest.raises(sqlite3.OperationalError, match="no such column: epoch"):
            Decisions(path, "NORMAL")

    asyncio.run(run())
    with closing(sqlite3.connect(path)) as conn:
        assert {n for (n,) in conn.execute("SELECT name FROM sqlite_master")} == {"decisions"}


def test_decisions_awaited_together_are_written_in_one_transaction(tmp_path: Path) -> None:
    """With FULL, decisions that come while the log is idle or busy go together in the next
    transaction with the drops waiting, each epoch's decided seq the group's highest."""
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, "FULL")
        d.begin("e")
        await d.commit(("e", 1), ["b0"])
        d.forgotten(("e", 1), "b0")
        begins: list[str] = []
        d.conn.set_trace_callback(
            lambda s: begins.append(s) if s.lower().startswith("begin") else None)
        before = _group_sizes()
        assert await asyncio.gather(d.commit(("e", 5), ["b0"]), d.commit(("e", 3), ["b1"]),
                                    d.commit(("f", 2), ["b1"])) == [None, None, None]
        after = _group_sizes()
        assert len(begins) == 1
        assert (after[0] - before[0], after[1] - before[1]) == (4, 1)
        assert d.decided == {"e": 5}
        await d.close()

    asyncio.run(run())
    assert set(_rows(path)) == {("e", 5), ("e", 3), ("f", 2)}
    assert _epochs(path) == {"e": 5}


def test_a_failing_write_fails_its_whole_group_and_the_next_group_is_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """With FULL, every decision of a group whose transaction fails fails with its error
    (logged once), an outcome asked meanwhile is abort, and the next group is written."""
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, "FULL")
        _refuse_epoch(path, "bad")
        got = await asyncio.gather(d.commit(("e", 1), ["b0"]), d.commit(("bad", 1), ["b0"]),
                                   d.outcome(("bad", 1)), return_exceptions=True)
        assert [type(g) for g in got] == [sqlite3.IntegrityError, sqlite3.IntegrityError, bool]
        assert str(got[0]) == "refused" and got[2] is False
        await d.commit(("e", 2), ["b0"])
        assert await d.outcome(("e", 1)) is False and await d.outcome(("e", 2)) is True
        await d.close()

    with caplog.at_level(logging.ERROR, logger="mbds.controller"):
        asyncio.run(run())
    assert [r.getMessage() for r in caplog.records] == ["the decision log failed: refused"]
    assert set(_rows(path)) == {("e", 2)}


def test_an_inline_write_that_fails_fails_its_decision_and_the_next_is_written(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """With NORMAL, a decision whose write fails raises its error (logged) and is not
    logged; the next decision is written."""
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        _refuse_epoch(path, "bad")
        with pytest.raises(sqlite3.IntegrityError, match="refused"):
            await d.commit(("bad", 1), ["b0"])
        await d.commit(("e", 2), ["b0"])
        assert await d.outcome(("bad", 1)) is False and await d.outcome(("e", 2)) is True
        await _checkpoint_done(d)       # the one the failure started
        await d.close()

    with caplog.at_level(logging.ERROR, logger="mbds.controller"):
        asyncio.run(run())
    assert [r.getMessage() for r in caplog.records] == ["the decision log failed: refused"]
    assert set(_rows(path)) == {("e", 2)}


@pytest.mark.parametrize("mode", ["NORMAL", "FULL"])
def test_a_decision_is_dropped_once_every_backend_named_has_forgotten_it(
        tmp_path: Path, mode: str) -> None:
    """A decision stays until each backend it names has forgotten it (said so, or no longer
    lists it at its Hello), then goes from the file with the next decision written."""
    path = tmp_path / "decisions.db"
    k1, k2, k3, k4, k5 = (("e", i) for i in range(1, 6))

    async def run() -> None:
        d = Decisions(path, mode)
        for k, names in [(k1, ["b0", "b1"]), (k2, ["b0"]), (k3, ["b1"]), (k4, ["b0", "b1"])]:
            await d.commit(k, names)
        d.forgotten(k4, "b0")
        d.forgotten(("e", 99), "b0")                     # not logged: nothing to do
        assert d.logged == {k1: {"b0", "b1"}, k2: {"b0"}, k3: {"b1"}, k4: {"b1"}}
        d.settled("b0", {k2})
        assert d.logged == {k1: {"b1"}, k2: {"b0"}, k3: {"b1"}, k4: {"b1"}}
        d.settled("b1", {k3})
        assert d.logged == {k2: {"b0"}, k3: {"b1"}}
        assert set(_rows(path)) == {k1, k2, k3, k4}      # until the next write
        before = _group_sizes()
        await d.commit(k5, ["b0"])
        after = _group_sizes()
        assert (after[0] - before[0], after[1] - before[1]) == (3, 1)
        await d.close()

    asyncio.run(run())
    assert set(_rows(path)) == {k2, k3, k5}


def test_a_unit_declared_aborted_cannot_be_committed_until_pp_is_done(tmp_path: Path) -> None:
    """Asked about an undecided unit, the log answers abort and refuses its commit
    afterwards; once PP is done with it the log no longer keeps it."""

    async def run() -> None:
        d = Decisions(tmp_path / "decisions.db", "NORMAL")
        assert await d.outcome(("e", 5)) is False
        with pytest.raises(PresumedAborted) as e:
            await d.commit(("e", 5), ["b0"])
        assert str(e.value) == ("traffic unit 5 was aborted while a backend was in doubt "
                                "about it")
        d.finished(("e", 5))
        assert d.aborted == set()
        await d.close()

    asyncio.run(run())


def test_an_outcome_asked_while_its_decision_is_written_waits_for_it(tmp_path: Path) -> None:
    """With FULL, a backend asking about a unit whose decision is being written gets commit
    once it is written."""

    async def run() -> None:
        d = Decisions(tmp_path / "decisions.db", "FULL")
        assert await asyncio.gather(d.commit(("e", 1), ["b0"]), d.outcome(("e", 1))) == [
            None, True]
        await d.close()

    asyncio.run(run())


def test_normal_mode_checkpoints_every_n_decisions_in_the_log_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """With NORMAL, the WAL is copied into the database file after every CHECKPOINT_EVERY
    decisions, not before, by the log's thread, without a warning."""
    monkeypatch.setattr(decisions, "CHECKPOINT_EVERY", 3)
    threads: list[str] = []
    checkpoint = Decisions._checkpoint

    def recorded(self: Decisions) -> None:
        threads.append(threading.current_thread().name)
        checkpoint(self)

    monkeypatch.setattr(Decisions, "_checkpoint", recorded)
    path, copy = tmp_path / "decisions.db", tmp_path / "copy.db"

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        for seq, in_file in [(1, set()), (2, set()), (3, {1, 2, 3}), (4, {1, 2, 3}),
                             (5, {1, 2, 3}), (6, {1, 2, 3, 4, 5, 6})]:
            await d.commit(("e", seq), ["b0"])
            await _checkpoint_done(d)
            assert _in_file_itself(path, copy) == in_file, seq
        await d.close()

    with caplog.at_level(logging.WARNING, logger="mbds.controller"):
        asyncio.run(run())
    assert len(threads) == 2 and all(t.startswith("decision-log_") for t in threads)
    assert not caplog.records


def test_a_failed_checkpoint_is_logged_and_the_next_one_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint that fails (here: the log's directory moved away) is logged as a
    warning; decisions go on, and the next checkpoint copies them all."""
    monkeypatch.setattr(decisions, "CHECKPOINT_EVERY", 1)
    path, copy = tmp_path / "d" / "decisions.db", tmp_path / "copy.db"

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        (tmp_path / "d").rename(tmp_path / "moved")
        await d.commit(("e", 1), ["b0"])
        await _checkpoint_done(d)
        (tmp_path / "moved").rename(tmp_path / "d")
        await d.commit(("e", 2), ["b0"])
        await _checkpoint_done(d)
        assert _in_file_itself(path, copy) == {1, 2}
        await d.close()

    with caplog.at_level(logging.WARNING, logger="mbds.controller"):
        asyncio.run(run())
    assert [r.getMessage() for r in caplog.records] == [
        "checkpointing the decision log failed: unable to open database file"]


def test_close_waits_for_the_log_thread_and_closes_every_connection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Closed while a checkpoint runs, the log waits for it, its thread is gone and its
    connections are closed (the last one removes the WAL)."""
    monkeypatch.setattr(decisions, "CHECKPOINT_EVERY", 1)
    path = tmp_path / "decisions.db"
    before = set(threading.enumerate())

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        await d.commit(("e", 1), ["b0"])
        await d.close()

    asyncio.run(run())
    assert not [t for t in threading.enumerate()
                if t not in before and t.name.startswith("decision-log")]
    assert not Path(f"{path}-wal").exists()
    assert set(_rows(path)) == {("e", 1)}


@pytest.mark.parametrize("mode", ["NORMAL", "OFF", "FULL"])
def test_a_log_without_a_path_writes_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Without a path the log is in memory: it decides as usual and writes no file, not
    even for checkpoints."""
    monkeypatch.setattr(decisions, "CHECKPOINT_EVERY", 1)
    monkeypatch.chdir(tmp_path)

    async def run() -> None:
        d = Decisions(None, mode)
        d.begin("e")
        for seq in (1, 2):
            await d.commit(("e", seq), ["b0"])
        assert await d.outcome(("e", 2)) is True and d.decided == {"e": 2}
        await d.close()

    asyncio.run(run())
    assert os.listdir(tmp_path) == []


def test_what_the_log_does_not_cover_names_long_epochs_and_paths_shortened(
        tmp_path: Path) -> None:
    """An epoch is shown to 40 characters and the log's path to 200, each then with its
    length."""
    path = tmp_path / ("d" * (201 - len(f"{tmp_path}//decisions.db"))) / "decisions.db"
    assert len(str(path)) == 201

    async def run() -> str:
        d = Decisions(path, "NORMAL")
        why = d.outside("b1", [("x" * 41, 1)])
        await d.close()
        return why

    why = asyncio.run(run())
    assert f"(epoch {'x' * 40}… (41 characters), seq 1)" in why
    assert f"decision log ({str(path)[:200]}… (201 characters)) does not cover" in why


def _carried(path: Path) -> dict[tuple[str, str], int]:
    with closing(sqlite3.connect(path)) as conn:
        return {(b, e): s for b, e, s in conn.execute("SELECT backend, epoch, seq FROM carried")}


def _traced(d: Decisions) -> list[tuple[str, str]]:
    """The log's statements from now on, each with the thread that ran it."""
    seen: list[tuple[str, str]] = []
    d.conn.set_trace_callback(
        lambda s: seen.append((threading.current_thread().name, s.lower())))
    return seen


def _ran_in(seen: list[tuple[str, str]], text: str, inline: bool) -> None:
    threads = {t for t, s in seen if text in s}
    assert threads, f"no statement with {text!r}"
    if inline:
        assert threads == {ME}
    else:
        assert len(threads) == 1 and threads.pop().startswith("decision-log_")


@pytest.mark.parametrize("mode, inline", [("NORMAL", True), ("FULL", False)])
def test_what_backends_carried_out_goes_in_the_next_decisions_transaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, inline: bool) -> None:
    """Told before a decision, it is written in the decision's own transaction, where the
    decision is written (the event loop, or the log's thread)."""
    monkeypatch.setattr(decisions, "TOLD_EVERY", 3600)
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, mode)
        d.begin("e")
        d.carried_out("b0", ("e", 3))
        d.carried_out("b1", ("e", 2))
        seen = _traced(d)
        await d.commit(("e", 4), ["b0", "b1"])
        d.conn.set_trace_callback(None)
        assert _carried(path) == {("b0", "e"): 3, ("b1", "e"): 2}
        _ran_in(seen, "into carried", inline)
        stmts = [s for _, s in seen]
        begin, end = stmts.index("begin immediate"), stmts.index("commit")
        assert begin < next(i for i, s in enumerate(stmts) if "into carried" in s) < end
        assert begin < next(i for i, s in enumerate(stmts) if "into decisions" in s) < end
        await d.close()

    asyncio.run(run())


@pytest.mark.parametrize("mode, inline", [("NORMAL", True), ("OFF", True), ("FULL", False)])
def test_what_backends_carried_out_is_written_within_told_every_without_a_decision(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, inline: bool) -> None:
    """With no decision to take it along, what was told is written at the next tick, on
    the event loop or in the log's thread as a decision would be; ticks with nothing told
    write nothing and the ticking goes on."""
    monkeypatch.setattr(decisions, "TOLD_EVERY", 0.01)
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, mode)
        d.begin("e")
        seen = _traced(d)
        await asyncio.sleep(0.05)
        assert not [s for _, s in seen if "carried" in s]
        d.carried_out("b0", ("e", 3))
        async with asyncio.timeout(10):
            while _carried(path) != {("b0", "e"): 3}:
                await asyncio.sleep(0.01)
        d.carried_out("b0", ("e", 5))          # and again at a later tick
        async with asyncio.timeout(10):
            while _carried(path) != {("b0", "e"): 5}:
                await asyncio.sleep(0.01)
        d.conn.set_trace_callback(None)
        _ran_in(seen, "into carried", inline)
        await d.close()

    asyncio.run(run())


@pytest.mark.parametrize("mode, message", [
    ("NORMAL", "writing what the backends carried out failed: disk I/O error"),
    ("FULL", "the decision log failed: disk I/O error")])
def test_a_failed_write_of_what_was_told_is_logged_and_written_at_the_next_tick(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        mode: str, message: str) -> None:
    monkeypatch.setattr(decisions, "TOLD_EVERY", 0.01)
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, mode)
        d.begin("e")
        write, failed = d._write, []

        def fail_once(*args: object) -> None:
            if not failed:
                failed.append(1)
                raise sqlite3.OperationalError("disk I/O error")
            write(*args)  # type: ignore[arg-type]

        d._write = fail_once  # type: ignore[method-assign]
        d.carried_out("b0", ("e", 3))
        async with asyncio.timeout(10):
            while _carried(path) != {("b0", "e"): 3}:
                await asyncio.sleep(0.01)
        assert failed
        await d.close()

    with caplog.at_level(logging.WARNING, logger="mbds.controller"):
        asyncio.run(run())
    assert [r.getMessage() for r in caplog.records] == [message]


@pytest.mark.parametrize("mode", ["NORMAL", "FULL"])
def test_close_writes_what_was_told_since_the_last_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setattr(decisions, "TOLD_EVERY", 3600)
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, mode)
        d.begin("e")
        d.carried_out("b0", ("e", 5))
        d.carried_out("b1", ("e", 4))
        await d.close()

    asyncio.run(run())
    assert _carried(path) == {("b0", "e"): 5, ("b1", "e"): 4}


def test_a_failed_write_at_close_is_logged_and_the_log_still_closes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(decisions, "TOLD_EVERY", 3600)
    path = tmp_path / "decisions.db"

    async def run() -> Decisions:
        d = Decisions(path, "NORMAL")
        d.begin("e")

        def fail(*args: object) -> None:
            raise sqlite3.OperationalError("disk I/O error")

        d._write = fail  # type: ignore[method-assign]
        d.carried_out("b0", ("e", 5))
        await d.close()
        return d

    with caplog.at_level(logging.WARNING, logger="mbds.controller"):
        d = asyncio.run(run())
    assert [r.getMessage() for r in caplog.records] == [
        "writing what the backends carried out failed: disk I/O error"]
    with pytest.raises(sqlite3.ProgrammingError):
        d.conn.execute("SELECT 1")
    assert _carried(path) == {}


@pytest.mark.parametrize("mode, inline", [("NORMAL", True), ("OFF", True), ("FULL", False)])
def test_a_backend_let_go_has_its_rows_deleted_synced_before_it_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, inline: bool) -> None:
    """What a backend joining empty told before is deleted, on disk (synchronous FULL for
    the statement, the mode then restored) before `let_go` returns, where the log writes;
    what it told that was not yet written goes too, and the other backends' rows stay.
    A backend that told nothing costs no statement."""
    monkeypatch.setattr(decisions, "TOLD_EVERY", 3600)
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, mode)
        d.begin("e")
        d.carried_out("b0", ("e", 3))
        d.carried_out("b1", ("e", 4))
        await d.commit(("e", 5), ["b0", "b1"])
        d.carried_out("b0", ("e", 6))               # told, not yet written
        seen = _traced(d)
        await d.let_go("b0")
        assert _carried(path) == {("b1", "e"): 4}
        assert "b0" not in d.carried.by_backend and d.carried.new == {}
        _ran_in(seen, "delete from carried", inline)
        stmts = [s for _, s in seen]
        delete = next(i for i, s in enumerate(stmts) if "delete from carried" in s)
        assert stmts[delete - 1] == "pragma synchronous=full"
        assert stmts[delete + 1] == f"pragma synchronous={mode.lower()}"
        seen.clear()
        await d.let_go("b9")
        assert seen == []
        d.conn.set_trace_callback(None)
        await d.close()

    asyncio.run(run())
    assert _carried(path) == {("b1", "e"): 4}


def test_what_was_carried_out_is_read_back_for_the_latest_runs_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reopened, the log knows each backend's highest seq per run, in the order the runs
    began; rows of runs older than the latest COMMITTED_RUNS (which a backend no longer
    lists) are deleted from the file too."""
    monkeypatch.setattr(decisions, "TOLD_EVERY", 3600)
    monkeypatch.setattr(carried, "COMMITTED_RUNS", 3)
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        for epoch in ("e1", "e2", "e3", "e4"):
            d.begin(epoch)
            d.carried_out("b0", (epoch, 7))
        d.carried_out("b1", ("e4", 2))
        d.carried_out("b1", ("e2", 5))
        await d.close()
        d = Decisions(path, "NORMAL")
        assert d.carried.by_backend == {"b0": {"e2": 7, "e3": 7, "e4": 7},
                                        "b1": {"e2": 5, "e4": 2}}
        assert list(d.carried.by_backend["b1"]) == ["e2", "e4"]     # the runs' order
        assert d.carried.new == {}
        await d.close()

    asyncio.run(run())
    assert _carried(path) == {("b0", "e2"): 7, ("b0", "e3"): 7, ("b0", "e4"): 7,
                              ("b1", "e2"): 5, ("b1", "e4"): 2}


def test_a_backend_told_is_kept_at_its_highest_seq_for_its_latest_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A lower or equal seq changes nothing and is not written again; seq 1 counts; a
    backend's runs beyond COMMITTED_RUNS drop the oldest."""
    monkeypatch.setattr(carried, "COMMITTED_RUNS", 2)
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute("CREATE TABLE epochs (epoch TEXT PRIMARY KEY, decided INTEGER)")
        c = carried.Carried(conn)
        c.told("b0", ("e1", 1))
        assert c.take() == [("b0", "e1", 1)]
        c.told("b0", ("e1", 5))
        c.told("b0", ("e1", 3))
        assert c.by_backend == {"b0": {"e1": 5}} and c.take() == [("b0", "e1", 5)]
        c.told("b0", ("e1", 5))
        assert c.take() == []
        c.told("b0", ("e2", 1))
        assert c.by_backend == {"b0": {"e1": 5, "e2": 1}}
        c.told("b0", ("e3", 4))
        assert c.by_backend == {"b0": {"e2": 1, "e3": 4}}
        # What a failed write puts back is kept with anything higher told meanwhile.
        rows = c.take()
        c.told("b0", ("e3", 9))
        c.put_back(rows)
        c.put_back([("b1", "e3", 2)])
        assert c.new == {("b0", "e2"): 1, ("b0", "e3"): 9, ("b1", "e3"): 2}
        c.forget("b0")
        assert c.by_backend == {} and c.new == {("b1", "e3"): 2}


OLDER = ("its data dir is an older copy of itself: of the traffic units of controller run "
         "{epoch} it holds the writes of {holds}, but it told this controller it had "
         "committed seq {seq}, so writes it acknowledged are lost (its data dir was "
         "restored from a copy, or its disk lost what it had reported durable). Restore "
         "every data dir of the cluster, the controller's too, from one copy taken while "
         "the cluster was stopped; or, to go on without its records, remove it from "
         "\"served\" in the controller's members.json and start it with an empty data dir")


def test_a_backend_listing_less_than_it_told_is_an_older_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(carried, "COMMITTED_RUNS", 3)
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute("CREATE TABLE epochs (epoch TEXT PRIMARY KEY, decided INTEGER)")
        c = carried.Carried(conn)
        c.told("b0", ("e1", 5))
        c.told("b0", ("e2", 3))
        long = "x" * 41
        c.told("b1", (long, 2))
        assert c.older("b0", [("e1", 5), ("e2", 3)]) == ""
        assert c.older("b0", [("e2", 4), ("e1", 6)]) == ""
        assert c.older("b9", []) == ""                       # told nothing
        c.told("b2", ("e1", 1))
        assert c.older("b2", []) == OLDER.format(epoch="e1", holds="none", seq=1)
        assert c.older("b0", [("e1", 5), ("e2", 2)]) == OLDER.format(
            epoch="e2", holds="up to seq 2", seq=3)
        assert c.older("b0", [("e2", 3)]) == OLDER.format(epoch="e1", holds="none", seq=5)
        assert c.older("b0", [("e1", 5), ("e2", 3), ("x", 1), ("y", 1)]) == ""
        assert c.older("b0", [("e2", 3), ("x", 1), ("y", 1)]) == ""   # e1: beyond its list
        assert c.older("b0", [("e2", 3), ("x", 1)]) == OLDER.format(
            epoch="e1", holds="none", seq=5)
        assert c.older("b1", []) == OLDER.format(
            epoch=f"{'x' * 40}… (41 characters)", holds="none", seq=2)


@pytest.mark.parametrize("what", ["decision", "told"])
def test_a_failed_write_starts_a_checkpoint_at_once_which_empties_the_wal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        what: str) -> None:
    """With NORMAL, a write that fails (a decision, or what the backends told) is
    followed by a checkpoint without waiting for CHECKPOINT_EVERY decisions, as a full
    WAL is what a checkpoint empties: what was written before is then in the file itself,
    and the WAL starts again from nothing."""
    monkeypatch.setattr(decisions, "CHECKPOINT_EVERY", 1000)
    monkeypatch.setattr(decisions, "TOLD_EVERY", 0.01)
    path, copy = tmp_path / "decisions.db", tmp_path / "copy.db"
    wal = Path(f"{path}-wal")

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        d.begin("e")
        await d.commit(("e", 1), ["b0"])
        assert _in_file_itself(path, copy) == set() and wal.stat().st_size > 0
        if what == "decision":
            _refuse_epoch(path, "bad")
            with pytest.raises(sqlite3.IntegrityError):
                await d.commit(("bad", 1), ["b0"])
        else:
            write, failed = d._write, []

            def fail(*args: object) -> None:     # at every tick: nothing more is written
                failed.append(1)
                raise sqlite3.OperationalError("disk I/O error")

            d._write = fail  # type: ignore[method-assign]
            d.carried_out("b0", ("e", 1))
            async with asyncio.timeout(10):
                while not failed:
                    await asyncio.sleep(0.01)
        await _checkpoint_done(d)
        assert _in_file_itself(path, copy) == {1}
        assert wal.stat().st_size == 0
        if what == "told":
            d._write = write  # type: ignore[method-assign]
        await d.close()

    with caplog.at_level(logging.CRITICAL, logger="mbds.controller"):
        asyncio.run(run())


def test_close_returns_only_once_a_running_checkpoint_has_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint still running in the log's thread when the log closes is waited for:
    its connection is not closed under it."""
    monkeypatch.setattr(decisions, "CHECKPOINT_EVERY", 1)
    release, ended = threading.Event(), threading.Event()

    def slow(self: Decisions) -> None:
        release.wait(10)
        ended.set()

    monkeypatch.setattr(Decisions, "_checkpoint", slow)

    async def run() -> None:
        d = Decisions(tmp_path / "decisions.db", "NORMAL")
        await d.commit(("e", 1), ["b0"])
        assert d._checkpointing is not None and not ended.is_set()
        timer = threading.Timer(0.2, release.set)
        timer.start()
        await d.close()
        assert ended.is_set()
        timer.join()

    asyncio.run(run())
