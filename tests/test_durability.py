"""A crashed backend loses no acknowledged write and keeps no refused one; a write that
misses its deadline is rolled back everywhere; a stopped cluster keeps everything."""

from __future__ import annotations

import signal
import time

import pytest

from mbds.client import Client, ClientError
from tests.conftest import CENSUS_YAML, backend_digests, start_cluster
from tests.crashes import (
    EVERYWHERE,
    NOWHERE,
    Load,
    holdings,
    insert,
    locations,
    placed,
    prepared,
    retry,
    stopped,
    unit_text,
    wait_for,
)


def test_sigkill_mid_load_keeps_every_acknowledged_insert_once_and_no_refused_one(
        cluster_factory) -> None:
    """Four clients insert units of three records (one per backend) back to back; b1 is
    killed (SIGKILL) with their units in flight, and restarted. Every acknowledged unit
    must be on disk exactly once, each record on the backend IIG chose; every unit that
    started after b1 stopped (one is started then on purpose) must be nowhere. A unit
    running when b1 stopped that then failed is everywhere or nowhere once b1 is back
    and its prepared units are resolved — never on some backends only.

    The kill is staged so that it finds b1 holding prepared units PP may then decide
    to commit: b0 is frozen (SIGSTOP), so no unit can be decided and b1 keeps the
    units it prepared; b1 is frozen; b0 runs again, prepares, and PP decides; then b1
    is killed with its prepared units on disk. Were a unit committed on b0 and b2 and
    lost on b1 (acknowledged or not), its records would show on two backends only."""
    r = cluster_factory(3)
    c = r.client
    c.define(CENSUS_YAML)
    load = Load(r.cluster.address, 4)
    load.start()
    b0, victim = r.cluster.backends[0], r.cluster.backends[1]
    try:
        wait_for(lambda: sum(a.acked for a in load.attempts) >= 20, 60, "20 acknowledged units")
        b0.signal(signal.SIGSTOP)
        wait_for(lambda: stopped(b0.popen.pid), 10, "stopped state of b0")
        # No unit can be decided without b0: b1 keeps the ones it prepared.
        wait_for(lambda: prepared(r.cluster.data_dir / "b1" / "backend.db") > 0, 10,
                 "a unit prepared on b1")
        time.sleep(0.2)         # (its `prepared` is on its way to PP)
        victim.signal(signal.SIGSTOP)
        wait_for(lambda: stopped(victim.popen.pid), 10, "stopped state of b1")
        freeze = load.ticket()
        b0.signal(signal.SIGCONT)
        load.spawn()            # a unit that b1 never gets to prepare
        wait_for(lambda: any(a.start > freeze for a in load.attempts), 10, "late unit")
        time.sleep(0.5)         # whatever can be decided without b1 now is
        caught = load.in_flight()
        victim.kill()           # SIGKILL (works on a stopped process): no chance to flush
        kill = load.ticket()
        load.halt.set()         # the units in flight end, no new one starts
    finally:
        b0.signal(signal.SIGCONT)
        victim.signal(signal.SIGCONT)
        load.stop()
    attempts = load.attempts
    assert caught and all(a.end > kill for a in caught)   # the kill came mid-unit
    assert all(a.acked for a in attempts if a.end < freeze)
    # With b1 down every traffic unit is refused, naming it.
    with pytest.raises(ClientError) as err:
        c.execute(unit_text("refused"))
    assert "b1" in str(err.value) and err.value.code == "UNAVAILABLE"
    with pytest.raises(ClientError) as err:
        c.execute("RETRIEVE (FILE = Census) (CITY)")
    assert "b1" in str(err.value) and err.value.code == "UNAVAILABLE"

    r.cluster.restart_backend(1)
    retry(c, "RETRIEVE (FILE = Census) (COUNT(CITY))")
    after = [f"again{i}" for i in range(3)]
    for unit in after:                                  # and it takes new work again
        c.execute(unit_text(unit))

    held = holdings(r)
    where = locations(held)
    known = {a.unit for a in attempts} | set(after) | {"refused"}
    assert {city.rsplit("-", 1)[0] for city in where} <= known     # nothing else stored
    acked = [a.unit for a in attempts if a.acked] + after
    for unit in acked:
        assert placed(where, unit) == EVERYWHERE, unit
    in_doubt = [a for a in attempts if not a.acked and a.start < freeze]
    for a in in_doubt:
        assert placed(where, a.unit) in (NOWHERE, EVERYWHERE), a.unit
    # All resolved. The last unit's commit may still be on its way to b1: PP answers the
    # client once its decision is logged, and each backend forgets the unit after that.
    wait_for(lambda: prepared(r.cluster.data_dir / "b1" / "backend.db") == 0, 10,
             "every unit prepared on b1 decided")
    late = [a.unit for a in attempts if a.start > freeze]
    assert late and not any(a.acked for a in attempts if a.start > freeze)
    for unit in late + ["refused"]:
        assert placed(where, unit) == NOWHERE, unit
    # The killed backend held records before the kill, and holds them and new ones after.
    before = [a.unit for a in attempts if a.acked and a.end < freeze]
    assert before and all(where[f"{u}-1"] == "b1" for u in before)
    assert all(where[f"{u}-1"] == "b1" for u in after)
    # The cluster answers exactly what the files hold, per backend.
    [res] = c.execute("RETRIEVE (FILE = Census) (CITY)")
    assert sorted(x["CITY"] for x in res.records) == sorted(where)
    assert {b["backend"]: b["records"] for b in res.stats["backends"]} == {
        b: len(cities) for b, cities in held.items()}
    assert len(set(backend_digests(r))) == 1


def test_a_write_that_misses_its_deadline_is_rolled_back_everywhere(
        cluster_factory) -> None:
    """b1 is frozen; a unit writing a record on every backend misses its 2 s deadline.
    b0 and b2 had prepared it: PP's abort must roll them back, and b1, once it runs
    again, must roll back its part too."""
    r = cluster_factory(3)
    c = r.client
    c.define(CENSUS_YAML)
    c.execute(unit_text("before"))
    frozen = r.cluster.backends[1]
    frozen.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: stopped(frozen.popen.pid), 10, "stopped state of b1")
        with Client(r.cluster.address, timeout=2) as impatient:
            with pytest.raises(ClientError) as err:
                impatient.execute(unit_text("ghost"))
    finally:
        frozen.signal(signal.SIGCONT)
    assert "deadline" in str(err.value) and "b1" in str(err.value)
    # The next write follows the ghost in bus order, and each backend's writer takes
    # writing units in bus order: once this one is acknowledged, every backend is done
    # with the ghost. A backend the abort did not reach would hold the ghost prepared,
    # and its writer, until its own 60 s timeout: this write would miss its deadline.
    with Client(r.cluster.address, timeout=15) as c2:
        c2.execute(unit_text("after"))
    where = locations(holdings(r))
    assert placed(where, "ghost") == NOWHERE
    assert placed(where, "before") == placed(where, "after") == EVERYWHERE
    assert len(where) == 6
    assert len(set(backend_digests(r))) == 1


def test_sigterm_whole_cluster_and_start_again(tmp_path) -> None:
    r = start_cluster(tmp_path / "d", 2)
    try:
        r.client.define(CENSUS_YAML)
        for i in range(40):
            assert insert(r.client, i)
        r.client.execute("UPDATE ((FILE = Census) and (POP < 10)) <CITY = 'Renamed'>")
        before = r.client.execute("RETRIEVE (FILE = Census) (CITY, POP)")[0].records
    finally:
        r.close()                       # SIGTERM to every process
    r = start_cluster(tmp_path / "d", 2)
    try:
        after = r.client.execute("RETRIEVE (FILE = Census) (CITY, POP)")[0].records
        key = lambda x: (x["POP"], x["CITY"])  # noqa: E731
        assert sorted(after, key=key) == sorted(before, key=key)
        # New type-C values after the restart get fresh ids: no clash with stored ones.
        assert insert(r.client, 1000)
        assert len(set(backend_digests(r))) == 1
    finally:
        r.close()


def test_starting_with_fewer_backends_than_the_data_holds_is_refused(tmp_path) -> None:
    r = start_cluster(tmp_path / "d", 2)
    r.close()
    from mbds.cluster import LocalCluster, ProcessFailed
    with pytest.raises(ProcessFailed, match="holds data of 2 backends"):
        LocalCluster(tmp_path / "d", 1).start()


def test_a_unit_aborted_while_waiting_for_a_frozen_peers_ids_frees_the_others(
        cluster_factory) -> None:
    """Stage 2 runs in bus order, so a unit waiting for a silent peer's descriptor ids
    would hold up every later unit on its backend. When PP gives up on it (the
    deadline names the silent backend) and aborts it, the waiting backends drop it at
    once instead of after their 60 s result timeout: a request after it is answered
    within its own 15 s deadline."""
    r = cluster_factory(3)
    r.client.define(CENSUS_YAML)
    assert all(insert(r.client, i) for i in range(6))
    frozen = r.cluster.backends[1]
    frozen.signal(signal.SIGSTOP)               # alive, connected, and silent
    four_predicates = ("RETRIEVE ((FILE = Census) and (POP >= 0)) or "
                       "((FILE = Census) and (POP < 0)) (CITY)")
    try:
        with Client(r.cluster.address, timeout=2) as impatient:
            with pytest.raises(ClientError) as err:
                impatient.execute(four_predicates)
        assert "deadline" in str(err.value)   # no backend answered: b0, b2 wait for b1
    finally:
        frozen.kill()                           # SIGKILL works on a stopped process
    r.cluster.restart_backend(1)
    with Client(r.cluster.address, timeout=15) as c:
        [res] = retry(c, four_predicates, timeout=30)   # b1 rejoining: refused a while
    assert sorted(x["CITY"] for x in res.records) == [f"c{i}" for i in range(6)]
