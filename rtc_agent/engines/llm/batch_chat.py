"""Several chat requests answered by one batched greedy decode (:func:`generate_many`): the engine side of
``SmolLMEngine.generate_many``, kept apart from the streaming path.

Which requests share the batch: the greedy ones (``temperature`` None or 0) whose prompt fits the context. A
sampled request runs alone through the engine's one-at-a-time path (``one``), and so does a lone greedy request
(it keeps the engine's prefix cache); a prompt that does not fit fails that request with
``EngineError(code="context_length_exceeded", status=400)``. Results are what the one-at-a-time path gives: the
reply's text (after the forced tool-call prefix, when there is one), its finish reason, usage, and timings
(``first_token_s`` from the start of the batch, ``duration_s`` until the request's row finished).

``on_result(i, result)``, when given, receives each request's result as soon as it is known: a batched row's as
the row finishes, while the longer rows still decode (three translations of one caption final end a few tokens
apart), the others when they are done. The returned list holds the same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from rtc_agent.engines.llm.batch_decode import Decoded, greedy_batch
from rtc_agent.engines.llm.batch_forward import BatchForward
from rtc_agent.engines.llm.job import CancelToken
from rtc_agent.engines.llm.messages import ChatRequest, ChatResult, Usage
from rtc_agent.errors import EngineError

__all__ = ["BatchModel", "generate_many"]


@dataclass
class BatchModel:
    """What :func:`generate_many` needs of an engine.

    - ``prompt(request)``: the prompt ids and the text the reply starts with (the forced call prefix, or "");
    - ``make_forward(pads, capacity)``: a fresh batched forward for the rows' left padding;
    - ``eos_ids``, ``decode(ids)``: end-of-sequence ids and the detokenizer;
    - ``processors(request)``: the logits processors of one greedy request (e.g. the repetition penalty);
    - ``one(request)``: the engine's one-at-a-time answer (a ``ChatResult`` or the ``Exception`` that ended it);
    - ``max_context``, ``model_name``, ``checkpoint`` (called before every step);
    - ``step(rows, decode)``: the context each forward runs in (e.g. its thread count; ``decode``: one token a row;
      None: none);
    - ``seed``/``keep``: reuse of earlier rows' keys and values (see
      :func:`~rtc_agent.engines.llm.batch_decode.greedy_batch`; None: every prompt computed whole).
    """

    prompt: Callable[[ChatRequest], tuple[list[int], str]]
    make_forward: Callable[[list[int], int], BatchForward]
    eos_ids: set[int]
    decode: Callable[[list[int]], str]
    processors: Callable[[ChatRequest], list[Any]]
    one: Callable[[ChatRequest], ChatResult | Exception]
    max_context: int
    model_name: str = ""
    checkpoint: Callable[[], object] = lambda: None
    step: Callable[[int, bool], AbstractContextManager[None]] | None = None
    seed: Callable[[BatchForward, Sequence[Sequence[int]], list[int]], int] | None = None
    keep: Callable[[BatchForward, list[int], list[list[int] | None]], None] | None = None


def _greedy(request: ChatRequest) -> bool:
    return request.temperature is None or request.temperature <= 0


def generate_many(model: BatchModel, requests: Sequence[ChatRequest], cancel: CancelToken | None = None,
                  on_result: Callable[[int, ChatResult | Exception], object] | None = None,
                  ) -> list[ChatResult | Exception]:
    """One result per request, in order (see the module docstring); ``cancel`` stops the whole batch (each
    unfinished reply ends with ``finish_reason="cancelled"``). An error of the batched forward fails every
    request of the batch still without a result (each gets that exception)."""
    results: list[ChatResult | Exception | None] = [None] * len(requests)

    def settle(i: int, result: ChatResult | Exception) -> None:
        results[i] = result
        if on_result is not None:
            on_result(i, result)

    rows: list[tuple[int, list[int], str, int]] = []  # (request index, prompt, prefix, max new tokens)
    for i, request in enumerate(requests):
        if not _greedy(request):
            continue
        try:
            prompt, prefix = model.prompt(request)
        except Exception as exc:
            settle(i, exc)
            continue
        room = model.max_context - len(prompt)
        if room < 1:
            settle(i, EngineError(f"the prompt has {len(prompt)} tokens; the model's context is "
                                  f"{model.max_context}", code="context_length_exceeded", status=400))
            continue
        rows.append((i, prompt, prefix, min(request.max_tokens, room)))
    if len(rows) == 1:
        rows = []  # a lone greedy request: the one-at-a-time path (and its prefix cache)
    batched = {i for i, *_ in rows}
    if rows:
        start = time.monotonic()
        token = cancel if cancel is not None else CancelToken()

        def row_done(b: int, row: Decoded) -> None:
            i, prompt, prefix, _ = rows[b]
            settle(i, ChatResult(text=prefix + row.text, finish_reason=row.finish,
                                 usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(row.ids)),
                                 model=model.model_name, first_token_s=0.0 if prefix else row.first_s,
                                 duration_s=time.monotonic() - start))

        try:
            greedy_batch(
                model.make_forward, [p for _, p, _, _ in rows], max_new=[m for *_, m in rows],
                eos_ids=model.eos_ids, decode=model.decode, stops=[list(requests[i].stop) for i, *_ in rows],
                processors=[model.processors(requests[i]) for i, *_ in rows],
                cancelled=[lambda: token.cancelled] * len(rows),
                checkpoint=model.checkpoint, step=model.step, seed=model.seed, keep=model.keep, done=row_done,
                loops=[requests[i].stop_loops for i, *_ in rows])
        except Exception as exc:
            for i in batched:
                if results[i] is None:
                    settle(i, exc)
    for i, request in enumerate(requests):
        if results[i] is None and i not in batched:
            settle(i, model.one(request))
    return [r if r is not None else EngineError("no result", code="engine_error") for r in results]
