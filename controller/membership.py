"""Membership: which backends the controller works with, and how each joins.

The controller's only file is its decision log (`decisions.py`). At start it
resolves every backend's in-doubt units, reads every backend's directory, takes
their union as the authoritative one (ids only ever come from IIG, so copies can
only lag, never disagree) and brings any lagging backend up to date. Placement
state is rebuilt from the backends' per-cluster record counts. A backend that
joins later, or rejoins after its bus broke, is met the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator

import grpc

from controller.bus import BackendLink, Bus
from controller.decisions import Decisions
from controller.iig import Iig
from controller.members import Members
from mbds import faults, metrics
from mbds.directory import Directory
from mbds.directory_parts import directory_entries, directory_parts
from mbds.entries import EntryCheck, EntryError
from mbds.errors import BackendUnavailable, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.service import (
    CLUSTER_KEY,
    COMMITTED_RUNS,
    EPOCH_KEY,
    MAX_BACKEND_NAME,
    MAX_EPOCH,
)

log = logging.getLogger("mbds.controller")

# Reads of a backend's directory before the controller gives up on one that keeps
# changing between its parts.
DIRECTORY_READS = 3


def _position(p: pb.DirectoryPosition) -> tuple[int, str, int]:
    return (p.section, p.after_file, p.after_id)


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
            self._heard(r)          # every backend's commits, before any unit is resolved
        self.members.identify({r.name: r.cluster for r in replies},
                              (n for r in replies if r.cluster for n in r.members))
        for link, reply in zip(self.links, replies, strict=True):
            self._one_controller(link, reply)
        self.members.keep()             # the cluster's id, before any backend is told it
        await self._join(self.links, every=True)
        await self._buses_taken(self.links)
        self.decisions.met_every_backend()

    async def _join(self, links: list[BackendLink], every: bool = False) -> None:
        """Admit backends: read their directories and placement counts, order the set
        by name, bring every directory up to date, and (re)open every bus. `every`:
        these are all the backends, which must include each the cluster has had."""
        reads = await asyncio.gather(*(self._directory_of(link) for link in links))
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
        for name in names:
            # A known backend at a new address (a re-created container): same data,
            # same identity; the new link replaces the old one, once the old address no
            # longer answers as it (two live backends of one name would take turns).
            old = next((x for x in self.links if x.name == name and x not in links), None)
            if old is not None:
                await self._gone(old, next(x for x in links if x.name == name))
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
                digest = (await self._hello(link, self.connect_timeout)).directory_digest
            await self._sync(link, digest)
            self.bus.open(link)

    @staticmethod
    async def _gone(old: BackendLink, new: BackendLink) -> None:
        """Refuse `new` if the backend of the same name still answers at its old address."""
        try:
            reply = await old.stub.Hello(pb.HelloRequest(), timeout=1.0)
        except grpc.aio.AioRpcError:
            return
        if reply.name == old.name:
            raise BackendUnavailable(
                f"two backends named {shorten(old.name)} answer, at {old.address} and at "
                f"{new.address}: each data dir serves as one backend; stop one of them")

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
                await self._buses_taken(new)
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

    async def _directory_of(self, link: BackendLink) -> list[pb.DirectoryReply]:
        """The backend's directory, read part by part (each a message of a few MiB): the
        parts of one read have one name and one digest, each starts where the one before
        it said the next would, and the positions only advance. A directory that changed
        between parts (another digest) is read again from the start."""
        await self._hello(link, self.connect_timeout)
        for _ in range(DIRECTORY_READS):
            start = pb.DirectoryPosition()
            parts = [await link.directory(start, self.timeout)]
            while parts[-1].HasField("next"):
                following = parts[-1].next
                if following.section > 2 or _position(following) <= _position(start):
                    raise link.unavailable(
                        f"its directory's part {len(parts)} names a next position that "
                        f"does not advance (section {following.section}, "
                        f"{shorten(repr(following.after_file))}, {following.after_id})")
                start = following
                part = await link.directory(start, self.timeout)
                if (part.name, part.directory_digest) != (parts[0].name,
                                                          parts[0].directory_digest):
                    break                   # changed meanwhile: read again
                parts.append(part)
            else:
                return parts
            log.info("backend %s: its directory changed while it was read; reading it "
                     "again", link.name)
        raise link.unavailable(f"its directory changed while it was read, "
                               f"{DIRECTORY_READS} times")

    async def _hello(self, link: BackendLink, timeout: float) -> pb.HelloReply:
        """Hello, and the backend's in-doubt units resolved before it serves anything."""
        reply = await link.hello(timeout)
        self._admitted(link, reply)
        self._heard(reply)
        await self._not_older(link, reply)
        units = [(u.epoch, u.seq) for u in reply.in_doubt]
        self.decisions.settled(reply.name, set(units))
        # Presumed abort only where the log would hold a commit: a unit of an epoch it
        # did not begin stays in doubt (its locks held) and the backend unavailable.
        unknown = [k for k in units if not self.decisions.covers(k)]
        units = [k for k in units if self.decisions.covers(k)]
        if not units and not unknown:
            return reply
        if units:
            outcomes = [pb.Outcome(unit=pb.UnitId(epoch=e, seq=s),
                                   commit=await self.decisions.outcome((e, s)))
                        for e, s in units]
            try:
                reply = await link.stub.Resolve(pb.Outcomes(outcomes=outcomes),
                                                timeout=self.timeout, metadata=link.metadata)
            except grpc.aio.AioRpcError as e:
                raise link.unavailable(f"resolving its in-doubt units: {e.details()}") from None
            still = {(u.epoch, u.seq) for u in reply.in_doubt}   # e.g. its disk is full
            for o in outcomes:
                metrics.IN_DOUBT_RESOLVED.labels("commit" if o.commit else "abort",
                                                 link.name).inc()
                if o.commit and (o.unit.epoch, o.unit.seq) not in still:
                    self.decisions.forgotten((o.unit.epoch, o.unit.seq), link.name)
            log.info("backend %s: %d in-doubt units resolved (%d committed)", link.name,
                     len(outcomes), sum(o.commit for o in outcomes))
        if unknown:
            raise BackendUnavailable(self.decisions.outside(link.name, unknown))
        if reply.in_doubt:
            raise link.unavailable(f"{len(reply.in_doubt)} units still in doubt")
        return reply

    def _heard(self, reply: pb.HelloReply) -> None:
        """The decision log learns how far the backend has carried out commits (it tells
        a log restored from an older copy); the list is checked for its bounds first."""
        for listed in (reply.committed, reply.carried):
            if len(listed) > COMMITTED_RUNS or any(
                    not 0 < len(u.epoch) <= MAX_EPOCH for u in listed):
                raise BackendUnavailable(
                    f"backend {shorten(reply.name)} lists {len(listed)} epochs it "
                    f"committed in (at most {COMMITTED_RUNS}), or one empty or longer than "
                    f"{MAX_EPOCH} characters")
        self.decisions.heard(reply.name, [(u.epoch, u.seq) for u in reply.committed])

    async def _not_older(self, link: BackendLink, reply: pb.HelloReply) -> None:
        """Refuse a backend that holds less than it told it carried out (`carried.py`);
        one that holds no data of the cluster (admitted as new) starts anew."""
        if not reply.cluster:
            await self.decisions.let_go(link.name)
            return
        why = self.decisions.carried.older(link.name, [(u.epoch, u.seq) for u in reply.carried])
        if why:
            raise BackendUnavailable(f"backend {link.name} ({link.address}): {why}")

    def _admitted(self, link: BackendLink, reply: pb.HelloReply) -> None:
        """Refuse a backend of another cluster, or one serving another controller's bus;
        else name this cluster and epoch in every call to it from now on."""
        if not self.members.cluster:    # a join before `start` settled it: none to name
            raise BackendUnavailable("the controller is starting: it has not yet met "
                                     "its backends")
        self.members.check(f"{link.name} ({link.address})", reply.cluster)
        self.members.check_kept(link.name, link.address, reply.cluster)
        if reply.cluster:
            self.members.serving(link.name)
        self._one_controller(link, reply)
        link.metadata = ((CLUSTER_KEY, self.members.cluster), (EPOCH_KEY, self.bus.epoch))

    async def _buses_taken(self, links: list[BackendLink]) -> None:
        """Wait until each of `links` serves this controller's bus, holding the cluster's
        id. Two controllers started at once can both pass the hello, before either has a
        bus open; a backend takes one bus only, and the controller it refused must not
        start as if it served."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        for link in links:
            while True:
                reply = await link.hello(self.connect_timeout)
                self._one_controller(link, reply)
                if reply.bus_epoch == self.bus.epoch and reply.cluster:
                    self.members.serving(link.name)
                    break
                if not link.up:          # refused: the bus's error says why
                    raise link.unavailable()
                if loop.time() > deadline:
                    raise link.unavailable("its bus did not open")
                await asyncio.sleep(0.01)

    def _one_controller(self, link: BackendLink, reply: pb.HelloReply) -> None:
        """Refuse a backend that serves another controller's bus."""
        if reply.bus_epoch and reply.bus_epoch != self.bus.epoch:
            raise BackendUnavailable(
                f"backend {link.name} ({link.address}) serves the bus of another controller "
                f"(epoch {shorten(reply.bus_epoch, 40)}): a cluster has one controller at a "
                "time; stop that one first")

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
