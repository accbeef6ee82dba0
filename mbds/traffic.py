"""What the controller and the backends both read off a traffic unit: the comparison
operators, and its predicates in the one order both ends number them (docs/spec.md §4's m)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from mbds.proto import mbds_pb2 as pb

# Indexed by pb.Relop; the same symbols in ABDL and in SQL.
RELOPS: tuple[str, ...] = ("=", "!=", "<", "<=", ">", ">=")
RELOP_PB: dict[str, int] = {name: i for i, name in enumerate(RELOPS)}
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge}


def retrievals(req: pb.Request) -> list[pb.Retrieval]:
    """The queries of a request whose predicates descriptor search answers."""
    if req.op == pb.INSERT:
        return []
    if req.op == pb.RETRIEVE_COMMON:
        return [req.retrieval, req.right]
    return [req.retrieval]


def predicates(requests: Iterable[pb.Request]
               ) -> Iterator[tuple[int, pb.Conjunction, pb.Predicate]]:
    """Every predicate of the requests with its index in the traffic unit."""
    i = 0
    for req in requests:
        for retrieval in retrievals(req):
            for conj in retrieval.query.conjunctions:
                for p in conj.predicates:
                    yield i, conj, p
                    i += 1


def predicate_count(requests: Iterable[pb.Request]) -> int:
    """m: how many predicates the backends' descriptor search is split over."""
    return sum(1 for _ in predicates(requests))
