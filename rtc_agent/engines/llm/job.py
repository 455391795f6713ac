"""What the worker hands a chat engine: a :class:`ChatJob` (the request, its sink and its :class:`CancelToken`).

Cancellation is a :class:`CancelToken` (a ``threading.Event`` plus callbacks): the embedded engine checks it
between tokens, the remote engine registers a callback that shuts its socket down, so a blocked read returns at
once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rtc_agent.engines.llm.messages import ChatDelta, ChatRequest

log = logging.getLogger(__name__)


class CancelToken:
    """A thread-safe, one-shot cancel signal with callbacks.

    ``cancel()`` may be called from any thread, any number of times; callbacks registered with ``on_cancel`` run
    once, in the cancelling thread (or at once when already cancelled). Callbacks must be quick and must not
    raise (exceptions are logged and swallowed).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _call_quietly(callback)

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` on cancel; returns a function that unregisters it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)

                def remove() -> None:
                    with self._lock, contextlib.suppress(ValueError):
                        self._callbacks.remove(callback)

                return remove
        _call_quietly(callback)
        return lambda: None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout``; True when cancelled."""
        return self._event.wait(timeout)


def _call_quietly(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("cancel callback failed")


@dataclass(eq=False)
class ChatJob:
    """What the worker hands a chat engine: the request, its cancel token, and an optional ``sink`` that receives
    every delta in the engine thread (it may block for backpressure). ``started`` is set when the engine begins
    the job, so a caller knows whether cancelling the worker call alone would suffice."""

    request: ChatRequest
    cancel: CancelToken = field(default_factory=CancelToken)
    sink: Callable[[ChatDelta], None] | None = None
    started: threading.Event = field(default_factory=threading.Event)
