"""A unit after a move, on two backends in process, finds every moved record although a
peer's share of its descriptor search was made before the move's new value reached it.

An UPDATE of a type-C directory attribute to a value never seen before has IIG make the
value's descriptor while the UPDATE runs, and IIG's new entries reach the backends
outside bus order: pushed to the others (ApplyDirectory) and given to the backend that
asked in its Place reply. A later unit R, already on the bus, may thus be searched on
one backend before the value reached it and on another after: stage 2 must not plan
from the peer's share as it was sent, or R would look for the moved records only where
they were.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from backend.links import IigClient
from backend.node import BackendNode
from backend.state import BusOut
from backend.store import Store
from controller.iig import Iig
from controller.reqp import Reqp, same_unit
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from mbds.values import Value
from tests.inproc import KeptPeers

YAML = """
files:
  F:
    attributes: {G: string, ID: integer}
    directory:
      G: {type: C}
"""
EPOCH = "e"
PEERS = ["127.0.0.1:1", "127.0.0.1:2"]
MOVE = "UPDATE (FILE = F) <G = v1>"


class _Iig(IigClient):
    """IIG as a backend reaches it, answering as the controller does (`Coordinator.place`):
    new entries are pushed to the other backends before the asker gets its reply. The
    asker's call goes to IIG once `gate` is open."""

    def __init__(self, name: str, iig: Iig, others: list[BackendNode]) -> None:
        super().__init__(name)
        self.iig = iig
        self.others = others
        self.gate = asyncio.Event()
        self.gate.set()

    async def place(self, file: str, values: list[Value]) -> pb.PlaceReply:
        await self.gate.wait()
        cid, update = self.iig.place_moved(file, values)
        if update.descriptors or update.clusters:
            for node in self.others:
                await node.apply_directory(update)
        return pb.PlaceReply(cluster_id=cid, directory=self.iig.cluster_definition(cid))


class _Bus:
    """One backend's bus, PP's side: the replies read so far."""

    def __init__(self, node: BackendNode) -> None:
        self.out = BusOut(EPOCH)
        self.got: list[pb.BackendReply] = []
        node.on_hello(pb.BusHello(epoch=EPOCH, backend_index=int(node.name[1:]),
                                  peers=PEERS), self.out)

    async def until(self, seq: int, kind: str) -> None:
        """Read replies until unit `seq` has sent one of `kind` (an error fails)."""
        while not any(m.seq == seq and m.WhichOneof("body") == kind for m in self.got):
            for msg in await asyncio.wait_for(self.out.queue.take(), 10):
                assert msg is not None
                assert not msg.error, msg.error
                self.got.append(msg)

    def rows(self, seq: int) -> list[list]:
        return [row for m in self.got if m.seq == seq and m.WhichOneof("body") == "rows"
                for row in json.loads(m.rows.rows_json)]


class _Cluster:
    """Two backends in process, b0 and b1, and the controller's IIG and REQP; PP's part
    (sending units, moving ids between the peers, deciding) is the test's."""

    def __init__(self, tmp_path: Path) -> None:
        self.iig = Iig(Directory())
        self.iig.define(parse_definition(YAML))
        self.reqp = Reqp(self.iig.directory)
        self.nodes = [BackendNode(f"b{i}", Store(tmp_path / f"b{i}.db"), peers=KeptPeers(),
                                  iig=IigClient(f"b{i}")) for i in range(len(PEERS))]
        for node in self.nodes:
            node.execution.iig = _Iig(node.name, self.iig,
                                      [n for n in self.nodes if n is not node])

    async def start(self) -> None:
        """Every backend with F, and a record of F with G = v0 on each (unit 1): IIG
        places record i on backend i."""
        await asyncio.sleep(0)            # the stage-2 loops start
        for node in self.nodes:
            await node.apply_directory(self.iig.directory.to_update())
        self.buses = [_Bus(node) for node in self.nodes]
        prepared = self.reqp.prepare("[" + "; ".join(
            f"INSERT (<FILE, F>, <G, v0>, <ID, {i}>)" for i in range(len(PEERS))) + "]")[0]
        units, _ = self.iig.place_unit(prepared, True, [n.name for n in self.nodes],
                                       pb.DirectoryUpdate(), 1)
        for i in range(len(PEERS)):
            units[i].seq = 1
            await self.send(i, units[i])
        await self.decide(1)

    async def send(self, i: int, tu: pb.TrafficUnit) -> None:
        """Backend i takes `tu` off its bus (through stage 1)."""
        await self.nodes[i].on_traffic_unit(tu, self.buses[i].out)

    async def decide(self, seq: int) -> None:
        """Every backend prepared unit `seq`: PP commits it."""
        for bus in self.buses:
            await bus.until(seq, "prepared")
        for node, bus in zip(self.nodes, self.buses, strict=True):
            node.on_commit(seq)
            await bus.until(seq, "forgotten")

    def unit(self, text: str, seq: int) -> pb.TrafficUnit:
        """The unit REQP forms for `text`, the same for every backend."""
        tu = pb.TrafficUnit.FromString(same_unit(self.reqp.prepare(text)[0], False,
                                                 len(PEERS), 1))
        tu.seq = seq
        return tu

    def ids(self, i: int, seq: int) -> list[pb.DescriptorIds]:
        """The descriptor ids backend i has sent its peers for unit `seq`."""
        peers = self.nodes[i].exchange.peers
        return [m for m in peers.sent if m.seq == seq]   # type: ignore[attr-defined]

    def deliver(self, i: int, seq: int) -> None:
        """Backend i's ids for unit `seq` reach its peers."""
        for msg in self.ids(i, seq):
            for node in self.nodes:
                if node is not self.nodes[i]:
                    node.on_peer_ids(msg)

    def knows_v1(self, i: int) -> bool:
        return any(d.value == "v1" for d in self.nodes[i].directory.descriptors.values())

    def stop(self) -> None:
        for node in self.nodes:
            node.writer.shutdown()


def test_a_read_searched_while_a_move_runs_here_finds_what_its_peer_searched_too_early(
        tmp_path: Path) -> None:
    """R's share (G = v1) is b1's. b1 takes the move M and R off its bus and searches its
    share before v1 exists (M waits there for b0's ids). b0 runs M, asks IIG for v1 (b1
    learns it by the push, b0 by the reply), moves its record there and is prepared;
    then it takes R, v1 known. b1's ids for (G = v1) are empty, and b0 must still plan R
    with v1's cluster: each backend returns its own record."""
    async def scenario() -> None:
        c = _Cluster(tmp_path)
        await c.start()
        move, read = c.unit(MOVE, 2), c.unit("RETRIEVE (G = v0) or (G = v1) (ID, G)", 3)
        await c.send(1, move)
        await c.send(1, read)
        [stale] = c.ids(1, 3)
        assert not c.knows_v1(1) and [
            (p.predicate_index, list(p.descriptor_ids)) for p in stale.results] == [(1, [])]
        await c.send(0, move)
        await c.buses[0].until(2, "prepared")
        assert c.knows_v1(0) and c.knows_v1(1)
        await c.send(0, read)
        for i, seq in ((0, 2), (0, 3), (1, 3)):
            c.deliver(i, seq)
        await c.decide(2)
        for bus in c.buses:
            await bus.until(3, "committed")
        assert [bus.rows(3) for bus in c.buses] == [[[0, "v1"]], [[1, "v1"]]]
        c.stop()

    asyncio.run(scenario())


def test_a_read_searched_before_a_move_starts_here_finds_what_its_peer_searched_too_early(
        tmp_path: Path) -> None:
    """R's share (G = v1) is b0's. b0 takes M and R off its bus; M waits there for IIG, so
    b0 searches its share of R before v1 exists. Then IIG makes v1 (pushed to b1 before
    b0's reply) and b0 is prepared. b1 takes M, which waits for b0's ids, and R: it
    searches its share with v1 known and before M started there. M then moves b1's
    record into v1's cluster, already known, so b1's directory does not change; b0's
    ids for (G = v1) are empty, and b1 must still plan R with v1's cluster."""
    async def scenario() -> None:
        c = _Cluster(tmp_path)
        await c.start()
        move, read = c.unit(MOVE, 2), c.unit("RETRIEVE (G = v1) or (G = v0) (ID, G)", 3)
        gate = c.nodes[0].execution.iig.gate      # type: ignore[attr-defined]
        gate.clear()
        await c.send(0, move)
        await c.send(0, read)
        [stale] = c.ids(0, 3)
        assert not c.knows_v1(0) and [
            (p.predicate_index, list(p.descriptor_ids)) for p in stale.results] == [(0, [])]
        await c.send(1, move)
        gate.set()
        await c.buses[0].until(2, "prepared")
        assert c.knows_v1(1)
        await c.send(1, read)
        assert c.nodes[1].tus[(EPOCH, 2)].task is None      # M not yet started on b1
        for i, seq in ((0, 2), (0, 3), (1, 3)):
            c.deliver(i, seq)
        await c.decide(2)
        for bus in c.buses:
            await bus.until(3, "committed")
        assert [bus.rows(3) for bus in c.buses] == [[[0, "v1"]], [[1, "v1"]]]
        c.stop()

    asyncio.run(scenario())
