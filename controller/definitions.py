"""Definitions, all or nothing: a definition's files exist on every backend or on none.

A definition travels as a traffic unit (files, no requests) in bus order, so requests
sent after it find its files on every backend. Each backend stores the files in its
writer thread and votes; the controller adopts the definition — puts it in its own
directory, which REQP, IIG and `status` read — only once every backend has voted,
sends each one Commit, and answers once each has kept it. Any failure before (a
backend that could not store the files, a broken bus, the deadline, the client going
away) aborts the unit everywhere: each backend that stored the files takes them back,
on disk in one writer job and in its directory, before it answers, and the client is
told which backend failed and why. The decision to commit is written to the decision
log before any Commit goes down, as a write's is: a backend that stops before it keeps
the files finds them marked pending at its next start, and the controller's answer to
it (commit only if the log holds the definition) keeps them or takes them back.
"""

from __future__ import annotations

import asyncio
import logging

from controller.bus import BackendFailure, Bus
from controller.inbox import Inbox, Link
from mbds.descriptors import Descriptor
from mbds.directory import Directory
from mbds.errors import TrafficUnitAborted
from mbds.proto import mbds_pb2 as pb

log = logging.getLogger("mbds.controller")


async def define_everywhere(bus: Bus, directory: Directory, update: pb.DirectoryUpdate,
                            timeout: float, made: dict[int, Descriptor] | None = None
                            ) -> None:
    """Store `update`'s files on every backend, then adopt it into `directory` (`made`:
    its descriptors as IIG made them, by id)."""
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
        # Once decided it is carried out whatever happens to the caller.
        try:
            told = await asyncio.shield(asyncio.ensure_future(
                _commit(inbox, directory, update, made)))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            await inbox.abort_and_wait(f"no commit decision: {e}")
            raise TrafficUnitAborted(
                f"definition not applied (no backend keeps it): no commit decision: {e}"
            ) from None
        # Answered once every backend has kept it, so a controller that stops after
        # the answer loses nothing. A backend lost meanwhile keeps the files when it
        # returns (the log holds the decision), or gets them from the controller's
        # directory when it rejoins.
        try:
            while told:
                link, _ = await inbox.take(told, inbox.end)
                told.discard(link)
                assert inbox.decisions is not None
                inbox.decisions.forgotten(inbox.key, link.name)
        except BackendFailure as f:
            log.warning("definition adopted; %s will have it when it rejoins: %s",
                        f.link.name, f.error)
    finally:
        inbox.unregister()


async def _commit(inbox: Inbox, directory: Directory, update: pb.DirectoryUpdate,
                  made: dict[int, Descriptor] | None) -> set[Link]:
    """The decision on disk, then the definition adopted and Commit sent to each backend
    whose bus is open (one that is not resolves it when it returns). Returns those told.
    No decision (the log failed, or a backend asked about the unit first): aborted."""
    assert inbox.decisions is not None
    try:
        await inbox.decisions.commit(inbox.key, [link.name for link in inbox.links])
    except Exception as e:
        inbox.abort(f"no commit decision: {e}")     # also when the caller is gone
        raise
    directory.apply(update, made)
    told = {link for link in inbox.links if link.up}
    for link in told:
        link.send(pb.BusMessage(commit=pb.Commit(seq=inbox.seq)))
    return told
