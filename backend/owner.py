"""Whose calls a backend takes: one cluster's, and one controller's at a time.

A backend's records are its cluster's slice of every file, so it must never be joined
to another cluster: the cluster's id, given by the first controller whose bus it
serves, is kept in its store, and every later call but Hello names it (gRPC metadata,
`CLUSTER_KEY`). Certificates alone do not tell clusters apart when they share a CA.

While one controller's bus is open, a bus, a `Resolve` or a directory write from a
controller of another epoch is refused: a second controller would number traffic units
in an order of its own and hand out descriptor and cluster ids the first also hands out.
A controller that died leaves its bus when its connection closes, or when keepalive
finds it gone (`mbds.service.SERVER_OPTIONS`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from backend.state import BusOut
from backend.store import Store
from backend.writer import Writer
from mbds.errors import shorten
from mbds.service import caller, foreign


class Owner:
    """The cluster this backend belongs to and the controller whose bus it serves."""

    def __init__(self, name: str, cluster: str, members: list[str] | None = None) -> None:
        self.name = name
        self.cluster = cluster        # kept in the store (`Store.cluster`); "" until joined
        self.members = members or []  # the cluster's backends (`Store.members`)
        self.buses: dict[BusOut, tuple[str, str, float]] = {}   # -> (epoch, peer, since)

    @property
    def epoch(self) -> str:
        """The epoch of the controller whose bus is open here ("" if none is)."""
        return next(iter(self.buses.values()))[0] if self.buses else ""

    def refusal(self, metadata: Iterable[tuple[str, str | bytes]] | None, *,
                writes: bool) -> str:
        """Why a call with `metadata` is refused here ("" if it is not): it names another
        cluster than this backend's, or, if it `writes`, comes from a controller other
        than the one whose bus is open."""
        refused = foreign(self.cluster, metadata, f"backend {self.name}")
        if refused:
            return refused
        if writes and self.buses and caller(metadata)[1] != self.epoch:
            first, peer, since = next(iter(self.buses.values()))
            return (f"backend {self.name} serves the bus of another controller (epoch "
                    f"{first}, from {peer}, for {time.monotonic() - since:.0f} s): a cluster "
                    "has one controller at a time")
        return ""

    def open(self, bus: BusOut, metadata: Iterable[tuple[str, str | bytes]] | None,
             peer: str) -> str:
        """Take a new bus (its hello must then name the same epoch, `BusOut.epoch`), or
        say why not. Checked and taken in one step: two controllers opening buses at
        once cannot both pass."""
        refused = self.refusal(metadata, writes=True)
        if refused:
            return refused
        bus.epoch = caller(metadata)[1]
        self.buses[bus] = (bus.epoch, shorten(peer, 80), time.monotonic())
        return ""

    def closed(self, bus: BusOut) -> None:
        self.buses.pop(bus, None)

    async def join(self, metadata: Iterable[tuple[str, str | bytes]] | None,
                   writer: Writer) -> None:
        """Keep the cluster a bus names as this backend's, if it has none yet: on disk
        before the bus serves anything."""
        cluster = caller(metadata)[0]
        if self.cluster or not cluster:
            return
        await asyncio.wrap_future(writer.submit(lambda conn: Store.join_cluster(conn, cluster)))
        self.cluster = cluster

    async def keep_members(self, names: list[str], writer: Writer) -> None:
        """Keep the cluster's backends a bus hello names, if they changed."""
        if names and names != self.members:
            await asyncio.wrap_future(writer.submit(lambda conn: Store.keep_members(conn,
                                                                                  names)))
            self.members = names
