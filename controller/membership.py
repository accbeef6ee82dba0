"""Membership: which backends the controller works with, and how each joins.

The controller's only file is its decision log (`decisions.py`). At start it
resolves every backend's in-doubt units, reads every backend's directory, takes
their union as the authoritative one (ids only ever come from IIG, so copies can
only lag, never disagree) and brings any lagging backend up to date. Placement
state is rebuilt from the backends' per-cluster record counts. A backend that
joins later, or rejoins after its bus broke, is met the same way (what is checked of
it when it is met: `meeting.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator

from controller.bus import BackendLink, Bus
from controller.decisions import Decisions
from controller.iig import Iig
from controller.meeting import Meeting
from controller.members import Members
from mbds import faults
from mbds.directory import Directory
from mbds.directory_parts import directory_entries, directory_parts
from mbds.entries import EntryCheck, EntryError
from mbds.errors import BackendUnavailable, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.service import MAX_BACKEND_NAME

log = logging.getLogger("mbds.controller")


def natural_key(name: str) -> list[object]:
    """b2 before b10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


class Membership:
    """The set of backends in bus order, changed only between traffic units: each unit
    is counted in (`enter`) and out (`leave`), and a change waits until none runs."""

    def __init__(self, bus: Bus, directory: Directory, iig: Iig, decisions: Decisions, *,
                 timeout: float, connect_timeout: float, members: Members | None = None
                 ) -> None:
        self.members = members or Members(None)
        self.bus = bus
        self.directory = directory
        self.iig = iig
        self.decisions = decisions
        decisions.begin(bus.epoch)      # on disk before any unit of it is numbered
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.meet = Meeting(bus, decisions, self.members, timeout=timeout,
                            connect_timeout=connect_timeout)
        self._connecting = asyncio.Lock()
        self._failed: tuple[float, str] | None = None    # when and why a reconnection failed
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()       # cleared while the set of backends changes
        self._open.set()

    @property
    def links(self) -> list[BackendLink]:
        """The backends, in bus order."""
        return self.bus.links

    # ------------------------------------------------------------ joining --
    async def start(self) -> None:
        """Meet every backend, reconcile directories, rebuild placement, open the buses;
        refused if one the cluster has had is not among them, or one belongs to another
        cluster (`members.py`)."""
        replies = await asyncio.gather(*(link.hello(self.connect_timeout)
                                         for link in self.links))
        for r in replies:
            if any(not 0 < len(n) <= MAX_BACKEND_NAME for n in r.members):
                raise BackendUnavailable(
                    f"backend {shorten(r.name)} names the cluster's backends with a name "
                    f"empty or longer than {MAX_BACKEND_NAME} characters")
            self.meet.heard(r)          # every backend's commits, before any unit is resolved
        self.members.identify({r.name: r.cluster for r in replies},
                              (n for r in replies if r.cluster for n in r.members))
        for link, reply in zip(self.links, replies, strict=True):
            self.meet.one_controller(link, reply)
        self.members.keep()             # the cluster's id, before any backend is told it
        await self._join(self.links, every=True)
        await self.meet.buses_taken(self.links)
        self.decisions.met_every_backend()

    async def _join(self, links: list[BackendLink], every: bool = False) -> None:
        """Admit backends: read their directories and placement counts, order the set
        by name, bring every directory up to date, and (re)open every bus. `every`:
        these are all the backends, which must include each the cluster has had."""
        reads = await asyncio.gather(*(self.meet.directory_of(link) for link in links))
        names = [parts[0].name for parts in reads]
        if len(set(names)) != len(names):
            raise BackendUnavailable(f"two backends share a name: {sorted(names)}")
        if every:
            self.members.check_all(names)
        # Every directory is checked before any is applied: `Directory.apply` trusts it.
        # A directory's parts come files first, then descriptors, then clusters, so each
        # part is checked against the directory and the parts checked before it.
        joining = EntryCheck(self.directory)
        for link, parts in zip(links, reads, strict=True):
            try:
                if parts[0].name != link.name:
                    raise EntryError(f"it names backend {shorten(repr(parts[0].name))}")
                for part in parts:
                    joining.check(part.directory)
            except EntryError as e:
                raise BackendUnavailable(f"backend {link.name} ({link.address}): its "
                                         f"directory is refused: {e}") from None
            self.meet.whole(link, parts)
        for name in names:
            # A known backend at a new address (a re-created container): same data,
            # same identity; the new link replaces the old one, once the old address no
            # longer answers as it (two live backends of one name would take turns).
            old = next((x for x in self.links if x.name == name and x not in links), None)
            if old is not None:
                await self.meet.gone(old, next(x for x in links if x.name == name))
                self.links.remove(old)
                await old.close()
        self.members.admit(names)
        for name, parts in zip(names, reads, strict=True):
            for part in parts:
                self.directory.apply(part.directory)
            self.iig.count_backend(name, (c for part in parts for c in part.counts))
        self.iig.resync()
        self.bus.arrange(sorted({*self.links, *links}, key=lambda x: natural_key(x.name)))
        faults.hit("controller.before_bus_open")
        for link in self.links:
            digest = next((parts[0].directory_digest for parts in reads
                           if parts[0].name == link.name), None)
            if digest is None:
                digest = (await self.meet.hello(link, self.connect_timeout)).directory_digest
            await self._sync(link, digest)
            self.bus.open(link)

    async def add_backends(self, addresses: list[str]) -> None:
        """A backend joined (e.g. `--scale backend=4`): admit it between traffic units."""
        new = [BackendLink(a) for a in addresses
               if a not in {x.address for x in self.links}]
        if not new:
            return
        async with self._between_units(), self._connecting:
            # `_connecting`: no reconnection (`ensure_up`, which `status` calls outside
            # any traffic unit) opens a bus while the set of backends changes.
            try:
                await self._join(new)
                await self.meet.buses_taken(new)
            except BaseException:
                for link in new:        # refused before it was admitted: tried again anew
                    if link not in self.links:
                        await link.close()
                if any(link in self.links for link in new):
                    # Admitted, but its buses were not all reopened: those left open still
                    # carry the old set (index, peers). Every bus is reopened together
                    # with the set as it now is (`ensure_up`).
                    for link in self.links:
                        link.close_bus()
                raise
        log.info("controller joined %d backends: %s", len(self.links),
                 ", ".join(f"{x.name}@{x.address}" for x in self.links))

    async def _sync(self, link: BackendLink, digest: str) -> None:
        """A backend whose directory differs gets the whole of it, in parts of a few MiB
        (each checked and applied there before the next is sent)."""
        if digest != self.directory.digest():
            await link.apply_directory(directory_parts(directory_entries(self.directory)),
                                       self.timeout)

    async def ensure_up(self) -> None:
        """Reconnect any backend whose bus broke; refuse work while one is unreachable.
        Requests that come while a reconnection is tried take its failure: they do not
        each try again, one after another (one that comes later tries anew)."""
        if all(link.up for link in self.links):
            return
        loop = asyncio.get_running_loop()
        came = loop.time()
        async with self._connecting:
            if self._failed is not None and self._failed[0] >= came:
                raise BackendUnavailable(self._failed[1])
            try:
                await self._moved(min(2.0, self.connect_timeout))
                for link in self.links:
                    if link.up:
                        continue
                    reply = await self._hello(link, min(2.0, self.connect_timeout))
                    await self._sync(link, reply.directory_digest)
                    self.bus.open(link)
                    log.info("backend %s rejoined", link.name)
            except BackendUnavailable as e:
                self._failed = (loop.time(), str(e))
                raise
            self._failed = None

    async def _hello(self, link: BackendLink, timeout: float) -> pb.HelloReply:
        """A hello to a backend whose bus broke. One that finds another backend at its
        address follows the backends if they came back at one another's (`_moved`) and
        greets it there, so the request that finds them so is served."""
        try:
            return await self.meet.hello(link, timeout)
        except BackendUnavailable:
            if not link.elsewhere:
                raise
            await self._moved(timeout)
            if link.elsewhere:      # not moved: another backend holds its address
                raise
        return await self.meet.hello(link, timeout)

    async def _moved(self, timeout: float) -> None:
        """Backends restarted together may come back at one another's addresses (a
        container's address is given anew at its start): when the backends of broken
        buses answer at one another's addresses, each link follows its backend. Only
        among those addresses, which every backend's peer list already holds; a backend
        at an address never seen is met by discovery (`add_backends`)."""
        down = [x for x in self.links if not x.up]
        if not any(x.elsewhere for x in down):
            return
        at = {}
        for link in down:
            if name := await link.answering(timeout):
                at[name] = link.address
        moves = {x: at[x.name] for x in down if at.get(x.name, x.address) != x.address}
        if sorted(moves.values()) == sorted(x.address for x in moves):
            for link, address in moves.items():
                await link.move_to(address)

    # ------------------------------------------------------- traffic units --
    @contextlib.asynccontextmanager
    async def _between_units(self) -> AsyncIterator[None]:
        """Hold new traffic units and wait for running ones: the bus is reconfigured."""
        self._open.clear()
        try:
            await self._idle.wait()
            yield
        finally:
            self._open.set()

    async def enter(self) -> None:
        """One more traffic unit in flight (`leave` when it is over): held while the set
        of backends changes."""
        await self._open.wait()
        self._inflight += 1
        self._idle.clear()

    def leave(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()
