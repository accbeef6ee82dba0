"""What the node and the execution share: a traffic unit's state on this backend, the
bus it answers on, the bus's configuration, and the handler timers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from backend.plan import DescriptorResults
from backend.plancache import Shape
from mbds import metrics
from mbds.mailbox import Mailbox
from mbds.proto import mbds_pb2 as pb

# Times one message handler, named "process.name" (e.g. "cc.cluster_lock").
Timer = Callable[[str], AbstractContextManager[object]]


def handler_timer(backend: str) -> Timer:
    """The handler timer of this backend; timers do not nest, so a process's handlers
    add up to its time."""
    names: dict[str, tuple[str, str]] = {}

    timing = metrics.TIMING

    def timer(handler: str) -> AbstractContextManager[object]:
        if not timing.on:
            return metrics.NOOP
        split = names.get(handler)
        if split is None:
            process, name = handler.split(".")
            split = names[handler] = (process.upper(), name)
        return metrics.handler(*split, backend)
    return timer


class Cancelled(Exception):
    """The traffic unit was aborted (by PP, or because nobody collects its results)."""


class BusOut:
    """The backend's side of one bus: replies queued for the stream back to PP."""

    def __init__(self, epoch: str = "") -> None:
        self.queue: Mailbox[pb.BackendReply | None] = Mailbox()   # None ends the stream
        self.window = 8
        self.epoch = epoch       # of the controller that opened it (`backend/owner.py`)
        self.cluster = ""        # this backend's, once the bus is taken

    def send(self, msg: pb.BackendReply) -> None:
        self.queue.put(msg)


@dataclass
class BusConfig:
    """The bus's configuration, from the controller's BusHello."""
    epoch: str = ""
    index: int = 0                  # this backend's place among the peers
    peers: list[str] = field(default_factory=list)
    iig_address: str = ""
    cluster: str = ""               # named in the calls to the peers and to IIG


@dataclass(eq=False)
class TuState:
    """One traffic unit on this backend, from its first message to its last reply."""
    key: tuple[str, int] = ("", 0)
    tu: pb.TrafficUnit | None = None
    bus: BusOut | None = None          # the bus it came on: where its results go
    credits: int = 0                   # row batches it may still send ahead of PP
    credit_ready: asyncio.Event = field(default_factory=asyncio.Event)
    # The descriptor-id exchange (`exchange.py`): whether this backend sends ids for the
    # unit, whose it waits for, those that came, and stage 2's wait for them.
    sends: bool = False
    awaited: frozenset[int] = frozenset()
    peer_ids: dict[int, list[pb.PredicateDescriptors]] = field(default_factory=dict)
    peers_in: asyncio.Future[None] | None = None
    bad_ids: str = ""                  # why ids that came for it are not its senders'
    early_bytes: int = 0               # of the ids kept before the unit itself came
    config: BusConfig | None = None    # the bus's, when its share was worked out
    found: DescriptorResults = field(default_factory=dict)
    searched: int = -1                 # the directory's generation at descriptor search
    movers_mark: int = -1              # `Movers.mark` of its files at descriptor search
    shape: Shape | None = None         # its requests' checks and plans (`plancache.py`)
    cancelled: str = ""
    # The writer's job storing the latest directory update not yet stored when this
    # unit came (tables and indexes of a definition, its own or one out of band).
    # Stage 1 must not wait for it (the writer may be holding a prepared unit whose
    # commit comes later on the bus); a read waits before it reads, so it never meets
    # a file whose table (or index) is not there yet.
    stored: asyncio.Future[None] | None = None
    task: asyncio.Task[None] | None = None
    writing: bool = False              # its writes are with the writer thread
    # Its write requests' (operation, records), counted as processed once it commits.
    written: list[tuple[str, int]] = field(default_factory=list)
    released: bool = False             # its cluster locks are released
    # Prepared here: PP's decision (True: commit) comes by bus or by Resolve.
    decision: asyncio.Future[bool] | None = None
    expiry: asyncio.TimerHandle | None = None   # forgets it if its traffic unit never comes

