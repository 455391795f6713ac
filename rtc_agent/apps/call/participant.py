"""One participant of a call room: who it is, what it wants, and how the room reaches its session."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from rtc_agent.apps.base import AppContext
from rtc_agent.apps.call.signal_relay import SignalBucket
from rtc_agent.protocol import ServerEvent

log = logging.getLogger(__name__)


@dataclass
class Participant:
    """One participant: its session context (``ctx``: emit, speech, spawn, now_ms, settings, worker), its
    languages (``language`` spoken, ``listen_language`` read and heard) and what it asked for."""

    id: str
    name: str
    language: str
    listen_language: str
    ctx: AppContext
    captions: bool = True
    interpret: bool = True
    listen_speech: bool = True  # false: translations as text only, no synthesis for this listener
    mic_muted: bool = False
    camera_muted: bool = False
    joined_at: float = field(default_factory=time.time)
    bucket: SignalBucket = field(default_factory=SignalBucket)  # its room.signal rate
    joined_mono: float = field(default_factory=time.monotonic)

    @property
    def hears_speech(self) -> bool:
        """Whether interpretation is spoken on its track (it asked for it, and its session can receive audio)."""
        return self.interpret and self.listen_speech and self.ctx.speech is not None

    @property
    def tag(self) -> dict[str, str]:
        """How events name this participant as their ``speaker``."""
        return {"participant_id": self.id, "name": self.name}

    def public(self) -> dict[str, Any]:
        """What the other participants see of it (``room.joined``, ``room.participant.*``)."""
        return {"participant_id": self.id, "name": self.name, "language": self.language,
                "listen_language": self.listen_language, "mic_muted": self.mic_muted,
                "camera_muted": self.camera_muted, "interpret": self.interpret,
                "listen_speech": self.listen_speech}

    def send(self, event: ServerEvent) -> None:
        """``event`` to its session; never raises (one dead channel must not stop a fan-out)."""
        try:
            self.ctx.emit(event)
        except Exception:
            log.exception("sending %s to participant %s failed", event.type, self.id)
