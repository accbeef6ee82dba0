"""The descriptor-id exchange in process, for the mutants tests/test_exchange.py lets live
(docs/mutation.md): ids from a backend that searches no share of a unit fail it, named,
whether they come before the unit or after, and whatever index they claim."""

from __future__ import annotations

import asyncio

import pytest

from backend import dm
from backend.check import BadMessage
from backend.exchange import IdExchange
from backend.plancache import PlanCache
from backend.state import BusConfig, TuState
from mbds.proto import mbds_pb2 as pb
from tests.inproc import KeptPeers, census, unit

PEERS = ["127.0.0.1:5001", "127.0.0.1:5002", "127.0.0.1:5003"]
# m = 2: on three backends, backends 0 and 1 search; backend 2 has no share.
TEXT = "RETRIEVE ((FILE = Census) and (POP > 1)) (CITY)"


def exchange(index: int) -> IdExchange:
    x = IdExchange(KeptPeers(), 5.0, PlanCache(census()[0], "b0"))
    x.configure(BusConfig("ep", index, PEERS))
    return x


def arriving(x: IdExchange, split: bool = True) -> TuState:
    """A unit of TEXT as it arrives, checked by `x`'s plan cache (as stage 1 does)."""
    tu = unit(census()[0], TEXT)
    tu.seq, tu.predicate_count, tu.split_search = 7, 2, split
    return TuState(tu=tu, shape=x.plans.checked(tu))


def ids(st: TuState, sender: int) -> pb.DescriptorIds:
    """What backend `sender` of three sends for the unit: its share, truly searched."""
    assert st.tu is not None
    msg = pb.DescriptorIds(epoch="ep", seq=7, from_index=sender)
    dm.add_pb_results(msg, dm.descriptor_search(census()[0], st.tu, sender, 3))
    return msg


def test_ids_that_came_before_the_unit_from_a_backend_with_no_share_fail_it() -> None:
    """Backend 2 has no share (its ids are empty, and would pass as a share of nothing):
    its ids, come before the unit, fail the unit once its share is known."""
    async def go() -> None:
        x = exchange(1)
        st = arriving(x)
        for sender in (2, 0):
            x.received(st, ids(st, sender))
        assert st.tu is not None
        assert x.share(st, st.tu) == (1, 3) and st.awaited == {0}
        with pytest.raises(BadMessage, match=r"^descriptor ids from backend 2 "
                           r"\(127.0.0.1:5003\), which searches no share of this unit$"):
            await x.gather(st)
    asyncio.run(go())


@pytest.mark.parametrize("sender, message", [
    (0, r"descriptor ids from backend 0 \(127.0.0.1:5001\), which searches no share of "
        "this unit"),
    (2, r"descriptor ids from backend 2 \(127.0.0.1:5003\), which searches no share of "
        "this unit"),
    (1, "descriptor ids that name this backend's own index 1 as their sender"),
    (3, "descriptor ids from backend index 3, of a bus of 3"),
])
def test_ids_for_a_unit_searched_whole_fail_it_naming_their_sender(sender: int,
                                                                    message: str) -> None:
    """A unit the controller did not split waits for nobody's ids: any that come fail it."""
    async def go() -> None:
        x = exchange(1)
        st = arriving(x, split=False)
        assert st.tu is not None
        assert x.share(st, st.tu) == (0, 1) and st.awaited == frozenset()
        x.received(st, pb.DescriptorIds(epoch="ep", seq=7, from_index=sender))
        with pytest.raises(BadMessage, match=f"^{message}$"):
            await x.gather(st)
    asyncio.run(go())
