"""IIG's placement counts follow what the backends stored: a unit committed whose client
left before its answer keeps its records' place, so the next records of their cluster
go to the backend that has fewer of them."""

from __future__ import annotations

import grpc
import pytest

from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc

ITEMS_YAML = """
files:
  ITEMS:
    attributes: {NAME: string, KIND: string}
    directory:
      KIND: {type: B, values: [a, b]}
"""
INSERT = "INSERT (<FILE, Items>, <NAME, '{n}'>, <KIND, a>)"
PER_BACKEND = "RETRIEVE ((FILE = Items) and (KIND = a)) (NAME)"


def _records_per_backend(r) -> dict[str, int]:
    [res] = r.client.execute(PER_BACKEND)
    return {b["backend"]: b["records"] for b in res.stats["backends"]}


def test_a_unit_committed_after_its_client_left_keeps_its_placement(cluster_factory) -> None:
    r = cluster_factory(2)
    r.client.define(ITEMS_YAML)
    # Every commit decision stalls the controller a while, long enough for the client's
    # deadline to pass: the unit commits after its client has gone.
    r.cluster.controller.stop()
    r.cluster.restart_controller(env={"MBDS_FAULTS": "controller.after_decision=stall",
                                      "MBDS_FAULTS_STALL_S": "1.5"})
    unit = "[" + "; ".join(INSERT.format(n=f"t{i}") for i in range(3)) + "]"
    with grpc.insecure_channel(r.cluster.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            for _ in rpc.ControllerStub(ch).Execute(pb.ExecuteRequest(text=unit, timeout_s=60),
                                                    timeout=0.5):
                pass
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # The three records were dealt out b0, b1, b0 and committed: the next one goes to b1.
    # (One record in one backend commits in one phase: no decision, no stall.)
    r.client.execute(INSERT.format(n="next"))
    counts = _records_per_backend(r)
    assert sorted(counts.values()) == [2, 2], counts
