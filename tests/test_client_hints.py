"""A client that cannot reach the controller says why in words a user can act on, the
synchronous and the asyncio client alike: no controller at the address (`mbds up`, or
the containers), a CA that is not the cluster's (one made again by `docker compose
down -v` has a new one), a CA given for a port that serves plaintext."""

from __future__ import annotations

import asyncio
import datetime
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mbds import tls
from mbds.async_client import AsyncClient
from mbds.client import Client, ClientError
from tests.conftest import CENSUS_YAML

ALL = "RETRIEVE (FILE = Census) (CITY)"
NOT_SENT = "the request was not sent (not run): "
NO_CONTROLLER = ("(is a controller running there? start one with `mbds up`, or with `docker "
                 "compose up -d` if you use the containers (docs/containers.md); --controller "
                 "or env MBDS_CONTROLLER gives another address)")
WRONG_CA = ("(the CA the client checks the controller with (env MBDS_CA, or Client(ca=...)) "
            "is not the one that signed the controller's certificate: a cluster made again "
            "(`docker compose down -v`, a new data directory) has a new CA; take its ca.pem "
            "again)")
PLAINTEXT = ("(the controller there serves plaintext, not TLS: leave the CA out (unset env "
             "MBDS_CA; no Client(ca=...)), or give the address of one that serves TLS)")


def failures(address: str, ca: Path | None = None) -> Iterator[ClientError]:
    """The errors of a request, a status and a load from a Client, and of a request
    from an AsyncClient, at `address` with `ca` (else env MBDS_CA)."""
    with Client(address, timeout=10, ca=ca) as c:
        for call in (lambda: c.execute(ALL), c.status,
                     lambda: list(c.load("CENSUS", ["CITY"], [(["x"], None)]))):
            with pytest.raises(ClientError) as err:
                call()
            yield err.value

    async def ask() -> ClientError:
        async with AsyncClient(address, timeout=10, ca=ca) as a:
            with pytest.raises(ClientError) as err:
                await a.execute(ALL)
            return err.value
    yield asyncio.run(ask())


def said(errors: Iterator[ClientError], hint: str) -> None:
    """Every error is UNAVAILABLE and ends with `hint`; the asyncio client's (the last)
    also says its request was not sent."""
    *sync, aio = errors
    for e in (*sync, aio):
        assert e.code == "UNAVAILABLE" and str(e).endswith(" " + hint), str(e)
    assert str(aio).startswith(NOT_SENT), str(aio)
    assert str(aio)[len(NOT_SENT):] == str(sync[0]), (str(aio), str(sync[0]))


def test_no_controller_at_the_address_says_how_to_start_one() -> None:
    with socket.socket() as held:      # bound, never listening: connections are refused
        held.bind(("127.0.0.1", 0))
        said(failures(f"127.0.0.1:{held.getsockname()[1]}"), NO_CONTROLLER)


def other_ca(directory: Path) -> Path:
    """A CA of another name than a cluster's, which signed nothing of it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "another CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    directory.mkdir()
    (directory / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return directory / "ca.pem"


def test_a_ca_that_is_not_the_cluster_s_says_so_and_names_where_it_comes_from(
        cluster_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = cluster_factory(1, client_tls=True)
    assert r.cluster.ca is not None
    with Client(r.cluster.address, timeout=10, ca=r.cluster.ca) as right:
        right.define(CENSUS_YAML)
        right.execute("INSERT (<FILE, Census>, <CITY, 'a'>, <POP, 1>, <STATE, CA>)")
    # A cluster made again: a CA of the same name, another key (what `down -v` then `up`
    # leaves a client holding the old ca.pem with); and a CA of another name.
    tls.make(tmp_path / "again")
    again = tmp_path / "again" / "ca.pem"
    for ca in (again, other_ca(tmp_path / "other")):
        said(failures(r.cluster.address, ca), WRONG_CA)
    monkeypatch.setenv("MBDS_CA", str(again))       # as the `mbds` commands take it
    said(failures(r.cluster.address), WRONG_CA)
    monkeypatch.delenv("MBDS_CA")
    with Client(r.cluster.address, timeout=10, ca=r.cluster.ca) as right:
        assert [x["CITY"] for x in right.execute(ALL)[0].records] == ["a"]


def test_a_ca_given_for_a_plaintext_port_says_to_leave_it_out(cluster_factory) -> None:
    r = cluster_factory(1)
    assert r.cluster.ca is None and r.cluster.tls_dir is not None
    said(failures(r.cluster.address, r.cluster.tls_dir / "ca.pem"), PLAINTEXT)
