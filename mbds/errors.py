"""Named errors (one class per kind of failure a user can meet).

The controller maps each to a gRPC status code; the CLI prints the message.
"""

from __future__ import annotations

import grpc

# The most of a client's input (a name, a value) an error message repeats: a failed
# call's message travels in gRPC trailers, which a client refuses beyond 16 KiB.
SHOWN = 100
# The most of any message a failure carries, whatever it repeats.
FAILURE_MESSAGE = 1000


def shorten(text: str, limit: int = SHOWN) -> str:
    """`text` as an error message repeats it: the first `limit` characters, then "…" and
    the full length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} characters)"


class MbdsError(Exception):
    """Base of every error this system reports to a user."""

    code = grpc.StatusCode.INTERNAL


class DefinitionError(MbdsError):
    """A database definition is malformed, exceeds a bound (its limit named), or conflicts
    with what is stored."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class SemanticError(MbdsError):
    """A well-formed request names an unknown file/attribute, mixes types, or exceeds a
    bound on what a client may send (its limit named)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class BackendUnavailable(MbdsError):
    """A backend could not be reached or failed while serving a traffic unit."""

    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(MbdsError):
    """Backends did not answer a traffic unit within its deadline; it was aborted."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class TrafficUnitAborted(MbdsError):
    """A traffic unit was rolled back (a backend failed it, or it was cancelled)."""

    code = grpc.StatusCode.ABORTED


class PermissionDenied(MbdsError):
    """The client's token may not do what its request asks (a read-only token writing)."""

    code = grpc.StatusCode.PERMISSION_DENIED
