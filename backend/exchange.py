"""The descriptor-id exchange (docs/spec.md §4 step 3): each backend searches its share of a
traffic unit's predicates (those whose index i has i mod n = its own index), broadcasts
the descriptor ids it found to the other backends, and before cluster search waits for
theirs, so that every backend plans from the ids of all m predicates. A peer's ids
are checked before they are used (`PlanCache.peer_share`): a unit given ids that do not
fit fails here, naming the peer and what is wrong.
"""

from __future__ import annotations

import asyncio
from functools import partial

from backend import check, dm
from backend.links import PeerLinks
from backend.plan import DescriptorResults
from backend.plancache import PlanCache
from backend.state import BusConfig, Cancelled, TuState
from mbds.proto import mbds_pb2 as pb


class IdExchange:
    """One backend's side of the exchange, over its streams to the peers."""

    def __init__(self, peers: PeerLinks, timeout: float, plans: PlanCache) -> None:
        self.peers = peers
        self.timeout = timeout
        self.plans = plans
        self.config = BusConfig()

    def configure(self, config: BusConfig) -> None:
        """The bus's configuration (this backend's index, every peer's address)."""
        self.config = config
        self.peers.configure(config.peers, config.index, config.cluster)

    def split(self, tu: pb.TrafficUnit) -> bool:
        """Is this unit's descriptor search split over the backends (ids exchanged)?"""
        return len(self.config.peers) > 1 and tu.predicate_count > 0 and tu.split_search

    def senders(self, tu: pb.TrafficUnit) -> range:
        """The backends that search a share of this unit's predicates (i mod n = index).

        With fewer predicates than backends the others have nothing to search, so they
        send nothing and nobody waits for them: request 4 of the paper (one predicate)
        on four backends is three id messages, not twelve, and stage 2 waits for one
        peer, not for the slowest of three. `predicate_count` is the m the controller
        counted over the same retrievals `dm.predicates` walks.
        """
        return range(min(tu.predicate_count, len(self.config.peers)))

    def share(self, st: TuState, tu: pb.TrafficUnit) -> tuple[int, int]:
        """(this backend's index, n) of its share of descriptor search, or (0, 1): all of
        it. Records on `st` whether it sends ids and whose it waits for, worked out once
        per unit."""
        st.config = self.config
        share = (0, 1)
        if self.split(tu):
            index = self.config.index
            senders = self.senders(tu)
            st.sends = index in senders
            st.awaited = frozenset(senders).difference((index,))
            share = (index, len(self.config.peers))
        # Ids that came before the unit, from a backend it does not wait for, fail it now
        # rather than at its timeout.
        if st.peer_ids and not st.bad_ids:
            st.bad_ids = next(filter(None, map(partial(stranger, st), st.peer_ids)), "")
        return share

    def send(self, st: TuState, tu: pb.TrafficUnit, found: DescriptorResults) -> None:
        """Broadcast this backend's share of the ids, if it searched one."""
        if st.sends:
            msg = pb.DescriptorIds(epoch=self.config.epoch, seq=tu.seq,
                                   from_index=self.config.index)
            dm.add_pb_results(msg, found)
            self.peers.broadcast(msg)

    def received(self, st: TuState, msg: pb.DescriptorIds) -> None:
        """A peer's ids for a unit. They may come before the unit itself, even before this
        backend's bus hello: they are checked against the unit's share once it is known
        (`stranger`, `gather`)."""
        if msg.from_index in st.peer_ids:
            # A backend sends its share of a unit once: a second is not kept (its room
            # would be a flood's), and the unit fails, the sender's word being in doubt.
            st.bad_ids = st.bad_ids or (f"descriptor ids from backend index {msg.from_index} "
                                        "sent twice")
            wake(st)
            return
        st.peer_ids[msg.from_index] = list(msg.results)
        if st.config is not None and not st.bad_ids:
            # The unit's share is known: ids from a backend it does not wait for fail it
            # now (there may be nothing else to wake it before its timeout).
            st.bad_ids = stranger(st, msg.from_index)
        if st.bad_ids or st.awaited <= st.peer_ids.keys():
            wake(st)               # stage 2 goes on once every sender's ids are in

    @staticmethod
    def gathered(st: TuState) -> bool:
        """Are the ids of every predicate here (nothing for stage 2 to wait for)?"""
        return st.awaited <= st.peer_ids.keys()

    async def gather(self, st: TuState) -> DescriptorResults:
        """The ids of every predicate: this backend's own and, once they are in, its
        peers'. Raises `Cancelled` if the unit is aborted meanwhile, `check.BadMessage`
        if a peer's ids do not fit it."""
        if not st.awaited <= st.peer_ids.keys() and not st.bad_ids:
            await self._wait(st)
        if st.bad_ids:          # every sender was looked at, by `share` or `received`
            raise check.BadMessage(st.bad_ids)
        if not st.peer_ids:
            return st.found
        assert st.tu is not None and st.shape is not None and st.config is not None
        found = dict(st.found)
        peers = st.config.peers
        for sender, msgs in st.peer_ids.items():
            try:
                found.update(self.plans.peer_share(st.shape, st.tu, sender, len(peers), msgs))
            except check.BadMessage as e:
                raise check.BadMessage(f"descriptor ids from backend {sender} "
                                       f"({peers[sender]}): {e}") from None
        return found

    async def _wait(self, st: TuState) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        timer = loop.call_at(deadline, _time_out, st)
        try:
            while not st.awaited <= st.peer_ids.keys() and not st.bad_ids:
                if st.cancelled:   # e.g. the peer crashed and PP aborted the unit:
                    raise Cancelled(st.cancelled)   # later units must not wait too
                if loop.time() >= deadline:     # (the timer may find it already woken)
                    raise TimeoutError
                st.peers_in = loop.create_future()
                await st.peers_in
        except TimeoutError:
            missing = sorted(st.awaited - st.peer_ids.keys())
            raise RuntimeError("no descriptor ids from backend(s) at "
                               + ", ".join(self.config.peers[i] for i in missing)) from None
        finally:
            timer.cancel()
            st.peers_in = None


def stranger(st: TuState, sender: int) -> str:
    """Why ids from `sender` do not belong to the unit, by its share (worked out at stage
    1): "" when they come from one of the senders it waits for."""
    if sender in st.awaited or st.config is None:
        return ""
    peers = st.config.peers
    if sender == st.config.index:
        return f"descriptor ids that name this backend's own index {sender} as their sender"
    if not 0 <= sender < len(peers):
        return f"descriptor ids from backend index {sender}, of a bus of {len(peers)}"
    return (f"descriptor ids from backend {sender} ({peers[sender]}), which searches no "
            "share of this unit")


def wake(st: TuState) -> None:
    """Wake the unit's stage 2 if it waits for ids (to look again: ids came, or the unit
    was cancelled)."""
    if st.peers_in is not None and not st.peers_in.done():
        st.peers_in.set_result(None)


def _time_out(st: TuState) -> None:
    if st.peers_in is not None and not st.peers_in.done():
        st.peers_in.set_exception(TimeoutError())
