"""A model's own realtime session (MOSS-VL-Realtime's ``create_realtime_session``) behind this project's session
API."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from rtc_agent.engines.vlm.images import to_pil
from rtc_agent.engines.vlm.outputs import ChunkParser
from rtc_agent.engines.vlm.session import VisionSessionBase

__all__ = ["MossNativeSession"]


class MossNativeSession(VisionSessionBase):
    """The model's own ``create_realtime_session`` session (MOSS-VL-Realtime) behind this project's API.

    Frames are checked (non-decreasing timestamps, the reference's message), converted to PIL images and pushed
    with explicit timestamps; a pump thread turns the reference's raw output strings into
    :class:`~rtc_agent.engines.vlm.outputs.VisionOutput` items (``frame_ts`` is the newest frame pushed).
    """

    def __init__(self, inner: Any, *, on_close: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.inner = inner
        self._on_close = on_close
        self._parser = ChunkParser()
        self._prompts: collections.deque[str] = collections.deque()
        self._frame_ts: float | None = None
        self._pump: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    @property
    def active(self) -> bool:
        return bool(self.inner.active) and not self._done.is_set()

    @property
    def pending_frames(self) -> int:
        return int(self.inner.pending_frames)

    def start(self) -> MossNativeSession:
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError("Cannot start a closed realtime session")
            if self._pump is not None:
                return self
            self._started_at = self._clock()
            self.inner.start()
            self._pump = threading.Thread(target=self._run, name="vision-moss-native", daemon=True)
            self._pump.start()
        return self

    def push_frame(self, image: Any, timestamp: float | None = None, *, drop_oldest: bool = True) -> bool:
        self._admit_frame(image, self._pump is not None)
        ts = self._frame_timestamp(timestamp)
        dropped = bool(self.inner.push_frame(to_pil(image), timestamp=ts, drop_oldest=drop_oldest))
        self._frame_ts = ts
        self.counters["frames_pushed"] += 1
        self.counters["frames_dropped"] += int(dropped)
        return dropped

    def push_prompt(self, prompt: str) -> None:
        prompt = self._admit_prompt(prompt, self._pump is not None)
        self._prompts.append(prompt)
        self.inner.push_prompt(prompt)

    def push_prompt_frame(self, prompt: str, image: Any, timestamp: float | None = None, *,
                          drop_oldest: bool = True) -> bool:
        prompt = self._admit_prompt(prompt, self._pump is not None)
        ts = self._frame_timestamp(timestamp)
        self._prompts.append(prompt)
        dropped = bool(self.inner.push_prompt_frame(prompt, to_pil(image), ts, drop_oldest=drop_oldest))
        self._frame_ts = ts
        return dropped

    def _run(self) -> None:
        try:
            while True:
                chunk = self.inner.poll_output(timeout=0.1)
                if chunk is None:
                    if not self.inner.active:
                        break
                    continue
                for piece, text in self._parser.feed(str(chunk)):
                    self._piece(piece, text)
            for piece, text in self._parser.flush():
                self._piece(piece, text)
            self._put(self._rounds.end(self._frame_ts), self._stop)
        except Exception as exc:
            self._error = exc
            self._put(self._rounds.end(self._frame_ts, error=f"{type(exc).__name__}: {exc}"), self._stop)
        finally:
            on_close, self._on_close = self._on_close, None
            if on_close is not None:
                on_close()
            self._done.set()
            self._notify()

    def _piece(self, piece: str, text: str) -> None:
        self._put_piece(piece, text, self._frame_ts, self._prompts, self._stop)

    def close(self, timeout: float | None = 5.0) -> None:
        self._closed.set()
        close_error: BaseException | None = None
        try:
            self.inner.close(timeout)
        except TimeoutError:
            raise
        except Exception as exc:  # the reference re-raises a generation failure on close
            close_error = exc
        self._stop.set()
        pump = self._pump
        if pump is None:
            if not self._done.is_set():
                on_close, self._on_close = self._on_close, None
                if on_close is not None:
                    on_close()
                self._done.set()
            return
        pump.join(timeout=timeout)
        if pump.is_alive():
            raise TimeoutError("the realtime session's output pump did not stop before the timeout")
        if close_error is not None and self._error is None:
            self._error = close_error
        self._raise_if_failed()
