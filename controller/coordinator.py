"""The controller's sequencing: REQP → IIG → bus → PP for each traffic unit.

A client's request is checked (REQP), its inserts placed (IIG), the unit put on the bus
with every directory entry IIG allocated that no unit has carried yet, and answered
(PP). Units run between changes of the set of backends (`membership.py`); one whose
client stops reading is aborted after the stalled-reader bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path

from controller import admission, definitions, load, pp
from controller.bus import BackendLink, Bus, Inbox
from controller.decisions import Decisions
from controller.describe import describe
from controller.iig import Defined, Iig
from controller.members import Members
from controller.membership import Membership
from controller.reqp import Prepared, Reqp, same_unit
from mbds import doors, metrics
from mbds.directory import Directory, changes
from mbds.errors import BackendUnavailable, PermissionDenied
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from mbds.values import Value

# What a read-only client may ask for: nothing that changes data.
READ_OPS = frozenset({"RETRIEVE", "RETRIEVE_COMMON"})

log = logging.getLogger("mbds.controller")

# Seconds a client may leave a reply of its answer untaken before its traffic unit is
# aborted (its locks released): the controller's --stalled-reader.
STALLED_READER = 5.0
# Seconds `mbds status` waits for backends whose bus broke to be reconnected (a client's
# Status call gives up after 10).
STATUS_WAITS = 4.0


class Coordinator:
    """Each traffic unit from REQP through IIG and the bus to PP, over the backends
    that `Membership` admits."""

    def __init__(self, addresses: list[str], *, iig_address: str = "",
                 internal_timing: bool = True, timeout: float = 60.0,
                 connect_timeout: float = 10.0, metrics_url: str = "",
                 split_search_from: int = 1, log_path: Path | None = None,
                 synchronous: str = "NORMAL", stalled_reader: float = STALLED_READER
                 ) -> None:
        # Split descriptor search over the backends only for traffic units with at
        # least this many predicates (1: always, the paper's design).
        self.split_search_from = split_search_from
        self.metrics_url = metrics_url
        self.decisions = Decisions(log_path, synchronous)
        self.bus = Bus(addresses, internal_timing=internal_timing, iig_address=iig_address,
                       decisions=self.decisions)
        self.directory = Directory()
        self.iig = Iig(self.directory)
        self.reqp = Reqp(self.directory)
        self.membership = Membership(
            self.bus, self.directory, self.iig, self.decisions, timeout=timeout,
            connect_timeout=connect_timeout,
            members=Members(None if log_path is None else log_path.parent))
        self.internal_timing = internal_timing
        self.timeout = timeout
        self.stalled_reader = stalled_reader
        self._defining = asyncio.Lock()
        self.admission = admission.Admission()
        self.started = False             # it has met its backends (`start`)
        # Directory entries IIG allocated that no traffic unit has carried yet.
        self.unsent = pb.DirectoryUpdate()

    @property
    def links(self) -> list[BackendLink]:
        """The backends, in bus order."""
        return self.membership.links

    # --------------------------------------------- membership (membership.py) --
    async def start(self) -> None:
        """Meet every backend, reconcile directories, rebuild placement, open the buses."""
        await self.membership.start()
        self.started = True

    def _serving(self) -> None:
        """Until it has met its backends the controller knows no file: a request then is
        told to come back (UNAVAILABLE), not that its file does not exist."""
        if not self.started:
            raise BackendUnavailable("the controller is starting: it is meeting its "
                                     "backends and reading their directories")

    async def add_backends(self, addresses: list[str]) -> None:
        """A backend joined (e.g. `--scale backend=4`): admit it between traffic units."""
        await self.membership.add_backends(addresses)

    async def ensure_up(self) -> None:
        """Reconnect any backend whose bus broke; refuse work while one is unreachable."""
        await self.membership.ensure_up()

    # ------------------------------------------------------- traffic units --
    async def run(self, prepared: list[Prepared], transaction: bool,
                  update: pb.DirectoryUpdate | None = None,
                  timeout: float | None = None, arrived: float | None = None
                  ) -> AsyncGenerator[pb.ExecuteReplies, None]:
        """One traffic unit: IIG places the inserts, the bus carries the unit (with every
        directory entry not yet sent), PP answers; one generator, not a stack of them.
        `arrived`: when its request came (`time.perf_counter`), where its response time
        starts."""
        await self.membership.enter()
        try:
            await self.membership.ensure_up()
            if update is not None:
                self.unsent.MergeFrom(update)
            names = [x.name for x in self.links]
            units: dict[int, pb.TrafficUnit] = {}
            inbox: Inbox | None = None
            loop = asyncio.get_running_loop()
            try:
                inbox, units, insert_clusters = self._broadcast(prepared, transaction, names,
                                                                timeout or self.timeout)
                async for reply in pp.gather(inbox, prepared, insert_clusters, arrived):
                    timer = loop.call_later(self.stalled_reader, self._stalled, inbox)
                    try:
                        yield reply
                    finally:
                        timer.cancel()
            except BaseException:      # refused, aborted, or its client went away
                # IIG takes back the records no backend stored: a unit committed whose
                # client left before its answer keeps its place.
                if inbox is None:
                    self.iig.unplace(names, units)
                else:
                    placed = units
                    inbox.when_stored(lambda stored: self.iig.unplace(
                        names, {b: tu for b, tu in placed.items() if b not in stored}))
                raise
        finally:
            self.membership.leave()

    def _broadcast(self, prepared: list[Prepared], transaction: bool, names: list[str],
                   timeout: float) -> tuple[Inbox, dict[int, pb.TrafficUnit], list[int]]:
        """Put the unit on the bus with every directory entry not yet sent. One that places
        no records is the same for every backend, formed once (REQP's `same_unit`); one
        with inserts carries to each backend the records IIG placed there."""
        if prepared and all(p.op != "INSERT" for p in prepared):
            body = same_unit(prepared, transaction, len(self.links), self.split_search_from)
            directory = self.unsent.SerializeToString()
            inbox = self.bus.broadcast_same(body, directory, timeout, len(prepared))
            if directory:
                self.unsent = pb.DirectoryUpdate()
            return inbox, {}, []
        update = self.unsent
        before = (len(update.descriptors), len(update.clusters))
        units: dict[int, pb.TrafficUnit] = {}
        try:
            units, insert_clusters = self.iig.place_unit(prepared, transaction, names, update,
                                                         self.split_search_from)
            units = self._one_phase(units, update)
            inbox = self.bus.broadcast(units, timeout, len(prepared))
        except BaseException:      # refused: nothing was sent
            self.iig.unplace(names, units)
            self._retract(update, *before)
            raise
        if len(units) == len(self.links):
            self.unsent = pb.DirectoryUpdate()
        return inbox, units, insert_clusters

    def _retract(self, update: pb.DirectoryUpdate, descriptors: int, clusters: int) -> None:
        """Take back the directory entries IIG allocated for a unit refused before it was
        sent (those `update` gained past the counts it had before)."""
        new = pb.DirectoryUpdate(descriptors=update.descriptors[descriptors:],
                                 clusters=update.clusters[clusters:])
        if new.descriptors or new.clusters:
            self.directory.retract(new)
            del update.descriptors[descriptors:]
            del update.clusters[clusters:]

    def _stalled(self, inbox: Inbox) -> None:
        """A client that took no reply within the stalled-reader bound would hold its
        unit's locks (and, for a transaction that also writes, the backends' writer
        threads) until the unit's deadline: the unit is aborted everywhere instead, and the
        client, reading on, finds that error after the replies already sent. A unit
        already over is not affected (the abort finds nothing to roll back)."""
        log.info("traffic unit %d: its client took no reply for %g s; aborting it",
                 inbox.seq, self.stalled_reader)
        inbox.abort(f"the client did not read its answer within {self.stalled_reader:g} s"
                    " (the controller's --stalled-reader bound)")

    def _one_phase(self, units: dict[int, pb.TrafficUnit], update: pb.DirectoryUpdate
                   ) -> dict[int, pb.TrafficUnit]:
        """Units that at most one backend can write commit in one phase. With one
        backend, any unit; an INSERT whose records IIG placed on one backend, carrying
        no directory entries, goes to that backend alone (the others have nothing to
        do with it). Every other writing unit is two-phase."""
        if len(units) == 1:
            for tu in units.values():
                tu.one_phase = True
            return units
        first = next(iter(units.values()))
        if not first.requests or any(r.op != pb.INSERT for r in first.requests) or \
                changes(update):
            return units
        writers = [i for i, tu in units.items()
                   if any(r.records or r.load_columns for r in tu.requests)]
        if len(writers) != 1:
            return units
        units[writers[0]].one_phase = True
        return {writers[0]: units[writers[0]]}

    def execute(self, text: str, timeout: float | None = None
                ) -> AsyncIterator[pb.ExecuteReplies]:
        """A client's request: prepared (and refused, raising) at the call, run as its
        answer is read."""
        arrived = time.perf_counter()    # the response time counts REQP and any wait too
        self._serving()
        with metrics.handler("REQP", "request"):
            timeout = self.reqp.timeout(timeout)
            prepared, transaction = self.reqp.prepare(text)
        if doors.ACCESS.get() == doors.READ:
            if writes := sorted({p.op for p in prepared} - READ_OPS):
                raise PermissionDenied(f"a read-only token may only retrieve; this request "
                                       f"would {', '.join(writes)}")
        if len(text) >= admission.LARGE:
            return self._admitted(len(text), self.run(prepared, transaction, timeout=timeout,
                                                      arrived=arrived))
        return self.run(prepared, transaction, timeout=timeout, arrived=arrived)

    async def _admitted(self, size: int, answer: AsyncGenerator[pb.ExecuteReplies, None]
                        ) -> AsyncIterator[pb.ExecuteReplies]:
        """A large request's answer, once there is room for it (`admission.py`)."""
        async with contextlib.aclosing(answer):      # closed (its unit ended) here
            taken = await self.admission.enter(size)
            try:
                async for reply in answer:
                    yield reply
            finally:
                self.admission.leave(taken)

    def check_load(self, chunk: pb.LoadRequest, first: int = 1) -> Prepared:
        """A bulk-load chunk checked like ABDL inserts (a columnar chunk per column,
        `controller/load.py`); a chunk of rows names its records from `first`."""
        self._serving()
        with metrics.handler("REQP", "load"):
            return (load.prepare(self.directory, chunk) if chunk.HasField("columns")
                    else self.reqp.prepare_load(chunk, first))

    async def load(self, p: Prepared) -> AsyncIterator[pb.ExecuteReplies]:
        """Bulk INSERT: one traffic unit per checked chunk."""
        async for reply in self.run([p], transaction=False):
            yield reply

    def load_stream(self, chunks: AsyncIterator[pb.LoadRequest]
                    ) -> AsyncIterator[pb.ExecuteReplies]:
        """A client's Load call: its chunks' traffic units, several in flight."""
        return load.pipelined(chunks, self.check_load, self.load)

    async def define(self, text: str) -> Defined:
        self._serving()
        # A large definition takes seconds of CPU to read (docs/abdl.md): read in a thread,
        # so that other clients are answered meanwhile.
        schemas = await asyncio.to_thread(parse_definition, text)
        async with self._defining:       # one at a time: IIG sees only adopted files
            await self.membership.ensure_up()
            out = self.iig.definition(schemas)
            if out.created or out.reindexed:
                # Adopted only once every backend has stored it (definitions.py).
                await self.membership.enter()
                try:
                    await definitions.define_everywhere(self.bus, self.directory,
                                                        out.update, self.timeout, out.made)
                finally:
                    self.membership.leave()
        return out

    async def place(self, file: str, values: list[Value], asker: str = "") -> pb.PlaceReply:
        """IIG for a record an UPDATE moved: its cluster, allocated centrally if new."""
        cid, update = self.iig.place_moved(file, values)
        if update.descriptors or update.clusters:
            # Every backend learns of the new cluster before the mover writes into it;
            # the next traffic unit carries the entries too, in bus order, to any backend
            # the push missed (down, or failing it): applying them again changes nothing.
            self.unsent.MergeFrom(update)
            await self.bus.push_directory(update, self.timeout, skip=asker)
        return pb.PlaceReply(cluster_id=cid, directory=self.iig.cluster_definition(cid))

    async def status(self, file: str = "") -> pb.StatusReply:
        self._serving()
        # A backend that came back since its bus broke is reported up (and rejoined) on
        # an idle cluster too, not only once a request has reconnected it. The answer
        # waits a few seconds at most: with many backends down, the tries go on alone.
        trying = asyncio.ensure_future(self.membership.ensure_up())
        trying.add_done_callback(lambda t: t.cancelled() or t.exception())
        with contextlib.suppress(BackendUnavailable, TimeoutError):
            await asyncio.wait_for(asyncio.shield(trying), STATUS_WAITS)
        out = pb.StatusReply(files=sorted(
            self.directory.files), directory_digest=self.directory.digest(),
            metrics_url=self.metrics_url, internal_timing=self.internal_timing,
            cluster=self.membership.members.cluster)
        for link in self.links:
            out.backends.add(name=link.name, address=link.address, reachable=link.up,
                             error=link.error, metrics_url=link.metrics_url)
        describe(out, self.directory, file)
        return out

    async def close(self) -> None:
        await self.bus.close()
        await self.decisions.close()
