"""A client that stops reading its answer loses it: after the controller's stalled-reader
bound (5 s by default) its traffic unit is aborted everywhere and its locks released, so
the writers queued behind it, and everything else, go on; the client, if it reads on,
finds the error naming the bound. A real LocalCluster, over real gRPC."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from controller.coordinator import STALLED_READER
from mbds.client import ClientError
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import MAX_MESSAGE

DEFINITION = """
files:
  BIG:
    attributes: {K: integer, PAD: string}
    directory:
      K: {type: A, ranges: [[0, 999999]]}
  OTHER:
    attributes: {K: integer}
    directory:
      K: {type: A, ranges: [[0, 999999]]}
"""
RECORDS = 30_000
PAD = "x" * 1000            # ~30 MB of answer: far beyond every buffer on its way
SLACK = 6.0                 # seconds past the bound, on a shared two-core machine


def timed(fn, *args):
    t0 = time.monotonic()
    out = fn(*args)
    return out, time.monotonic() - t0


@pytest.mark.parametrize("stalled_text", [
    "RETRIEVE (FILE = BIG) (K, PAD)",
    # A transaction that also writes: its read waits for credit in the writer thread.
    "[INSERT (<FILE, BIG>, <K, 500000>, <PAD, t>); RETRIEVE (FILE = BIG) (K, PAD)]",
], ids=["read", "transaction"])
def test_a_client_that_stops_reading_loses_its_answer_and_blocks_no_one(
        cluster_factory, stalled_text: str) -> None:
    r = cluster_factory(2)
    r.client.define(DEFINITION)
    list(r.client.load("BIG", ["K", "PAD"], (([i, PAD], None) for i in range(RECORDS))))
    r.client.execute("INSERT (<FILE, OTHER>, <K, 1>)")

    # The stalled client: an Execute call whose replies it never reads.
    channel = grpc.insecure_channel(r.cluster.address, options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE)])
    stalled = rpc.ControllerStub(channel).Execute(pb.ExecuteRequest(text=stalled_text),
                                                  timeout=120)
    time.sleep(1.0)        # its unit holds its locks and its answer fills every buffer
    t_stall = time.monotonic()

    # A writer of the same file queues behind it (CC) and so, through the writers' bus
    # order (or the writer thread the transaction holds), would every later writer.
    update: dict[str, object] = {}

    def update_big() -> None:
        try:
            update["result"] = list(r.client.call(
                "UPDATE ((FILE = BIG) and (K = 7)) <PAD = 'y'>"))
        except ClientError as e:
            update["error"] = e
        update["at"] = time.monotonic() - t_stall
    writer = threading.Thread(target=update_big)
    writer.start()
    time.sleep(0.5)

    _, insert_s = timed(r.client.execute, "INSERT (<FILE, OTHER>, <K, 2>)")
    [count], count_s = timed(r.client.execute, "RETRIEVE (FILE = OTHER) (COUNT(K))")
    assert count.records == [{"COUNT(K)": 2}]
    assert insert_s < STALLED_READER + SLACK, insert_s
    assert count_s < SLACK, count_s

    writer.join(STALLED_READER + 2 * SLACK)
    assert not writer.is_alive(), "the UPDATE still waits for the stalled reader's locks"
    assert "error" not in update, update
    assert update["at"] < STALLED_READER + SLACK, update     # type: ignore[operator]

    # The stalled client reads on: what was on its way, then the error naming the bound.
    with pytest.raises(grpc.RpcError) as e:
        for _ in stalled:
            pass
    assert e.value.code() == grpc.StatusCode.ABORTED, e.value
    assert f"did not read its answer within {STALLED_READER:g} s" in (e.value.details() or "")
    channel.close()

    # Nothing of it is left (the transaction's insert neither): its file takes writers
    # and readers at once.
    _, again_s = timed(r.client.execute, "UPDATE ((FILE = BIG) and (K = 8)) <PAD = 'z'>")
    [big] = r.client.execute("RETRIEVE ((FILE = BIG) and (K < 10)) (COUNT(K))")
    assert big.records == [{"COUNT(K)": 10}]
    [inserted] = r.client.execute("RETRIEVE ((FILE = BIG) and (K = 500000)) (K)")
    assert inserted.records == []
    assert again_s < SLACK


def test_a_transaction_aborted_for_a_stalled_reader_is_not_then_committed(
        cluster_factory) -> None:
    """The backends finish the unit and vote within their credit while PP waits on the
    client; the stalled-reader abort then goes down, and each backend rolls back. The
    votes taken before it are void: the client reading on is told ABORTED, and the
    transaction's UPDATE is nowhere, as the client is told."""
    r = cluster_factory(2)
    r.client.define("""
files:
  R:
    attributes: {ID: integer, PAD: string}
  S:
    attributes: {ID: integer, N: integer}
""")
    list(r.client.load("R", ["ID", "PAD"], (([i, "x" * 400], None) for i in range(16_000))))
    r.client.execute("INSERT (<FILE, S>, <ID, 1>, <N, 0>)")

    # Without BDP probing the client's window stays at 64 KiB: PP waits on the client
    # with most of the 6 MB answer still to pass, while the backends are done.
    channel = grpc.insecure_channel(r.cluster.address, options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.http2.bdp_probe", 0)])
    replies = rpc.ControllerStub(channel).Execute(pb.ExecuteRequest(
        text="[UPDATE (FILE = S) <N = N + 1>; RETRIEVE (FILE = R) (ALL)]"), timeout=120)
    next(replies)                            # the answer has begun…
    time.sleep(STALLED_READER + 2.0)         # …and its reader stalls past the bound
    with pytest.raises(grpc.RpcError) as e:
        for _ in replies:
            pass
    channel.close()
    assert e.value.code() == grpc.StatusCode.ABORTED, e.value
    assert f"did not read its answer within {STALLED_READER:g} s" in (e.value.details() or "")
    [s] = r.client.execute("RETRIEVE (FILE = S) (N)")
    assert s.records == [{"N": 0}]
    # Nothing of the unit is left in doubt: its file takes the next writer at once.
    r.client.execute("UPDATE (FILE = S) <N = N + 1>")
    [s] = r.client.execute("RETRIEVE (FILE = S) (N)")
    assert s.records == [{"N": 1}]
