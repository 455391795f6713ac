"""A greedy reply stuck in a loop ends early when its request asks for it (``ChatRequest.stop_loops``, which the
translation engine sets): the rule (:func:`rtc_agent.engines.llm.loops.ends_in_loop`), the batched decode, the
one-at-a-time decode of the embedded engine on a tiny model whose next token is scripted, and the translation that
keeps the text up to the repeated phrase."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rtc_agent.engines.llm.loops import MIN_PHRASE_TOKENS, REPEATS, SHORT_REPEATS, ends_in_loop

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rtc_agent.engines.llm import CancelToken  # noqa: E402
from rtc_agent.engines.llm.batch_decode import greedy_batch  # noqa: E402
from rtc_agent.engines.llm.batch_forward import BatchForward  # noqa: E402
from tests.test_llm_batch import VOCAB, chat, folder, loaded  # noqa: E402,F401

CYCLE = [250, 251, 252, 253]  # a phrase of 4 tokens (words of the tiny tokenizer) said again and again
NEXT = {**{t: CYCLE[(i + 1) % len(CYCLE)] for i, t in enumerate(CYCLE)}, **{t: t + 1 for t in range(30, 230)}}


def next_token(token: int) -> int:
    """The scripted model: a token in ``CYCLE`` is followed by the next of the cycle, 30..229 count up (no loop),
    anything else (the prompt's end) by ``CYCLE[0]``."""
    return NEXT.get(token, CYCLE[0])


def logits_after(last: list[int]) -> Any:
    out = torch.full((len(last), VOCAB), -10.0)
    for row, token in enumerate(last):
        out[row, next_token(token)] = 10.0
    return out


class ScriptedForward(BatchForward):
    """A batched forward whose logits pick each row's ``next_token`` of its last input token."""

    def forward(self, ids: Any) -> Any:
        self.length += int(ids.shape[1])
        return logits_after([int(t) for t in ids[:, -1]])


def test_a_loop_is_a_long_phrase_said_three_times_or_a_short_one_six_times() -> None:
    phrase = [5, 6, 7, 8]
    assert MIN_PHRASE_TOKENS == 4 and REPEATS == 3 and SHORT_REPEATS == 6
    assert ends_in_loop([1, 2] + phrase * 3) and not ends_in_loop([1, 2] + phrase * 2 + phrase[:3])
    assert not ends_in_loop([1] + [5, 6] * 5) and ends_in_loop([1] + [5, 6] * 6)  # "no, no, no" is no loop
    assert not ends_in_loop([9] * 5) and ends_in_loop([9] * 6)
    assert not ends_in_loop(list(range(60))) and not ends_in_loop([])
    assert ends_in_loop(list(range(16)) * 3) and not ends_in_loop(list(range(17)) * 3)  # phrases of at most 16


def test_the_batched_decode_ends_a_looping_row_that_asks_for_it_and_no_other() -> None:
    prompts = [[3, 4], [5, 30]]  # row 0 loops through CYCLE, row 1 counts up from 31

    def run(loops: list[bool] | None) -> list[Any]:
        return greedy_batch(lambda pads, cap: ScriptedForward(pads), prompts, max_new=[40, 40], eos_ids=set(),
                            decode=lambda ids: " ".join(map(str, ids)), loops=loops)

    free = run(None)
    assert free[0].ids == (CYCLE * 10)[:40] and free[0].finish == "length"
    stopped = run([True, True])
    assert stopped[0].ids == CYCLE * REPEATS and stopped[0].finish == "length"  # as soon as it is a loop
    assert stopped[1].ids == free[1].ids == list(range(31, 71))  # a row that never loops runs to its limit
    assert run([False, True])[0].ids == free[0].ids  # a row that does not ask runs on


def scripted(engine: Any) -> Callable[[], None]:
    """Make ``engine``'s one-at-a-time forward the scripted model; returns the undo."""
    real = engine._forward

    def forward(step_input: Any, past: Any) -> tuple[Any, Any]:
        real(step_input, past)  # keeps the engine's cache bookkeeping real
        return logits_after([int(step_input[0, -1])]), engine._decoder

    engine._forward = forward
    return lambda: setattr(engine, "_forward", real)


def test_the_engine_ends_a_looping_reply_that_asks_for_it(folder: Path) -> None:  # noqa: F811
    engine = loaded(folder, repetition_penalty=1.0)
    scripted(engine)
    for stop_loops, tokens in ((False, 40), (True, len(CYCLE) * REPEATS)):
        deltas = list(engine.generate(chat("translate into spanish", "good morning", max_tokens=40,
                                           stop_loops=stop_loops), CancelToken()))
        usage = deltas[-1].usage
        assert deltas[-1].finish_reason == "length" and usage is not None and usage.completion_tokens == tokens
        assert "".join(d.text for d in deltas).split() == [f"w{t}" for t in (CYCLE * 10)[:tokens]]
    # a sampled reply is left alone: the rule is for greedy decoding
    sampled = list(engine.generate(chat("translate into spanish", "good morning", max_tokens=40, stop_loops=True,
                                        temperature=1.0), CancelToken()))
    assert sampled[-1].usage is not None and sampled[-1].usage.completion_tokens > len(CYCLE) * REPEATS


def test_a_translation_that_loops_ends_early_and_keeps_the_phrase_once(folder: Path) -> None:  # noqa: F811
    from rtc_agent.engines.mt import ChatTranslationEngine, TextTranslateRequest

    engine = loaded(folder, repetition_penalty=1.0)
    scripted(engine)
    translator = ChatTranslationEngine(engine, kind="embedded", max_batch=4)
    # alone (the one-at-a-time path) and two together (the batched decode, whose forward is the lean batch one:
    # scripted here through the engine's batch forward factory)
    alone = translator.run_batch([TextTranslateRequest("good morning everyone, the meeting starts now", "en", "es")])
    assert alone[0].text == " ".join(f"w{t}" for t in CYCLE)
    engine._batch_forward = lambda pads, capacity: ScriptedForward(pads)
    both = translator.run_batch([TextTranslateRequest("good morning everyone", "en", lang) for lang in ("es", "de")])
    assert [r.text for r in both] == [" ".join(f"w{t}" for t in CYCLE)] * 2
