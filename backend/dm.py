"""DM — directory management (docs/spec.md §4 steps 2–5): descriptor search, cluster search,
address generation. Pure functions over the in-memory directory; they write the
request plans (`backend/plan.py`) that RECP runs. The message flow around them
(locks, the peer broadcast) lives in `backend/node.py`.

Descriptor search is split over the backends: backend i searches the
predicates whose index in the traffic unit is i modulo n, and broadcasts the
descriptor ids it found (`dm.descriptor_ids`); every backend then has the ids of
all m predicates and runs cluster search on its own.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator

from backend import load
from backend.cc import IS, IX, S, X, join
from backend.plan import DescriptorResults, FilePlan, RequestPlan
from mbds import traffic
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.traffic import RELOPS
from mbds.values import from_pb


def predicates(tu: pb.TrafficUnit) -> Iterator[tuple[int, pb.Conjunction, pb.Predicate]]:
    """Every predicate of the traffic unit with its global index (the m of docs/spec.md §4)."""
    return traffic.predicates(tu.requests)


def descriptor_search(directory: Directory, tu: pb.TrafficUnit, index: int,
                      n: int) -> DescriptorResults:
    """This backend's share (about m/n) of the traffic unit's descriptor search."""
    found: DescriptorResults = {}
    for i, conj, p in predicates(tu):
        if i % n == index:
            found[i] = directory.descriptor_search(
                list(conj.files), p.attr, RELOPS[p.op], from_pb(p.value))
    return found


def type_c_attributes(directory: Directory, tu: pb.TrafficUnit) -> set[tuple[str, str]]:
    """(file, attribute) of every type-C attribute the traffic unit's predicates read."""
    out = set()
    for _, conj, p in predicates(tu):
        for f in conj.files:
            idx = directory.at.get((f, p.attr))
            if idx is not None and idx.kind == "C":
                out.add((f, p.attr))
    return out


def add_pb_results(msg: pb.DescriptorIds, found: DescriptorResults) -> None:
    """Add the descriptor ids found to a message for the peers (built in place: a
    message passed to a constructor is copied into it)."""
    for i, d in found.items():
        msg.results.add(predicate_index=i, descriptor_ids=sorted(d or ()),
                        unrestricted=d is None)


def _plan_retrieval(directory: Directory, retrieval: pb.Retrieval, start: int,
                    found: DescriptorResults) -> tuple[list[FilePlan], int]:
    """Cluster search for every conjunction, merged per file; returns the plans and the
    index of the next predicate."""
    plans: dict[str, FilePlan] = {}
    i = start
    for conj in retrieval.query.conjunctions:
        allowed: dict[str, set[int]] = {}
        record_preds = []
        for p in conj.predicates:
            dids = found[i]
            i += 1
            if dids is not None:
                allowed[p.attr] = allowed[p.attr] & dids if p.attr in allowed else set(dids)
            if p.attr != "FILE":     # FILE is settled by the choice of file
                record_preds.append((p.attr, RELOPS[p.op], from_pb(p.value)))
        for f in conj.files:
            schema = directory.files[f]
            mine = {a: d for a, d in allowed.items() if a in schema.directory_attributes}
            plan = plans.setdefault(f, FilePlan(schema, []))
            plan.clusters = sorted(set(plan.clusters) | directory.cluster_search(f, mine))
            plan.conjunctions.append(record_preds)
    for f, plan in plans.items():
        plan.every_cluster = len(plan.clusters) == len(directory.file_clusters.get(f, ()))
    return list(plans.values()), i


def plan_requests(directory: Directory, tu: pb.TrafficUnit,
                  found: DescriptorResults) -> list[RequestPlan]:
    """Cluster search and address generation for every request of a traffic unit."""
    plans, i = [], 0
    for req in tu.requests:
        rp = RequestPlan(req, op=req.op)
        if req.op == pb.INSERT:
            rp.clusters_examined = len(load.cluster_ids(req))
        else:
            rp.targets = [(t.attr, t.agg) for t in req.retrieval.targets]
            rp.files, i = _plan_retrieval(directory, req.retrieval, i, found)
            if req.op == pb.RETRIEVE_COMMON:
                rp.right, i = _plan_retrieval(directory, req.right, i, found)
            rp.clusters_examined = sum(len(p.clusters) for p in rp.files + rp.right)
        plans.append(rp)
    return plans


def lock_set(plans: list[RequestPlan]) -> dict[Hashable, str]:
    """The CC lock set a traffic unit needs on this backend.

    A request that visits every cluster of a file locks the file (S to read, X to
    write) instead of each cluster: one lock instead of hundreds, and it also keeps
    out an INSERT into a cluster created after the plan was made (a phantom), since
    the insert's IX on the file conflicts with it. Otherwise clusters are locked one
    by one under an intention lock on the file.
    """
    wants: dict[Hashable, str] = {}

    def want(res: Hashable, mode: str) -> None:
        wants[res] = join(wants[res], mode) if res in wants else mode

    for rp in plans:
        req = rp.request
        if req.op == pb.INSERT:
            for cid in load.cluster_ids(req):
                want(("cluster", cid), X)
            if req.records or req.columns.count:
                want(("file", req.file), IX)
            continue
        reads = req.op in (pb.RETRIEVE, pb.RETRIEVE_COMMON)
        for fp in rp.files + rp.right:
            if req.moves_records or fp.every_cluster:
                want(("file", fp.schema.name), S if reads and not req.moves_records else X)
                continue
            want(("file", fp.schema.name), IS if reads else IX)
            for cid in fp.clusters:
                want(("cluster", cid), S if reads else X)
    return wants
