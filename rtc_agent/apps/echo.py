"""The ``echo`` diagnostic: plays the caller's audio back after a fixed delay.

It proves the whole media path (microphone -> AudioInput -> app -> SpeechOutput -> the peer's speaker) with no
model in between. The delay is a head of silence on one long utterance, so the echo keeps a constant lag.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rtc_agent.apps.base import App, AppContext, UtteranceHandle
from rtc_agent.apps.limits import show_keys
from rtc_agent.errors import InvalidRequest
from rtc_agent.protocol import ClientEvent
from rtc_agent.protocol.events import SessionUpdate, SessionUpdated

SAMPLE_RATE = 16000
MAX_DELAY_S = 10.0


class EchoApp(App):
    name = "echo"
    title = "Echo (diagnostic)"
    description = "Plays your microphone back after a delay: checks the audio path both ways."

    @classmethod
    def validate_config(cls, config: dict[str, Any], settings: Any) -> dict[str, Any]:
        """``{"delay_s": seconds}``, 0 to ``MAX_DELAY_S`` (default: the ``echo_delay_s`` setting)."""
        unknown = set(config) - {"delay_s"}
        if unknown:
            raise InvalidRequest(f"unknown echo config keys: {show_keys(unknown)}", code="invalid_config")
        delay = config.get("delay_s", settings.echo_delay_s if settings is not None else 1.0)
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= MAX_DELAY_S:
            raise InvalidRequest(f"delay_s must be a number from 0 to {MAX_DELAY_S}", code="invalid_config")
        return {"delay_s": float(delay)}

    def __init__(self, ctx: AppContext, config: dict[str, Any]) -> None:
        super().__init__(ctx, config)
        self.delay_s: float = config["delay_s"]
        self.utterance: UtteranceHandle | None = None
        self.echoed_ms = 0
        self.dropped_ms = 0

    async def start(self) -> None:
        self._open_utterance()

    def _open_utterance(self) -> None:
        if self.ctx.speech is None:
            return
        self.utterance = self.ctx.speech.start_utterance(SAMPLE_RATE, utterance_id="echo")
        self.utterance.write(np.zeros(int(self.delay_s * SAMPLE_RATE), dtype=np.int16))

    def on_audio(self, pcm: np.ndarray, start_ms: int) -> None:
        if self.utterance is None:
            return
        try:
            self.utterance.write(pcm)
            self.echoed_ms += pcm.size * 1000 // SAMPLE_RATE
        except Exception:
            self.dropped_ms += pcm.size * 1000 // SAMPLE_RATE

    async def on_event(self, event: ClientEvent) -> None:
        if isinstance(event, SessionUpdate):
            update = event.session.get("config", event.session)
            if not isinstance(update, dict):
                raise InvalidRequest("session.update needs an object of settings", code="invalid_config")
            self.delay_s = self.validate_config({"delay_s": self.delay_s, **update}, None)["delay_s"]
            if self.ctx.speech is not None:
                self.ctx.speech.clear()
            self._open_utterance()
            self.ctx.emit(SessionUpdated(session={"config": {"delay_s": self.delay_s}}))
            return
        await super().on_event(event)

    def stats(self) -> dict[str, Any]:
        return {"delay_s": self.delay_s, "echoed_ms": self.echoed_ms, "dropped_ms": self.dropped_ms}

    async def close(self) -> None:
        if self.utterance is not None:
            self.utterance.finish()
