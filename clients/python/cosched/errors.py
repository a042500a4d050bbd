"""Exceptions for csd's refusals: one class per status code csd documents.

Every failed call raises an Error (or a subclass) carrying the gRPC status
code and csd's message, which names the field or record at fault. Bad
arguments the client itself can tell (an unknown level name, two stats
subjects) and bad connection settings raise ValueError instead, before
anything is sent.
"""

from __future__ import annotations

import grpc


class Error(Exception):
    """A call csd refused or that did not reach it.

    code: the grpc.StatusCode; message: csd's message (or gRPC's, when the
    call did not reach csd).
    """

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class InvalidArgument(Error):
    """A field breaks its rule; the message names it."""


class NotFound(Error):
    """No such VM, host, or stats for the subject."""


class FailedPrecondition(Error):
    """The tenant's policy forbids the level, the VM belongs to another
    tenant, or the VM is on no host yet (ExplainVM)."""


class PermissionDenied(Error):
    """The caller's role is below the one the call needs; the message names
    both."""


class Unauthenticated(Error):
    """An unknown bearer token, or plaintext callers refused by csd."""


class ResourceExhausted(Error):
    """No host can take the VM (Place), or a write over the store's limits."""


class Unavailable(Error):
    """csd could not be reached, or the TLS handshake failed."""


class DeadlineExceeded(Error):
    """No answer within the call's timeout."""


_BY_CODE: dict[grpc.StatusCode, type[Error]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def from_rpc_error(error: grpc.RpcError) -> Error:
    """The Error for a failed call: the subclass of its code, else Error."""
    code = error.code()
    return _BY_CODE.get(code, Error)(code, error.details() or "")
