"""A client's Session stream: requests answered in order over one stream, a failed
request failing alone, a client that leaves mid-answer or a controller that stops
answering handled as with one call per request."""

from __future__ import annotations

import queue
import signal

import grpc
import pytest

from loadgen import paper_db as P
from mbds.client import Client, ClientError, collect
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from tests.conftest import CENSUS_YAML, Running

INSERT = "INSERT (<FILE, Census>, <CITY, '{c}'>, <POP, {p}>, <STATE, CA>, <AREA, 1.5>)"
ALL = "RETRIEVE (FILE = Census) (CITY, POP)"


def census(cluster_factory, n: int = 2, **kw: object) -> Running:
    r = cluster_factory(n, **kw)
    r.client.define(CENSUS_YAML)
    r.client.execute("[" + "; ".join(INSERT.format(c=f"c{i}", p=i * 100)
                                     for i in range(20)) + "]")
    return r


def rows(client: Client, text: str = ALL) -> list:
    [res] = client.execute(text)
    return sorted(map(repr, res.records))


def test_one_session_carries_every_request_and_a_failed_one_fails_alone(cluster_factory
                                                                        ) -> None:
    r = census(cluster_factory)
    c = Client(r.cluster.address, timeout=60)
    try:
        before = rows(c)
        assert before == sorted(map(repr, collect(c.call(ALL))[0].records))  # = Execute's
        bad = [("RETRIEVE (FILE = Census (CITY)", "INVALID_ARGUMENT", "syntax error"),
               ("RETRIEVE (FILE = Nowhere) (CITY)", "INVALID_ARGUMENT", "unknown file"),
               # a transaction whose second request is wrong: the first must not land
               ("[" + INSERT.format(c="new", p=1) + "; UPDATE (FILE = Census) <PEOPLE = 1>]",
                "INVALID_ARGUMENT", "PEOPLE")]
        for text, code, words in bad:
            with pytest.raises(ClientError) as e:
                c.execute(text)
            assert e.value.code == code and words in str(e.value)
            assert rows(c) == before            # nothing changed, and the session goes on
        c.execute(INSERT.format(c="new", p=1))
        assert len(rows(c)) == len(before) + 1
        assert c.sessions_opened == 1           # every request above went on one stream
    finally:
        c.close()


def test_requests_written_ahead_are_answered_in_order(cluster_factory) -> None:
    r = census(cluster_factory)
    texts = [INSERT.format(c="ahead", p=7), "RETRIEVE (CITY = ahead) (POP)",
             "RETRIEVE (FILE = Census (CITY)", "RETRIEVE ((FILE = Census) and (POP = 7)) (CITY)"]
    with grpc.insecure_channel(r.cluster.address) as ch:
        replies = list(rpc.ControllerStub(ch).Session(
            iter([pb.ExecuteRequest(text=t) for t in texts]), timeout=60))
    answers: list[list[pb.ExecuteReplies]] = [[]]
    for batch in replies:
        answers[-1].append(batch)
        if batch.end:
            answers.append([])
    assert answers.pop() == [] and len(answers) == len(texts)
    assert [any(b.HasField("failure") for b in a) for a in answers] == [False, False, True, False]
    assert answers[2][-1].failure.code == "INVALID_ARGUMENT"
    results = [collect(x for b in a for x in b.replies) for a in answers]
    assert results[0][0].op == "INSERT"
    assert results[1][0].records == [{"POP": 7}]       # the insert written just before
    assert results[3][0].records == [{"CITY": "ahead"}]


def test_a_client_leaving_mid_answer_aborts_its_traffic_unit(cluster_factory) -> None:
    r = cluster_factory(1)
    r.client.define(P.definition_yaml(1))
    body = "y" * 400_000      # 2 records a 1 MiB batch: 40 batches, far beyond the window
    r.client.execute("[" + "; ".join(
        f"INSERT (<FILE, PAPER>, <INTE1, {i}>, <INTE2, 1>, <MULTI, Big>) {{{body}}}"
        for i in range(80)) + "]")
    c = Client(r.cluster.address, timeout=60, channel_options=[("grpc.http2.bdp_probe", 0)])
    try:
        stream = c.stream("RETRIEVE ((FILE = PAPER) and (MULTI = Big)) (INTE1, BODY)")
        next(stream)              # the unit holds its read lock, the backend fills its window
        stream.close()            # ... and the client leaves
        # The abandoned read must not hold the records: PP aborted it, so this write
        # gets the lock (otherwise it waits until its 60 s timeout and fails).
        c.execute("UPDATE ((FILE = PAPER) and (MULTI = Big)) <INTE2 = 2>")
        [res] = c.execute("RETRIEVE ((FILE = PAPER) and (INTE2 = 2)) (COUNT(INTE1))")
        assert res.records == [{"COUNT(INTE1)": 80}]
        assert c.sessions_opened == 2           # the left stream was not reused
    finally:
        c.close()


def test_a_silent_controller_fails_the_request_and_the_next_opens_a_new_session(
        cluster_factory) -> None:
    r = census(cluster_factory, 1)
    c = Client(r.cluster.address, timeout=1)
    try:
        before = rows(c)
        assert r.cluster.controller is not None
        r.cluster.controller.signal(signal.SIGSTOP)      # alive, connected, and silent
        try:
            with pytest.raises(ClientError) as e:
                c.execute(ALL)
            assert e.value.code == "DEADLINE_EXCEEDED" and "6 s" in str(e.value)
        finally:
            r.cluster.controller.signal(signal.SIGCONT)
        assert rows(c) == before
        assert c.sessions_opened == 2
        # The same on a call of its own. Each stop stays under the 10 s after which the
        # backends' keepalive pings would take the silent controller's buses for broken.
        r.cluster.controller.signal(signal.SIGSTOP)
        try:
            with pytest.raises(ClientError) as e:
                list(c.call(ALL))
            assert e.value.code == "DEADLINE_EXCEEDED"
            assert str(e.value) == ("no answer from the controller in 6 s: the request may "
                                    "or may not have run")
        finally:
            r.cluster.controller.signal(signal.SIGCONT)
        assert rows(c) == before
        assert c.sessions_opened == 2
    finally:
        c.close()


def test_an_idle_session_does_not_hold_the_controller_s_shutdown(cluster_factory) -> None:
    """Stopping the controller ends an idle session at once, with OK; a session left
    open would be cut only when the server's grace period ran out (CANCELLED)."""
    r = census(cluster_factory, 1)
    outbox: queue.Queue[pb.ExecuteRequest | None] = queue.Queue()
    with grpc.insecure_channel(r.cluster.address) as ch:
        call = rpc.ControllerStub(ch).Session(iter(outbox.get, None), timeout=60)
        outbox.put(pb.ExecuteRequest(text=ALL))
        while not next(call).end:         # answered; the session is now idle
            pass
        assert r.cluster.controller is not None
        try:
            assert r.cluster.controller.stop() == 0
            assert list(call) == []           # the stream ended without an error…
            assert call.code() == grpc.StatusCode.OK    # …as the controller closed it
        finally:
            outbox.put(None)


def test_a_request_made_while_the_session_is_being_read_goes_as_a_call(cluster_factory
                                                                       ) -> None:
    r = census(cluster_factory, 1)
    r.client.define(P.definition_yaml(1))
    body = "y" * 400_000      # 2 records a 1 MiB batch: an answer of 5 messages
    r.client.execute("[" + "; ".join(
        f"INSERT (<FILE, PAPER>, <INTE1, {i}>, <INTE2, 1>, <MULTI, Big>) {{{body}}}"
        for i in range(10)) + "]")
    c = Client(r.cluster.address, timeout=60)
    try:
        before = rows(c)
        first = c.stream("RETRIEVE ((FILE = PAPER) and (MULTI = Big)) (INTE1, BODY)")
        head = next(first)                     # the session is mid-answer ...
        assert rows(c) == before               # ... so this one takes a call of its own
        [big] = collect([head, *first])        # and the first answer is still whole
        assert sorted(x["INTE1"] for x in big.records) == list(range(10))
        assert all(x["BODY"] == body for x in big.records)
        assert rows(c) == before and c.sessions_opened == 1
    finally:
        c.close()
