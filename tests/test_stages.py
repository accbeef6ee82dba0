"""DM's two stages on one backend, in process: stage 2 keeps the bus order whether a
unit goes through it in the bus reader's own turn or is handed to the stage-2 loop."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from pathlib import Path

import pytest

from backend import dm
from backend.cc import X
from backend.check import BadMessage
from backend.execution import Execution
from backend.links import IigClient
from backend.node import BackendNode
from backend.state import BusOut, handler_timer
from backend.store import Store
from controller.iig import Iig
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from mbds.traffic import predicate_count
from tests.inproc import KeptPeers, census, census_key, census_placed, unit

# Two predicates with directory attributes: on two backends each searches one of them.
TEXT = "RETRIEVE ((FILE = Census) and (POP > 100) and (STATE = CA)) (CITY)"


async def _node(tmp_path: Path, backends: int, early: tuple[pb.DescriptorIds, ...] = ()
                ) -> tuple[BackendNode, BusOut, list[Hashable]]:
    """A backend of `backends` (index 0); `early`: peer ids it receives before its bus
    hello."""
    node = BackendNode("b0", Store(tmp_path / "backend.db"), peers=KeptPeers(),
                       iig=IigClient("b0"))
    await asyncio.sleep(0)        # the stage-2 loop starts and waits for a unit
    directory, _ = census()
    await node.apply_directory(directory.to_update())
    for msg in early:
        node.on_peer_ids(msg)
    bus = BusOut("e")
    node.on_hello(pb.BusHello(epoch="e", backend_index=0, peers=[
        f"127.0.0.1:{1 + i}" for i in range(backends)]), bus)
    owners: list[Hashable] = []       # whose lock set CC was asked for, in order
    request = node.cc.request

    def logged(owner: Hashable, wants: dict[Hashable, str]) -> tuple[Hashable, int]:
        owners.append(owner)
        return request(owner, wants)
    node.cc.request = logged          # type: ignore[method-assign]
    return node, bus, owners


def _unit(seq: int, split: bool) -> pb.TrafficUnit:
    directory, _ = census()
    tu = unit(directory, TEXT)
    tu.seq = seq
    tu.predicate_count = predicate_count(tu.requests)
    tu.split_search = split
    return tu


def _peer_ids(seq: int) -> pb.DescriptorIds:
    """What backend 1 of 2 sends for unit `seq`: its share of descriptor search."""
    directory, _ = census()
    found = dm.descriptor_search(directory, _unit(seq, True), 1, 2)
    msg = pb.DescriptorIds(epoch="e", seq=seq, from_index=1)
    dm.add_pb_results(msg, found)
    return msg


async def _answers(bus: BusOut, units: int) -> list[tuple[int, str]]:
    got: list[tuple[int, str]] = []
    while sum(kind in ("committed", "error") for _, kind in got) < units:
        for msg in await asyncio.wait_for(bus.queue.take(), 5):
            assert msg is not None
            got.append((msg.seq, msg.WhichOneof("body")))
    return got


async def _error(bus: BusOut) -> tuple[int, str]:
    """The one answer on the bus, an error: its seq and text."""
    [(seq, error)] = [(m.seq, m.error) for m in await asyncio.wait_for(
        bus.queue.take(), 5) if m is not None]
    return seq, error


async def _served(node: BackendNode, bus: BusOut, seq: int) -> None:
    """Unit `seq`, its peer's ids in, is answered: the bus goes on."""
    node.on_peer_ids(_peer_ids(seq))
    await node.on_traffic_unit(_unit(seq, split=True), bus)
    assert (seq, "committed") in await _answers(bus, 1)


def test_a_unit_with_nothing_to_wait_for_goes_through_stage_2_in_the_readers_turn(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        node, bus, owners = await _node(tmp_path, backends=1)
        tu = _unit(1, split=False)
        await node.on_traffic_unit(tu, bus)
        st = node.tus[("e", 1)]
        # Stage 2 is done when stage 1 returns: its cluster lock set is queued and the
        # unit's execution is under way; nothing was handed to the stage-2 loop.
        assert st.task is not None and not node.stage2.items
        assert owners == [("e", 1)] * 3       # attribute, did-group and cluster sets
        assert (1, "committed") in await _answers(bus, 1)
        node.writer.shutdown()

    asyncio.run(scenario())


@pytest.mark.parametrize("taken", [True, False], ids=["in-stage-2", "still-queued"])
def test_a_unit_whose_ids_are_in_does_not_pass_one_that_waits_for_its_peers(
        tmp_path: Path, taken: bool) -> None:
    """Unit 1 waits for its peer's ids, in stage 2 or still queued for it; unit 2's ids
    came first. Unit 2 must still take its did-group and cluster locks after unit 1 does
    (bus order), or two backends could queue conflicting units in different orders."""
    async def scenario() -> None:
        node, bus, owners = await _node(tmp_path, backends=2)
        await node.on_traffic_unit(_unit(1, split=True), bus)
        if taken:
            await asyncio.sleep(0)          # the stage-2 loop takes unit 1 and waits
        node.on_peer_ids(_peer_ids(2))      # unit 2's ids before unit 2 itself
        await node.on_traffic_unit(_unit(2, split=True), bus)
        await asyncio.sleep(0)
        assert node.tus[("e", 2)].task is None      # not before unit 1
        node.on_peer_ids(_peer_ids(1))
        answers = await _answers(bus, 2)
        assert owners[:2] == [("e", 1), ("e", 2)]   # stage 1's attribute sets
        assert owners[2:] == [("e", 1), ("e", 1), ("e", 2), ("e", 2)]
        assert {seq for seq, kind in answers if kind == "committed"} == {1, 2}
        assert len(node.exchange.peers.sent) == 2     # type: ignore[attr-defined]
        node.writer.shutdown()

    asyncio.run(scenario())


def test_a_unit_whose_peer_never_sends_its_ids_fails_naming_the_peer(tmp_path: Path) -> None:
    """Stage 2 waits for a peer's ids at most the result timeout; the unit then fails
    with the silent peer's address, and the next unit is served."""
    async def scenario() -> None:
        node, bus, _ = await _node(tmp_path, backends=2)
        node.exchange.timeout = 0.3
        await node.on_traffic_unit(_unit(1, split=True), bus)
        seq, error = await _error(bus)
        assert seq == 1 and "no descriptor ids from backend(s) at 127.0.0.1:2" in error
        await _served(node, bus, 2)
        node.writer.shutdown()

    asyncio.run(scenario())


def test_a_unit_aborted_while_it_waits_for_its_peers_ids_stops_waiting(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        node, bus, _ = await _node(tmp_path, backends=2)
        await node.on_traffic_unit(_unit(1, split=True), bus)
        await asyncio.sleep(0)              # stage 2 waits for backend 1's ids
        node.on_abort(1, "the peer crashed")
        seq, error = await _error(bus)
        assert seq == 1 and "aborted: the peer crashed" in error
        node.writer.shutdown()

    asyncio.run(scenario())


def test_a_unit_given_ids_that_are_not_its_peers_share_fails_and_the_next_is_served(
        tmp_path: Path) -> None:
    """Ids for a predicate that is not the peer's share fail their unit with the peer's
    address and the fault, at once (not at the result timeout); the bus goes on."""
    async def scenario() -> None:
        node, bus, _ = await _node(tmp_path, backends=2)
        node.exchange.timeout = 30
        wrong = _peer_ids(1)
        wrong.results[0].predicate_index = 0           # backend 0's own share
        node.on_peer_ids(wrong)
        await node.on_traffic_unit(_unit(1, split=True), bus)
        seq, error = await _error(bus)
        assert seq == 1 and error.startswith(
            "backend b0: refused: descriptor ids from backend 1 (127.0.0.1:2): ")
        assert node.tus == {}
        await _served(node, bus, 2)
        node.writer.shutdown()

    asyncio.run(scenario())


def test_a_unit_whose_predicate_count_is_not_its_requests_is_refused(tmp_path: Path) -> None:
    """Who sends ids and who waits is worked out from the unit's m: a wrong m would leave
    a backend waiting for ids nobody sends, so the unit is refused before any search."""
    async def scenario() -> None:
        node, bus, _ = await _node(tmp_path, backends=2)
        for seq in (1, 2):           # checked the first time and from the plan cache
            tu = _unit(seq, split=True)
            tu.predicate_count = 1
            await node.on_traffic_unit(tu, bus)
            got, error = await _error(bus)
            assert got == seq and error == ("backend b0: refused: the unit counts 1 "
                                            "predicates; its requests have 3")
        assert node.exchange.peers.sent == []     # type: ignore[attr-defined]
        await _served(node, bus, 3)
        node.writer.shutdown()

    asyncio.run(scenario())


def test_a_unit_whose_descriptor_search_fails_fails_alone_and_keeps_no_lock(
        tmp_path: Path) -> None:
    """Whatever goes wrong in descriptor search, the unit's type-C attribute lock is
    released: a later new descriptor of that attribute (which takes it exclusively)
    must not wait for ever, and the unit is answered and forgotten."""
    async def scenario() -> None:
        node, bus, _ = await _node(tmp_path, backends=1)
        tu = unit(census()[0], "RETRIEVE ((FILE = Census) and (CITY = Carmel)) (POP)")
        tu.seq = 1

        def fail(*_: object) -> None:
            raise RuntimeError("search failed")
        node.plans.search = fail            # type: ignore[method-assign,assignment]
        await node.on_traffic_unit(tu, bus)
        seq, error = await _error(bus)
        assert (seq, error) == (1, "backend b0: search failed") and node.tus == {}
        handle = node.cc.request("new CITY descriptor", {("attr", "CENSUS", "CITY"): X})
        assert node.cc.granted(handle)
        node.writer.shutdown()

    asyncio.run(scenario())


class _Iig(IigClient):
    """IIG as a backend reaches it, answering from an IIG of its own (or with `cluster`)."""

    def __init__(self, cluster: int | None = None) -> None:
        super().__init__("b0")
        self.iig = census_placed()[0]
        self.cluster = cluster

    async def place(self, file: str, values: list) -> pb.PlaceReply:
        cid, update = self.iig.place_moved(file, values)
        return pb.PlaceReply(cluster_id=self.cluster or cid, directory=update)


@pytest.mark.parametrize("wrong", [False, True])
def test_a_moved_record_goes_only_into_the_cluster_its_values_describe(
        tmp_path: Path, wrong: bool) -> None:
    """IIG's answer for a moved record is checked: a cluster of other values (here
    Monterey's for a record that moves to a new CITY) would file the record where no
    search finds it, so it fails the unit instead."""
    async def go() -> None:
        directory, cids = census()
        iig = _Iig(cids["Monterey"] if wrong else None)
        execution = Execution("b0", Store(tmp_path / "backend.db"), directory,
                              asyncio.get_running_loop(), iig, handler_timer("b0"),
                              result_timeout=5)
        values = census_key(iig.iig, "Nowhere", 25, "CA")
        if wrong:
            with pytest.raises(BadMessage, match=rf"^IIG placed a moved record of CENSUS in "
                               rf"cluster {cids['Monterey']}, not the one its values "
                               "describe$"):
                await execution._place("CENSUS", values)
        else:
            reply = await execution._place("CENSUS", values)
            assert directory.clusters[reply.cluster_id] == iig.iig.directory.clusters[
                reply.cluster_id]
    asyncio.run(go())


def test_ids_that_come_before_the_bus_hello_are_kept_for_their_unit(tmp_path: Path) -> None:
    """A backend joining a bus may get a peer's ids for the first unit before its own
    hello (the peer's bus was opened first): until the unit's share is known, ids are
    only kept, then checked against it."""
    async def scenario() -> None:
        node, bus, _ = await _node(tmp_path, backends=2, early=(_peer_ids(1),))
        await node.on_traffic_unit(_unit(1, split=True), bus)
        assert (1, "committed") in await _answers(bus, 1)
        node.writer.shutdown()

    asyncio.run(scenario())


def test_ids_kept_for_units_not_yet_come_are_bounded_in_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One unit not yet come, named by messages from ever new senders, is no flood by the
    count of units: the bytes kept for such units are bounded too. Past the bound the
    ids are refused, naming it; once the units come, their room is given back."""
    import backend.units

    monkeypatch.setattr(backend.units, "MAX_UNARRIVED_BYTES", 4 << 20)

    async def scenario() -> None:
        node, bus, _ = await _node(tmp_path, backends=2)
        node.exchange.timeout = 30
        big = pb.DescriptorIds(epoch="e", seq=1)
        big.results.add(predicate_index=1, descriptor_ids=range(1, 200_001))
        sent = 0
        with pytest.raises(BadMessage, match=r"^descriptor ids of more than 4 MiB for units "
                           r"that have not come here \(unit e/1\): refused$"):
            for sender in range(2, 100):
                big.from_index = sender
                node.on_peer_ids(big)
                sent += 1
        assert 0 < sent * big.ByteSize() <= 4 << 20 < (sent + 1) * big.ByteSize()
        # Unit 1 comes (its ids are strangers': it fails) and gives its room back.
        await node.on_traffic_unit(_unit(1, split=True), bus)
        seq, error = await _error(bus)
        assert seq == 1 and "descriptor ids from backend index 2" in error
        big.seq, big.from_index = 2, 1
        node.on_peer_ids(big)
        node.writer.shutdown()

    asyncio.run(scenario())


def test_a_second_message_of_ids_from_one_sender_fails_its_unit(tmp_path: Path) -> None:
    """A backend sends its share of a unit once: a second message is not kept (each would
    take room) and the unit fails naming the sender; the bus goes on."""
    async def scenario() -> None:
        node, bus, _ = await _node(tmp_path, backends=2)
        node.exchange.timeout = 30
        node.on_peer_ids(_peer_ids(1))
        node.on_peer_ids(_peer_ids(1))
        await node.on_traffic_unit(_unit(1, split=True), bus)
        seq, error = await _error(bus)
        assert (seq, error) == (1, "backend b0: refused: descriptor ids from backend index "
                                   "1 sent twice")
        await _served(node, bus, 2)
        node.writer.shutdown()

    asyncio.run(scenario())


def test_a_units_directory_update_is_checked_once_and_read_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A definition on the bus is checked before it is begun, and applied from the
    descriptors that check read: each of its entries is checked and read from its
    message once, since every unit behind it in bus order waits for both."""
    from mbds import directory as directory_module
    from mbds.entries import EntryCheck

    checks: list[int] = []
    reads: list[int] = []
    check = EntryCheck.check
    read = directory_module.Descriptor.from_pb
    monkeypatch.setattr(EntryCheck, "check", lambda self, update: (
        checks.append(len(update.descriptors)), check(self, update))[1])
    monkeypatch.setattr(directory_module.Descriptor, "from_pb", staticmethod(
        lambda d: (reads.append(d.id), read(d))[1]))

    async def scenario() -> None:
        node, bus, _ = await _node(tmp_path, backends=1)
        checks.clear()
        reads.clear()
        big = Iig(Directory())
        big.next_descriptor = 10_000
        out = big.definition(parse_definition(
            "files: {G: {attributes: {K: string}, directory: {K: {type: B, values: "
            "[a, b, c]}}}}"))
        await node.on_traffic_unit(pb.TrafficUnit(seq=1, directory=out.update), bus)
        assert checks == [len(out.update.descriptors)]
        assert sorted(reads) == sorted(d.id for d in out.update.descriptors)
        assert "G" in node.directory.files
        node.on_abort(1, "done with it")
        node.writer.shutdown()

    asyncio.run(scenario())
