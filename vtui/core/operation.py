"""What a request for an operation on an instance (start, stop, restart, sleep, wake) can be answered
when another operation of that instance runs or waits: refused (`OperationConflict`, the API's 409) or
cut short by a stop (`OperationSuperseded`). The queue that decides lives in `supervisor.opqueue`."""

from __future__ import annotations

__all__ = ["OperationConflict", "OperationSuperseded"]


class OperationConflict(RuntimeError):
    """The request cannot run now because of another operation of the same instance (HTTP 409)."""


class OperationSuperseded(OperationConflict):
    """The request was accepted, then a stop of the instance came first: it did not run (in full)."""
