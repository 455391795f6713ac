"""Batched greedy generation: several prompts decoded together, one forward pass per step for all of them.

On a small CPU a decode step of a small model is bound by reading the weights, not by arithmetic, so a step for
three sequences costs about what a step for one does: three translations of one caption final take about the time
of the longest one instead of the sum of the three.

:func:`greedy_batch` left-pads the prompts into one ``[rows, columns]`` tensor and runs them through a
:class:`~rtc_agent.engines.llm.batch_forward.BatchForward` (masking the padding, positions counted per row, a KV
cache per row), then feeds each row's chosen token back, one step for all rows at a time. Each row stops on its own:

- an end-of-sequence id (``eos_ids``; not part of the output) -> ``"stop"``;
- one of its stop strings in its decoded text (the text is cut before it) -> ``"stop"``;
- ``max_new[b]`` tokens -> ``"length"``;
- ``cancelled[b]()`` true before a step -> ``"cancelled"``;
- with ``loops[b]``, its generated ids ending in a loop (:func:`~rtc_agent.engines.llm.loops.ends_in_loop`) ->
  ``"length"`` (as it would have ended).

A finished row leaves the batch before the next step where the forward can drop rows (``drops_rows``: the lean
path; the steps of the rows still decoding cost less), else it keeps its place (fed a dummy token; its results are
ignored) until every row is done.
``processors[b]`` are logits processors applied to row ``b`` alone with its own ids (prompt plus generated, no
padding: e.g. transformers' ``RepetitionPenaltyLogitsProcessor``), exactly as a one-at-a-time decode applies them.
The result of every row is the one-at-a-time greedy decode's, up to float rounding (tested on models built from a
config). ``checkpoint`` is called before every step. ``done(b, decoded)``, when given, is called once per row as the row
finishes, while the other rows still decode (e.g. to hand a short translation on before the longest one ends).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from rtc_agent.engines.llm.batch_forward import BatchForward
from rtc_agent.engines.llm.loops import ends_in_loop

__all__ = ["Decoded", "first_stop", "greedy_batch"]


@dataclass
class Decoded:
    """One row's outcome: the generated ``ids`` (without the end-of-sequence id), its ``text`` (cut before the
    first stop string), ``finish``: ``"stop"``, ``"length"`` or ``"cancelled"``, and ``first_s``: seconds from the
    start of the batch to the row's first token (None when it produced none)."""

    ids: list[int]
    text: str
    finish: str
    first_s: float | None = None


def first_stop(text: str, stops: Sequence[str]) -> int:
    """Index of the earliest stop string in ``text``, -1 when none occurs."""
    return min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)


def _never() -> bool:
    return False


def _no_step(rows: int, decode: bool) -> AbstractContextManager[None]:
    return nullcontext()


def greedy_batch(make_forward: Callable[[list[int], int], BatchForward], prompts: Sequence[Sequence[int]], *,
                 max_new: Sequence[int], eos_ids: set[int], decode: Callable[[list[int]], str],
                 stops: Sequence[Sequence[str]] | None = None,
                 processors: Sequence[Sequence[Callable[[Any, Any], Any]]] | None = None,
                 cancelled: Sequence[Callable[[], bool]] | None = None,
                 checkpoint: Callable[[], object] = lambda: None,
                 step: Callable[[int, bool], AbstractContextManager[None]] | None = None,
                 seed: Callable[[BatchForward, Sequence[Sequence[int]], list[int]], int] | None = None,
                 keep: Callable[[BatchForward, list[int], list[list[int] | None]], None] | None = None,
                 done: Callable[[int, Decoded], object] | None = None,
                 loops: Sequence[bool] | None = None) -> list[Decoded]:
    """Decode ``prompts`` greedily together (see the module docstring).

    ``make_forward(pads, capacity)`` builds the batch's forward for the rows' left padding and the most columns
    it will see; ``decode(ids)`` turns generated ids into text. ``max_new[b] >= 1``; every prompt non-empty.
    Exceptions from the forward propagate (the whole batch fails). ``step(rows, decode)``, when given, is the
    context every forward runs in (``decode``: one token per row, not the prompts).

    ``seed(forward, prompts, pads)``, when given, may put the keys and values of the prompts' first tokens in place and
    returns the first column to compute (0: all; every row's real tokens before it must be seeded). ``keep(forward,
    pads, fed)`` gets, for each of the forward's rows, its padding and the token ids whose keys and values the forward
    holds from that column on (its prompt and the generated tokens fed back), or None for a row not to keep: for the
    rows that leave the batch just before they do, for the others after the decode (not after a failed forward).
    ``done(b, decoded)`` gets each row's outcome (the one returned) as soon as the row finishes; an exception it
    raises ends the batch (it propagates).
    """
    import torch

    start = time.monotonic()
    rows = len(prompts)
    if rows == 0:
        return []
    if len(max_new) != rows or any(m < 1 for m in max_new) or any(len(p) < 1 for p in prompts):
        raise ValueError("greedy_batch needs a non-empty prompt and max_new >= 1 for every row")
    stops = stops if stops is not None else [()] * rows
    processors = processors if processors is not None else [()] * rows
    cancelled = cancelled if cancelled is not None else [_never] * rows
    loops = loops if loops is not None else [False] * rows
    width = max(len(p) for p in prompts)
    pads = [width - len(p) for p in prompts]
    filler = int(prompts[0][0])  # any valid id: padding columns are never attended
    forward = make_forward(pads, width + max(max_new))
    step_input = torch.tensor([[filler] * pad + [int(t) for t in p] for pad, p in zip(pads, prompts, strict=True)],
                              dtype=torch.long)
    if seed is not None:
        first = seed(forward, prompts, pads)
        step_input, forward.length = step_input[:, first:], first
    history = [[int(t) for t in p] for p in prompts]  # each row's own ids, for its logits processors
    generated: list[list[int]] = [[] for _ in range(rows)]
    finish: list[str | None] = [None] * rows
    texts: list[str | None] = [None] * rows
    first: list[float | None] = [None] * rows
    out: list[Decoded | None] = [None] * rows
    at = list(range(rows))  # the prompt row of each of the forward's rows (finished ones leave where it can)

    def settle() -> None:
        """Build the outcome of every row that has just finished, and hand it to ``done``."""
        for b in range(rows):
            if finish[b] is not None and out[b] is None:
                out[b] = _outcome(generated[b], texts[b], str(finish[b]), first[b], decode, stops[b])
                if done is not None:
                    done(b, out[b])

    def fed(b: int) -> list[int]:
        """Row ``b``'s ids whose keys and values the forward holds (its last token was fed only if the decode
        went on after it; a row cancelled before the prefill holds only what was seeded)."""
        return history[b][:max(0, min(len(history[b]) - bool(generated[b]), forward.length - pads[b]))]

    while True:
        for b in at:
            if finish[b] is None and cancelled[b]():
                finish[b] = "cancelled"
        settle()
        if all(finish[b] is not None for b in at):
            break
        gone = [i for i, b in enumerate(at) if finish[b] is not None]
        if gone and forward.drops_rows:  # the rows still decoding go on without them
            if keep is not None:
                keep(forward, [pads[b] for b in at], [fed(b) if i in gone else None for i, b in enumerate(at)])
            forward.drop_rows(gone)
            staying = [i for i in range(len(at)) if i not in gone]
            at, step_input = [at[i] for i in staying], step_input[staying]
        checkpoint()
        with torch.inference_mode(), (step or _no_step)(len(at), step_input.shape[1] == 1):
            logits = forward.forward(step_input)
        next_ids = [filler] * len(at)
        for i, b in enumerate(at):
            if finish[b] is not None:
                continue
            row = logits[i:i + 1]
            if processors[b]:
                ids = torch.tensor([history[b]], dtype=torch.long)
                for processor in processors[b]:
                    row = processor(ids, row)
            token = int(torch.argmax(row, dim=-1)[0])
            if token in eos_ids:
                finish[b] = "stop"
                continue
            if not generated[b]:
                first[b] = time.monotonic() - start
            generated[b].append(token)
            history[b].append(token)
            next_ids[i] = token
            if stops[b]:
                text = decode(generated[b])
                cut = first_stop(text, stops[b])
                if cut >= 0:
                    finish[b], texts[b] = "stop", text[:cut]
                    continue
            if len(generated[b]) >= max_new[b] or (loops[b] and ends_in_loop(generated[b])):
                finish[b] = "length"
        step_input = torch.tensor(next_ids, dtype=torch.long).unsqueeze(1)
    if keep is not None:
        keep(forward, [pads[b] for b in at], [fed(b) for b in at])
    return [d for d in out if d is not None]


def _outcome(ids: list[int], text: str | None, finish: str, first_s: float | None,
             decode: Callable[[list[int]], str], stops: Sequence[str]) -> Decoded:
    """A finished row's :class:`Decoded`: its ``text`` as cut at a stop string, else its ids decoded and cut."""
    if text is None:
        text = decode(ids) if ids else ""
        if stops:
            cut = first_stop(text, stops)
            text = text[:cut] if cut >= 0 else text
    return Decoded(ids, text, finish, first_s)
