"""IIG's placement of a bulk load's columnar batch (`Iig.place_batch`).

The rule is IIG's per-record one (iig.py: a record's cluster, then the backend with the
fewest of that cluster's records), worked out per directory column and per cluster
instead of per record, since a batch holds up to tens of thousands of records; each
backend's share is then cut out of the client's columns without building records.
"""

from __future__ import annotations

from collections import Counter
from operator import itemgetter
from typing import TYPE_CHECKING

from controller.load import LoadBatch
from mbds import columns
from mbds.proto import mbds_pb2 as pb

if TYPE_CHECKING:
    from controller.iig import Iig


def place_batch(iig: Iig, i: int, batch: LoadBatch, backends: list[str],
                update: pb.DirectoryUpdate, units: dict[int, pb.TrafficUnit]) -> int:
    """Place a columnar load batch: each record's cluster (descriptor ids looked up
    per directory column, clusters per distinct combination), then each cluster's
    records dealt out over the backends in the order `Iig.choose_backend` would send
    them one by one, worked out per cluster rather than per record. Request `i` of
    each unit gets its backend's records by column; new entries go to `update`.
    Returns the number of clusters the batch touched."""
    schema, file, n = batch.schema, batch.schema.name, batch.count
    d = iig.directory
    id_columns: list[list[int | None]] = []    # every None replaced below
    for attr in schema.directory_attributes[1:]:
        vals = batch.values(schema.index[attr]) or [None] * n
        find = d.at[(file, attr)].find
        ids = list(map(find, vals))
        if None in ids:     # type-C values seen for the first time (once each)
            for j, did in enumerate(ids):
                if did is None:
                    found = find(vals[j])      # allocated for an earlier record
                    ids[j] = (iig.new_type_c(file, attr, vals[j], update)
                              if found is None else found)
        id_columns.append(ids)
    file_did = d.at[(file, "FILE")].find(file)
    assert file_did is not None
    # The file's own descriptor in every key: a file whose only directory attribute is
    # FILE has one cluster (and no column to end the zip).
    keys = list(zip([file_did] * n, *id_columns, strict=True))
    cid_of = {k: iig.cluster_of_ids(file, k, update) for k in dict.fromkeys(keys)}
    cids = list(map(cid_of.__getitem__, keys))
    per_cluster = Counter(cids)
    deals = {cid: _spread(iig, cid, k, backends) for cid, k in sorted(per_cluster.items())}
    if len(backends) == 1:
        units[0].requests[i].load_columns = _columns(batch, cids, None)
    else:
        # Each cluster's records, in load order, are dealt out one at a time as the
        # per-record rule would: a range of them (what a range predicate finds in
        # the cluster at its edge) is split evenly too, not left on one backend.
        order = sorted(range(n), key=cids.__getitem__)   # by cluster, stable
        mine: list[list[int]] = [[] for _ in backends]
        start = 0
        for cid in sorted(per_cluster):
            for group, rounds in deals[cid]:
                end = start + rounds * len(group)
                for offset, b in enumerate(group):
                    mine[b].extend(order[start + offset:end:len(group)])
                start = end
        for b, idx in enumerate(mine):
            if idx:
                units[b].requests[i].load_columns = _columns(
                    batch, [cids[j] for j in idx], idx)
    for tu in units.values():
        tu.requests[i].record_count = n
    return len(per_cluster)


def _spread(iig: Iig, cid: int, k: int, backends: list[str]) -> list[tuple[list[int], int]]:
    """Where `k` new records of cluster `cid` go, as `Iig.choose_backend` would send them
    one by one: the fewest of the cluster first, ties to the fewest overall. Returned
    as deals in order, each (backends, rounds): that many rounds of one record to
    each of those backends in turn. IIG's counts take the records at once."""
    counts = iig.counts.setdefault(cid, {})
    level = [counts.get(b, 0) for b in backends]
    give = [0] * len(backends)
    deals: list[tuple[list[int], int]] = []
    while k:
        low = min(level)
        lowest = sorted((j for j, x in enumerate(level) if x == low),
                        key=lambda j: (iig.totals.get(backends[j], 0) + give[j], j))
        above = [x for x in level if x > low]
        step = min(k // len(lowest), (min(above) - low) if above else k)
        if step == 0:       # fewer records than backends at the lowest level
            lowest = lowest[:k]
            step = 1
        for j in lowest:
            give[j] += step
            level[j] += step
        k -= step * len(lowest)
        deals.append((lowest, step))
    for j, b in enumerate(backends):
        counts[b] = counts.get(b, 0) + give[j]
        iig.totals[b] = iig.totals.get(b, 0) + give[j]
    return deals


def _columns(batch: LoadBatch, cids: list[int], idx: list[int] | None) -> bytes:
    """One backend's records of a batch (`idx`; None: all of them) as a serialized
    `LoadColumns` in the file's attribute order. When all go to one backend in the
    file's order, the client's columns are passed on as they came: their bytes,
    followed by those of the cluster ids (serialized messages concatenated merge).
    Split over backends, each column keeps its kind (`columns.take`)."""
    # A share of a split batch is not a run of the load's records: it has no first.
    head = pb.LoadColumns(count=len(cids), first=batch.first if idx is None else 0,
                          cluster_ids=cids)
    if idx is None:
        if batch.source is not None:
            return batch.source.SerializeToString() + head.SerializeToString()
        for col in batch.wire:
            head.columns.add().CopyFrom(col)
        head.bodies.CopyFrom(batch.bodies)
        return head.SerializeToString()
    pick = itemgetter(*idx) if len(idx) > 1 else (lambda vs: (vs[idx[0]],))
    for a, col in enumerate(batch.wire):
        columns.take(col, batch.entries(a), pick, head.columns.add())
    columns.take(batch.bodies, batch.entries(-1), pick, head.bodies)
    return head.SerializeToString()
