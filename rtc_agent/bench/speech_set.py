"""The captions benchmark's English test set of voices we did not make, built from packages
(``python -m rtc_agent.bench.speech_set``; ``rtc-agent bench captions --set`` builds it when missing).

An English test set of voices we did not make, built from packages.

Nothing is stored in the repository but the sentences (``docs/benchmarks/speech-set-sentences.txt``); the audio
is made on the machine from:

- **espeak-ng** (Debian ``espeak-ng``): six accents (``en-us``, ``en-gb``, ``en-gb-x-rp``, ``en-gb-scotland``,
  ``en-029``, ``en-us-nyc``), each speaking its own sentences of the file at its own speed, with pauses of varied
  length between them (0.35 to 3 s: some shorter than a word gap Whisper would see as one sentence, some long);
- **recorded human speech**: the Asterisk core prompts (Debian ``asterisk-core-sounds-en-g722``, a US English
  speaker recorded at 16 kHz, with the text of every prompt in ``asterisk-core-sounds-en``'s
  ``core-sounds-en.txt``); prompts with digits, symbols or fewer than five words are left out. The ``.deb`` files
  are fetched with ``apt-get download`` into the cache when they are not installed (no root needed);
- **noise**: an espeak clip and a human clip again with Gaussian noise (low-pass shaped, fixed seed) mixed at
  20 dB and 10 dB SNR against the speech's own level.

Each clip is a 16 kHz mono WAV with its reference text and the span of every sentence; ``manifest.json`` lists
them with their family (``espeak``, ``human``, ``noise-20db``, ``noise-10db``) and voice. The build is
deterministic and cached (``--out``, default ``~/.cache/rtc-agent/speech-set-v1``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SAMPLE_RATE = 16000
VERSION = 1
SENTENCES = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "speech-set-sentences.txt"
ESPEAK_VOICES = [("en-us", 165), ("en-gb", 150), ("en-gb-x-rp", 160), ("en-gb-scotland", 150), ("en-029", 155),
                 ("en-us-nyc", 170)]
SENTENCES_PER_VOICE = 7
PAUSES_S = [0.35, 1.2, 0.6, 2.0, 0.8, 3.0, 0.5, 1.5]
HUMAN_PACKAGES = ("asterisk-core-sounds-en", "asterisk-core-sounds-en-g722")
HUMAN_DIR = "usr/share/asterisk/sounds/en_US_f_Allison"
HUMAN_TEXT = "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
HUMAN_EVERY = 3  # every third usable prompt (about 2.5 minutes)
HUMAN_CLIPS = 4
NOISY = ("espeak-en-us", "human-1")
SNRS_DB = (20, 10)


@dataclass
class Clip:
    name: str
    family: str
    voice: str
    wav: str
    reference: str
    sentences: list[dict[str, Any]] = field(default_factory=list)  # {"text", "start_s", "end_s"}
    duration_s: float = 0.0


def default_dir() -> Path:
    return Path.home() / ".cache" / "rtc-agent" / f"speech-set-v{VERSION}"


def read_sentences(path: Path = SENTENCES) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def _write_wav(path: Path, pcm: np.ndarray) -> None:
    from rtc_agent.engines.tts.base import encode_wav

    path.write_bytes(encode_wav(np.asarray(pcm, dtype=np.int16), SAMPLE_RATE))


def _join(parts: list[tuple[str, np.ndarray]], pauses: list[float], lead_s: float = 0.6,
          tail_s: float = 1.5) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Speech pieces with the given pauses between them; each sentence's span is measured by energy."""
    out = [np.zeros(int(lead_s * SAMPLE_RATE), dtype=np.int16)]
    at = len(out[0])
    spans = []
    for i, (text, pcm) in enumerate(parts):
        a, b = speech_span(pcm, SAMPLE_RATE)
        pcm = pcm[a:b]  # trimmed to the speech, so the pause is exactly what follows
        spans.append({"text": text, "start_s": round(at / SAMPLE_RATE, 3),
                      "end_s": round((at + len(pcm)) / SAMPLE_RATE, 3)})
        out.append(pcm)
        at += len(pcm)
        pause = int((pauses[i % len(pauses)] if i < len(parts) - 1 else tail_s) * SAMPLE_RATE)
        out.append(np.zeros(pause, dtype=np.int16))
        at += pause
    return np.concatenate(out), spans


def speech_span(pcm: np.ndarray, rate: int = SAMPLE_RATE, threshold_db: float = -40.0) -> tuple[int, int]:
    """Sample range from the first to the last 10 ms frame within ``threshold_db`` of the loudest one."""
    hop = rate // 100
    n = len(pcm) // hop
    if n == 0:
        return 0, len(pcm)
    rms = np.sqrt(np.mean((pcm[:n * hop].astype(np.float64) / 32768).reshape(n, hop) ** 2, axis=1))
    active = np.nonzero(rms >= max(1e-3, rms.max() * 10 ** (threshold_db / 20)))[0]
    if not active.size:
        return 0, len(pcm)
    return int(active[0] * hop), int(min(len(pcm), (active[-1] + 1) * hop))


def _espeak(text: str, voice: str, speed: int) -> np.ndarray:
    from rtc_agent.rtc.sources import load_audio

    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "s.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(wav), text], check=True,
                       capture_output=True, timeout=60)
        return load_audio(wav, SAMPLE_RATE)


def human_root(cache: Path) -> Path:
    """A folder holding ``HUMAN_DIR`` and ``HUMAN_TEXT``: the system's when the packages are installed, else the
    packages unpacked from ``apt-get download`` into ``cache``."""
    system = Path("/")
    if (system / HUMAN_DIR).is_dir() and (system / HUMAN_TEXT).exists():
        return system
    root = cache / "debs" / "root"
    if (root / HUMAN_DIR).is_dir() and (root / HUMAN_TEXT).exists():
        return root
    if not shutil.which("apt-get"):
        raise SystemExit(f"recorded speech needs the Debian packages {' '.join(HUMAN_PACKAGES)}")
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", *HUMAN_PACKAGES], cwd=debs, check=True, capture_output=True,
                   timeout=300)
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, capture_output=True, timeout=120)
    return root


def human_prompts(root: Path) -> list[tuple[str, str]]:
    """``(file stem, text)`` of the usable prompts: five to 28 words, no digits, symbols or trailing '...'."""
    with gzip.open(root / HUMAN_TEXT, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    prompts = []
    for line in lines:
        if line.startswith(";") or ":" not in line:
            continue
        name, text = (x.strip() for x in line.split(":", 1))
        if "/" in name or re.search(r"[0-9\[\]<>*#/]|\.\.\.", text):
            continue
        if 5 <= len(text.split()) <= 28 and (root / HUMAN_DIR / f"{name}.g722").exists():
            prompts.append((name, re.sub(r"\s+", " ", text)))
    return prompts


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


def build(out: Path | None = None, *, human: bool = True, progress=print) -> list[Clip]:
    """Build (or reuse) the set in ``out``; returns its clips."""
    out = out or default_dir()
    manifest = out / "manifest.json"
    if manifest.exists():
        data = json.loads(manifest.read_text())
        if data.get("version") == VERSION and data.get("human", True) >= human:
            return [Clip(**c) for c in data["clips"]]
    out.mkdir(parents=True, exist_ok=True)
    if not shutil.which("espeak-ng"):
        raise SystemExit("the speech set needs espeak-ng (apt-get install espeak-ng)")
    sentences = read_sentences()
    clips: list[Clip] = []
    pcms: dict[str, np.ndarray] = {}
    for v, (voice, speed) in enumerate(ESPEAK_VOICES):
        chosen = sentences[v * SENTENCES_PER_VOICE:(v + 1) * SENTENCES_PER_VOICE]
        progress(f"espeak-ng {voice}: {len(chosen)} sentences")
        parts = [(s, _espeak(s, voice, speed)) for s in chosen]
        pcm, spans = _join(parts, PAUSES_S[v % 3:] + PAUSES_S[:v % 3])
        clips.append(Clip(f"espeak-{voice}", "espeak", voice, f"espeak-{voice}.wav", " ".join(chosen), spans))
        pcms[clips[-1].name] = pcm
    if human:
        from rtc_agent.rtc.sources import load_audio

        root = human_root(out)
        prompts = human_prompts(root)[::HUMAN_EVERY]
        progress(f"recorded prompts: {len(prompts)}")
        per = -(-len(prompts) // HUMAN_CLIPS)
        for k in range(HUMAN_CLIPS):
            chosen = prompts[k * per:(k + 1) * per]
            parts = [(text, load_audio(root / HUMAN_DIR / f"{name}.g722", SAMPLE_RATE)) for name, text in chosen]
            pcm, spans = _join(parts, PAUSES_S[k % 4:] + PAUSES_S[:k % 4])
            clips.append(Clip(f"human-{k + 1}", "human", "asterisk en_US_f_Allison", f"human-{k + 1}.wav",
                              " ".join(t for t, _ in parts), spans))
            pcms[clips[-1].name] = pcm
    for name in NOISY:
        base = next((c for c in clips if c.name == name), None)
        if base is None:
            continue
        for snr in SNRS_DB:
            noisy = add_noise(pcms[name], snr, base.sentences, seed=snr)
            clip = Clip(f"{name}-snr{snr}", f"noise-{snr}db", base.voice, f"{name}-snr{snr}.wav", base.reference,
                        base.sentences)
            clips.append(clip)
            pcms[clip.name] = noisy
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
    parser.add_argument("--no-human", action="store_true", help="espeak-ng voices only (no Debian download)")


def main(args: argparse.Namespace) -> dict[str, Any]:
    clips = build(args.out, human=not args.no_human)
    return {"clips": [{"name": c.name, "family": c.family, "duration_s": c.duration_s} for c in clips],
            "minutes": round(sum(c.duration_s for c in clips) / 60, 2)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    print(json.dumps(main(parser.parse_args()), indent=1))
