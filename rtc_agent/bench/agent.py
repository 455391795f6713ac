"""``rtc-agent bench agent``: voice-to-voice latency and barge-in, measured at a real aiortc peer.

A Python peer speaks requests (synthesized with the embedded Piper voice) into the ``agent`` app of a server
started as its own process, one turn at a time, and records the audio it gets back with arrival times. The peer
stands for a caller on another machine: it runs ``PEER_NICE`` lower in CPU priority than the server on the
shared cores (its arrival times can only come later for it, never earlier).

- voice-to-voice: from the end of the user's speech (the last loud sample as it was sent) to the first audible
  sample of the agent's answer as it arrived at the peer (p50, p90), and the server's stage timings for the same
  turns (end-of-turn detection, ASR, LLM time to first token, TTS time to first audio);
- barge-in: the peer starts talking while the agent is speaking; from the onset of its speech (as sent) to the
  first frame at the peer from which the agent's audio stays silent.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

from rtc_agent.bench.common import local_server, machine, percentile_ms, write_json
from rtc_agent.rtc.client import ClientPeer
from rtc_agent.rtc.resampler import audio_resampler
from rtc_agent.rtc.speech_output import SpeechOutput

RATE = 48000
#: The peer (the caller, in deployment on its own machine) runs this much lower in CPU priority than the server.
PEER_NICE = 10
LOUD = 10 ** (-35 / 20)  # a sample above -35 dBFS is speech
TARGETS = {"v2v_p50_ms": 1000, "barge_in_ms": 100}
REQUESTS = [
    "What is the capital of France?",
    "Tell me a fun fact about cats.",
    "How are you doing today?",
    "What should I cook for dinner tonight?",
    "Can you suggest a good name for a dog?",
    "What is your favorite color?",
    "How far away is the moon?",
    "Give me a tip for sleeping better.",
]
INTERRUPTED = "Please tell me a long story about a dragon who loved to bake bread."
INTERRUPTION = "Stop, that's enough."


def synthesize(texts: list[str]) -> dict[str, np.ndarray]:
    import av

    from rtc_agent.engines.tts.base import SynthesisRequest
    from rtc_agent.engines.tts.piper import PiperEngine

    engine = PiperEngine(noise=False)  # the same audio every run: runs stay comparable
    engine.load(lambda msg: None)
    out = {}
    for text in texts:
        result = engine.synthesize(SynthesisRequest(text=text))
        frame = av.AudioFrame.from_ndarray(result.pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = result.sample_rate
        resampler = audio_resampler(RATE)
        out[text] = np.concatenate([f.to_ndarray().reshape(-1)
                                    for f in [*resampler.resample(frame), *resampler.resample(None)]])
    return out


def loud_extent(pcm: np.ndarray) -> tuple[float, float]:
    """Seconds of the first and last loud sample."""
    idx = np.nonzero(np.abs(pcm.astype(np.float32) / 32768) > LOUD)[0]
    return (idx[0] / RATE, idx[-1] / RATE) if len(idx) else (0.0, len(pcm) / RATE)


class Speaker:
    """The peer's microphone: a paced track that plays utterances on demand and knows when each started."""

    def __init__(self) -> None:
        self.track = SpeechOutput(listener=self._event)
        self.started_at: dict[str, float] = {}

    def _event(self, utterance: Any, what: str) -> None:
        if what == "started":  # fired as the frame holding its first sample is handed to the encoder
            self.started_at[utterance.id] = time.monotonic()

    async def say(self, pcm: np.ndarray) -> tuple[float, float]:
        """Play ``pcm``; returns the wall times its speech started and ended as sent."""
        utterance = self.track.play(pcm, RATE)
        await utterance.done
        first, last = loud_extent(pcm)
        start = self.started_at[utterance.id]
        return start + first, start + last


def first_audible_after(peer: ClientPeer, t: float) -> float | None:
    for arrived, pcm in peer.audio_frames:
        if arrived < t:
            continue
        idx = np.nonzero(np.abs(pcm.astype(np.float32) / 32768) > LOUD)[0]
        if len(idx):
            return arrived + idx[0] / RATE
    return None


def silent_from(peer: ClientPeer, t: float, frames: int = 5) -> float | None:
    """Arrival time of the first frame after ``t`` from which ``frames`` frames in a row are silent."""
    run_start, run = None, 0
    for arrived, pcm in peer.audio_frames:
        if arrived < t:
            continue
        quiet = not np.any(np.abs(pcm.astype(np.float32) / 32768) > LOUD)
        if quiet:
            run_start = arrived if run == 0 else run_start
            run += 1
            if run >= frames:
                return run_start
        else:
            run = 0
    return None


async def wait_quiet(peer: ClientPeer, seconds: float, timeout: float) -> None:
    """Until the agent has been silent for ``seconds`` (and at most ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recent = [pcm for arrived, pcm in peer.audio_frames if arrived > time.monotonic() - seconds]
        if recent and not any(np.any(np.abs(p.astype(np.float32) / 32768) > LOUD) for p in recent):
            return
        await asyncio.sleep(0.1)


async def wait_idle(peer: ClientPeer, timeout: float) -> None:
    """Until every response the agent started is done and it has been silent for a second."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kinds = [e["type"] for e in peer.events]
        if kinds.count("response.created") <= kinds.count("response.done"):
            break
        await asyncio.sleep(0.1)
    await wait_quiet(peer, 1.0, max(1.0, deadline - time.monotonic()))


async def run(turns: int, barge_ins: int, config: dict[str, Any], server_overrides: dict[str, Any]) -> dict[str, Any]:
    requests = [REQUESTS[i % len(REQUESTS)] for i in range(turns)]
    clips = synthesize([*set(requests), INTERRUPTED, INTERRUPTION])
    speaker = Speaker()
    v2v, stages, barge = [], [], []
    skipped_barge_ins = 0
    async with local_server(peer_nice=PEER_NICE, **server_overrides) as server:
        base_url = server.base_url
        peer = ClientPeer(base_url, "agent", config=config, audio=speaker.track)
        await peer.connect()
        try:
            await asyncio.sleep(1.0)
            for text in requests:
                seen = len(peer.events)
                _, end = await speaker.say(clips[text])
                done = await peer.wait_for("response.done", timeout=60, after=seen)
                await wait_quiet(peer, 0.8, 30)
                heard = first_audible_after(peer, end)
                if heard is not None and done["response"]["status"] == "completed":
                    v2v.append(heard - end)
                    timings = dict(done["response"].get("timings") or {})
                    stopped = next((t for e, t in zip(peer.events[seen:], peer.event_times[seen:], strict=False)
                                    if e["type"] == "input_audio_buffer.speech_stopped"), None)
                    timings["end_of_turn_ms"] = round((stopped - end) * 1000, 1) if stopped else None
                    timings["v2v_ms"] = round((heard - end) * 1000, 1)
                    stages.append({"request": text, **timings})
            for _ in range(barge_ins):
                seen = len(peer.events)
                _, end = await speaker.say(clips[INTERRUPTED])
                await peer.wait_for("response.created", timeout=60, after=seen)
                heard = None
                deadline = time.monotonic() + 30
                while heard is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                    heard = first_audible_after(peer, end)
                if heard is None:
                    continue
                await asyncio.sleep(1.5)  # let the agent talk for a while
                if any(e["type"] == "output_audio_buffer.stopped" for e in peer.events[seen:]):
                    skipped_barge_ins += 1  # the answer was over before the interruption
                    await wait_quiet(peer, 0.8, 30)
                    continue
                interrupting = len(peer.events)
                onset, _ = await speaker.say(clips[INTERRUPTION])
                try:
                    await peer.wait_for("conversation.item.truncated", timeout=10, after=seen)
                except TimeoutError:
                    skipped_barge_ins += 1
                    continue
                stopped = silent_from(peer, onset)
                if stopped is not None:
                    barge.append(stopped - onset)
                # the interruption is a turn of its own: let it end and its answer finish before the next round
                await peer.wait_for("input_audio_buffer.speech_stopped", timeout=30, after=interrupting)
                await wait_idle(peer, 60)
            info = await peer.session_info()
        finally:
            await peer.close()

    def stage(key: str) -> dict[str, float | None]:
        values = [s[key] / 1000 for s in stages if s.get(key) is not None]
        return {"p50": percentile_ms(values, 50), "p90": percentile_ms(values, 90)}

    return {
        "benchmark": "agent",
        "turns": turns,
        "measured_turns": len(v2v),
        "v2v_ms": {"p50": percentile_ms(v2v, 50), "p90": percentile_ms(v2v, 90), "max": percentile_ms(v2v, 100)},
        "stages_ms": {key: stage(key) for key in ("end_of_turn_ms", "asr_ms", "llm_first_token_ms",
                                                  "tts_first_audio_ms")},
        "barge_in_ms": {"p50": percentile_ms(barge, 50), "p90": percentile_ms(barge, 90),
                        "max": percentile_ms(barge, 100), "count": len(barge), "skipped": skipped_barge_ins},
        "per_turn": stages,
        "app_stats": info.get("app_stats"),
        "engines": info.get("engines"),
        "config": config,
        "targets": TARGETS,
        "machine": machine(),
        "peer_nice": PEER_NICE,
        "method": "latencies measured at the peer from real audio: end of the user's last loud sample as sent to "
                  "the first loud agent sample as received; stage timings reported by the server",
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=6, help="spoken requests to time (default 6)")
    parser.add_argument("--barge-ins", type=int, default=3, help="interruptions to time (default 3)")
    parser.add_argument("--max-tokens", type=int, default=48, help="longest answer in tokens (default 48)")
    parser.add_argument("--llm-url", default="", help="an OpenAI-compatible server instead of the embedded LLM")
    parser.add_argument("--llm-model", default="", help="model name on --llm-url")
    parser.add_argument("--out", help="write the JSON results here")


def main(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if args.llm_url:
        overrides = {"llm_engine": "openai", "llm_url": args.llm_url, "llm_model": args.llm_model}
    result = asyncio.run(run(args.turns, args.barge_ins, {"max_tokens": args.max_tokens}, overrides))
    return write_json(result, args.out)
