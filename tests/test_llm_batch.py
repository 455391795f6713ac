"""Batched greedy generation (engines/llm/batch_decode.py, batch_forward.py, batch_chat.py) against the
one-at-a-time greedy decode, on tiny Llama and Qwen2 models built from a config: left-padded prompts of different
lengths, per-row end-of-sequence, stop strings and token limits, the lean and the transformers forward, and
``SmolLMEngine.generate_many`` against ``SmolLMEngine.generate``."""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rtc_agent.engines.llm import CancelToken, ChatRequest, ChatResult  # noqa: E402
from rtc_agent.engines.llm.batch_decode import greedy_batch  # noqa: E402
from rtc_agent.engines.llm.batch_forward import LlamaBatchForward, TransformersBatchForward  # noqa: E402
from rtc_agent.engines.llm.smollm import SmolLMEngine  # noqa: E402
from rtc_agent.errors import EngineError  # noqa: E402

VOCAB = 300
# a wide initializer: peaked logits, so float rounding between batched and single runs never flips an argmax
SIZES = {"vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
         "initializer_range": 0.2}


def build(kind: str) -> Any:
    torch.manual_seed(0)
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**SIZES, tie_word_embeddings=True)).eval()
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SIZES)).eval()  # q/k/v biases


def cache_arg(model: Any) -> str:
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def one_at_a_time(model: Any, prompt: list[int], max_new: int, eos: set[int]) -> list[int]:
    """The reference: greedy, one sequence, the whole sequence recomputed at every step (no cache, no padding)."""
    ids, out = list(prompt), []
    with torch.inference_mode():
        for _ in range(max_new):
            token = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            if token in eos:
                break
            out.append(token)
            ids.append(token)
    return out


def forwards(model: Any) -> dict[str, Any]:
    return {"lean": lambda pads, capacity: LlamaBatchForward(model, pads, capacity=capacity),
            "transformers": lambda pads, capacity: TransformersBatchForward(model, pads, cache_arg=cache_arg(model))}


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("path", ["lean", "transformers"])
def test_a_batch_decodes_what_each_prompt_decodes_alone(kind: str, path: str) -> None:
    model = build(kind)
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, VOCAB, (n,), generator=generator).tolist() for n in (5, 17, 1, 9)]
    max_new = [12, 7, 12, 3]
    free = [one_at_a_time(model, p, m, set()) for p, m in zip(prompts, max_new, strict=True)]
    eos = {free[0][4]}  # the first row meets it at its fifth token; the others wherever they meet it
    expected = [one_at_a_time(model, p, m, eos) for p, m in zip(prompts, max_new, strict=True)]
    rows: list[int] = []

    def make(pads: list[int], capacity: int) -> Any:
        rows.append(len(pads))
        return forwards(model)[path](pads, capacity)

    got = greedy_batch(make, prompts, max_new=max_new, eos_ids=eos, decode=lambda ids: " ".join(map(str, ids)))
    assert rows == [4]  # one forward object: every step runs all rows at once
    assert [g.ids for g in got] == expected
    assert got[0].finish == "stop" and len(got[0].ids) == 4
    for row, want, limit in zip(got, expected, max_new, strict=True):
        assert row.finish == ("length" if len(want) == limit else "stop")
        assert row.text == " ".join(map(str, want)) and row.first_s is not None


def test_stop_strings_processors_and_cancel_are_per_row() -> None:
    model = build("llama")
    prompts = [[3, 4, 5], [7, 8, 9, 10, 11, 12]]
    free = [one_at_a_time(model, p, 10, set()) for p in prompts]
    stop = f"<{free[1][2]}>"  # row 1's third token, as text

    def decode(ids: list[int]) -> str:
        return "".join(f"<{i}>" for i in ids)

    seen: list[list[int]] = []

    def spy(ids: Any, scores: Any) -> Any:  # a logits processor of row 0 only, with row 0's own ids
        seen.append(ids[0].tolist())
        return scores

    got = greedy_batch(lambda pads, cap: LlamaBatchForward(model, pads, capacity=cap), prompts, max_new=[10, 10],
                       eos_ids=set(), decode=decode, stops=[(), (stop,)], processors=[[spy], []])
    assert got[0].ids == free[0] and got[0].finish == "length"
    assert got[1].ids == free[1][:3] and got[1].finish == "stop" and got[1].text == decode(free[1][:2])
    assert seen[0] == prompts[0] and seen[-1] == prompts[0] + free[0][:-1]  # no padding in a row's own ids
    flags = [False, False]
    steps: list[int] = []

    def checkpoint() -> None:
        steps.append(1)
        if len(steps) == 3:
            flags[1] = True  # row 1 is cancelled before the third step

    got = greedy_batch(lambda pads, cap: LlamaBatchForward(model, pads, capacity=cap), prompts, max_new=[4, 10],
                       eos_ids=set(), decode=decode, cancelled=[lambda: flags[0], lambda: flags[1]],
                       checkpoint=checkpoint)
    assert got[0].ids == free[0][:4] and got[1].finish == "cancelled" and got[1].ids == free[1][:3]
    assert len(steps) == 4  # one checkpoint per step; no step after the last row is done
    with pytest.raises(ValueError):
        greedy_batch(lambda pads, cap: LlamaBatchForward(model, pads, capacity=cap), [[1], []], max_new=[1, 1],
                     eos_ids=set(), decode=decode)


def test_each_row_is_handed_on_as_it_finishes() -> None:
    """``done(b, decoded)``: once per row, the row's returned outcome, before the steps the longer rows still take."""
    model = build("qwen2")
    prompts = [[3, 4, 5], [7, 8, 9, 10], [11, 12]]
    steps: list[int] = []
    heard: list[tuple[int, int, Any]] = []  # (row, steps run when it was handed on, its outcome)
    got = greedy_batch(lambda pads, cap: LlamaBatchForward(model, pads, capacity=cap), prompts, max_new=[6, 2, 4],
                       eos_ids=set(), decode=lambda ids: " ".join(map(str, ids)),
                       checkpoint=lambda: steps.append(1), done=lambda b, row: heard.append((b, len(steps), row)))
    assert [(b, at) for b, at, _ in heard] == [(1, 2), (2, 4), (0, 6)]  # right after each row's last step
    assert [row for _, _, row in sorted(heard, key=lambda h: h[0])] == got
    assert [len(g.ids) for g in got] == [6, 2, 4] and len(steps) == 6

    def broken(b: int, row: Any) -> None:
        raise RuntimeError("the listener's queue is gone")

    with pytest.raises(RuntimeError):  # an error handing a row on ends the batch
        greedy_batch(lambda pads, cap: LlamaBatchForward(model, pads, capacity=cap), prompts, max_new=[6, 2, 4],
                     eos_ids=set(), decode=str, done=broken)


@pytest.mark.parametrize("path", ["lean", "transformers"])
def test_finished_rows_leave_the_lean_batch_and_keep_their_keys_and_values(path: str) -> None:
    """Where the forward drops rows (lean), a finished row leaves before the next step, so the steps compute only
    the rows still decoding; each row's answer is still the one-at-a-time decode's, and the keys and values ``keep``
    gets for a row as it leaves are those a fresh forward computes for its ids."""
    model = build("qwen2")
    prompts = [[3, 4, 5], [7, 8, 9, 10], [11, 12]]
    max_new = [6, 2, 4]
    widths: list[int] = []
    kept: dict[tuple[int, ...], Any] = {}

    def keep(forward: Any, pads: list[int], fed: list[list[int] | None]) -> None:
        for b, ids in enumerate(fed):
            if ids is not None:
                kept[tuple(ids)] = forward.row_cache(b, len(ids))[0][0] if path == "lean" else None

    got = greedy_batch(forwards(model)[path], prompts, max_new=max_new, eos_ids=set(), decode=str,
                       step=lambda rows, decode: widths.append(rows) or contextlib.nullcontext(), keep=keep)
    assert [g.ids for g in got] == [one_at_a_time(model, p, m, set()) for p, m in zip(prompts, max_new, strict=True)]
    assert widths == ([3, 3, 2, 2, 1, 1] if path == "lean" else [3] * 6)
    # every row is kept once, with its prompt and the tokens fed back (not its last one)
    assert sorted(kept, key=len) == sorted((tuple(p + g.ids[:-1]) for p, g in zip(prompts, got, strict=True)), key=len)
    if path == "lean":
        for ids, keys in kept.items():
            fresh = LlamaBatchForward(model, [0], capacity=len(ids))
            with torch.inference_mode():
                fresh.forward(torch.tensor([list(ids)]))
            assert torch.allclose(keys, fresh.row_cache(0, len(ids))[0][0], atol=1e-5)


def test_a_batch_cancelled_before_its_prefill_keeps_nothing_it_did_not_compute() -> None:
    model = build("llama")
    handed: list[list[int] | None] = []
    got = greedy_batch(lambda pads, cap: LlamaBatchForward(model, pads, capacity=cap), [[3, 4, 5], [6, 7]],
                       max_new=[4, 4], eos_ids=set(), decode=str, cancelled=[lambda: True, lambda: True],
                       keep=lambda forward, pads, fed: handed.extend(fed))
    assert [g.finish for g in got] == ["cancelled", "cancelled"] and handed == [[], []]
    handed.clear()  # one row cancelled before the prefill: it leaves, the other decodes on
    got = greedy_batch(lambda pads, cap: LlamaBatchForward(model, pads, capacity=cap), [[3, 4, 5], [6, 7]],
                       max_new=[4, 4], eos_ids=set(), decode=str, cancelled=[lambda: True, lambda: False],
                       keep=lambda forward, pads, fed: handed.extend(fed))
    assert got[0].finish == "cancelled" and got[1].ids == one_at_a_time(model, [6, 7], 4, set())
    assert handed == [[], None, [6, 7, *got[1].ids[:-1]]]


def _word_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<unk>": 0, "<eos>": 1, **{w: i + 2 for i, w in enumerate(
        ["<system>", "<user>", "<assistant>", "translate", "into", "spanish", "german", "italian", "good",
         "morning", "everyone", "thank", "you", "very", "much", "the", "meeting", "starts", "now"])}}
    vocab.update({f"w{i}": i for i in range(len(vocab), VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return tok


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama folder with a word tokenizer and a chat template, as a user-supplied model is (a Qwen2 folder
    would get transformers' Qwen2 tokenizer instead of this one; Qwen2's forward is tested above)."""
    path = tmp_path_factory.mktemp("tiny-llama")
    build("llama").save_pretrained(path)
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=_word_tokenizer(), eos_token="<eos>", unk_token="<unk>",
        chat_template="{% for m in messages %}<{{ m.role }}> {{ m.content }} {% endfor %}"
                      "{% if add_generation_prompt %}<assistant> {% endif %}").save_pretrained(path)
    return path


def loaded(folder: Path, **options: Any) -> SmolLMEngine:
    engine = SmolLMEngine(folder, cache_dir=folder / "cache", precision="float32", warmup=False, **options)
    engine.load(lambda message: None)
    return engine


def chat(system: str, text: str, **options: Any) -> ChatRequest:
    options.setdefault("max_tokens", 10)
    options.setdefault("temperature", 0.0)
    return ChatRequest(messages=[{"role": "system", "content": system}, {"role": "user", "content": text}],
                       **options)


def alone(engine: SmolLMEngine, request: ChatRequest) -> tuple[str, str | None, int]:
    deltas = list(engine.generate(request, CancelToken()))
    usage = deltas[-1].usage
    assert usage is not None
    return "".join(d.text for d in deltas), deltas[-1].finish_reason, usage.completion_tokens


@pytest.mark.parametrize("lean", [True, False])
def test_generate_many_answers_as_generate_does(folder: Path, lean: bool) -> None:
    engine = loaded(folder, lean_decoder=lean)  # repetition penalty 1.1 (a folder model's default) on every row
    assert engine.load_info["forward"].startswith("lean" if lean else "transformers")
    requests = [chat("translate into spanish", "good morning everyone"),
                chat("translate into german", "thank you very much", max_tokens=4),
                chat("translate into italian", "the meeting starts now good morning everyone thank you")]
    expected = [alone(engine, r) for r in requests]
    stop_word = expected[0][0].split()[2]  # a stop string in the first reply
    requests.append(chat("translate into spanish", "good morning everyone", stop=[stop_word]))
    expected.append(alone(engine, requests[-1]))
    assert expected[-1][1] == "stop" and stop_word not in expected[-1][0]
    made: list[int] = []
    make = engine._batch_forward

    def counted(pads: list[int], capacity: int) -> Any:
        made.append(len(pads))
        return make(pads, capacity)

    engine._batch_forward = counted  # type: ignore[method-assign]
    heard: dict[int, Any] = {}
    results = engine.generate_many(requests, on_result=lambda i, result: heard.setdefault(i, result))
    assert made == [4]  # one batched decode for all four
    assert heard == dict(enumerate(results))  # each result handed on once, as its row finished
    for result, (text, finish, tokens) in zip(results, expected, strict=True):
        assert isinstance(result, ChatResult)
        assert (result.text, result.finish_reason) == (text, finish)
        assert result.usage is not None and result.usage.completion_tokens == tokens
        assert result.model == engine.model_name and result.duration_s > 0
    engine.close()


def test_generate_many_routes_what_cannot_share_a_batch(folder: Path) -> None:
    engine = loaded(folder)
    greedy = [chat("translate into spanish", "good morning"), chat("translate into german", "thank you")]
    expected = [alone(engine, r) for r in greedy]
    too_long = chat("translate into spanish", " ".join(["now"] * 200))  # past the 128-token context
    sampled = chat("translate into german", "good morning", temperature=0.8, max_tokens=3)
    made: list[int] = []
    make = engine._batch_forward
    engine._batch_forward = lambda pads, cap: made.append(len(pads)) or make(pads, cap)  # type: ignore[method-assign]
    results = engine.generate_many([greedy[0], too_long, sampled, greedy[1]])
    assert made == [2]  # only the two greedy requests that fit were batched
    assert isinstance(results[1], EngineError) and results[1].code == "context_length_exceeded"
    assert isinstance(results[2], ChatResult) and results[2].usage.completion_tokens <= 3  # alone, sampled
    assert [(r.text, r.finish_reason) for r in (results[0], results[3])] == [e[:2] for e in expected]
    # a lone greedy request takes the one-at-a-time path, with its prefix cache
    before = engine.reused_tokens
    [single] = engine.generate_many([greedy[0]])
    assert made == [2] and single.text == expected[0][0] and engine.reused_tokens > before
    cancel = CancelToken()
    cancel.cancel()
    assert [r.finish_reason for r in engine.generate_many(greedy, cancel)] == ["cancelled", "cancelled"]
    engine.close()
    with pytest.raises(EngineError) as err:
        engine.generate_many(greedy)
    assert err.value.code == "engine_not_loaded"


async def test_through_the_worker_a_short_translation_arrives_before_the_batch_ends(folder: Path) -> None:
    """The real path of a batch of translations: the worker's ``mt`` view on the LLM's lane, the translation engine
    and the engine's batched decode. Rows run to their token limits (a tiny model's replies), which grow with the
    source text: each caller has its translation (here: its ``mt_bad_output`` error) when its own row ends."""
    import asyncio
    import time

    from rtc_agent.engines.mt import ChatTranslationEngine, TextTranslateRequest
    from rtc_agent.engines.mt.chat import token_limit
    from rtc_agent.worker import EngineSpec, Worker

    def adapt(chat: Any) -> ChatTranslationEngine:
        return ChatTranslationEngine(chat, kind="embedded", max_batch=4)

    worker = Worker()
    worker.add(EngineSpec(name="llm", factory=lambda: loaded(folder, repetition_penalty=1.0)))
    worker.add(EngineSpec(name="mt", factory=lambda: adapt(loaded(folder)), shares="llm", adapt=adapt, max_batch=4,
                          batch_window_ms=50, urgent=True))
    texts = {"short": "thank you", "long": " ".join(["the meeting starts now"] * 3)}  # 22 and 61 tokens here
    assert token_limit(texts["long"]) > token_limit(texts["short"]) + 20
    arrived: dict[str, float] = {}

    async def translate(name: str) -> None:
        try:
            await worker.call("mt", TextTranslateRequest(texts[name], "en", "es"), timeout=60)
        except EngineError as exc:
            assert exc.code == "mt_bad_output"
        arrived[name] = time.monotonic()

    try:
        await worker.load("llm")
        await asyncio.gather(translate("long"), translate("short"))
        assert arrived["short"] < arrived["long"]
        for _ in range(500):  # the batch is counted when it ends, which the last early result may precede
            if worker.stats()["mt"]["batches"]:
                break
            await asyncio.sleep(0.01)
        assert worker.stats()["mt"]["batches"] == 1  # one batched decode for both
    finally:
        await worker.close()
