"""`mbds bench tp` — the disk and transaction random-access test (docs/spec.md §6).

The seed's `Read DataFile UN NT LogFile IO TT`: user UN runs NT transactions
of IO random record reads with a randomised think time TT between them.
Here every emulated user is a thread with its own Client, id (101, 102, … as
in the seed's examples) and random stream; a record read is a retrieve by
record number, a directory attribute, so it examines one cluster. Think time
is negative-exponential (`--think-ms` mean); `--random-requests` also draws
the reads per transaction from a negative exponential (the seed's Yread).

`--rate` switches to an open loop: transactions arrive as a Poisson stream
whatever the system does, and response time runs from each transaction's
intended start, so a stalled system cannot hide its queue (no coordinated
omission); at most `--max-inflight` transactions run at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import click
import grpc

from loadgen.common import (
    Gate,
    Row,
    cluster_options,
    define,
    fail,
    local_cluster,
    machine_facts,
    out_dir,
    print_table,
    progress,
    rng,
    run_counted,
    write_csv,
    write_json,
    write_summary,
)
from loadgen.hist import Hist
from mbds.client import Client, ClientError

FILE = "TP"
FIRST_USER = 101


@dataclass
class Txn:
    user: int
    seq: int
    think_ms: float           # closed loop: pause before it; open loop: gap since last arrival
    keys: list[int]
    due: float = 0.0          # open loop: intended start, seconds after the run's start


def definition(n: int, cluster_size: int) -> str:
    ranges = [[lo, min(n, lo + cluster_size - 1)] for lo in range(1, n + 1, cluster_size)]
    return (f"files:\n  {FILE}:\n    attributes: {{RNO: integer}}\n    directory:\n"
            f"      RNO: {{type: A, ranges: {ranges}}}\n")


def body(i: int, size: int) -> str:
    """The seed's record: its number, 'Random disk test', then ' - this is data' to fill."""
    head = f"{i:8d} Random disk test"
    return (head + " - this is data" * (size // 15 + 1))[:size]


def plan(users: int, transactions: int, requests: int, randomise: bool, think_ms: float,
         records: int, seed: int) -> list[list[Txn]]:
    """Every user's transactions, drawn up front so a seed fixes the whole workload."""
    out = []
    for u in range(FIRST_USER, FIRST_USER + users):
        r = rng(seed, "user", u)
        txns = []
        for t in range(transactions):
            think = r.expovariate(1 / think_ms) if think_ms > 0 else 0.0
            n = max(1, round(r.expovariate(1 / requests))) if randomise else requests
            txns.append(Txn(u, t, think, [r.randint(1, records) for _ in range(n)]))
        out.append(txns)
    return out


def abdl(keys: list[int], atomic: bool) -> list[str]:
    reads = [f"RETRIEVE ((FILE = {FILE}) and (RNO = {k})) (RNO, BODY)" for k in keys]
    return ["[ " + "; ".join(reads) + " ]"] if atomic else reads


class Recorder:
    """Collects per-transaction results from many threads."""

    def __init__(self, bar: object, task: object) -> None:
        self.lock = threading.Lock()
        self.rows: list[Row] = []
        self.hist, self.service = Hist(), Hist()
        self.bar, self.task = bar, task

    def add(self, txn: Txn, response_ms: float, service_ms: float, rows: int) -> None:
        if rows != len(txn.keys):
            raise RuntimeError(f"user {txn.user}: {rows} records for {len(txn.keys)} reads")
        self.hist.record(response_ms)
        self.service.record(service_ms)
        now = time.time()
        with self.lock:
            self.rows.append({"user": txn.user, "txn": txn.seq, "finished": now,
                              "time_of_day": time.strftime("%H:%M:%S", time.localtime(now))
                              + f".{int(now * 1000) % 1000:03d}", "think_ms": txn.think_ms,
                              "response_ms": response_ms, "service_ms": service_ms,
                              "requests": len(txn.keys)})
        self.bar.advance(self.task)  # type: ignore[attr-defined]


def execute(client: Client, txn: Txn, atomic: bool) -> int:
    return sum(run_counted(client, text).rows for text in abdl(txn.keys, atomic))


def closed_loop(clients: list[Client], plans: list[list[Txn]], atomic: bool,
                rec: Recorder) -> float:
    def user(i: int) -> None:
        for txn in plans[i]:
            time.sleep(txn.think_ms / 1000)
            t = time.perf_counter()
            rows = execute(clients[i], txn, atomic)
            ms = (time.perf_counter() - t) * 1000
            rec.add(txn, ms, ms, rows)
    return Gate(len(clients)).run([lambda i=i: user(i) for i in range(len(clients))])


def open_loop(clients: list[Client], txns: list[Txn], atomic: bool, rec: Recorder) -> float:
    """Workers take transactions in arrival order and time each from its due time."""
    lock, nxt = threading.Lock(), [0]
    gate = Gate(len(clients))

    def worker(c: Client) -> None:
        while True:
            with lock:
                if nxt[0] >= len(txns):
                    return
                txn = txns[nxt[0]]
                nxt[0] += 1
            due = gate.t0 + txn.due
            if (wait := due - time.perf_counter()) > 0:
                time.sleep(wait)
            start = time.perf_counter()
            rows = execute(c, txn, atomic)
            end = time.perf_counter()
            rec.add(txn, (end - due) * 1000, (end - start) * 1000, rows)
    return gate.run([lambda c=c: worker(c) for c in clients])


def arrivals(plans: list[list[Txn]], rate: float, seed: int) -> list[Txn]:
    """Interleave users' transactions round-robin, due at Poisson arrival times."""
    r, t = rng(seed, "arrivals"), 0.0
    txns: list[Txn] = []
    for seq in range(max(map(len, plans))):
        txns += [p[seq] for p in plans if seq < len(p)]
    for txn in txns:
        gap = r.expovariate(rate)
        t += gap
        txn.due, txn.think_ms = t, gap * 1000
    return txns


def log_lines(rows: list[Row], plans: list[list[Txn]], args: Row) -> list[str]:
    """The seed's log: a profile line per user, then user, time of day, think, response."""
    out = [f"Disk and transaction random access test (MBDS) {args['started']}"]
    pace = (f"Poisson arrivals at {args['rate']:g}/s (open loop)" if args["rate"]
            else f"{args['think_ms']:g} ms think")
    for p in plans:
        out.append(f"User {p[0].user}, {len(p)} transactions, {args['requests']} "
                   f"reads/transaction{' (randomised)' if args['random_requests'] else ''}, "
                   f"{pace}, random number seed {args['seed']}-{p[0].user}")
    word = "gap" if args["rate"] else "think"
    for r in sorted(rows, key=lambda r: r["finished"]):
        out.append(f"{r['user']} {r['time_of_day']} {word} {r['think_ms']:.0f} ms response "
                   f"{r['response_ms']:.3f} ms requests {r['requests']}")
    return out


@click.command()
@click.option("--users", type=int, default=4, show_default=True, help="Emulated users.")
@click.option("--transactions", type=int, default=25, show_default=True,
              help="Transactions per user.")
@click.option("--requests", type=int, default=10, show_default=True,
              help="Random reads per transaction (the mean with --random-requests).")
@click.option("--random-requests", is_flag=True, help="Negative-exponential reads per txn.")
@click.option("--think-ms", type=float, default=50.0, show_default=True,
              help="Mean negative-exponential think time between a user's transactions.")
@click.option("--records", type=int, default=5000, show_default=True)
@click.option("--record-bytes", type=int, default=4096, show_default=True,
              help="Record body size (the seed wrote 4096-byte records).")
@click.option("--cluster-size", type=int, default=100, show_default=True,
              help="Record numbers per type-A range: records one read examines.")
@click.option("--atomic", is_flag=True, help="Send a transaction's reads as one ABDL [ … ].")
@click.option("--rate", type=float, default=None,
              help="Open loop: Poisson arrivals at this many transactions/s.")
@click.option("--max-inflight", type=int, default=16, show_default=True,
              help="Open loop: transactions running at once.")
@cluster_options
def tp(users: int, transactions: int, requests: int, random_requests: bool, think_ms: float,
       records: int, record_bytes: int, cluster_size: int, atomic: bool, rate: float | None,
       max_inflight: int, backends: int, backend_cpus: float | None, split_search_from: int,
       internal_timing: str, seed: int, out: Path | None) -> None:
    """Emulated users' transactions of random reads (seed 001)."""
    folder = out_dir("tp", out)
    started = time.ctime()
    facts = machine_facts(backends, backend_cpus, split_search_from)
    plans = plan(users, transactions, requests, random_requests, think_ms, records, seed)
    txns = [t for p in plans for t in p]
    try:
        with local_cluster(backends, backend_cpus=backend_cpus,
                           split_search_from=split_search_from,
                           internal_timing=internal_timing == "on") as address:
            with Client(address, timeout=600) as c:
                define(c, definition(records, cluster_size))
                rows = (([i], body(i, record_bytes)) for i in range(1, records + 1))
                # Chunks of ~1 MiB keep every load message far below gRPC's 4 MiB limit.
                stored = sum(d.stats.records_retrieved for d in c.load(
                    FILE, ["RNO"], rows, chunk=max(1, (1 << 20) // record_bytes)))
                if stored != records:
                    raise RuntimeError(f"loaded {stored} records, expected {records}")
            workers = users if rate is None else min(max_inflight, len(txns))
            clients = [Client(address, timeout=120) for _ in range(workers)]
            try:
                for cl in clients:
                    grpc.channel_ready_future(cl.channel).result(timeout=30)
                with progress() as bar:
                    rec = Recorder(bar, bar.add_task("transactions", total=len(txns)))
                    if rate is None:
                        elapsed = closed_loop(clients, plans, atomic, rec)
                    else:
                        elapsed = open_loop(clients, arrivals(plans, rate, seed), atomic, rec)
            finally:
                for cl in clients:
                    cl.close()
    except (ClientError, RuntimeError) as e:
        fail(e)
    nreq = sum(r["requests"] for r in rec.rows)
    summary: Row = {"mode": "closed" if rate is None else "open", "users": users,
                    "transactions": len(rec.rows), "requests": nreq, "elapsed_s": elapsed,
                    "tps": len(rec.rows) / elapsed, "requests_per_s": nreq / elapsed,
                    **{k: v for k, v in rec.hist.summary().items() if k != "count"},
                    "think_avg_ms": sum(r["think_ms"] for r in rec.rows) / len(rec.rows)}
    if rate is not None:
        summary.update(offered_tps=rate, max_inflight=workers,
                       service_p95_ms=rec.service.pct(95), service_avg_ms=rec.service.mean())
    args = {"requests": requests, "random_requests": random_requests, "think_ms": think_ms,
            "seed": seed, "rate": rate, "started": started}
    (folder / "transactions.log").write_text("\n".join(log_lines(rec.rows, plans, args)) + "\n")
    write_csv(folder / "transactions.csv", sorted(rec.rows, key=lambda r: r["finished"]))
    write_csv(folder / "results.csv", [summary])
    write_json(folder / "results.json", {
        "mode": "tp", "machine": facts, "args": {**args, "users": users,
                                                 "transactions": transactions,
                                                 "records": records, "atomic": atomic},
        "summary": summary, "hdr_response_us": rec.hist.encode()})
    cols = ["mode", "users", "transactions", "requests", "elapsed_s", "tps", "min_ms", "avg_ms",
            "p95_ms", "max_ms"] + (["offered_tps", "service_p95_ms"] if rate else [])
    title = "Disk and transaction random access test: transactions of random reads"
    write_summary(folder / "summary.md", title, facts, cols, [summary], [
        f"{records:,} records of {record_bytes} bytes; {users} users x {transactions} "
        f"transactions of {requests}{' (mean)' if random_requests else ''} reads; think "
        f"{think_ms:g} ms mean" + (f"; open loop at {rate:g}/s" if rate else "; closed loop"),
        "Response times from an HDR histogram (3 significant digits)."])
    print_table(title, cols, [summary])
    click.echo(f"results in {folder}")
