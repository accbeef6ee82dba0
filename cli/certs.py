"""`mbds certs` and the TLS options of the commands that serve: a cluster's doors."""

from __future__ import annotations

import ipaddress
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cli.options import fail, os_error
from mbds.errors import shorten

F = TypeVar("F", bound=Callable[..., Any])


def tls_options(f: F) -> F:
    """--tls-dir and --insecure, shared by every process that serves internal links."""
    f = click.option(
        "--insecure", is_flag=True,
        help="Allow plaintext on an address other than loopback (nothing authenticated).")(f)
    return click.option(
        "--tls-dir", type=click.Path(path_type=Path, file_okay=False), envvar="MBDS_TLS_DIR",
        help="The cluster's CA and certificates (`mbds certs`): internal links use "
             "mutual TLS, each process proving its role (env MBDS_TLS_DIR).")(f)


# A DNS name as a certificate holds it: ASCII labels (`_` too, as container names
# have it), the first of which may be `*`.
DNS_NAME = re.compile(r"(\*\.)?[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?")


def host_names(ctx: click.Context, param: click.Parameter, hosts: tuple[str, ...]
               ) -> tuple[str, ...]:
    """The --host names as the certificate holds them: an IP address as it is, a name in
    its ASCII form (`é.example` as `xn--9ca.example`). Anything else (a blank, a space,
    a line break, a name longer than DNS allows) is refused before anything is written:
    no client could reach the controller by it."""
    out = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
            out.append(host)
            continue
        except ValueError:
            pass
        try:
            name = host.encode("idna").decode("ascii")
        except UnicodeError:
            name = ""
        if len(name) > 253 or not DNS_NAME.fullmatch(name):
            raise click.BadParameter(f"{shorten(host)!r} is neither a host name nor an IP "
                                     "address")
        out.append(name)
    return tuple(out)


def write_tokens(path: Path) -> dict[str, str]:
    """A new tokens file with one read-only and one read-write token."""
    tokens = {"read": secrets.token_urlsafe(24), "write": secrets.token_urlsafe(24)}
    with path.open("x") as f:     # never overwrite the tokens clients already hold
        f.write("# access token (clients send `authorization: Bearer TOKEN`)\n")
        for access, token in tokens.items():
            f.write(f"{access} {token}\n")
    path.chmod(0o600)
    return tokens


@click.command()
@click.option("--dir", "directory", type=click.Path(path_type=Path, file_okay=False),
              required=True, help="Where to write ca.pem, controller.pem, backend.pem and keys.")
@click.option("--host", "hosts", multiple=True, callback=host_names,
              help="A further name or IP clients use to reach the controller (repeatable).")
@click.option("--tokens", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write this tokens file with a read and a write token.")
@click.option("--role-dir", "role_dirs", multiple=True, metavar="ROLE=DIR",
              help="Also put in DIR only what ROLE (controller or backend) needs: ca.pem "
                   "and that role's key pair, without the CA's key (repeatable).")
def certs(directory: Path, hosts: tuple[str, ...], tokens: Path | None,
          role_dirs: tuple[str, ...]) -> None:
    """Create a cluster's CA and its processes' certificates.

    The controller's and the backends', for the internal links' mutual TLS. Existing
    certificates are kept (a cluster keeps its CA); give each process its role's
    directory (--role-dir) or this one with --tls-dir, and ca.pem to clients (env
    MBDS_CA)."""
    from mbds.tls import ROLES, TlsError, make, share
    # Every --role-dir is checked before anything is written: one given wrong changes
    # nothing.
    shares = []
    for spec in role_dirs:
        role, _, to = spec.partition("=")
        if not to:
            raise click.UsageError(f"--role-dir {shorten(spec)!r} is not ROLE=DIR")
        if role not in ROLES:
            fail(f"no role {shorten(role)!r}: the roles are {', '.join(ROLES)}")
        shares.append((role, Path(to)))
    # What was done is said once all of it is: a reader that leaves early (`| head -1`)
    # cuts the output short, not the work.
    done: list[str] = []
    try:
        if tokens is not None and tokens.exists():
            fail(f"{shorten(str(tokens))} exists; remove it to make new tokens")
        made = make(directory, hosts)
        done.append(f"{'created' if made else 'kept'} the cluster's certificates in "
                    f"{directory}")
        for role, to in shares:
            share(directory, role, to)
            done.append(f"put the {role}'s certificate and key, and the CA's certificate, "
                        f"in {to}")
        if tokens is not None:
            write_tokens(tokens)
            done.append(f"wrote a read and a write token to {tokens}")
    except (TlsError, OSError) as e:    # a directory that cannot be made, a name too long
        click.echo("\n".join(done), nl=bool(done))
        fail(os_error(e) if isinstance(e, OSError) else e)
    click.echo("\n".join(done))
