"""A backend's own work per traffic unit, without its gRPC messages.

`mbds bench fixed-cost --alone`: one backend's data is loaded through a real cluster
(the paper's database, scale 1), the cluster stops, and a `BackendNode` on the same
SQLite file runs the request's traffic unit here, handed to it directly as its bus
reader would, one unit after another: DM's two stages, CC, RECP and SQLite, the
metrics, the event loop's turns between them (on the loop the services run on,
`mbds/eventloop.py`). This process's CPU time per unit is the
part of a backend's figure that is not messages; unlike the whole cluster's figures,
it does not depend on how four processes share the machine's cores.

    python3 -m loadgen.backend_alone DATA_DIR UNITS [--request N]

runs it on a stopped backend's directory that is already loaded; under
`valgrind --tool=cachegrind` (run on the interpreter itself, `sys.executable`, not on
a launcher script), the difference of two runs' instruction counts over
their difference in UNITS is a figure that does not move with the machine's load
(docs/profile.md).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from backend.links import IigClient, PeerLinks
from backend.node import BackendNode
from backend.state import BusOut
from backend.store import Store
from controller.reqp import Reqp
from loadgen import paper_db as P
from loadgen.common import local_cluster_procs
from mbds import eventloop
from mbds.client import Client
from mbds.proto import mbds_pb2 as pb


async def _run(data_dir: Path, text: str, units: int, warmup: int) -> float:
    store = Store(data_dir / "backend.db")
    node = BackendNode(store.identity(data_dir.name), store, peers=PeerLinks(),
                       iig=IigClient(data_dir.name))
    bus = BusOut("alone")
    # One backend of one: its descriptor search is the whole search, nothing exchanged.
    node.on_hello(pb.BusHello(epoch="alone", backend_index=0, peers=["alone"],
                              credit_window=8), bus)
    prepared, _ = Reqp(node.directory).prepare(text)
    # What the controller sends a lone backend: a write commits in one phase.
    template = pb.TrafficUnit(requests=[p.request for p in prepared], one_phase=True)
    wire = template.SerializeToString()

    async def one(seq: int) -> None:
        tu = pb.TrafficUnit.FromString(wire)     # a fresh message, as the bus parses one
        tu.seq = seq + 1                         # a bus numbers its units from 1
        await node.on_traffic_unit(tu, bus)
        while True:
            for msg in await bus.queue.take():
                if msg is not None and msg.error:
                    raise RuntimeError(msg.error)
                if msg is not None and (msg.committed or msg.forgotten):
                    return

    try:
        for seq in range(warmup):
            await one(seq)
        t0 = time.process_time()
        for seq in range(warmup, warmup + units):
            await one(seq)
        return (time.process_time() - t0) * 1000 / units
    finally:
        node.writer.shutdown()
        store.close()


def measure(text: str, units: int, warmup: int) -> dict[str, Any]:
    """CPU ms per unit of one backend's own work on `text` (the paper's data, scale 1)."""
    with local_cluster_procs(1) as cluster:
        with Client(cluster.address) as client:
            P.load(client, 1)
        cluster.stop()          # the file is this process's alone from here
        cpu = eventloop.run(_run(cluster.data_dir / "b0", text, units, warmup))
    return {"alone": True, "units": units, "backend_cpu_ms": cpu}


@click.command()
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("units", type=click.IntRange(1))
@click.option("--request", "which", type=click.IntRange(1, len(P.REQUESTS)), default=1,
              show_default=True, help="The paper's request to run (scale 1).")
@click.option("--warmup", type=click.IntRange(0), default=100, show_default=True)
def main(data_dir: Path, units: int, which: int, warmup: int) -> None:
    """Run a request's traffic unit UNITS times on the backend files in DATA_DIR (one
    backend's directory, its process stopped) and print the CPU ms per unit."""
    text = P.REQUESTS[which - 1].abdl(1)
    click.echo(f"{eventloop.run(_run(data_dir, text, units, warmup)):.4f}")


if __name__ == "__main__":
    main()
