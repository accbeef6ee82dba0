"""What a client reads back of a request, shared by `Client` and `AsyncClient`: the
request's message, the reply batches' end, the results built from them, and the errors
a request fails with (`ClientError`, named by gRPC's status)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc

from mbds.errors import shorten
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


def _error(e: grpc.RpcError) -> ClientError:
    details = e.details() or e.code().name
    if e.code() == grpc.StatusCode.UNAVAILABLE and details.endswith("Socket closed"):
        # What a port serving TLS does to a plaintext connection, in gRPC's words.
        details += (" (if the controller serves TLS, the client needs the cluster's CA: "
                    "--ca or env MBDS_CA)")
    elif e.code() == grpc.StatusCode.UNAVAILABLE and "Connection refused" in details:
        # gRPC's socket engines word it "… Connection refused" or "… (111)".
        details += (" (is a controller running there? `mbds up` starts one; --controller "
                    "or env MBDS_CONTROLLER gives another address)")
    return ClientError(e.code().name, details)


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
        raise ClientError(batch.failure.code, batch.failure.message)
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
    return ClientError("DEADLINE_EXCEEDED",
                       f"no answer from the controller in {timeout + 5:g} s")


def collect(replies: Iterable[pb.ExecuteReply]) -> list[Result]:
    results: list[Result] = []
    for reply in replies:
        kind = reply.WhichOneof("body")
        if kind == "header":
            results.append(Result(reply.header.op, list(reply.header.columns)))
        elif kind == "rows":
            r = results[reply.request_index]
            try:
                r.records.extend(dict(zip(r.columns, row, strict=True))
                                 for row in json.loads(reply.rows.rows_json))
            except (ValueError, TypeError) as e:
                # A plain retrieve's rows come from a backend through the controller
                # undecoded: this is where they are first read.
                raise ClientError("INTERNAL", f"rows of request {reply.request_index} that "
                                  f"are not JSON rows of its {len(r.columns)} columns: "
                                  f"{shorten(str(e))}") from None
        elif kind == "done":    # a write's `done` comes after the commit: its acknowledgement
            results[reply.request_index].stats = stats_dict(reply.done.stats)
            results[reply.request_index].elapsed_ms = reply.done.elapsed_ms
    return results
