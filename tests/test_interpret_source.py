"""The interpret app's source language and Source pane (issue 15 item 5, issue 12 item 4), with scripted engines:

- the policy's LanguageRule over the translator's detections (confident first turn settles, flapping does not,
  a fixed source never changes, the source captions can drive it);
- the pipeline's VAD windows and audio shared with a listener (no second VAD);
- SourceCaptions in an InterpretApp with the embedded engine: caption.* events for the source, the translator
  without its own transcribe stream, the translation following the captions' language, the last final on close.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import numpy as np

from rtc_agent.apps.interpret import ChunkCutter, InterpretApp, InterpretPipeline, PolicyConfig, SimulPolicy
from rtc_agent.engines import st
from rtc_agent.engines.asr.base import Segment, TranscribeRequest, Transcript
from rtc_agent.engines.st import Translation
from rtc_agent.protocol.events import SessionUpdate
from rtc_agent.worker import EngineSpec, Worker
from tests.fakes import (
    ScriptedAppContext,
    ScriptedASR,
    ScriptedTranslator,
    ScriptedVAD,
    loud_above,
    register,
)
from tests.test_interpret_policy import chunk, counting_vad

SR = 16000


def detected(ranking: list[tuple[str, float]], audio_s: float = 1.6, text: str = "") -> Translation:
    return Translation(text, extra={"language": ranking[0][0], "language_probs": ranking,
                                    "language_audio_s": audio_s})


def auto_policy(answers: list[Any], **kwargs: Any) -> tuple[SimulPolicy, ScriptedTranslator]:
    translator = ScriptedTranslator(answers)
    return SimulPolicy(PolicyConfig(), translator, lambda e: None, **kwargs), translator


# --- the policy's language rule ----------------------------------------------------------------------------------

async def test_a_confident_first_turn_settles_the_source_language():
    policy, translator = auto_policy([detected([("es", 0.95), ("pt", 0.03)]), "", ""])
    for i in range(3):
        await policy.process(chunk(i))
    assert [r.source_language for r in translator.requests] == [None, "es", "es"]
    assert all(r.detect_language for r in translator.requests)  # still watched for a switch
    assert policy.source_language == "es" and policy.stats()["language_settled"]


async def test_flapping_low_confidence_detections_do_not_settle():
    flaps = [[("es", 0.45), ("it", 0.4)], [("it", 0.42), ("es", 0.4)], [("pt", 0.4), ("es", 0.38)],
             [("es", 0.44), ("it", 0.41)]]
    policy, translator = auto_policy([detected(r) for r in flaps] + [""])
    for i in range(5):
        await policy.process(chunk(i))
    assert {r.source_language for r in translator.requests} == {None}  # turns and the flush after 4 WAITs
    assert policy.source_language is None


async def test_the_prior_settles_on_weaker_evidence():
    policy, translator = auto_policy([detected([("en", 0.55), ("es", 0.3)]), ""], language_prior="en")
    for i in range(2):
        await policy.process(chunk(i))
    assert translator.requests[-1].source_language == "en"


async def test_a_fixed_source_never_changes_and_is_not_watched():
    policy, translator = auto_policy([detected([("fr", 0.99)], audio_s=5.0)] * 6, source_language="es")
    for i in range(6):
        await policy.process(chunk(i))
    assert {r.source_language for r in translator.requests} == {"es"}
    assert not any(r.detect_language for r in translator.requests)
    policy.set_languages("es", "en")  # a target-only update keeps it
    assert policy.source_language == "es"
    policy.set_languages(None, "en")  # back to auto: detect again
    assert policy.source_language is None


async def test_a_settled_language_switches_only_on_strong_repeated_evidence():
    strong_fr = detected([("fr", 0.97), ("es", 0.01)], audio_s=3.0)
    policy, translator = auto_policy([detected([("es", 0.95)]), strong_fr, "", strong_fr, ""])
    for i in range(5):
        await policy.process(chunk(i))
    turns = [r for r in translator.requests if not r.flush]
    assert [r.source_language for r in turns] == [None, "es", "es", "es", "fr"]
    assert policy.stats()["language_switches"] == 1


async def test_the_source_captions_can_drive_the_policy_instead():
    policy, translator = auto_policy([detected([("es", 0.99)]), "", ""])
    policy.observe_languages = False
    await policy.process(chunk(0))
    assert policy.source_language is None and not translator.requests[0].detect_language
    policy.follow_language("de")
    await policy.process(chunk(1))
    assert translator.requests[-1].source_language == "de"


# --- the pipeline shares its VAD windows ------------------------------------------------------------------------

async def test_pipeline_hands_every_vad_window_and_audio_push_to_its_listener():
    vad = counting_vad()
    worker = Worker()
    worker.add(EngineSpec(name="vad", factory=lambda: vad, max_queue=64))
    windows: list[tuple[float, int, int]] = []
    pushes: list[int] = []
    policy = SimulPolicy(PolicyConfig(), ScriptedTranslator(), lambda e: None)
    pipeline = InterpretPipeline(policy, worker, ChunkCutter(),
                                 on_window=lambda p, a, b: windows.append((p, a, b)),
                                 on_audio=lambda pcm, start: pushes.append(start))
    task = asyncio.create_task(pipeline.run_vad())
    signal = np.concatenate([np.full(SR, 0.1, dtype=np.float32), np.zeros(SR, dtype=np.float32)])
    try:
        for start in range(0, len(signal), 320):
            pipeline.push_audio(signal[start:start + 320], start * 1000 // SR)
            await asyncio.sleep(0)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if len(windows) >= len(signal) // 512:
                break
    finally:
        task.cancel()
        await worker.close()
    assert len(pushes) == len(signal) // 320
    assert [(a, b) for _, a, b in windows] == [(32 * i, 32 * (i + 1)) for i in range(len(windows))]
    assert len(windows) == len(signal) // 512 and pipeline.cutter.position_ms == windows[-1][2]
    assert [p for p, _, _ in windows[:31]] == [1.0] * 31 and windows[-1][0] == 0.0  # the same probabilities
    assert len(vad.requests) <= len(windows)  # one VAD, not two


# --- the app with source captions --------------------------------------------------------------------------------

def spanish_source(request: TranscribeRequest) -> Transcript:
    """The scripted ASR's answer: Spanish source, English translation, a confident detection."""
    audio_s = len(request.audio) / SR
    text = "hola amigos de la casa" if request.task == "transcribe" else "hello friends of the house"
    return Transcript(text=text, segments=[Segment(0.0, audio_s, f" {text}")], language=request.language or "es",
                      language_prob=0.96, language_probs=[("es", 0.96), ("pt", 0.02)], prefix_applied=False,
                      audio_s=audio_s)


def make_context() -> tuple[ScriptedAppContext, ScriptedASR]:
    """A session whose real worker has a scripted VAD (speech where the window is loud) and a scripted ASR
    (:func:`spanish_source`), each taking 2 ms a batch; and that ASR, which records the requests."""
    asr = ScriptedASR(spanish_source, delay_s=0.002)
    worker = Worker()
    register(worker, "vad", ScriptedVAD(loud_above(0.01), delay_s=0.002), max_queue=64)
    register(worker, "asr", asr, max_queue=64, concurrency=8)
    return ScriptedAppContext(worker, close_reason="deleted", st_engine="embedded"), asr


async def speak(app: InterpretApp, ctx: ScriptedAppContext, seconds: float, loud: bool) -> None:
    """``seconds`` of 20 ms frames into ``app`` on ``ctx``'s clock: a tone (``loud``) or silence (also the text
    route's speaker, tests/test_interpret_text_route.py)."""
    tone = (np.sin(np.arange(320) / 3) * (8000 if loud else 0)).astype(np.int16)
    for _ in range(int(seconds * 50)):
        app.on_audio(tone, ctx.ms)
        ctx.ms += 20
        await asyncio.sleep(0.001)


async def test_interpret_app_shows_the_source_with_captions_and_follows_their_language():
    ctx, asr = make_context()
    config = InterpretApp.validate_config({"source_text": True, "language_prior": "en-GB", "speak": False},
                                          ctx.settings)
    assert config["source_language"] == "auto" and config["language_prior"] == "en"
    app = InterpretApp(ctx, config)  # type: ignore[arg-type]
    assert app.source is not None and app.engines()["asr"]
    translator = app.policy.translator
    assert isinstance(translator, st.WhisperTranslator) and translator.source is None  # no second stream
    assert not app.policy.observe_languages
    await app.start()
    try:
        await speak(app, ctx, 2.4, loud=True)
        await speak(app, ctx, 1.2, loud=False)
        for _ in range(200):
            if ctx.of("caption.final"):
                break
            await speak(app, ctx, 0.1, loud=False)
        assert app.source.language == "es" and app.policy.source_language == "es"  # the captions' rule settled
        await app.on_event(SessionUpdate(session={"target_language": "en"}))  # languages unchanged: kept
        assert app.policy.source_language == "es" and app.source.language == "es"
        await speak(app, ctx, 1.0, loud=True)
        await app.close()  # the open utterance still gets its final
    finally:
        for task in ctx.tasks:
            task.cancel()
        await ctx.worker.close()
    types = [e.type for e in ctx.events]
    assert "input_audio_buffer.speech_started" in types and "input_audio_buffer.speech_stopped" in types
    finals = ctx.of("caption.final")
    assert len(finals) == 2 and all(f.text == "hola amigos de la casa" and f.language == "es" for f in finals)
    assert ctx.of("caption.partial") and not [e for e in ctx.events if e.type == "error"]
    chunks = ctx.of("translation.chunk")
    assert any(c.action == "EMIT" for c in chunks) or ctx.of("translation.flush")
    assert all(c.source_text is None for c in chunks)  # the source is on the captions, not on the chunks
    translate = [r for r in asr.requests if r.task == "translate"]
    assert translate[-1].language == "es" and translate[0].language is None
    assert {r.task for r in asr.requests} == {"translate", "transcribe"}
    assert app.stats()["source_captions"]["finals"] == 2


async def test_source_captions_whose_audio_stopped_early_have_nothing_to_drop():
    """The speaker's audio stops arriving (a muted or unplugged microphone) long before the session ends: the
    source captions finish the speech they heard and report nothing dropped."""
    ctx, _ = make_context()
    ctx.settings = dataclasses.replace(ctx.settings, final_drain_s=1.0)
    app = InterpretApp(ctx, InterpretApp.validate_config({"source_text": True, "speak": False},  # type: ignore
                                                         ctx.settings))
    await app.start()
    try:
        await speak(app, ctx, 1.2, loud=True)
        await speak(app, ctx, 1.0, loud=False)
        ctx.ms += 20_000  # the session's clock runs on; no audio arrives
        started = time.monotonic()
        await app.close()
        took = time.monotonic() - started
    finally:
        for task in ctx.tasks:
            task.cancel()
        await ctx.worker.close()
    assert len(ctx.of("caption.final")) == 1
    assert not [e for e in ctx.events if e.type == "error"] and took < 0.9


async def test_source_language_update_reaches_the_source_captions():
    ctx, _ = make_context()
    app = InterpretApp(ctx, InterpretApp.validate_config({"source_text": True, "speak": False},  # type: ignore
                                                         ctx.settings))
    await app.on_event(SessionUpdate(session={"source_language": "de"}))
    assert app.source is not None and app.source.transcriber.config.language == "de"
    assert app.policy.source_language == "de"
    await app.on_event(SessionUpdate(session={"source_language": "auto", "language_prior": "fr-CA"}))
    assert app.source.transcriber.config.language is None and app.source.transcriber.config.language_prior == "fr"
    assert app.policy.source_language is None and app.config["language_prior"] == "fr"


def test_cascade_and_no_source_text_make_no_source_captions():
    ctx, _ = make_context()
    app = InterpretApp(ctx, InterpretApp.validate_config({"speak": False}, ctx.settings))  # type: ignore
    assert app.source is None and app.policy.observe_languages
    ctx.settings = dataclasses.replace(ctx.settings, st_engine="cascade")
    app = InterpretApp(ctx, InterpretApp.validate_config({"source_text": True}, ctx.settings))  # type: ignore
    assert app.source is None and "asr" not in app.engines()
