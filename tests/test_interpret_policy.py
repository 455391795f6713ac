"""The SimulInfer policy, rule by rule, with a scripted translator (no models): DESIGN.md section 5, issue 4 item 1.

Also the chunk grid, the live pipeline's bounded queue, the session config and the spoken output's catch-up."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import Any

import numpy as np
import pytest

from rtc_agent.apps.interpret import (
    AudioChunk,
    ChunkCutter,
    InterpretPipeline,
    PolicyConfig,
    SimulPolicy,
    TranslationSpeaker,
    resolve_config,
)
from rtc_agent.config import Settings, SettingsError
from rtc_agent.engines import st
from rtc_agent.engines.st import Translation
from rtc_agent.engines.tts.base import Synthesis
from rtc_agent.errors import EngineError, InvalidRequest
from rtc_agent.worker import EngineSpec, Worker
from tests.fakes import ScriptedTranslator, ScriptedVAD, loud_above

SR = 16000


def grid(index: int, chunk_ms: int = 800) -> tuple[int, int]:
    start = 0 if index == 0 else 1600 + (index - 1) * chunk_ms
    return start, start + (1600 if index == 0 else chunk_ms)


def chunk(index: int, voiced: bool = True, chunk_ms: int = 800) -> AudioChunk:
    start, end = grid(index, chunk_ms)
    audio = np.full((end - start) * SR // 1000, 0.01 * (index + 1), dtype=np.float32)
    return AudioChunk(index, start, end, audio, voiced, speech_end_ms=end if voiced else None)


def make(answers: list[Any] | None = None,
         **config: Any) -> tuple[SimulPolicy, ScriptedTranslator, list[Any], list[Any]]:
    translator = ScriptedTranslator(answers, max_model_len=config.get("max_model_len"))
    events: list[Any] = []
    said: list[Any] = []
    policy = SimulPolicy(PolicyConfig(**config), translator, events.append, source_language="es",
                         on_text=lambda text, a, b: said.append((text, a, b)))
    return policy, translator, events, said


def of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


# --- configuration and chunk sizes -----------------------------------------------------------------------------

def test_config_first_chunk_is_exactly_1600_and_later_chunks_800_or_1600():
    assert PolicyConfig().first_chunk_ms == 1600 and PolicyConfig().chunk_ms == 800
    assert PolicyConfig(chunk_ms=1600).chunk_ms == 1600
    for bad in ({"first_chunk_ms": 800}, {"first_chunk_ms": 3200}, {"chunk_ms": 1200}, {"chunk_ms": 400},
                {"max_waits": -1}, {"silence_flush_ms": 100}, {"max_backlog_ms": 800},
                {"max_model_len": 200}, {"window_s": 0.5}):
        with pytest.raises(ValueError):
            PolicyConfig(**bad)
    with pytest.raises(InvalidRequest):
        resolve_config({"chunk_ms": 1200}, Settings())
    with pytest.raises(SettingsError):
        st.check_settings(dataclasses.replace(Settings(), st_chunk_ms=1000))


def test_chunk_grid_first_1600_then_chunk_ms_on_the_source_clock():
    for chunk_ms in (800, 1600):
        cutter = ChunkCutter(chunk_ms=chunk_ms)
        cutter.start_at(320)
        windows = np.zeros((200, 512), dtype=np.float32)
        probs = np.zeros(200, dtype=np.float32)
        probs[60:70] = 0.9  # speech in the second chunk only
        chunks = cutter.feed(windows, probs)
        sizes = [c.end_ms - c.start_ms for c in chunks]
        assert sizes[0] == 1600 and set(sizes[1:]) == {chunk_ms}
        assert chunks[0].start_ms == 320 and all(a.end_ms == b.start_ms for a, b in itertools.pairwise(chunks))
        assert [c.index for c in chunks] == list(range(len(chunks)))
        assert all(len(c.audio) == (c.end_ms - c.start_ms) * SR // 1000 for c in chunks)
        assert not chunks[0].voiced and chunks[1].voiced
        tail = cutter.finish()
        assert tail is None or tail.end_ms - tail.start_ms < chunk_ms  # only the last chunk may be short


# --- SKIP, EMIT / WAIT, history ----------------------------------------------------------------------------------

async def test_vad_silent_chunk_is_skipped_without_a_model_call():
    policy, translator, events, _ = make(["hello"])
    await policy.process(chunk(0, voiced=False))
    await policy.process(chunk(1, voiced=False))
    assert translator.requests == []
    skips = of(events, "translation.chunk")
    assert [e.action for e in skips] == ["SKIP", "SKIP"]
    assert all(not e.st_attempted and e.latency_ms is None and e.text == "" for e in skips)
    assert policy.history == [] and policy.stats()["model_calls_saved"] == 2


async def test_emit_and_wait_events_carry_every_field():
    policy, _, events, said = make(["", "the government", Translation("", prompt_tokens=7, stop_reason="stop")])
    for i in range(3):
        await policy.process(chunk(i))
    chunks = of(events, "translation.chunk")
    assert [c.action for c in chunks] == ["WAIT", "EMIT", "WAIT"]
    emit = chunks[1]
    assert emit.index == 1 and emit.text == "the government" and emit.source_text == "src2"
    assert (emit.audio_start_ms, emit.audio_end_ms) == (1600, 2400)
    assert emit.prompt_tokens == 200 and emit.completion_tokens == 2 and emit.stop_reason == "stop"
    assert emit.st_attempted and emit.latency_ms is not None and emit.latency_ms >= 0
    assert chunks[2].prompt_tokens == 7
    assert said == [("the government", 1600, 2400)]


async def test_every_turn_resends_the_whole_history():
    policy, translator, _, _ = make(["", "one", "", "two"])
    for i in range(4):
        await policy.process(chunk(i))
    lengths = [len(r.history) for r in translator.requests]
    assert lengths == [0, 1, 2, 3]
    last = translator.requests[-1]
    assert [t.text for t in last.history] == ["", "one", ""]
    assert [(t.start_ms, t.end_ms) for t in last.history] == [grid(0), grid(1), grid(2)]
    assert last.history[1].audio is translator.requests[1].audio  # the chunk audio itself, not a copy
    assert (last.start_ms, last.end_ms) == grid(3) and not last.flush


# --- the fallback flush --------------------------------------------------------------------------------------------

async def test_flush_after_four_consecutive_waits():
    policy, translator, events, said = make(["hi", "", "", "", "", "the backlog"])
    for i in range(5):
        await policy.process(chunk(i))
    flushes = of(events, "translation.flush")
    assert len(flushes) == 1 and flushes[0].trigger == "empty_chunks" and flushes[0].text == "the backlog"
    request = translator.requests[-1]
    assert request.flush and not request.final  # 4 WAITs: an unfinished sentence may stay pending
    assert len(request.history) == 1  # the turns before the backlog
    assert len(request.audio) == 4 * 800 * SR // 1000  # the 4 WAIT chunks, in one request
    assert (request.start_ms, request.end_ms) == (grid(1)[0], grid(4)[1])
    assert (flushes[0].audio_start_ms, flushes[0].audio_end_ms) == (grid(0)[0], grid(4)[1])
    assert said[-1] == ("the backlog", 0, grid(4)[1])
    assert policy.waits == 0 and policy.backlog == []
    assert policy.history[-1].text == "the backlog" and policy.history[-1].flushed


async def test_flush_after_silence_of_2400_ms():
    policy, translator, events, _ = make(["", "late"])
    await policy.process(chunk(0))  # speech until 1600
    await policy.process(chunk(1, voiced=False))  # quiet 800 ms
    await policy.process(chunk(2, voiced=False))  # 1600 ms
    assert of(events, "translation.flush") == []
    await policy.process(chunk(3, voiced=False))  # 2400 ms of silence after the speech
    flushes = of(events, "translation.flush")
    assert [f.trigger for f in flushes] == ["silence"] and flushes[0].text == "late"
    assert translator.requests[-1].flush and translator.requests[-1].final
    await policy.process(chunk(4, voiced=False))  # more silence: nothing left to flush
    assert len(of(events, "translation.flush")) == 1


async def test_flush_at_the_end_of_the_audio():
    policy, translator, events, _ = make(["", "the end"])
    await policy.finish()  # nothing heard: nothing to flush
    assert translator.requests == []
    await policy.process(chunk(0))
    await policy.finish()
    flushes = of(events, "translation.flush")
    assert [f.trigger for f in flushes] == ["end"] and flushes[0].text == "the end"
    assert translator.requests[-1].final


async def test_pending_text_of_the_translator_is_flushed_too():
    policy, translator, events, _ = make(["partial", "rest"])
    await policy.process(chunk(0))  # EMIT, but the translator keeps some words back
    translator.pending = True
    await policy.finish()
    assert [f.text for f in of(events, "translation.flush")] == ["rest"]
    assert len(translator.requests[-1].audio) == 0  # no WAIT backlog: only the translator's own pending text


async def test_a_sample_range_is_never_flushed_twice():
    policy, translator, events, _ = make(["", "", "", "", ""])  # the flush answers nothing
    for i in range(4):
        await policy.process(chunk(i))
    assert [f.trigger for f in of(events, "translation.flush")] == ["empty_chunks"]
    calls = len(translator.requests)
    for i in range(4, 8):  # silence after it, then the end: the same range is not attempted again
        await policy.process(chunk(i, voiced=False))
    await policy.finish()
    assert len(translator.requests) == calls and len(of(events, "translation.flush")) == 1
    assert policy.untranslated_ms == 1600 + 3 * 800
    await policy.process(chunk(8))  # new speech: a new range, which may be flushed
    await policy.finish()
    flushes = of(events, "translation.flush")
    assert len(flushes) == 2 and flushes[1].audio_start_ms == grid(8)[0]
    assert flushes[0].audio_end_ms <= flushes[1].audio_start_ms


async def test_backlog_over_the_limit_drops_its_head_as_untranslated():
    policy, translator, events, _ = make(["", "", "", "", "tail"], max_waits=0, max_backlog_ms=1600)
    for i in range(4):
        await policy.process(chunk(i))
    assert policy.backlog_ms <= 1600
    assert policy.untranslated_ms == 1600 + 800  # chunk 0 (1600 ms) and chunk 1 dropped from the backlog
    assert of(events, "translation.flush") == []  # max_waits=0: no flush on WAITs
    await policy.finish()
    request = translator.requests[-1]
    assert request.flush and len(request.audio) == 2 * 800 * SR // 1000
    assert of(events, "translation.flush")[0].audio_start_ms == grid(2)[0]


async def test_engine_error_is_a_wait_with_one_error_event():
    failure = EngineError("boom", code="engine_error")
    policy, _, events, _ = make([failure, failure, "ok"])
    for i in range(3):
        await policy.process(chunk(i))
    chunks = of(events, "translation.chunk")
    assert [c.action for c in chunks] == ["WAIT", "WAIT", "EMIT"]
    assert chunks[0].stop_reason == "error" and chunks[0].st_attempted
    assert len(of(events, "error")) == 1 and policy.errors == 2


# --- context cuts ------------------------------------------------------------------------------------------------

async def test_cut_on_finish_reason_length():
    policy, translator, events, _ = make(["a", Translation("b c", stop_reason="length"), "d"])
    for i in range(3):
        await policy.process(chunk(i))
    resets = of(events, "translation.reset")
    assert [r.reason for r in resets] == ["length"] and translator.resets == 1
    assert len(translator.requests[2].history) == 0  # the dialogue starts over


async def test_cut_on_token_budget():
    ok = Translation("a", prompt_tokens=600, completion_tokens=100)  # 600 + 100 + 256 < 1000
    full = Translation("b", prompt_tokens=700, completion_tokens=50)  # 700 + 50 + 256 >= 1000
    policy, translator, events, _ = make([ok, full, "c"], max_model_len=1000)
    await policy.process(chunk(0))
    assert of(events, "translation.reset") == []
    await policy.process(chunk(1))
    assert [r.reason for r in of(events, "translation.reset")] == ["budget"]
    await policy.process(chunk(2))
    assert translator.requests[2].history == ()


async def test_cut_on_window():
    policy, translator, events, _ = make(["a", "b", "c", "d"], window_s=3.2)
    for i in range(4):
        await policy.process(chunk(i))
    resets = of(events, "translation.reset")
    assert [r.reason for r in resets] == ["window"]  # 1600 + 800 + 800 ms reached 3.2 s after chunk 2
    assert len(translator.requests[3].history) == 0


async def test_flush_comes_before_the_cut():
    policy, translator, events, _ = make(["", Translation("", stop_reason="length"), "flushed"])
    await policy.process(chunk(0))
    await policy.process(chunk(1))
    kinds = [e.type for e in events]
    assert kinds[-2:] == ["translation.flush", "translation.reset"]
    assert of(events, "translation.flush")[0].trigger == "cut" and translator.requests[-1].final
    assert policy.history == [] and policy.backlog == []


async def test_cut_keeps_the_source_clock_and_chunk_numbering():
    policy, _, events, _ = make(["a", Translation("b", stop_reason="length"), "c", "d"])
    for i in range(4):
        await policy.process(chunk(i))
    chunks = of(events, "translation.chunk")
    assert [c.index for c in chunks] == [0, 1, 2, 3]
    assert [(c.audio_start_ms, c.audio_end_ms) for c in chunks] == [grid(i) for i in range(4)]
    with pytest.raises(ValueError):
        await policy.process(chunk(2))  # chunks must keep coming in order after the cut too


def counting_vad() -> ScriptedVAD:
    """A scripted Silero: speech where the window is loud; it records its requests and advances the stream's state
    by 1.0 for each (a valid ``EngineSpec.factory``)."""
    return ScriptedVAD(loud_above(0.005), record=True)


async def test_vad_state_and_grid_are_untouched_by_cuts():
    vad = counting_vad()
    worker = Worker()
    worker.add(EngineSpec(name="vad", factory=lambda: vad, max_queue=8))
    translator = ScriptedTranslator(["a", Translation("b", stop_reason="length"), "c", "d", "e", "f", "g"])
    events: list[Any] = []
    policy = SimulPolicy(PolicyConfig(), translator, events.append)
    pipeline = InterpretPipeline(policy, worker, ChunkCutter())
    audio = np.full(SR * 6, 0.1, dtype=np.float32)
    try:
        await pipeline.translate_audio(audio)
    finally:
        await worker.close()
    assert of(events, "translation.reset")  # the cut happened mid-stream
    streams = {id(r.stream) for r in vad.requests}
    assert streams == {id(pipeline.vad_stream)}  # one VAD state for the whole stream
    assert float(pipeline.vad_stream.state.flat[0]) == len(vad.requests)  # never reset
    chunks = of(events, "translation.chunk")
    assert chunks[0].audio_start_ms == 0 and chunks[-1].audio_end_ms >= 5990
    assert all(a.audio_end_ms == b.audio_start_ms for a, b in itertools.pairwise(chunks))
    assert [c.index for c in chunks] == list(range(len(chunks)))


async def test_live_pipeline_drops_the_oldest_waiting_chunk_when_the_model_falls_behind():
    gate = asyncio.Event()

    class Slow(ScriptedTranslator):
        async def translate(self, request: st.TranslateRequest) -> Translation:
            await gate.wait()
            return await super().translate(request)

    translator = Slow(["x"] * 20)
    events: list[Any] = []
    policy = SimulPolicy(PolicyConfig(), translator, events.append)
    pipeline = InterpretPipeline(policy, worker=None, cutter=ChunkCutter(), max_queued_chunks=2)
    task = asyncio.create_task(pipeline.run_policy())
    try:
        for i in range(6):  # six chunks while the first turn hangs
            pipeline._queue_chunk(chunk(i))
            await asyncio.sleep(0)
        assert pipeline.queued_chunks == 2
        gate.set()
        for _ in range(50):
            await asyncio.sleep(0.01)
            if len(of(events, "translation.chunk")) == 6:
                break
    finally:
        task.cancel()
    chunks = of(events, "translation.chunk")
    assert [c.index for c in chunks] == list(range(6))  # one event per chunk, in order
    dropped = [c for c in chunks if c.stop_reason == "overloaded"]
    assert len(dropped) == 3 and all(c.action == "SKIP" and not c.st_attempted for c in dropped)
    assert policy.untranslated_ms == 3 * 800 and policy.dropped_chunks == 3


# --- session configuration -------------------------------------------------------------------------------------

def test_session_config_languages_and_direction():
    settings = Settings()
    config = resolve_config({"direction": "es-en"}, settings)
    assert config["source_language"] == "es" and config["target_language"] == "en"
    assert resolve_config({}, settings)["source_language"] == "auto"
    with pytest.raises(InvalidRequest) as err:
        resolve_config({"direction": "es-en", "target_language": "fr"}, settings)
    assert err.value.code == "invalid_config"
    with pytest.raises(InvalidRequest) as err:
        resolve_config({"target_language": "de"}, settings)  # Whisper translates into English only
    assert err.value.code == "unsupported_language"
    cascade = dataclasses.replace(settings, st_engine="cascade")
    assert resolve_config({"direction": "es-de"}, cascade)["target_language"] == "de"
    for bad in ({"source_language": "klingon"}, {"direction": "spanish"}, {"speak": "yes"}, {"max_lag_s": 0},
                {"colour": "red"}):
        with pytest.raises(InvalidRequest):
            resolve_config(bad, settings)


# --- spoken output: order and catch-up -----------------------------------------------------------------------------

class _Handle:
    def __init__(self, ms: int) -> None:
        self.id = "u"
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.duration_ms = ms

    @property
    def sent_ms(self) -> int:
        return 0


class _Sink:
    def __init__(self) -> None:
        self.played: list[tuple[int, int]] = []
        self.handles: list[_Handle] = []

    def play(self, pcm: np.ndarray, sample_rate: int, **_: Any) -> _Handle:
        self.played.append((pcm.size, sample_rate))
        handle = _Handle(pcm.size * 1000 // sample_rate)
        self.handles.append(handle)
        return handle

    def clear(self) -> list[Any]:
        return []

    @property
    def busy(self) -> bool:
        return bool(self.handles)


class _Synth:
    """One 1 s clause per text; records the speed read for each clause."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, float]] = []

    async def stream(self, text: str, *, speed: Any = 1.0, **_: Any):
        value = speed() if callable(speed) else speed
        self.texts.append((text, value))
        yield Synthesis(pcm=np.zeros(22050, dtype=np.int16), sample_rate=22050, text=text, voice="v", speed=value)


async def _drain(speaker: TranslationSpeaker, synth: _Synth, n: int) -> None:
    for _ in range(100):
        await asyncio.sleep(0)
        if len(synth.texts) + speaker.skipped >= n:
            return


async def test_speech_plays_in_order_and_catches_up_when_it_lags():
    clock = {"ms": 0}
    sink, synth, events = _Sink(), _Synth(), []
    speaker = TranslationSpeaker(sink, synth, events.append, lambda: clock["ms"], max_lag_ms=2000)
    task = asyncio.create_task(speaker.run())
    try:
        clock["ms"] = 1000
        speaker.say("first part", 800)  # lag 200 ms: normal speed
        await _drain(speaker, synth, 1)
        clock["ms"] = 3000
        speaker.say("second part", 900)  # 3000 + 1000 queued - 900 = 3100 ms > 2000: faster
        await _drain(speaker, synth, 2)
        clock["ms"] = 9000
        speaker.say("stale part", 1000)  # 8000+ ms > 2 x 2000 with newer text behind it: skipped
        speaker.say("latest part", 1100)  # as late, but the newest: spoken, at the fastest speed
        await _drain(speaker, synth, 4)
    finally:
        task.cancel()
    assert [t for t, _ in synth.texts] == ["first part", "second part", "latest part"]
    assert synth.texts[0][1] == 1.0 and synth.texts[1][1] > 1.0 and synth.texts[2][1] == speaker.max_speed
    assert len(sink.played) == 3
    kinds = [(e.action, e.skipped_text) for e in events if e.type == "translation.speech.catchup"]
    assert ("speed", "") in kinds and ("skip", "stale part") in kinds
    assert speaker.stats()["skipped"] == 1
    started = [e for e in events if e.type == "translation.speech.started"]
    assert [e.text for e in started] == ["first part", "second part", "latest part"]  # each one announced once
    assert started[1].starts_in_ms > 0  # the first was still queued ahead of the second
    for handle in sink.handles:
        handle.done.set_result(handle.sent_ms)
    await asyncio.sleep(0)
    done = [e for e in events if e.type == "translation.speech.done"]
    assert [e.utterance_id for e in done] == [e.utterance_id for e in started] and not any(e.cleared for e in done)


async def test_a_fallback_voice_speaks_what_the_voice_would_say_too_late():
    clock = {"ms": 0}

    class SlowVoice(_Synth):
        """Its first clause comes 2.5 s after the text is asked for (a neural voice queued behind others)."""

        async def stream(self, text: str, *, speed: Any = 1.0, **_: Any):
            clock["ms"] += 2500
            async for synthesis in super().stream(text, speed=speed):
                yield synthesis

    sink, voice, cheap, events = _Sink(), SlowVoice(), _Synth(), []
    speaker = TranslationSpeaker(sink, voice, events.append, lambda: clock["ms"], max_lag_ms=1000, fallback=cheap)
    task = asyncio.create_task(speaker.run())

    async def spoken(n: int) -> None:  # (started: the voice's wait is counted by then)
        for _ in range(100):
            await asyncio.sleep(0)
            if len([e for e in events if e.type == "translation.speech.started"]) >= n:
                return

    try:
        clock["ms"] = 1000
        speaker.say("first part", 800)  # lag 200 ms, nothing known of the voice yet: its own voice
        await spoken(1)
        assert speaker.expected_synthesis_ms() == 2500
        speaker.say("second part", clock["ms"])  # lag 1 s of queued speech + 2.5 s to synthesize > 2 x 1 s: fallback
        await spoken(2)
        for handle in sink.handles:
            handle.done.set_result(0)  # played
        clock["ms"] += 20_000  # the voice rested 20 s: its expected wait has halved twice (625 ms)
        speaker.say("third part", clock["ms"] - 500)
        await spoken(3)
    finally:
        task.cancel()
    assert [t for t, _ in voice.texts] == ["first part", "third part"]
    assert cheap.texts == [("second part", speaker.max_speed)]
    assert speaker.stats()["skipped"] == 0 and speaker.stats()["fallbacks"] == 1 and len(sink.played) == 3
    catchups = [(e.action, e.audio_end_ms) for e in events if e.type == "translation.speech.catchup"]
    assert [c for c in catchups if c[0] in ("fallback", "skip")] == [("fallback", 3500)]
    started = [e.text for e in events if e.type == "translation.speech.started"]
    assert started == ["first part", "second part", "third part"]  # every text spoken, in order


async def test_a_voice_that_slows_down_under_a_piece_hands_it_to_the_fallback_in_time():
    """The voice took the piece on (nothing known against it) but its first clause has not come when the piece
    would be skip_lag_ms late: the fallback speaks it at once, the voice's clause is cancelled, and the wait counts
    in the voice's expected wait (the next piece goes to the fallback directly)."""
    cancelled = asyncio.Event()

    class StalledVoice(_Synth):
        async def stream(self, text: str, *, speed: Any = 1.0, **_: Any):
            self.texts.append((text, 1.0))
            try:
                await asyncio.sleep(30)  # a clause queued behind other languages on a busy machine
            except asyncio.CancelledError:
                clock["ms"] += 300  # what the voice's stall took, on the speaker's clock
                cancelled.set()
                raise
            yield Synthesis(pcm=np.zeros(22050, dtype=np.int16), sample_rate=22050, text=text, voice="v", speed=1.0)

    clock = {"ms": 1000}
    sink, voice, cheap, events = _Sink(), StalledVoice(), _Synth(), []
    speaker = TranslationSpeaker(sink, voice, events.append, lambda: clock["ms"], max_lag_ms=100, fallback=cheap)
    task = asyncio.create_task(speaker.run())
    try:
        speaker.say("first part", 1000)  # lag 0: the voice takes it; 200 ms later it would be too late
        await asyncio.wait_for(cancelled.wait(), 5)
        for _ in range(100):
            await asyncio.sleep(0.01)
            if cheap.texts:
                break
        assert speaker.expected_synthesis_ms() == 300
        for handle in sink.handles:
            handle.done.set_result(0)  # played: nothing queued ahead of the next piece
        speaker.say("second part", clock["ms"])  # lag 0, but 0 + 300 ms expected > 200 ms: the fallback
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(cheap.texts) == 2:
                break
    finally:
        task.cancel()
    assert [t for t, _ in voice.texts] == ["first part"]  # the second went to the fallback directly
    assert [t for t, _ in cheap.texts] == ["first part", "second part"] and len(sink.played) == 2
    assert speaker.stats()["fallbacks"] == 2 and speaker.stats()["skipped"] == 0
    started = [(e.text, e.engine) for e in events if e.type == "translation.speech.started"]
    assert [t for t, _ in started] == ["first part", "second part"]  # announced once, by the voice that spoke


async def test_live_pipeline_cuts_the_pushed_audio_on_the_grid():
    vad = counting_vad()
    worker = Worker()
    worker.add(EngineSpec(name="vad", factory=lambda: vad, max_queue=64))
    translator = ScriptedTranslator()
    events: list[Any] = []
    pipeline = InterpretPipeline(SimulPolicy(PolicyConfig(), translator, events.append), worker, ChunkCutter())
    tasks = [asyncio.create_task(pipeline.run_vad()), asyncio.create_task(pipeline.run_policy())]
    signal = 0.01 + np.arange(SR * 4, dtype=np.float32) / (SR * 40)  # distinct, loud samples everywhere
    try:
        for start in range(0, len(signal), 320):  # 20 ms frames, as AudioInput delivers them
            pipeline.push_audio(signal[start:start + 320], start * 1000 // SR)
            await asyncio.sleep(0)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if len(of(events, "translation.chunk")) >= 4:
                break
    finally:
        for task in tasks:
            task.cancel()
        await worker.close()
    turns = [r for r in translator.requests if not r.flush]
    assert [(r.start_ms, r.end_ms) for r in turns] == [grid(i) for i in range(4)]
    for request in turns:
        expected = signal[request.start_ms * SR // 1000:request.end_ms * SR // 1000]
        assert np.array_equal(request.audio, expected)  # each chunk is exactly the audio of its grid cell
