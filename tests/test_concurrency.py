"""Many users at once: CC keeps every outcome equal to a serial order of the traffic units."""

from __future__ import annotations

import random
import threading

from mbds.client import Client
from tests.conftest import backend_digests

ACCOUNTS_YAML = """
files:
  ACCOUNT:
    attributes: {ID: integer, BAL: integer, OWNER: string}
    directory:
      ID: {type: A, ranges: [[1, 10], [11, 20], [21, 30], [31, 40]]}
      OWNER: {type: C}
"""
N_ACCOUNTS = 40
START = 1000


def test_concurrent_transfers_keep_the_total(cluster_factory) -> None:  # noqa: ANN001
    r = cluster_factory(3)
    r.client.define(ACCOUNTS_YAML)
    r.client.execute("[" + "; ".join(
        f"INSERT (<FILE, Account>, <ID, {i}>, <BAL, {START}>, <OWNER, o{i % 4}>)"
        for i in range(1, N_ACCOUNTS + 1)) + "]")
    total = N_ACCOUNTS * START
    errors: list[BaseException] = []
    sums: list[int] = []

    def transfers(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with Client(r.cluster.address, timeout=60) as c:
                for _ in range(15):
                    a, b = rng.sample(range(1, N_ACCOUNTS + 1), 2)
                    x = rng.randint(1, 50)
                    c.execute(f"[UPDATE ((FILE = Account) and (ID = {a})) <BAL = BAL - {x}>; "
                              f"UPDATE ((FILE = Account) and (ID = {b})) <BAL = BAL + {x}>]")
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    def auditor() -> None:
        try:
            with Client(r.cluster.address, timeout=60) as c:
                for _ in range(20):
                    [res] = c.execute("RETRIEVE (FILE = Account) (SUM(BAL), COUNT(BAL))")
                    sums.append(res.records[0]["SUM(BAL)"])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=transfers, args=(s,)) for s in range(8)]
    threads.append(threading.Thread(target=auditor))
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    # Every concurrent read saw a serial state: the total never moved.
    assert sums and set(sums) == {total}
    [res] = r.client.execute("RETRIEVE (FILE = Account) (ID, BAL)")
    assert len(res.records) == N_ACCOUNTS
    assert sum(x["BAL"] for x in res.records) == total
    assert any(x["BAL"] != START for x in res.records)


def test_concurrent_new_type_c_values_leave_identical_directories(cluster_factory) -> None:  # noqa: ANN001
    r = cluster_factory(3)
    r.client.define(ACCOUNTS_YAML)
    errors: list[BaseException] = []

    def inserter(k: int) -> None:
        try:
            with Client(r.cluster.address, timeout=60) as c:
                for i in range(20):
                    # Values shared between threads race to create the same sub-descriptor.
                    owner = f"shared{i % 5}" if i % 2 else f"t{k}-{i}"
                    c.execute(f"INSERT (<FILE, Account>, <ID, {k * 20 + i}>, <BAL, 1>, "
                              f"<OWNER, '{owner}'>)")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=inserter, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    digests = backend_digests(r)
    assert len(set(digests)) == 1, digests
    assert r.client.status().directory_digest == digests[0]
    [res] = r.client.execute("RETRIEVE ((FILE = Account) and (OWNER = shared3)) (ID)")
    assert len(res.records) == 8 * 2      # i in {3, 13} for each of 8 threads
    [res] = r.client.execute("RETRIEVE (FILE = Account) (COUNT(ID))")
    assert res.records[0]["COUNT(ID)"] == 160
