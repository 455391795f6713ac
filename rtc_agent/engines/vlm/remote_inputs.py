"""What waits to be sent to a remote realtime service: frames, the oldest one without a prompt dropped when the
queue is full (as the reference session drops frames), and prompts, never dropped (at most :data:`MAX_PROMPTS`)."""

from __future__ import annotations

import collections
import queue
from typing import Any, Literal

__all__ = ["MAX_PROMPTS", "PendingInput", "PendingInputs"]

MAX_PROMPTS = 16

PendingInput = tuple[Literal["frame", "prompt"], Any, str | None, float | None]
"""``(kind, image, prompt, timestamp)``: a frame (its prompt or ``None``) or a prompt (no image, no timestamp)."""


class PendingInputs:
    """The inputs a remote session has not sent yet, in arrival order.

    Not thread-safe: the session holds its lock around every call (``len()`` alone may be read without it).
    """

    def __init__(self, frame_limit: int) -> None:
        self.frame_limit = frame_limit
        self.frames = 0
        self.prompts = 0
        self._items: collections.deque[PendingInput] = collections.deque()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def frames_full(self) -> bool:
        return self.frames >= self.frame_limit

    def check_prompt_room(self) -> None:
        """Raise ``queue.Full`` when :data:`MAX_PROMPTS` prompts wait already."""
        if self.prompts >= MAX_PROMPTS:
            raise queue.Full("too many prompts waiting")

    def add_prompt(self, prompt: str) -> None:
        self.check_prompt_room()
        self._items.append(("prompt", None, prompt, None))
        self.prompts += 1

    def add_frame(self, image: Any, prompt: str | None, timestamp: float | None) -> bool:
        """Queue a frame; True when the queue was full and its oldest frame without a prompt was dropped (frames
        with a prompt are never dropped, so a queue of those grows past the limit)."""
        dropped = False
        if self.frames_full:
            for i, item in enumerate(self._items):
                if item[0] == "frame" and item[2] is None:
                    del self._items[i]
                    self.frames -= 1
                    dropped = True
                    break
        self._items.append(("frame", image, prompt, timestamp))
        self.frames += 1
        if prompt is not None:
            self.prompts += 1
        return dropped

    def pop(self) -> PendingInput | None:
        """The oldest input, or ``None`` when nothing waits."""
        if not self._items:
            return None
        item = self._items.popleft()
        if item[0] == "frame":
            self.frames -= 1
        if item[2] is not None:
            self.prompts -= 1
        return item
