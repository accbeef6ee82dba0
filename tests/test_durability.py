"""A crashed backend loses no acknowledged write; a stopped cluster keeps everything."""

from __future__ import annotations

import signal
import time

import pytest

from mbds.client import Client, ClientError
from tests.conftest import CENSUS_YAML, backend_digests, start_cluster


def insert(c: Client, i: int) -> bool:
    """One acknowledged-or-not insert: True only if the controller acknowledged it."""
    try:
        c.execute(f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, {i}>, <STATE, CA>)")
        return True
    except ClientError:
        return False


def cities(c: Client) -> set[str]:
    [res] = c.execute("RETRIEVE (FILE = Census) (CITY)")
    return {r["CITY"] for r in res.records}


def test_sigkill_one_backend_then_restart_keeps_acknowledged_inserts(cluster_factory) -> None:  # noqa: ANN001
    r = cluster_factory(3)
    c = r.client
    c.define(CENSUS_YAML)
    acked = {f"c{i}" for i in range(30) if insert(c, i)}
    assert len(acked) == 30
    r.cluster.backends[1].kill()                       # SIGKILL: no chance to flush anything
    failed = 0
    for i in range(30, 35):
        if insert(c, i):
            acked.add(f"c{i}")
        else:
            failed += 1
    assert failed == 5      # with a backend down every traffic unit is refused, none is lost
    with pytest.raises(ClientError) as err:
        c.execute("RETRIEVE (FILE = Census) (CITY)")
    assert "b1" in str(err.value) and err.value.code == "UNAVAILABLE"
    r.cluster.restart_backend(1)
    deadline = time.monotonic() + 20
    while True:
        try:
            got = cities(c)
            break
        except ClientError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert acked <= got
    for i in range(80, 90):            # and it takes new work again
        assert insert(c, i)
    assert len(set(backend_digests(r))) == 1


def test_sigterm_whole_cluster_and_start_again(tmp_path) -> None:  # noqa: ANN001
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


def test_starting_with_fewer_backends_than_the_data_holds_is_refused(tmp_path) -> None:  # noqa: ANN001
    r = start_cluster(tmp_path / "d", 2)
    r.close()
    from mbds.cluster import LocalCluster, ProcessFailed
    with pytest.raises(ProcessFailed, match="holds data of 2 backends"):
        LocalCluster(tmp_path / "d", 1).start()


def test_a_unit_aborted_while_waiting_for_a_frozen_peers_ids_frees_the_others(
        cluster_factory) -> None:  # noqa: ANN001
    """Stage 2 runs in bus order, so a unit waiting for a silent peer's descriptor ids
    would hold up every later unit on its backend. When PP gives up on it (the
    deadline names the silent backend) and aborts it, the waiting backends drop it at
    once instead of after their 60 s result timeout."""
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
    t0 = time.monotonic()
    deadline = t0 + 20
    while True:
        try:
            [res] = r.client.execute(four_predicates)
            break
        except ClientError:                     # b1 still rejoining
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert len(res.records) == 6
    assert time.monotonic() - t0 < 15           # not the 60 s result timeout
