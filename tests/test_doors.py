"""Every receiver checks what it gets, whoever sent it: a backend refuses a forged
traffic unit whose names its directory does not know (they never reach SQL) and goes
on serving its bus; IIG's placement is not served on the client port, and refuses a
directory value of the wrong type."""

from __future__ import annotations

import queue
import re

import grpc
import pytest

from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import CLUSTER_KEY
from mbds.values import to_pb
from tests.conftest import CENSUS_YAML, Running, as_controller, internal_channel
from tests.crashes import retry
from tests.inproc import census_iig, unit


def census_directory():
    """The census files' directory as REQP forms units against it (no clusters needed)."""
    return census_iig([]).directory

ROWS = "[" + "; ".join(f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, {i}>, <STATE, CA>)"
                       for i in range(4)) + "]"


def census(cluster_factory) -> Running:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute(ROWS)
    return r


def contents(r: Running) -> list:
    [res] = retry(r.client, "RETRIEVE (FILE = Census) (CITY, POP, AREA, STATE)")
    return sorted(tuple(x.values()) for x in res.records)


def forged_bus(r: Running, address: str, units: list[pb.TrafficUnit],
               peers: list[str] | None = None) -> list[pb.BackendReply]:
    """A bus of our own to a backend, opened with the controller's certificate and its
    cluster's id (a receiver checks what it gets whoever sent it): its hello (the backend
    first of `peers`), then `units`; every reply to them. The controller is stopped
    first: a backend serves one controller's bus at a time."""
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    metadata = as_controller(r.cluster, address, "forged")
    out: queue.Queue[pb.BusBatch | None] = queue.Queue()
    out.put(pb.BusBatch(messages=[pb.BusMessage(hello=pb.BusHello(
        epoch="forged", backend_index=0, peers=peers or [address]))]))
    for tu in units:
        out.put(pb.BusBatch(messages=[pb.BusMessage(traffic_unit=tu)]))
    replies: list[pb.BackendReply] = []
    with internal_channel(r.cluster, address) as ch:
        call = rpc.BackendStub(ch).Bus(iter(out.get, None), timeout=30, metadata=metadata)
        for batch in call:
            replies += batch.replies
            if {r.seq for r in replies if r.WhichOneof("body") in ("error", "committed")
                } >= {tu.seq for tu in units}:
                break
        out.put(None)
        call.cancel()
    return replies


def every_cluster(file: str) -> pb.Retrieval:
    return pb.Retrieval(query=pb.Query(conjunctions=[pb.Conjunction(
        predicates=[pb.Predicate(attr="FILE", op=pb.EQ, value=to_pb(file, pb.Value()))],
        files=[file])]))


def test_a_backend_refuses_names_its_directory_lacks_and_keeps_its_bus(cluster_factory
                                                                        ) -> None:
    r = census(cluster_factory)
    before = contents(r)
    address = r.cluster.backends[0].address or ""
    inject = pb.TrafficUnit(seq=1, requests=[pb.Request(
        op=pb.UPDATE, retrieval=every_cluster("CENSUS"),
        modifier=pb.Modifier(attr='AREA" = 1, "CITY', value=to_pb(1.0, pb.Value())))])
    peek = pb.TrafficUnit(seq=2, requests=[pb.Request(op=pb.RETRIEVE, retrieval=pb.Retrieval(
        query=pb.Query(conjunctions=[pb.Conjunction(files=["CENSUS"], predicates=[
            pb.Predicate(attr="(SELECT value FROM meta)", op=pb.EQ,
                         value=to_pb("b0", pb.Value()))])]),
        targets=[pb.TargetItem(attr="CITY")]))])
    wrong_type = pb.TrafficUnit(seq=3, requests=[pb.Request(
        op=pb.UPDATE, retrieval=every_cluster("CENSUS"), moves_records=True,
        modifier=pb.Modifier(attr="POP", value=to_pb("many", pb.Value())))])
    good_query = every_cluster("CENSUS")
    good_query.targets.add(attr="CITY")
    good = pb.TrafficUnit(seq=4, requests=[pb.Request(op=pb.RETRIEVE, retrieval=good_query)])
    replies = forged_bus(r, address, [inject, peek, wrong_type, good])
    errors = {x.seq: x.error for x in replies if x.WhichOneof("body") == "error"}
    assert "has no attribute 'AREA\" = 1, \"CITY'" in errors[1]
    assert "no file of the query has attribute '(SELECT value FROM meta)'" in errors[2]
    assert "POP is integer, got str" in errors[3]
    assert 4 not in errors and any(x.seq == 4 and x.committed for x in replies)
    # Our hello, sent with the controller's certificate, took over the backend's bus
    # configuration: a controller started again gives it back, and finds nothing changed.
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller()
    assert contents(r) == before


def _update(seq: int, attr: str, value: object, *, source: str = "", arith: str = "",
            moves: bool = False) -> pb.TrafficUnit:
    return pb.TrafficUnit(seq=seq, requests=[pb.Request(
        op=pb.UPDATE, retrieval=every_cluster("CENSUS"), moves_records=moves,
        modifier=pb.Modifier(attr=attr, source=source, arith=arith,
                             value=to_pb(value, pb.Value())))])


def test_a_backend_refuses_an_update_whose_modifier_breaks_the_rules_reqp_applies(
        cluster_factory) -> None:
    """What an UPDATE writes must fit its attribute, and records must move exactly when it
    is a directory attribute (else they would stay in clusters that no longer describe
    them): a forged modifier that breaks either is refused and changes nothing."""
    r = census(cluster_factory)
    before = contents(r)
    address = r.cluster.backends[0].address or ""
    units = [_update(1, "POP", 5),                                   # POP addresses
             _update(2, "AREA", 5.0, moves=True),                     # AREA does not
             _update(3, "POP", 1.5, source="POP", arith="*", moves=True),
             _update(4, "CITY", "x", source="CITY", arith="+", moves=True),
             _update(5, "POP", None, source="STATE", moves=True),
             _update(6, "AREA", 0.0, source="AREA", arith="/")]
    errors = {x.seq: x.error.removeprefix("backend b0: refused: ")
              for x in forged_bus(r, address, units) if x.WhichOneof("body") == "error"}
    assert errors == {1: "an UPDATE of 'POP' that says records stay",
                      2: "an UPDATE of 'AREA' that says records move",
                      3: "modifier: POP is integer, POP * 1.5 a float",
                      4: "modifier: arithmetic on CITY needs numbers",
                      5: "modifier: cannot copy string STATE into integer POP",
                      6: "modifier: division by zero"}
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller()
    assert contents(r) == before


def test_a_unit_sent_again_on_its_bus_is_refused_and_runs_once(cluster_factory) -> None:
    """Units come down a bus in increasing seq: one sent again (a controller's fault, or
    a forger's) is refused, so an INSERT is not stored twice and a unit still running
    keeps its state."""
    r = census(cluster_factory)
    address = r.cluster.backends[0].address or ""
    with internal_channel(r.cluster, address) as ch:
        directory = rpc.BackendStub(ch).Directory(pb.DirectoryRequest(), timeout=10,
                                            metadata=as_controller(r.cluster, address)).directory
    record = pb.PlacedRecord(cluster_id=city_cluster(directory, "c1"), values=[
        to_pb(v, pb.Value()) for v in ("c1", 1, None, "CA")])    # CITY, POP, AREA, STATE
    insert = pb.TrafficUnit(seq=5, one_phase=True, requests=[pb.Request(
        op=pb.INSERT, file="CENSUS", records=[record])])
    read = pb.TrafficUnit(seq=6, requests=[pb.Request(op=pb.RETRIEVE, retrieval=every_cluster(
        "CENSUS"))])
    read.requests[0].retrieval.targets.add(attr="CITY")   # after the insert (its lock)
    replies = forged_bus(r, address, [insert, insert, read])
    assert sorted((x.seq, x.WhichOneof("body")) for x in replies
                  if x.WhichOneof("body") in ("error", "committed")) == [
        (5, "committed"), (5, "error"), (6, "committed")]
    assert [x.error for x in replies if x.error] == [
        "backend b0: refused: traffic unit 5 after unit 5; a unit runs once"]
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller()
    assert [row[0] for row in contents(r)].count("c1") == 2     # c1's own, and one more


def city_cluster(directory: pb.DirectoryUpdate, city: str) -> int:
    """The census cluster whose CITY descriptor is `city`'s."""
    [did] = [d.id for d in directory.descriptors if d.attr == "CITY" and d.value.s == city]
    return next(c.id for c in directory.clusters if did in c.descriptor_ids)


def test_a_backend_refuses_a_record_its_cluster_does_not_describe(cluster_factory) -> None:
    """An INSERT names each record's cluster: one whose directory values are another
    cluster's would be stored where no search by them finds it. Refused, naming the
    record, its cluster and its values; nothing is stored."""
    r = census(cluster_factory)
    before = contents(r)
    address = r.cluster.backends[0].address or ""
    with internal_channel(r.cluster, address) as ch:
        directory = rpc.BackendStub(ch).Directory(pb.DirectoryRequest(), timeout=10,
                                            metadata=as_controller(r.cluster, address)).directory
    cid = city_cluster(directory, "c3")
    forged = pb.PlacedRecord(cluster_id=cid, values=[
        to_pb(v, pb.Value()) for v in ("c1", 1, None, "CA")])    # c1's values, in c3's
    insert = pb.TrafficUnit(seq=1, one_phase=True, requests=[pb.Request(
        op=pb.INSERT, file="CENSUS", records=[forged])])
    replies = forged_bus(r, address, [insert])
    assert [x.error for x in replies if x.error] == [
        f"backend b0: refused: inserted record 1 is not of cluster {cid}: its CITY 'c1', POP "
        "1, STATE 'CA' describe another cluster"]
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller()
    assert contents(r) == before


def test_a_backend_refuses_comparisons_it_cannot_make_and_holds_no_lock_for_them(
        cluster_factory) -> None:
    """An unknown comparison, or FILE compared with a number, is refused before descriptor
    search: no type-C lock is left behind for a later unit's new descriptor to wait on."""
    r = census(cluster_factory)
    address = r.cluster.backends[0].address or ""
    query = pb.Retrieval(query=pb.Query(conjunctions=[pb.Conjunction(
        files=["CENSUS"], predicates=[pb.Predicate(     # CITY: a type-C attribute
            attr="CITY", op=99, value=to_pb("c1", pb.Value()))])]),  # type: ignore[arg-type]
        targets=[pb.TargetItem(attr="CITY")])
    unknown_op = pb.TrafficUnit(seq=1, requests=[pb.Request(op=pb.RETRIEVE, retrieval=query)])
    file_number = pb.TrafficUnit()
    file_number.CopyFrom(unknown_op)
    file_number.seq = 2
    file_number.requests[0].retrieval.query.conjunctions[0].predicates[0].CopyFrom(
        pb.Predicate(attr="FILE", op=pb.LT, value=to_pb(5, pb.Value())))
    errors = {x.seq: x.error for x in forged_bus(r, address, [unknown_op, file_number])
              if x.WhichOneof("body") == "error"}
    assert errors == {1: "backend b0: refused: unknown comparison 99",
                      2: "backend b0: refused: FILE compared with something other than a name"}
    # A bus hello whose index is none of its peers' ends that bus: split units would wait
    # for ids from an index nobody has.
    good = pb.TrafficUnit(seq=3, requests=[pb.Request(op=pb.RETRIEVE, retrieval=every_cluster(
        "CENSUS"))])
    good.requests[0].retrieval.targets.add(attr="CITY")
    with internal_channel(r.cluster, address) as ch:
        hello = pb.BusBatch(messages=[pb.BusMessage(hello=pb.BusHello(
            epoch="forged", backend_index=2, peers=[address]))])
        after = pb.BusBatch(messages=[pb.BusMessage(traffic_unit=good)])
        assert list(rpc.BackendStub(ch).Bus(iter([hello, after]), timeout=10, metadata=(
            as_controller(r.cluster, address, "forged")))) == []
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller()
    # A new CITY descriptor takes CITY's lock exclusively: it would wait for ever.
    r.client.execute("INSERT (<FILE, Census>, <CITY, 'brand new'>, <POP, 5>, <STATE, CA>)")
    assert "brand new" in [x[0] for x in contents(r)]


def test_a_backend_refuses_descriptor_ids_that_are_not_its_peers_share(cluster_factory
                                                                      ) -> None:
    """Ids sent on the Peer service with a backend's certificate are still checked: an id
    that is no descriptor of its predicate's attribute, or a sender that is not a peer of
    the bus, fails the unit with what is wrong, and changes no data."""
    r = census(cluster_factory)
    before = contents(r)
    b0, b1 = (p.address or "" for p in r.cluster.backends)
    directory = census_directory()
    update = unit(directory, "UPDATE ((FILE = Census) and (POP >= 0) and (STATE = CA)) "
                             "<AREA = 9.5>")
    read = unit(directory, "RETRIEVE ((FILE = Census) and (POP >= 0) and (STATE = CA)) "
                           "(CITY)")
    for seq, tu in ((1, update), (2, read)):
        tu.seq, tu.predicate_count, tu.split_search = seq, 3, True
    # Backend 1's share is predicate 1 (POP): 10,000 is no descriptor of it. Index 7 is
    # no backend of a bus of two.
    unknown = pb.DescriptorIds(epoch="forged", seq=1, from_index=1)
    unknown.results.add(predicate_index=1, descriptor_ids=[10_000])
    stranger = pb.DescriptorIds(epoch="forged", seq=2, from_index=7)
    stranger.results.add(predicate_index=1, unrestricted=True)
    ours = as_controller(r.cluster, b0)[:1]
    with internal_channel(r.cluster, b0, "backend") as ch:
        # A peer of another cluster (its certificate from the same CA) is refused.
        with pytest.raises(grpc.RpcError) as err:
            rpc.PeerStub(ch).DescriptorIdsStream(
                iter([pb.DescriptorIdsBatch(ids=[unknown])]), timeout=10,
                metadata=((CLUSTER_KEY, "elsewhere"),))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert (err.value.details() or "").startswith(
            f"backend b0 belongs to cluster {ours[0][1]}; the call names cluster elsewhere")
        rpc.PeerStub(ch).DescriptorIdsStream(
            iter([pb.DescriptorIdsBatch(ids=[unknown, stranger])]), timeout=10,
            metadata=ours)
    replies = forged_bus(r, b0, [update, read], peers=[b0, b1])
    errors = {x.seq: x.error for x in replies if x.WhichOneof("body") == "error"}
    assert errors[1] == ("backend b0: refused: descriptor ids from backend 1 "
                         f"({b1}): predicate 1 on 'POP': 10000 is not one of its "
                         "attribute's descriptors")
    assert errors[2] == ("backend b0: refused: descriptor ids from backend index 7, of "
                         "a bus of 2")
    assert r.cluster.controller is not None
    r.cluster.controller.stop()
    r.cluster.restart_controller()
    assert contents(r) == before


def _descriptor(did: int, attr: str, kind: str, **values: object) -> pb.Descriptor:
    return pb.Descriptor(id=did, file="CENSUS", attr=attr, kind=kind, **{
        k: to_pb(v, pb.Value()) for k, v in values.items()})


def test_a_directory_update_that_does_not_fit_the_directory_is_refused(cluster_factory
                                                                        ) -> None:
    """Directory entries come from IIG alone, but a backend checks them: a descriptor of
    its attribute's type and kind, and a cluster made of one descriptor of each of its
    file's directory attributes, in order, like no other cluster. Anything else would
    be applied half-way, or make clusters no search finds."""
    r = census(cluster_factory)
    before = contents(r)
    address = r.cluster.backends[0].address or ""
    with internal_channel(r.cluster, address) as ch:
        directory = rpc.BackendStub(ch).Directory(pb.DirectoryRequest(), timeout=10,
                                            metadata=as_controller(r.cluster, address)).directory
    [c] = directory.clusters[:1]
    ids = list(c.descriptor_ids)              # FILE, CITY, POP, STATE
    metadata = as_controller(r.cluster, address)    # as the controller serving it
    bad = {
        "POP is integer, got str": [_descriptor(10_000, "POP", "A", low="x")],
        "descriptor 10000: kind 'C' on CENSUS.POP, which takes A or N":
            [_descriptor(10_000, "POP", "C", value=5)],
        "descriptor 10000: file CENSUS has no directory attribute 'AREA'":
            [_descriptor(10_000, "AREA", "B", value=1.0)],
        "descriptor 10000: not a type-B descriptor of CENSUS.FILE (its low, high and value)":
            [_descriptor(10_000, "FILE", "B", value="STATES")],
        "cluster 10001: 3 descriptors for the 4 directory attributes of CENSUS":
            pb.Cluster(id=10_001, file="CENSUS", descriptor_ids=ids[:3]),
        f"cluster 10001: {ids[2]} is not a descriptor of CENSUS.CITY":
            pb.Cluster(id=10_001, file="CENSUS", descriptor_ids=[ids[0], *ids[2:0:-1],
                                                                 ids[3]]),
        f"cluster 10001 has the descriptors of cluster {c.id}":
            pb.Cluster(id=10_001, file="CENSUS", descriptor_ids=ids),
    }
    for message, entries in bad.items():
        update = pb.DirectoryUpdate()
        if isinstance(entries, pb.Cluster):
            update.clusters.append(entries)
        else:
            update.descriptors.extend(entries)
        with internal_channel(r.cluster, address) as ch:
            with pytest.raises(grpc.RpcError) as err:
                rpc.BackendStub(ch).ApplyDirectory(update, timeout=10, metadata=metadata)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in (err.value.details() or "")
    assert contents(r) == before
    with internal_channel(r.cluster, address) as ch:
        assert rpc.BackendStub(ch).Directory(
            pb.DirectoryRequest(), timeout=10, metadata=metadata).directory == directory
    [res] = r.client.execute("RETRIEVE ((FILE = Census) and (POP >= 2)) (CITY)")
    assert sorted(x["CITY"] for x in res.records) == ["c2", "c3"]


def iig_address(r: Running) -> str:
    assert r.cluster.controller is not None
    for line in r.cluster.controller.tail:
        if m := re.search(r"internal \(IIG\) on (\S+)", line):
            return m.group(1)
    raise AssertionError("the controller did not say where IIG listens")


def test_iig_is_not_on_the_client_port_and_checks_what_it_places(cluster_factory) -> None:
    r = census(cluster_factory)
    request = pb.PlaceRequest(file="CENSUS", directory_values=[
        to_pb(v, pb.Value()) for v in ("CENSUS", "new", 5, "CA")])
    with grpc.insecure_channel(r.cluster.address) as ch:
        with pytest.raises(grpc.RpcError) as err:
            rpc.IigStub(ch).Place(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    internal = iig_address(r)
    assert internal != r.cluster.address
    wrong = pb.PlaceRequest(file="CENSUS", directory_values=[
        to_pb(v, pb.Value()) for v in ("CENSUS", "new", "five", "CA")])
    ours = as_controller(r.cluster, r.cluster.backends[0].address or "")[:1]
    with internal_channel(r.cluster, internal, "backend", "controller") as ch:
        assert rpc.IigStub(ch).Place(request, timeout=10, metadata=ours).cluster_id > 0
        with pytest.raises(grpc.RpcError) as err:
            rpc.IigStub(ch).Place(wrong, timeout=10, metadata=ours)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "CENSUS.POP is integer, got str" in (err.value.details() or "")
        # A backend of another cluster (its certificate from the same CA) is refused.
        for md, named in ((((CLUSTER_KEY, "elsewhere"),), "cluster elsewhere"),
                          ((), "no cluster")):
            with pytest.raises(grpc.RpcError) as err:
                rpc.IigStub(ch).Place(request, timeout=10, metadata=md)
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert err.value.details() == (
                f"this controller belongs to cluster {ours[0][1]}; the call names {named}: "
                "a backend's records are its own cluster's, and it joins no other")
    [res] = r.client.execute("RETRIEVE ((FILE = Census) and (POP <= 4)) (CITY)")
    assert len(res.records) == 4            # range predicates still answer
