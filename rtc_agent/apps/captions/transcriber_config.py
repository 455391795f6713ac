"""``TranscriberConfig``: the knobs of live captions; :func:`transcriber_config` fills them from the settings, and
:func:`apply_plan` sets the final's beam and the partial interval from the measured speed
(:mod:`rtc_agent.worker.decode_plan`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TranscriberConfig", "apply_plan", "transcriber_config"]

#: With ``captions_force_context``: the least of a cut earlier final a final decode hears.
FORCED_PARTIAL_CONTEXT_MS = 1000


@dataclass
class TranscriberConfig:
    """The knobs of :class:`~rtc_agent.apps.captions.transcriber.StreamingTranscriber` (its module docstring says
    what each rule does)."""

    language: str | None = None  # None: auto (the session's language rule decides)
    language_prior: str | None = None  # with auto: the language to expect (the browser's)
    task: str = "transcribe"
    # Audio between partial decodes; the server's decode plan sets it from the measured speed and the sessions
    # running (apply_plan), the setting captions_partial_interval_ms pins it.
    decode_interval_ms: int = 400
    min_decode_ms: int = 300  # don't decode less audio than this
    min_commit_ms: int = 1500  # hypotheses of less audio are shown as tentative but never committed
    trim_after_s: float = 15.0
    hard_limit_s: float = 28.0
    preroll_ms: int = 200
    tail_ms: int = 150  # audio kept after the end of speech for the final decode
    # The final decode's beam (partials are greedy; 0: the engine's default) and the previous finals given to the
    # decoder as context (0: none). Measured on the speech set (README), finals in virtual time with 8 s of audio
    # context: beam 5 6.3 % WER against greedy 8.4 % (offline 5.2 %); the previous finals as the prompt made
    # the decoder copy earlier sentences (21 %), and forcing them as the decoder prefix over their audio gave 9.9 %.
    # The server's decode plan lowers it where a 3 s utterance's beam-5 final does not fit ``final_budget_ms`` at
    # the measured speed (apply_plan); the setting captions_final_beam pins it.
    final_beam_size: int = 5
    prompt_chars: int = 0
    prompt_partials: bool = False
    # The final decode also hears the session's previous utterances (their audio, not their text; at most
    # ``context_s`` seconds of audio with the utterance) and keeps only the text of this one (context_cut.py):
    # Whisper hears a voice better with more of it. Measured on the speech set in virtual time with beam 5 (README):
    # no context 8.4 % greedy, 8 s 6.3 %, 12 s 5.2 %, 16 s 4.8 % WER (offline 5.2 %). The span is cut so the decode
    # fits ``final_budget_ms``, from the wall time per second of audio of the session's recent final decodes
    # (queueing included: under load it shrinks). Utterances longer than ``context_max_utterance_s`` are decoded
    # alone.
    context_s: float = 16.0
    # The earlier finals' text forced, timestamped, over their audio (engines that can: embedded Whisper), and
    # the last part (at least ``partial_context_ms``; 0: never) of an earlier final the span cuts into. Off by
    # default: on the speech set on a 2-core Xeon (README) forcing copies an earlier final's wrong words into the
    # next ones ("followed by the Pan King" three times over noise: overall 7.4 % WER against 6.8 % natively),
    # and the cut finals fill the final budget (p50 645 ms against 599); under cpu-profile avx2, where the 2x
    # slower decodes leave room for little context, both together took 10.7 to 10.0 % (8.7 against 11.4 % in
    # virtual time with real decode times).
    force_context: bool = False
    partial_context_ms: int = 0
    final_budget_ms: int = 450
    context_max_utterance_s: float = 15.0
    # A long utterance that pauses (quiet for at least ``tail_ms``) and goes on: the final decode started at the
    # pause becomes the final of the part before it, once that part is ``split_min_s`` long and longer than the
    # budget can decode at the measured speed (``EarlierFinals.fits_s``); 0: never. The final at the utterance's
    # end then decodes only the rest (with the part before as context), so its latency does not grow with the
    # utterance.
    split_min_s: float = 4.0
    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0
    max_finals: int = 10_000  # kept for export


def transcriber_config(settings: Any, language: str | None, prior: str | None = None,
                       **options: Any) -> TranscriberConfig:
    """A config for ``language`` (None: auto, expecting ``prior``) with the server ``settings``' context,
    final-decode budget and split length (``captions_context_s``, ``captions_final_budget_ms``,
    ``captions_split_min_s``), the forced context where ``captions_force_context`` asks for it (``force_context``,
    ``partial_context_ms`` ``FORCED_PARTIAL_CONTEXT_MS``), the final's beam and the partial interval where a
    setting pins them (``captions_final_beam``, ``captions_partial_interval_ms``; 0: the defaults until
    :func:`apply_plan`) and any other ``options``."""
    pinned: dict[str, Any] = {}
    if int(getattr(settings, "captions_final_beam", 0) or 0) > 0:
        pinned["final_beam_size"] = int(settings.captions_final_beam)
    if int(getattr(settings, "captions_partial_interval_ms", 0) or 0) > 0:
        pinned["decode_interval_ms"] = int(settings.captions_partial_interval_ms)
    if getattr(settings, "captions_force_context", False):
        pinned.update(force_context=True, partial_context_ms=FORCED_PARTIAL_CONTEXT_MS)
    return TranscriberConfig(language=language, language_prior=prior, **{**pinned, **options},
                             context_s=float(getattr(settings, "captions_context_s", TranscriberConfig.context_s)),
                             final_budget_ms=int(getattr(settings, "captions_final_budget_ms",
                                                         TranscriberConfig.final_budget_ms)),
                             split_min_s=float(getattr(settings, "captions_split_min_s",
                                                       TranscriberConfig.split_min_s)))


def apply_plan(config: TranscriberConfig, plan: Any, min_interval_ms: int = 0) -> None:
    """Use a decode plan (:class:`~rtc_agent.worker.decode_plan.DecodePlan`: ``final_beam``,
    ``partial_interval_ms``) from the next decode on; the partial interval is at least ``min_interval_ms`` (a
    pipeline that leaves room for other work keeps its own longer one)."""
    config.final_beam_size = int(plan.final_beam)
    config.decode_interval_ms = max(int(min_interval_ms), int(plan.partial_interval_ms))
