"""What DM produces: descriptor search's results and, from address generation, the
request plans RECP reads.

DM (`dm.plan_requests`) builds one `RequestPlan` per request; RECP (`recp_read.py`,
`recp_write.py`) runs its `FilePlan`s against this backend's records. Neither imports
the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mbds.proto import mbds_pb2 as pb
from mbds.schema import FileSchema
from mbds.values import Value

# predicate index -> descriptor ids that may satisfy it, or None (no directory attribute):
# descriptor search's result, exchanged with the peers and read by cluster search.
DescriptorResults = dict[int, set[int] | None]

# The request kinds that write: a unit with one of them runs in the writer thread.
WRITES = (pb.INSERT, pb.DELETE, pb.UPDATE)


@dataclass
class FilePlan:
    """One file of a request: the clusters to visit and the record condition."""
    schema: FileSchema
    clusters: list[int]
    # Per applicable conjunction, its non-FILE predicates as (attr, sql op, value).
    conjunctions: list[list[tuple[str, str, Value]]] = field(default_factory=list)
    # Every cluster of the file: no address list is needed, a sequential scan of the
    # file's table is cheaper than a probe of the cluster index per cluster.
    every_cluster: bool = False


@dataclass
class RequestPlan:
    """Address generation's output for one request: per file, the clusters to visit."""
    request: pb.Request
    files: list[FilePlan] = field(default_factory=list)
    right: list[FilePlan] = field(default_factory=list)       # RETRIEVE-COMMON right side
    clusters_examined: int = 0
    # Read from the request once, when it is planned, rather than by every unit that
    # reuses the plan (`plancache.py`): its operation, and a retrieval's target
    # attributes with their aggregates ("" for none).
    op: int = 0
    targets: list[tuple[str, str]] = field(default_factory=list)

    @property
    def writes(self) -> bool:
        return self.op in WRITES
