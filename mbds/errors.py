"""Named errors (one class per kind of failure a user can meet).

The controller maps each to a gRPC status code; the CLI prints the message.
"""

from __future__ import annotations

import grpc


class MbdsError(Exception):
    """Base of every error this system reports to a user."""

    code = grpc.StatusCode.INTERNAL


class DefinitionError(MbdsError):
    """A database definition is malformed or conflicts with what is stored."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class SemanticError(MbdsError):
    """A well-formed request names an unknown file/attribute or mixes types."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class BackendUnavailable(MbdsError):
    """A backend could not be reached or failed while serving a traffic unit."""

    code = grpc.StatusCode.UNAVAILABLE


class TrafficUnitAborted(MbdsError):
    """A traffic unit was rolled back (a backend failed it, or it was cancelled)."""

    code = grpc.StatusCode.ABORTED
