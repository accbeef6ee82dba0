"""A backend belongs to one cluster and serves one controller at a time: a controller
meeting a backend of another cluster (their certificates from one CA) is refused
before it writes anything, and so is a second controller started while the first
serves; the first goes on serving, and each cluster keeps its own data."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from controller.members import Members
from mbds.client import Client
from mbds.cluster import Proc, ProcessFailed
from mbds.errors import BackendUnavailable
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.service import CLUSTER_KEY, EPOCH_KEY
from tests.conftest import CENSUS_YAML, Running, as_controller, internal_channel, start_cluster
from tests.crashes import wait_for

COUNT = "RETRIEVE (FILE = Census) (CITY, POP)"


def _records(r: Running) -> list[tuple[str, int]]:
    [res] = r.client.execute(COUNT)
    return sorted((x["CITY"], x["POP"]) for x in res.records)


def _controller(r: Running, backends: list[str], data_dir: Path
                ) -> subprocess.CompletedProcess[str]:
    """A controller process of our own on `backends`, which must fail to start."""
    args = [sys.executable, "-m", "mbds", "controller", "--listen", "127.0.0.1:0",
            "--backends", ",".join(backends), "--data-dir", str(data_dir)]
    if r.cluster.tls_dir is not None:
        args += ["--tls-dir", str(r.cluster.tls_dir), "--client-plaintext"]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def _cluster(path: Path, n: int, cities: list[str], tls_from: Path | None = None) -> Running:
    if tls_from is not None:            # one CA for both clusters
        shutil.copytree(tls_from, path / "tls")
    r = start_cluster(path, n)
    r.client.define(CENSUS_YAML)
    for i, city in enumerate(cities):
        r.client.execute(f"INSERT (<FILE, Census>, <CITY, {city}>, <POP, {i}>)")
    return r


def test_a_backend_of_another_cluster_is_refused_and_both_keep_their_data(tmp_path: Path
                                                                           ) -> None:
    a = _cluster(tmp_path / "a", 2, ["Alpha", "Aleph", "Ayin"])
    b = None
    try:
        assert a.cluster.tls_dir is not None
        b = _cluster(tmp_path / "b", 1, ["Beta"], tls_from=a.cluster.tls_dir)
        a_before, b_before = _records(a), _records(b)
        a_b1, b_b0 = (a.cluster.backends[1].address or "", b.cluster.backends[0].address or "")
        kept = json.loads((tmp_path / "b" / "controller" / "members.json").read_text())
        a_id = as_controller(a.cluster, a_b1)[0][1]
        assert kept["backends"] == ["b0"] and kept["cluster"] != a_id
        assert b.cluster.controller is not None
        b.cluster.controller.stop()

        # B's controller (its own --data-dir) on its backend and one of A's.
        out = _controller(b, [b_b0, a_b1], tmp_path / "b" / "controller")
        assert out.returncode == 1, out.stderr
        assert out.stderr.startswith(f"error: backend b1 belongs to cluster {a_id}, not to "
                                     f"this controller's cluster {kept['cluster']}"), out.stderr
        # A controller with a fresh --data-dir on backends of two clusters.
        out = _controller(b, [b_b0, a_b1], tmp_path / "fresh")
        assert out.returncode == 1, out.stderr
        assert out.stderr.startswith("error: the backends belong to different clusters "
                                     "("), out.stderr
        assert f"b1 to {a_id}" in out.stderr and f"b0 to {kept['cluster']}" in out.stderr

        # Nothing was written anywhere: A served throughout, B serves again as it was.
        assert _records(a) == a_before
        b.cluster.restart_controller()
        assert _records(b) == b_before
    finally:
        if b is not None:
            b.close()
        a.close()


def test_a_second_controller_is_refused_while_the_first_serves(tmp_path: Path) -> None:
    r = _cluster(tmp_path / "a", 2, ["Alpha", "Aleph"])
    try:
        before = _records(r)
        addresses = [p.address or "" for p in r.cluster.backends]
        # A copy of the first one's --data-dir (the same cluster), and a fresh one.
        shutil.copytree(tmp_path / "a" / "controller", tmp_path / "copy")
        for data_dir in (tmp_path / "copy", tmp_path / "fresh"):
            out = _controller(r, addresses, data_dir)
            assert out.returncode == 1, out.stderr
            named = "|".join(f"b{i} \\({re.escape(a)}\\)" for i, a in enumerate(addresses))
            assert re.match(rf"error: backend ({named}) serves the bus of another controller "
                            r"\(epoch ", out.stderr), out.stderr
            assert "a cluster has one controller at a time" in out.stderr
            assert not (data_dir / "members.json").exists() or data_dir.name == "copy"
        r.client.execute("INSERT (<FILE, Census>, <CITY, After>, <POP, 9>)")
        assert _records(r) == sorted([*before, ("After", 9)])

        # Once the first has stopped, a controller on a fresh --data-dir takes the
        # cluster's id from its backends and serves the same data.
        assert r.cluster.controller is not None
        r.cluster.controller.stop()
        shutil.rmtree(tmp_path / "a" / "controller")
        r.cluster.restart_controller()
        assert _records(r) == sorted([*before, ("After", 9)])
        kept = json.loads((tmp_path / "a" / "controller" / "members.json").read_text())
        assert kept["cluster"] == as_controller(r.cluster, addresses[0])[0][1]
    finally:
        r.close()


def test_a_backend_refuses_writes_from_a_controller_whose_bus_is_not_open(tmp_path: Path
                                                                          ) -> None:
    """The backend's own check, for a controller that passed the hello before the first
    opened its bus: a bus, a Resolve or a directory write of another epoch is refused,
    and so is any call naming another cluster, or none; reads of its own cluster pass."""
    r = _cluster(tmp_path / "a", 1, ["Alpha"])
    try:
        address = r.cluster.backends[0].address or ""
        ours = as_controller(r.cluster, address)
        cluster = ours[0][1]
        other = ((CLUSTER_KEY, cluster), (EPOCH_KEY, "second"))
        hello = pb.BusBatch(messages=[pb.BusMessage(hello=pb.BusHello(
            epoch="second", backend_index=0, peers=[address]))])
        calls = {
            "a bus": lambda stub, md: list(stub.Bus(iter([hello]), timeout=10, metadata=md)),
            "a Resolve": lambda stub, md: stub.Resolve(pb.Outcomes(), timeout=10, metadata=md),
            "a directory write": lambda stub, md: stub.ApplyDirectory(
                pb.DirectoryUpdate(), timeout=10, metadata=md),
        }
        with internal_channel(r.cluster, address) as ch:
            stub = rpc.BackendStub(ch)
            for what, call in calls.items():
                with pytest.raises(grpc.RpcError) as err:
                    call(stub, other)
                assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, what
                assert (err.value.details() or "").startswith(
                    "backend b0 serves the bus of another controller (epoch "), what
            for md, named in ((((CLUSTER_KEY, "elsewhere"), ours[1]), "cluster elsewhere"),
                              ((), "no cluster")):
                with pytest.raises(grpc.RpcError) as err:
                    stub.Directory(pb.DirectoryRequest(), timeout=10, metadata=md)
                assert err.value.details() == (
                    f"backend b0 belongs to cluster {cluster}; the call names {named}: a "
                    "backend's records are its own cluster's, and it joins no other")
            assert stub.Directory(pb.DirectoryRequest(), timeout=10, metadata=ours).name == "b0"
            assert stub.ApplyDirectory(pb.DirectoryUpdate(), timeout=10,
                                       metadata=ours).bus_epoch == ours[1][1]
        assert _records(r) == [("Alpha", 0)]
    finally:
        r.close()


def test_members_keep_the_cluster_id_and_read_the_names_kept_before_it(tmp_path: Path
                                                                      ) -> None:
    (tmp_path / "members.json").write_text('["b0", "b1"]')
    m = Members(tmp_path)
    assert m.names == {"b0", "b1"} and m.cluster == ""
    m.identify({"b0": "c1", "b1": ""})          # adopted from the backends that hold one
    assert json.loads((tmp_path / "members.json").read_text()) == ["b0", "b1"]
    m.keep()
    assert json.loads((tmp_path / "members.json").read_text()) == {
        "cluster": "c1", "backends": ["b0", "b1"], "served": []}
    m.serving("b1")                             # seen holding the cluster's id
    assert Members(tmp_path).served == {"b1"}
    assert Members(tmp_path).cluster == "c1"
    with pytest.raises(BackendUnavailable, match="backend b2 belongs to cluster c2, not "
                       "to this controller's cluster c1"):
        Members(tmp_path).identify({"b0": "c1", "b2": "c2"})
    with pytest.raises(BackendUnavailable, match=r"the backends belong to different "
                       r"clusters \(b0 to c1; b1, b2 to c2\)"):
        Members(None).identify({"b0": "c1", "b1": "c2", "b2": "c2"})
    fresh = Members(None)
    fresh.identify({"b0": ""})
    assert len(fresh.cluster) == 32
    (tmp_path / "members.json").write_text('{"cluster": 5, "backends": []}')
    with pytest.raises(BackendUnavailable, match="not a cluster id and a list of backend"):
        Members(tmp_path)


def test_of_two_controllers_started_at_once_the_one_whose_bus_is_refused_does_not_start(
        tmp_path: Path) -> None:
    """Both pass the hello (no bus is open yet); the first is held after it, before it
    opens its buses (`controller.before_bus_open`), while the second starts and opens its
    own. The backends refuse the first's buses, and it exits 1 naming why instead of
    serving with every backend down; the second serves."""
    r = _cluster(tmp_path / "a", 2, ["Alpha"])
    try:
        assert r.cluster.controller is not None and r.cluster.tls_dir is not None
        r.cluster.controller.stop()
        shutil.copytree(tmp_path / "a" / "controller", tmp_path / "copy")
        args = ["controller", "--listen", "127.0.0.1:0", "--backends",
                ",".join(p.address or "" for p in r.cluster.backends),
                "--tls-dir", str(r.cluster.tls_dir), "--client-plaintext", "--data-dir"]
        held = Proc("held controller", [*args, str(tmp_path / "a" / "controller")],
                    {"MBDS_FAULTS": "controller.before_bus_open=stall",
                     "MBDS_FAULTS_STALL_S": "20"})
        second = None
        try:
            wait_for(lambda: any("stalling" in line for line in held.tail), 60,
                     "the first controller held after its hellos")
            second = Proc("second controller", [*args, str(tmp_path / "copy")])
            address = second.wait_ready(60)       # within the first one's 20 s
            with pytest.raises(ProcessFailed) as err:
                held.wait_ready(60)
            assert "exited with code 1" in str(err.value), str(err.value)
            assert "serves the bus of another controller" in str(err.value), str(err.value)
            with Client(address) as c:
                [res] = c.execute(COUNT)
            assert sorted((x["CITY"], x["POP"]) for x in res.records) == [("Alpha", 0)]
        finally:
            held.stop()
            if second is not None:
                second.stop()
    finally:
        r.close()
