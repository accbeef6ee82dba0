"""Crashes for the durability tests: freezing, killing and waiting on backends, a load of
numbered insert transactions, and each backend's records read from its SQLite file."""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from mbds.client import Client, ClientError
from tests.conftest import Running

BACKENDS = ["b0", "b1", "b2"]


def insert(c: Client, i: int) -> bool:
    """One acknowledged-or-not insert: True only if the controller acknowledged it."""
    try:
        c.execute(f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, {i}>, <STATE, CA>)")
        return True
    except ClientError:
        return False


def unit_text(unit: str) -> str:
    """One traffic unit of three inserts. Each record's CITY (type C) is new, so each is
    a cluster of its own, and IIG puts it on the backend with the fewest records: with
    every unit three records on three backends the totals stay equal, so record j of
    every unit goes to backend bj (ties go to the lowest index)."""
    return "[" + "; ".join(f"INSERT (<FILE, Census>, <CITY, '{unit}-{j}'>, <POP, {j}>, "
                           f"<STATE, CA>)" for j in range(3)) + "]"


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:g} s")
        time.sleep(0.01)


def stopped(pid: int) -> bool:
    """Is the process in the stopped state (SIGSTOP delivered)?"""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def retry(c: Client, text: str, timeout: float = 20) -> list:
    """`text` once the cluster answers again (a restarted backend is rejoining)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return c.execute(text)
        except ClientError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def prepared(db: Path) -> int:
    """Units the backend keeps prepared (durably, awaiting PP's decision) in its file."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        try:
            return int(conn.execute("SELECT COUNT(*) FROM prepared").fetchone()[0])
        except sqlite3.OperationalError:      # no such table yet
            return 0


def holdings(r: Running) -> dict[str, dict[str, int]]:
    """Per backend, read from its own SQLite file: each CITY stored there and how often."""
    out: dict[str, dict[str, int]] = {}
    for name in BACKENDS:
        db: Path = r.cluster.data_dir / name / "backend.db"
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            out[name] = dict(conn.execute(
                'SELECT "CITY", COUNT(*) FROM "r_CENSUS" GROUP BY "CITY"').fetchall())
    return out


def locations(held: dict[str, dict[str, int]]) -> dict[str, str]:
    """CITY -> the one backend holding it; no record is stored twice anywhere."""
    where: dict[str, str] = {}
    for backend, cities in held.items():
        for city, n in cities.items():
            assert n == 1, f"{city} is stored {n} times on {backend}"
            assert city not in where, f"{city} is on {where.get(city)} and {backend}"
            where[city] = backend
    return where


def placed(where: dict[str, str], unit: str) -> list[str | None]:
    """Where each of the unit's three records is (None: nowhere)."""
    return [where.get(f"{unit}-{j}") for j in range(3)]


EVERYWHERE = ["b0", "b1", "b2"]      # record j on bj: the unit committed on every backend
NOWHERE = [None, None, None]


@dataclass(eq=False)
class Attempt:
    unit: str
    start: int          # tickets of one counter, shared with the test's own marks
    end: int = 0        # 0 while in flight
    acked: bool = False
    error: ClientError | None = None


class Load:
    """Client threads inserting units back to back, each attempt ticketed at its start
    and its end, so what was in flight at a mark is known exactly."""

    def __init__(self, address: str, threads: int) -> None:
        self.address = address
        self._tickets = itertools.count(1)
        self._lock = threading.Lock()
        self.attempts: list[Attempt] = []
        self.errors: list[BaseException] = []
        self.halt = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(t,), daemon=True)
                        for t in range(threads)]

    def ticket(self) -> int:
        with self._lock:
            return next(self._tickets)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def spawn(self) -> None:
        """One more client thread, from now on."""
        t = threading.Thread(target=self._run, args=(len(self.threads),), daemon=True)
        self.threads.append(t)
        t.start()

    def stop(self) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(60)
        assert not any(t.is_alive() for t in self.threads), "a load thread did not stop"
        assert not self.errors, self.errors

    def _run(self, t: int) -> None:
        try:
            with Client(self.address, timeout=30) as c:
                for n in itertools.count():
                    if self.halt.is_set():
                        return
                    a = Attempt(f"t{t}u{n}", self.ticket())
                    with self._lock:
                        self.attempts.append(a)
                    try:
                        c.execute(unit_text(a.unit))
                        a.acked = True
                    except ClientError as e:
                        a.error = e
                    a.end = self.ticket()
        except BaseException as e:
            self.errors.append(e)

    def in_flight(self) -> list[Attempt]:
        with self._lock:
            return [a for a in self.attempts if not a.end]
