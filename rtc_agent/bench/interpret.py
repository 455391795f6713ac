"""``rtc-agent bench interpret``: simultaneous interpretation measured at a real aiortc peer.

The audio file is streamed in real time through a real peer connection into the ``interpret`` app of an
in-process server with the configured engines (translated speech on, as a user gets it), and the
``translation.*`` events are timed where they arrive. Measured:

- quality: chrF and BLEU (sacrebleu) of the streamed translation (every EMIT and flush text, in order) against the
  reference, and the same scores for offline Whisper translate of the same file (faster-whisper's ``transcribe``
  with ``task="translate"`` over the whole file: 30 s windows, beam search) with the same packaged model;
- latency, StreamLAAL-style: the translation is re-segmented onto the reference sentences (one per line of the
  reference) by a word-level edit-distance alignment (as mWERSegmenter does); each sentence's source span comes from
  Silero VAD over the file (used when the counts match, else the whole file is one segment); per sentence,
  Length-Adaptive Average Lagging ``LAAL = 1/tau * sum_{i<=tau} (d_i - (i-1) * |X| / max(|Y|, |Y*|))`` with
  ``d_i`` measured from the sentence start, averaged over sentences. Two delays per word: computation-aware
  (``stream_laal_ca_ms``: when its event arrived at the peer, on the clock of the audio sent) and ideal
  (``stream_laal_ms``: the end of the chunk it was emitted for). Average Lagging (``|Y|`` instead of the max) too;
- per-chunk model latency (``latency_ms`` of the events), the EMIT/WAIT/SKIP counts and the model calls saved by
  VAD skipping (SKIP chunks: no model call), flushes and context resets;
- with ``--via http`` the file goes through ``POST /v1/translate/stream`` instead (as fast as the engines go: only
  the ideal latency is meaningful).

``--script FILE`` (one sentence a line) synthesizes the audio with espeak-ng in ``--voice`` (default: the source
language) instead of ``--audio``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.bench.audio import load_audio_48k, offline_whisper, speech_segments_ms
from rtc_agent.bench.common import local_server, machine, normalize_text, percentile_ms, write_json
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.sources import PcmSourceTrack, load_audio

TARGETS = {"stream_laal_ca_ms": 2500, "chrf_vs_offline_ratio": 0.9}
SETTLE_S = 6.0  # after the audio: silence keeps flowing (the silence flush fires after 2.4 s)


# --- audio ------------------------------------------------------------------------------------------------------

def espeak_clip(sentences: list[str], voice: str, *, gap_s: float = 0.8, lead_s: float = 0.5,
                tail_s: float = 1.0, speed: int = 150) -> np.ndarray:
    """The sentences spoken by espeak-ng with ``gap_s`` of silence between them, as 16 kHz int16."""
    parts = [np.zeros(int(lead_s * 16000), dtype=np.int16)]
    with tempfile.TemporaryDirectory() as tmp:
        for i, sentence in enumerate(sentences):
            path = Path(tmp) / f"s{i}.wav"
            subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(path), sentence], check=True,
                           capture_output=True)
            parts.append(load_audio(path, 16000))
            parts.append(np.zeros(int((gap_s if i < len(sentences) - 1 else tail_s) * 16000), dtype=np.int16))
    return np.concatenate(parts)


def speech_spans(audio16: np.ndarray, min_silence_ms: int = 500) -> list[tuple[float, float]]:
    """(start_s, end_s) of each Silero VAD speech segment."""
    return [(a / 1000, b / 1000) for a, b in speech_segments_ms(audio16.astype(np.float32), min_silence_ms)]


def offline_translation(audio16: np.ndarray, language: str | None) -> tuple[str, float]:
    """faster-whisper's offline translation of the whole file with the packaged model (and its run time)."""
    return offline_whisper(audio16.astype(np.float32) / 32768.0, language, task="translate")


# --- scoring ----------------------------------------------------------------------------------------------------

def quality(hypothesis: str, reference: str) -> dict[str, float]:
    """chrF and BLEU (sacrebleu defaults) of one hypothesis against one reference."""
    from sacrebleu.metrics import BLEU, CHRF

    return {"chrf": round(CHRF().corpus_score([hypothesis], [[reference]]).score, 2),
            "bleu": round(BLEU().corpus_score([hypothesis], [[reference]]).score, 2)}


def align_to_sentences(hyp_words: list[str], ref_sentences: list[list[str]]) -> list[int]:
    """The reference sentence each hypothesis word belongs to: a Levenshtein alignment of the normalized words
    (mWERSegmenter's idea); a word aligned to nothing joins the sentence of the word before it."""
    ref = [(k, w) for k, sentence in enumerate(ref_sentences) for w in sentence]
    n, m = len(hyp_words), len(ref)
    if n == 0:
        return []
    if m == 0:
        return [0] * n
    h = [normalize_text(w) for w in hyp_words]
    r = [normalize_text(w) for _, w in ref]
    cost = np.zeros((n + 1, m + 1), dtype=np.int32)
    cost[:, 0] = np.arange(n + 1)
    cost[0, :] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost[i, j] = min(cost[i - 1, j - 1] + (h[i - 1] != r[j - 1]), cost[i - 1, j] + 1, cost[i, j - 1] + 1)
    owner: list[int | None] = [None] * n
    i, j = n, m
    while i > 0 and j > 0:
        if cost[i, j] == cost[i - 1, j - 1] + (h[i - 1] != r[j - 1]):
            owner[i - 1] = ref[j - 1][0]
            i, j = i - 1, j - 1
        elif cost[i, j] == cost[i - 1, j] + 1:
            i -= 1
        else:
            j -= 1
    out: list[int] = []
    last = 0
    for k in owner:
        last = k if k is not None else last
        out.append(last)
    return out


def lagging(delays_s: list[float], source_s: float, ref_words: int) -> tuple[float, float] | None:
    """(LAAL, AL) in seconds for one sentence: ``delays_s`` from its start, one per emitted word, in order."""
    if not delays_s or source_s <= 0:
        return None
    hyp_words = len(delays_s)
    tau = next((i + 1 for i, d in enumerate(delays_s) if d >= source_s), hyp_words)
    laal_rate = source_s / max(hyp_words, ref_words)
    al_rate = source_s / hyp_words
    laal = sum(delays_s[i] - i * laal_rate for i in range(tau)) / tau
    al = sum(delays_s[i] - i * al_rate for i in range(tau)) / tau
    return laal, al


def stream_laal(words: list[tuple[str, float, float]], reference: str, spans: list[tuple[float, float]],
                audio_s: float) -> dict[str, Any]:
    """StreamLAAL-style latency. ``words``: (word, ideal delay s, computation-aware delay s) on the stream clock."""
    ref_sentences = [line.split() for line in reference.splitlines() if line.strip()]
    if len(spans) != len(ref_sentences) or not ref_sentences:
        ref_sentences = [reference.split()]
        spans = [(0.0, audio_s)]
        per_sentence = False
    else:
        per_sentence = True
    owners = align_to_sentences([w for w, _, _ in words], ref_sentences)
    rows = {"ideal": [], "ca": []}
    for k, (start, end) in enumerate(spans):
        mine = [words[i] for i in range(len(words)) if owners[i] == k]
        for name, col in (("ideal", 1), ("ca", 2)):
            result = lagging([max(0.0, w[col] - start) for w in mine], end - start, len(ref_sentences[k]))
            if result is not None:
                rows[name].append(result)

    def mean_ms(values: list[tuple[float, float]], idx: int) -> float | None:
        return round(1000 * float(np.mean([v[idx] for v in values])), 1) if values else None

    return {"stream_laal_ms": mean_ms(rows["ideal"], 0), "stream_laal_ca_ms": mean_ms(rows["ca"], 0),
            "average_lagging_ms": mean_ms(rows["ideal"], 1), "average_lagging_ca_ms": mean_ms(rows["ca"], 1),
            "segments": len(spans), "per_sentence": per_sentence}


def emitted_words(events: list[tuple[dict[str, Any], float]], sent_at: float | None) -> list[tuple[str, float, float]]:
    """(word, ideal delay, computation-aware delay) of every translated word, in arrival order."""
    out = []
    for event, arrived in events:
        if event["type"] == "translation.chunk" and event["action"] == "EMIT":
            ideal = event["audio_end_ms"] / 1000
        elif event["type"] == "translation.flush" and event.get("text"):
            ideal = (event.get("audio_end_ms") or event["session_ms"]) / 1000
        else:
            continue
        ca = arrived - sent_at if sent_at is not None else ideal
        out.extend((w, ideal, max(ideal, ca)) for w in event["text"].split())
    return out


# --- runs -------------------------------------------------------------------------------------------------------

async def stream_peer(base_url: str, pcm48: np.ndarray, config: dict[str, Any]) -> dict[str, Any]:
    peer = ClientPeer(base_url, "interpret", config=config, audio=PcmSourceTrack(pcm48, 48000, tail="silence"),
                      receive_audio=True)
    await peer.connect()
    try:
        await asyncio.sleep(len(pcm48) / 48000 + SETTLE_S)
        info = await peer.session_info()
        received = peer.received_audio()
    finally:
        await peer.close()
    return {"events": list(zip(peer.events, peer.event_times, strict=True)), "sent_at": peer.audio.pacer.started_at,
            "info": info.get("app_stats", {}), "received_audio_s": round(received.size / 48000, 2),
            "spoken_rms": round(float(np.sqrt(np.mean((received.astype(np.float64) / 32768) ** 2))), 4)
            if received.size else 0.0}


async def stream_http(base_url: str, wav: bytes, config: dict[str, Any]) -> dict[str, Any]:
    import aiohttp

    form = aiohttp.FormData()
    form.add_field("file", wav, filename="audio.wav", content_type="audio/wav")
    for key, value in config.items():
        form.add_field(key, str(value))
    events = []
    async with aiohttp.ClientSession() as http, http.post(f"{base_url}/v1/translate/stream", data=form) as resp:
        if resp.status != 200:
            raise SystemExit(f"translate stream failed: HTTP {resp.status}: {await resp.text()}")
        async for line in resp.content:
            if line.strip():
                events.append((json.loads(line), time.monotonic()))
    stats = next((e["translation"] for e, _ in events if e["type"] == "metrics"), {})
    return {"events": events, "sent_at": None, "info": stats}


async def run(args: argparse.Namespace, reference: str | None) -> dict[str, Any]:
    if args.audio:
        pcm16 = load_audio(args.audio, 16000)
        source = args.audio
    elif args.script:
        sentences = [ln.strip() for ln in args.script.read_text().splitlines() if ln.strip()]
        pcm16 = espeak_clip(sentences, args.voice or args.source_language)
        source = f"{args.script} spoken by espeak-ng ({args.voice or args.source_language})"
    else:
        raise SystemExit("give --audio FILE or --script FILE")
    if not reference:
        raise SystemExit("give --ref TEXT (or @FILE): the reference translation, one sentence per line")
    audio_s = len(pcm16) / 16000
    language = None if args.source_language == "auto" else args.source_language
    spans = speech_spans(pcm16)
    offline, offline_s = offline_translation(pcm16, language)
    config = {"source_language": args.source_language, "target_language": args.target_language}
    async with local_server() as server:
        if args.via == "http":
            from rtc_agent.engines.tts.base import encode_wav

            result = await stream_http(server.base_url, encode_wav(pcm16, 16000), config)
        else:
            result = await stream_peer(server.base_url, load_audio_48k(pcm16), config)
    events = result["events"]
    words = emitted_words(events, result["sent_at"])
    text = " ".join(w for w, _, _ in words)
    chunks = [e for e, _ in events if e["type"] == "translation.chunk"]
    counts = {a: sum(1 for c in chunks if c["action"] == a) for a in ("EMIT", "WAIT", "SKIP")}
    latencies = [c["latency_ms"] / 1000 for c in chunks if c.get("latency_ms") is not None]
    flushes = [e for e, _ in events if e["type"] == "translation.flush"]
    streamed = quality(text, " ".join(reference.split()))
    reference_scores = quality(offline, " ".join(reference.split()))
    lag = stream_laal(words, reference, spans, audio_s)
    catchups = [e for e, _ in events if e["type"] == "translation.speech.catchup"]
    ratio = round(streamed["chrf"] / reference_scores["chrf"], 3) if reference_scores["chrf"] else None
    return {
        "benchmark": "interpret",
        "via": args.via,
        "source": source,
        "audio_s": round(audio_s, 2),
        "speech_segments": len(spans),
        "languages": config,
        **lag,
        "chrf": streamed["chrf"],
        "bleu": streamed["bleu"],
        "offline_chrf": reference_scores["chrf"],
        "offline_bleu": reference_scores["bleu"],
        "chrf_vs_offline_ratio": ratio,
        "chunks": len(chunks),
        "actions": counts,
        "model_calls": sum(1 for c in chunks if c.get("st_attempted")),
        "model_calls_saved_by_vad": counts["SKIP"],
        "model_calls_saved_pct": round(100 * counts["SKIP"] / len(chunks), 1) if chunks else None,
        "flushes": {t: sum(1 for f in flushes if f["trigger"] == t) for t in sorted({f["trigger"] for f in flushes})},
        "resets": sum(1 for e, _ in events if e["type"] == "translation.reset"),
        "chunk_latency_ms": {"p50": percentile_ms(latencies, 50), "p90": percentile_ms(latencies, 90),
                             "max": percentile_ms(latencies, 100)},
        "speech": {"received_audio_s": result.get("received_audio_s"), "rms": result.get("spoken_rms"),
                   "catchup_events": len(catchups)} if args.via == "peer" else None,
        "offline_translate_s": round(offline_s, 2),
        "meets_targets": {
            "stream_laal_ca": lag["stream_laal_ca_ms"] is not None
            and lag["stream_laal_ca_ms"] <= TARGETS["stream_laal_ca_ms"] if args.via == "peer" else None,
            "chrf_within_10pct": ratio is not None and ratio >= TARGETS["chrf_vs_offline_ratio"],
        },
        "targets": TARGETS,
        "text": text,
        "offline_text": offline,
        "reference": reference,
        "app_stats": result["info"],
        "machine": machine(),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--audio", help="audio file to interpret (any format ffmpeg reads)")
    parser.add_argument("--script", type=Path, help="text file, one source sentence a line, spoken by espeak-ng "
                                                    "(used when --audio is not given)")
    parser.add_argument("--voice", default=None, help="espeak-ng voice for --script (default: the source language)")
    parser.add_argument("--ref", help="reference translation, one sentence per line: the text itself or @FILE")
    parser.add_argument("--source-language", default="auto", help="spoken language code, or auto (default)")
    parser.add_argument("--target-language", default="en", help="target language code (default en)")
    parser.add_argument("--via", choices=("peer", "http"), default="peer",
                        help="peer: real time through a WebRTC peer (default); http: POST /v1/translate/stream")
    parser.add_argument("--out", help="write the JSON results here")


def main(args: argparse.Namespace) -> dict[str, Any]:
    reference = args.ref
    if reference and reference.startswith("@"):
        reference = Path(reference[1:]).read_text()
    result = asyncio.run(run(args, reference))
    return write_json(result, args.out)
