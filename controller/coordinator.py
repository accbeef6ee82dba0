"""The controller's core: REQP → IIG → broadcast on the bus → PP, for each traffic unit.

The controller keeps no files of its own. At start it reads every backend's
directory, takes their union as the authoritative one (ids only ever come
from IIG, so copies can only lag, never disagree) and brings any lagging
backend up to date. Placement state is rebuilt from the backends' per-cluster
record counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import AsyncIterator

from controller import pp
from controller.iig import Defined, Iig
from controller.links import BackendLink
from controller.reqp import OPS, Prepared, PreparedInsert, Reqp, check_value
from mbds import metrics
from mbds.directory import Directory
from mbds.errors import BackendUnavailable, DefinitionError, SemanticError
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from mbds.traffic import predicate_count
from mbds.values import Value, from_pb, to_pb

log = logging.getLogger("mbds.controller")


def natural_key(name: str) -> list[object]:
    """b2 before b10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


class Coordinator:
    def __init__(self, addresses: list[str], *, iig_address: str = "",
                 internal_timing: bool = True, timeout: float = 60.0,
                 connect_timeout: float = 10.0, metrics_url: str = "",
                 split_search_from: int = 1) -> None:
        # Split descriptor search over the backends only for traffic units with at
        # least this many predicates (1: always, the paper's design).
        self.split_search_from = split_search_from
        self.metrics_url = metrics_url
        self.epoch = uuid.uuid4().hex[:12]
        self.links = [BackendLink(a) for a in addresses]
        self.directory = Directory()
        self.iig = Iig(self.directory)
        self.reqp = Reqp(self.directory)
        self.iig_address = iig_address
        self.internal_timing = internal_timing
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.seq = 0
        self._connecting = asyncio.Lock()
        # Directory entries IIG allocated that no traffic unit has carried yet.
        self.unsent = pb.DirectoryUpdate()
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()       # cleared while the set of backends changes
        self._open.set()

    # ------------------------------------------------------------ joining --
    async def start(self) -> None:
        """Meet every backend, reconcile directories, rebuild placement, open the buses."""
        await self._join(self.links)

    async def _join(self, links: list[BackendLink]) -> None:
        """Admit backends: read their directories and placement counts, order the set
        by name, bring every directory up to date, and (re)open every bus."""
        replies = await asyncio.gather(*(self._directory_of(link) for link in links))
        if len({r.name for r in replies}) != len(replies):
            raise BackendUnavailable(f"two backends share a name: "
                                     f"{sorted(r.name for r in replies)}")
        for reply in replies:
            # A known backend at a new address (a re-created container): same data,
            # same identity; the new link replaces the old one.
            old = next((x for x in self.links if x.name == reply.name and x not in links),
                       None)
            if old is not None:
                self.links.remove(old)
                await old.close()
        for reply in replies:
            self.directory.apply(reply.directory)
            for c in reply.counts:
                per = self.iig.counts.setdefault(c.cluster_id, {})
                per[reply.name] = c.records
            self.iig.totals[reply.name] = sum(c.records for c in reply.counts)
        self.iig.resync()
        self.links = sorted({*self.links, *links}, key=lambda x: natural_key(x.name))
        for i, link in enumerate(self.links):
            link.index = i
        for link in self.links:
            digest = next((r.directory_digest for r in replies if r.name == link.name), None)
            if digest is None:
                digest = (await link.hello(self.connect_timeout)).directory_digest
            await self._sync(link, digest)
            link.open_bus(self._bus_hello(link))

    async def add_backends(self, addresses: list[str]) -> None:
        """A backend joined (e.g. `--scale backend=4`): admit it between traffic units."""
        new = [BackendLink(a) for a in addresses
               if a not in {x.address for x in self.links}]
        if not new:
            return
        async with self._membership():
            await self._join(new)
        log.info("backends now: %s", ", ".join(f"{x.name}@{x.address}" for x in self.links))
        log.info("controller joined %d backends: %s", len(self.links),
                 ", ".join(f"{x.name}@{x.address}" for x in self.links))

    async def _directory_of(self, link: BackendLink) -> pb.DirectoryReply:
        await link.hello(self.connect_timeout)
        try:
            return await link.stub.Directory(pb.DirectoryRequest(), timeout=self.timeout)
        except Exception as e:
            raise link.unavailable(str(e)) from None

    async def _sync(self, link: BackendLink, digest: str) -> None:
        if digest != self.directory.digest():
            await link.stub.ApplyDirectory(self.directory.to_update(), timeout=self.timeout)

    def _bus_hello(self, link: BackendLink) -> pb.BusHello:
        return pb.BusHello(epoch=self.epoch, backend_index=link.index,
                           peers=[x.address for x in self.links],
                           internal_timing=self.internal_timing, iig_address=self.iig_address,
                           credit_window=pp.WINDOW)

    async def ensure_up(self) -> None:
        """Reconnect any backend whose bus broke; refuse work while one is unreachable."""
        if all(link.up for link in self.links):
            return
        async with self._connecting:
            for link in self.links:
                if link.up:
                    continue
                reply = await link.hello(min(2.0, self.connect_timeout))
                await self._sync(link, reply.directory_digest)
                link.open_bus(self._bus_hello(link))
                log.info("backend %s rejoined", link.name)

    # ------------------------------------------------------- traffic units --
    def _broadcast(self, build: dict[int, pb.TrafficUnit], inbox: pp.Inbox) -> None:
        """Give the traffic unit a place in the total order and put it on every bus;
        PP's inbox is registered first, so no reply can come before it is there."""
        down = [link for link in self.links if not link.up]
        if down:
            raise down[0].unavailable()
        self.seq += 1
        inbox.register(self.seq)
        for link in self.links:
            tu = build[link.index]
            tu.seq = self.seq
            link.send(pb.BusMessage(traffic_unit=tu))

    def _place_inserts(self, prepared: list[Prepared], update: pb.DirectoryUpdate,
                       tus: dict[int, pb.TrafficUnit]) -> list[int]:
        """IIG: clusters and backends for every inserted record; the clusters per request."""
        clusters_per_request = []
        names = [link.name for link in self.links]
        for i, p in enumerate(prepared):
            clusters: set[int] = set()
            for ins in p.inserts:
                schema = self.directory.files[ins.file]
                dvals = [ins.file] + [ins.values[schema.index[a]]
                                      for a in schema.directory_attributes[1:]]
                with metrics.handler("IIG", "place"):
                    cid = self.iig.cluster_of(ins.file, dvals, update)
                    b = self.iig.choose_backend(cid, names)
                clusters.add(cid)
                rec = tus[b].requests[i].records.add(cluster_id=cid)
                for v in ins.values:
                    to_pb(v, rec.values.add())
                if ins.body is not None:
                    rec.body = ins.body
            for b in tus:
                tus[b].requests[i].record_count = len(p.inserts)
            clusters_per_request.append(len(clusters))
        return clusters_per_request

    @contextlib.asynccontextmanager
    async def _membership(self) -> AsyncIterator[None]:
        """Hold new traffic units and wait for running ones: the bus is reconfigured."""
        self._open.clear()
        try:
            await self._idle.wait()
            yield
        finally:
            self._open.set()

    async def run(self, prepared: list[Prepared], transaction: bool,
                  update: pb.DirectoryUpdate | None = None,
                  timeout: float | None = None) -> AsyncIterator[pb.ExecuteReplies]:
        await self._open.wait()
        self._inflight += 1
        self._idle.clear()
        try:
            async for reply in self._run(prepared, transaction, update, timeout):
                yield reply
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    async def _run(self, prepared: list[Prepared], transaction: bool,
                   update: pb.DirectoryUpdate | None,
                   timeout: float | None) -> AsyncIterator[pb.ExecuteReplies]:
        await self.ensure_up()
        if update is not None:
            self.unsent.MergeFrom(update)
        update = self.unsent
        tus = {link.index: pb.TrafficUnit(transaction=transaction) for link in self.links}
        for p in prepared:
            for tu in tus.values():
                tu.requests.append(p.request)
        insert_clusters = self._place_inserts(prepared, update, tus)
        m = predicate_count(p.request for p in prepared)
        for tu in tus.values():
            tu.directory.CopyFrom(update)
            tu.predicate_count = m
            tu.split_search = m >= self.split_search_from
        timeout = timeout or self.timeout
        inbox = pp.Inbox(list(self.links), asyncio.get_running_loop().time() + timeout, timeout,
                         len(prepared))
        self._broadcast(tus, inbox)
        self.unsent = pb.DirectoryUpdate()
        async for reply in pp.gather(inbox, prepared, insert_clusters):
            yield reply

    async def execute(self, text: str, timeout: float | None = None
                      ) -> AsyncIterator[pb.ExecuteReplies]:
        with metrics.handler("REQP", "request"):
            prepared, transaction = self.reqp.prepare(text)
        async for reply in self.run(prepared, transaction, timeout=timeout):
            yield reply

    async def load(self, chunk: pb.LoadRequest) -> AsyncIterator[pb.ExecuteReplies]:
        """Bulk INSERT: one traffic unit per chunk, checked like ABDL inserts."""
        with metrics.handler("REQP", "load"):
            p = self._prepare_load(chunk)
        async for reply in self.run([p], transaction=False):
            yield reply

    def _prepare_load(self, chunk: pb.LoadRequest) -> Prepared:
        schema = self.directory.files.get(chunk.file.upper())
        if schema is None:
            raise SemanticError(f"unknown file {chunk.file.upper()}")
        names = [a.upper() for a in chunk.attributes]
        for a in names:
            if a not in schema.by_name:
                raise SemanticError(f"unknown attribute {a} in file {schema.name}")
        inserts = []
        for r, row in enumerate(chunk.records):
            if len(row.values) != len(names):
                raise SemanticError(f"record {r}: {len(row.values)} values for "
                                    f"{len(names)} attributes")
            values: list[Value] = [None] * len(schema.attributes)
            for a, v in zip(names, row.values, strict=True):
                value = from_pb(v)
                if value is not None:
                    values[schema.index[a]] = check_value(schema.by_name[a], value, None,
                                                          schema.name)
            inserts.append(PreparedInsert(schema.name, values,
                                          row.body if row.HasField("body") else None))
        return Prepared("INSERT", pb.Request(op=OPS["INSERT"], file=schema.name),
                        inserts=inserts)

    async def define(self, text: str) -> Defined:
        schemas = parse_definition(text)
        await self.ensure_up()
        out = self.iig.define(schemas)
        if out.created or out.reindexed:
            # In bus order, like any traffic unit: requests sent after the definition see
            # the new files (and indexes) on every backend.
            async for _ in self.run([], transaction=False, update=out.update):
                pass
        return out

    async def place(self, file: str, values: list[Value], asker: str = "") -> pb.PlaceReply:
        """IIG for a record an UPDATE moved: its cluster, allocated centrally if new."""
        if file not in self.directory.files:
            raise DefinitionError(f"unknown file {file}")
        update = pb.DirectoryUpdate()
        cid = self.iig.cluster_of(file, values, update)
        if update.descriptors or update.clusters:
            # Every backend learns of the new cluster before the mover writes into it.
            await asyncio.gather(*(link.stub.ApplyDirectory(update, timeout=self.timeout)
                                   for link in self.links if link.up and link.name != asker),
                                 return_exceptions=True)
        return pb.PlaceReply(cluster_id=cid, directory=self.iig.cluster_definition(cid))

    async def status(self) -> pb.StatusReply:
        out = pb.StatusReply(expected_backends=len(self.links), files=sorted(
            self.directory.files), directory_digest=self.directory.digest(),
            metrics_url=self.metrics_url, internal_timing=self.internal_timing)
        for link in self.links:
            out.backends.add(name=link.name, address=link.address, reachable=link.up,
                             error=link.error, metrics_url=link.metrics_url)
        return out

    async def close(self) -> None:
        for link in self.links:
            await link.close()

