"""A room transcript as WebVTT: one cue per final line, its translations as extra lines of the same cue.

The whole transcript (``language=None``)::

    WEBVTT

    NOTE room standup

    1
    00:00:01.200 --> 00:00:02.500
    <v Ana>Hola a todos</v>
    [en] Hello everyone
    [fr] Bonjour à tous

The source line carries the speaker as a WebVTT voice span; each translation follows on its own line as
``[xx] text`` (languages in code order). Plain lines are what every player shows (browsers' ``<track>``, VLC, mpv,
ffmpeg's WebVTT decoder): ``<lang xx>`` spans would carry the language as markup but display the same text
without saying which language it is, so the readable ``[xx]`` label is used instead.

One language (``language="en"``): one line per cue, the line's translation into that language where it has one,
its source text otherwise (a line spoken in that language is its own source); a ``NOTE language en`` block
after the room's says which.

Cues are in start order (WebVTT requires non-decreasing start times); a cue lasts at least 1 ms. Text is escaped
(``&``, ``<``, ``>``), so words such as ``-->`` or tags in speech cannot end a cue or open a span, and each text
is one line (its whitespace collapsed), so no blank line can end a cue early. Timestamps are the caption files'
(:func:`rtc_agent.apps.captions.export.timing`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Protocol

from rtc_agent.apps.captions.export import timing
from rtc_agent.errors import InvalidRequest

_LANGUAGE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})?")


class VttLine(Protocol):
    """What the renderer reads of a transcript line (``transcript.TranscriptLine`` has it)."""

    name: str
    language: str | None
    text: str
    start_ms: int
    end_ms: int
    translations: Mapping[str, str]


def check_transcript_language(value: object) -> str:
    """``value`` when it is a language tag (``en``, ``pt-BR``: 2-3 lower-case letters, an optional subtag); else
    ``InvalidRequest`` (``code="invalid_language"``, ``param="language"``)."""
    if isinstance(value, str) and _LANGUAGE.fullmatch(value):
        return value
    shown = repr(value)[:40]
    raise InvalidRequest(f"language must be a language code such as 'en' or 'pt-BR', got {shown}",
                         code="invalid_language", param="language")


def clean(text: str) -> str:
    """One line of cue text: WebVTT-escaped, whitespace collapsed."""
    return " ".join(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").split())


def _voiced(name: str, text: str) -> str:
    speaker = clean(name)
    return f"<v {speaker}>{clean(text)}</v>" if speaker else clean(text)


def _cue_text(line: VttLine, language: str | None) -> list[str]:
    if language is not None:
        translated = line.translations.get(language, "").strip()
        return [_voiced(line.name, translated or line.text)]
    out = [_voiced(line.name, line.text)]
    for code in sorted(line.translations):
        if code != line.language and line.translations[code].strip():
            out.append(f"[{clean(code)}] {clean(line.translations[code])}")
    return out


def render_vtt(room: str, lines: Iterable[VttLine], language: str | None = None) -> str:
    """The WebVTT file of ``room``'s ``lines`` (see the module): all translations, or only ``language``."""
    out = ["WEBVTT", "", f"NOTE room {clean(room)}", ""]
    if language is not None:
        out += [f"NOTE language {clean(language)}", ""]
    cue = 0
    for line in sorted(lines, key=lambda x: x.start_ms):
        if not clean(line.text):
            continue
        cue += 1
        out += [str(cue), timing(line.start_ms, line.end_ms), *_cue_text(line, language), ""]
    return "\n".join(out)
