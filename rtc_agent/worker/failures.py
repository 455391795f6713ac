"""The errors a worker call can end in, besides ``AtCapacity``: an unknown engine, a closed worker, and an
engine's own failure wrapped for one request."""

from __future__ import annotations

from rtc_agent.errors import AgentError, EngineError


class UnknownEngine(AgentError, KeyError):
    """No engine of that name is registered (``code="unknown_engine"``); also a ``KeyError``."""

    type = "invalid_request_error"
    code = "unknown_engine"
    status = 404

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


def closed_error(name: str) -> EngineError:
    """``EngineError(code="worker_closed")`` for a request to engine ``name`` after (or during) close."""
    return EngineError(f"engine {name!r}: the worker is closed", code="worker_closed")


def engine_failure(name: str, exc: BaseException) -> EngineError:
    """A fresh ``EngineError`` for one request, with ``exc`` as its ``__cause__``.

    An ``EngineError`` raised by the engine keeps its code and message (e.g. a remote engine's
    ``engine_timeout``); anything else becomes ``code="engine_error"``.
    """
    if isinstance(exc, EngineError):
        err = EngineError(exc.message, code=exc.code, status=exc.status, retry_after=exc.retry_after)
    else:
        err = EngineError(f"engine {name!r} failed: {type(exc).__name__}: {exc}", code="engine_error")
    err.__cause__ = exc
    return err
