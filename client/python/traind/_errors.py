"""Errors: one exception class per canonical gRPC code, all TraindError."""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc


class TraindError(Exception):
    """A call to traind failed.

    `code` is the canonical gRPC status code (a grpc.StatusCode) and `message`
    traind's message, e.g. code INVALID_ARGUMENT and message
    'spec.model.layers[1].dense.units: the last layer has 4 units, ...'.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class CancelledError(TraindError):
    code = grpc.StatusCode.CANCELLED


class InvalidArgumentError(TraindError, ValueError):
    """A bad request: an invalid spec names the field path (and line)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(TraindError, TimeoutError):
    """No answer within the call's deadline, or Job.wait's timeout passed."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFoundError(TraindError, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(TraindError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(TraindError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(TraindError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(TraindError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(TraindError):
    code = grpc.StatusCode.ABORTED


class OutOfRangeError(TraindError):
    code = grpc.StatusCode.OUT_OF_RANGE


class UnimplementedError(TraindError):
    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(TraindError):
    code = grpc.StatusCode.INTERNAL


class UnavailableError(TraindError, ConnectionError):
    """traind cannot be reached (not running, wrong address, stream broken)."""

    code = grpc.StatusCode.UNAVAILABLE


class DataLossError(TraindError):
    code = grpc.StatusCode.DATA_LOSS


class UnauthenticatedError(TraindError):
    """A TCP address needs a bearer token (token=, TRAIND_TOKEN)."""

    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: Dict[grpc.StatusCode, Type[TraindError]] = {
    cls.code: cls
    for cls in (CancelledError, InvalidArgumentError, DeadlineExceededError, NotFoundError,
                AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError,
                FailedPreconditionError, AbortedError, OutOfRangeError, UnimplementedError,
                InternalError, UnavailableError, DataLossError, UnauthenticatedError)
}


def error_for(code: grpc.StatusCode, message: str) -> TraindError:
    """The TraindError subclass for `code`, carrying `message`."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return TraindError(message, code)
    return cls(message)
