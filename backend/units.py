"""A backend's traffic units under way, by (epoch, seq): each one's state, made when its
unit comes or when a peer's descriptor ids for it come first (a peer may be ahead).

States made by peers' ids are bounded, in units and in the bytes of ids kept for them:
more is no peer running ahead of this backend but a flood, refused (`BadMessage`), and
one whose unit never comes is forgotten after twice the result timeout.
"""

from __future__ import annotations

import asyncio

from backend.check import BadMessage
from backend.state import TuState
from mbds.errors import shorten
from mbds.proto import mbds_pb2 as pb
from mbds.service import MAX_MESSAGE

Key = tuple[str, int]

# Units a peer's ids may name before their traffic unit comes here, and the bytes of ids
# kept for them. The bytes are room for two of the largest messages.
MAX_UNARRIVED = 4096
MAX_UNARRIVED_BYTES = 2 * MAX_MESSAGE


class Units:
    """The states of the units under way (`states`), and those of units not yet come."""

    def __init__(self, loop: asyncio.AbstractEventLoop, result_timeout: float) -> None:
        self.loop, self.result_timeout = loop, result_timeout
        self.states: dict[Key, TuState] = {}
        self.unarrived = 0          # states made by peer ids, counted again when at the bound
        self.unarrived_bytes = 0    # their ids' bytes, likewise

    def state(self, key: Key, *, arriving: bool = False) -> TuState:
        """The unit's state; `arriving` when its traffic unit itself has come."""
        st = self.states.get(key)
        if st is None:
            st = self.states[key] = TuState(key)
            if not arriving:
                # Forget it if its traffic unit never shows up (e.g. late peer ids of a
                # unit already finished here).
                st.expiry = self.loop.call_later(self.result_timeout * 2,
                                                 self._forget_unarrived, key, st)
        elif arriving and st.expiry is not None:
            # The unit came after its peers' ids: `forget` drops it when it ends, and a
            # timer left armed would keep it (and its traffic unit) alive long after.
            st.expiry.cancel()
            st.expiry = None
        return st

    def _forget_unarrived(self, key: Key, st: TuState) -> None:
        if self.states.get(key) is st and st.tu is None:
            del self.states[key]

    def forget(self, st: TuState) -> None:
        if self.states.get(st.key) is st:
            del self.states[st.key]

    def for_ids(self, msg: pb.DescriptorIds, epoch: str, last_seq: int) -> TuState | None:
        """The state a peer's ids are for; None for late ids of a unit that ran here already
        (`last_seq` of the bus's `epoch`): nothing waits for them."""
        key = (msg.epoch, msg.seq)
        st = self.states.get(key)
        if st is None:
            if msg.epoch == epoch and msg.seq <= last_seq:
                return None
            self.unarrived = sum(1 for s in self.states.values() if s.tu is None) \
                if self.unarrived >= MAX_UNARRIVED else self.unarrived + 1
            if self.unarrived > MAX_UNARRIVED:
                raise BadMessage(
                    f"descriptor ids for more than {MAX_UNARRIVED} units that have not come "
                    f"here (unit {shorten(msg.epoch, 40)}/{msg.seq}): refused")
            st = self.state(key)
        if st.tu is None:           # kept until the unit comes: bounded in bytes too
            self._keep_early(st, msg)
        return st

    def _keep_early(self, st: TuState, msg: pb.DescriptorIds) -> None:
        size = msg.ByteSize()
        if self.unarrived_bytes + size > MAX_UNARRIVED_BYTES:
            # Counted again from the states still waiting: those that came or expired
            # meanwhile give their room back.
            self.unarrived_bytes = sum(s.early_bytes for s in self.states.values()
                                       if s.tu is None)
            if self.unarrived_bytes + size > MAX_UNARRIVED_BYTES:
                raise BadMessage(
                    f"descriptor ids of more than {MAX_UNARRIVED_BYTES >> 20} MiB for units "
                    f"that have not come here (unit {shorten(msg.epoch, 40)}/{msg.seq}): "
                    "refused")
        st.early_bytes += size
        self.unarrived_bytes += size
