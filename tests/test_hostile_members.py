"""A member of the cluster (a process with a backend's certificate, or a client) that
does not follow the rules is refused, naming what is wrong, and leaves the rest serving:
a flood of descriptor ids for units that never come, a backend naming itself with a name
no backend has, a `done` with statistics that are not its own, IIG asked to place a value
no request could hold, a load chunk of more rows than a batch holds, and a definition
nested too deeply."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from controller.coordinator import Coordinator
from controller.reqp import MAX_TEXT
from mbds.client import ClientError
from mbds.cluster import Proc
from mbds.errors import BackendUnavailable, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import MAX_BACKEND_NAME, MAX_LOAD_RECORDS
from mbds.values import to_pb
from tests.conftest import (
    CENSUS_YAML,
    Running,
    as_controller,
    backend_digests,
    internal_channel,
    module_cluster,
)
from tests.test_controller_checks import (
    CITIES,
    Tap,
    answer,
    backend,
    controller,
    refused_then_served,
    run,
    tapped,
    with_census,
)
from tests.test_doors import census, contents, iig_address


def _four_cities(r: Running) -> None:
    r.client.define(CENSUS_YAML)
    r.client.execute("[" + "; ".join(
        f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, {i}>, <STATE, CA>)"
        for i in range(4)) + "]")


# Two backends with four census records; the tests on it change nothing.
cluster = module_cluster("hostile", setup=_four_cities)


def snapshot(r: Running) -> list[str]:
    [res] = r.client.execute("RETRIEVE (FILE = Census) (ALL)")
    return sorted(map(repr, res.records))


# ------------------------------------------------------------ a backend's peers --
def test_a_backend_refuses_ids_for_more_units_than_may_come_and_serves_on(
        cluster_factory) -> None:
    """A peer's ids for units that never come each make a state the backend keeps until
    they might: past MAX_UNARRIVED units the stream is refused (RESOURCE_EXHAUSTED,
    naming the bound and the unit, shortened), ids of a unit that ran here already take
    no room, and the backend serves its bus as before."""
    from backend.units import MAX_UNARRIVED

    r = census(cluster_factory)
    before = contents(r)
    address = r.cluster.backends[0].address or ""
    ours = as_controller(r.cluster, address)          # its cluster, and its bus's epoch
    late = pb.DescriptorIds(epoch=ours[1][1], seq=1, from_index=1)
    flood = [pb.DescriptorIds(epoch="flood", seq=seq, from_index=1)
             for seq in range(1, MAX_UNARRIVED + 2)]
    beyond = pb.DescriptorIds(epoch="E" * 100_000, seq=1, from_index=1)
    batches = [pb.DescriptorIdsBatch(ids=ids) for ids in ([late] * 10, flood, [beyond])]
    with internal_channel(r.cluster, address, "backend") as ch:
        with pytest.raises(grpc.RpcError) as err:
            rpc.PeerStub(ch).DescriptorIdsStream(iter(batches), timeout=30,
                                                 metadata=ours[:1])
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value
    assert err.value.details() == (
        f"backend b0: descriptor ids for more than {MAX_UNARRIVED} units that have not "
        f"come here (unit {'E' * 40}… (100000 characters)/1): refused")
    # One predicate: b0 searches it alone, and no peer's ids are to come for it.
    assert contents(r) == before
    r.client.execute("INSERT (<FILE, Census>, <CITY, 'after'>, <POP, 7>, <STATE, NY>)")
    assert "after" in [row[0] for row in contents(r)]


# --------------------------------------------------------- a backend's own word --
class Renamed(Tap):
    """A backend's service passed through, naming it `name` (None: its own) at hello and
    in its directory."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.name: str | None = None
        self.directory = self._rename

    def _rename(self, reply: pb.DirectoryReply) -> None:
        if self.name is not None:
            reply.name = self.name

    async def Hello(self, request: pb.HelloRequest, context: object) -> pb.HelloReply:
        reply = await super().Hello(request, context)
        if self.name is not None:
            reply.name = self.name
        return reply


@pytest.mark.parametrize("name", ["", "B" * (MAX_BACKEND_NAME + 1)], ids=["empty", "long"])
def test_a_backend_naming_itself_with_a_name_no_backend_has_is_refused(
        tmp_path: Path, name: str) -> None:
    """Names are kept (members.json) and sent in every bus hello: one that is empty or
    longer than a data dir's name is refused at hello, the name shortened, before
    anything is kept; the same backend answering with its own name is admitted."""
    log = tmp_path / "c" / "decisions.db"

    async def scenario(procs: list[Proc]) -> None:
        procs.append(backend(tmp_path, "b0"))
        tap = Renamed(procs[-1].wait_ready(30))
        server, address = await tap.serve()
        try:
            tap.name = name
            c = Coordinator([address], connect_timeout=10, log_path=log)
            try:
                with pytest.raises(BackendUnavailable) as err:
                    async with asyncio.timeout(60):
                        await c.start()
            finally:
                await c.close()
            assert str(err.value) == (
                f"backend {address} ({address}) is unreachable: it names itself "
                f"{shorten(repr(name))}: a backend's name is 1 to {MAX_BACKEND_NAME} "
                "characters")
            assert len(str(err.value)) < 300
            assert not (log.parent / "members.json").exists()
            tap.name = None
            c = Coordinator([address], connect_timeout=10, log_path=log)
            try:
                await with_census(c)
                [res] = await answer(c, CITIES)
                assert sorted(x["CITY"] for x in res.records) == ["a", "b"]
            finally:
                await c.close()
            assert json.loads((log.parent / "members.json").read_text())["backends"] == ["b0"]
        finally:
            await server.stop(0)

    run(scenario)


# ----------------------------------------------------------- a backend's replies --
def _stats(change: Callable[[pb.RequestStats], None]
           ) -> Callable[[list[pb.BackendReply]], list[pb.BackendReply]]:
    def doctor(replies: list[pb.BackendReply]) -> list[pb.BackendReply]:
        for r in replies:
            if r.HasField("done"):
                change(r.done.stats)
        return replies
    return doctor


def _another(stats: pb.RequestStats) -> None:
    stats.backends.add(backend="b1", records=5)


def _renamed(name: str) -> Callable[[pb.RequestStats], None]:
    def change(stats: pb.RequestStats) -> None:
        stats.backends[0].backend = name
    return change


def _counted(stats: pb.RequestStats) -> None:
    stats.records_retrieved = 10 ** 15


def _timed(ms: float) -> Callable[[pb.RequestStats], None]:
    def change(stats: pb.RequestStats) -> None:
        stats.backends[0].elapsed_ms = ms
    return change


FORGED = {
    "with 2 backends' statistics, not its own alone": _another,
    "with 0 backends' statistics, not its own alone": lambda s: s.ClearField("backends"),
    "whose statistics name backend 'b1'": _renamed("b1"),
    f"whose statistics name backend {shorten(repr('x' * 100_000))}": _renamed("x" * 100_000),
    "whose statistics count 2 records and 1000000000000000 in all": _counted,
    "whose statistics give a time of nan ms": _timed(float("nan")),
    "whose statistics give a time of -5.0 ms": _timed(-5.0),
}


@pytest.mark.parametrize("fault", list(FORGED), ids=[
    "another", "none", "named-b1", "named-long", "count", "nan", "negative"])
def test_a_done_whose_statistics_are_not_its_backends_own_fails_the_unit(
        tmp_path: Path, fault: str) -> None:
    """A backend's statistics reach the client: a `done` with another backend's entry,
    or a count or time that is not its own, fails the unit naming the backend and what
    is wrong (a name repeated shortened), and the next unit is answered as ever."""
    async def scenario(procs: list[Proc]) -> None:
        async with tapped(tmp_path, procs) as (tap, address), controller([address]) as c:
            await with_census(c)
            tap.replies = _stats(FORGED[fault])
            await refused_then_served(c, tap, CITIES, f"a done for request 0 {fault}")
            [res] = await answer(c, CITIES)
            assert [(b["backend"], b["records"]) for b in res.stats["backends"]] == [
                ("b0", 2)]

    run(scenario)


# ------------------------------------------------------------------- IIG --
def test_iig_refuses_to_place_a_value_longer_than_a_request_may_hold(cluster: Running
                                                                     ) -> None:
    """A moved record's directory values come from an UPDATE, whose text is at most
    MAX_TEXT: a longer value asked to be placed is refused naming its size and the limit,
    and no directory entry is made for it."""
    before, digests = snapshot(cluster), backend_digests(cluster)
    request = pb.PlaceRequest(file="CENSUS", backend="b0", directory_values=[
        to_pb(v, pb.Value()) for v in ("CENSUS", "v" * (MAX_TEXT + 1), 5, "CA")])
    ours = as_controller(cluster.cluster, cluster.cluster.backends[0].address or "")[:1]
    with internal_channel(cluster.cluster, iig_address(cluster), "backend",
                          "controller") as ch:
        with pytest.raises(grpc.RpcError) as err:
            rpc.IigStub(ch).Place(request, timeout=30, metadata=ours)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    assert err.value.details() == (
        f"CENSUS.CITY: a value of {MAX_TEXT + 1:,} characters, more than a request may "
        f"hold ({MAX_TEXT:,})")
    assert snapshot(cluster) == before           # a unit ran: any new entries went with it
    assert backend_digests(cluster) == digests


# --------------------------------------------------------------- clients --
def test_a_load_chunk_of_more_rows_than_a_batch_holds_is_refused(cluster: Running) -> None:
    """Empty rows cost the wire two bytes each and the controller far more: a chunk of
    rows past MAX_LOAD_RECORDS is refused naming its count and the limit, storing nothing."""

    before = snapshot(cluster)
    chunk = pb.LoadRequest(file="CENSUS", attributes=[],
                           records=[pb.Row()] * (MAX_LOAD_RECORDS + 1))
    with pytest.raises(grpc.RpcError) as err:
        list(cluster.client.stub.Load(iter([chunk]), timeout=60))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    assert err.value.details() == (
        f"a load batch of {MAX_LOAD_RECORDS + 1:,} records: a batch holds 1 to "
        f"{MAX_LOAD_RECORDS:,}")
    assert snapshot(cluster) == before


@pytest.mark.parametrize("text", [
    "files: " + "[" * 3000 + "]" * 3000,
    "files:\n  X:\n    attributes: " + "{a: " * 2000 + "1" + "}" * 2000,
    "files:\n" + "".join(" " * (i + 1) + "- \n" for i in range(1000)),
], ids=["flow-lists", "flow-mappings", "block-lists"])
def test_a_definition_nested_too_deeply_is_refused_as_a_definition_error(
        cluster: Running, text: str) -> None:
    """YAML nested deeper than the parser's recursion is a bad definition
    (INVALID_ARGUMENT, saying so briefly), not an internal error; nothing is defined."""
    files, before = sorted(cluster.client.status().files), snapshot(cluster)
    with pytest.raises(ClientError) as err:
        cluster.client.define(text)
    assert err.value.code == "INVALID_ARGUMENT", err.value
    assert str(err.value) == ("definition nests its lists or mappings too deeply (a "
                              "definition needs four levels)")
    assert sorted(cluster.client.status().files) == files
    assert snapshot(cluster) == before


def test_a_directory_read_that_leaves_entries_out_is_refused(tmp_path: Path) -> None:
    """A backend's directory comes in parts; parts that do not make the directory its
    digest names (a cluster left out, as a part cut at the wrong place did) are refused
    at once: read as they are, IIG would give the missing ids again."""
    log = tmp_path / "c" / "decisions.db"

    async def scenario(procs: list[Proc]) -> None:
        async with tapped(tmp_path, procs) as (tap, address):
            c = Coordinator([address], connect_timeout=10, log_path=log)
            try:
                async with asyncio.timeout(60):
                    await with_census(c)
            finally:
                await c.close()

            def drop_a_cluster(reply: pb.DirectoryReply) -> None:
                del reply.directory.clusters[-1:]
            tap.directory = drop_a_cluster
            c = Coordinator([address], connect_timeout=10, log_path=log)
            try:
                with pytest.raises(BackendUnavailable) as err:
                    async with asyncio.timeout(60):
                        await c.start()
            finally:
                await c.close()
            assert str(err.value).endswith(
                "is unreachable: its directory, read in 1 parts, is not the one its digest "
                "names"), err.value

    run(scenario)
