"""The descriptor-id exchange on one backend, in process: which units it splits, what it
sends its peers, what stage 2 gathers, and how a wait for ids ends."""

from __future__ import annotations

import asyncio

import pytest

from backend import dm
from backend.exchange import IdExchange
from backend.state import BusConfig, Cancelled, TuState
from mbds.proto import mbds_pb2 as pb
from tests.inproc import KeptPeers

PEERS = ["10.0.0.1:1", "10.0.0.2:2", "10.0.0.3:3"]


def _exchange(index: int, peers: list[str] = PEERS, timeout: float = 5.0) -> IdExchange:
    x = IdExchange(KeptPeers(), timeout)
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
    assert dm.from_pb_results(list(msg.results)) == {1: {2, 4}, 4: None}
    assert [list(r.descriptor_ids) for r in msg.results] == [[2, 4], []]


def test_with_fewer_predicates_than_backends_only_the_searchers_send_and_are_awaited() -> None:
    one = _exchange(0), TuState()
    assert one[0].share(one[1], _tu(1)) == (0, 3)
    assert one[1].sends and one[1].awaited == frozenset()    # nobody else searches
    idle = _exchange(2), TuState()
    assert idle[0].share(idle[1], _tu(2)) == (2, 3)
    assert not idle[1].sends and idle[1].awaited == {0, 1}
    idle[0].send(idle[1], _tu(2), {})
    assert idle[0].peers.sent == []        # type: ignore[attr-defined]


def test_gather_merges_the_peers_ids_with_its_own_once_all_are_in() -> None:
    """Stage 2 is woken once, when the last sender's ids come."""
    async def go() -> None:
        x, st = _exchange(0), TuState()
        x.share(st, _tu(3))
        st.found = {0: {1}}
        waiting = asyncio.ensure_future(x.gather(st))
        for sender, found in ((1, {1: {5}}), (2, {2: None})):
            await asyncio.sleep(0)
            assert not waiting.done() and not x.gathered(st)
            msg = pb.DescriptorIds(epoch="ep", seq=7, from_index=sender)
            dm.add_pb_results(msg, found)
            x.received(st, msg)
            if sender == 1:        # one of two senders in: stage 2 is not woken for it
                assert st.peers_in is not None and not st.peers_in.done()
        assert await waiting == {0: {1}, 1: {5}, 2: None}
        assert x.gathered(st) and st.peers_in is None
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
