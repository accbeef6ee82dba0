"""DM's plan cache: what a repeated traffic unit's requests come to on this backend.

A unit whose requests this backend has already checked and planned, at the same
directory generation, gets the same check, type-C attributes, share of descriptor
search, descriptor-id groups, plans and CC lock set without working them out again:
a repeated request costs a lookup, as a prepared statement's plan does in a SQL
database. Every directory change (a new descriptor, cluster or file, a definition
taken back) starts a new generation, and an entry of an older one is worked out
anew. The key is the requests' own bytes, so two units share an entry only when
their requests are equal. Units that carry a directory update or insert are never
kept: their check parses and validates data that differs every time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import cast

from backend import check, dm
from backend.cc import S
from backend.plan import DescriptorResults, RequestPlan
from mbds import metrics, traffic
from mbds.directory import Directory, changes
from mbds.proto import mbds_pb2 as pb

SIZE = 512      # unit shapes kept, the least recently used going first
# Descriptor ids of a share, or clusters of a unit's plans, that one shape keeps at most:
# a unit over it scans so much that planning it again costs little beside the scan, and
# the cache's memory stays bounded (SIZE × ITEMS ids) whatever the directory's size.
ITEMS = 4096
# Bytes of a unit's requests, its key, that a kept shape may have at most: a request
# may carry a megabyte of values, and 512 such keys would be half a gigabyte.
KEY_BYTES = 4096


def _ids(found: DescriptorResults) -> int:
    return sum(len(d) for d in found.values() if d)


def _clusters(plans: list[RequestPlan]) -> int:
    return sum(len(fp.clusters) for rp in plans for fp in rp.files + rp.right)


class Shape:
    """One unit shape's work at one directory generation."""

    __slots__ = ("generation", "attrs", "groups", "files", "predicates", "shares", "peers",
                 "planned")

    def __init__(self, generation: int, attrs: set[tuple[str, str]],
                 groups: dict[Hashable, str], predicates: int) -> None:
        self.generation = generation
        self.attrs = attrs
        self.groups = groups
        # The files its predicates search: those whose movers it waits for (`movers.py`).
        self.files = frozenset(cast(tuple[str, str, str], g)[1] for g in groups)
        self.predicates = predicates       # m, over which descriptor search is split
        self.shares: dict[tuple[int, int], DescriptorResults] = {}
        # Peers' shares by (sender, n), as checked: the same ids again need no check.
        self.peers: dict[tuple[int, int], DescriptorResults] = {}
        # The descriptor ids the plans were made from, the plans, and their lock set.
        self.planned: tuple[DescriptorResults, list[RequestPlan], dict[Hashable, str]] \
            | None = None


def did_groups(tu: pb.TrafficUnit) -> dict[Hashable, str]:
    """The descriptor-id groups cluster search reads (locked shared around it)."""
    return {("didgroup", f, p.attr): S for _, c, p in dm.predicates(tu) for f in c.files}


def _counted(shape: Shape, tu: pb.TrafficUnit) -> Shape:
    """The shape, once the unit's m is its requests' own: who sends ids and who waits
    for them is worked out from m, and a wrong one would leave a backend waiting for
    ids nobody sends."""
    if tu.split_search and tu.predicate_count != shape.predicates:
        raise check.BadMessage(f"the unit counts {tu.predicate_count} predicates; its "
                               f"requests have {shape.predicates}")
    return shape


class PlanCache:
    """Shapes by their requests' bytes, valid while the directory's generation lasts."""

    def __init__(self, directory: Directory, backend: str, size: int = SIZE,
                 items: int = ITEMS) -> None:
        self.directory = directory
        self.size, self.items = size, items
        self.shapes: OrderedDict[tuple[bytes, ...], Shape] = OrderedDict()
        self._hit = metrics.child(metrics.PLAN_CACHE, "hit", backend)
        self._miss = metrics.child(metrics.PLAN_CACHE, "miss", backend)

    def checked(self, tu: pb.TrafficUnit, carried: bool | None = None) -> Shape:
        """Check the unit against the directory (`check.BadMessage` if it does not fit)
        and return its shape: the cached one when it was checked at this generation.
        `carried`: whether the unit carries directory entries, if the caller knows."""
        if carried is None:
            carried = changes(tu.directory)
        key: tuple[bytes, ...] | None = None
        if not carried and all(r.op != pb.INSERT for r in tu.requests):
            key = tuple(r.SerializeToString() for r in tu.requests)
            if sum(map(len, key)) > KEY_BYTES:
                key = None
        if key is not None:
            shape = self.shapes.get(key)
            if shape is not None and shape.generation == self.directory.generation:
                self.shapes.move_to_end(key)
                self._hit.inc()
                return _counted(shape, tu)
        self._miss.inc()
        check.traffic_unit(self.directory, tu)
        shape = Shape(self.directory.generation, dm.type_c_attributes(self.directory, tu),
                      did_groups(tu), traffic.predicate_count(tu.requests))
        _counted(shape, tu)
        if key is not None:
            self.shapes[key] = shape
            self.shapes.move_to_end(key)
            if len(self.shapes) > self.size:
                del self.shapes[next(iter(self.shapes))]    # the least recently used
        return shape

    def search(self, shape: Shape, tu: pb.TrafficUnit, index: int, n: int) -> DescriptorResults:
        """This backend's share of descriptor search (made under the type-C locks)."""
        if shape.generation != self.directory.generation:
            return dm.descriptor_search(self.directory, tu, index, n)
        found = shape.shares.get((index, n))
        if found is None:
            found = dm.descriptor_search(self.directory, tu, index, n)
            if _ids(found) <= self.items:
                shape.shares[(index, n)] = found
        return found

    def peer_share(self, shape: Shape, tu: pb.TrafficUnit, sender: int, n: int,
                   msgs: list[pb.PredicateDescriptors]) -> DescriptorResults:
        """A peer's share of the unit's descriptor search, as sent; checked against the
        unit (`check.peer_ids`) unless the same share of this shape passed before."""
        found: DescriptorResults = {
            m.predicate_index: None if m.unrestricted else set(m.descriptor_ids) for m in msgs}
        if len(found) != len(msgs):
            raise check.BadMessage("a predicate's ids sent twice")
        current = shape.generation == self.directory.generation
        if current and shape.peers.get((sender, n)) == found:
            return found
        check.peer_ids(self.directory, tu, sender, n, found)
        if current and _ids(found) <= self.items:
            shape.peers[(sender, n)] = found
        return found

    def plan(self, shape: Shape, tu: pb.TrafficUnit, found: DescriptorResults
             ) -> tuple[list[RequestPlan], dict[Hashable, str]]:
        """Cluster search and address generation (made under the did-group locks), and
        the CC lock set of the plans."""
        current = shape.generation == self.directory.generation
        if current and shape.planned is not None and shape.planned[0] == found:
            return shape.planned[1], shape.planned[2]
        plans = dm.plan_requests(self.directory, tu, found)
        locks = dm.lock_set(plans)
        if current and _ids(found) <= self.items and _clusters(plans) <= self.items:
            shape.planned = (found, plans, locks)
        return plans, locks
