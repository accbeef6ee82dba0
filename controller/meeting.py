"""Meeting a backend: what the controller checks of it each time it joins or rejoins,
before it serves a unit (`Membership` decides when).

Its Hello is checked: it belongs to this cluster and serves no other controller's bus
(`_admitted`), how far it carried out commits is bounded and told to the decision log
(`heard`), and it holds at least what it told it carried out (`_not_older`); its
in-doubt units are resolved (presumed abort where the log covers them); its directory is
read whole, part by part (`directory_of`).
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from controller.bus import BackendLink, Bus
from controller.decisions import Decisions
from controller.members import Members
from mbds import metrics
from mbds.directory import Directory
from mbds.errors import BackendUnavailable, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.service import CLUSTER_KEY, COMMITTED_RUNS, EPOCH_KEY, MAX_EPOCH

log = logging.getLogger("mbds.controller")

# Reads of a backend's directory before the controller gives up on one that keeps
# changing between its parts.
DIRECTORY_READS = 3


def _position(p: pb.DirectoryPosition) -> tuple[int, str, int]:
    return (p.section, p.after_file, p.after_id)


class Meeting:
    def __init__(self, bus: Bus, decisions: Decisions, members: Members, *,
                 timeout: float, connect_timeout: float) -> None:
        self.bus = bus
        self.decisions = decisions
        self.members = members
        self.timeout = timeout
        self.connect_timeout = connect_timeout

    @staticmethod
    async def gone(old: BackendLink, new: BackendLink) -> None:
        """Refuse `new` if the backend of the same name still answers at its old address."""
        try:
            reply = await old.stub.Hello(pb.HelloRequest(), timeout=1.0)
        except grpc.aio.AioRpcError:
            return
        if reply.name == old.name:
            raise BackendUnavailable(
                f"two backends named {shorten(old.name)} answer, at {old.address} and at "
                f"{new.address}: each data dir serves as one backend; stop one of them")

    async def directory_of(self, link: BackendLink) -> list[pb.DirectoryReply]:
        """The backend's directory, read part by part (each a message of a few MiB): the
        parts of one read have one name and one digest, each starts where the one before
        it said the next would, and the positions only advance. A directory that changed
        between parts (another digest) is read again from the start."""
        await self.hello(link, self.connect_timeout)
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

    @staticmethod
    def whole(link: BackendLink, parts: list[pb.DirectoryReply]) -> None:
        """The parts make the directory the backend's digest names: a part cut at the
        wrong place would leave entries out, and IIG would give their ids again."""
        copy = Directory()
        try:
            for part in parts:
                copy.apply(part.directory)
            whole = copy.digest() == parts[0].directory_digest
        except Exception:       # entries that do not fit (checked before this is asked)
            return
        if not whole:
            raise link.unavailable(f"its directory, read in {len(parts)} parts, is not "
                                   "the one its digest names")

    async def hello(self, link: BackendLink, timeout: float) -> pb.HelloReply:
        """Hello, and the backend's in-doubt units resolved before it serves anything."""
        reply = await link.hello(timeout)
        self._admitted(link, reply)
        self.heard(reply)
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

    def heard(self, reply: pb.HelloReply) -> None:
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
        self.one_controller(link, reply)
        link.metadata = ((CLUSTER_KEY, self.members.cluster), (EPOCH_KEY, self.bus.epoch))

    async def buses_taken(self, links: list[BackendLink]) -> None:
        """Wait until each of `links` serves this controller's bus, holding the cluster's
        id. Two controllers started at once can both pass the hello, before either has a
        bus open; a backend takes one bus only, and the controller it refused must not
        start as if it served."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        for link in links:
            while True:
                reply = await link.hello(self.connect_timeout)
                self.one_controller(link, reply)
                if reply.bus_epoch == self.bus.epoch and reply.cluster:
                    self.members.serving(link.name)
                    break
                if not link.up:          # refused: the bus's error says why
                    raise link.unavailable()
                if loop.time() > deadline:
                    raise link.unavailable("its bus did not open")
                await asyncio.sleep(0.01)

    def one_controller(self, link: BackendLink, reply: pb.HelloReply) -> None:
        """Refuse a backend that serves another controller's bus."""
        if reply.bus_epoch and reply.bus_epoch != self.bus.epoch:
            raise BackendUnavailable(
                f"backend {link.name} ({link.address}) serves the bus of another controller "
                f"(epoch {shorten(reply.bus_epoch, 40)}): a cluster has one controller at a "
                "time; stop that one first")
