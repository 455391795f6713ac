"""The embedded speech translator (Whisper translate + LocalAgreement) and the cascade (ASR + LLM), with scripted
engines in a real worker: what each turn sends to the model and what it emits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from rtc_agent.engines.asr.base import Segment, TranscribeRequest, Transcript
from rtc_agent.engines.llm.messages import Usage
from rtc_agent.engines.st import CascadeTranslator, TranslateRequest, Turn, WhisperTranslator
from rtc_agent.worker import EngineSpec, Worker
from tests.fakes import ScriptedASR, ScriptedChat

SR = 16000


@pytest.fixture
async def worker():
    w = Worker()
    yield w
    await w.close()


def add(worker: Worker, name: str, engine: Any) -> Any:
    worker.add(EngineSpec(name=name, factory=lambda: engine, max_queue=16, max_batch=4))
    return engine


class Dialogue:
    """Feeds a translator the way the policy does: the history plus one new 800 ms chunk per turn."""

    def __init__(self, translator: Any) -> None:
        self.translator = translator
        self.history: list[Turn] = []
        self.clock = 0

    async def turn(self, ms: int = 800, *, flush: bool = False, final: bool = False) -> Any:
        audio = np.full(ms * SR // 1000, 0.05, dtype=np.float32)
        request = TranslateRequest(history=tuple(self.history), audio=audio, start_ms=self.clock,
                                   end_ms=self.clock + ms, source_language="es", flush=flush, final=final)
        result = await self.translator.translate(request)
        self.history.append(Turn(audio, self.clock, self.clock + ms, text=result.text))
        self.clock += ms
        return result


def by_length(script: dict[float, str]) -> Callable[[TranscribeRequest], str]:
    """The hypothesis for a buffer of the given seconds."""
    return lambda r: script[round(r.duration_s, 1)]


async def test_local_agreement_decides_emit_and_wait(worker):
    whisper = add(worker, "asr", ScriptedASR(by_length({
        1.6: "The government", 2.4: "The government announced a", 3.2: "The government announced a new plan",
        4.0: "The government announced a new plan to improve",
    })))
    dialogue = Dialogue(WhisperTranslator(worker))
    texts = [(await dialogue.turn(1600 if i == 0 else 800)).text for i in range(4)]
    assert texts == ["", "The government", "announced a", "new plan"]
    request = whisper.requests[-1]
    assert request.task == "translate" and request.language == "es" and request.prefix == ""
    assert request.duration_s == pytest.approx(4.0)  # the whole dialogue's audio is decoded again
    assert dialogue.translator.pending  # "to improve" is heard but not agreed yet


async def test_agreement_with_either_of_the_two_previous_hypotheses(worker):
    add(worker, "asr", ScriptedASR(by_length({1.6: "We are going", 2.4: "Where are you", 3.2: "We are going to"})))
    dialogue = Dialogue(WhisperTranslator(worker))
    texts = [(await dialogue.turn(1600 if i == 0 else 800)).text for i in range(3)]
    assert texts == ["", "", "We are going"]  # the third agrees with the first


async def test_final_flush_emits_everything_and_partial_flush_stops_at_a_finished_sentence(worker):
    def answer(r: TranscribeRequest) -> Transcript:
        if r.duration_s > 1.5:
            return Transcript(text="One two. Three four", segments=[Segment(0.0, 1.0, " One two."),
                                                                       Segment(1.0, r.duration_s, " Three four")],
                              prefix_applied=True, audio_s=r.duration_s)
        return Transcript(text="Three four five", segments=[Segment(0.0, r.duration_s, " Three four five")],
                          prefix_applied=True, audio_s=r.duration_s)

    whisper = add(worker, "asr", ScriptedASR(answer))
    dialogue = Dialogue(WhisperTranslator(worker))
    assert (await dialogue.turn(1600, flush=True)).text == "One two."  # partial: the unfinished part waits
    assert dialogue.translator.pending and dialogue.translator.target.trim_ms == 1000  # the sentence is done
    assert (await dialogue.turn(800, flush=True, final=True)).text == "Three four five"
    assert whisper.requests[-1].duration_s == pytest.approx(1.4)
    assert not dialogue.translator.pending


async def test_a_rephrased_hypothesis_continues_after_the_emitted_words(worker):
    add(worker, "asr", ScriptedASR(by_length({
        1.6: "We will see the", 2.4: "We will see the old town", 3.2: "We are going to see the old town and the sea",
    })))
    dialogue = Dialogue(WhisperTranslator(worker))
    texts = [(await dialogue.turn(1600 if i == 0 else 800)).text for i in range(2)]
    assert texts == ["", "We will see the"]
    final = await dialogue.turn(800, flush=True, final=True)
    assert final.text == "old town and the sea"  # found after "see the", not by position


async def test_buffer_is_trimmed_at_an_emitted_timestamped_sentence_end(worker):
    def answer(r: TranscribeRequest) -> Transcript:
        if r.duration_s > 3.0:
            return Transcript(text="First sentence. Second", prefix_applied=True, audio_s=r.duration_s,
                              segments=[Segment(0.0, 1.5, " First sentence."), Segment(1.5, r.duration_s, " Second")])
        return Transcript(text="Second", segments=[Segment(0.0, r.duration_s, " Second")], prefix_applied=True,
                          audio_s=r.duration_s)

    whisper = add(worker, "asr", ScriptedASR(answer))
    dialogue = Dialogue(WhisperTranslator(worker, trim_after_s=3.0))
    assert (await dialogue.turn(3200)).text == ""
    assert (await dialogue.turn(800)).text == "First sentence. Second"  # agreed with the previous hypothesis
    await dialogue.turn(800)
    assert whisper.requests[-1].duration_s == pytest.approx(4.8 - 1.5)  # decoding starts after "First sentence."
    assert dialogue.translator.target.trim_ms == 1500


async def test_silence_like_results_commit_nothing(worker):
    def answer(r: TranscribeRequest) -> Transcript:
        return Transcript(text="Thank you.", no_speech_prob=0.9, avg_logprob=-1.5, prefix_applied=True,
                          audio_s=r.duration_s)

    add(worker, "asr", ScriptedASR(answer))
    dialogue = Dialogue(WhisperTranslator(worker))
    assert [(await dialogue.turn()).text for _ in range(4)] == ["", "", "", ""]


async def test_forced_prefix_mode_and_source_text(worker):
    def answer(r: TranscribeRequest) -> str:
        if r.task == "transcribe":
            return "hola amigos" if not r.prefix else "amigos"
        return "hello friends" if not r.prefix else "friends"

    whisper = add(worker, "asr", ScriptedASR(answer))
    dialogue = Dialogue(WhisperTranslator(worker, source_text=True, force_prefix=True))
    first = await dialogue.turn(1600)
    second = await dialogue.turn()
    assert (first.text, second.text) == ("", "hello friends")
    assert second.source_text == "hola amigos"
    tasks = sorted(r.task for r in whisper.requests[-2:])
    assert tasks == ["transcribe", "translate"]  # both decodes of a turn go to the worker together
    third = await dialogue.turn()
    assert whisper.requests[-1].prefix in ("hello friends", "hola amigos")
    assert third.text == ""


async def test_cascade_translates_recognized_clauses_with_the_llm(worker):
    add(worker, "asr", ScriptedASR(by_length({
        1.6: "El gobierno", 2.4: "El gobierno anunció", 3.2: "El gobierno anunció un plan.",
        4.0: "El gobierno anunció un plan. Mañana",
    })))
    chat = add(worker, "llm", ScriptedChat("The government announced a plan.", usage=Usage(120, 6)))
    translator = CascadeTranslator(worker, llm_engine="llm")
    dialogue = Dialogue(translator)
    results = [await dialogue.turn(1600 if i == 0 else 800) for i in range(4)]
    assert [r.text for r in results] == ["", "", "", "The government announced a plan."]
    assert [r.source_text for r in results] == ["", "El gobierno", "anunció", "un plan."]
    assert len(chat.requests) == 1  # WAIT turns make no LLM call
    messages = chat.requests[0].messages
    assert messages[0]["role"] == "system" and "Spanish" in messages[0]["content"]
    assert messages[-1] == {"role": "user", "content": "El gobierno anunció un plan."}
    assert (results[-1].prompt_tokens, results[-1].completion_tokens) == (120, 6)
    assert translator.pairs == [("El gobierno anunció un plan.", "The government announced a plan.")]


def test_quiet_tail_is_measured_in_20ms_frames() -> None:
    from rtc_agent.engines.st.whisper_stream import quiet_tail_s

    loud = np.full(SR, 0.05, dtype=np.float32)
    assert quiet_tail_s(loud) == 0.0
    assert quiet_tail_s(np.concatenate([loud, np.zeros(SR // 2, np.float32)])) == pytest.approx(0.5)
    assert quiet_tail_s(np.zeros(SR // 4, np.float32)) == pytest.approx(0.24)  # whole frames only
    assert quiet_tail_s(np.zeros(10, np.float32)) == 0.0


async def test_a_finished_sentence_followed_by_a_pause_is_emitted_without_waiting_for_agreement(worker):
    def answer(r: TranscribeRequest) -> Transcript:
        if r.duration_s < 2.0:
            return Transcript(text="Yellow", segments=[Segment(0.0, r.duration_s, " Yellow")], prefix_applied=True,
                              audio_s=r.duration_s)
        return Transcript(text="Hello there. And", segments=[Segment(0.0, 1.8, " Hello there."),
                                                             Segment(1.8, r.duration_s, " And")],
                          prefix_applied=True, audio_s=r.duration_s)

    add(worker, "asr", ScriptedASR(answer))
    translator = WhisperTranslator(worker)
    speech = np.full(1600 * SR // 1000, 0.05, dtype=np.float32)
    first = TranslateRequest(history=(), audio=speech, start_ms=0, end_ms=1600, source_language="es")
    assert (await translator.translate(first)).text == ""
    pause = np.concatenate([np.full(300 * SR // 1000, 0.05, np.float32), np.zeros(500 * SR // 1000, np.float32)])
    second = TranslateRequest(history=(Turn(speech, 0, 1600),), audio=pause, start_ms=1600, end_ms=2400,
                              source_language="es")
    assert (await translator.translate(second)).text == "Hello there."  # "And" is not finished: it waits


async def test_a_flush_of_the_audio_just_decoded_reuses_that_hypothesis(worker):
    whisper = add(worker, "asr", ScriptedASR(by_length({1.6: "The government", 2.4: "The government said"})))
    dialogue = Dialogue(WhisperTranslator(worker))
    await dialogue.turn(1600)
    await dialogue.turn(800)
    decodes = len(whisper.requests)
    # the policy's flush: the history before the backlog plus the backlog's audio as one piece
    backlog = dialogue.history[-1]
    flush = TranslateRequest(history=tuple(dialogue.history[:-1]), audio=backlog.audio, start_ms=backlog.start_ms,
                             end_ms=backlog.end_ms, source_language="es", flush=True, final=True)
    assert (await dialogue.translator.translate(flush)).text == "said"
    assert len(whisper.requests) == decodes  # no second decode of the same audio


async def test_whisper_translator_reports_rankings_and_keeps_no_sticky_detection(worker):
    """The language is the request's (the policy's LanguageRule): while it is None every decode detects again,
    however confident an earlier detection was; the detector's ranking comes back for the rule to weigh."""

    def answer(r: TranscribeRequest) -> Transcript:
        detected = r.language is None or r.detect_language
        return Transcript(text="hello friends", segments=[Segment(0.0, r.duration_s, " hello friends")],
                          language=r.language or "es", language_prob=0.97 if detected else None,
                          language_probs=[("es", 0.97), ("pt", 0.02)] if detected else [],
                          prefix_applied=True, audio_s=r.duration_s)

    whisper = add(worker, "asr", ScriptedASR(answer))
    translator = WhisperTranslator(worker)
    history: list[Turn] = []
    results = []
    for i, (language, detect) in enumerate([(None, False), (None, False), ("es", True), ("es", False)]):
        audio = np.full(1600 * SR // 1000, 0.05, dtype=np.float32)
        request = TranslateRequest(history=tuple(history), audio=audio, start_ms=i * 1600, end_ms=(i + 1) * 1600,
                                   source_language=language, detect_language=detect)
        results.append(await translator.translate(request))
        history.append(Turn(audio, i * 1600, (i + 1) * 1600, text=results[-1].text))
    assert [r.language for r in whisper.requests] == [None, None, "es", "es"]  # no sticky detection of its own
    assert [r.detect_language for r in whisper.requests] == [False, False, True, False]
    assert results[0].extra["language_probs"] == [("es", 0.97), ("pt", 0.02)]
    assert results[0].extra["language_audio_s"] == pytest.approx(1.6)
    assert results[1].extra["language"] == "es" and "language_probs" in results[2].extra
    assert "language_probs" not in results[3].extra  # a decode in a given language is no detection
