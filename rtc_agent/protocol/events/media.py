"""The server events of the media apps: speech activity and output audio, captions, visual commentary and
interpretation."""

from __future__ import annotations

from typing import Literal

from rtc_agent.protocol.events.base import ServerEvent

# --- audio activity and output ---------------------------------------------------------------------------------

class SpeechStarted(ServerEvent):
    type: Literal["input_audio_buffer.speech_started"] = "input_audio_buffer.speech_started"
    audio_start_ms: int
    item_id: str | None = None


class SpeechStopped(ServerEvent):
    type: Literal["input_audio_buffer.speech_stopped"] = "input_audio_buffer.speech_stopped"
    audio_end_ms: int
    item_id: str | None = None


class OutputAudioStarted(ServerEvent):
    """An utterance started playing on the outgoing track."""

    type: Literal["output_audio_buffer.started"] = "output_audio_buffer.started"
    utterance_id: str
    response_id: str | None = None


class OutputAudioStopped(ServerEvent):
    """An utterance finished or was cleared; ``sent_ms`` is how much of it the peer actually got."""

    type: Literal["output_audio_buffer.stopped"] = "output_audio_buffer.stopped"
    utterance_id: str
    sent_ms: int
    cleared: bool = False
    response_id: str | None = None


# --- captions --------------------------------------------------------------------------------------------------

class CaptionPartial(ServerEvent):
    """``committed`` never changes once sent; ``tentative`` may. ``behind_ms``: audio received after
    ``audio_end_ms`` by the time this was sent (decodes falling behind show here)."""

    type: Literal["caption.partial"] = "caption.partial"
    segment_id: str
    committed: str
    tentative: str
    audio_start_ms: int
    audio_end_ms: int
    language: str | None = None
    behind_ms: int | None = None
    speaker: dict[str, str] | None = None  # app ``call``: {participant_id, name} of who spoke


class CaptionFinal(ServerEvent):
    type: Literal["caption.final"] = "caption.final"
    segment_id: str
    text: str
    audio_start_ms: int
    audio_end_ms: int
    language: str | None = None
    behind_ms: int | None = None
    speaker: dict[str, str] | None = None
    replayed: bool = False  # app ``call``: sent to a late joiner from the room's transcript (not said just now)


class CaptionTranslation(ServerEvent):
    """App ``call``: a speaker's caption translated into a listener's ``listen_language`` (computed once per
    (speaker, language) and sent to every listener of that language). ``segment_id`` is the speaker's caption
    segment the text belongs to; pieces of one segment arrive in order."""

    type: Literal["caption.translation"] = "caption.translation"
    segment_id: str
    speaker: dict[str, str]
    language: str
    text: str
    audio_start_ms: int | None = None
    audio_end_ms: int | None = None
    source_text: str | None = None  # the speaker's words this translates (the segment's caption, as far as known)
    source_language: str | None = None
    route: Literal["speech", "text"] | None = None  # speech translation of the audio, or text translation of finals
    engine: str | None = None
    lag_ms: int | None = None  # how far behind the speaker this text came (speaker's clock, ms)
    replayed: bool = False  # sent to a late joiner from the room's transcript


# --- visual commentary -----------------------------------------------------------------------------------------

class VisionRoundStarted(ServerEvent):
    type: Literal["vision.round.started"] = "vision.round.started"
    round_id: str
    prompt: str | None = None


class VisionTextDelta(ServerEvent):
    type: Literal["vision.text.delta"] = "vision.text.delta"
    round_id: str
    delta: str
    frame_ts: float | None = None


class VisionSilence(ServerEvent):
    type: Literal["vision.silence"] = "vision.silence"
    frame_ts: float | None = None


class VisionRoundEnded(ServerEvent):
    type: Literal["vision.round.ended"] = "vision.round.ended"
    round_id: str


class VisionFrameDropped(ServerEvent):
    type: Literal["vision.frame.dropped"] = "vision.frame.dropped"
    frame_ts: float | None = None
    dropped: int = 1


# --- interpretation --------------------------------------------------------------------------------------------

class TranslationChunk(ServerEvent):
    type: Literal["translation.chunk"] = "translation.chunk"
    index: int
    action: Literal["EMIT", "WAIT", "SKIP"]
    text: str
    source_text: str | None = None
    audio_start_ms: int
    audio_end_ms: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stop_reason: str | None = None
    st_attempted: bool = False
    latency_ms: float | None = None
    speaker: dict[str, str] | None = None  # app ``call``: whose speech this interprets
    source_language: str | None = None  # the spoken language (chosen, or detected by Whisper once it is sure)


class TranslationFlush(ServerEvent):
    type: Literal["translation.flush"] = "translation.flush"
    trigger: Literal["empty_chunks", "silence", "end", "cut"]
    text: str
    audio_start_ms: int | None = None
    audio_end_ms: int | None = None
    speaker: dict[str, str] | None = None


class TranslationReset(ServerEvent):
    type: Literal["translation.reset"] = "translation.reset"
    reason: Literal["length", "budget", "window"]


class TranslationSpeechCatchup(ServerEvent):
    """The spoken translation fell behind and is catching up (or is back to normal).

    ``lag_ms``: how far behind the source the next speech would be heard; ``speed``: the TTS speed now (1.0 =
    normal); ``skipped_text``: text not spoken (``skip``); ``audio_end_ms``: the source position of that text.
    """

    type: Literal["translation.speech.catchup"] = "translation.speech.catchup"
    action: Literal["speed", "skip", "normal", "drop", "fallback"]
    lag_ms: int
    speed: float = 1.0
    skipped_text: str = ""
    audio_end_ms: int | None = None
    speaker: dict[str, str] | None = None  # app ``call``: whose interpretation
    segment_id: str | None = None
    #: ``fallback``: the text at ``audio_end_ms`` was that late, and a cheaper voice (espeak-ng) speaks it, at
    #: ``speed``, instead of skipping it.
    #: ``drop`` (app ``call``): the interpretation fell so far behind that this caption was not translated at all
    #: (``skipped_text`` is its source text); ``reason``: ``behind`` or ``muted`` (the speaker muted: its pending
    #: captions go first).
    reason: str | None = None


class TranslationSpeechStarted(ServerEvent):
    """Spoken interpretation of one text is queued on this session's audio track: it starts playing after
    ``starts_in_ms`` of speech already queued ahead of it (``utterance_id`` matches the first
    ``output_audio_buffer.started`` of it). Pages duck the original voice of ``speaker`` from then until
    ``translation.speech.done``. ``engine``: the worker engine whose voice speaks it (``tts``: the configured
    voice, ``tts-kokoro``, ``tts-espeak``)."""

    type: Literal["translation.speech.started"] = "translation.speech.started"
    utterance_id: str
    starts_in_ms: int = 0
    text: str = ""
    language: str | None = None
    segment_id: str | None = None
    speaker: dict[str, str] | None = None
    engine: str | None = None


class TranslationSpeechDone(ServerEvent):
    """The spoken interpretation that ``translation.speech.started`` announced has played (or was cut:
    ``cleared``); ``sent_ms``: how much of it was sent."""

    type: Literal["translation.speech.done"] = "translation.speech.done"
    utterance_id: str
    sent_ms: int = 0
    cleared: bool = False
    language: str | None = None
    segment_id: str | None = None
    speaker: dict[str, str] | None = None
