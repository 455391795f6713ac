"""One interpreter feed of an SFU room: the interpretation of one listen language, published into the Janus room
as ``interpreter-<lang>`` (audio only).

Its :class:`~rtc_agent.rtc.speech_output.SpeechOutput` (``speech``, what the room's pair interpreters write to)
lives as long as the feed; its :class:`~rtc_agent.rtc.sfu.FeedPublisher` lives as long as one Janus connection:
after a reconnect :meth:`InterpreterFeed.rebind` puts a new publisher on the new connection (same speech, a new
feed id once started). ``started`` says a start was asked of the current publisher.
"""

from __future__ import annotations

from typing import Any

from rtc_agent.rtc.sfu import FeedPublisher
from rtc_agent.rtc.speech_output import SpeechOutput

FEED_PREFIX = "interpreter-"


class InterpreterFeed:
    """The interpretation of ``language`` in the Janus room of ``bridge`` (an :class:`SfuBridge`)."""

    def __init__(self, bridge: Any, language: str) -> None:
        self.language = language
        self.speech = SpeechOutput(max_seconds=float(getattr(bridge.settings, "max_output_seconds", 120.0)))
        self.publisher = self._publisher(bridge)
        self.feed_id: int | None = None
        self.started = False

    def _publisher(self, bridge: Any) -> FeedPublisher:
        return FeedPublisher(bridge.client, bridge.room_id, self.speech, display=FEED_PREFIX + self.language,
                             token=bridge.own_token)

    async def start(self) -> int:
        """Publish on the current connection; the feed id. Raises JanusError. A publisher replaced meanwhile
        (:meth:`rebind`) leaves ``feed_id`` alone."""
        publisher = self.publisher
        feed_id = await publisher.start()
        if publisher is self.publisher:
            self.feed_id = feed_id
        return feed_id

    async def rebind(self, bridge: Any) -> None:
        """The bridge has a new Janus connection: the old publisher ends (never raises), a new one on the new
        connection waits to be started; the speech stays."""
        old = self.publisher
        self.publisher = self._publisher(bridge)
        self.feed_id = None
        self.started = False
        await old.close()

    async def close(self) -> None:
        self.speech.stop()
        await self.publisher.close()
