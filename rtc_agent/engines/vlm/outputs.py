"""What a vision session produces: :class:`VisionOutput` items, their reference string form, the round
bookkeeping (:class:`RoundTracker`) and the parser of raw model output chunks (:class:`ChunkParser`)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Literal

from rtc_agent.engines.vlm.chat_format import HIDDEN_TOKENS, ROUND_END, ROUND_START, SILENCE

log = logging.getLogger(__name__)

__all__ = ["ChunkParser", "OutputKind", "RoundTracker", "VisionOutput", "render_output"]

OutputKind = Literal["round_start", "text", "silence", "round_end"]


@dataclass(frozen=True, slots=True)
class VisionOutput:
    """One output of a vision session.

    - ``kind``: ``round_start`` | ``text`` | ``silence`` | ``round_end``.
    - ``text``: the delta (``text`` items; whole characters only).
    - ``round``: the round number (1, 2, ...) for ``round_*`` and ``text`` items; ``None`` for ``silence`` and
      for the ``round_end`` of an error that happened outside any round.
    - ``prompted``: the round was opened by a prompt (``False``: spontaneous commentary).
    - ``prompt``: the prompt of a prompted round (``round_start`` items).
    - ``frame_ts``: timestamp (seconds) of the newest frame in the model's context when this was produced.
    - ``error``: set on the ``round_end`` that an error caused.
    """

    kind: OutputKind
    text: str = ""
    round: int | None = None
    prompted: bool = False
    prompt: str | None = None
    frame_ts: float | None = None
    error: str | None = None


def render_output(item: VisionOutput) -> str | None:
    """The reference string form of an output, or ``None`` for items the reference does not emit (the round
    markers of spontaneous commentary)."""
    if item.kind == "text":
        return item.text
    if item.kind == "silence":
        return SILENCE
    if item.kind == "round_start":
        return ROUND_START if item.prompted else None
    return ROUND_END if (item.prompted or item.error is not None) else None


class RoundTracker:
    """Round bookkeeping shared by every session kind: turns prompts, text, silences and errors into
    :class:`VisionOutput` items.

    A round opens on a prompt (prompted) or on text outside any round (spontaneous). It ends when the model goes
    silent after having said something in it, when the next prompt opens a new round, on an error and at close.
    Not thread-safe: one producer thread calls it.
    """

    def __init__(self) -> None:
        self._counter = 0
        self._round: int | None = None
        self._prompted = False
        self._has_text = False

    @property
    def open_round(self) -> int | None:
        return self._round

    def prompt(self, prompt: str, frame_ts: float | None) -> list[VisionOutput]:
        out = self._close(frame_ts)
        out.append(self._open(prompt, True, frame_ts))
        return out

    def text(self, text: str, frame_ts: float | None) -> list[VisionOutput]:
        out: list[VisionOutput] = []
        if not text:
            return out
        if self._round is None:
            out.append(self._open(None, False, frame_ts))
        self._has_text = True
        out.append(VisionOutput("text", text=text, round=self._round, prompted=self._prompted, frame_ts=frame_ts))
        return out

    def silence(self, frame_ts: float | None) -> list[VisionOutput]:
        out = [VisionOutput("silence", frame_ts=frame_ts)]
        if self._round is not None and self._has_text:
            out += self._close(frame_ts)
        return out

    def end(self, frame_ts: float | None, error: str | None = None) -> list[VisionOutput]:
        """Close the open round (if any); an error always yields a ``round_end``."""
        if self._round is None:
            return [VisionOutput("round_end", frame_ts=frame_ts, error=error)] if error is not None else []
        return self._close(frame_ts, error)

    def _open(self, prompt: str | None, prompted: bool, frame_ts: float | None) -> VisionOutput:
        self._counter += 1
        self._round, self._prompted, self._has_text = self._counter, prompted, False
        return VisionOutput("round_start", round=self._round, prompted=prompted, prompt=prompt, frame_ts=frame_ts)

    def _close(self, frame_ts: float | None, error: str | None = None) -> list[VisionOutput]:
        if self._round is None:
            return []
        item = VisionOutput("round_end", round=self._round, prompted=self._prompted, frame_ts=frame_ts,
                            error=error)
        self._round, self._prompted, self._has_text = None, False, False
        return [item]


_CONTROL_RE = re.compile(r"<\|[A-Za-z0-9_.]+\|>")
_PARTIAL_CONTROL_RE = re.compile(r"<(?:\|[A-Za-z0-9_.]*(?:\|)?)?$")


class ChunkParser:
    """Splits raw model output chunks (text mixed with control tokens, as the reference session and the MOSS
    service yield them) into ``("text", s)``, ``("silence", "")``, ``("round_start", "")`` and
    ``("round_end", "")`` pieces. Hidden tokens (``<|response|>``, ``<|...|>``, ...) are dropped; a control
    token split across chunks is held back (at most a few characters) until it completes."""

    def __init__(self) -> None:
        self._carry = ""

    def feed(self, chunk: str) -> list[tuple[str, str]]:
        data = self._carry + chunk
        self._carry = ""
        tail = _PARTIAL_CONTROL_RE.search(data)
        if tail is not None and len(data) - tail.start() <= 24:
            self._carry = data[tail.start():]
            data = data[:tail.start()]
        return self._split(data)

    def flush(self) -> list[tuple[str, str]]:
        data, self._carry = self._carry, ""
        return self._split(data)

    @staticmethod
    def _split(data: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        pos = 0
        for m in _CONTROL_RE.finditer(data):
            if m.start() > pos:
                out.append(("text", data[pos:m.start()]))
            token = m.group(0)
            if token == SILENCE:
                out.append(("silence", ""))
            elif token == ROUND_START:
                out.append(("round_start", ""))
            elif token == ROUND_END:
                out.append(("round_end", ""))
            elif token not in HIDDEN_TOKENS:
                log.debug("dropping unknown control token %s from model output", token)
            pos = m.end()
        if pos < len(data):
            out.append(("text", data[pos:]))
        return [piece for piece in out if piece[0] != "text" or piece[1]]
