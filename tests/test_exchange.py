"""The descriptor-id exchange on one backend, in process: which units it splits, what it
sends its peers, what stage 2 gathers, how a wait for ids ends, and which ids it refuses."""

from __future__ import annotations

import asyncio

import pytest

from backend import check, dm
from backend.check import BadMessage
from backend.exchange import IdExchange
from backend.plan import DescriptorResults
from backend.plancache import PlanCache
from backend.state import BusConfig, Cancelled, TuState
from mbds.proto import mbds_pb2 as pb
from tests.inproc import KeptPeers, census, unit

PEERS = ["10.0.0.1:1", "10.0.0.2:2", "10.0.0.3:3"]


def _exchange(index: int, peers: list[str] = PEERS, timeout: float = 5.0) -> IdExchange:
    x = IdExchange(KeptPeers(), timeout, PlanCache(census()[0], "b0"))
    x.configure(BusConfig("ep", index, peers))
    assert x.peers.targets == [a for i, a in enumerate(peers) if i != index]
    return x


def _tu(predicates: int, split: bool = True, seq: int = 7) -> pb.TrafficUnit:
    return pb.TrafficUnit(seq=seq, predicate_count=predicates, split_search=split)


@pytest.mark.parametrize(("peers", "predicates", "split"), [
    (PEERS[:1], 2, True),       # one backend: its search is the whole search
    (PEERS, 0, True),           # nothing to search
    (PEERS, 3, False),          # the controller asked for the whole search everywhere
])
def test_a_unit_not_split_is_searched_whole_and_exchanges_nothing(
        peers: list[str], predicates: int, split: bool) -> None:
    x, st = _exchange(0, peers), TuState()
    assert x.share(st, _tu(predicates, split)) == (0, 1)
    x.send(st, _tu(predicates, split), {0: {1}})
    assert not st.sends and st.awaited == frozenset() and x.peers.sent == []  # type: ignore
    assert x.gathered(st)


def test_a_split_unit_sends_its_share_and_waits_for_the_other_senders() -> None:
    x, st = _exchange(1), TuState()
    assert x.share(st, _tu(5)) == (1, 3)
    assert st.sends and st.awaited == {0, 2}
    x.send(st, _tu(5), {1: {4, 2}, 4: None})
    [msg] = x.peers.sent      # type: ignore[attr-defined]
    assert (msg.epoch, msg.seq, msg.from_index) == ("ep", 7, 1)
    assert [(r.predicate_index, list(r.descriptor_ids), r.unrestricted)
            for r in msg.results] == [(1, [2, 4], False), (4, [], True)]


def test_with_fewer_predicates_than_backends_only_the_searchers_send_and_are_awaited() -> None:
    one = _exchange(0), TuState()
    assert one[0].share(one[1], _tu(1)) == (0, 3)
    assert one[1].sends and one[1].awaited == frozenset()    # nobody else searches
    idle = _exchange(2), TuState()
    assert idle[0].share(idle[1], _tu(2)) == (2, 3)
    assert not idle[1].sends and idle[1].awaited == {0, 1}
    idle[0].send(idle[1], _tu(2), {})
    assert idle[0].peers.sent == []        # type: ignore[attr-defined]


# m = 4: on three backends backend 0 searches predicates 0 and 3, backend 1 predicate 1
# (POP), backend 2 predicate 2 (AREA, not a directory attribute: unrestricted).
TEXT = "RETRIEVE ((FILE = Census) and (POP > 100) and (AREA > 1.0) and (STATE = CA)) (CITY)"


def _census_unit(x: IdExchange | None = None, seq: int = 7) -> TuState:
    """A unit of TEXT as it arrives, split over the three backends (checked by `x`'s plan
    cache, as stage 1 does)."""
    tu = unit(census()[0], TEXT)
    tu.seq, tu.predicate_count, tu.split_search = seq, 4, True
    return TuState(tu=tu, shape=None if x is None else x.plans.checked(tu))


def _ids(sender: int, n: int = 3, seq: int = 7) -> pb.DescriptorIds:
    """What backend `sender` of n sends for a unit of TEXT: its share, truly searched."""
    st = _census_unit(seq=seq)
    assert st.tu is not None
    msg = pb.DescriptorIds(epoch="ep", seq=seq, from_index=sender)
    dm.add_pb_results(msg, dm.descriptor_search(census()[0], st.tu, sender, n))
    return msg


def test_gather_merges_the_peers_ids_with_its_own_once_all_are_in() -> None:
    """Stage 2 is woken once, when the last sender's ids come."""
    async def go() -> None:
        x = _exchange(0)
        st = _census_unit(x)
        assert st.tu is not None
        x.share(st, st.tu)
        st.found = dm.descriptor_search(x.plans.directory, st.tu, 0, 3)
        waiting = asyncio.ensure_future(x.gather(st))
        for sender in (1, 2):
            await asyncio.sleep(0)
            assert not waiting.done() and not x.gathered(st)
            x.received(st, _ids(sender))
            if sender == 1:        # one of two senders in: stage 2 is not woken for it
                assert st.peers_in is not None and not st.peers_in.done()
        assert await waiting == dm.descriptor_search(x.plans.directory, st.tu, 0, 1)
        assert x.gathered(st) and st.peers_in is None
    asyncio.run(go())


def _other_attribute(msg: pb.DescriptorIds) -> None:
    """POP's ids replaced by one of STATE's (a descriptor, but not of POP)."""
    state = next(d.id for d in census()[0].descriptors.values() if d.attr == "STATE")
    msg.results[0].ClearField("descriptor_ids")
    msg.results[0].descriptor_ids.append(state)


@pytest.mark.parametrize(("sender", "spoil", "why"), [
    (0, None, "descriptor ids that name this backend's own index 0 as their sender"),
    (5, None, "descriptor ids from backend index 5, of a bus of 3"),
    (1, lambda m: m.results.add(predicate_index=0, unrestricted=True),
     r"from backend 1 \(10.0.0.2:2\): predicate 0 is not its share \(i mod 3 = 1\)"),
    (1, lambda m: m.ClearField("results"), "predicate 1, one of its share"),
    (1, lambda m: m.results.add().CopyFrom(m.results[0]), "a predicate's ids sent twice"),
    (1, lambda m: m.results[0].descriptor_ids.append(10_000),
     "predicate 1 on 'POP': 10000 is not one of its attribute's descriptors"),
    (1, _other_attribute, "predicate 1 on 'POP': .* is not one of its attribute's"),
    (1, lambda m: setattr(m.results[0], "unrestricted", True),
     "predicate 1 on 'POP' sent unrestricted, but the attribute is a directory attribute"),
    (2, lambda m: (setattr(m.results[0], "unrestricted", False),
                   m.results[0].descriptor_ids.append(1)),
     "predicate 2 on 'AREA' sent with ids, but the attribute has no descriptors"),
])
def test_ids_that_do_not_fit_the_unit_fail_it_naming_the_sender_and_the_fault(
        sender: int, spoil, why: str) -> None:
    """Ids are the peer's word, but they must be its share, and name descriptors of each
    predicate's attribute; a sender that is no peer wakes the wait at once."""
    async def go() -> None:
        x = _exchange(0, timeout=30)
        st = _census_unit(x)
        assert st.tu is not None
        x.share(st, st.tu)
        st.found = dm.descriptor_search(x.plans.directory, st.tu, 0, 3)
        waiting = asyncio.ensure_future(x.gather(st))
        await asyncio.sleep(0)
        msg = _ids(sender if sender in (1, 2) else 1)
        msg.from_index = sender
        if spoil is not None:
            spoil(msg)
        x.received(st, msg)
        if sender in (1, 2):
            x.received(st, _ids(3 - sender))     # the other sender's, as they should be
        with pytest.raises(BadMessage, match=why):
            await asyncio.wait_for(waiting, 5)
    asyncio.run(go())


def test_ids_from_a_backend_with_no_share_of_the_unit_are_refused() -> None:
    """With one predicate on three backends only backend 0 searches: ids from backend 2
    for that unit are not from one of its senders."""
    async def go() -> None:
        x, st = _exchange(1), TuState(tu=unit(census()[0], "RETRIEVE (POP > 1) (CITY)"))
        assert st.tu is not None
        st.tu.seq, st.tu.predicate_count, st.tu.split_search = 7, 1, True
        st.shape = x.plans.checked(st.tu)
        x.share(st, st.tu)
        assert st.awaited == {0}
        for sender in (2, 0):
            msg = pb.DescriptorIds(epoch="ep", seq=7, from_index=sender)
            dm.add_pb_results(msg, dm.descriptor_search(x.plans.directory, st.tu, 0, 3))
            x.received(st, msg)
        with pytest.raises(BadMessage, match=r"^descriptor ids from backend 2 \(10.0.0.3:3\), "
                           "which searches no share of this unit$"):
            await x.gather(st)
    asyncio.run(go())


def test_a_wait_names_every_silent_peer_or_the_reason_it_was_cancelled() -> None:
    async def go() -> None:
        x, st = _exchange(0, timeout=0.05), TuState()
        x.share(st, _tu(3))
        with pytest.raises(RuntimeError, match=r"^no descriptor ids from backend\(s\) at "
                           r"10\.0\.0\.2:2, 10\.0\.0\.3:3$"):
            await x.gather(st)
        assert st.peers_in is None
        st.cancelled = "the peer crashed"
        with pytest.raises(Cancelled, match="^the peer crashed$"):
            await x.gather(st)
    asyncio.run(go())


def test_a_share_checked_once_for_a_shape_is_not_checked_again_and_another_still_is(
        monkeypatch) -> None:
    """The plan cache keeps a peer's share of a shape once it passed: the same ids for
    the next unit of that shape cost a comparison; different ids are checked again."""
    checked: list[int] = []
    real = check.peer_ids
    monkeypatch.setattr(check, "peer_ids", lambda *a: (checked.append(a[2]), real(*a))[1])

    async def unit_with(x: IdExchange, seq: int, ids: pb.DescriptorIds) -> DescriptorResults:
        st = _census_unit(x, seq)
        assert st.tu is not None
        x.share(st, st.tu)
        st.found = dm.descriptor_search(x.plans.directory, st.tu, 0, 3)
        for msg in (ids, _ids(2, seq=seq)):
            msg.seq = seq
            x.received(st, msg)
        return await x.gather(st)

    async def go() -> None:
        x = _exchange(0)
        whole = dm.descriptor_search(x.plans.directory, _census_unit(x).tu, 0, 1)
        assert await unit_with(x, 1, _ids(1)) == whole
        assert await unit_with(x, 2, _ids(1)) == whole
        assert checked == [1, 2]          # backend 1's share once, backend 2's once
        spoiled = _ids(1)
        spoiled.results[0].descriptor_ids.append(10_000)
        with pytest.raises(BadMessage, match="10000 is not one of its attribute's"):
            await unit_with(x, 3, spoiled)
        assert checked == [1, 2, 1]
    asyncio.run(go())
