"""The descriptor-id exchange (SPEC §4 step 3): each backend searches its share of a
traffic unit's predicates (those whose index i has i mod n = its own index), broadcasts
the descriptor ids it found to the other backends, and before cluster search waits for
theirs, so that every backend plans from the ids of all m predicates.
"""

from __future__ import annotations

import asyncio

from backend import dm
from backend.links import PeerLinks
from backend.plan import DescriptorResults
from backend.state import BusConfig, Cancelled, TuState
from mbds.proto import mbds_pb2 as pb


class IdExchange:
    """One backend's side of the exchange, over its streams to the peers."""

    def __init__(self, peers: PeerLinks, timeout: float) -> None:
        self.peers = peers
        self.timeout = timeout
        self.config = BusConfig()

    def configure(self, config: BusConfig) -> None:
        """The bus's configuration (this backend's index, every peer's address)."""
        self.config = config
        self.peers.configure(config.peers, config.index)

    def split(self, tu: pb.TrafficUnit) -> bool:
        """Is this unit's descriptor search split over the backends (ids exchanged)?"""
        return len(self.config.peers) > 1 and tu.predicate_count > 0 and tu.split_search

    def share(self, tu: pb.TrafficUnit) -> tuple[int, int]:
        """(this backend's index, n) of its share of descriptor search; (0, 1): all of it."""
        return (self.config.index, len(self.config.peers)) if self.split(tu) else (0, 1)

    def senders(self, tu: pb.TrafficUnit) -> range:
        """The backends that search a share of this unit's predicates (i mod n = index).

        With fewer predicates than backends the others have nothing to search, so they
        send nothing and nobody waits for them: request 4 of the paper (one predicate)
        on four backends is three id messages, not twelve, and stage 2 waits for one
        peer, not for the slowest of three. `predicate_count` is the m the controller
        counted over the same retrievals `dm.predicates` walks.
        """
        return range(min(tu.predicate_count, len(self.config.peers)))

    def send(self, tu: pb.TrafficUnit, found: DescriptorResults) -> None:
        """Broadcast this backend's share of the ids, if it searched one."""
        if self.split(tu) and self.config.index in self.senders(tu):
            self.peers.broadcast(pb.DescriptorIds(
                epoch=self.config.epoch, seq=tu.seq, from_index=self.config.index,
                results=dm.to_pb_results(found)))

    @staticmethod
    def received(st: TuState, msg: pb.DescriptorIds) -> None:
        st.peer_ids[msg.from_index] = list(msg.results)
        st.peers_in.set()          # stage 2 checks whether every sender is in

    def _awaited(self, tu: pb.TrafficUnit) -> set[int]:
        """The peers whose ids this backend waits for before cluster search."""
        return set(self.senders(tu)) - {self.config.index} if self.split(tu) else set()

    def gathered(self, st: TuState) -> bool:
        """Are the ids of every predicate here (nothing for stage 2 to wait for)?"""
        assert st.tu is not None
        return self._awaited(st.tu) <= st.peer_ids.keys()

    async def gather(self, st: TuState) -> DescriptorResults:
        """The ids of every predicate: this backend's own and, once they are in, its
        peers'. Raises `Cancelled` if the unit is aborted meanwhile."""
        assert st.tu is not None
        senders = self._awaited(st.tu)
        if not senders <= st.peer_ids.keys():
            await self._wait(st, senders)
        if not st.peer_ids:
            return st.found
        found = dict(st.found)
        for msgs in st.peer_ids.values():
            found.update(dm.from_pb_results(msgs))
        return found

    async def _wait(self, st: TuState, senders: set[int]) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                while not senders <= st.peer_ids.keys():
                    if st.cancelled:   # e.g. the peer crashed and PP aborted the unit:
                        raise Cancelled(st.cancelled)   # later units must not wait too
                    st.peers_in.clear()
                    await st.peers_in.wait()
        except TimeoutError:
            missing = sorted(senders - st.peer_ids.keys())
            raise RuntimeError("no descriptor ids from backend(s) at "
                               + ", ".join(self.config.peers[i] for i in missing)) from None
