"""The controller checks what the backends send it, as they check what it sends them: a
reply out of its backend's order or beyond its credit fails its unit at once, naming the
backend (instead of stalling it to its deadline, or filling the controller's memory); a
backend's directory is checked before any of it is adopted (at start and at scale-up);
and another backend answering at a known backend's address is refused."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
import pytest

from controller.coordinator import Coordinator
from controller.inbox import GRANT, BackendFailure, Inbox
from controller.reply_order import WINDOW
from mbds.client import ClientError, collect
from mbds.cluster import Proc
from mbds.directory import Directory
from mbds.entries import EntryCheck, EntryError
from mbds.errors import BackendUnavailable, TrafficUnitAborted
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import CLUSTER_KEY, EPOCH_KEY
from mbds.values import to_pb
from tests.conftest import CENSUS_YAML
from tests.inproc import census_iig

COUNT = "RETRIEVE (FILE = Census) (COUNT(CITY))"
SUMMED = "RETRIEVE (FILE = Census) (SUM(POP))"
CITIES = "RETRIEVE (FILE = Census) (CITY)"


# ------------------------------------------------------------ the inbox, in-process --
class FakeLink:
    """A backend's bus as the inbox sees it, recording what goes down."""

    def __init__(self, name: str, index: int) -> None:
        self.name, self.address, self.index = name, f"10.0.0.{index}:50051", index
        self.error = ""
        self.broke = False
        self.pending: dict[int, Inbox] = {}
        self.sent: list[pb.BusMessage] = []

    @property
    def up(self) -> bool:
        return True

    def send(self, msg: pb.BusMessage) -> None:
        self.sent.append(msg)

    def unavailable(self, detail: str | None = None) -> Exception:
        return BackendUnavailable(f"backend {self.name} is unreachable: {detail}")


def rows(i: int) -> pb.BackendReply:
    return pb.BackendReply(request_index=i, rows=pb.RowBatch(rows_json=b"[[1]]", count=1))


def done(i: int) -> pb.BackendReply:
    return pb.BackendReply(request_index=i, done=pb.RequestDone())


def groups(i: int) -> pb.BackendReply:
    return pb.BackendReply(request_index=i, groups=pb.PartialGroups(
        groups=[pb.PartialGroup(records=1)]))


COMMITTED = pb.BackendReply(committed=True)
PREPARED = pb.BackendReply(prepared=True)


def inbox_of(links: list[FakeLink], requests: int) -> Inbox:
    # A deadline far away: a unit that fails, fails at once, not at its deadline.
    return Inbox(links, 1, asyncio.get_running_loop().time() + 60, 60, requests)


async def gather(inbox: Inbox) -> list[tuple[str, str | None]]:
    """Every reply as PP takes them: request by request from every backend, then the
    unit's end."""
    got = []
    for stage in range(inbox.end + 1):
        waiting = set(inbox.links)
        while waiting:
            link, msg = await inbox.take(waiting, stage)
            kind = msg.WhichOneof("body")
            got.append((link.name, kind))
            if kind in ("done", "committed"):
                waiting.discard(link)
            else:
                inbox.consumed_batch(link)
    return got


def test_replies_ahead_of_the_others_are_kept_for_their_turn() -> None:
    """b1 answers the whole unit before b0 answers anything: its later requests wait
    in the inbox for their turn, and nothing is refused."""
    async def run() -> list[tuple[str, str | None]]:
        b0, b1 = FakeLink("b0", 0), FakeLink("b1", 1)
        inbox = inbox_of([b0, b1], 2)
        for msg in (rows(0), done(0), rows(1), rows(1), done(1), COMMITTED):
            inbox.deliver(b1, msg)
        for msg in (rows(0), done(0), done(1), COMMITTED):
            inbox.deliver(b0, msg)
        async with asyncio.timeout(5):
            return await gather(inbox)

    got = asyncio.run(run())
    assert sorted(got) == sorted([("b1", "rows"), ("b1", "done"), ("b1", "rows"),
                                  ("b1", "rows"), ("b1", "done"), ("b1", "committed"),
                                  ("b0", "rows"), ("b0", "done"), ("b0", "done"),
                                  ("b0", "committed")])


def test_a_definition_votes_then_commits_and_a_vote_may_be_rolled_back() -> None:
    async def run() -> None:
        b0, b1 = FakeLink("b0", 0), FakeLink("b1", 1)
        inbox = inbox_of([b0, b1], 0)
        for link in (b0, b1):
            inbox.deliver(link, PREPARED)
        inbox.deliver(b0, COMMITTED)
        inbox.deliver(b1, pb.BackendReply(error="backend b1: traffic unit aborted"))
        async with asyncio.timeout(5):
            await inbox.expect_all("prepared")
            assert (await inbox.take({b0}, 0))[1].committed
            with pytest.raises(BackendFailure, match="traffic unit aborted"):
                await inbox.take({b1}, 0)

    asyncio.run(run())


def window_full() -> tuple[FakeLink, Inbox]:
    """A one-request unit's inbox and a backend that has sent WINDOW row batches of it."""
    b0 = FakeLink("b0", 0)
    inbox = inbox_of([b0], 1)
    for _ in range(WINDOW):
        inbox.deliver(b0, rows(0))
    return b0, inbox


async def consume(inbox: Inbox, link: FakeLink, batches: int) -> None:
    """PP takes `batches` row batches of `link`'s and is done with each."""
    for _ in range(batches):
        await inbox.take({link}, 0)
        inbox.consumed_batch(link)


def test_credit_returned_lets_a_backend_send_on() -> None:
    """WINDOW batches ahead, then as many more as PP returned credit for."""
    async def run() -> None:
        b0, inbox = window_full()
        async with asyncio.timeout(5):
            await consume(inbox, b0, WINDOW)
            assert sum(m.credit.batches for m in b0.sent) == WINDOW
            for _ in range(WINDOW):
                inbox.deliver(b0, rows(0))
            inbox.deliver(b0, done(0))
            inbox.deliver(b0, COMMITTED)
            for _ in range(WINDOW):
                assert (await inbox.take({b0}, 0))[1].HasField("rows")
            assert (await inbox.take({b0}, 0))[1].HasField("done")
            await inbox.expect_all("committed")

    asyncio.run(run())


STRAYS = {
    "a second done for request 0": [rows(0), done(0), done(0), COMMITTED],
    "rows for request 0 after its done": [done(0), rows(0), COMMITTED],
    "done for request 3, beyond the unit's last (1)": [done(3)],
    "rows for request 1 before the done of request 0": [rows(1)],
    "committed before the done of request 1": [done(0), COMMITTED],
    "a second prepared": [done(0), done(1), PREPARED, PREPARED],
    "done after its committed": [done(0), done(1), COMMITTED, done(1)],
    "a reply with no body": [pb.BackendReply()],
    "a reply with no body after its committed": [done(0), done(1), COMMITTED,
                                                 pb.BackendReply()],
    "a reply of unknown kind forgotten": [pb.BackendReply(forgotten=True)],
    f"{WINDOW + 1} row batches or groups with credit for {WINDOW}": [rows(0)] * (WINDOW + 1),
    f"{WINDOW + 1} row batches or groups with credit for {WINDOW} (groups)":
        [groups(0)] * (WINDOW + 1),
    "groups for request 1 before the done of request 0": [groups(1)],
    "groups for request 0 after its done": [groups(0), done(0), groups(0)],
    "rows for request 2, beyond the unit's last (1)": [rows(2)],
    "done for request 2, beyond the unit's last (1)": [done(0), done(1), done(2)],
}


@pytest.mark.parametrize("fault", list(STRAYS))
def test_a_reply_out_of_its_backends_order_fails_the_unit_at_once(fault: str) -> None:
    """b1 sends something it may not send next while PP waits for b0: the unit fails
    at once, naming b1 and what it sent (not at its deadline, naming b0)."""
    async def run() -> None:
        b0, b1 = FakeLink("b0", 0), FakeLink("b1", 1)
        inbox = inbox_of([b0, b1], 2)
        for msg in STRAYS[fault]:
            inbox.deliver(b1, msg)
        async with asyncio.timeout(5):
            with pytest.raises(BackendFailure) as err:
                await gather(inbox)
        assert err.value.link is b1
        assert str(err.value) == (f"traffic unit aborted: refused a reply from backend "
                                  f"b1 (10.0.0.1:50051): {fault.removesuffix(' (groups)')}")

    asyncio.run(run())


def test_replies_of_a_unit_with_no_requests_are_named_so() -> None:
    """A definition's unit has no requests: a backend's rows for one are refused."""
    async def run() -> None:
        b0 = FakeLink("b0", 0)
        inbox = inbox_of([b0], 0)
        inbox.deliver(b0, rows(0))
        async with asyncio.timeout(5):
            with pytest.raises(BackendFailure) as err:
                await inbox.expect_all("prepared")
        assert str(err.value).endswith("rows for request 0, but the unit has no requests")

    asyncio.run(run())


def test_a_backends_error_fails_the_unit_in_its_own_words_at_any_point() -> None:
    """An error may come at any point of a backend's replies: it is the unit's failure
    as the backend words it, not a reply refused; nothing it sends after is taken."""
    async def run() -> None:
        b0, b1 = FakeLink("b0", 0), FakeLink("b1", 1)
        inbox = inbox_of([b0, b1], 2)
        for msg in (rows(0), done(0), rows(1), pb.BackendReply(error="backend b1: full"),
                    done(1)):
            inbox.deliver(b1, msg)
        async with asyncio.timeout(5):
            with pytest.raises(BackendFailure) as err:
                await gather(inbox)
        assert err.value.link is b1 and str(err.value) == "backend b1: full"

    asyncio.run(run())


def test_the_credit_returned_is_named_when_a_backend_sends_past_it() -> None:
    """Past the credit PP returned, the refusal names the credit: WINDOW plus it."""
    async def run() -> None:
        b0, inbox = window_full()
        async with asyncio.timeout(5):
            await consume(inbox, b0, GRANT)
            for _ in range(GRANT + 1):
                inbox.deliver(b0, rows(0))
            with pytest.raises(BackendFailure) as err:
                while True:
                    await inbox.take({b0}, 0)
        assert str(err.value).endswith(f"{WINDOW + GRANT + 1} row batches or groups with "
                                       f"credit for {WINDOW + GRANT}")

    asyncio.run(run())


def test_a_refused_backend_is_heard_no_more_but_for_its_rollback() -> None:
    """Past its refusal a backend's batches are dropped (the controller's memory does
    not grow with them); its rollback still ends the abort's wait at once."""
    async def run() -> None:
        b0, b1 = FakeLink("b0", 0), FakeLink("b1", 1)
        inbox = inbox_of([b0, b1], 1)
        for _ in range(1000):
            inbox.deliver(b1, rows(0))
        assert len(inbox.queue.items) == WINDOW + 1       # the batches, then the refusal
        inbox.deliver(b1, pb.BackendReply(error="backend b1: traffic unit aborted"))
        inbox.deliver(b1, pb.BackendReply(error="backend b1: again"))
        inbox.deliver(b0, pb.BackendReply(error="backend b0: traffic unit aborted"))
        assert len(inbox.queue.items) == WINDOW + 3
        async with asyncio.timeout(5):
            with pytest.raises(BackendFailure, match="with credit for"):
                await gather(inbox)
            await inbox.abort_and_wait("refused")
        assert all(any(m.HasField("abort") for m in x.sent) for x in (b0, b1))

    asyncio.run(run())


# --------------------------------------------------- a backend's directory, in-process --
def census() -> Directory:
    return census_iig().directory


def test_a_backends_directory_as_iig_made_it_passes() -> None:
    d = census()
    EntryCheck(Directory()).check(d.to_update())     # at start
    EntryCheck(d).check(d.to_update())               # a copy that is up to date


def _descriptor(**kw: object) -> pb.Descriptor:
    values = {k: to_pb(kw.pop(k), pb.Value()) for k in ("low", "high", "value") if k in kw}
    return pb.Descriptor(**kw, **values)  # type: ignore[arg-type]


BAD_DIRECTORIES = {
    "descriptor 900: unknown file 'NOPE'": pb.DirectoryUpdate(descriptors=[_descriptor(
        id=900, file="NOPE", attr="X", kind="C", value="x")]),
    "descriptor 900: file CENSUS has no directory attribute 'AREA'": pb.DirectoryUpdate(
        descriptors=[_descriptor(id=900, file="CENSUS", attr="AREA", kind="C", value=1.0)]),
    "descriptor 900: kind 'B' on CENSUS.CITY, which takes C or N": pb.DirectoryUpdate(
        descriptors=[_descriptor(id=900, file="CENSUS", attr="CITY", kind="B", value="x")]),
    "descriptor 900: CITY is string, got integer 7": pb.DirectoryUpdate(
        descriptors=[_descriptor(id=900, file="CENSUS", attr="CITY", kind="C", value=7)]),
    "descriptor 900: not a type-A descriptor of CENSUS.POP (its low, high and value)":
        pb.DirectoryUpdate(descriptors=[_descriptor(id=900, file="CENSUS", attr="POP",
                                                    kind="A", low=9, high=1)]),
    "descriptor 1 differs from the one the directory holds": pb.DirectoryUpdate(
        descriptors=[_descriptor(id=1, file="CENSUS", attr="CITY", kind="C", value="x")]),
    "cluster 900: unknown file 'NOPE'": pb.DirectoryUpdate(clusters=[pb.Cluster(
        id=900, file="NOPE", descriptor_ids=[1])]),
    "cluster 900: 1 descriptors for the 4 directory attributes of CENSUS":
        pb.DirectoryUpdate(clusters=[pb.Cluster(id=900, file="CENSUS", descriptor_ids=[1])]),
    "cluster 900: 777 is not a descriptor of CENSUS.FILE": pb.DirectoryUpdate(clusters=[
        pb.Cluster(id=900, file="CENSUS", descriptor_ids=[777, 1, 1, 1])]),
    "cluster 900: 1 is not a descriptor of CENSUS.CITY": pb.DirectoryUpdate(clusters=[
        pb.Cluster(id=900, file="CENSUS", descriptor_ids=[1, 1, 1, 1])]),
    "file CENSUS differs from the one the directory holds": pb.DirectoryUpdate(files=[
        pb.FileDef(name="CENSUS", attributes=[pb.AttributeDef(name="CITY", type="integer")])]),
    "file 'census' is not a name a definition makes": pb.DirectoryUpdate(files=[
        pb.FileDef(name="census")]),
}


@pytest.mark.parametrize("fault", list(BAD_DIRECTORIES))
def test_a_backends_directory_that_no_iig_made_is_refused(fault: str) -> None:
    with pytest.raises(EntryError) as err:
        EntryCheck(census()).check(BAD_DIRECTORIES[fault])
    assert str(err.value) == fault


def test_two_backends_directories_that_disagree_are_refused() -> None:
    """At start the first directory is checked against none, the second against it."""
    joining = EntryCheck(Directory())
    joining.check(census().to_update())
    first, second = census().to_update().clusters[:2]
    with pytest.raises(EntryError, match=f"cluster {first.id} differs from the one"):
        joining.check(pb.DirectoryUpdate(clusters=[pb.Cluster(
            id=first.id, file=second.file, descriptor_ids=second.descriptor_ids)]))
    with pytest.raises(EntryError, match=f"cluster 900 has the descriptors of cluster "
                                           f"{first.id}$"):
        joining.check(pb.DirectoryUpdate(clusters=[pb.Cluster(
            id=900, file=first.file, descriptor_ids=first.descriptor_ids)]))


# ------------------------------------------------------------ through the real path --
class Tap(rpc.BackendServicer):
    """A backend's service passed through to a real backend, with what it says (or is
    told) changed on the way: a backend that does not follow the rules."""

    def __init__(self, target: str) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        self.stub = rpc.BackendStub(self.channel)
        self.replies: Callable[[list[pb.BackendReply]], list[pb.BackendReply]] = list
        self.down: Callable[[pb.BusMessage], pb.BusMessage] = lambda m: m
        self.directory: Callable[[pb.DirectoryReply], None] = lambda r: None

    async def Hello(self, request: pb.HelloRequest, context: object) -> pb.HelloReply:
        return await self.stub.Hello(request)

    async def Directory(self, request: pb.DirectoryRequest,
                        context: grpc.aio.ServicerContext) -> pb.DirectoryReply:
        reply = await self.stub.Directory(request, metadata=_named(context))
        self.directory(reply)
        return reply

    async def ApplyDirectory(self, request: pb.DirectoryUpdate,
                             context: grpc.aio.ServicerContext) -> pb.HelloReply:
        try:
            return await self.stub.ApplyDirectory(request, metadata=_named(context))
        except grpc.aio.AioRpcError as e:
            await context.abort(e.code(), e.details() or "")
            raise

    async def Bus(self, request_iterator: AsyncIterator[pb.BusBatch],
                  context: grpc.aio.ServicerContext) -> AsyncIterator[pb.BackendReplies]:
        async def down() -> AsyncIterator[pb.BusBatch]:
            async for batch in request_iterator:
                yield pb.BusBatch(messages=[self.down(m) for m in batch.messages])

        async for replies in self.stub.Bus(down(), metadata=_named(context)):
            yield pb.BackendReplies(replies=self.replies(list(replies.replies)))

    async def serve(self) -> tuple[grpc.aio.Server, str]:
        server = grpc.aio.server()
        rpc.add_BackendServicer_to_server(self, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, f"127.0.0.1:{port}"


def _named(context: grpc.aio.ServicerContext) -> tuple[tuple[str, str], ...]:
    """The cluster and epoch the controller named, passed on to the backend."""
    return tuple((k, v) for k, v in context.invocation_metadata() or ()
                 if k in (CLUSTER_KEY, EPOCH_KEY))


def backend(tmp_path: Path, name: str, listen: str = "127.0.0.1:0") -> Proc:
    return Proc(name, ["backend", "--listen", listen, "--data-dir", str(tmp_path / name)])


async def answer(c: Coordinator, text: str) -> list:
    return collect([r async for batch in c.execute(text) for r in batch.replies])


def run(scenario: Callable[[list[Proc]], Coroutine[Any, Any, None]]) -> None:
    """Run `scenario`, which starts backend processes into the list it is given; they are
    stopped after it, whatever happened."""
    procs: list[Proc] = []
    try:
        asyncio.run(scenario(procs))
    finally:
        for p in procs:
            p.stop()


@contextlib.asynccontextmanager
async def tapped(tmp_path: Path, procs: list[Proc], name: str = "b0"
                 ) -> AsyncIterator[tuple[Tap, str]]:
    """A backend process behind a tap, and the tap's address."""
    procs.append(backend(tmp_path, name))
    tap = Tap(procs[-1].wait_ready(30))
    server, address = await tap.serve()
    try:
        yield tap, address
    finally:
        await server.stop(0)


@contextlib.asynccontextmanager
async def controller(addresses: list[str], timeout: float = 60.0,
                     connect_timeout: float = 10) -> AsyncIterator[Coordinator]:
    """A controller of those backends, not started; closed after."""
    c = Coordinator(addresses, connect_timeout=connect_timeout, timeout=timeout)
    try:
        yield c
    finally:
        await c.close()


async def with_census(c: Coordinator) -> None:
    await c.start()
    await c.define(CENSUS_YAML)
    await answer(c, "[INSERT (<FILE, Census>, <CITY, a>, <POP, 1>); "
                    "INSERT (<FILE, Census>, <CITY, b>, <POP, 2>)]")


async def refused_then_served(c: Coordinator, tap: Tap, text: str, fault: str) -> None:
    """`text` fails, refusing b0's reply for `fault`; with the tap passing replies on as
    they are again, the next unit is answered as ever."""
    with pytest.raises(TrafficUnitAborted) as err:
        await answer(c, text)
    assert str(err.value) == (f"traffic unit aborted: refused a reply from backend "
                              f"b0 ({c.links[0].address}): {fault}")
    tap.replies = list
    [res] = await answer(c, COUNT)
    assert res.records == [{"COUNT(CITY)": 2}]


def second_done(replies: list[pb.BackendReply]) -> list[pb.BackendReply]:
    out = []
    for r in replies:
        out.append(r)
        if r.HasField("done"):
            out.append(r)
    return out


def done_beyond_the_last(replies: list[pb.BackendReply]) -> list[pb.BackendReply]:
    out = []
    for r in replies:
        if r.HasField("done"):
            stray = pb.BackendReply()
            stray.CopyFrom(r)
            stray.request_index = 3
            out.append(stray)
        out.append(r)
    return out


@pytest.mark.parametrize("doctor, fault", [
    (second_done, "a second done for request 0"),
    (done_beyond_the_last, "done for request 3, beyond the unit's last (0)"),
])
def test_a_stray_reply_fails_its_unit_at_once_naming_its_backend(
        tmp_path: Path, doctor: Callable[[list[pb.BackendReply]], list[pb.BackendReply]],
        fault: str) -> None:
    timeout = 5.0

    async def scenario(procs: list[Proc]) -> None:
        async with tapped(tmp_path, procs) as (tap, address), \
                controller([address], timeout) as c:
            await with_census(c)
            tap.replies = doctor
            t0 = time.monotonic()
            await refused_then_served(c, tap, COUNT, fault)
            assert time.monotonic() - t0 < timeout / 2, "it waited for its deadline"

    run(scenario)


def test_a_backend_sending_past_its_credit_fails_its_unit(tmp_path: Path) -> None:
    """The backend is told a window of a million batches (as if it ignored its own): it
    sends a unit's twenty batches at once while its client has taken one message, and
    the unit fails naming the credit, instead of the controller holding them all."""
    many = "[" + "; ".join([CITIES] * 20) + "]"

    def wide_window(m: pb.BusMessage) -> pb.BusMessage:
        if m.HasField("hello"):
            m.hello.credit_window = 1_000_000
        return m

    async def scenario(procs: list[Proc]) -> None:
        async with tapped(tmp_path, procs) as (tap, address), controller([address]) as c:
            tap.down = wide_window
            await with_census(c)
            replies = c.execute(many)
            first = await anext(replies)             # PP waits for this client now
            assert first.replies[0].header.op == "RETRIEVE"
            await asyncio.sleep(1)                   # the backend sends on meanwhile
            with pytest.raises(TrafficUnitAborted) as err:
                async for _ in replies:
                    pass
            assert "refused a reply from backend b0" in str(err.value)
            assert "row batches or groups with credit for" in str(err.value)

    run(scenario)


def reshaped(change: Callable[[pb.BackendReply], None]
             ) -> Callable[[list[pb.BackendReply]], list[pb.BackendReply]]:
    """A doctor changing each group or row batch a backend sends."""
    def doctor(replies: list[pb.BackendReply]) -> list[pb.BackendReply]:
        for r in replies:
            if r.HasField("groups") or r.HasField("rows"):
                change(r)
        return replies
    return doctor


def one_sum_short(r: pb.BackendReply) -> None:
    del r.groups.groups[0].sums[-1]


def string_sum(r: pb.BackendReply) -> None:
    r.groups.groups[0].sums[0].s = "lots"


def rows_not_group(r: pb.BackendReply) -> None:
    r.rows.CopyFrom(pb.RowBatch(rows_json=b"[[7]]", count=1))


def side(n: int, rows_json: bytes | None = None) -> Callable[[pb.BackendReply], None]:
    def change(r: pb.BackendReply) -> None:
        r.rows.side = n
        if rows_json is not None:
            r.rows.rows_json = rows_json
    return change


JOINED = "RETRIEVE (FILE = Census) (CITY) COMMON (CITY, CITY) RETRIEVE (FILE = Census) (POP)"
MISFITS = {
    "a partial group of 0 sums, 1 counts, 1 mins and 1 maxs for 1 aggregates":
        (COUNT, one_sum_short),
    "a partial group counting more than its 2 records":
        (COUNT, lambda r: r.groups.groups[0].counts.__setitem__(0, 3)),
    "a partial group whose sum is string 'lots'": (COUNT, string_sum),
    "a partial group whose sum is float inf":
        (COUNT, lambda r: setattr(r.groups.groups[0].sums[0], "f", float("inf"))),
    "a partial group of 2 low sums for 1 aggregates":
        (SUMMED, lambda r: r.groups.groups[0].sum_lows.add().CopyFrom(pb.Value(i=0))),
    "a partial group with a BY key for a request without BY":
        (COUNT, lambda r: setattr(r.groups.groups[0].key, "s", "k")),
    "rows for request 0, a RETRIEVE with aggregates": (COUNT, rows_not_group),
    "partial groups for request 0, which has no aggregates":
        (CITIES, lambda r: r.groups.CopyFrom(pb.PartialGroups(groups=[
            pb.PartialGroup(records=1)]))),
    "rows of side 2 of a COMMON": (JOINED, side(2)),
    "rows of side 0 of a COMMON that are not rows of 2 plain values ending with the join "
    "value": (JOINED, side(0, b'[[{"a": 1}, "b"]]')),       # a target no value is
    "rows of side 1 of a COMMON that are not rows of 2 plain values ending with the join "
    "value": (JOINED, side(1, b'[[1, 2, ["a"]]]')),         # too wide, a list to join on
    "rows of side 0 of a COMMON that are not JSON (Expecting value: line 1 column 2 "
    "(char 1))": (JOINED, side(0, b"[")),
}


@pytest.mark.parametrize("fault", list(MISFITS))
def test_results_that_do_not_fit_their_request_fail_the_unit_naming_the_backend(
        tmp_path: Path, fault: str) -> None:
    """PP merges a backend's groups and a COMMON's rows only when they fit the request:
    a group of the wrong shape or a sum that is no number, rows where groups are due, a
    COMMON's rows of another width fail the unit, naming the backend and the misfit,
    instead of an internal error or a wrong answer."""
    text, change = MISFITS[fault]

    async def scenario(procs: list[Proc]) -> None:
        async with tapped(tmp_path, procs) as (tap, address), controller([address]) as c:
            await with_census(c)
            tap.replies = reshaped(change)
            await refused_then_served(c, tap, text, fault)

    run(scenario)


def test_a_plain_retrieves_rows_that_do_not_fit_are_refused_where_they_are_read(
        tmp_path: Path) -> None:
    """PP passes a plain retrieve's row batches on undecoded: the client, which reads
    them, refuses rows of another width or not JSON with a clear error, not a ValueError
    from deep inside."""
    async def scenario(procs: list[Proc]) -> None:
        async with tapped(tmp_path, procs) as (tap, address), controller([address]) as c:
            await with_census(c)
            for rows_json, why in ((b'[["a", 1]]', "zip() argument 2 is longer"),
                                   (b"[[", "Expecting value")):
                tap.replies = reshaped(side(0, rows_json))
                with pytest.raises(ClientError) as err:
                    await answer(c, CITIES)
                assert err.value.code == "INTERNAL"
                assert str(err.value).startswith(
                    "rows of request 0 that are not JSON rows of its 1 columns: " + why)

    run(scenario)


def unknown_file(reply: pb.DirectoryReply) -> None:
    reply.directory.clusters.add(id=900, file="NOPE", descriptor_ids=[1])


def infinite_value(reply: pb.DirectoryReply) -> None:
    """A valid new file first (adopted, were the directory applied as it is read), then
    a descriptor with a value no backend would take."""
    reply.directory.files.add(name="EXTRA", attributes=[
        pb.AttributeDef(name="X", type="float", directory="C")])
    reply.directory.descriptors.extend([
        _descriptor(id=900, file="EXTRA", attr="FILE", kind="B", value="EXTRA"),
        _descriptor(id=901, file="EXTRA", attr="X", kind="C", value=float("inf"))])


def another_name(reply: pb.DirectoryReply) -> None:
    reply.name = "b7"


@pytest.mark.parametrize("doctor, fault", [
    (unknown_file, "cluster 900: unknown file 'NOPE'"),
    (infinite_value, "descriptor 901: inf is not a finite number"),
    (another_name, "it names backend 'b7'"),
])
def test_a_bad_directory_at_start_is_refused_naming_its_backend(
        tmp_path: Path, doctor: Callable[[pb.DirectoryReply], None], fault: str) -> None:
    async def scenario(procs: list[Proc]) -> None:
        async with tapped(tmp_path, procs) as (tap, address), controller([address]) as c:
            tap.directory = doctor
            with pytest.raises(BackendUnavailable) as err:
                await c.start()
            assert str(err.value) == (f"backend b0 ({address}): its directory is refused: "
                                      f"{fault}")
            assert c.directory.digest() == Directory().digest()    # nothing adopted

    run(scenario)


def test_a_bad_directory_at_scale_up_changes_nothing(tmp_path: Path) -> None:
    """The joining backend's directory is refused whole: the controller's directory and
    its set of backends stay as they were, and it serves on."""
    async def scenario(procs: list[Proc]) -> None:
        async with tapped(tmp_path, procs) as (_, address0), \
                tapped(tmp_path, procs, "b1") as (tap, address), \
                controller([address0]) as c:
            tap.directory = infinite_value
            await with_census(c)
            before = c.directory.digest()
            with pytest.raises(BackendUnavailable) as err:
                await c.add_backends([address])
            assert str(err.value) == (f"backend b1 ({address}): its directory is refused: "
                                      "descriptor 901: inf is not a finite number")
            assert c.directory.digest() == before
            assert "EXTRA" not in c.directory.files
            assert [x.name for x in c.links] == ["b0"]
            [res] = await answer(c, COUNT)
            assert res.records == [{"COUNT(CITY)": 2}]

    run(scenario)


def test_another_backend_at_a_known_backends_address_is_refused(tmp_path: Path) -> None:
    """b0 stops and b9 (other data, another name) comes up at its address: the controller
    refuses it, naming both, rather than taking it for b0; b0 back there is welcome."""
    async def until_answered(c: Coordinator) -> Exception | None:
        """None once COUNT is answered, or its error once the controller has met
        another backend at b0's address (its bus to b0 breaks meanwhile)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                await answer(c, COUNT)
                return None
            except (BackendUnavailable, TrafficUnitAborted) as e:
                if "answers at its address" in str(e) or time.monotonic() > deadline:
                    return e
            await asyncio.sleep(0.2)

    async def scenario(procs: list[Proc]) -> None:
        procs.append(backend(tmp_path, "b0"))
        address = procs[0].wait_ready(30)
        async with controller([address], timeout=10, connect_timeout=2) as c:
            await with_census(c)
            procs[0].stop()
            procs.append(backend(tmp_path, "b9", listen=address))
            procs[-1].wait_ready(30)
            err = await until_answered(c)
            assert str(err) == (f"backend b0 ({address}) is unreachable: backend 'b9' "
                                "answers at its address instead")
            assert [x.name for x in c.links] == ["b0"]
            procs[-1].stop()
            procs.append(backend(tmp_path, "b0", listen=address))
            procs[-1].wait_ready(30)
            assert await until_answered(c) is None
            [res] = await answer(c, COUNT)
            assert res.records == [{"COUNT(CITY)": 2}]

    run(scenario)


def test_backends_back_at_one_anothers_addresses_serve_the_first_request(
        tmp_path: Path) -> None:
    """b0 and b1 stop and come back each at the other's address (as containers restarted
    together may): the first request after follows them there and is served."""
    async def scenario(procs: list[Proc]) -> None:
        procs += [backend(tmp_path, "b0"), backend(tmp_path, "b1")]
        a0, a1 = (p.wait_ready(30) for p in procs)
        async with controller([a0, a1], timeout=10, connect_timeout=2) as c:
            await with_census(c)
            for p in procs:
                p.stop()
            deadline = time.monotonic() + 30
            while any(x.up for x in c.links):
                assert time.monotonic() < deadline, "the buses did not break"
                await asyncio.sleep(0.1)
            procs += [backend(tmp_path, "b0", listen=a1), backend(tmp_path, "b1", listen=a0)]
            for p in procs[-2:]:
                p.wait_ready(30)
            [res] = await answer(c, COUNT)
            assert res.records == [{"COUNT(CITY)": 2}]
            assert [(x.name, x.address) for x in c.links] == [("b0", a1), ("b1", a0)]

    run(scenario)


def test_an_abort_too_late_for_a_one_phase_writer_is_told() -> None:
    """A unit aborted (its deadline passed) while b0 writes it in one phase: when b0
    answers the abort with `committed` the client is told its writes are stored; with
    an error, nothing more; with no answer within the grace, that they may be stored. A
    `committed` from a backend of a two-phase unit (one that wrote nothing) says
    nothing of the unit."""
    async def outcome(last: pb.BackendReply | None, one_phase: bool) -> str:
        b0, b1 = FakeLink("b0", 0), FakeLink("b1", 1)
        inbox = inbox_of([b0, b1], 1)
        inbox.deadline = asyncio.get_running_loop().time()
        if one_phase:
            inbox.one_phase = frozenset([b0])
        inbox.deliver(b1, pb.BackendReply(error="b1: traffic unit aborted"))
        if last is not None:
            inbox.deliver(b0, done(0))
            inbox.deliver(b0, last)
        told = await inbox.abort_and_wait("deadline", grace=0.05)
        assert [m.WhichOneof("body") for m in b0.sent] == ["abort"]
        return told

    stored = asyncio.run(outcome(COMMITTED, True))
    assert stored == ("; but backend b0 had committed it in one phase before the abort "
                      "reached it: its writes are stored")
    assert asyncio.run(outcome(pb.BackendReply(error="b0: rolled back"), True)) == ""
    assert asyncio.run(outcome(None, True)) == (
        "; backend b0, which writes it in one phase, has not answered the abort: its "
        "writes may have been stored")
    assert asyncio.run(outcome(COMMITTED, False)) == ""
    assert asyncio.run(outcome(None, False)) == ""


def test_a_bus_breaking_after_its_last_reply_fails_a_unit_others_have_not_begun() -> None:
    """A backend that answers a unit and then dies may take its descriptor ids with it
    (they go to the peers on streams of their own, not with its replies): a backend
    that has sent nothing of the unit may be waiting for them in stage 2. The breaking
    of the bus fails the unit then and there, naming both, not at its deadline."""
    async def main() -> None:
        b0, b2 = FakeLink("b0", 0), FakeLink("b2", 2)
        b2.broke = True
        loop = asyncio.get_running_loop()
        inbox = Inbox([b0, b2], 1, loop.time() + 3600, 3600, 1)
        inbox.deliver(b2, done(0))
        inbox.deliver(b2, COMMITTED)
        inbox.deliver(b2, None)
        with pytest.raises(BackendFailure) as failed:
            async with asyncio.timeout(30):      # not the unit's deadline, an hour away
                link, _ = await inbox.take({b0, b2}, 0)      # b2's done
                assert link is b2
                await inbox.take({b0}, 0)
        assert failed.value.link is b2
        assert "before backend b0 had sent anything: they may be waiting for its " \
               "descriptor ids" in str(failed.value.error), failed.value.error
        inbox.unregister()
    asyncio.run(main())


@pytest.mark.parametrize("under_way, broke", [(True, True), (False, False)])
def test_a_bus_closing_after_its_last_reply_fails_nothing_it_cannot_hold_up(
        under_way: bool, broke: bool) -> None:
    """A backend that has sent part of its answer has every id it needed, whatever
    happens to another's bus once that one's answers are sent; and a bus that ends (its
    backend stopping once its answers and ids are out) fails nothing either."""
    async def main() -> None:
        b0, b2 = FakeLink("b0", 0), FakeLink("b2", 2)
        b2.broke = broke
        loop = asyncio.get_running_loop()
        inbox = Inbox([b0, b2], 1, loop.time() + 3600, 3600, 1)
        if under_way:
            inbox.deliver(b0, rows(0))
        inbox.deliver(b2, done(0))
        inbox.deliver(b2, COMMITTED)
        inbox.deliver(b2, None)
        inbox.deliver(b0, done(0))
        inbox.deliver(b0, COMMITTED)
        got = []
        waiting = {b0, b2}
        async with asyncio.timeout(30):
            while waiting:
                link, msg = await inbox.take(waiting, 0)
                got.append((link.name, msg.WhichOneof("body")))
                if msg.WhichOneof("body") == "done":
                    waiting.discard(link)
            await inbox.expect_all("committed")
        assert sorted(got) == [("b0", "done"), *[("b0", "rows")] * under_way, ("b2", "done")]
        inbox.unregister()
    asyncio.run(main())
