"""The captions' decode plan: the final's beam and the partial cadence, from this machine's measured speed.

The rule (:func:`decode_plan`, a pure function) takes the ASR figures of :mod:`rtc_agent.worker.speed` as the
capacity rule uses them (the start-up probe's, times the running slowdown once it counts:
:meth:`~rtc_agent.worker.speed.SpeedBook.figures`), the decodes the engine runs at once (``parallel``) and the
*talkers*: the streaming transcribers now running, each weighted by the share of the time its speaker talks
(:data:`TALKER_SHARE`: a captions session 1, a call participant 0.5, as in :mod:`rtc_agent.worker.capacity`).
The figures are those of the probe's request shapes (:mod:`rtc_agent.engines.speed_probes`): ``partial_s`` one
greedy decode of ``PROBE_PARTIAL_S`` alone, ``partial_batch_s`` the same per request in a batch of
``PROBE_PARTIAL_BATCH``, ``final_s`` one beam-``PROBE_FINAL_BEAM`` decode of ``PROBE_FINAL_S``.

1. **Final beam.** A final decode of beam ``b`` over ``audio`` seconds is predicted to take ``audio / PROBE_FINAL_S
   * (greedy + (final_s - greedy) * (b - 1) / 4)`` seconds, ``greedy`` being the greedy decode of the probe's
   ``PROBE_FINAL_S`` (``partial_s`` scaled by the audio: decode time is about linear in it with short encoder
   windows; at most ``final_s``). The beam is the largest of ``PROBE_FINAL_BEAM`` .. 1 whose final of a typical
   utterance (``UTTERANCE_S``, 3 s, as in the capacity rule) fits ``budget_ms`` (the final's time budget, setting
   ``captions_final_budget_ms``). The earlier speech a final also hears is not
   counted: it is what gives way to the budget first
   (:class:`~rtc_agent.apps.captions.earlier_finals.EarlierFinals` cuts it at the session's measured final speed),
   so a slow machine keeps beam 5 with less context, and the beam drops only where the utterance alone does not
   fit; where none fits, the largest beam predicted within ``BEAM_GAIN_MIN`` (10 %) of the fastest, so the
   beam drops only where that buys time (a loaded probe can time greedy no faster than beam 5). Why beam before
   context: on the speech set (README), finals with 8 s of audio context make 6.3 % WER with
   beam 5 against 8.4 % greedy (offline Whisper base 5.2 %); offline over the whole clips, beam 5 against greedy:
   espeak 6.29 vs 8.46 %, recorded human speech (7 speakers) 7.28 vs 11.92 %, for 1.25x the CPU time; and on the
   AMD EPYC of issue 19 the captions' errors were those of a short greedy window while a bigger final budget
   (more context) did not help (WER 0.19). A smaller beam buys little context: one decode of 16 s of recorded
   speech on one thread of a 2-core Xeon takes 0.83 s at beam 5 against 0.60 s greedy natively, 1.27 against
   0.98 s under ``cpu-profile avx2`` (the decoder's steps cost about the same at any beam), so greedy would hear
   about a quarter more earlier speech.

2. **Partial interval.** With ``talkers`` sessions each asking for a partial every ``I`` seconds of speech and a
   final of its ``UTTERANCE_S`` utterance (at the chosen beam; the context it also hears is cut to what the
   machine has left, so it is not counted) every ``UTTERANCE_S``, the ASR is busy ``talkers * (partial / I +
   final / UTTERANCE_S) / parallel`` of the time, ``partial`` being the per-request cost of a greedy
   ``PROBE_PARTIAL_S`` decode when ``talkers`` partials share a batch (``partial_s`` alone, ``partial_batch_s``
   from ``PROBE_PARTIAL_BATCH`` on, linear between). The interval is the shortest that keeps that at most
   ``TARGET_LOAD`` (queues stay short, so the urgent finals, served before partials but never pre-empting a
   batch in flight, stay on time), rounded up to ``INTERVAL_STEP_MS``, at least ``base_interval_ms`` (400 ms:
   where partials take a small share of the machine nothing changes) and at most ``max_interval_ms`` (setting
   ``captions_max_partial_interval_ms``, 1200); the longest when the finals alone take the target. The
   transcriber still stretches it to 1.5x a partial decode's wall time when decodes come back slowly.

Settings pin either value (``captions_final_beam``, ``captions_partial_interval_ms``; 0: derived). Without ASR
figures (no probe yet, a remote ASR, the ASR still pending) the values are today's constants (beam 5, 400 ms).
:class:`DecodePlan` says where each value came from (``setting``, ``measured`` or ``default``).

For example, Whisper base on an idle 2-core Xeon (``partial_s`` 0.11, ``partial_batch_s`` 0.06, ``final_s``
0.30, two decodes at once): beam 5, and 400 ms up to 4 talkers, 550 ms at 8, 1200 ms at 16. The 2-core AMD EPYC
this was written on measured 0.38, 0.26 and 0.97 (idle): beam 5 (a 3 s final 0.36 s), 400 ms for one talker,
750 ms for two, 1200 ms from four; under load at 1.5x those figures (a 3 s beam-5 final 0.55 s, greedy 0.43 s)
greedy, 550 ms for one talker.

:class:`DecodePlanner` applies the rule to the server's speed book and running sessions; the captions app reads
its plan when a session starts and every ``PLAN_REFRESH_MS`` of audio after (``worker.decode_plans``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rtc_agent.worker.capacity import CALL_SPEECH_SHARE, CAPTIONS_SPEECH_SHARE, UTTERANCE_S
from rtc_agent.worker.speed import SpeedBook

# The probe's request shapes (rtc_agent.engines.speed_probes: PARTIAL_AUDIO_S, PARTIAL_BATCH, FINAL_AUDIO_S,
# FINAL_BEAM; the worker may not import the engines, a test checks they agree).
PROBE_PARTIAL_S = 4.0
PROBE_PARTIAL_BATCH = 4
PROBE_FINAL_S = 8.0
PROBE_FINAL_BEAM = 5

DEFAULT_BEAM = 5  # TranscriberConfig.final_beam_size
DEFAULT_INTERVAL_MS = 400  # TranscriberConfig.decode_interval_ms
DEFAULT_MAX_INTERVAL_MS = 1200
DEFAULT_BUDGET_MS = 450
TARGET_LOAD = 0.6
BEAM_GAIN_MIN = 0.1  # where no beam fits the budget, a smaller beam only if it is predicted this much faster
INTERVAL_STEP_MS = 50
PLAN_REFRESH_MS = 2000  # how often (ms of a session's audio) the captions app reads the plan again
#: Apps whose sessions run a streaming transcriber, with the share of the time their speaker talks.
TALKER_SHARE: dict[str, float] = {"captions": CAPTIONS_SPEECH_SHARE, "call": CALL_SPEECH_SHARE}

__all__ = ["DEFAULT_BEAM", "DEFAULT_INTERVAL_MS", "DEFAULT_MAX_INTERVAL_MS", "PLAN_REFRESH_MS", "TALKER_SHARE",
           "DecodePlan", "DecodePlanner", "decode_plan", "final_seconds", "partial_seconds"]


@dataclass(frozen=True)
class DecodePlan:
    """What the captions' decodes use: ``final_beam`` (1: greedy) and ``partial_interval_ms``, each with its
    source (``setting``, ``measured`` or ``default``); ``source`` is ``setting`` when both are pinned, else
    ``measured`` when figures were used, else ``default``. ``final_s`` (the predicted final of a typical
    utterance at that beam), ``load`` (the predicted share of the ASR busy) and ``talkers`` say why; None when
    unmeasured."""

    final_beam: int
    partial_interval_ms: int
    beam_source: str
    interval_source: str
    talkers: float = 0.0
    final_s: float | None = None
    load: float | None = None

    @property
    def source(self) -> str:
        sources = {self.beam_source, self.interval_source}
        if sources == {"setting"}:
            return "setting"
        return "measured" if "measured" in sources else "default"

    def as_dict(self) -> dict[str, Any]:
        return {"final_beam": self.final_beam, "partial_interval_ms": self.partial_interval_ms,
                "source": self.source,
                "sources": {"final_beam": self.beam_source, "partial_interval_ms": self.interval_source},
                "talkers": round(self.talkers, 2),
                "final_s": None if self.final_s is None else round(self.final_s, 4),
                "load": None if self.load is None else round(self.load, 3)}


def final_seconds(asr: Mapping[str, float], beam: int, audio_s: float = UTTERANCE_S) -> float | None:
    """The predicted seconds of a beam-``beam`` final over ``audio_s`` (step 1 of the module docstring); None
    without ``final_s``."""
    final = asr.get("final_s")
    if final is None:
        return None
    alone = asr.get("partial_s")
    greedy = final if alone is None else min(final, alone * PROBE_FINAL_S / PROBE_PARTIAL_S)
    share = (max(1, min(beam, PROBE_FINAL_BEAM)) - 1) / (PROBE_FINAL_BEAM - 1)
    return (greedy + (final - greedy) * share) * audio_s / PROBE_FINAL_S


def partial_seconds(asr: Mapping[str, float], talkers: float) -> float | None:
    """Per-request seconds of a greedy ``PROBE_PARTIAL_S`` partial when ``talkers`` partials share a batch;
    None without ``partial_s``."""
    alone = asr.get("partial_s")
    if alone is None:
        return None
    batched = asr.get("partial_batch_s", alone)
    share = min(1.0, max(0.0, (talkers - 1) / (PROBE_PARTIAL_BATCH - 1)))
    return alone + share * (batched - alone)


def decode_plan(figures: Mapping[str, Mapping[str, float]], parallel: Mapping[str, int], talkers: float, *,
                budget_ms: int = DEFAULT_BUDGET_MS, base_interval_ms: int = DEFAULT_INTERVAL_MS,
                max_interval_ms: int = DEFAULT_MAX_INTERVAL_MS, beam: int = 0, interval_ms: int = 0,
                measured: bool = True) -> DecodePlan:
    """The rule of the module docstring. ``figures``: engine -> figure -> seconds (the ASR's under ``asr``);
    ``parallel``: decodes each engine runs at once (1 when missing); ``talkers``: weighted transcribers running
    (at least 1 counts); ``beam`` / ``interval_ms``: settings that pin the value (0: derived); ``measured`` False
    (the ASR still pending) treats the figures as absent."""
    asr = figures.get("asr") if measured else None
    talkers = max(1.0, float(talkers))
    final_s = None if asr is None else final_seconds(asr, PROBE_FINAL_BEAM)
    if beam > 0:
        final_beam, beam_source = beam, "setting"
    elif final_s is None or asr is None:
        final_beam, beam_source = DEFAULT_BEAM, "default"
    else:
        predicted = {b: final_seconds(asr, b) or 0.0 for b in range(PROBE_FINAL_BEAM, 0, -1)}
        fitting = [b for b, seconds in predicted.items() if seconds <= budget_ms / 1000]
        fastest = min(predicted.values())
        final_beam = fitting[0] if fitting else next(
            b for b, seconds in predicted.items() if seconds <= fastest * (1 + BEAM_GAIN_MIN))
        beam_source = "measured"
    if asr is not None and final_s is not None:
        final_s = final_seconds(asr, final_beam)
    partial = None if asr is None else partial_seconds(asr, talkers)
    lanes = max(1, int(parallel.get("asr", 1)))
    finals_load = 0.0 if final_s is None else talkers * final_s / UTTERANCE_S / lanes
    if interval_ms > 0:
        interval, interval_source = interval_ms, "setting"
    elif partial is None:
        interval, interval_source = DEFAULT_INTERVAL_MS, "default"
    else:
        room = TARGET_LOAD - finals_load
        wanted = math.inf if room <= 0 else 1000 * talkers * partial / lanes / room
        stepped = math.ceil(wanted / INTERVAL_STEP_MS - 1e-9) * INTERVAL_STEP_MS if wanted < math.inf else wanted
        interval = int(max(base_interval_ms, min(max_interval_ms, stepped)))
        interval_source = "measured"
    load = None
    if partial is not None and final_s is not None:
        load = talkers * (1000 * partial / interval) / lanes + finals_load
    return DecodePlan(final_beam, int(interval), beam_source, interval_source, talkers=talkers,
                      final_s=final_s, load=load)


class DecodePlanner:
    """The plan for this server: :func:`decode_plan` over ``book``'s ASR figures and the talkers of
    ``running(app)`` (sessions of each app in :data:`TALKER_SHARE`), with the settings' budget, bound and pins.
    ``plan()`` is cheap (a few multiplications; cached while nothing changed); any thread may call it."""

    def __init__(self, book: SpeedBook, *, running: Callable[[str], int] = lambda app: 0,
                 budget_ms: int = DEFAULT_BUDGET_MS, max_interval_ms: int = DEFAULT_MAX_INTERVAL_MS,
                 beam: int = 0, interval_ms: int = 0) -> None:
        self.book = book
        self.running = running
        self.budget_ms = budget_ms
        self.max_interval_ms = max(DEFAULT_INTERVAL_MS, max_interval_ms)
        self.beam = beam
        self.interval_ms = interval_ms
        self._cache: tuple[tuple[int, float], DecodePlan] | None = None

    @classmethod
    def from_settings(cls, book: SpeedBook, settings: Any, running: Callable[[str], int]) -> DecodePlanner:
        """A planner with ``captions_final_budget_ms``, ``captions_max_partial_interval_ms``,
        ``captions_final_beam`` and ``captions_partial_interval_ms`` of ``settings``."""
        return cls(book, running=running,
                   budget_ms=int(getattr(settings, "captions_final_budget_ms", DEFAULT_BUDGET_MS)),
                   max_interval_ms=int(getattr(settings, "captions_max_partial_interval_ms",
                                               DEFAULT_MAX_INTERVAL_MS)),
                   beam=int(getattr(settings, "captions_final_beam", 0) or 0),
                   interval_ms=int(getattr(settings, "captions_partial_interval_ms", 0) or 0))

    def talkers(self) -> float:
        """The weighted transcribers running now (see the module docstring)."""
        return sum(share * self.running(app) for app, share in TALKER_SHARE.items())

    def plan(self, joining: float = 0.0) -> DecodePlan:
        """The plan now; ``joining``: talkers about to start (a session reading its plan before it counts)."""
        talkers = self.talkers() + joining
        key = (self.book.version, talkers)
        cached = self._cache
        if cached is not None and cached[0] == key:
            return cached[1]
        plan = decode_plan(self.book.figures(), self.book.parallel(), talkers, budget_ms=self.budget_ms,
                           max_interval_ms=self.max_interval_ms, beam=self.beam, interval_ms=self.interval_ms,
                           measured="asr" not in self.book.pending)
        self._cache = (key, plan)
        return plan

    def snapshot(self) -> dict[str, Any]:
        """JSON-able, for ``/health`` and the capabilities: :meth:`DecodePlan.as_dict` of the plan now."""
        return self.plan().as_dict()
