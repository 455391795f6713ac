"""LLM precision and the prefix cache: int8 and int4 layers on a tiny model built from a config, a user-supplied
model folder loaded in every precision, and the packaged SmolLM2 reusing its KV cache across turns."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rtc_agent.engines.llm import CancelToken, ChatRequest  # noqa: E402
from rtc_agent.engines.llm.precision import (  # noqa: E402
    HEAD_RESCORE_TOP,
    INT4_GROUP,
    QUANT_ROWS,
    finish_precision,
    model_dtype,
    quantize_decode_linears,
    resolve_precision,
    top_indices,
)
from rtc_agent.engines.llm.smollm import SmolLMEngine  # noqa: E402
from rtc_agent.errors import EngineError  # noqa: E402
from tests.embedded_llm import loaded_engine, needs_smollm  # noqa: E402

AUTO = resolve_precision("auto", torch)
HAS_INT8 = AUTO in ("int8", "int4")
HAS_INT4 = AUTO == "int4"


def tiny_llama(dtype: object = None) -> object:
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    return model.to(dtype) if dtype is not None else model


def test_resolve_precision() -> None:
    assert resolve_precision("float32", torch) == "float32"
    assert resolve_precision("auto", torch) in ("int4", "int8", "float32")
    assert model_dtype("float32", torch) == torch.float32
    assert model_dtype("bfloat16", torch) == torch.bfloat16
    assert model_dtype("int4", torch) == torch.float32  # quantized from the exact weights, then cast
    with pytest.raises(ValueError, match="unknown LLM precision"):
        resolve_precision("fp8", torch)


@pytest.mark.skipif(not HAS_INT8, reason="this CPU has no native bf16 or torch no int8 weight-only kernel")
def test_int8_decode_layers_track_the_dense_model() -> None:
    dense = tiny_llama(torch.bfloat16)
    quant = tiny_llama(torch.bfloat16)
    assert quantize_decode_linears(quant, torch) == {"int8": 2 * 7 + 1, "int4": 0}  # 7 per layer + head
    head = quant.lm_head
    assert head.weight is quant.model.embed_tokens.weight  # tied weights stay tied
    prompt = torch.randint(0, 512, (1, QUANT_ROWS["int8"] + 8))
    with torch.inference_mode():
        # a prompt takes the dense path: exactly the dense model's logits
        assert torch.equal(dense(input_ids=prompt).logits, quant(input_ids=prompt).logits)
        step = torch.randint(0, 512, (1, 1))
        a = dense(input_ids=step).logits.float()
        b = quant(input_ids=step).logits.float()
    assert b.shape == a.shape
    assert float((a - b).norm() / a.norm()) < 0.05


@pytest.mark.skipif(not HAS_INT4, reason="this CPU has no native bf16 or torch no int4 weight-only kernel")
def test_int4_layers_reproduce_weights_on_a_4_bit_grid() -> None:
    """A Q4_1-style weight (each group of 32 is ``d * q + m`` with q in 0..15, 0 and 15 present) is kept exactly:
    the int4 path matches the dense product up to bfloat16 rounding."""
    torch.manual_seed(1)
    out_features, in_features = 48, 4 * INT4_GROUP
    groups = in_features // INT4_GROUP
    codes = torch.randint(0, 16, (out_features, groups, INT4_GROUP))
    codes[..., 0], codes[..., 1] = 0, 15
    step = torch.rand(out_features, groups, 1) * 0.02 + 0.001
    low = torch.randn(out_features, groups, 1) * 0.05 - 8 * step
    weight = (codes * step + low).reshape(out_features, in_features)
    linear = torch.nn.Linear(in_features, out_features, bias=False)
    linear.weight.data.copy_(weight)
    holder = torch.nn.Sequential(linear)
    assert quantize_decode_linears(holder, torch, "int4") == {"int4": 1, "int8": 0}
    layer = holder.to(torch.bfloat16)[0]
    x = torch.randn(3, in_features)
    exact = x @ weight.t()
    with torch.inference_mode():
        got = layer(x.to(torch.bfloat16)).float()
    assert float((got - exact).norm() / exact.norm()) < 0.01


@pytest.mark.skipif(not HAS_INT4, reason="this CPU has no native bf16 or torch no int4 weight-only kernel")
def test_int4_model_rescores_the_head_and_tracks_the_dense_model() -> None:
    dense = tiny_llama()
    quant = finish_precision(tiny_llama(), "int4", torch)
    kinds = [m.bits for m in quant.modules() if type(m).__name__ == "DecodeQuantLinear"]
    assert kinds.count(4) == 2 * 7 + 1 and kinds.count(8) == 0  # the tied output head too, rescored
    assert quant.lm_head.rescore == HEAD_RESCORE_TOP
    assert all(m.rescore == 0 for m in quant.model.modules() if type(m).__name__ == "DecodeQuantLinear")
    assert quant.lm_head.weight is quant.model.embed_tokens.weight
    with torch.inference_mode():
        prompt = torch.randint(0, 512, (1, QUANT_ROWS["int4"] + 8))  # long prompt: the dense bf16 path
        a = dense(input_ids=prompt).logits.float()
        b = quant(input_ids=prompt).logits.float()
        assert float((a - b).norm() / a.norm()) < 0.05
        step = torch.randint(0, 512, (1, 3))  # short input: int4 (random weights are not on a 4-bit grid)
        a = dense(input_ids=step).logits.float()
        b = quant(input_ids=step).logits.float()
    assert float((a - b).norm() / a.norm()) < 0.2


@pytest.mark.skipif(not HAS_INT4, reason="this CPU has no native bf16 or torch no int4 weight-only kernel")
def test_int4_head_picks_the_dense_heads_best_tokens() -> None:
    """The output head's int4 product only chooses the candidates: each row's best tokens carry the dense
    weights' logits, so a greedy step picks the dense head's token, over many inputs; the others stay close."""
    torch.manual_seed(2)
    vocab, hidden = 4096, 128
    head = torch.nn.Linear(hidden, vocab, bias=False).requires_grad_(False)
    holder = torch.nn.Sequential(head)
    assert quantize_decode_linears(holder, torch, "int4") == {"int4": 1, "int8": 0}
    layer = holder[0]
    layer.rescore = HEAD_RESCORE_TOP  # as quantize_decode_linears sets it on a model's output head
    x = torch.randn(64, 3, hidden)  # 64 steps of three rows
    exact = x @ head.weight.t()
    with torch.inference_mode():
        got = torch.cat([layer(step) for step in x])
    exact = exact.reshape(got.shape)
    assert torch.equal(got.argmax(-1), exact.argmax(-1))
    top = exact.topk(5, dim=-1).indices
    assert torch.allclose(got.gather(1, top), exact.gather(1, top), atol=1e-4)
    assert float((got - exact).norm() / exact.norm()) < 0.1


def test_blockwise_top_indices_are_the_topk_set() -> None:
    """The head's candidates, found block by block, are the set a full topk gives: vocabularies a multiple of the
    block or not, fewer blocks than candidates, one row or several, and a row whose best tokens share one block."""
    torch.manual_seed(4)
    for (rows, n), k, block in (((3, 151936), 32, 128), ((1, 1000), 32, 128), ((2, 49152), 32, 128),
                                ((4, 999), 5, 7), ((2, 40), 32, 128), ((3, 4096), 32, 64)):
        for _ in range(4):
            values = torch.randn(rows, n)
            values[0, 64:96] += 50.0  # the 32 best of row 0 in one or two blocks
            got = top_indices(values, k, torch, block)
            assert got.shape == (rows, k)
            assert torch.equal(got.sort(-1).values, values.topk(k, dim=-1).indices.sort(-1).values)


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "int8", "int4"])
def test_a_user_model_folder_loads_in_each_precision(tmp_path: Path, precision: str) -> None:
    if precision != "float32" and not (HAS_INT4 if precision == "int4" else HAS_INT8):
        pytest.skip("this CPU has no native bf16 or torch no kernel for this precision")
    folder = tmp_path / "tiny"
    tiny_llama().save_pretrained(folder)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=_word_tokenizer(), eos_token="<eos>", unk_token="<unk>",
        chat_template="{% for m in messages %}<{{ m.role }}> {{ m.content }} {% endfor %}"
                      "{% if add_generation_prompt %}<assistant> {% endif %}")
    tokenizer.save_pretrained(folder)
    engine = SmolLMEngine(folder, cache_dir=tmp_path / "cache", precision=precision, warmup=False)
    engine.load(lambda message: None)
    assert engine.load_info["source"] == "folder" and engine.load_info["precision"] == precision
    from rtc_agent.engines.llm import batch_int8

    quantized = precision in ("int8", "int4") and batch_int8.available(torch)
    assert engine.load_info["batch_int8"] == engine.runtime_stats()["batch_int8"] == ("on" if quantized else "off")
    request = ChatRequest(messages=[{"role": "user", "content": "hello there"}], max_tokens=5)
    deltas = list(engine.generate(request, CancelToken()))
    assert deltas[-1].usage is not None and deltas[-1].usage.completion_tokens >= 1
    engine.close()


def test_a_bad_precision_is_a_load_error(tmp_path: Path) -> None:
    engine = SmolLMEngine(tmp_path, cache_dir=tmp_path, precision="fp8", warmup=False)
    with pytest.raises(EngineError, match="unknown LLM precision"):
        engine.load(lambda message: None)


def _word_tokenizer() -> object:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<eos>": 1, **{w: i + 2 for i, w in enumerate(
        ["<user>", "<assistant>", "hello", "there", "world", "a", "b", "c"])}}
    vocab.update({f"w{i}": i for i in range(len(vocab), 512)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


@pytest.mark.real_model
@needs_smollm
def test_the_next_turn_reuses_the_kv_cache_and_answers_the_same() -> None:
    cached = loaded_engine()
    fresh = loaded_engine(prefix_cache=False)
    history = [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "Name a fruit."}]

    def reply(engine: SmolLMEngine, messages: list[dict[str, str]]) -> str:
        request = ChatRequest(messages=messages, max_tokens=8)
        return "".join(d.text for d in engine.generate(request, CancelToken()))

    first = reply(cached, history)
    assert cached.reused_tokens == 0
    follow_up = [*history, {"role": "assistant", "content": first}, {"role": "user", "content": "And a colour?"}]
    second = reply(cached, follow_up)
    assert cached.reused_tokens > 20  # the system prompt and the first turn were not computed again
    assert second == reply(fresh, follow_up)
    assert fresh.reused_tokens == 0
    # a prompt that shares nothing but the template start still works
    other = reply(cached, [{"role": "user", "content": "Say hi."}])
    assert other == reply(fresh, [{"role": "user", "content": "Say hi."}])
