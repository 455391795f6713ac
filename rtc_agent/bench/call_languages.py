"""``rtc-agent bench call --languages en-es|es-en-de``: interpretation into every listener's language (issue 21).

Real aiortc peers join one room of the ``call`` app on a real server process (every engine loaded, the
multilingual voice and the text translator too), each speaking espeak-ng speech in its own language in turns
(one sentence every ``SLOT_S`` seconds, round the room) and listening in its own language, so every speaker is
interpreted for every other participant:

- ``en-es``: an English and a Spanish speaker on the embedded defaults (Whisper translate into English; the
  packaged LLM translating the English captions into Spanish on the worker's one ``llm`` model; Piper and Kokoro).
- ``es-en-de``: Spanish, English and German speakers with a remote translation model: a scripted
  OpenAI-compatible chat server that this benchmark starts itself (:class:`ScriptedMTServer`, a fixed reply per
  language after ``--mt-delay-ms``), standing for a vLLM box.

Measured at each listener, per utterance of every other speaker (the clip's own speech extents; an utterance ends
when its last sample was sent, as logged every 20 ms during the call):

- translation text lag: from the end of the utterance to the arrival of the last ``caption.translation`` that
  covers it (the whole translation is on screen); ``first`` is the first one;
- skipped utterances: those no ``caption.translation`` covers, and the ``translation.speech.catchup`` ``skip`` /
  ``drop`` events (interpretation not spoken or not translated);
- speech (``en-es``): the listener's received track, voiced parts only, recognized by offline Whisper base with
  language detection: the detected language and the WER against the texts it spoke (``translation.speech.started``;
  texts skipped for lag are on screen only and count under ``speech_skipped``).

The peers run in this process and share the machine with the server: say how busy it was (``load_1min_before``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from aiohttp import web

from rtc_agent.bench.audio import load_audio_48k, resample
from rtc_agent.bench.common import free_port, local_server, machine, percentile_ms, speech_summary, wer, write_json
from rtc_agent.bench.interpret import espeak_clip
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack

SENTENCES = {
    "en": ["Please remember to bring your umbrella tomorrow morning.", "The library opens at nine on Saturday.",
           "Our team finished the report on Friday.", "The train to the airport leaves every twenty minutes."],
    "es": ["Mi hermana trabaja en un hospital grande cerca del río.", "Mañana vamos a visitar a nuestros abuelos.",
           "El tren sale de la estación a las ocho.", "Necesitamos comprar pan y leche para la cena."],
    "de": ["Meine Schwester arbeitet in einem großen Krankenhaus.", "Der Zug fährt um acht Uhr ab.",
           "Wir brauchen Brot und Milch für das Abendessen.", "Morgen besuchen wir unsere Großeltern."],
}
#: the scripted remote model's answer per target language (what it says does not matter here: lag and skips do)
SCRIPTED_REPLIES = {"en": "This is the translated sentence.", "es": "Esta es la frase traducida.",
                    "de": "Das ist der übersetzte Satz."}
SCENARIOS = {"en-es": ("en", "es"), "es-en-de": ("es", "en", "de")}
SLOT_S = 5.5  # one utterance every SLOT_S seconds, round the room
LEAD_S = 2.0
SETTLE_S = 12.0  # after the last utterance: the last translations and speech arrive
TARGETS = {"en-es": {"translation_text_p90_ms": 4000, "speech_wer": 0.35},
           "es-en-de": {"skipped_utterances": 0, "interpretation_lag_p90_ms": 5000}}
VOICED_RMS = 0.01  # received 20 ms frames louder than this are interpretation speech


@dataclass
class Utterance:
    speaker: str  # language of the speaker
    text: str
    start_s: float  # in the speaker's clip
    end_s: float


@dataclass
class Speaker:
    language: str
    pcm48: np.ndarray
    utterances: list[Utterance] = field(default_factory=list)


def schedule(languages: tuple[str, ...], rounds: int) -> list[Speaker]:
    """Each speaker's 48 kHz clip: its sentences at its turns (``LEAD_S + k * SLOT_S`` for the k-th utterance of
    the room), silence elsewhere; with the speech extent of each utterance."""
    total = rounds * len(languages)
    length_s = LEAD_S + total * SLOT_S + 1.0
    speakers = [Speaker(lang, np.zeros(int(length_s * 16000), dtype=np.int16)) for lang in languages]
    for k in range(total):
        speaker = speakers[k % len(languages)]
        text = SENTENCES[speaker.language][(k // len(languages)) % len(SENTENCES[speaker.language])]
        clip = espeak_clip([text], speaker.language, lead_s=0.0, tail_s=0.0)
        voiced = np.flatnonzero(np.abs(clip.astype(np.int32)) > 300)
        clip = clip[voiced[0]:voiced[-1] + 1] if voiced.size else clip
        at = int((LEAD_S + k * SLOT_S) * 16000)
        clip = clip[: len(speaker.pcm48) - at]
        speaker.pcm48[at:at + len(clip)] = clip
        speaker.utterances.append(Utterance(speaker.language, text, at / 16000, (at + len(clip)) / 16000))
    for speaker in speakers:
        speaker.pcm48 = load_audio_48k(speaker.pcm48)
    return speakers


class ScriptedMTServer:
    """A tiny OpenAI-compatible chat server (``GET /v1/models``, ``POST /v1/chat/completions`` answered with one
    JSON completion, which the client accepts for a streamed request too): the reply of :data:`SCRIPTED_REPLIES`
    for the language the system prompt names, after ``delay_s``. ``requests`` counts what it answered."""

    NAMES = {"English": "en", "Spanish": "es", "German": "de"}

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.requests = 0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)

    async def __aenter__(self) -> ScriptedMTServer:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted-mt", "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        system = next((m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "system"), "")
        into = system.split(" into ", 1)[-1]
        target = next((code for name, code in self.NAMES.items() if into.startswith(name)), "en")
        await asyncio.sleep(self.delay_s)
        self.requests += 1
        reply = SCRIPTED_REPLIES[target]
        return web.json_response({
            "id": f"cmpl-{self.requests}", "object": "chat.completion", "model": "scripted-mt",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}})


def _voiced(peer: ClientPeer) -> np.ndarray:
    """The listener's received audio, 20 ms frames above :data:`VOICED_RMS` only, at 16 kHz."""
    audio = peer.received_audio()
    frames = audio[: len(audio) // 960 * 960].reshape(-1, 960).astype(np.float64) / 32768.0
    loud = frames[np.sqrt((frames ** 2).mean(axis=1)) > VOICED_RMS] if len(frames) else frames
    pcm48 = (loud.reshape(-1) * 32768.0).astype(np.int16)
    return resample(pcm48, 48000, 16000) if pcm48.size else pcm48


def recognize(pcm16: np.ndarray) -> tuple[str, str | None, float]:
    """Offline Whisper base on ``pcm16`` with language detection: (text, detected language, its probability)."""
    from faster_whisper import WhisperModel

    from rtc_agent.config import Settings
    from rtc_agent.engines.asr.whisper import resolve_model

    model = WhisperModel(resolve_model("", Path(Settings().cache_dir), lambda message: None), device="cpu",
                         compute_type="int8")
    segments, info = model.transcribe(pcm16.astype(np.float32) / 32768.0, language=None, beam_size=5,
                                      vad_filter=False)
    return " ".join(s.text.strip() for s in segments), info.language, round(float(info.language_probability), 3)


async def track_positions(peers: dict[str, ClientPeer], log: dict[str, list[tuple[float, float]]]) -> None:
    """Until cancelled: every 20 ms, each speaker's (monotonic time, seconds of its clip sent so far). The pacer
    restarts its clock after a stall of this process's loop, so the wall time of a clip position is taken from
    what was actually sent, not from the first frame's time."""
    while True:
        now = time.monotonic()
        for lang, peer in peers.items():
            track = peer.audio
            if isinstance(track, PcmSourceTrack) and track.pacer.started_at is not None:
                log.setdefault(lang, []).append((now, track.position / track.sample_rate))
        await asyncio.sleep(0.02)


def sent_at(log: list[tuple[float, float]], clip_s: float) -> float | None:
    """When the clip had been sent up to ``clip_s`` (the first sample of the log at or past it)."""
    return next((at for at, position in log if position >= clip_s), None)


def measure(listener: ClientPeer, language: str, peers: dict[str, ClientPeer], speakers: list[Speaker],
            positions: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """One listener's figures (see the module docstring)."""
    events = list(zip(listener.events, listener.event_times, strict=True))
    lags: list[float] = []
    firsts: list[float] = []
    skipped: list[str] = []
    for speaker in speakers:
        if speaker.language == language:
            continue
        sid = peers[speaker.language].session_id
        lines = [(e, at) for e, at in events if e["type"] == "caption.translation"
                 and (e.get("speaker") or {}).get("participant_id") == sid]
        for u in speaker.utterances:
            covering = [at for e, at in lines if e["audio_start_ms"] / 1000 < u.end_s + 0.5
                        and e["audio_end_ms"] / 1000 > u.start_s]
            end_at = sent_at(positions.get(speaker.language, []), u.end_s)
            if end_at is None:  # the call ended before this utterance was sent
                continue
            if not covering:
                skipped.append(f"{speaker.language}: {u.text}")
                continue
            lags.append(max(covering) - end_at)
            firsts.append(min(covering) - end_at)
    catchups = [e for e, _ in events if e["type"] == "translation.speech.catchup"]
    texts = [e["text"] for e, _ in events if e["type"] == "caption.translation"]
    spoken = [e["text"] for e, _ in events if e["type"] == "translation.speech.started"]
    return {
        "listen_language": language,
        "utterances_heard": len(lags) + len(skipped),
        "skipped_utterances": len(skipped), "skipped": skipped,
        "translation_text_lag_ms": {"p50": percentile_ms(lags, 50), "p90": percentile_ms(lags, 90),
                                    "max": percentile_ms(lags, 100)},
        "first_text_lag_ms": {"p50": percentile_ms(firsts, 50), "p90": percentile_ms(firsts, 90)},
        "speech_skipped": sum(e.get("action") == "skip" for e in catchups),
        "translations_dropped": sum(e.get("action") == "drop" for e in catchups),
        "speech_started": sum(e["type"] == "translation.speech.started" for e, _ in events),
        "errors": [e.get("error", {}).get("code") for e, _ in events if e["type"] == "error"],
        "translation_texts": texts,
        "spoken_texts": spoken,
    }


async def run_scenario(name: str, rounds: int, mt_delay_s: float) -> dict[str, Any]:
    languages = SCENARIOS[name]
    speakers = schedule(languages, rounds)
    stub = ScriptedMTServer(mt_delay_s) if name == "es-en-de" else None
    settings: dict[str, Any] = {"max_room_participants": len(languages)}
    if stub is not None:
        settings.update(mt_engine="openai", mt_url=stub.url, mt_model="scripted-mt")
    load_before = os.getloadavg()[0]
    async with contextlib.AsyncExitStack() as stack:
        if stub is not None:
            await stack.enter_async_context(stub)
        server = await stack.enter_async_context(local_server(also_load=("mt", "tts-kokoro"), **settings))
        room = f"languages-{name}-{int(time.time())}"
        peers = {s.language: ClientPeer(server.base_url, "call", receive_audio=True,
                                        config={"room": room, "name": s.language.upper(), "language": s.language,
                                                "listen_language": s.language, "interpret": True},
                                        audio=PcmSourceTrack(s.pcm48, 48000, tail="silence"))
                 for s in speakers}
        positions: dict[str, list[tuple[float, float]]] = {}
        tracker = asyncio.ensure_future(track_positions(peers, positions))
        try:
            for peer in peers.values():
                await peer.connect()
            cpu0, wall0 = server.cpu_seconds(), time.monotonic()
            await asyncio.sleep(max(len(s.pcm48) for s in speakers) / 48000 + SETTLE_S)
            cpu, wall = server.cpu_seconds() - cpu0, time.monotonic() - wall0
        finally:
            tracker.cancel()
            for peer in peers.values():
                await peer.close()
    listeners = {lang: measure(peer, lang, peers, speakers, positions) for lang, peer in peers.items()}
    for lang, peer in peers.items():
        listeners[lang]["voice"] = speech_summary(peer.events)
    resyncs = {lang: peer.audio.pacer.resyncs for lang, peer in peers.items()}
    if name == "en-es":
        for lang, peer in peers.items():
            voiced = _voiced(peer)
            if not voiced.size:
                listeners[lang]["speech"] = {"voiced_s": 0.0}
                continue
            text, detected, prob = recognize(voiced)
            reference = " ".join(listeners[lang]["spoken_texts"])
            listeners[lang]["speech"] = {"voiced_s": round(voiced.size / 16000, 2), "whisper_text": text,
                                         "detected_language": detected, "detected_probability": prob,
                                         "wer_vs_translation_text": round(wer(reference, text), 3) if text else None}
    p90s = [r["translation_text_lag_ms"]["p90"] for r in listeners.values()]
    return {"scenario": name, "languages": list(languages), "rounds": rounds, "listeners": listeners,
            "skipped_utterances": sum(r["skipped_utterances"] for r in listeners.values()),
            "worst_listener_translation_text_p90_ms": max((p for p in p90s if p is not None), default=None),
            "server_cpu_cores_used": round(cpu / wall, 2), "mt_requests_answered": stub.requests if stub else None,
            "peer_pacer_resyncs": resyncs,
            "targets": TARGETS[name], "load_1min_before": round(load_before, 2)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result = await run_scenario(args.languages, args.rounds, args.mt_delay_ms / 1000)
    return {"benchmark": "call-languages", **result, "machine": machine(),
            "note": args.note or "peers and server share this machine; figures of a loaded machine are not "
                                 "for tuning"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``rtc-agent bench call --languages ...`` (added to ``bench call``'s parser)."""
    parser.add_argument("--languages", choices=sorted(SCENARIOS), default=None,
                        help="measure interpretation into every listener's language instead of the room sweep: "
                             "en-es (embedded defaults) or es-en-de (a scripted remote translation model)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="with --languages: utterances per speaker (each takes a turn per round)")
    parser.add_argument("--mt-delay-ms", type=float, default=150.0,
                        help="with --languages es-en-de: the scripted translation server's answer time")
    parser.add_argument("--note", default="", help="with --languages: a note stored in the JSON")


def main(args: argparse.Namespace) -> dict[str, Any]:
    if not 1 <= args.rounds <= 8:
        raise SystemExit("--rounds must be 1-8")
    out = args.out if args.out != "docs/benchmarks/call.json" else f"docs/benchmarks/call-{args.languages}.json"
    return write_json(asyncio.run(run(args)), out)
