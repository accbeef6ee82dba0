"""What a client reads back of a request, shared by `Client` and `AsyncClient`: the
request's message, the reply batches' end, the results built from them, and the errors
a request fails with (`ClientError`, named by gRPC's status)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import grpc

from mbds.errors import FAILURE_MESSAGE, shorten
from mbds.proto import mbds_pb2 as pb


class ClientError(Exception):
    """The controller refused or failed a call; `code` is the gRPC status name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Result:
    """One request's answer, shaped like `mbds exec --json` prints it."""
    op: str
    columns: list[str]
    records: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    elapsed_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "records": self.records, "stats": self.stats,
                "elapsed_ms": round(self.elapsed_ms, 3)}


def stats_dict(s: pb.RequestStats) -> dict[str, Any]:
    return {"clusters_examined": s.clusters_examined, "records_retrieved": s.records_retrieved,
            "backends": [{"backend": b.backend, "records": b.records,
                          "elapsed_ms": round(b.elapsed_ms, 3)} for b in s.backends]}


# Where a client takes the cluster's CA from, as the hints name it.
CA_FROM = "env MBDS_CA, or Client(ca=...)"


def _error(e: grpc.RpcError) -> ClientError:
    return ClientError(e.code().name, hinted(e))


def hinted(e: grpc.RpcError) -> str:
    """gRPC's details of a failed call, with what to do when they say the client could not
    connect: gRPC's words name the failure, not its usual cause here."""
    details = e.details() or e.code().name
    if e.code() == grpc.StatusCode.UNIMPLEMENTED and details == "Method not found!":
        # gRPC's answer from a server without the controller's client service.
        return (f"{details} (the process there is not a controller's client port: a "
                "backend, or a controller's internal port? --controller or env "
                "MBDS_CONTROLLER gives the controller's address)")
    if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and details == "Deadline Exceeded":
        # The client's own deadline: the controller's failures say what they aborted.
        return (f"{details} (no answer from the controller in time: is it stopped or "
                "overloaded? A call that changes something, such as a definition, may or "
                "may not have been carried out)")
    if e.code() != grpc.StatusCode.UNAVAILABLE:
        return shorten(details, FAILURE_MESSAGE)
    if details.endswith("Socket closed"):
        # What a port serving TLS does to a plaintext connection, in gRPC's words.
        hint = (f"if the controller serves TLS, the client needs the cluster's CA: {CA_FROM}; "
                "and a token, if it asks for one: env MBDS_TOKEN, or Client(token=...)")
    elif any(words in details for words in ("CERTIFICATE_VERIFY_FAILED", "BAD_SIGNATURE")):
        # The CA given did not sign the controller's certificate: BAD_SIGNATURE when it
        # has the name of the one that did, as every cluster's CA has.
        hint = (f"the CA the client checks the controller with ({CA_FROM}) is not the one "
                "that signed the controller's certificate: a cluster made again (`docker "
                "compose down -v`, a new data directory) has a new CA; take its ca.pem again")
    elif "WRONG_VERSION_NUMBER" in details:
        # A TLS client's handshake answered in plaintext.
        hint = ("the controller there serves plaintext, not TLS: leave the CA out (unset env "
                "MBDS_CA; no Client(ca=...)), or give the address of one that serves TLS")
    elif "Failed to create security handshaker" in details:
        # What gRPC says when the CA file holds no certificate it can read.
        hint = (f"the CA the client checks the controller with ({CA_FROM}) holds no "
                "certificate gRPC can read: give the cluster's ca.pem")
    elif "Connection refused" in details:
        # gRPC's socket engines word it "… Connection refused" or "… (111)".
        hint = ("is a controller running there? start one with `mbds up`, or with `docker "
                "compose up -d` if you use the containers (docs/containers.md); --controller "
                "or env MBDS_CONTROLLER gives another address")
    else:
        return shorten(details, FAILURE_MESSAGE)
    # Bounded as a failure from the controller is: gRPC's words repeat the address.
    return f"{shorten(details, FAILURE_MESSAGE)} ({hint})"


def _code(e: Exception) -> str | None:
    """The status name of a ClientError or a gRPC error, None for anything else."""
    if isinstance(e, ClientError):
        return e.code
    return e.code().name if isinstance(e, grpc.RpcError) else None


def _request(text: str, timeout: float) -> pb.ExecuteRequest:
    """The message of one request; INVALID_ARGUMENT for text the wire cannot carry: a
    surrogate, such as the escape of a byte that was not UTF-8 in a command line."""
    try:
        return pb.ExecuteRequest(text=text, timeout_s=timeout)
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        what = (f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF
                else f"character U+{code:04X}")
        raise ClientError("INVALID_ARGUMENT", f"the request is not valid UTF-8 ({what} at "
                          f"character {e.start})") from None


def _ended(batch: pb.ExecuteReplies) -> bool:
    """Whether `batch` is its request's last message; raises the request's failure."""
    if not batch.end:
        return False
    if batch.HasField("failure"):
        # Bounded as the controller bounds its own: a message of megabytes is no error.
        f = batch.failure
        raise ClientError(shorten(f.code), shorten(f.message, FAILURE_MESSAGE))
    return True


def _closed() -> ClientError:
    return ClientError("UNAVAILABLE", "the controller closed the session")


def client_closed() -> ClientError:
    """A request made after the client's `close()`."""
    return ClientError("FAILED_PRECONDITION", "the client is closed")


def closed_under_way() -> ClientError:
    """A request the client's `close()` ended before its answer was whole."""
    return ClientError("CANCELLED", "the client was closed while the request was under way")


def _deadline(timeout: float) -> ClientError:
    """The client gave up on a silent controller: unlike the controller's own deadline,
    which aborts the unit ("traffic unit aborted: …"), this leaves the outcome unknown."""
    return ClientError("DEADLINE_EXCEEDED",
                       f"no answer from the controller in {timeout + 5:g} s: the request "
                       "may or may not have run")


class Answer:
    """One answer's replies checked as they come (`take`), and its results so far: an
    answer that breaks the protocol (replies of a request not announced by its header,
    rows that are not rows of its columns, a request left without its `done`) raises
    INTERNAL naming the fault — never wrong records, nor an IndexError from here."""

    def __init__(self) -> None:
        self.results: list[Result] = []
        self.done: list[bool] = []

    def take(self, reply: pb.ExecuteReply) -> list[list[Any]]:
        """The rows `reply` carries, checked (none for a header or a done, which are
        taken into `results`)."""
        kind = reply.WhichOneof("body")
        i = reply.request_index
        results, done = self.results, self.done
        if kind == "header":
            if i != len(results):
                raise _malformed(f"a header for request {i} after {_headers(results)}")
            results.append(Result(reply.header.op, list(reply.header.columns)))
            done.append(False)
        elif kind == "rows":
            if i >= len(results) or done[i]:
                raise _malformed(f"rows for request {i}, {_unopened(i, results)}")
            return _rows(i, results[i].columns, reply.rows.rows_json)
        elif kind == "done":    # a write's `done` comes after the commit: its acknowledgement
            if i >= len(results) or done[i]:
                raise _malformed(f"a done for request {i}, {_unopened(i, results)}")
            done[i] = True
            results[i].stats = stats_dict(reply.done.stats)
            results[i].elapsed_ms = reply.done.elapsed_ms
        return []

    def finish(self) -> list[Result]:
        """The results, once the answer has ended: every request has its `done`."""
        if not all(self.done):
            # Without it a write would pass for acknowledged, a read for whole.
            raise _malformed(f"no done for request {self.done.index(False)}: the answer "
                             "ended without it")
        return self.results


def collect(replies: Iterable[pb.ExecuteReply]) -> list[Result]:
    """The results of one answer's replies, checked (`Answer`)."""
    answer = Answer()
    results = answer.results
    for reply in replies:
        rows = answer.take(reply)
        if rows:
            r = results[reply.request_index]
            # `_rows` checked every row's length, and zip given a keyword (strict=)
            # goes through its slow path, a third of this line's time.
            r.records.extend(dict(zip(r.columns, row)) for row in rows)  # noqa: B905
    return answer.finish()


def _malformed(fault: str) -> ClientError:
    return ClientError("INTERNAL", f"a malformed answer from the controller: {fault}")


def _unopened(i: int, results: list[Result]) -> str:
    return ("after its done" if i < len(results)
            else f"which has no header ({_headers(results)} so far)")


def _headers(results: list[Result]) -> str:
    return f"{len(results)} header{'s' * (len(results) != 1)}"


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


# Rows as the controller writes them: strict JSON, so NaN and Infinity are refused.
_DECODER = json.JSONDecoder(parse_constant=_constant)
_LIST = frozenset((list,))
# A row's values: stored values (integer, float, string, null) and aggregates of them; a
# boolean, list or object is none the controller sends.
_VALUE = frozenset((type(None), int, float, str))
_KIND = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
         int: "a number", float: "a number", type(None): "null"}


def _rows(i: int, columns: list[str], rows_json: bytes) -> list[list[Any]]:
    """A row batch's rows, checked: a JSON list of rows as long as `columns`, each value
    null, a number or a string. Every row of every answer passes here, so the check is
    three `issuperset` passes of `map`, which run in C."""
    try:
        rows = _DECODER.decode(rows_json.decode())
    except (ValueError, RecursionError) as e:
        # A plain retrieve's rows come from a backend through the controller
        # undecoded: this is where they are first read.
        raise _not_rows(i, columns, shorten(str(e))) from None
    if type(rows) is not list or not (
            _LIST.issuperset(map(type, rows)) and {len(columns)}.issuperset(map(len, rows))
            and _VALUE.issuperset(map(type, chain.from_iterable(rows)))):
        raise _not_rows(i, columns, _misfit(rows, columns))
    return rows


def _not_rows(i: int, columns: list[str], why: str) -> ClientError:
    return ClientError("INTERNAL", f"rows of request {i} that are not JSON rows of its "
                       f"{len(columns)} columns: {why}")


def _misfit(rows: Any, columns: list[str]) -> str:
    """What `_rows` found wrong, looked for once the fast check has failed."""
    if type(rows) is not list:
        return f"{_KIND[type(rows)]}, not a list of rows"
    for k, row in enumerate(rows):
        if type(row) is not list:
            return f"row {k} is {_KIND[type(row)]}, not a list"
        if len(row) != len(columns):
            try:    # zip's own words: longer or shorter than the columns
                dict(zip(columns, row, strict=True))
            except ValueError as e:
                return f"{e}: row {k} has {len(row)} value{'s' * (len(row) != 1)}"
        for v in row:
            if type(v) not in _VALUE:
                return f"row {k} holds {_KIND[type(v)]}, not null, a number or a string"
    return "no fault found"     # not reached: the fast check failed on something
