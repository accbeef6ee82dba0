"""A controller whose answer breaks the protocol (replies of a request it never announced,
rows that are not rows of the request's columns, NaN, a failure of megabytes) makes the
client raise `ClientError` INTERNAL naming the fault, bounded, and never crash or return
wrong records; a well-formed answer comes back unchanged. A fake controller over real
gRPC answers canned replies, to `Client` (its session and a call) and `AsyncClient`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from mbds.async_client import AsyncClient
from mbds.client import Client, ClientError, collect
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import MAX_MESSAGE


def header(i: int = 0, columns: tuple[str, ...] = ("A",), op: str = "RETRIEVE"
           ) -> pb.ExecuteReply:
    return pb.ExecuteReply(request_index=i, header=pb.ReplyHeader(op=op, columns=columns))


def rows(i: int, rows_json: str | bytes, count: int = 1) -> pb.ExecuteReply:
    data = rows_json.encode() if isinstance(rows_json, str) else rows_json
    return pb.ExecuteReply(request_index=i, rows=pb.RowBatch(rows_json=data, count=count))


def done(i: int = 0, records: int = 0) -> pb.ExecuteReply:
    return pb.ExecuteReply(request_index=i, done=pb.RequestDone(
        stats=pb.RequestStats(clusters_examined=1, records_retrieved=records, backends=[
            pb.BackendStats(backend="b0", records=records, elapsed_ms=0.5)]),
        elapsed_ms=2.0))


AB = ("A", "B")
# Each case: the answer's replies, and the words the error must hold.
HOSTILE: dict[str, tuple[list[pb.ExecuteReply], str]] = {
    "rows of a request with no header": (
        [header(), rows(5, "[[1]]"), done()],
        "rows for request 5, which has no header (1 header so far)"),
    "rows before any header": (
        [rows(0, "[[1]]"), header(), done()],
        "rows for request 0, which has no header (0 headers so far)"),
    "a done of a request with no header": (
        [header(), done(7)], "a done for request 7, which has no header"),
    "a header out of order": (
        [header(1), rows(1, "[[1]]"), done(1)], "a header for request 1 after 0 headers"),
    "rows after the request's done": (
        [header(), done(), rows(0, "[[1]]")], "rows for request 0, after its done"),
    "a second done": ([header(), done(), done()], "a done for request 0, after its done"),
    "no done": ([header(), rows(0, "[[1]]")], "no done for request 0: the answer ended"),
    "a done missing from a transaction": (
        [header(0, (), "INSERT"), header(1), rows(1, "[[1]]"), done(1)],
        "no done for request 0"),
    "JSON nested 100,000 deep": (
        [header(), rows(0, "[" * 100_000 + "]" * 100_000), done()],
        "rows of request 0 that are not JSON rows of its 1 columns: maximum recursion depth"),
    "an object for the rows": (
        [header(0, AB), rows(0, '{"ab": 1, "cd": 2}'), done()],
        "of its 2 columns: an object, not a list of rows"),
    "a string for a row": (
        [header(0, AB), rows(0, '["xy"]'), done()],
        "of its 2 columns: row 0 is a string, not a list"),
    "a row too short": (
        [header(0, AB), rows(0, '[[1, 2], [1]]', 2), done()],
        "of its 2 columns: zip() argument 2 is shorter than argument 1: row 1 has 1 value"),
    "a row too long": (
        [header(0, AB), rows(0, '[[1, 2, 3]]'), done()],
        "of its 2 columns: zip() argument 2 is longer than argument 1: row 0 has 3 values"),
    "a list for a value": (
        [header(0, AB), rows(0, '[[[1], 2]]'), done()],
        "row 0 holds a list, not null, a number or a string"),
    "an object for a value": (
        [header(0, AB), rows(0, '[[{"x": 1}, 2]]'), done()],
        "row 0 holds an object, not null, a number or a string"),
    "a boolean for a value": (
        [header(0, AB), rows(0, '[[1, true]]'), done()],
        "row 0 holds a boolean, not null, a number or a string"),
    "NaN": ([header(), rows(0, "[[NaN]]"), done()], "of its 1 columns: NaN is not a JSON value"),
    "-Infinity": ([header(), rows(0, "[[-Infinity]]"), done()],
                  "-Infinity is not a JSON value"),
    "bytes that are not UTF-8": (
        [header(), rows(0, b'[["\xff"]]'), done()], "of its 1 columns: 'utf-8' codec can't decode"),
    "no rows at all": ([header(), rows(0, ""), done()], "of its 1 columns: Expecting value"),
}
HUGE = "m" * 10_000_000


def answer(text: str) -> list[pb.ExecuteReplies]:
    if text == "RETRIEVE (FILE = F) (ALL)":        # `mbds dump F`: the case of DUMPING
        case = DUMPING.get("case")
        return [pb.ExecuteReplies(end=True, replies=DUMPS[case][0] if case else [
            header(0, ("FILE", *AB)), rows(0, DUMP_ROWS, 2), done(0, 2)])]
    if text == "a failure of 10 MB":
        return [pb.ExecuteReplies(end=True, failure=pb.Failure(code="X" * 1000, message=HUGE))]
    if text == "good":
        return [pb.ExecuteReplies(replies=GOOD[:3]), pb.ExecuteReplies(replies=GOOD[3:],
                                                                       end=True)]
    return [pb.ExecuteReplies(replies=HOSTILE[text][0], end=True)]


class Fake(rpc.ControllerServicer):
    def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusReply:
        return pb.StatusReply(files=["F"], file_defs=[pb.FileDef(name="F", attributes=[
            pb.AttributeDef(name=a, type="integer") for a in ("FILE", *AB)])])

    def Execute(self, request: pb.ExecuteRequest, context: Any) -> Iterator[pb.ExecuteReplies]:
        yield from answer(request.text)

    def Session(self, requests: Iterator[pb.ExecuteRequest], context: Any
                ) -> Iterator[pb.ExecuteReplies]:
        for request in requests:
            yield from answer(request.text)


# A well-formed transaction: a write (its done held to the end, as the controller holds
# a write's acknowledgement), a retrieve in two batches, an aggregate of one group.
GOOD_ROWS = [[1, "x", None], [-(2 ** 63), "ünï\u0000code", 1.5]]
GOOD = [
    header(0, (), "INSERT"),
    header(1, ("K", "S", "F")),
    rows(1, json.dumps(GOOD_ROWS[:1])),
    rows(1, json.dumps(GOOD_ROWS[1:], ensure_ascii=False)),
    done(1, 2),
    header(2, ("STATE", "AVG(POP)")),
    rows(2, '[["CA",1e300]]'),
    done(2, 1),
    done(0, 1),
]
GOOD_RESULTS = [
    {"op": "INSERT", "columns": [], "records": []},
    {"op": "RETRIEVE", "columns": ["K", "S", "F"],
     "records": [dict(zip("KSF", r, strict=True)) for r in GOOD_ROWS]},
    {"op": "RETRIEVE", "columns": ["STATE", "AVG(POP)"],
     "records": [{"STATE": "CA", "AVG(POP)": 1e300}]},
]


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(4),
                         options=[("grpc.max_send_message_length", MAX_MESSAGE)])
    rpc.add_ControllerServicer_to_server(Fake(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def sync_session(address: str, texts: list[str]) -> list[Any]:
    with Client(address, timeout=30) as c:
        return [_outcome(lambda t=text: c.execute(t)) for text in texts]


def sync_call(address: str, texts: list[str]) -> list[Any]:
    with Client(address, timeout=30) as c:
        return [_outcome(lambda t=text: collect(c.call(t))) for text in texts]


def asynchronous(address: str, texts: list[str]) -> list[Any]:
    async def run() -> list[Any]:
        async with AsyncClient(address, timeout=30) as c:
            out = []
            for text in texts:
                try:
                    out.append(await c.execute(text))
                except ClientError as e:
                    out.append(e)
            return out
    return asyncio.run(run())


def _outcome(ask: Callable[[], Any]) -> Any:
    try:
        return ask()
    except ClientError as e:
        return e


CLIENTS = [sync_session, sync_call, asynchronous]


@pytest.mark.parametrize("ask", CLIENTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_malformed_answer_raises_internal_naming_the_fault(address: str, ask: Any,
                                                             case: str) -> None:
    # The client goes on after it: the next answer, well-formed, is read whole.
    error, after = ask(address, [case, "good"])
    assert isinstance(error, ClientError), error
    assert error.code == "INTERNAL"
    assert str(error).startswith(("a malformed answer from the controller: ",
                                  "rows of request 0 that are not JSON rows of its "))
    assert HOSTILE[case][1] in str(error)
    assert len(str(error)) < 300
    assert _shown(after) == GOOD_RESULTS


# `failure` is the Session's (an Execute call ends with a gRPC status instead).
@pytest.mark.parametrize("ask", [sync_session, asynchronous], ids=lambda f: f.__name__)
def test_a_failure_of_megabytes_is_raised_shortened(address: str, ask: Any) -> None:
    [error] = ask(address, ["a failure of 10 MB"])
    assert isinstance(error, ClientError), error
    assert error.code == "X" * 100 + "… (1000 characters)"
    assert str(error) == "m" * 1000 + "… (10000000 characters)"


@pytest.mark.parametrize("ask", CLIENTS, ids=lambda f: f.__name__)
def test_a_well_formed_answer_comes_back_unchanged(address: str, ask: Any) -> None:
    [results] = ask(address, ["good"])
    assert _shown(results) == GOOD_RESULTS
    assert [r.stats["records_retrieved"] for r in results] == [1, 2, 1]
    assert [r.elapsed_ms for r in results] == [2.0, 2.0, 2.0]
    assert results[1].stats["backends"] == [
        {"backend": "b0", "records": 2, "elapsed_ms": 0.5}]


def _shown(results: Any) -> Any:
    assert isinstance(results, list), results
    return [{"op": r.op, "columns": r.columns, "records": r.records} for r in results]


# A dump's answer: file F's rows (FILE first, as the controller sends them).
DUMP_ROWS = '[["F", 1, 2], ["F", 3, null]]'
DUMPS = {
    "rows of a short row": ([header(0, ("FILE", *AB)), rows(0, '[["F", 1, 2], ["F", 3]]', 2),
                             done()], "row 1 has 2 values"),
    "rows before the header": ([rows(0, DUMP_ROWS, 2), header(0, ("FILE", *AB)), done()],
                               "rows for request 0, which has no header"),
    "no done": ([header(0, ("FILE", *AB)), rows(0, DUMP_ROWS, 2)], "no done for request 0"),
    "NaN": ([header(0, ("FILE", *AB)), rows(0, '[["F", 1, NaN]]'), done()],
            "NaN is not a JSON value"),
}
DUMPING: dict[str, str] = {}


@pytest.mark.parametrize("case", list(DUMPS))
def test_a_dump_of_a_malformed_answer_fails_saying_it_is_incomplete(
        address: str, case: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mbds dump` reads its answer with the client's checks: a malformed one ends it
    with an error (exit 1) that says how much of the file was written, never a dump
    that passes for whole."""
    from click.testing import CliRunner

    from cli.transfer import dump

    out = tmp_path / "f.jsonl"
    monkeypatch.setitem(DUMPING, "case", case)
    got = CliRunner().invoke(dump, ["--controller", address, "F", "--out", str(out),
                                    "--timeout", "30"], catch_exceptions=False)
    assert got.exit_code == 1, got.output
    assert DUMPS[case][1] in got.output
    assert "the dump is incomplete: " in got.output and f"written to {out}" in got.output


def test_a_dump_of_a_well_formed_answer_writes_every_record(address: str,
                                                           tmp_path: Any) -> None:
    from click.testing import CliRunner

    from cli.transfer import dump

    out = tmp_path / "f.jsonl"
    got = CliRunner().invoke(dump, ["--controller", address, "F", "--out", str(out)],
                             catch_exceptions=False)
    assert got.exit_code == 0, got.output
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"A": 1, "B": 2}, {"A": 3, "B": None}]
