"""Many users at once: CC keeps every outcome equal to a serial order of the traffic units."""

from __future__ import annotations

import random
import threading
import time

from mbds.client import Client
from tests.conftest import backend_digests
from tests.crashes import retry

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
CLIENTS = 8
TRANSFERS = 15       # per client


def test_concurrent_transfers_end_in_the_serial_replays_balances(cluster_factory) -> None:
    """Eight clients of transfer transactions and an auditor at once. Every transfer is
    acknowledged; every balance ends where a serial replay of the acknowledged transfers
    puts it (a dropped or doubled transfer shows, though the total would not); every
    audit, made while transfers were in flight, saw the total and the count whole."""
    r = cluster_factory(3)
    r.client.define(ACCOUNTS_YAML)
    r.client.execute("[" + "; ".join(
        f"INSERT (<FILE, Account>, <ID, {i}>, <BAL, {START}>, <OWNER, o{i % 4}>)"
        for i in range(1, N_ACCOUNTS + 1)) + "]")
    total = N_ACCOUNTS * START
    errors: list[BaseException] = []
    acked: list[tuple[int, int, int]] = []        # (from, to, amount) of each acknowledged
    lock = threading.Lock()
    progress = {"started": 0, "finished": 0}      # transfers started / acknowledged so far
    audits: list[tuple[int, int, dict]] = []      # (finished before, started after, answer)
    done = threading.Event()

    def count(key: str) -> int:
        with lock:
            return progress[key]

    def transfers(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with Client(r.cluster.address, timeout=60) as c:
                for _ in range(TRANSFERS):
                    a, b = rng.sample(range(1, N_ACCOUNTS + 1), 2)
                    x = rng.randint(1, 50)
                    with lock:
                        progress["started"] += 1
                    c.execute(f"[UPDATE ((FILE = Account) and (ID = {a})) <BAL = BAL - {x}>; "
                              f"UPDATE ((FILE = Account) and (ID = {b})) <BAL = BAL + {x}>]")
                    with lock:
                        acked.append((a, b, x))
                        progress["finished"] += 1
        except BaseException as e:
            errors.append(e)

    def auditor() -> None:
        try:
            with Client(r.cluster.address, timeout=60) as c:
                while not done.is_set() and len(audits) < 200:
                    before = count("finished")
                    [res] = c.execute("RETRIEVE (FILE = Account) (SUM(BAL), COUNT(BAL))")
                    audits.append((before, count("started"), res.records[0]))
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=transfers, args=(s,)) for s in range(CLIENTS)]
    audit = threading.Thread(target=auditor)
    for t in [*workers, audit]:
        t.start()
    for t in workers:
        t.join(300)
    done.set()
    audit.join(300)
    assert not any(t.is_alive() for t in [*workers, audit]), "a client did not finish"
    assert not errors, errors
    # Every transfer the seeds generate was acknowledged (none refused, none lost).
    expected_transfers = []
    for seed in range(CLIENTS):
        rng = random.Random(seed)
        for _ in range(TRANSFERS):
            a, b = rng.sample(range(1, N_ACCOUNTS + 1), 2)
            expected_transfers.append((a, b, rng.randint(1, 50)))
    assert sorted(acked) == sorted(expected_transfers)
    # Every final balance is the serial replay's (transfers commute: any order will do).
    replay = dict.fromkeys(range(1, N_ACCOUNTS + 1), START)
    for a, b, x in acked:
        replay[a] -= x
        replay[b] += x
    [res] = r.client.execute("RETRIEVE (FILE = Account) (ID, BAL)")
    assert sorted((x["ID"], x["BAL"]) for x in res.records) == sorted(replay.items())
    # Every concurrent read saw a serial state: the total and the count never moved...
    assert audits and all(a == {"SUM(BAL)": total, "COUNT(BAL)": N_ACCOUNTS}
                          for _, _, a in audits), audits
    # ...and audits ran while transfers did: some transfer had started before an audit
    # ended that had not finished when the audit began.
    assert any(started > finished for finished, started, _ in audits)


def test_concurrent_new_type_c_values_leave_identical_directories(cluster_factory) -> None:
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
        except BaseException as e:
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


MOVES_YAML = """
files:
  MOVED:
    attributes: {ID: integer, BAL: integer, GRP: integer, NOTE: string}
    directory:
      BAL: {type: A, ranges: [[0, 499], [500, 100000]]}
      GRP: {type: C}
"""


def test_a_unit_after_a_move_finds_the_records_where_the_move_put_them(
        cluster_factory) -> None:
    """A mover (an UPDATE of a directory attribute) waits behind a stalled update; a
    RETRIEVE, a DELETE's count and a new-value search come after it on the bus. The
    mover puts its records into clusters, and a descriptor, that did not exist when the
    later units came: each later unit still finds the records where the mover put them,
    as the serial order of the bus says (planned when they came, they looked for them
    where they were)."""
    r = cluster_factory(2)
    r.client.define(MOVES_YAML)
    r.client.execute("[ INSERT (<FILE, Moved>, <ID, 1>, <BAL, 300>, <GRP, 7>); "
                     "INSERT (<FILE, Moved>, <ID, 2>, <BAL, 300>, <GRP, 8>); "
                     "INSERT (<FILE, Moved>, <ID, 99>, <BAL, 1>, <GRP, 9>) ]")
    r.cluster.backends[0].kill()
    r.cluster.restart_backend(0, env={"MBDS_FAULTS": "backend.before_vote=stall"})
    retry(r.client, "RETRIEVE (FILE = Moved) (ID)", timeout=60)
    # In bus order: a stalled update holding the file, the movers, then the readers.
    units = ["UPDATE ((FILE = Moved) and (ID = 99)) <NOTE = held>",
             "UPDATE ((FILE = Moved) and (GRP = 7)) <BAL = BAL + 300>",    # a new cluster
             "UPDATE ((FILE = Moved) and (ID = 2)) <GRP = 80>",          # a new value
             "RETRIEVE ((FILE = Moved) and (GRP = 7)) (ID, BAL)",
             "RETRIEVE ((FILE = Moved) and (GRP > 70)) (ID, GRP)",
             "[ DELETE ((FILE = Moved) and (GRP = 7)); RETRIEVE (FILE = Moved) (COUNT(ID)) ]"]
    answers: dict[int, list] = {}
    clients = [Client(r.cluster.address, timeout=60) for _ in units]
    threads = [threading.Thread(target=lambda i=i: answers.__setitem__(
        i, clients[i].execute(units[i]))) for i in range(len(units))]
    try:
        for t in threads:
            t.start()
            time.sleep(0.3)          # each on the bus before the next
        for t in threads:
            t.join(60)
    finally:
        for c in clients:
            c.close()
    assert answers[3][0].records == [{"ID": 1, "BAL": 600}]
    assert answers[4][0].records == [{"ID": 2, "GRP": 80}]
    assert answers[5][0].stats["records_retrieved"] == 1
    assert answers[5][1].records == [{"COUNT(ID)": 2}]
