"""A small synchronous client for the controller (used by the CLI, tests and loadgen)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.values import Value, to_pb

DEFAULT_CONTROLLER = os.environ.get("MBDS_CONTROLLER", "127.0.0.1:50051")


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
    return ClientError(e.code().name, e.details() or e.code().name)  # type: ignore[attr-defined]


class Client:
    def __init__(self, address: str = DEFAULT_CONTROLLER, *, timeout: float = 120.0,
                 channel_options: Sequence[tuple[str, Any]] = ()) -> None:
        self.address = address
        self.timeout = timeout
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", 64 << 20), *channel_options])
        self.stub = rpc.ControllerStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def stream(self, text: str) -> Iterator[pb.ExecuteReply]:
        """The raw reply stream of one traffic unit (headers, row batches, done)."""
        try:
            for batch in self.stub.Execute(pb.ExecuteRequest(text=text, timeout_s=self.timeout),
                                           timeout=self.timeout + 5):
                yield from batch.replies
        except grpc.RpcError as e:
            raise _error(e) from None

    def execute(self, text: str) -> list[Result]:
        """Run one request or transaction; one Result per request."""
        return collect(self.stream(text))

    def define(self, yaml_text: str) -> pb.DefineReply:
        try:
            return self.stub.Define(pb.DefineRequest(yaml=yaml_text), timeout=self.timeout)
        except grpc.RpcError as e:
            raise _error(e) from None

    def status(self) -> pb.StatusReply:
        try:
            return self.stub.Status(pb.StatusRequest(), timeout=10)
        except grpc.RpcError as e:
            raise _error(e) from None

    def load(self, file: str, attributes: list[str],
             rows: Iterable[tuple[list[Value], str | None]], *, chunk: int = 2000
             ) -> Iterator[pb.RequestDone]:
        """Bulk-insert records (values aligned with `attributes`); yields each chunk's done."""
        def chunks() -> Iterator[pb.LoadRequest]:
            req = pb.LoadRequest(file=file, attributes=attributes)
            for values, body in rows:
                r = req.records.add(values=[to_pb(v) for v in values])
                if body is not None:
                    r.body = body
                if len(req.records) >= chunk:
                    yield req
                    req = pb.LoadRequest(file=file, attributes=attributes)
            if req.records:
                yield req
        try:
            for batch in self.stub.Load(chunks(), timeout=max(self.timeout, 3600)):
                for reply in batch.replies:
                    if reply.WhichOneof("body") == "done":
                        yield reply.done
        except grpc.RpcError as e:
            raise _error(e) from None


def collect(replies: Iterable[pb.ExecuteReply]) -> list[Result]:
    results: list[Result] = []
    for reply in replies:
        kind = reply.WhichOneof("body")
        if kind == "header":
            results.append(Result(reply.header.op, list(reply.header.columns)))
        elif kind == "rows":
            r = results[reply.request_index]
            r.records.extend(dict(zip(r.columns, row, strict=True))
                             for row in json.loads(reply.rows.rows_json))
        elif kind == "done":    # a write's `done` comes after the commit: its acknowledgement
            results[reply.request_index].stats = stats_dict(reply.done.stats)
            results[reply.request_index].elapsed_ms = reply.done.elapsed_ms
    return results
