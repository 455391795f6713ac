"""Transcripts as WebVTT with their translations (issue 22, item 6).

The room transcript's VTT (``GET /v1/rooms/{room}/transcript.vtt``) carries each line's translations as extra cue
lines (``[en] Hello``), and ``?language=xx`` gives one language (the translation where present, the source
otherwise); the /captions and /interpret pages' VTT downloads carry the translations they have. Every file is
parsed: a WebVTT header, well-formed cues, start times in order, and the translations where they belong.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from rtc_agent.apps.call.transcript import Transcript, TranscriptLine
from rtc_agent.apps.call.transcript_vtt import check_transcript_language, render_vtt
from rtc_agent.errors import InvalidRequest
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack
from rtc_agent.worker import Worker
from tests.browser import browser_test, chromium_page, serve
from tests.fakes import ScriptedASR, ScriptedMT, ScriptedVAD, loud_above, register

TIMING = re.compile(r"(\d{2,}):(\d{2}):(\d{2})\.(\d{3}) --> (\d{2,}):(\d{2}):(\d{2})\.(\d{3})")
TRANSLATION = re.compile(r"\[([a-z]{2,3}(?:-[A-Za-z0-9]{2,8})?)\] (.+)")


@dataclass
class Cue:
    start_ms: int
    end_ms: int
    lines: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        return self.lines[0]

    @property
    def translations(self) -> dict[str, str]:
        found = (TRANSLATION.fullmatch(line) for line in self.lines[1:])
        return {m.group(1): m.group(2) for m in found if m}


def _ms(h: str, m: str, s: str, frac: str) -> int:
    return ((int(h) * 60 + int(m)) * 60 + int(s)) * 1000 + int(frac)


def parse_vtt(text: str) -> list[Cue]:
    """The cues of a WebVTT file, asserting what a player needs: the ``WEBVTT`` signature, blocks separated by
    blank lines, each cue an optional identifier, one timing line and at least one text line without ``-->``,
    start times in non-decreasing order, every cue ending after it starts."""
    assert text.startswith("WEBVTT") and text[6:7] in ("", "\n"), text[:40]
    blocks = [b for b in re.split(r"\n{2,}", text.strip("\n"))]
    assert blocks[0].split("\n")[0] == "WEBVTT"
    cues: list[Cue] = []
    for block in blocks[1:]:
        rows = block.split("\n")
        if rows[0].startswith("NOTE"):
            assert "-->" not in block, block
            continue
        if "-->" not in rows[0]:
            rows = rows[1:]  # the cue identifier
        timing = TIMING.fullmatch(rows[0])
        assert timing, f"bad timing line in {block!r}"
        cue = Cue(_ms(*timing.groups()[:4]), _ms(*timing.groups()[4:]), rows[1:])
        assert cue.lines and all(line.strip() and "-->" not in line for line in cue.lines), block
        assert cue.end_ms > cue.start_ms, block
        if cues:
            assert cue.start_ms >= cues[-1].start_ms, "cue start times must not go back"
        cues.append(cue)
    return cues


def line(segment: str, name: str, language: str, text: str, start_ms: int, end_ms: int,
         **translations: str) -> TranscriptLine:
    return TranscriptLine(segment_id=segment, participant_id=name.lower(), name=name, language=language, text=text,
                          start_ms=start_ms, end_ms=end_ms, at=0.0, translations=dict(translations))


LINES = [
    line("b1", "Ben", "en", "The build is green.", 4_000, 5_200, es="La compilación está en verde.",
         de="Der Build ist grün."),
    line("a1", "Ana", "es", "Hola a todos.", 1_200, 2_500, en="Hello everyone.", de="Hallo zusammen."),
    line("a2", "Ana", "es", "¿Empezamos?", 6_000, 6_000),  # no translation yet; a zero-length line
]


def test_every_translation_is_an_extra_line_of_its_cue():
    cues = parse_vtt(render_vtt("standup", LINES))
    assert [c.source for c in cues] == ["<v Ana>Hola a todos.</v>", "<v Ben>The build is green.</v>",
                                        "<v Ana>¿Empezamos?</v>"]  # in start order, the speaker as a voice span
    assert cues[0].translations == {"de": "Hallo zusammen.", "en": "Hello everyone."}
    assert cues[0].lines[1:] == ["[de] Hallo zusammen.", "[en] Hello everyone."]  # languages in code order
    assert cues[1].translations == {"de": "Der Build ist grün.", "es": "La compilación está en verde."}
    assert cues[2].lines == ["<v Ana>¿Empezamos?</v>"] and cues[2].end_ms == 6_001
    assert (cues[0].start_ms, cues[0].end_ms) == (1_200, 2_500)


def test_one_language_takes_the_translation_where_present_and_the_source_otherwise():
    text = render_vtt("standup", LINES, language="en")
    assert "NOTE language en" in text
    cues = parse_vtt(text)
    assert [c.lines for c in cues] == [["<v Ana>Hello everyone.</v>"], ["<v Ben>The build is green.</v>"],
                                       ["<v Ana>¿Empezamos?</v>"]]
    german = parse_vtt(render_vtt("standup", LINES, language="de"))
    assert [c.lines[0] for c in german] == ["<v Ana>Hallo zusammen.</v>", "<v Ben>Der Build ist grün.</v>",
                                            "<v Ana>¿Empezamos?</v>"]
    assert all(not c.translations for c in german)


def test_speech_cannot_break_the_file():
    hostile = [line("x1", "Eve <b>", "en", "a --> b\n\nc <i>&", 100, 900, fr="d -->\n\ne"),
               line("x2", "", "en", "   ", 950, 990),  # nothing said: no cue
               line("x3", "", "en", "unnamed", 1_000, 1_100)]
    cues = parse_vtt(render_vtt("r --> x", hostile))
    assert len(cues) == 2
    assert cues[0].lines == ["<v Eve &lt;b&gt;>a --&gt; b c &lt;i&gt;&amp;</v>", "[fr] d --&gt; e"]
    assert cues[1].lines == ["unnamed"]


def test_the_transcript_renders_what_the_room_collected():
    transcript = Transcript("standup")
    transcript.add(line("a1", "Ana", "es", "Hola.", 0, 800))
    transcript.add_translation("ana", "a1", "en", "Hello")
    transcript.add_translation("ana", "a1", "en", "there.")  # a translation that arrived in two parts
    cues = parse_vtt(transcript.to_vtt())
    assert cues[0].translations == {"en": "Hello there."}
    assert parse_vtt(transcript.to_vtt("en"))[0].lines == ["<v Ana>Hello there.</v>"]


@pytest.mark.parametrize("value", ["", "english", "EN", "e", "en_US", "en-", "<b>", 3, None])
def test_a_malformed_language_is_refused(value):
    with pytest.raises(InvalidRequest) as err:
        check_transcript_language(value)
    assert err.value.code == "invalid_language"


def test_language_tags_are_accepted():
    assert [check_transcript_language(v) for v in ("en", "pt-BR", "yue")] == ["en", "pt-BR", "yue"]


# --- the real path: a call room over WebRTC, its transcript over HTTP ---------------------------------------------

SAID = "Good morning everyone."


def _burst_48k(seconds: float = 1.5, lead_s: float = 1.0, tail_s: float = 2.0) -> np.ndarray:
    """A loud tone between silences (int16 at 48 kHz): the scripted detector hears speech while it plays."""
    rate = 48_000
    t = np.arange(int(seconds * rate)) / rate
    tone = (0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype(np.int16)
    quiet = np.zeros(int(lead_s * rate), dtype=np.int16)
    return np.concatenate([quiet, tone, np.zeros(int(tail_s * rate), dtype=np.int16)])


def scripted_call_worker(_settings) -> Worker:
    """Speech wherever the audio is loud, every utterance heard as ``SAID``, text translation by the script
    (``[de] Good morning everyone.``)."""
    worker = Worker()
    register(worker, "vad", ScriptedVAD(loud_above(0.05)), max_queue=256)
    register(worker, "asr", ScriptedASR(lambda request: SAID))
    register(worker, "mt", ScriptedMT())
    return worker


async def test_the_room_transcript_vtt_carries_the_listeners_translations(start_server):
    server = await start_server(make_worker=scripted_call_worker, mt_engine="auto")
    room = "vtt-room"
    ana = ClientPeer(server.url, "call", config={"room": room, "name": "Ana", "language": "en",
                                                 "listen_language": "en"},
                     audio=PcmSourceTrack(_burst_48k(), 48000, tail="silence"))
    ben = ClientPeer(server.url, "call", config={"room": room, "name": "Ben", "language": "de",
                                                 "listen_language": "de", "listen_speech": False})
    base = f"{server.url}/v1/rooms/{room}/transcript.vtt"
    try:
        await ben.connect()
        await ana.connect()
        translated = await ben.wait_for("caption.translation", lambda e: e["language"] == "de", timeout=60)
        async with aiohttp.ClientSession() as http:
            async def whole() -> str:
                async with http.get(base) as resp:
                    assert resp.status == 200 and resp.content_type == "text/vtt"
                    return await resp.text()

            cues = parse_vtt(await whole())
            for _ in range(300):  # the room records the translation as it sends it: poll, 30 s at most
                if cues and cues[0].translations:
                    break
                await asyncio.sleep(0.1)
                cues = parse_vtt(await whole())
            assert cues and cues[0].source == f"<v Ana>{SAID}</v>"
            assert cues[0].translations == {"de": translated["text"]}
            async with http.get(f"{base}?language=de") as resp:
                assert resp.status == 200 and 'filename="vtt-room.de.vtt"' in resp.headers["Content-Disposition"]
                german = parse_vtt(await resp.text())
            assert german[0].lines == [f"<v Ana>{translated['text']}</v>"]
            async with http.get(f"{base}?language=fr") as resp:  # nobody listens in French: the source
                assert parse_vtt(await resp.text())[0].lines == [f"<v Ana>{SAID}</v>"]
            async with http.get(f"{base}?language=xx-%3Cb%3E") as resp:
                body = await resp.json()
                assert resp.status == 400 and body["error"]["code"] == "invalid_language", body
                assert body["error"]["type"] and body["error"]["message"]
    finally:
        await ana.close()
        await ben.close()


# --- the pages' downloads -------------------------------------------------------------------------------------


def _read(info) -> str:
    return Path(info.value.path()).read_text(encoding="utf-8")


@browser_test
def test_page_downloads_carry_their_translations(tmp_path):
    """/interpret's source VTT carries each translation under the source caption it overlaps; /captions' VTT
    carries the caption.translation lines it received, and the source's markup is escaped in both."""
    pytest.importorskip("playwright.sync_api")
    with serve(tmp_path, "--preload", "vad") as served, chromium_page(served, tmp_path) as b:
        b.open("/interpret")
        b.page.evaluate("""() => {
          const c = window.rtcAgent.client;
          c._dispatch({type: 'caption.final', segment_id: 's1', text: 'Buenos días.', language: 'es',
                       audio_start_ms: 0, audio_end_ms: 1600});
          c._dispatch({type: 'translation.chunk', index: 0, action: 'EMIT', text: 'Good', audio_start_ms: 0,
                       audio_end_ms: 800});
          c._dispatch({type: 'translation.chunk', index: 1, action: 'EMIT', text: 'morning.', audio_start_ms: 800,
                       audio_end_ms: 1700});
          c._dispatch({type: 'caption.final', segment_id: 's2', text: 'Uno <dos> --> tres', language: 'es',
                       audio_start_ms: 3000, audio_end_ms: 4000});
          c._dispatch({type: 'translation.flush', trigger: 'end', text: 'One two three', session_ms: 4300});
        }""")
        with b.page.expect_download() as info:
            b.page.click("#interpret-download-source-vtt")
        cues = parse_vtt(_read(info))
        assert [c.lines for c in cues] == [["Buenos días.", "[en] Good morning."],
                                           ["Uno &lt;dos&gt; --&gt; tres", "[en] One two three"]]
        with b.page.expect_download() as info:
            b.page.click("#interpret-download-target-vtt")
        assert [c.lines for c in parse_vtt(_read(info))] == [["Good"], ["morning."], ["One two three"]]

        b.open("/captions")
        b.page.evaluate("""() => {
          const c = window.rtcAgent.client;
          c._dispatch({type: 'caption.final', segment_id: 'c1', text: 'Hola.', audio_start_ms: 500,
                       audio_end_ms: 1500, language: 'es'});
          c._dispatch({type: 'caption.translation', segment_id: 'c1', language: 'en', text: 'Hello.',
                       speaker: {participant_id: 'p', name: 'P'}});
          c._dispatch({type: 'caption.final', segment_id: 'c2', text: 'Adiós.', audio_start_ms: 2000,
                       audio_end_ms: 2600, language: 'es'});
        }""")
        assert b.page.inner_text("#transcript li[data-segment-id='c1'] .segment-translation") == "[en] Hello."
        with b.page.expect_download() as info:
            b.page.click("#transcript-vtt")
        cues = parse_vtt(_read(info))
        assert [c.lines for c in cues] == [["Hola.", "[en] Hello."], ["Adiós."]]
        assert cues[0].start_ms == 500 and cues[1].start_ms == 2000
