"""What a bulk load that fails part way says is stored, against what is.

Batches of one record in a cluster every backend holds go each to one backend and
commit there in one phase, so the batches in flight beside a failed one commit on their
own, and a backend the abort reaches too late may have committed the failed one too. A
backend frozen (SIGSTOP) or stalled after making its batch durable fails its batches at
the unit's deadline; it is killed once the load has ended and started again, so that
what is stored is settled: a batch it made durable is stored, one it never took is not.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cli.load_outcome import _told
from controller import load
from controller.inbox import OnePhaseWrites
from mbds.client import ClientError
from mbds.errors import DeadlineExceeded, TrafficUnitAborted
from mbds.proto import mbds_pb2 as pb
from tests.conftest import Running
from tests.crashes import retry
from tests.test_bulk_load import census_row, chunk, prepare

DEFINITION = """
files:
  T:
    attributes: {K: integer, G: string}
    directory:
      G: {type: B, values: [g]}
"""
RECORDS = 40
DEADLINE = 2.0          # the controller's unit deadline: a frozen backend fails at it
# A failure's words for each batch it names (`controller/load.py`).
TOLD = re.compile(r"records ((?:\d+-\d+(?:, )?)+) (were not loaded|may have been stored|"
                  r"were stored|\(in flight beside them\) were loaded)")
SUMMARY = re.compile(r"\(records loaded into T: (\d+)((?:; [^;()]*)*)\)\n$")


def records(spans: str) -> set[int]:
    return {k for a, b in re.findall(r"(\d+)-(\d+)", spans) for k in range(int(a), int(b) + 1)}


def told(message: str) -> dict[str, set[int]]:
    """The records a load's failure names, by its words for them."""
    out: dict[str, set[int]] = {}
    for spans, words in TOLD.findall(message):
        out.setdefault(words, set()).update(records(spans))
    return out


def summary(err: str) -> tuple[int, set[int], set[int]]:
    """`mbds load file`'s count N (the input's first N records), the records it says are
    stored beyond them, and those it says may be."""
    m = SUMMARY.search(err)
    assert m is not None, err
    too: set[int] = set()
    maybe: set[int] = set()
    for spans, what in re.findall(r"; records ([\d, -]+) (are stored too|may be stored too|"
                                  r"were in flight and may be stored too)", m[2]):
        (too if what == "are stored too" else maybe).update(records(spans))
    return int(m[1]), too, maybe


def one_phase_cluster(cluster_factory: Any, env: dict[str, str] | None = None) -> Running:
    """Two backends, file T defined, its one cluster on both (a record each), then b0
    started again with `env`."""
    r = cluster_factory(2, timeout=DEADLINE)
    r.client.define(DEFINITION)
    r.client.execute("[INSERT (<FILE, T>, <K, 0>, <G, g>); INSERT (<FILE, T>, <K, -1>, <G, g>)]")
    if env is not None:
        r.cluster.backends[0].kill()
        r.cluster.restart_backend(0, env=env)
        retry(r.client, "RETRIEVE (FILE = T) (COUNT(K))", timeout=60)
    return r


def stored_after_b0_restarts(r: Running) -> set[int]:
    """The load's records stored once b0, killed, is back: what it made durable and no
    more."""
    r.cluster.backends[0].kill()
    r.cluster.restart_backend(0)
    [res] = retry(r.client, "RETRIEVE (FILE = T) (K)", timeout=60)
    return {rec["K"] for rec in res.records if rec["K"] > 0}


def load_file(r: Running, tmp_path: Path) -> subprocess.CompletedProcess:
    data = tmp_path / "t.csv"
    data.write_text("K,G\n" + "".join(f"{k},g\n" for k in range(1, RECORDS + 1)))
    return subprocess.run([sys.executable, "-m", "mbds", "load", "file", "T", str(data),
                           "--chunk", "1", "--no-progress", "--controller",
                           r.cluster.address], capture_output=True, text=True, timeout=120)


def check_summary(err: str, stored: set[int]) -> tuple[int, set[int]]:
    """`mbds load file`'s account of a failed load against what is stored: the count is
    a prefix of the input, all stored; the records it says are stored beyond it are, and
    every other record stored is one it says may be. Returns the count and those."""
    n, too, maybe = summary(err)
    assert set(range(1, n + 1)) <= stored, (err, sorted(stored))
    assert too <= stored, (err, sorted(stored))
    assert stored - set(range(1, n + 1)) <= too | maybe, (err, sorted(stored))
    assert not too & maybe and not (too | maybe) & set(range(1, n + 1)), err
    if maybe:
        assert err.endswith(": count the file's records before going on)\n"), err
    elif too:
        assert err.endswith(f": going on from record {n + 1}, leave them out)\n"), err
    return n, maybe


def test_a_load_file_beside_a_frozen_backend_counts_only_the_input_s_first_records(
        cluster_factory: Any, tmp_path: Path) -> None:
    """b0 frozen for the whole load: each batch placed on it fails at the deadline, its
    writes unknown, while b1's batches beside it commit. The count printed is the
    input's first records all stored, b1's beyond it are named as stored, and b0's as
    records that may be; the controller did answer, so nothing else is named."""
    r = one_phase_cluster(cluster_factory)
    b0 = r.cluster.backends[0]
    b0.signal(signal.SIGSTOP)
    try:
        out = load_file(r, tmp_path)
    finally:
        b0.signal(signal.SIGCONT)
    stored = stored_after_b0_restarts(r)
    assert out.returncode == 1, out.stderr
    assert "no answer within the 2 s deadline from backend b0" in out.stderr
    n, maybe = check_summary(out.stderr, stored)
    # b0 took none of its batches: the count is the whole prefix stored, and each of b0's
    # batches in flight is one the load's error says may have been stored.
    assert n + 1 not in stored and stored, (out.stderr, sorted(stored))
    named = told(out.stderr)
    assert maybe == named["may have been stored"] and n + 1 in maybe, out.stderr
    assert "were not loaded" not in named and not maybe & stored, out.stderr
    assert "were in flight" not in out.stderr, out.stderr


def test_a_client_load_beside_a_frozen_backend_names_every_batch_it_took(
        cluster_factory: Any) -> None:
    """The same through `Client.load`: each acknowledgement names its batch's first
    record, and the failure names every other batch the controller took, each as one
    that may have been stored (its backend never answered): together they are the load's
    first batches, none missing."""
    r = one_phase_cluster(cluster_factory)
    b0 = r.cluster.backends[0]
    acknowledged: list[range] = []
    b0.signal(signal.SIGSTOP)
    try:
        with pytest.raises(ClientError) as err:
            for d in r.client.load("T", ["K", "G"], [([k, "g"], None)
                                                     for k in range(1, RECORDS + 1)], chunk=1):
                acknowledged.append(range(d.first_record, d.first_record
                                          + d.stats.records_retrieved))
    finally:
        b0.signal(signal.SIGCONT)
    stored = stored_after_b0_restarts(r)
    assert err.value.code == "DEADLINE_EXCEEDED"
    message = str(err.value)
    named = told(message)
    acked = {k for rng in acknowledged for k in rng}
    assert acked and all(len(rng) == 1 for rng in acknowledged), acknowledged
    assert set(named) <= {"may have been stored", "(in flight beside them) were loaded"}, \
        message
    maybe = named["may have been stored"]
    assert named.get("(in flight beside them) were loaded", set()) <= acked, message
    taken = acked | maybe
    assert taken == set(range(1, len(taken) + 1)) and not acked & maybe, (message, acked)
    assert stored == acked, (message, sorted(stored))


@pytest.mark.parametrize("stall", ["2.5", "30"])
def test_a_batch_a_backend_made_durable_after_its_deadline_is_not_said_unloaded(
        cluster_factory: Any, tmp_path: Path, stall: str) -> None:
    """b0 makes its first batch durable, then stalls before it says so: past the
    deadline, and, for 30 s, past the abort's grace too. That batch is stored: the
    load's error says so or that it may have been, never that it was not loaded, and
    the count and the records named agree with what is stored."""
    r = one_phase_cluster(cluster_factory, {"MBDS_FAULTS": "backend.one_phase_committed=stall",
                                            "MBDS_FAULTS_STALL_S": stall})
    out = load_file(r, tmp_path)
    stored = stored_after_b0_restarts(r)
    assert out.returncode == 1, out.stderr
    named = told(out.stderr)
    assert named.get("were not loaded", set()).isdisjoint(stored), (out.stderr, sorted(stored))
    assert named.get("were stored", set()) <= stored, (out.stderr, sorted(stored))
    assert (named.get("were stored", set()) | named.get("may have been stored", set())) & stored
    check_summary(out.stderr, stored)


def test_a_failed_load_words_each_batch_by_what_became_of_it() -> None:
    """Batches that fail beside one another, one stored in one phase after its abort,
    one whose backend never answered it and one rolled back: each is named by that, the
    batch acknowledged between them too, and every acknowledgement carries its batch's
    first record. `mbds load file` reads the same words back."""
    chunks = [chunk([census_row(i) for i in range(10)], first=1 + 10 * k) for k in range(5)]
    late = "; but backend b0 had committed it in one phase before the abort reached it"
    failures: dict[int, Exception] = {}
    for first, error, written in [
            (11, DeadlineExceeded("no answer from b0"), OnePhaseWrites(late, stored=True)),
            (31, DeadlineExceeded("no answer from b0"), OnePhaseWrites(late, stored=False)),
            (41, TrafficUnitAborted("b1: disk full"), None)]:
        error.__cause__ = written
        failures[first] = error

    async def feed() -> AsyncIterator[pb.LoadRequest]:
        for c in chunks:
            yield c

    async def run(p: Any) -> AsyncIterator[pb.ExecuteReplies]:
        await asyncio.sleep(0.2 if p.batch.first == 11 else 0)  # the others are taken
        if p.batch.first in failures:
            raise failures[p.batch.first]
        yield pb.ExecuteReplies(replies=[pb.ExecuteReply(done=pb.RequestDone(
            stats=pb.RequestStats(records_retrieved=10)))])

    firsts: list[int] = []

    async def drain() -> None:
        async for message in load.pipelined(feed(), lambda c, first: prepare(c), run,
                                            window=4):
            firsts.extend(r.done.first_record for r in message.replies)

    with pytest.raises(DeadlineExceeded) as err:
        asyncio.run(drain())
    assert str(err.value) == ("no answer from b0; records 11-20 were stored, records 31-40 "
                              "may have been stored, records 41-50 were not loaded, records "
                              "21-30 (in flight beside them) were loaded")
    assert firsts == [1, 21]
    assert _told(str(err.value)) == [
        (range(11, 21), "were stored"), (range(31, 41), "may have been stored"),
        (range(41, 51), "were not loaded"),
        (range(21, 31), "(in flight beside them) were loaded")]
