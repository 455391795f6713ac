"""SpeechSynthesizer.stream: clause-by-clause synthesis through the worker, in order, cancellable (scripted engine)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from rtc_agent.engines.tts import SpeechSynthesizer, Synthesis, spoken_text
from rtc_agent.errors import EngineError
from rtc_agent.worker import EngineSpec, Worker
from tests.fakes import ScriptedTTS

GUARD_S = 10  # only a hang guard, never a latency assertion


async def make(engine: ScriptedTTS) -> Worker:
    worker = Worker()
    worker.add(EngineSpec(name="tts", factory=lambda: engine, max_queue=8))
    await worker.load("tts")
    return worker


async def test_clauses_stream_in_order_while_text_is_still_coming() -> None:
    engine = ScriptedTTS()
    worker = await make(engine)
    more_text = asyncio.Event()

    async def llm() -> AsyncIterator[str]:
        for piece in ["Sure", "! Let me", " check that", " for you."]:
            yield piece
        await more_text.wait()  # the rest comes only after the first audio was received
        for piece in [" It is 3", ".5 degrees", " today. Bye"]:
            yield piece

    tts = SpeechSynthesizer(worker, voice="v1")
    got: list[str] = []
    async with asyncio.timeout(GUARD_S):
        async for s in tts.stream(llm()):
            got.append(s.text)
            assert s.voice == "v1" and s.duration_s == pytest.approx(len(s.text) / 1000)
            more_text.set()
    assert got == ["Sure!", "Let me check that for you.", "It is 3.5 degrees today.", "Bye"]
    await worker.close()


async def test_speed_is_read_per_clause_and_strings_work() -> None:
    engine = ScriptedTTS()
    worker = await make(engine)
    speeds = iter([1.0, 1.25, 1.5])
    tts = SpeechSynthesizer(worker)
    out = [s async for s in tts.stream("One. Two. Three.", speed=lambda: next(speeds))]
    assert [(s.text, s.speed) for s in out] == [("One.", 1.0), ("Two.", 1.25), ("Three.", 1.5)]
    assert [s.text async for s in tts.stream(["Plain", " list."], speed=2.0)] == ["Plain list."]
    await worker.close()


async def test_closing_the_stream_cancels_pending_clauses() -> None:
    engine = ScriptedTTS(hold=("One.",))
    worker = await make(engine)
    tts = SpeechSynthesizer(worker, lookahead=3)
    received: list[str] = []

    async def speak() -> None:
        async for s in tts.stream("One. Two. Three. Four. Five. Six."):
            received.append(s.text)

    task = asyncio.create_task(speak())
    async with asyncio.timeout(GUARD_S):
        await asyncio.to_thread(engine.started.wait, GUARD_S)  # "One." is being synthesized
        await asyncio.sleep(0)  # let the producer queue the next clauses
        task.cancel()  # barge-in
        with pytest.raises(asyncio.CancelledError):
            await task
        engine.gate.set()
        await worker.close()
    assert received == []
    assert [r.text for r in engine.ran] == ["One."]  # the queued clauses never reached the engine


async def test_errors_surface_after_the_clauses_before_them() -> None:
    engine = ScriptedTTS(fail=("Bad.",))
    worker = await make(engine)
    tts = SpeechSynthesizer(worker)
    got: list[str] = []
    with pytest.raises(EngineError) as caught:
        async for s in tts.stream("Good. Bad. Never."):
            got.append(s.text)
    assert got == ["Good."] and caught.value.code == "scripted"

    async def broken() -> AsyncIterator[str]:
        yield "First. "
        raise RuntimeError("llm died")

    got.clear()
    with pytest.raises(RuntimeError, match="llm died"):
        async for s in tts.stream(broken()):
            got.append(s.text)
    assert got == ["First."]
    await worker.close()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        SpeechSynthesizer(object(), lookahead=0)
    with pytest.raises(ValueError):
        SpeechSynthesizer(object(), timeout_s=0)


def test_spoken_text_for_barge_in_truncation() -> None:
    def clause(text: str, seconds: float) -> Synthesis:
        return Synthesis(pcm=np.zeros(int(seconds * 1000), dtype=np.int16), sample_rate=1000, text=text, voice="v")

    clauses = [clause("Sure!", 0.5), clause("The weather is sunny today.", 2.0), clause("Bye.", 0.5)]
    assert spoken_text(clauses, 0.0) == ""
    assert spoken_text(clauses, 0.5) == "Sure!"
    assert spoken_text(clauses, 1.1) == "Sure! The weather"  # 30% of the second clause: its first 8 characters
    assert spoken_text(clauses, 2.5) == "Sure! The weather is sunny today."
    assert spoken_text(clauses, 99.0) == "Sure! The weather is sunny today. Bye."


def test_trimmed_cuts_silence_at_either_end() -> None:
    pcm = np.concatenate([np.zeros(500, np.int16), np.full(100, 4000, np.int16), np.zeros(300, np.int16)])
    speech = Synthesis(pcm=pcm, sample_rate=1000, text="a", voice="v")
    lead = speech.trimmed(lead_ms=10)
    assert len(lead.pcm) == 10 + 100 + 300 and lead.pcm[10] == 4000
    both = speech.trimmed(lead_ms=0, tail_ms=40)
    assert len(both.pcm) == 100 + 40 and both.pcm[0] == 4000
    assert speech.trimmed() is speech and speech.trimmed(lead_ms=600) is speech  # nothing to cut
    quiet = Synthesis(pcm=np.zeros(100, np.int16), sample_rate=1000, text="", voice="v")
    assert quiet.trimmed(lead_ms=0, tail_ms=0) is quiet


async def test_backlog_is_the_clauses_ahead_at_the_engines_mean_clause_time() -> None:
    engine = ScriptedTTS(hold=("slow",))
    worker = await make(engine)
    tts = SpeechSynthesizer(worker)
    try:
        assert tts.backlog_ms() == 0.0  # idle, speed unknown: nothing ahead
        first = asyncio.ensure_future(tts.synthesize("slow"))
        async with asyncio.timeout(GUARD_S):
            while not engine.started.is_set():
                await asyncio.sleep(0.005)
        assert tts.backlog_ms() == float("inf")  # busy before its first clause: its speed is unknown
        engine.gate.set()
        await asyncio.wait_for(first, GUARD_S)
        for _ in range(200):  # the batch is counted once it ends
            if worker.stats()["tts"]["batches"]:
                break
            await asyncio.sleep(0.005)
        mean = worker.stats()["tts"]["mean_run_ms"]
        assert mean > 0 and tts.backlog_ms() == pytest.approx(mean)  # idle again: just its own clause
    finally:
        engine.gate.set()
        await worker.close()
    assert SpeechSynthesizer(object()).backlog_ms() == 0.0  # a worker without stats
