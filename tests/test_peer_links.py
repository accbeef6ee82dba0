"""A backend's descriptor-id links follow the bus hello: a peer no longer named (a
backend gone, or at a new address), or named for another cluster, has its link closed,
so nothing keeps trying to reach it and nothing queued for it holds a stop's flush."""

from __future__ import annotations

import asyncio

from backend.links import PeerLinks
from mbds.proto import mbds_pb2 as pb
from mbds.service import CLUSTER_KEY

ME, GONE, OTHER = "127.0.0.1:9", "127.0.0.1:1", "127.0.0.1:2"   # nothing answers there


async def _closed(link) -> bool:
    for _ in range(500):
        if link.task.done():
            return True
        await asyncio.sleep(0.01)
    return False


def test_a_peer_no_longer_named_has_its_link_closed_and_its_queue_dropped() -> None:
    async def run() -> None:
        links = PeerLinks()
        links.configure([ME, GONE], 0, "c1")
        gone = links.links[GONE]
        links.broadcast(pb.DescriptorIds(seq=1))     # queued: nothing answers at GONE
        assert not links.flushed()
        links.configure([ME], 0, "c1")               # GONE left the bus
        assert links.links == {} and links.targets == []
        assert links.flushed()
        assert await _closed(gone)
        await links.close()

    asyncio.run(run())


def test_a_peer_named_for_another_cluster_gets_a_new_link() -> None:
    async def run() -> None:
        links = PeerLinks()
        links.configure([OTHER, ME], 1, "c1")
        first = links.links[OTHER]
        links.configure([OTHER, ME], 1, "c1")         # the same hello again: kept
        assert links.links[OTHER] is first
        links.configure([OTHER, ME], 1, "c2")
        second = links.links[OTHER]
        assert second is not first and second.metadata == ((CLUSTER_KEY, "c2"),)
        assert await _closed(first)
        await links.close()

    asyncio.run(run())
