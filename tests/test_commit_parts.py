"""The commit protocol's parts on their own: a prepared unit's undo log puts back exactly
what was there, the writer's group commit reports a job done only once it is on disk
and rolls a failing job back alone, and the controller's decision log survives a
restart and presumes abort for what it never decided."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from backend import undo
from backend.store import Store
from backend.writer import Writer
from controller import bus, decisions
from controller.decisions import Decisions, PresumedAborted
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from mbds.values import to_pb

YAML = """
files:
  T:
    attributes: {K: integer, V: float, S: string}
    directory:
      K: {type: A, ranges: [[0, 99]]}
"""


def store_with_table(tmp_path: Path) -> tuple[Store, dict]:
    store = Store(tmp_path / "backend.db")
    [schema] = parse_definition(YAML)
    conn = store.writer()
    conn.executescript(undo.SCHEMA)
    conn.execute("BEGIN")
    store._create_file_table(conn, schema)
    conn.execute("COMMIT")
    return store, {"T": schema}


def rows(conn: sqlite3.Connection) -> list[tuple]:
    return conn.execute('SELECT rid, cluster_id, "K", "V", "S", _body FROM "r_T" '
                        "ORDER BY rid").fetchall()


def insert(conn: sqlite3.Connection, log: undo.UndoLog | None, *values: tuple) -> None:
    schema = parse_definition(YAML)[0]
    before = log.last_rid(schema) if log else 0
    conn.executemany('INSERT INTO "r_T" (cluster_id, "K", "V", "S", _body) '
                     "VALUES (?, ?, ?, ?, ?)", values)
    if log:
        log.inserted(schema, before)


def test_a_rolled_back_unit_leaves_every_row_as_it_was(tmp_path: Path) -> None:
    store, files = store_with_table(tmp_path)
    conn = store.writer()
    insert(conn, None, (1, 1, 1.5, "a", None), (1, 2, 2.0, "b", "body"), (2, 3, None, "c", None))
    before = rows(conn)
    conn.execute("BEGIN")
    log = undo.UndoLog(conn, ("e", 7))
    schema = files["T"]
    # The row with the highest rowid is deleted, then an INSERT adds rows (above it).
    log.rows(schema, '"K" = ?', [3])
    conn.execute('DELETE FROM "r_T" WHERE "K" = 3')
    insert(conn, log, (2, 4, 4.0, "d", None), (2, 5, 5.0, "e", None))
    log.rows(schema, '"K" >= ?', [2])                      # an UPDATE of old and new rows
    conn.execute('UPDATE "r_T" SET "V" = "V" * 10, "S" = \'x\' WHERE "K" >= 2')
    log.rows(schema, '"K" = ?', [1])
    conn.execute('DELETE FROM "r_T" WHERE "K" = 1')
    conn.execute("COMMIT")
    assert log.wrote and rows(conn) != before
    assert undo.in_doubt(conn) == {("e", 7): log.unit}
    conn.execute("BEGIN")
    undo.roll_back(conn, log.unit, files)
    conn.execute("COMMIT")
    assert rows(conn) == before
    assert undo.in_doubt(conn) == {}
    assert conn.execute("SELECT COUNT(*) FROM undo").fetchone() == (0,)


def test_a_roll_back_puts_back_every_value_exactly(tmp_path: Path) -> None:
    """Old rows come back as they were, whatever they hold (a NUL in a string, the
    integers' and floats' extremes, text that looks like JSON), the older image of a
    row written twice last."""
    store, files = store_with_table(tmp_path)
    conn = store.writer()
    insert(conn, None, (1, 2**63 - 1, 1e300, "a\x00b", '{"x": 1}'),
           (1, -2**63, 5e-324, "123", None), (1, 0, 0.1, "null", "[1, 2]"),
           (1, 7, None, "ünï\u2028'\"", "\\n"))
    before = rows(conn)
    conn.execute("BEGIN")
    log = undo.UndoLog(conn, ("e", 8))
    log.rows(files["T"], "1 = 1", [])
    conn.execute('UPDATE "r_T" SET "S" = \'once\', "V" = 1.0')
    log.rows(files["T"], "1 = 1", [])
    conn.execute('DELETE FROM "r_T"')
    conn.execute("COMMIT")
    conn.execute("BEGIN")
    undo.roll_back(conn, log.unit, files)
    conn.execute("COMMIT")
    assert rows(conn) == before


def test_a_committed_unit_keeps_its_writes_and_forgets_its_undo_rows(tmp_path: Path) -> None:
    store, files = store_with_table(tmp_path)
    conn = store.writer()
    conn.execute("BEGIN")
    log = undo.UndoLog(conn, ("e", 1))
    insert(conn, log, (1, 1, 1.0, "a", None))
    conn.execute("COMMIT")
    after = rows(conn)
    conn.execute("BEGIN")
    undo.forget(conn, log.unit)
    conn.execute("COMMIT")
    assert rows(conn) == after and len(after) == 1
    assert undo.in_doubt(conn) == {}
    assert conn.execute("SELECT COUNT(*) FROM undo").fetchone() == (0,)


def test_a_unit_that_changed_nothing_has_nothing_to_undo(tmp_path: Path) -> None:
    store, files = store_with_table(tmp_path)
    conn = store.writer()
    conn.execute("BEGIN")
    log = undo.UndoLog(conn, ("e", 1))
    log.rows(files["T"], '"K" = ?', [42])
    insert(conn, log)
    assert not log.wrote
    log.drop()
    conn.execute("COMMIT")
    assert undo.in_doubt(conn) == {}


def test_the_writer_groups_jobs_and_rolls_a_failing_one_back_alone(tmp_path: Path) -> None:
    store, _ = store_with_table(tmp_path)
    writer = Writer(store)
    gate, running = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> bool:
        running.set()
        return gate.wait(10)

    first = writer.submit(hold)              # holds the writer: the rest queue meanwhile
    assert running.wait(10)

    def add(k: int):
        return writer.submit(lambda conn: insert(conn, None, (1, k, None, None, None)))

    def fail(conn: sqlite3.Connection) -> None:
        insert(conn, None, (1, 99, None, None, None))
        raise ValueError("refused")

    jobs = [add(1), writer.submit(fail), add(2)]
    groups = writer.groups
    gate.set()
    assert first.result(10) is True
    assert jobs[0].result(10) is None and jobs[2].result(10) is None
    with pytest.raises(ValueError, match="refused"):
        jobs[1].result(10)
    assert writer.groups == groups + 2          # the first job, then the three queued
    ks = [r[2] for r in rows(Store(tmp_path / "backend.db").reader())]
    assert ks == [1, 2]
    writer.shutdown()


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL", "OFF"])
def test_decisions_survive_a_restart_and_unknown_units_are_presumed_aborted(
        tmp_path: Path, synchronous: str) -> None:
    """Written on the event loop (OFF, NORMAL) or by the log's thread in groups (FULL)."""
    path = tmp_path / "decisions.db"

    async def first() -> None:
        d = Decisions(path, synchronous)
        assert d.inline == (synchronous != "FULL")
        await d.commit(("e1", 1), ["b0", "b1"])
        await d.commit(("e1", 2), ["b0"])
        assert await d.outcome(("e1", 3)) is False       # never decided: aborted now...
        with pytest.raises(PresumedAborted):
            await d.commit(("e1", 3), ["b0"])            # ...so PP cannot commit it later
        d.forgotten(("e1", 2), "b0")
        await d.commit(("e1", 4), ["b1"])                # the drop of 2 goes along
        await asyncio.sleep(0.05)
        await d.close()

    async def second() -> None:
        d = Decisions(path, synchronous)
        assert set(d.logged) == {("e1", 1), ("e1", 4)}
        assert await d.outcome(("e1", 1)) is True
        assert await d.outcome(("e1", 2)) is False
        d.settled("b1", {("e1", 1)})      # b1 still keeps 1 prepared, has forgotten 4
        assert d.logged == {("e1", 1): {"b0", "b1"}}
        d.settled("b0", set())
        assert d.logged == {("e1", 1): {"b1"}}
        await d.close()

    asyncio.run(first())
    asyncio.run(second())


def test_decisions_written_on_the_loop_reach_the_main_file_by_checkpoints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With NORMAL the log does not checkpoint on its own (that would sync on the event
    loop): its thread copies the WAL into the file every CHECKPOINT_EVERY decisions."""
    monkeypatch.setattr(decisions, "CHECKPOINT_EVERY", 3)
    path = tmp_path / "decisions.db"

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        checkpoints = 0
        for seq in range(1, 8):
            await d.commit(("e", seq), ["b0"])
            if d._checkpointing is not None:     # started by this decision, in the thread
                checkpoints += 1
                await d._checkpointing
        assert checkpoints == 2                   # after the 3rd and the 6th
        # The main file alone, as a reader that ignores the WAL sees it.
        main = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        in_file = main.execute("SELECT count(*) FROM decisions").fetchone()[0]
        main.close()
        assert in_file >= 6, in_file
        await d.close()

    asyncio.run(run())


def test_the_wal_of_decisions_written_without_a_pause_starts_again(tmp_path: Path) -> None:
    """Decisions come all the time, also while the thread checkpoints: the WAL must still
    start again from nothing after a checkpoint, or it grows until the disk is full and
    no unit can commit (a PASSIVE checkpoint alone never finds it quiet)."""
    path = tmp_path / "decisions.db"
    wal = Path(f"{path}-wal")

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        for seq in range(1, 6 * decisions.CHECKPOINT_EVERY + 1):
            await d.commit(("e", seq), ["b0", "b1"])
            d.forgotten(("e", seq), "b0")
            d.forgotten(("e", seq), "b1")
            await asyncio.sleep(0)
        if d._checkpointing is not None:
            await d._checkpointing
        # Six checkpoints' worth was written; what is left is what came after the last
        # one began (each decision writes about four pages).
        assert wal.stat().st_size <= decisions.CHECKPOINT_EVERY * 5 * 4096, wal.stat()
        await d.close()

    asyncio.run(run())


def test_a_wal_left_by_an_earlier_run_goes_into_the_file_at_open(tmp_path: Path) -> None:
    """A run that ended without a checkpoint (killed) leaves its WAL: the next one empties
    it into the file before it writes, so a WAL that filled the disk frees it."""
    path = tmp_path / "decisions.db"
    wal = Path(f"{path}-wal")
    asyncio.run(_made(path))
    earlier = sqlite3.connect(path, isolation_level=None)      # kept open: no checkpoint
    earlier.execute("PRAGMA wal_autocheckpoint=0")             # at its close either
    for seq in range(2000):
        earlier.execute("INSERT INTO decisions VALUES ('old', ?, '[\"b0\"]')", (seq,))
    assert wal.stat().st_size > 1 << 20

    async def run() -> None:
        d = Decisions(path, "NORMAL")
        assert wal.stat().st_size == 0
        assert len(d.logged) == 2000
        await d.close()

    asyncio.run(run())
    earlier.close()


async def _made(path: Path) -> None:
    await Decisions(path, "NORMAL").close()


def test_a_unit_framed_as_bytes_parses_as_the_message_built_field_by_field() -> None:
    """The bus frames a unit the same for every backend once as bytes and adds its seq
    and directory entries: the backend must read exactly the unit PP meant."""
    tu = pb.TrafficUnit(transaction=True, predicate_count=3, split_search=True,
                        requests=[pb.Request(op=pb.RETRIEVE)] * 2)
    tu.directory.SetInParent()
    update = pb.DirectoryUpdate(descriptors=[pb.Descriptor(
        id=7, file="PAPER", attr="CITY", kind="C", value=to_pb("x" * 300))])
    for seq in (0, 1, 127, 128, 300, 2**40):
        for entries in (pb.DirectoryUpdate(), update):
            framed = bus.traffic_unit_message(tu.SerializeToString(), seq,
                                              entries.SerializeToString())
            batch = pb.BusBatch.FromString(bus._framed(bus._BATCH_MESSAGE, framed))
            want = pb.TrafficUnit()
            want.CopyFrom(tu)
            want.seq = seq
            want.directory.MergeFrom(entries)
            assert list(batch.messages) == [pb.BusMessage(traffic_unit=want)]


def test_protocol_messages_carry_the_unit(tmp_path: Path) -> None:
    """In-doubt units travel as (epoch, seq) both ways."""
    reply = pb.HelloReply(in_doubt=[pb.UnitId(epoch="e", seq=3)])
    out = pb.Outcomes(outcomes=[pb.Outcome(unit=reply.in_doubt[0], commit=True)])
    assert (out.outcomes[0].unit.epoch, out.outcomes[0].unit.seq, out.outcomes[0].commit) == (
        "e", 3, True)


def test_a_unit_cancelled_before_its_task_ran_leaves_no_lock_behind(tmp_path: Path) -> None:
    """The controller's bus closes in the same turn of the event loop as a writing unit's
    lock set was queued: its task is cancelled before it ran a step, so its own `finally`
    never runs; its locks, its place among the writers and its answer must still go, or
    every later writer on this backend waits behind it for ever."""
    from backend.links import IigClient, PeerLinks
    from backend.node import BackendNode
    from backend.state import BusOut
    from tests.inproc import census, unit

    async def scenario() -> None:
        node = BackendNode("b0", Store(tmp_path / "backend.db"), peers=PeerLinks(),
                           iig=IigClient("b0"))
        node._stage2_task.cancel()           # stage 2 is driven by hand below
        directory, _ = census()
        await node.apply_directory(directory.to_update())
        bus = BusOut("e")
        node.on_hello(pb.BusHello(epoch="e", backend_index=0, peers=["127.0.0.1:1"]), bus)
        tu = unit(directory, "DELETE ((FILE = Census) and (CITY = Monterey))")
        tu.seq = 1
        await node.on_traffic_unit(tu, bus)
        key, st = node.stage2.items.popleft()
        await node._stage2(key, st)
        assert list(node.twophase.write_order) == [key] and node.cc.holders()
        node.on_bus_closed(bus)              # before the unit's task has run at all
        for _ in range(5):
            await asyncio.sleep(0)
        assert st.task is not None and st.task.cancelled()
        assert node.cc.holders() == {} and not node.twophase.write_order and key not in node.tus
        replies = list(bus.queue.items)
        assert [r.WhichOneof("body") for r in replies if r is not None] == ["error"]
        node.writer.shutdown()

    asyncio.run(scenario())


@pytest.mark.parametrize("commit", [True, False])
def test_a_unit_in_doubt_resolved_by_two_overlapping_resolves_is_carried_out_once(
        tmp_path: Path, commit: bool) -> None:
    """The controller may ask again before its first Resolve is answered: both are
    answered, and the unit is committed (or rolled back) once."""
    from backend.commit import PreparedUnits
    from mbds.directory import Directory
    store, files = store_with_table(tmp_path)
    conn = store.writer()
    conn.execute("BEGIN")
    log = undo.UndoLog(conn, ("e", 1))
    insert(conn, log, (1, 1, 1.0, "a", None))
    conn.execute("COMMIT")
    writer = Writer(store)
    units = PreparedUnits(writer, Directory())
    assert units.listed() == [("e", 1)]
    outcome = pb.Outcome(unit=pb.UnitId(epoch="e", seq=1), commit=commit)

    async def twice() -> None:
        await asyncio.gather(units.resolve([outcome]), units.resolve([outcome]))

    asyncio.run(twice())
    assert units.listed() == []
    reader = Store(tmp_path / "backend.db").reader()
    assert undo.in_doubt(reader) == {}
    assert len(rows(reader)) == (1 if commit else 0)
    assert units.committed == ({"e": 1} if commit else {})
    writer.shutdown()
