"""The cluster's certificates: one CA, a certificate per role, and gRPC credentials from them.

Controller and backends authenticate each other with mutual TLS: a process proves its
role (the certificate's common name) with a certificate the cluster's CA signed. The
internal links reach each other by address (IPs in containers), so a channel checks
the server's certificate against its role's name rather than the host it dialled.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mbds.service import KEEPALIVE

ROLES = ("controller", "backend")
CA = "ca"
# The name each role's certificate carries and a channel to that role checks.
ROLE_NAME = {"controller": "mbds-controller", "backend": "mbds-backend"}
# Where a client may reach the controller by name; `mbds certs --host` adds more.
CONTROLLER_HOSTS = ("localhost", "127.0.0.1", "::1", "controller")
VALID_DAYS = 3650


class TlsError(Exception):
    """A certificate directory that is missing, partial or unreadable."""


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "MBDS cluster"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _san(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return x509.SubjectAlternativeName(names)


def _write(path: Path, data: bytes, secret: bool) -> None:
    # A key is created readable by its owner only, never widened after the fact.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make(directory: Path, hosts: tuple[str, ...] = ()) -> bool:
    """Create the CA and each role's certificate in `directory` unless they exist.

    Returns True when it created them. Existing files are never replaced: a cluster
    keeps its CA, and a partial directory is an error for the user to look at."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = [directory / f"{n}.{ext}" for n in (CA, *ROLES) for ext in ("pem", "key")]
    present = [p for p in wanted if p.exists()]
    if len(present) == len(wanted):
        return False
    if present:
        raise TlsError(f"{directory} holds only part of a cluster's certificates "
                       f"({', '.join(p.name for p in present)}); remove them or complete them")
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("MBDS cluster CA")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(until)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(False, False, False, False, False, True, True,
                                            False, False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    out = {f"{CA}.key": (_pem_key(ca_key), True),
           f"{CA}.pem": (ca_cert.public_bytes(serialization.Encoding.PEM), False)}
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        names = (ROLE_NAME[role], *(CONTROLLER_HOSTS + hosts if role == "controller" else ()))
        cert = (x509.CertificateBuilder().subject_name(_name(ROLE_NAME[role]))
                .issuer_name(ca_name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now).not_valid_after(until)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(_san(tuple(dict.fromkeys(names))), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        out[f"{role}.key"] = (_pem_key(key), True)
        out[f"{role}.pem"] = (cert.public_bytes(serialization.Encoding.PEM), False)
    for name, (data, secret) in out.items():
        _write(directory / name, data, secret)
    return True


def share(directory: Path, role: str, to: Path) -> None:
    """Put in `to` what a process of `role` needs, and nothing more: the CA's certificate
    and the role's key pair, never the CA's key or another role's. Files already there
    are replaced (the role's own directory, made again from `directory` at each start)."""
    if role not in ROLES:
        raise TlsError(f"no role {role!r}: the roles are {', '.join(ROLES)}")
    to.mkdir(parents=True, exist_ok=True)
    for name, secret in ((f"{CA}.pem", False), (f"{role}.pem", False), (f"{role}.key", True)):
        data = (directory / name).read_bytes()
        (to / name).unlink(missing_ok=True)
        _write(to / name, data, secret)


@dataclass(frozen=True)
class Identity:
    """One process's side of mutual TLS: the CA it trusts and its role's key pair."""
    role: str
    ca: bytes
    key: bytes
    cert: bytes

    @classmethod
    def load(cls, directory: Path, role: str) -> Identity:
        try:
            return cls(role, (directory / f"{CA}.pem").read_bytes(),
                       (directory / f"{role}.key").read_bytes(),
                       (directory / f"{role}.pem").read_bytes())
        except OSError as e:
            raise TlsError(f"cannot read the {role} certificate in {directory}: "
                           f"{e.strerror} ({e.filename}); `mbds certs --dir {directory}` "
                           "makes them") from None

    def internal_server(self) -> grpc.ServerCredentials:
        """A server only holders of a certificate the CA signed can connect to."""
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=True)

    def client_server(self) -> grpc.ServerCredentials:
        """The controller's client port: TLS, clients authenticated by token, not certificate."""
        return grpc.ssl_server_credentials([(self.key, self.cert)])

    def channel(self, to_role: str) -> tuple[grpc.ChannelCredentials, list[tuple[str, str]]]:
        """Credentials and options of a channel to a process of `to_role`."""
        return (grpc.ssl_channel_credentials(self.ca, self.key, self.cert),
                [("grpc.ssl_target_name_override", ROLE_NAME[to_role])])


def peer_role(context: grpc.aio.ServicerContext) -> str | None:
    """The role whose certificate the caller presented, or None (plaintext, or no role)."""
    names = context.auth_context().get("x509_common_name", [])
    for role, name in ROLE_NAME.items():
        if name.encode() in names:
            return role
    return None


# A process has one role and one identity, set once at start: every internal channel
# it opens uses it, wherever in the process the channel is opened.
_identity: Identity | None = None


def use(identity: Identity | None) -> None:
    global _identity
    _identity = identity


def channel(address: str, to_role: str,
            options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
    """An internal channel to a process of `to_role`: mutual TLS when this process has an
    identity, plaintext otherwise (a cluster run with --insecure). Keepalive pings find a
    peer that stopped answering (`mbds.service.KEEPALIVE`)."""
    opts = [*KEEPALIVE, *options]
    if _identity is None:
        return grpc.aio.insecure_channel(address, options=opts)
    creds, extra = _identity.channel(to_role)
    return grpc.aio.secure_channel(address, creds, options=opts + extra)


def is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_plaintext(listen: str, what: str, insecure: bool) -> None:
    """Plaintext is for one machine's own work: refuse it on any other address unless
    the user said --insecure, so that no cluster is left open by omission."""
    if not insecure and not is_loopback(listen):
        raise TlsError(f"{what} would listen on {listen} without TLS: give --tls-dir "
                       "(`mbds certs` makes one), or --insecure to allow plaintext")


def client_credentials(ca: Path, token: str | None) -> grpc.ChannelCredentials:
    """A client's credentials: the cluster's CA to check the controller, and its token."""
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    except OSError as e:
        raise TlsError(f"cannot read the cluster's CA {ca}: {e.strerror}") from None
    if token:
        # Sent as gRPC metadata, which takes printable ASCII only: any other character
        # would fail every call as UNAVAILABLE ("Illegal metadata"), as if the
        # controller were gone.
        bad = next((c for c in token if not " " <= c <= "~"), None)
        if bad is not None:
            raise TlsError(f"the token holds {bad!r}: a token is printable ASCII "
                           "(`mbds certs --tokens` makes them)")
        creds = grpc.composite_channel_credentials(
            creds, grpc.access_token_call_credentials(token))
    return creds
