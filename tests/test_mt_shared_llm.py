"""One LLM in memory: the embedded text translator (``mt``) runs on the worker's embedded ``llm`` engine when both are
the same packaged model (the defaults): the same loaded model object, the same lane and thread, translations taken
before waiting agent turns; a different model (or a remote LLM) gets a copy of its own. Scripted chat models on a
real worker; the real model is in tests/test_mt_real.py."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import numpy as np
import pytest

from rtc_agent.config import Settings
from rtc_agent.engines import engine_specs as all_engine_specs
from rtc_agent.engines import mt, tts
from rtc_agent.engines.llm import ChatJob, ChatRequest
from rtc_agent.engines.mt import ChatTranslationEngine, TextTranslateRequest
from rtc_agent.engines.tts.base import OneAtATime, Synthesis, SynthesisRequest
from rtc_agent.errors import AtCapacity
from rtc_agent.worker import EngineSpec, Worker
from tests.fakes import ScriptedChat


async def wait_for(condition, timeout: float) -> None:  # type: ignore[no-untyped-def]
    """Poll ``condition`` on the loop until it is true; ``AssertionError`` after ``timeout`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.005)


def settings(**values: object) -> Settings:
    return dataclasses.replace(Settings(), **values)


def never_built() -> ChatTranslationEngine:
    raise AssertionError("the translator built a model of its own")


def shared_worker(chat: ScriptedChat, built: list[ScriptedChat], **values: object) -> Worker:
    """A worker with ``chat`` as the ``llm`` engine (``built`` counts its factory calls) and the configured ``mt``
    spec, whose own factory must never run."""
    worker = Worker()

    def factory() -> ScriptedChat:
        built.append(chat)
        return chat

    worker.add(EngineSpec(name="llm", factory=factory, max_queue=16, yields_to=("tts", "asr")))
    for spec in mt.engine_specs(settings(**values)):  # mt and its background twin (mt-prime)
        worker.add(dataclasses.replace(spec, factory=never_built))
    return worker


def test_the_defaults_share_the_llm_and_other_models_do_not() -> None:
    specs = {spec.name: spec for spec in all_engine_specs(Settings())}
    assert specs["mt"].shares == "llm" and specs["mt"].urgent and mt.shares_llm(Settings())
    assert specs["mt-prime"].background and not specs["mt-prime"].urgent  # after an agent's turns too
    assert list(specs).index("llm") < list(specs).index("mt")  # registered after the engine it runs on
    for same in ({"mt_model": "qwen"}, {"llm_model": "qwen2.5-coder-0.5b", "mt_model": ""},
                 {"llm_engine": "smollm", "mt_engine": "embedded"}):
        assert mt.shares_llm(settings(**same)), same
    for other in ({"mt_model": "smollm2-135m"}, {"llm_engine": "openai", "llm_url": "http://127.0.0.1:9/v1"},
                  {"mt_engine": "none"}):
        assert not mt.shares_llm(settings(**other)), other
        assert [spec.shares for spec in mt.engine_specs(settings(**other))] in ([], [None, "mt"])


async def test_one_model_object_one_lane_and_translation_works() -> None:
    chat = ScriptedChat("Buenos días a todos.", default="Hola.")
    built: list[ScriptedChat] = []
    worker = shared_worker(chat, built)
    try:
        assert worker.names() == ["llm", "mt", "mt-prime"] and worker.host_of("mt") == "llm"
        assert worker.host_of("llm") == "llm" and worker.host_of("mt-prime") == "llm"  # (mt-prime shares mt's)
        result = await worker.call("mt", TextTranslateRequest("Good morning everyone.", "en", "es"), timeout=10)
        assert result.text == "Buenos días a todos." and result.engine == "embedded:scripted"
        translator = await worker.load("mt")
        assert isinstance(translator, ChatTranslationEngine) and translator.chat is await worker.load("llm")
        primer = await worker.load("mt-prime")
        assert isinstance(primer, ChatTranslationEngine) and primer.chat is chat
        assert built == [chat]  # one model object, built once, for the three engines
        agent = await worker.call("llm", ChatRequest(messages=[{"role": "user", "content": "hi"}]), timeout=10)
        assert agent.text == "Hola."
        stats = worker.stats()
        assert stats["mt"]["shares"] == "llm" and stats["mt"]["calls"] == 1 and stats["mt"]["loaded"]
        assert stats["llm"]["calls"] == 1 and "shares" not in stats["llm"]  # each counts its own requests
        system = chat.requests[0].messages[0]["content"]
        assert "Spanish" in system and chat.requests[0].temperature == 0.0
    finally:
        await worker.close()


async def test_a_translation_goes_before_waiting_agent_turns_but_never_interrupts_one() -> None:
    gate, running = threading.Event(), threading.Event()

    class GatedChat(ScriptedChat):
        def generate(self, request, cancel):  # type: ignore[no-untyped-def]
            if request.messages[-1]["content"] == "first turn":
                running.set()
                gate.wait(10)
            yield from super().generate(request, cancel)

    chat = GatedChat(default="ok")
    worker = shared_worker(chat, [])
    try:
        def turn(text: str) -> ChatJob:
            return ChatJob(ChatRequest(messages=[{"role": "user", "content": text}]))

        first = asyncio.ensure_future(worker.call("llm", turn("first turn"), timeout=20))
        await wait_for(running.is_set, timeout=10)  # the first turn runs (held)
        second = asyncio.ensure_future(worker.call("llm", turn("second turn"), timeout=20))
        await asyncio.sleep(0.01)
        translation = asyncio.ensure_future(worker.call("mt", TextTranslateRequest("Thanks.", "en", "es"), timeout=20))
        await asyncio.sleep(0.05)
        assert not chat.requests  # the running turn is not interrupted: nothing else started
        gate.set()
        await asyncio.gather(first, second, translation)
        assert [r.messages[-1]["content"] for r in chat.requests] == ["first turn", "Thanks.", "second turn"]
    finally:
        gate.set()
        await worker.close()


async def test_the_translator_share_of_the_queue_is_bounded() -> None:
    gate, running = threading.Event(), threading.Event()

    class HeldChat(ScriptedChat):
        def generate(self, request, cancel):  # type: ignore[no-untyped-def]
            running.set()
            gate.wait(10)
            yield from super().generate(request, cancel)

    chat = HeldChat(default="vale")
    worker = shared_worker(chat, [])
    spec, *_ = mt.engine_specs(Settings())
    try:
        def translate(i: int) -> asyncio.Future:
            return asyncio.ensure_future(worker.call("mt", TextTranslateRequest(f"line {i}", "en", "es"), timeout=20))

        calls = [translate(0)]
        await wait_for(running.is_set, timeout=10)  # one runs (held) ...
        calls += [translate(i) for i in range(1, spec.max_queue + 1)]  # ... and max_queue wait
        await asyncio.sleep(0.01)
        assert not any(call.done() for call in calls)
        with pytest.raises(AtCapacity) as err:
            await worker.call("mt", TextTranslateRequest("one too many", "en", "es"))
        assert err.value.code == "engine_overloaded" and "'mt'" in err.value.message
        assert worker.stats()["mt"]["rejected"] == 1 and worker.stats()["llm"]["rejected"] == 0
        agent = asyncio.ensure_future(worker.call("llm", ChatRequest(messages=[{"role": "user", "content": "x"}])))
        gate.set()
        await asyncio.gather(*calls, agent)  # the agent's turn still had room in the queue
    finally:
        gate.set()
        await worker.close()


async def test_without_an_llm_engine_the_translator_gets_its_own_lane() -> None:
    chat = ScriptedChat(default="Gracias.")
    worker = Worker()
    spec, *_ = mt.engine_specs(Settings())
    worker.add(dataclasses.replace(spec, factory=lambda: ChatTranslationEngine(chat, kind="embedded")))
    try:
        assert worker.host_of("mt") == "mt" and "shares" not in worker.stats()["mt"]
        result = await worker.call("mt", TextTranslateRequest("Thank you.", "en", "es"), timeout=10)
        assert result.text == "Gracias."
    finally:
        await worker.close()


def test_a_shared_spec_needs_an_adapter() -> None:
    for bad in ({"shares": "llm"}, {"shares": "mt", "adapt": lambda engine: engine}):
        with pytest.raises(ValueError):
            EngineSpec(name="mt", factory=never_built, **bad)  # type: ignore[arg-type]


async def test_a_translation_does_not_step_aside_as_agent_turns_do() -> None:
    class SteppingChat(ScriptedChat):
        """Calls its step hook once per generation, as the embedded model does before each layer, and records
        how long it waited."""

        def __init__(self) -> None:
            super().__init__(default="ok")
            self.checkpoint = lambda: 0.0
            self.step_done = lambda: None
            self.waited: list[tuple[str, float]] = []

        def generate(self, request, cancel):  # type: ignore[no-untyped-def]
            self.waited.append((request.messages[-1]["content"], self.checkpoint()))
            yield from super().generate(request, cancel)

    chat = SteppingChat()
    worker = Worker()
    worker.add(EngineSpec(name="llm", factory=lambda: chat, yields_to=("asr",), yield_max_s=0.3))
    spec, *_ = mt.engine_specs(Settings())
    worker.add(spec)
    busy = worker.priority.running("asr")  # captions decoding all the time
    busy.__enter__()
    try:
        await worker.call("llm", ChatRequest(messages=[{"role": "user", "content": "agent turn"}]), timeout=10)
        await worker.call("mt", TextTranslateRequest("Thank you.", "en", "es"), timeout=10)
        await worker.call("llm", ChatRequest(messages=[{"role": "user", "content": "next turn"}]), timeout=10)
    finally:
        busy.__exit__(None, None, None)
        await worker.close()
    waited = dict(chat.waited)
    assert waited["agent turn"] >= 0.25 and waited["next turn"] >= 0.25  # the agent steps aside (the host's hooks)
    assert waited["Thank you."] == 0.0  # the translation does not, and the host's hooks are back after it


class ClauseVoice(OneAtATime):
    """An embedded voice whose clauses take no time; records the seconds each waited at its checkpoint."""

    def __init__(self) -> None:
        self.waited: list[float] = []
        self._loaded = False

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self, progress: object) -> None:
        self._loaded = True

    def run_batch(self, requests: list[SynthesisRequest]) -> list[Synthesis | Exception]:
        checkpoint = self.checkpoint
        self.checkpoint = lambda: self.waited.append(checkpoint()) or 0.0  # type: ignore[method-assign]
        try:
            return super().run_batch(requests)
        finally:
            self.checkpoint = checkpoint  # type: ignore[method-assign]

    def _synthesize(self, request: SynthesisRequest) -> Synthesis:
        return Synthesis(pcm=np.zeros(160, dtype=np.int16), sample_rate=16000, text=request.text, voice="v",
                         speed=request.speed)


async def hold(worker: Worker, name: str, seconds: float) -> None:
    """Mark ``name`` busy in ``worker``'s priority gate for ``seconds``, as a batch of that engine would."""
    with worker.priority.running(name):
        await asyncio.sleep(seconds)


async def test_a_voice_steps_aside_for_a_translation_on_the_llm_lane_not_for_an_agent_turn() -> None:
    voice = ClauseVoice()
    marks: dict[str, tuple[bool, bool]] = {}

    class MarkingChat(ScriptedChat):
        """Records, per request, whether the gate had ``mt`` and ``llm`` busy while it decoded."""

        def generate(self, request, cancel):  # type: ignore[no-untyped-def]
            marks[request.messages[-1]["content"]] = (worker.priority.busy(["mt"]), worker.priority.busy(["llm"]))
            yield from super().generate(request, cancel)

    worker = Worker()
    worker.add(EngineSpec(name="llm", factory=lambda: MarkingChat(default="ok"), yields_to=("tts", "asr")))
    spec, *_ = mt.engine_specs(Settings())
    worker.add(spec)
    worker.add(dataclasses.replace(tts.engine_spec(Settings()), factory=lambda: voice))  # the real registration
    try:
        await worker.call("mt", TextTranslateRequest("Thank you.", "en", "es"), timeout=10)
        await worker.call("llm", ChatRequest(messages=[{"role": "user", "content": "agent turn"}]), timeout=10)
        for busy, name in ((0.0, None), (0.25, "mt"), (0.0, "llm")):
            holder = asyncio.create_task(hold(worker, name, 0.3)) if name else None
            await asyncio.sleep(0)  # the holder has marked ``name`` busy
            await worker.call("tts", SynthesisRequest("Hola."), timeout=10)
            if holder is not None:
                await holder
            assert voice.waited[-1] >= busy and (busy or voice.waited[-1] < 0.2), (name, voice.waited)
    finally:
        await worker.close()
    assert marks["Thank you."] == (True, False)  # a translation on the LLM's lane is marked as mt's
    assert marks["agent turn"] == (False, True)
