"""`mbds certs` and the TLS options of the commands that serve: a cluster's doors."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cli.options import fail

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
@click.option("--host", "hosts", multiple=True,
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
    from mbds.tls import TlsError, make, share
    try:
        made = make(directory, hosts)
        click.echo(f"{'created' if made else 'kept'} the cluster's certificates in "
                   f"{directory}")
        for spec in role_dirs:
            role, _, to = spec.partition("=")
            if not to:
                raise click.UsageError(f"--role-dir {spec!r} is not ROLE=DIR")
            share(directory, role, Path(to))
            click.echo(f"put the {role}'s certificate and key, and the CA's certificate, "
                       f"in {to}")
    except TlsError as e:
        fail(e)
    if tokens is not None:
        try:
            write_tokens(tokens)
        except FileExistsError:
            fail(f"{tokens} exists; remove it to make new tokens")
        click.echo(f"wrote a read and a write token to {tokens}")
