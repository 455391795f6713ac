"""``python -m rtc_agent.bench.captions_virtual``: the captions' finals on the speech set in virtual time.

An A/B tool for the final-decode rules, not a latency benchmark: each clip's Silero VAD probabilities (the packaged
model, one stream) are fed window by window to the real :class:`SpeechSegmenter` and
:class:`StreamingTranscriber` with the packaged Whisper base answering every decode, awaited, so a decode takes no
virtual time and nothing depends on this machine's load. The transcriber's clock (its final-decode speed, hence how
much earlier speech a final hears) is a fixed cost model of an idle 2-core Xeon: a beam-5 decode 0.03 s + 0.035 s per
second of audio, a greedy one 0.02 s + 0.012 s, and a decode the engine's repetition guard ran again that much
more for its longer window (``--cost epyc``: a slower machine's, ``COST_MODELS``; ``--wall``: the real time each
decode took instead). ``--opus``: each clip first goes through Opus at 96 kbit/s, 48 kHz stereo (aiortc's encoder;
ffmpeg's libopus here) and back, as the real path hears it: the VAD's verdicts on quiet speech differ with it.
Scored per clip as ``bench captions --set`` scores it (:func:`rtc_agent.bench.common.wer` of the reference against
the finals joined).
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

from rtc_agent.apps.captions import transcriber as transcriber_module
from rtc_agent.apps.captions.app import feed_window
from rtc_agent.apps.captions.speech_segmenter import SpeechSegmenter
from rtc_agent.apps.captions.transcriber import StreamingTranscriber
from rtc_agent.apps.captions.transcriber_config import TranscriberConfig
from rtc_agent.bench.common import wer, write_json
from rtc_agent.bench.speech_set import SAMPLE_RATE, build, default_dir, load_clip

WINDOW = 512  # the VAD's 32 ms window at 16 kHz
BEAM_COST_S = (0.03, 0.035)  # a beam-5 decode: fixed + per second of audio (idle 2-core Xeon)
GREEDY_COST_S = (0.02, 0.012)
#: ``--cost`` models: seconds (fixed, per second of audio) for a beam-5 and a greedy decode. ``epyc``: a 2-core AMD
#: EPYC with AVX-512 serving one captions session (the real path's final decodes: 0.066 s per second of audio,
#: partials beside them).
COST_MODELS = {"xeon": (BEAM_COST_S, GREEDY_COST_S), "epyc": ((0.03, 0.07), (0.02, 0.025))}


class VirtualClock:
    """``time.monotonic`` for the transcriber: advanced by the cost model, not by the machine."""

    def __init__(self, model: str = "xeon") -> None:
        self.now = 0.0
        self.beam_cost, self.greedy_cost = COST_MODELS[model]

    def monotonic(self) -> float:
        return self.now

    def spend(self, beam: int, audio_s: float) -> None:
        fixed, per_s = self.beam_cost if beam > 1 else self.greedy_cost
        self.now += fixed + per_s * audio_s


def through_opus(pcm16: np.ndarray) -> np.ndarray:
    """``pcm16`` (16 kHz int16) through Opus at 96 kbit/s, 48 kHz stereo, and back to 16 kHz mono."""
    from rtc_agent.engines.tts.base import encode_wav

    with tempfile.TemporaryDirectory() as tmp:
        src, coded, back = Path(tmp, "in.wav"), Path(tmp, "x.opus"), Path(tmp, "out.raw")
        src.write_bytes(encode_wav(pcm16, SAMPLE_RATE))
        run = ["ffmpeg", "-loglevel", "error", "-y", "-i"]
        subprocess.run([*run, str(src), "-ar", "48000", "-ac", "2", "-c:a", "libopus", "-b:a", "96k", str(coded)],
                       check=True)
        subprocess.run([*run, str(coded), "-ar", str(SAMPLE_RATE), "-ac", "1", "-f", "s16le", str(back)], check=True)
        return np.frombuffer(back.read_bytes(), dtype=np.int16)


async def replay(transcriber: StreamingTranscriber, audio: np.ndarray, probs: np.ndarray,
                 tasks: list[asyncio.Task]) -> None:
    """Feed ``audio`` (16 kHz float32) to ``transcriber`` window by window with the VAD's ``probs`` (one per 32 ms
    window) through a fresh :class:`SpeechSegmenter`, awaiting every decode in ``tasks`` (the ones its ``spawn``
    started) before the next window, then end the stream and wait for its last finals."""

    async def settle() -> None:
        while pending := [t for t in tasks if not t.done()]:
            await asyncio.gather(*pending)

    segmenter = SpeechSegmenter()
    n = min(len(probs), len(audio) // WINDOW)
    for i in range(n):
        start_ms, end_ms = i * 32, (i + 1) * 32
        transcriber.push_audio(audio[i * WINDOW:(i + 1) * WINDOW], start_ms)
        feed_window(segmenter, transcriber, float(probs[i]), start_ms, end_ms, end_ms)
        await settle()
    for event in segmenter.flush(n * 32):
        transcriber.on_speech(event, n * 32)
    transcriber.flush(n * 32)
    for _ in range(20):
        await settle()
        transcriber.poll(n * 32)


async def finals_of(pcm16: np.ndarray, asr: Any, vad: Any, *, wall: bool = False, cost: str = "xeon",
                    language: str = "en", options: dict[str, Any] | None = None) -> list[str]:
    """The final captions of one clip (see the module docstring)."""
    from rtc_agent.engines.vad.silero import VadRequest, VadStream

    audio = pcm16.astype(np.float32) / 32768
    n = len(audio) // WINDOW
    probs = vad.run_batch([VadRequest(VadStream(), audio[: n * WINDOW].reshape(n, WINDOW))])[0]
    clock = VirtualClock(cost)
    events: list[Any] = []
    tasks: list[asyncio.Task] = []

    async def recognize(request: Any) -> Any:
        result = asr.run_batch([request])[0]
        clock.spend(request.beam_size or 1, request.duration_s)
        if result.decoded_again:  # the repetition guard's second decode, at worst in its longer window
            clock.spend(request.beam_size or 1, asr.loop_window_s(request))
        return result

    def spawn(coro: Any, name: str) -> asyncio.Task:
        tasks.append(asyncio.ensure_future(coro))
        return tasks[-1]

    saved = transcriber_module.time
    if not wall:
        transcriber_module.time = clock  # type: ignore[assignment]  # the transcriber's wall time is virtual
    try:
        config = TranscriberConfig(language=language, **(options or {}))
        transcriber = StreamingTranscriber(recognize, events.append, spawn, config)
        await replay(transcriber, audio, probs, tasks)
    finally:
        transcriber_module.time = saved
    return [e.text for e in events if getattr(e, "type", "") == "caption.final" and e.text.strip()]


def config_options(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as :class:`TranscriberConfig` fields, each value of its field's type."""
    defaults = TranscriberConfig()
    options: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if not hasattr(defaults, key):
            raise SystemExit(f"unknown transcriber option {key!r}")
        kind = type(getattr(defaults, key))
        options[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return options


def run(args: argparse.Namespace) -> dict[str, Any]:
    from rtc_agent.config import Settings
    from rtc_agent.engines.asr.whisper import WhisperEngine
    from rtc_agent.engines.vad.silero import SileroVad

    root = args.set or default_dir()
    clips = build(root)
    wanted = {name.strip() for name in args.only.split(",") if name.strip()} if args.only else None
    options = config_options(args.option)
    asr = WhisperEngine(args.asr_model, cache_dir=Settings().cache_dir, parallel=1)
    asr.load(lambda message: None)
    vad = SileroVad()
    vad.load(lambda message: None)
    rows: dict[str, Any] = {}
    errors = words = 0.0
    started = time.monotonic()
    for clip in clips:
        if wanted and clip.name not in wanted and clip.family not in wanted:
            continue
        pcm = load_clip(root, clip)
        finals = asyncio.run(finals_of(through_opus(pcm) if args.opus else pcm, asr, vad, wall=args.wall,
                                       cost=args.cost, options=options))
        score = wer(clip.reference, " ".join(finals))
        count = len(clip.reference.split())
        errors, words = errors + score * count, words + count
        rows[clip.name] = {"family": clip.family, "wer": round(score, 4), "finals": finals}
        print(f"{clip.name}: WER {100 * score:.1f} % ({len(finals)} finals)", flush=True)
    overall = round(errors / words, 4) if words else None
    print(f"overall {100 * (overall or 0):.2f} %")
    return {"benchmark": "captions finals in virtual time", "asr_model": args.asr_model or "base (packaged)",
            "opus": args.opus, "clock": "wall" if args.wall else
            {"model": args.cost, "beam_5_s": COST_MODELS[args.cost][0], "greedy_s": COST_MODELS[args.cost][1]},
            "options": options,
            "overall_wer": overall, "clips": rows,
            "seconds": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, default=None, help="the speech set's folder (default: built in "
                                                                 "~/.cache/rtc-agent)")
    parser.add_argument("--only", default="", help="comma-separated clip names or families")
    parser.add_argument("--opus", action="store_true", help="each clip through Opus and back first")
    parser.add_argument("--wall", action="store_true", help="the transcriber's clock is the real one")
    parser.add_argument("--cost", choices=sorted(COST_MODELS), default="xeon",
                        help="the virtual clock's decode costs: an idle 2-core Xeon (default) or a 2-core AMD EPYC "
                             "serving one session (slower finals: less earlier speech fits the budget)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a TranscriberConfig field for the A/B (repeatable), e.g. force_context=true")
    parser.add_argument("--asr-model", default="", metavar="MODEL",
                        help="instead of the packaged base: tiny.en (packaged) or a CTranslate2 Whisper folder")
    parser.add_argument("--out", default="", help="write the JSON results here")
    args = parser.parse_args()
    result = run(args)
    if args.out:
        write_json(result, args.out)
    else:
        print(json.dumps({k: v for k, v in result.items() if k != "clips"}))


if __name__ == "__main__":
    main()
