"""The vision engine contract: :class:`VLMEngine` (the worker contract plus :meth:`~VLMEngine.open_session`), what
a session is opened with (:class:`SessionOptions`) and the one-active-session-per-model-instance rule
(:class:`SessionSlot`, :class:`SessionBusy`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtc_agent.engines.vlm.session import VisionSession
from rtc_agent.errors import EngineError

__all__ = ["ENGINE_NAME", "SessionBusy", "SessionOptions", "SessionSlot", "VLMEngine"]

ENGINE_NAME = "vlm"


class SessionBusy(RuntimeError):
    """The model instance already runs an active realtime session (one per instance)."""


class SessionSlot:
    """The one-active-session-per-model-instance rule, held by a backend.

    ``acquire()`` raises :class:`SessionBusy` while another session holds the slot; ``release()`` is idempotent
    per acquisition (the session calls it when its loop ends).
    """

    def __init__(self, what: str = "model") -> None:
        self.what = what
        self._lock = threading.Lock()
        self._holder: object | None = None

    @property
    def busy(self) -> bool:
        return self._holder is not None

    def acquire(self, holder: object) -> Callable[[], None]:
        """Take the slot for ``holder``; returns the release function."""
        with self._lock:
            if self._holder is not None:
                raise SessionBusy(f"this {self.what} already has an active realtime session")
            self._holder = holder

        def release() -> None:
            with self._lock:
                if self._holder is holder:
                    self._holder = None

        return release


@dataclass(frozen=True)
class SessionOptions:
    """What a realtime session is opened with (the reference service's ``start`` fields).

    - ``initial_prompt``: the user prompt before any frame (the standing commentary instruction).
    - ``system_prompt``: ``None`` = the backend's default (the reference system prompt).
    - ``frame_queue_size``: frames waiting for the model, at most; the oldest is dropped beyond.
    - ``max_tokens_per_turn``: the decode rate cap in tokens per second (the reference service's default is 12).
    - ``max_new_tokens``: tokens decoded after one input before the loop parks without ``<|silence|>``.
    """

    initial_prompt: str = ""
    system_prompt: str | None = None
    frame_queue_size: int = 8
    max_tokens_per_turn: int = 12
    max_new_tokens: int = 128

    def __post_init__(self) -> None:
        if self.frame_queue_size < 1:
            raise ValueError("frame_queue_size must be at least 1")
        if self.max_tokens_per_turn < 1:
            raise ValueError("max_tokens_per_turn must be at least 1")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")


class VLMEngine:
    """Base of the vision engines: the worker contract plus :meth:`open_session`.

    Subclasses implement :meth:`load` and :meth:`_open` (build a session; called with the slot already taken)
    and may override :meth:`close` and :meth:`describe`. The worker never batches calls to a vision engine:
    sessions are the way in, so :meth:`run_batch` answers every request with an error.
    """

    kind = "vlm"

    def __init__(self) -> None:
        self.slot = SessionSlot(f"{type(self).__name__} instance")
        self.loaded = False

    def load(self, progress: Callable[[str], None]) -> None:
        self.loaded = True
        progress("ready")

    def run_batch(self, requests: list[Any]) -> list[Any]:
        err = EngineError("the vision engine serves realtime sessions only (open_session)", code="unsupported")
        return [err for _ in requests]

    def open_session(self, options: SessionOptions | None = None) -> VisionSession:
        """A new (not yet started) realtime session. Blocking (a remote backend may connect here).

        Raises :class:`SessionBusy` while another session of this instance is
        active; the session frees the instance when it closes.
        """
        if not self.loaded:
            raise RuntimeError(f"{type(self).__name__} is not loaded")
        options = options or SessionOptions()
        release = self.slot.acquire(options)
        try:
            return self._open(options, release)
        except BaseException:
            release()
            raise

    def _open(self, options: SessionOptions, release: Callable[[], None]) -> VisionSession:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What the engine is, for ``session.created`` and logs."""
        return {"backend": type(self).__name__}

    def close(self) -> None:
        self.loaded = False
