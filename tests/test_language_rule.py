"""The session language rule with scripted detections (no model): settle once confident, ignore flapping
low-confidence windows, switch only on strong repeated evidence; and the captions transcriber applying it."""

from __future__ import annotations

import asyncio

import numpy as np

from rtc_agent.apps.captions.app import language_prior
from rtc_agent.apps.captions.language import LanguageRule
from rtc_agent.apps.captions.speech_segmenter import SpeechEvent
from rtc_agent.apps.captions.transcriber import StreamingTranscriber
from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.engines.asr.base import TranscribeRequest, Transcript


def test_a_confident_first_utterance_settles_the_language():
    rule = LanguageRule()
    assert rule.current is None
    assert rule.choose([("en", 0.95)], 1.0) is None  # under 1.5 s: not decided yet
    assert rule.choose([("en", 0.95)], 1.0, final=True) == "en"  # an utterance that ended: decide now
    assert rule.observe([("en", 0.6), ("th", 0.3)], 3.0) is None  # not confident enough
    assert rule.observe([("en", 0.92), ("th", 0.03)], 2.5) == "en"
    assert rule.current == rule.settled == "en"
    assert rule.choose([("th", 0.99)], 5.0) == "en"  # settled: every utterance is decoded in it


def test_flapping_low_confidence_detections_never_switch_a_settled_language():
    rule = LanguageRule()
    rule.observe([("en", 0.9)], 3.0)
    flaps = [[("th", 0.55), ("en", 0.3)], [("id", 0.6), ("en", 0.2)], [("th", 0.85), ("en", 0.1)],
             [("cy", 0.95), ("en", 0.04)], [("en", 0.7)], [("cy", 0.97), ("en", 0.01)], [("nn", 0.99)]]
    for ranking in flaps:
        assert rule.observe(ranking, 4.0) is None
    assert rule.settled == "en" and rule.switches == 0
    # short utterances never count as evidence, however sure the detector is
    for _ in range(4):
        assert rule.observe([("es", 0.99)], 1.2) is None
    assert rule.settled == "en"


def test_a_real_switch_takes_two_strong_utterances_in_a_row():
    rule = LanguageRule()
    rule.observe([("en", 0.95)], 2.0)
    assert rule.observe([("es", 0.97), ("en", 0.01)], 3.0) is None
    assert rule.observe([("en", 0.9)], 3.0) is None  # agreeing with English clears the run
    assert rule.observe([("es", 0.97), ("en", 0.01)], 3.0) is None
    assert rule.observe([("es", 0.98), ("en", 0.01)], 2.5) == "es"
    assert rule.settled == "es" and rule.switches == 1


def test_without_a_confident_utterance_a_majority_settles():
    rule = LanguageRule()
    assert rule.observe([("en", 0.6)], 2.0) is None
    assert rule.observe([("de", 0.5)], 2.0) is None
    assert rule.observe([("en", 0.7)], 2.0) == "en"


def test_the_prior_weighs_detections_and_settles_sooner():
    rule = LanguageRule(prior="en")
    # base on accented English: 0.35 en against 0.4 nn; the browser says English
    assert rule.choose([("nn", 0.4), ("en", 0.35), ("de", 0.1)], 2.0) == "en"
    assert rule.observe([("nn", 0.4), ("en", 0.35), ("de", 0.1)], 2.0) == "en"
    other = LanguageRule(prior="en")
    assert other.choose([("es", 0.95), ("en", 0.02)], 2.0) == "es"  # a prior is not a fixed language


def test_a_fixed_language_never_changes():
    rule = LanguageRule(fixed="de")
    assert rule.current == "de"
    for _ in range(3):
        assert rule.observe([("en", 0.99)], 5.0) is None
    assert rule.current == "de"


def test_language_prior_takes_the_browser_tag():
    assert language_prior("en-GB") == "en" and language_prior("pt_BR") == "pt" and language_prior(None) is None
    assert language_prior("x-klingon") is None


class Detector:
    """Partials and finals in the language asked for; with none asked, the scripted detection."""

    def __init__(self, detections: list[list[tuple[str, float]]]) -> None:
        self.detections = list(detections)
        self.requests: list[TranscribeRequest] = []

    async def __call__(self, request: TranscribeRequest) -> Transcript:
        self.requests.append(request)
        ranking = self.detections[0] if self.detections else [("en", 0.9)]
        final = (request.beam_size or 1) > 1
        if final and self.detections:
            self.detections.pop(0)
        language = request.language or ranking[0][0]
        text = {"en": "hello there friends", "th": "สวัสดี", "es": "hola amigos"}.get(language, "words")
        return Transcript(text=text, language=language, language_prob=dict(ranking).get(language, 0.0),
                          language_probs=ranking if (request.detect_language or not request.language) else [],
                          prefix_applied=True, audio_s=request.duration_s)


async def run_session(detector: Detector, utterances: int, prior: str | None = None) -> list:
    events: list = []
    t = StreamingTranscriber(detector, events.append, lambda c, n: asyncio.get_running_loop().create_task(c),
                             TranscriberConfig(language=None, language_prior=prior, decode_interval_ms=300,
                                               min_commit_ms=0, final_beam_size=5))
    ms = 0
    for _ in range(utterances):
        t.on_speech(SpeechEvent("start", ms), ms)
        for _ in range(125):  # 2.5 s of speech
            t.push_audio(np.full(320, 0.1, dtype=np.float32), ms)
            ms += 20
            t.poll(ms)
            await asyncio.sleep(0)
        t.on_speech(SpeechEvent("end", ms), ms)
        for _ in range(25):  # a pause
            t.push_audio(np.zeros(320, dtype=np.float32), ms)
            ms += 20
            t.poll(ms)
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        t.poll(ms)
        await asyncio.sleep(0.01)
    return events


async def test_an_auto_session_labels_nothing_in_a_flapping_language():
    # the first utterance is confidently English; later windows flap to Thai and Indonesian
    detector = Detector([[("en", 0.9)], [("th", 0.6), ("en", 0.3)], [("id", 0.7), ("en", 0.2)],
                         [("th", 0.8), ("en", 0.1)]])
    events = await run_session(detector, 4)
    captions = [e for e in events if e.type in ("caption.partial", "caption.final")]
    assert captions and {e.language for e in captions} == {"en"}
    assert [e.text for e in events if e.type == "caption.final"] == ["hello there friends"] * 4
    assert all(r.language == "en" for r in detector.requests[2:])


async def test_a_result_in_a_language_the_rule_did_not_choose_is_decoded_again():
    # the raw detection says Norwegian, the browser's English weighs more: the text must be English
    detector = Detector([[("nn", 0.4), ("en", 0.35)]])
    events = await run_session(detector, 1, prior=language_prior("en-US"))
    partials = [e for e in events if e.type == "caption.partial"]
    assert partials and all(p.language == "en" and "hello" in p.tentative + p.committed for p in partials)
    assert detector.requests[0].language is None and detector.requests[1].language == "en"
