"""A process that stops answering without closing its connections (a frozen process, a
host gone, a partition) is found by keepalive pings, not waited for: a frozen backend's
bus breaks and requests are refused naming it, and a frozen controller's buses are
dropped, so another may serve the cluster, and the first does not take it back when it
wakes."""

from __future__ import annotations

import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from mbds.client import Client, ClientError
from mbds.cluster import Proc, ProcessFailed
from tests.conftest import CENSUS_YAML, start_cluster
from tests.crashes import retry

COUNT = "RETRIEVE (FILE = Census) (COUNT(CITY))"


def test_a_frozen_backend_is_named_not_waited_for(tmp_path: Path) -> None:
    r = start_cluster(tmp_path / "d", 2, timeout=600)       # units' deadline far away
    try:
        r.client.define(CENSUS_YAML)
        r.client.execute("INSERT (<FILE, Census>, <CITY, Kept>, <POP, 1>)")
        b1 = r.cluster.backends[1]
        b1.signal(signal.SIGSTOP)
        try:
            # Found gone within its deadline (gRPC's own ping timeout is 60 s).
            with Client(r.cluster.address, timeout=30) as c, \
                    pytest.raises(ClientError) as err:
                c.execute(COUNT)
            assert err.value.code == "UNAVAILABLE", f"{err.value.code}: {err.value}"
            assert f"backend b1 ({b1.address})" in str(err.value), str(err.value)
        finally:
            b1.signal(signal.SIGCONT)
        [res] = retry(r.client, COUNT, timeout=60)              # it rejoins once awake
        assert res.records == [{"COUNT(CITY)": 1}]
    finally:
        r.close()


def test_a_frozen_controllers_buses_are_dropped_and_it_does_not_take_them_back(
        tmp_path: Path) -> None:
    r = start_cluster(tmp_path / "d", 2)
    second: Proc | None = None
    first = r.cluster.controller
    assert first is not None
    try:
        r.client.define(CENSUS_YAML)
        r.client.execute("INSERT (<FILE, Census>, <CITY, Kept>, <POP, 1>)")
        shutil.copytree(tmp_path / "d" / "controller", tmp_path / "second")
        args = ["controller", "--listen", "127.0.0.1:0", "--backends",
                ",".join(p.address or "" for p in r.cluster.backends),
                "--data-dir", str(tmp_path / "second"), "--client-plaintext"]
        assert r.cluster.tls_dir is not None
        args += ["--tls-dir", str(r.cluster.tls_dir)]
        first.signal(signal.SIGSTOP)
        refused = []
        deadline = time.monotonic() + 45
        while second is None:             # refused until the backends find it gone
            try:
                second = Proc("second controller", args)
                address = second.wait_ready(60)
            except ProcessFailed as e:
                second = None
                refused.append(str(e))
                assert "serves the bus of another controller" in str(e), str(e)
                assert time.monotonic() < deadline, "\n".join(refused)
                time.sleep(1)
        with Client(address) as c:
            [res] = c.execute(COUNT)
            assert res.records == [{"COUNT(CITY)": 1}]
            c.execute("INSERT (<FILE, Census>, <CITY, Second>, <POP, 2>)")
        first.signal(signal.SIGCONT)
        with pytest.raises(ClientError) as err:
            retry(r.client, COUNT, timeout=5)
        assert "serves the bus of another controller" in str(err.value), str(err.value)
        with Client(address) as c:
            [res] = c.execute(COUNT)
            assert res.records == [{"COUNT(CITY)": 2}]
    finally:
        first.signal(signal.SIGCONT)
        if second is not None:
            second.stop()
        r.close()
    print(f"the second controller was refused {len(refused)} times first", file=sys.stderr)
