"""Every message stays under gRPC's limit (MAX_MESSAGE, 64 MiB) whatever the values:
items are joined into a message by bytes as well as by count, and an item that no
message can carry is refused by name, failing its own traffic unit and nothing else.
A RETRIEVE-COMMON's rows are bounded (MAX_JOIN_ROWS) before any is made.

The cluster tests run real processes over real gRPC with values of tens of MB, the
sizes that passed the limit."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable

import pytest

from backend import links
from backend.links import _PeerLink
from controller import pp
from mbds import columns
from mbds.client import LOAD_CHUNK, Client, ClientError
from mbds.mailbox import Mailbox
from mbds.proto import mbds_pb2 as pb
from mbds.service import MAX_MESSAGE, MESSAGE_BUDGET
from tests.conftest import Running, module_cluster

YAML = """
files:
  BIG:
    attributes: {K: integer}
    directory:
      K: {type: A, ranges: [[0, 1000000]]}
  SMALL:
    attributes: {K: integer, V: integer}
    directory:
      K: {type: A, ranges: [[0, 1000000]]}
  WIDE:
    attributes: {K: integer, S: string}
    directory:
      K: {type: A, ranges: [[0, 1000000]]}
  PAIRS:
    attributes: {K: integer, V: integer}
    directory:
      K: {type: A, ranges: [[0, 1000000]]}
  BIGI:
    attributes: {X: integer}
    indexes: [X]
  TWIN:
    attributes: {K: integer}
    directory:
      K: {type: A, ranges: [[0, 1000000]]}
  TAGGED:
    attributes: {K: integer, T: string}
    directory:
      T: {type: C}
"""

MB = 1_000_000


cluster = module_cluster("limits", [1, 2], lambda r: r.client.define(YAML))


class Traffic:
    """Another client's small units, one after another, until stopped: each must be
    answered, and answered promptly."""

    def __init__(self, address: str, unit: Callable[[Client, int], None]) -> None:
        self.client = Client(address, timeout=60)
        self.unit = unit
        self.done = 0
        self.errors: list[str] = []
        self.worst = 0.0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        while not self.done and not self.errors and self.thread.is_alive():
            time.sleep(0.01)       # running before the test's own unit starts

    def _run(self) -> None:
        while not self.stopping.is_set():
            t0 = time.perf_counter()
            try:
                self.unit(self.client, self.done)
            except ClientError as e:
                self.errors.append(f"{e.code}: {str(e)[:300]}")
            self.worst = max(self.worst, time.perf_counter() - t0)
            self.done += 1

    def stop(self) -> Traffic:
        self.stopping.set()
        self.thread.join(60)
        self.client.close()
        return self


def _write(c: Client, i: int) -> None:
    """A transaction over every backend: an UPDATE of every SMALL record and an INSERT."""
    c.execute(f"[ UPDATE (FILE = SMALL) <V = V + 1>; INSERT (<FILE, SMALL>, <K, {i}>, "
              "<V, 0>) ]")


def _ping(c: Client, i: int) -> None:
    c.execute("RETRIEVE ((FILE = SMALL) and (K = 0)) (V)")


def test_a_value_too_large_for_a_partial_group_fails_only_its_own_unit(
        cluster: Running) -> None:
    """MAX of a 34 MB body is answered (a partial group carries only the extreme asked
    for); MIN and MAX of it together travel in one partial group (68 MB): the backend
    refuses that reply by name, its unit is aborted, and the bus and the units of other
    clients go on."""
    c = cluster.client
    c.execute("DELETE (FILE = BIG)")      # whatever a test before it left
    c.execute("INSERT (<FILE, BIG>, <K, 1>) {" + "q" * (34 * MB) + "}")
    c.execute("INSERT (<FILE, SMALL>, <K, 0>, <V, 0>)")
    traffic = Traffic(cluster.cluster.address, _write)
    try:
        for _ in range(2):
            [res] = c.execute("RETRIEVE (FILE = BIG) (MAX(BODY))")
            assert [len(v) for v in res.records[0].values()] == [34 * MB]
            with pytest.raises(ClientError, match="MAX_MESSAGE") as e:
                c.execute("RETRIEVE (FILE = BIG) (MIN(BODY), MAX(BODY))")
            assert e.value.code == "ABORTED"
    finally:
        traffic.stop()
    assert traffic.errors == [] and traffic.done > 0
    [res] = c.execute("RETRIEVE (FILE = BIG) (COUNT(K))")
    assert res.records == [{"COUNT(K)": 1}]
    assert all(b.reachable and not b.error for b in c.status().backends)
    c.execute("DELETE (FILE = BIG)")


def test_large_inserts_at_once_from_several_clients_all_succeed(cluster: Running) -> None:
    """Two 34 MB records queued for one backend at once go down in two messages."""
    cluster.client.execute("DELETE (FILE = BIG)")
    results: list[str] = []

    def insert(i: int) -> None:
        with Client(cluster.cluster.address, timeout=60) as c:
            try:
                c.execute(f"INSERT (<FILE, BIG>, <K, {i}>) {{" + chr(97 + i) * (34 * MB) + "}")
                results.append("ok")
            except ClientError as e:
                results.append(f"{e.code}: {str(e)[:300]}")

    threads = [threading.Thread(target=insert, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == ["ok"] * 4
    [res] = cluster.client.execute("RETRIEVE (FILE = BIG) (K)")
    assert sorted(r["K"] for r in res.records) == [0, 1, 2, 3]
    cluster.client.execute("DELETE (FILE = BIG)")


def _raw_rows(c: Client, text: str) -> tuple[list[list[object]], int]:
    """An answer's rows and the messages that carried them, each checked to be under the
    limit."""
    rows: list[list[object]] = []
    messages = 0
    for batch in c.stub.Execute(pb.ExecuteRequest(text=text, timeout_s=60), timeout=60):
        assert not batch.HasField("failure"), batch.failure.message
        assert batch.ByteSize() <= MAX_MESSAGE
        got = [r for r in batch.replies if r.WhichOneof("body") == "rows"]
        messages += bool(got)
        for r in got:
            rows += json.loads(r.rows.rows_json)
    return rows, messages


def test_large_bodies_retrieved_together_come_in_messages_under_the_limit(
        cluster: Running) -> None:
    """Two 34 MB bodies, plain and as a COMMON's right side (PP's own batches): one
    message each, not one of 68 MB."""
    c = cluster.client
    c.execute("DELETE (FILE = BIG)")
    c.execute("DELETE (FILE = SMALL)")
    c.execute("INSERT (<FILE, SMALL>, <K, 0>, <V, 7>)")
    for k in (1, 2):
        c.execute("INSERT (<FILE, BIG>, <K, 7>) {" + chr(96 + k) * (34 * MB) + "}")
    bodies = ["a" * (34 * MB), "b" * (34 * MB)]
    rows, messages = _raw_rows(c, "RETRIEVE (FILE = BIG) (BODY)")
    assert (sorted(r[0] for r in rows), messages) == (bodies, 2)
    rows, messages = _raw_rows(
        c, "RETRIEVE (FILE = SMALL) (K) COMMON (V, K) RETRIEVE (FILE = BIG) (BODY)")
    assert (sorted(rows), messages) == ([[0, b] for b in bodies], 2)
    c.execute("DELETE (FILE = BIG)")
    c.execute("DELETE (FILE = SMALL)")
    # Through an index, rows are fetched one by one (`recp_read._rows`): two large ones
    # on one backend still go in a message each.
    for k in (1, 2):
        c.execute("INSERT (<FILE, BIGI>, <X, 5>) {" + chr(96 + k) * (34 * MB) + "}")
    rows, messages = _raw_rows(c, "RETRIEVE ((FILE = BIGI) and (X = 5)) (BODY)")
    assert (sorted(r[0] for r in rows), messages) == (bodies, 2)
    c.execute("DELETE (FILE = BIGI)")


def test_a_unit_too_large_for_any_message_is_refused_by_name(cluster: Running) -> None:
    """Two 33.5 MB records in one transaction: on one backend, one traffic unit no message
    carries, refused before anything is sent; over two, one record on each. (TWIN is
    used by this test alone: its cluster's counts start even, so placement splits it.)"""
    c = cluster.client
    body = "z" * 33_500_000
    text = f"[ INSERT (<FILE, TWIN>, <K, 7>) {{{body}}}; INSERT (<FILE, TWIN>, <K, 7>) {{{body}}} ]"
    if len(cluster.cluster.backends) == 1:
        with pytest.raises(ClientError, match="MAX_MESSAGE") as e:
            c.execute(text)
        assert e.value.code == "INVALID_ARGUMENT"
    else:
        c.execute(text)
    [res] = c.execute("RETRIEVE (FILE = TWIN) (COUNT(K))")
    assert res.records == [{"COUNT(K)": 0 if len(cluster.cluster.backends) == 1 else 2}]
    assert all(b.reachable and not b.error for b in c.status().backends)
    c.execute("DELETE (FILE = TWIN)")


def test_a_refused_unit_leaves_no_directory_entry_behind(cluster: Running) -> None:
    """A record whose new type-C value makes its unit too large for a message (the value
    travels twice: in the record and in its new descriptor) is refused by name, and the
    descriptor allocated for it is taken back: the directory is as before, and the next
    units, which would have carried it, still fit."""
    c = cluster.client
    digest = c.status().directory_digest
    for letter in "xy":
        with pytest.raises(ClientError, match="MAX_MESSAGE"):
            list(c.load("TAGGED", ["K", "T"], [([1, letter * (40 << 20)], None)]))
    assert c.status().directory_digest == digest
    c.execute("INSERT (<FILE, TAGGED>, <K, 2>, <T, small>)")
    [res] = c.execute("RETRIEVE (FILE = TAGGED) (K, T)")
    assert res.records == [{"K": 2, "T": "small"}]
    c.execute("DELETE (FILE = TAGGED)")


def test_a_load_of_wide_records_with_the_default_chunk(cluster: Running) -> None:
    """10,000 records of 7 kB (70 MB) would be one batch by count; cut by bytes they
    are several, each under LOAD_BYTES."""
    c = cluster.client
    wide = "w" * 7000        # after each record's number: 10,000 values, none the same
    dones = list(c.load("WIDE", ["K", "S"],
                        (([k, f"{k:05}{wide}"], None) for k in range(LOAD_CHUNK))))
    assert len(dones) > 1
    [res] = c.execute("RETRIEVE (FILE = WIDE) (COUNT(K), MIN(K), MAX(K))")
    assert res.records == [{"COUNT(K)": LOAD_CHUNK, "MIN(K)": 0, "MAX(K)": LOAD_CHUNK - 1}]
    [res] = c.execute("RETRIEVE ((FILE = WIDE) and (K = 9999)) (S)")
    assert res.records == [{"S": f"09999{wide}"}]
    c.execute("DELETE (FILE = WIDE)")


def test_a_join_beyond_its_bound_is_refused_and_other_sessions_go_on(
        cluster: Running) -> None:
    """1,001 records joining 1,001 are 1,002,001 rows, one past MAX_JOIN_ROWS + 2,000:
    refused, naming the bound, before any row is made (as the test without a cluster
    below shows); another client's requests are answered meanwhile."""
    c = cluster.client
    list(c.load("PAIRS", ["K", "V"], (([k, 1], None) for k in range(1001))))
    c.execute("INSERT (<FILE, SMALL>, <K, 0>, <V, 0>)")
    traffic = Traffic(cluster.cluster.address, _ping)
    try:
        for _ in range(3):
            with pytest.raises(ClientError, match="MAX_JOIN_ROWS") as e:
                c.execute("RETRIEVE (FILE = PAIRS) (K) COMMON (V, V) RETRIEVE (FILE = PAIRS) (K)")
            assert e.value.code == "INVALID_ARGUMENT" and "1,002,001 rows" in str(e.value)
    finally:
        traffic.stop()
    assert traffic.errors == [] and traffic.done > 0
    # Within the bound the rows stream out, the event loop turning between batches: the
    # other client waits for a batch at most, not for the join (a fraction of its time
    # rather than a duration, which would move with the machine).
    c.execute("DELETE ((FILE = PAIRS) and (K >= 999))")
    traffic = Traffic(cluster.cluster.address, _ping)
    t0 = time.perf_counter()
    try:
        rows = sum(r.rows.count for r in c.stream(
            "RETRIEVE (FILE = PAIRS) (K) COMMON (V, V) RETRIEVE (FILE = PAIRS) (K)")
            if r.WhichOneof("body") == "rows")
        join = time.perf_counter() - t0
    finally:
        traffic.stop()
    assert rows == 999 * 999 <= pp.MAX_JOIN_ROWS
    assert traffic.errors == [] and traffic.worst < join / 4
    c.execute("DELETE (FILE = PAIRS)")


# ------------------------------------------------------------ without a cluster --


def test_load_batches_are_cut_by_bytes_and_numbered_on() -> None:
    wide = "w" * 7000
    refused: list[str] = []
    requests = list(columns.load_requests(
        "WIDE", ["K", "S"], (([k, f"{k:05}{wide}"], None) for k in range(LOAD_CHUNK)), LOAD_CHUNK,
        refused))
    assert refused == [] and len(requests) > 1
    assert all(r.ByteSize() <= columns.LOAD_BYTES for r in requests)
    assert [r.columns.first for r in requests] == [
        1 + sum(x.columns.count for x in requests[:i]) for i in range(len(requests))]
    assert sum(r.columns.count for r in requests) == LOAD_CHUNK
    assert [k for r in requests for k in r.columns.columns[0].ints] == list(range(LOAD_CHUNK))


def test_a_record_no_message_carries_is_refused_by_its_number() -> None:
    refused: list[str] = []
    rows = [([1, "a"], None), ([2, "b" * MESSAGE_BUDGET], None), ([3, "c"], None)]
    requests = list(columns.load_requests("WIDE", ["K", "S"], rows, 10, refused))
    # Nothing of its chunk is sent; the load stops at it.
    assert [r.columns.count for r in requests] == [] and len(refused) == 1
    assert refused[0].startswith("record 2: the record is ") and "MAX_MESSAGE" in refused[0]


def test_pp_cuts_its_own_batches_by_bytes() -> None:
    rows = [[i, "v" * 300_000] for i in range(10)]
    batches = [b for b, _ in pp._encoded_batches(0, map(pp._dumps, rows))]
    assert [b.rows.count for b in batches] == [3, 3, 3, 1]
    assert all(len(b.rows.rows_json) <= pp.REPLY_BATCH_BYTES for b in batches)
    assert [r for b in batches for r in json.loads(b.rows.rows_json)] == rows


def test_pp_refuses_a_row_no_message_carries() -> None:
    with pytest.raises(Exception, match="MAX_MESSAGE"):
        list(pp._encoded_batches(2, [pp._dumps([1, "v" * MESSAGE_BUDGET])]))


def test_a_join_counts_its_rows_before_making_them() -> None:
    join = pp._Join([[k, 1] for k in range(3)] + [[9, None]], [[k, 1] for k in range(4)])
    assert join.count == 12
    assert json.loads("[" + ",".join(join.rows()) + "]") == [
        [lk, rk] for rk in range(4) for lk in range(3)]


def test_descriptor_ids_queued_for_a_peer_are_cut_by_bytes() -> None:
    async def messages() -> list[int]:
        queue: Mailbox[bytes] = Mailbox()
        for _ in range(3):
            queue.put(b"x" * (MESSAGE_BUDGET // 2))
        stream = _PeerLink._messages(queue)
        return [len(await asyncio.wait_for(anext(stream), 5)) for _ in range(2)]

    assert asyncio.run(messages()) == [MESSAGE_BUDGET // 2 * 2, MESSAGE_BUDGET // 2]


def test_descriptor_ids_no_message_carries_are_refused_by_name(monkeypatch) -> None:
    """A backend's share of a unit's ids larger than a message fails its unit, naming the
    limit, and nothing goes to the peers (whose stream it would break)."""
    async def broadcast() -> list[int]:
        peers = links.PeerLinks()
        peers.configure(["127.0.0.1:1", "127.0.0.1:2"], 0)
        small = pb.DescriptorIds(seq=1, results=[pb.PredicateDescriptors(descriptor_ids=[1])])
        big = pb.DescriptorIds(seq=2, results=[
            pb.PredicateDescriptors(descriptor_ids=range(1000))])
        monkeypatch.setattr(links, "MESSAGE_BUDGET", small.ByteSize() + 100)
        peers.broadcast(small)
        with pytest.raises(ValueError, match="descriptor ids is .* bytes.*MAX_MESSAGE"):
            peers.broadcast(big)
        queued = list(peers.links["127.0.0.1:2"].queue.items)   # (its task not yet run)
        await peers.close()
        return queued

    assert len(asyncio.run(broadcast())) == 1


def test_a_record_that_could_not_be_returned_whole_is_refused(cluster: Running) -> None:
    """35 MB of `"` travel in a message, but a row of JSON writes each as two bytes (70
    MB): refused as an INSERT, as a load's record (a value or a body), naming the record
    and changing nothing; 35 MB of other characters are stored and read back."""
    c = cluster.client
    quotes = '"' * 35 * MB
    cases = [lambda: c.execute(f"INSERT (<FILE, WIDE>, <K, 1>) {{{quotes}}}"),
             lambda: list(c.load("WIDE", ["K", "S"], [([1, "a"], None), ([2, quotes], None)])),
             lambda: list(c.load("WIDE", ["K", "S"], [([3, "b"], quotes)]))]
    for case, record in zip(cases, ("", "record 2: ", "record 1: "), strict=True):
        with pytest.raises(ClientError) as e:
            case()
        assert e.value.code == "INVALID_ARGUMENT"
        assert f"{record}the record as a RETRIEVE returns it (a row of JSON) is " \
               "70,000,0" in str(e.value) and "more than a message may carry" in str(e.value)
    [res] = c.execute("RETRIEVE (FILE = WIDE) (K)")     # the load's record before it
    assert res.records == [{"K": 1}]
    plain = "q" * 35 * MB
    list(c.load("WIDE", ["K", "S"], [([4, plain], None)]))
    [res] = c.execute("RETRIEVE ((FILE = WIDE) and (K = 4)) (ALL)")
    assert [r["S"] == plain for r in res.records] == [True]
    c.execute("DELETE (FILE = WIDE)")


def test_a_row_s_json_bound_counts_what_escaping_adds() -> None:
    from mbds.values import row_json_beyond
    assert row_json_beyond([1, "x" * 1000, None], "b" * 1000, 10_000) == 0
    assert row_json_beyond([1, '"' * 6000], None, 10_000) == 25 + 12_002 + 25
    assert row_json_beyond(["\x01" * 2000], None, 10_000) == 12_002 + 25
    assert row_json_beyond(["é" * 2000], "\\" * 2000, 8_000) == 4_002 + 4_002
    assert row_json_beyond(["é" * 1000], None, 10_000) == 0     # 2,002 bytes


def test_a_load_of_rows_refuses_a_record_no_row_of_json_carries() -> None:
    """The same check for a load sent as rows (`Reqp.prepare_load`), where only a chunk
    whose bytes could hold such a record is measured record by record."""
    from controller.reqp import Reqp
    from mbds.errors import SemanticError
    from tests.inproc import census
    reqp = Reqp(census()[0])

    def rows(*cities: str) -> pb.LoadRequest:
        return pb.LoadRequest(file="CENSUS", attributes=["CITY"], records=[
            pb.Row(values=[pb.Value(s=c)]) for c in cities])

    assert len(reqp.prepare_load(rows("a", "q" * 35 * MB), first=7).inserts) == 2
    with pytest.raises(SemanticError) as e:
        reqp.prepare_load(rows("a", '"' * 35 * MB), first=7)
    assert str(e.value).startswith("record 8: the record as a RETRIEVE returns it (a row "
                                   "of JSON) is 70,000,")
