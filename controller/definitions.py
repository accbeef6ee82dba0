"""Definitions, all or nothing: a definition's files exist on every backend or on none.

A definition travels as a traffic unit (files, no requests) in bus order, so requests
sent after it find its files on every backend. Each backend stores the files in its
writer thread and votes; the controller adopts the definition — puts it in its own
directory, which REQP, IIG and `status` read — only once every backend has voted,
sends each one Commit, and answers once each has kept it. Any failure before (a
backend that could not store the files, a broken bus, the deadline, the client going
away) aborts the unit everywhere: each backend that stored the files takes them back,
on disk in one writer job and in its directory, before it answers, and the client is
told which backend failed and why.
"""

from __future__ import annotations

import logging

from controller.bus import BackendFailure, Bus
from mbds.directory import Directory
from mbds.errors import TrafficUnitAborted
from mbds.proto import mbds_pb2 as pb

log = logging.getLogger("mbds.controller")


async def define_everywhere(bus: Bus, directory: Directory, update: pb.DirectoryUpdate,
                            timeout: float) -> None:
    """Store `update`'s files on every backend, then adopt it into `directory`."""
    inbox = bus.broadcast({link.index: pb.TrafficUnit(directory=update)
                           for link in bus.links}, timeout, 0)
    try:
        try:
            await inbox.expect_all("prepared")
        except BackendFailure as f:
            await inbox.abort_and_wait(str(f.error))
            raise TrafficUnitAborted(
                f"definition not applied (no backend keeps it): {f.error}") from None
        except BaseException:      # cancelled: nothing is adopted, nothing kept
            inbox.abort("the definition was cancelled")
            raise
        directory.apply(update)
        told = {link for link in inbox.links if link.up}
        for link in told:
            link.send(pb.BusMessage(commit=pb.Commit(seq=inbox.seq)))
        # Answered once every backend has kept it, so a controller that stops after
        # the answer loses nothing. A backend lost meanwhile gets the files from the
        # controller's directory when it rejoins.
        try:
            while told:
                link, _ = await inbox.take(told, inbox.end)
                told.discard(link)
        except BackendFailure as f:
            log.warning("definition adopted; %s will have it when it rejoins: %s",
                        f.link.name, f.error)
    finally:
        inbox.unregister()
