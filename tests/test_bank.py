"""Bank transfers under kills: with backends and the controller SIGKILLed (and crashed at
named points of two-phase commit) mid-load, money is never created or lost, every audit
sees the whole total, and each transfer is applied everywhere or nowhere."""

from __future__ import annotations

import random
import sqlite3
import threading
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from mbds.client import Client, ClientError
from tests.conftest import Running
from tests.crashes import retry, wait_for

N_ACCOUNTS = 100
TOTAL = 100_000
CLIENTS = 8
SEED = 20240611
PER_CLIENT = 10_000         # XIDs of client t: t * PER_CLIENT + 1 ...
BANK_YAML = f"""
files:
  ACCOUNT:
    attributes: {{ID: integer, BAL: integer, OWNER: string}}
    directory:
      ID: {{type: A, ranges: [{", ".join(f"[{lo}, {lo + 9}]" for lo in range(1, 101, 10))}]}}
      OWNER: {{type: C}}
  XFER:
    attributes: {{XID: integer, SRC: integer, DST: integer, AMT: integer}}
    directory:
      XID: {{type: A, ranges: [{", ".join(f"[{t * PER_CLIENT + 1}, {(t + 1) * PER_CLIENT}]"
                                       for t in range(CLIENTS))}]}}
"""
BACKENDS = ["b0", "b1", "b2"]
AUDIT = "RETRIEVE (FILE = Account) (SUM(BAL))"


def initial_balances() -> dict[int, int]:
    """100 accounts of uneven balances that add up to TOTAL."""
    rng = random.Random(SEED)
    bal = {i: rng.randint(500, 1500) for i in range(1, N_ACCOUNTS + 1)}
    bal[N_ACCOUNTS] += TOTAL - sum(bal.values())
    return bal


@dataclass(eq=False)
class Transfer:
    xid: int
    src: int
    dst: int
    amount: int
    gen: int                 # the controller's generation when the call started
    outcome: str = ""        # acked, refused (failed, controller up throughout), unknown
    error: str = ""

    def text(self) -> str:
        return (f"[UPDATE ((FILE = Account) and (ID = {self.src})) <BAL = BAL - {self.amount}>; "
                f"UPDATE ((FILE = Account) and (ID = {self.dst})) <BAL = BAL + {self.amount}>; "
                f"INSERT (<FILE, Xfer>, <XID, {self.xid}>, <SRC, {self.src}>, "
                f"<DST, {self.dst}>, <AMT, {self.amount}>)]")


class Bank:
    """Client threads making transfers back to back and an auditor summing the balances.

    `gen` counts the controller's lives: even while it is up, odd from just before it
    is killed until its successor is listening. A failed transfer whose call started and
    ended in the same even generation failed with the controller up: it must be nowhere.
    """

    def __init__(self, address: str, data_dir: Path) -> None:
        self.address = address
        self.data_dir = data_dir
        self.lock = threading.Lock()
        self.gen = 0
        self.transfers: list[Transfer] = []
        self.audits: list[int] = []             # every SUM(BAL) an audit answered
        self.audit_errors = 0
        self.errors: list[BaseException] = []   # anything but a ClientError: a test bug
        self.halt = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(t,), daemon=True)
                        for t in range(CLIENTS)]
        self.threads.append(threading.Thread(target=self._auditor, daemon=True))

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.halt.set()
        for t in self.threads:
            t.join(60)
        assert not any(t.is_alive() for t in self.threads), "a client thread did not stop"
        assert not self.errors, self.errors

    def count(self, outcome: str) -> int:
        with self.lock:
            return sum(x.outcome == outcome for x in self.transfers)

    def summary(self) -> str:
        """Outcomes so far, the calls in flight and the last errors (for a failure)."""
        with self.lock:
            xs = list(self.transfers)
        by = {o: sum(x.outcome == o for x in xs) for o in ("acked", "refused", "unknown", "")}
        errors = [x.error[:160] for x in xs if x.error][-3:]
        return (f"{by['acked']} acked, {by['refused']} refused, {by['unknown']} unknown, "
                f"{by['']} in flight; {len(self.audits)} audits answered, "
                f"{self.audit_errors} failed; last errors: {errors}; "
                f"units prepared on each backend: {self.prepared()}")

    def prepared(self) -> dict[str, object]:
        """Each backend's `prepared` rows (epoch, seq), read from its file."""
        out: dict[str, object] = {}
        for name in BACKENDS:
            db = self.data_dir / name / "backend.db"
            try:
                with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
                    out[name] = conn.execute("SELECT epoch, seq FROM prepared").fetchall()
            except sqlite3.Error as e:
                out[name] = str(e)
        return out

    def controller_going_down(self) -> None:
        with self.lock:
            assert self.gen % 2 == 0
            self.gen += 1

    def controller_up(self) -> None:
        with self.lock:
            assert self.gen % 2 == 1
            self.gen += 1

    def _client(self, t: int) -> None:
        rng = random.Random(SEED + 1 + t)
        try:
            with Client(self.address, timeout=30) as c:
                for n in range(PER_CLIENT):
                    if self.halt.is_set():
                        return
                    src, dst = rng.sample(range(1, N_ACCOUNTS + 1), 2)
                    with self.lock:
                        x = Transfer(t * PER_CLIENT + 1 + n, src, dst, rng.randint(1, 100),
                                     self.gen)
                        self.transfers.append(x)
                    try:
                        c.execute(x.text())
                        outcome = "acked"
                    except ClientError as e:
                        x.error = f"{e.code}: {e}"
                        outcome = "failed"
                    with self.lock:
                        if outcome == "failed":
                            same = self.gen == x.gen and self.gen % 2 == 0
                            outcome = "refused" if same else "unknown"
                        x.outcome = outcome
                    if outcome != "acked":
                        self.halt.wait(0.05)    # something is down: do not spin
        except BaseException as e:
            self.errors.append(e)

    def _auditor(self) -> None:
        try:
            with Client(self.address, timeout=30) as c:
                while not self.halt.is_set():
                    try:
                        [res] = c.execute(AUDIT)
                    except ClientError:
                        self.audit_errors += 1
                        self.halt.wait(0.05)
                        continue
                    self.audits.append(res.records[0]["SUM(BAL)"])
        except BaseException as e:
            self.errors.append(e)


Rows = tuple[list[tuple[int, int]], list[tuple[int, int, int, int]], int, int]


def read_backend(db: Path) -> Rows:
    """From a backend's SQLite file, read-only: its accounts (ID, BAL), its transfer
    records (XID, SRC, DST, AMT), and how many rows its `prepared` and `undo` tables
    hold."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        accounts = conn.execute('SELECT "ID", "BAL" FROM "r_ACCOUNT"').fetchall()
        xfers = conn.execute('SELECT "XID", "SRC", "DST", "AMT" FROM "r_XFER"').fetchall()
        [(prepared,)] = conn.execute("SELECT COUNT(*) FROM prepared").fetchall()
        [(undo,)] = conn.execute("SELECT COUNT(*) FROM undo").fetchall()
    return accounts, xfers, prepared, undo


def on_disk(r: Running) -> dict[str, Rows]:
    return {name: read_backend(r.cluster.data_dir / name / "backend.db") for name in BACKENDS}


def more(bank: Bank, outcome: str, n: int, timeout: float = 30) -> None:
    """Wait until `n` more transfers than now have `outcome`."""
    target = bank.count(outcome) + n
    try:
        wait_for(lambda: bank.count(outcome) >= target, timeout,
                 f"{n} more {outcome} transfers")
    except AssertionError as e:
        raise AssertionError(f"{e}: {bank.summary()}") from None


def test_transfers_keep_the_total_through_backend_and_controller_kills(
        cluster_factory) -> None:
    """Eight clients move money between 100 accounts (and log each transfer in XFER) while
    a backend is SIGKILLed and restarted, a backend crashes just after voting, the
    controller is SIGKILLed and restarted, and the controller crashes in the middle of
    sending Commit. Every audit sees the whole total; afterwards every acknowledged
    transfer is logged, no refused one is, and every balance is the initial one moved by
    exactly the logged transfers — on each backend's file as through the system."""
    r = cluster_factory(3)
    r.client.define(BANK_YAML)
    start = initial_balances()
    assert sum(start.values()) == TOTAL
    r.client.execute("[" + "; ".join(
        f"INSERT (<FILE, Account>, <ID, {i}>, <BAL, {b}>, <OWNER, o{i % 4}>)"
        for i, b in start.items()) + "]")
    cluster = r.cluster
    bank = Bank(cluster.address, cluster.data_dir)
    bank.start()
    try:
        more(bank, "acked", 50)
        # 1. A backend SIGKILLed mid-load, then restarted.
        cluster.backends[1].kill()
        more(bank, "refused", 3)
        cluster.restart_backend(1)
        more(bank, "acked", 50)
        # 2. A backend that crashes right after its first "prepared" vote.
        cluster.backends[2].kill()
        cluster.restart_backend(2, env={"MBDS_FAULTS": "backend.after_vote=crash"})
        assert cluster.backends[2].popen.wait(30) == 137      # faults.hit's exit
        # It went down holding a unit prepared durably, which its restart resolves.
        _, _, prepared, undo = read_backend(cluster.data_dir / "b2" / "backend.db")
        assert prepared >= 1 and undo >= 1, (prepared, undo)
        cluster.restart_backend(2)
        more(bank, "acked", 50)
        # 3. The controller SIGKILLed mid-load, then restarted (its decision log kept).
        bank.controller_going_down()
        assert cluster.controller is not None
        cluster.controller.kill()
        cluster.restart_controller()
        bank.controller_up()
        more(bank, "acked", 50)
        # 4. A controller that crashes with Commit sent to one prepared backend only.
        bank.controller_going_down()
        cluster.controller.kill()
        cluster.restart_controller(env={"MBDS_FAULTS": "controller.mid_commit=crash"})
        assert cluster.controller.popen.wait(30) == 137
        cluster.restart_controller()
        bank.controller_up()
        more(bank, "acked", 50)
    finally:
        bank.stop()
    assert all(p.popen.poll() is None for p in [*cluster.backends, cluster.controller])
    retry(r.client, AUDIT, timeout=30)
    xfers = bank.transfers
    acked = [x for x in xfers if x.outcome == "acked"]
    refused = [x for x in xfers if x.outcome == "refused"]
    unknown = [x for x in xfers if x.outcome == "unknown"]
    counts = f"{len(acked)} acked, {len(refused)} refused, {len(unknown)} unknown"
    assert len(acked) >= 250 and len(refused) >= 3, counts
    assert all(x.outcome for x in xfers), counts
    # Every audit that was answered saw all the money.
    assert bank.audits, "no audit was answered"
    assert all(s == TOTAL for s in bank.audits), (
        f"{sum(s != TOTAL for s in bank.audits)} of {len(bank.audits)} audits saw another "
        f"total: {sorted({s for s in bank.audits if s != TOTAL})}")
    # Every in-doubt unit is resolved once the cluster is quiet.
    wait_for(lambda: all(p == u == 0 for _, _, p, u in on_disk(r).values()), 30,
             "empty prepared and undo tables on every backend")
    disk = on_disk(r)
    # Each account and each logged transfer is stored exactly once, somewhere.
    accounts = [a for rows, _, _, _ in disk.values() for a in rows]
    records = [x for _, rows, _, _ in disk.values() for x in rows]
    assert sorted(i for i, _ in accounts) == list(range(1, N_ACCOUNTS + 1)), (
        "an account is missing or stored twice")
    balances = dict(accounts)
    logged = {xid for xid, _, _, _ in records}
    assert len(records) == len(logged), "a transfer is logged twice"
    by_xid = {x.xid: x for x in xfers}
    assert all(by_xid[xid].src == s and by_xid[xid].dst == d and by_xid[xid].amount == a
               for xid, s, d, a in records if xid in by_xid), "a transfer is logged wrong"
    assert logged <= by_xid.keys(), sorted(logged - by_xid.keys())[:10]
    lost = sorted(x.xid for x in acked if x.xid not in logged)
    assert not lost, f"{len(lost)} acknowledged transfers are not logged: {lost[:10]} ({counts})"
    kept = sorted(x.xid for x in refused if x.xid in logged)
    assert not kept, (f"{len(kept)} refused transfers are logged: "
                      f"{[(x, by_xid[x].error) for x in kept[:5]]} ({counts})")
    assert sum(balances.values()) == TOTAL, f"the files hold {sum(balances.values())}"
    # All or nothing: each balance is moved by exactly the logged transfers.
    expected = dict(start)
    for xid in logged:
        x = by_xid[xid]
        expected[x.src] -= x.amount
        expected[x.dst] += x.amount
    wrong = {i: (balances[i], expected[i]) for i in expected if balances[i] != expected[i]}
    assert not wrong, (f"{len(wrong)} balances (stored, expected) differ from the logged "
                       f"transfers': {dict(list(wrong.items())[:10])} ({counts}, "
                       f"{len(logged & {x.xid for x in unknown})} unknown ones logged)")
    # The system answers the same.
    [res] = r.client.execute(AUDIT)
    assert res.records[0]["SUM(BAL)"] == TOTAL
    [res] = r.client.execute("RETRIEVE (FILE = Account) (ID, BAL)")
    assert {x["ID"]: x["BAL"] for x in res.records} == balances
    [res] = r.client.execute("RETRIEVE (FILE = Xfer) (XID)")
    assert sorted(x["XID"] for x in res.records) == sorted(logged)
