"""The fixed workloads that time this machine's engines (the figures behind :mod:`rtc_agent.worker.capacity`).

Each probe is ``async probe(call) -> ProbeResult`` where ``call(request)`` runs one request on the engine through
the worker (``Worker.call``: the engine's own threads, queue and batching, never the event loop). Times are wall
seconds measured around the calls, on a machine that runs nothing else (the probe runs after the preloaded
engines finished loading and before sessions arrive; see :class:`rtc_agent.worker.speed.SpeedProbe`).

- ASR (:func:`asr_probe`), shaped as the captions app decodes: ``partial_s`` one greedy decode of
  ``PARTIAL_AUDIO_S`` of speech (a partial), ``partial_batch_s`` the same decode as one of ``PARTIAL_BATCH``
  requests in one batch (wall time of the batch / its size: partials of several sessions batch together),
  ``final_s`` one beam-``FINAL_BEAM`` decode of ``FINAL_AUDIO_S`` (a final with its earlier-speech context).
  The audio is real speech when the TTS engine is loaded (Piper reading ``PROBE_TEXT``, resampled to 16 kHz),
  else noise at a speech-like level (Whisper writes fewer tokens for noise, so those figures run low); the
  result's ``note`` says which. ``parallel`` is the decodes the engine runs at once (``PARALLEL_DECODES``).
- TTS (:func:`tts_probe`): ``rtf``, seconds of synthesis per second of speech, over ``TTS_TEXT``.
- LLM (:func:`llm_probe`): ``prefill_s`` (to the first token of ``LLM_PROMPT``, ``prompt_tokens`` long),
  ``step_s`` (seconds per generated token after the first).

The probes cost about 2-4 s of CPU once. :func:`embedded_probes` picks the probes for the engines the settings
run on this machine (a remote engine's speed is not this machine's).

Under load the same figures predict each batch the engine runs (:func:`asr_expected_s`, picked by
:func:`embedded_expectations`): the batch's seconds over that prediction is the running slowdown that
:class:`~rtc_agent.worker.speed.RunningSpeed` feeds the speed book.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import numpy as np

from rtc_agent.engines.asr.base import SAMPLE_RATE, TranscribeRequest
from rtc_agent.engines.llm.messages import ChatRequest
from rtc_agent.engines.tts.base import SynthesisRequest
from rtc_agent.worker.decode_plan import final_seconds
from rtc_agent.worker.speed import Expectation, ProbeResult, ServiceSample

Call = Callable[[Any], Awaitable[Any]]

PARTIAL_AUDIO_S = 4.0
PARTIAL_BATCH = 4
FINAL_AUDIO_S = 8.0
FINAL_BEAM = 5
REPEATS = 2  # each timed shape runs this many times; the fastest counts (the first run may still warm caches)
PROBE_TEXT = ("The meeting starts at nine tomorrow morning, so please bring the budget spreadsheet and the notes "
              "from last week. We will talk about the new release, the two machines in the lab, and who travels "
              "to the conference in March.")
TTS_TEXT = PROBE_TEXT.split(". ")[0] + "."
LLM_PROMPT = ("You are a helpful voice assistant. Answer in one short sentence. The user is planning a trip and "
              "asks about trains, hotels and the weather; keep answers brief and friendly. " * 3)
LLM_MAX_TOKENS = 8  # a token can take 0.1-1 s on a small CPU: keep the probe short
NOISE_RMS = 0.05  # about -26 dBFS, a talker's level at the microphone
#: A running request is compared with the probe's shape only when its audio is within this factor of the shape's
#: (decode time is about linear in the audio there; a 0.4 s partial still encodes a 3 s window).
SIZE_BAND = 2.0

__all__ = ["SIZE_BAND", "asr_expected_s", "asr_probe", "embedded_expectations", "embedded_probes", "llm_probe",
           "probe_speech", "tts_probe"]


async def _timed(call: Call, requests: list[Any]) -> tuple[float, list[Any]]:
    """Wall seconds to run ``requests`` at once (the worker batches what arrives together), and the results."""
    start = time.monotonic()
    results = await asyncio.gather(*(call(r) for r in requests))
    return time.monotonic() - start, list(results)


async def _fastest(call: Call, make: Callable[[], list[Any]]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        seconds, _ = await _timed(call, make())
        best = min(best, seconds)
    return best


def _resample(pcm: np.ndarray, rate: int) -> np.ndarray:
    """int16 (or float) mono at ``rate`` -> float32 at 16 kHz (linear interpolation: enough for a probe)."""
    x = np.asarray(pcm, dtype=np.float32)
    if np.issubdtype(np.asarray(pcm).dtype, np.integer):
        x = x / 32768.0
    if rate == SAMPLE_RATE or len(x) == 0:
        return x
    n = int(len(x) * SAMPLE_RATE / rate)
    return np.interp(np.arange(n) * (rate / SAMPLE_RATE), np.arange(len(x)), x).astype(np.float32)


def _noise(seconds: float) -> np.ndarray:
    """Deterministic noise at a speech-like level, shaped in 4 Hz syllable-rate bursts."""
    rng = np.random.default_rng(19)
    n = int(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    envelope = 0.55 + 0.45 * np.sin(2 * np.pi * 4.0 * t)
    x = rng.standard_normal(n) * envelope
    return (x * NOISE_RMS / max(1e-9, float(np.sqrt(np.mean(x * x))))).astype(np.float32)


async def probe_speech(tts_call: Call | None) -> tuple[np.ndarray, str]:
    """``FINAL_AUDIO_S`` of probe audio at 16 kHz and what it is: Piper speech of ``PROBE_TEXT`` (repeated to the
    length) when ``tts_call`` is given and works, else noise."""
    if tts_call is not None:
        try:
            synthesis = await tts_call(SynthesisRequest(PROBE_TEXT))
            speech = _resample(synthesis.pcm, synthesis.sample_rate)
            if len(speech) > SAMPLE_RATE:
                need = int(FINAL_AUDIO_S * SAMPLE_RATE)
                return np.tile(speech, need // len(speech) + 1)[:need], "speech (tts)"
        except Exception:  # the TTS failing must not stop the ASR probe: noise it is
            pass
    return _noise(FINAL_AUDIO_S), "noise"


async def asr_probe(call: Call, *, tts_call: Call | None = None, parallel: int = 1) -> ProbeResult:
    """Time a partial, a batch of partials and a final (see the module docstring)."""
    audio, source = await probe_speech(tts_call)
    partial = audio[: int(PARTIAL_AUDIO_S * SAMPLE_RATE)]

    def partials(n: int) -> list[TranscribeRequest]:
        return [TranscribeRequest(partial, language="en", beam_size=1) for _ in range(n)]

    partial_s = await _fastest(call, lambda: partials(1))
    batch_s = await _fastest(call, lambda: partials(PARTIAL_BATCH)) / PARTIAL_BATCH
    final_s = await _fastest(call, lambda: [TranscribeRequest(audio, language="en", beam_size=FINAL_BEAM)])
    return ProbeResult({"partial_s": partial_s, "partial_batch_s": batch_s, "final_s": final_s},
                       parallel=parallel,
                       note=f"{source}: partial {PARTIAL_AUDIO_S:g} s greedy (alone, and in a batch of "
                            f"{PARTIAL_BATCH}), final {FINAL_AUDIO_S:g} s beam {FINAL_BEAM}")


async def tts_probe(call: Call) -> ProbeResult:
    """Seconds of synthesis per second of speech (``rtf``) of ``TTS_TEXT``."""
    best = float("inf")
    for _ in range(REPEATS):
        seconds, (synthesis,) = await _timed(call, [SynthesisRequest(TTS_TEXT)])
        best = min(best, seconds / max(0.1, synthesis.duration_s))
    return ProbeResult({"rtf": best}, parallel=1, note=f"{len(TTS_TEXT)} characters of English")


async def llm_probe(call: Call) -> ProbeResult:
    """Prefill (to the first token) and per-token step of a greedy reply to ``LLM_PROMPT``."""
    request = ChatRequest(messages=[{"role": "system", "content": LLM_PROMPT},
                                    {"role": "user", "content": "Name three things to pack for a rainy city."}],
                          max_tokens=LLM_MAX_TOKENS)
    result = await call(request)  # once: the engine's load already ran a warm-up generation
    usage = result.usage
    tokens = usage.completion_tokens if usage is not None else 0
    first = result.first_token_s if result.first_token_s is not None else result.duration_s
    figures = {"prefill_s": first, "prompt_tokens": float(usage.prompt_tokens if usage is not None else 0)}
    if tokens > 1:
        figures["step_s"] = (result.duration_s - first) / (tokens - 1)
    return ProbeResult(figures, parallel=1, note=f"greedy, up to {LLM_MAX_TOKENS} tokens")


def embedded_probes(settings: Any, loaded_call: Callable[[str], Call | None]
                    ) -> dict[str, Callable[[Call], Awaitable[ProbeResult]]]:
    """Probes, by engine name, for the engines that run on this machine as ``settings`` configure them.

    The ASR probe asks ``loaded_call("tts")`` (``SpeedProbe.loaded_call``: a call when that engine is loaded,
    else None) for the TTS engine, so that it decodes speech when Piper is loaded."""
    from rtc_agent.engines.llm import EMBEDDED_NAMES

    probes: dict[str, Callable[[Call], Awaitable[ProbeResult]]] = {}  # in probing order: TTS speaks to the ASR
    tts_local = (settings.tts_engine or "embedded").strip().lower() in ("embedded", "piper", "")
    if tts_local:
        probes["tts"] = tts_probe
    if (settings.asr_engine or "embedded").strip().lower() == "embedded":
        from rtc_agent.engines.asr.whisper import PARALLEL_DECODES

        async def asr(call: Call) -> ProbeResult:
            return await asr_probe(call, tts_call=loaded_call("tts") if tts_local else None,
                                   parallel=PARALLEL_DECODES)

        probes["asr"] = asr
    if (settings.llm_engine or "embedded").strip().lower() in EMBEDDED_NAMES:
        probes["llm"] = llm_probe
    return probes


def asr_expected_s(figures: Mapping[str, float], sample: ServiceSample) -> float | None:
    """The seconds ``figures`` (the ASR probe's) predict for the batch of ``sample``: each ``partial`` (greedy)
    request at the per-request cost of a batch of that many partials (``partial_s`` alone, ``partial_batch_s``
    from ``PARTIAL_BATCH`` on, linear between), each ``final`` (beam ``FINAL_BEAM``) request at ``final_s`` and each
    ``final:<beam>`` one between the greedy and the beam-5 cost
    (:func:`~rtc_agent.worker.decode_plan.final_seconds`), all scaled by the
    request's audio over the probe's. None when a request's audio is outside ``SIZE_BAND`` of its shape's, a shape
    is unknown or the figures lack it: the batch says nothing reliable then."""
    partials = sum(1 for shape, _ in sample.items if shape == "partial")
    alone, batched = figures.get("partial_s"), figures.get("partial_batch_s", figures.get("partial_s"))
    total = 0.0
    for shape, seconds in sample.items:
        if shape == "partial" and alone is not None and batched is not None:
            reference = PARTIAL_AUDIO_S
            share = min(1.0, (partials - 1) / (PARTIAL_BATCH - 1))
            cost = alone + share * (batched - alone)
        elif shape.partition(":")[0] == "final" and figures.get("final_s") is not None:
            beam = int(shape.partition(":")[2] or FINAL_BEAM)
            reference, cost = FINAL_AUDIO_S, final_seconds(figures, beam, FINAL_AUDIO_S) or figures["final_s"]
        else:
            return None
        if not reference / SIZE_BAND <= seconds <= reference * SIZE_BAND:
            return None
        total += cost * seconds / reference
    return total if sample.items else None


def embedded_expectations(settings: Any) -> dict[str, Expectation]:
    """Expectations, by engine name, for the probed engines that write service samples (the embedded ASR)."""
    if (settings.asr_engine or "embedded").strip().lower() == "embedded":
        return {"asr": asr_expected_s}
    return {}
