"""Closed doors: internal links pass only holders of a certificate the cluster's CA signed,
each service only the role it serves, and the client port only known tokens — a read
token only for what changes no data. Every attempt is made through real gRPC against a
real local cluster."""

from __future__ import annotations

import asyncio
import stat
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from mbds import tls
from mbds.async_client import AsyncClient
from mbds.client import Client, ClientError
from mbds.proto import mbds_pb2 as pb
from mbds.proto import mbds_pb2_grpc as rpc
from mbds.values import to_pb
from tests.conftest import CENSUS_YAML, Running, as_controller, internal_channel
from tests.test_doors import iig_address

ROW = "INSERT (<FILE, Census>, <CITY, '{c}'>, <POP, {p}>, <STATE, CA>)"
ALL = "RETRIEVE (FILE = Census) (CITY, POP)"


def cities(r: Running) -> list[str]:
    [res] = r.client.execute(ALL)
    return sorted(x["CITY"] for x in res.records)


def code_of(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code()


def test_certs_are_made_once_keys_private_and_a_partial_directory_refused(tmp_path: Path
                                                                           ) -> None:
    d = tmp_path / "tls"
    assert tls.make(d, ("db.example",))
    ca = (d / "ca.pem").read_bytes()
    assert not tls.make(d)                          # kept: the cluster keeps its CA
    assert (d / "ca.pem").read_bytes() == ca
    for key in ("ca.key", "controller.key", "backend.key"):
        assert stat.S_IMODE((d / key).stat().st_mode) == 0o600
    (d / "backend.key").unlink()
    with pytest.raises(tls.TlsError, match="only part"):
        tls.make(d)
    out = subprocess.run([sys.executable, "-m", "mbds", "certs", "--dir", str(tmp_path / "c"),
                          "--tokens", str(tmp_path / "tokens")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = (tmp_path / "tokens").read_text().split("\n")
    assert [x.split()[0] for x in lines if x and not x.startswith("#")] == ["read", "write"]


def test_a_role_s_share_holds_its_key_pair_and_the_ca_certificate_only(tmp_path: Path
                                                                       ) -> None:
    out = subprocess.run([sys.executable, "-m", "mbds", "certs", "--dir", str(tmp_path / "all"),
                          "--role-dir", f"backend={tmp_path / 'b'}", "--role-dir",
                          f"controller={tmp_path / 'c'}"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for role, d in (("backend", tmp_path / "b"), ("controller", tmp_path / "c")):
        assert sorted(p.name for p in d.iterdir()) == sorted(["ca.pem", f"{role}.key",
                                                              f"{role}.pem"])
        assert stat.S_IMODE((d / f"{role}.key").stat().st_mode) == 0o600
        assert (d / f"{role}.key").read_bytes() == (tmp_path / "all" / f"{role}.key").read_bytes()
        tls.Identity.load(d, role)
    again = subprocess.run([sys.executable, "-m", "mbds", "certs", "--dir", str(tmp_path / "all"),
                            "--role-dir", f"backend={tmp_path / 'b'}"], capture_output=True,
                           text=True)
    assert again.returncode == 0, again.stderr             # a later start shares it again
    bad = subprocess.run([sys.executable, "-m", "mbds", "certs", "--dir", str(tmp_path / "all"),
                          "--role-dir", f"ca={tmp_path / 'x'}"], capture_output=True, text=True)
    assert bad.returncode == 1 and "no role 'ca'" in bad.stderr
    assert not (tmp_path / "x").exists()


def test_a_backend_passes_only_the_controller_on_its_bus_and_backends_on_peer(
        cluster_factory, tmp_path: Path) -> None:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute(ROW.format(c="a", p=1))
    address = r.cluster.backends[0].address or ""
    # No certificate at all: the TLS handshake fails before any service is reached.
    with grpc.insecure_channel(address) as ch:
        assert code_of(lambda: rpc.BackendStub(ch).Hello(pb.HelloRequest(), timeout=5)
                       ) == grpc.StatusCode.UNAVAILABLE
    # A certificate of another CA, however well made, is refused the same way.
    tls.make(tmp_path / "rogue")
    creds, options = tls.Identity.load(tmp_path / "rogue", "controller").channel("backend")
    with grpc.secure_channel(address, creds, options=options) as ch:
        assert code_of(lambda: rpc.BackendStub(ch).Hello(pb.HelloRequest(), timeout=5)
                       ) == grpc.StatusCode.UNAVAILABLE
    # The cluster's backend certificate may exchange descriptor ids, not open a bus.
    with internal_channel(r.cluster, address, "backend") as ch:
        bus = rpc.BackendStub(ch).Bus(iter([pb.BusBatch()]), timeout=5)
        assert code_of(lambda: next(iter(bus))) == grpc.StatusCode.PERMISSION_DENIED
        assert code_of(lambda: rpc.BackendStub(ch).ApplyDirectory(
            pb.DirectoryUpdate(), timeout=5)) == grpc.StatusCode.PERMISSION_DENIED
        rpc.PeerStub(ch).DescriptorIdsStream(iter([]), timeout=5,
                                             metadata=as_controller(r.cluster, address)[:1])
    # The controller's certificate reaches the bus and directory, not the peer service.
    with internal_channel(r.cluster, address, "controller") as ch:
        assert rpc.BackendStub(ch).Hello(pb.HelloRequest(), timeout=5).name == "b0"
        assert code_of(lambda: rpc.PeerStub(ch).DescriptorIdsStream(iter([]), timeout=5)
                       ) == grpc.StatusCode.PERMISSION_DENIED
    # IIG passes backends only; the client port does not serve it at all.
    place = pb.PlaceRequest(file="CENSUS", directory_values=[
        to_pb(v, pb.Value()) for v in ("CENSUS", "new", 5, "CA")])
    internal = iig_address(r)
    with internal_channel(r.cluster, internal, "controller", "controller") as ch:
        assert code_of(lambda: rpc.IigStub(ch).Place(place, timeout=5)
                       ) == grpc.StatusCode.PERMISSION_DENIED
    with grpc.insecure_channel(internal) as ch:
        assert code_of(lambda: rpc.IigStub(ch).Place(place, timeout=5)
                       ) == grpc.StatusCode.UNAVAILABLE
    assert cities(r) == ["a"]                       # nothing that was refused changed data


@pytest.fixture
def guarded(cluster_factory, tmp_path: Path) -> tuple[Running, dict[str, str], Path]:
    """A cluster whose client port is TLS and needs a token."""
    from cli.certs import write_tokens
    tokens = write_tokens(tmp_path / "tokens")
    r = cluster_factory(2, tokens=tmp_path / "tokens")
    ca = (r.cluster.tls_dir or tmp_path) / "ca.pem"
    r.client.close()
    r.client = Client(r.cluster.address, timeout=60, ca=ca, token=tokens["write"])
    r.client.define(CENSUS_YAML)
    r.client.execute(ROW.format(c="a", p=1))
    return r, tokens, ca


def test_a_changed_tokens_file_is_read_again_without_a_restart(guarded, tmp_path) -> None:
    """A token removed from the file is refused and one added passes, with the controller
    running; a file changed into one it cannot use leaves the tokens as they were."""
    from tests.crashes import wait_for
    r, tokens, ca = guarded
    address, new = r.cluster.address, "n" * 32
    (tmp_path / "tokens").write_text(f"write {new}\nread {tokens['read']}\n")

    def refused(token: str) -> bool:
        with Client(address, timeout=10, ca=ca, token=token) as c:
            try:
                c.execute(ALL)
            except ClientError as e:
                assert e.code == "UNAUTHENTICATED", e
                return True
            return False
    wait_for(lambda: refused(tokens["write"]), 30, "the removed token refused")
    with Client(address, timeout=10, ca=ca, token=new) as c:
        c.execute(ROW.format(c="b", p=2))
    (tmp_path / "tokens").write_text("write short\n")
    assert r.cluster.controller is not None
    tail = r.cluster.controller.tail

    def looked() -> bool:            # the door looks at the file when a call comes
        assert not refused(new)
        return any("cannot be used" in line for line in tail)
    wait_for(looked, 30, "the controller looked at the broken file")
    assert not refused(new) and refused(tokens["write"])
    (tmp_path / "tokens").write_bytes(b"write " + b"\xff" * 32 + b"\n")  # not UTF-8

    def looked_again() -> bool:
        assert not refused(new)
        return any("is not valid UTF-8 (byte 0xff at position 6)" in line for line in tail)
    wait_for(looked_again, 30, "the controller looked at the file that is not UTF-8")
    assert not refused(new) and refused(tokens["write"])


def test_the_client_port_needs_tls_and_a_known_token(guarded) -> None:
    r, tokens, ca = guarded
    address = r.cluster.address
    with Client(address, timeout=10) as plain:      # plaintext to a TLS port
        with pytest.raises(ClientError) as err:
            plain.execute(ALL)
        assert err.value.code == "UNAVAILABLE"
        assert "the client needs the cluster's CA: env MBDS_CA, or Client(ca=...); and a " \
            "token, if it asks for one: env MBDS_TOKEN" in str(err.value), str(err.value)
    for token in (None, "x" * 32, tokens["write"][:-1] + "?"):
        with Client(address, timeout=10, ca=ca, token=token) as c:
            with pytest.raises(ClientError) as err:
                c.execute(ALL)
            assert err.value.code == "UNAUTHENTICATED", token
            with pytest.raises(ClientError) as err:
                c.execute(ROW.format(c="intruder", p=2))
            assert err.value.code == "UNAUTHENTICATED"
    with grpc.secure_channel(address, grpc.ssl_channel_credentials(ca.read_bytes())) as ch:
        assert code_of(lambda: rpc.ControllerStub(ch).Status(pb.StatusRequest(), timeout=5)
                       ) == grpc.StatusCode.UNAUTHENTICATED
    assert cities(r) == ["a"]


def test_a_read_token_retrieves_and_changes_nothing(guarded) -> None:
    r, tokens, ca = guarded
    with Client(r.cluster.address, timeout=10, ca=ca, token=tokens["read"]) as c:
        [res] = c.execute(ALL)
        assert [x["CITY"] for x in res.records] == ["a"]
        assert len(c.status().backends) == 2
        for text in (ROW.format(c="b", p=2), "DELETE (FILE = Census)",
                     "UPDATE (FILE = Census) <POP = 9>",
                     f"[{ALL}; {ROW.format(c='c', p=3)}]"):
            with pytest.raises(ClientError) as err:
                c.execute(text)
            assert err.value.code == "PERMISSION_DENIED", text
            assert "read-only" in str(err.value)
        with pytest.raises(ClientError) as err:
            c.define(CENSUS_YAML.replace("Census", "Other"))
        assert err.value.code == "PERMISSION_DENIED"
        with pytest.raises(ClientError) as err:
            list(c.load("CENSUS", ["CITY", "POP", "STATE"], [(["z", 1, "CA"], None)]))
        assert err.value.code == "PERMISSION_DENIED"

    async def over_a_session() -> None:     # the asyncio client and its Session stream
        async with AsyncClient(r.cluster.address, timeout=10, ca=ca,
                               token=tokens["read"]) as c:
            assert len((await c.execute(ALL))[0].records) == 1
            with pytest.raises(ClientError) as err:
                await c.execute(ROW.format(c="d", p=4))
            assert err.value.code == "PERMISSION_DENIED"
    asyncio.run(over_a_session())
    assert cities(r) == ["a"]


def test_plaintext_is_refused_off_loopback_and_tokens_need_tls(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mbds", *args], capture_output=True,
                              text=True, timeout=60)
    # 192.0.2.1 (TEST-NET-1) is on no interface: the check comes before any bind.
    out = run("backend", "--listen", "192.0.2.1:0", "--data-dir", str(tmp_path / "b"))
    assert out.returncode == 1 and "without TLS: give --tls-dir" in out.stderr
    tokens = tmp_path / "tokens"
    tokens.write_text("write " + "t" * 20 + "\n")
    out = run("controller", "--listen", "127.0.0.1:0", "--backends", "127.0.0.1:1",
              "--data-dir", str(tmp_path / "c"), "--tokens", str(tokens))
    assert out.returncode == 1 and "tokens need TLS" in out.stderr
    tokens.write_text("admin " + "t" * 20 + "\n")
    tls.make(tmp_path / "tls")
    out = run("controller", "--listen", "127.0.0.1:0", "--backends", "127.0.0.1:1",
              "--data-dir", str(tmp_path / "c"), "--tokens", str(tokens),
              "--tls-dir", str(tmp_path / "tls"))
    assert out.returncode == 1 and "line 1: expected `read TOKEN` or `write TOKEN`" in out.stderr


@pytest.mark.parametrize("token, bad", [("with\nnewline", "\n"), ("naïve-token", "ï"),
                                        ("tab\there", "\t")])
def test_a_token_grpc_metadata_cannot_carry_is_refused_when_the_client_is_made(
        tmp_path: Path, token: str, bad: str) -> None:
    """Not left to fail every call as UNAVAILABLE, as if the controller were gone."""
    from mbds.client import Client, ClientError
    tls.make(tmp_path / "tls")
    for make in (Client, AsyncClient):
        with pytest.raises(ClientError) as err:
            make("127.0.0.1:1", ca=tmp_path / "tls" / "ca.pem", token=token)
        assert err.value.code == "INVALID_ARGUMENT"
        assert str(err.value).startswith(f"the token holds {bad!r}: a token is printable")
