"""The lean Llama-family decoder against transformers' own forward, on tiny models built from a config."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rtc_agent.engines.llm import CancelToken, ChatRequest  # noqa: E402
from rtc_agent.engines.llm.llama_decoder import LlamaDecoder, unsupported_reason  # noqa: E402
from rtc_agent.engines.llm.smollm import SmolLMEngine  # noqa: E402
from tests.embedded_llm import loaded_engine, needs_smollm  # noqa: E402

SIZES = {"vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128}


def build(kind: str) -> object:
    torch.manual_seed(0)
    if kind == "llama":
        config = transformers.LlamaConfig(**SIZES, rope_theta=100000.0, tie_word_embeddings=True)
        return transformers.LlamaForCausalLM(config).eval()
    if kind == "llama3-rope":
        config = transformers.LlamaConfig(**SIZES, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32})
        return transformers.LlamaForCausalLM(config).eval()
    config = transformers.Qwen2Config(**SIZES)  # q, k and v projections with biases
    return transformers.Qwen2ForCausalLM(config).eval()


def reference(model: object, chunks: list[object]) -> list[object]:
    """transformers' last-position logits after each chunk, fed with its own KV cache."""
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out, past = [], None
    with torch.inference_mode():
        for ids in chunks:
            result = model(input_ids=ids, use_cache=True, **{name: past})
            past = getattr(result, name)
            out.append(result.logits[0, -1].float())
    return out


@pytest.mark.parametrize("kind", ["llama", "llama3-rope", "qwen2"])
def test_the_lean_decoder_matches_transformers(kind: str) -> None:
    model = build(kind)
    assert unsupported_reason(model) is None
    decoder = LlamaDecoder(model, max_length=128, initial_length=8)  # small: the cache grows on the way
    chunks = [torch.randint(0, 300, (1, 11)), torch.randint(0, 300, (1, 1)), torch.randint(0, 300, (1, 5)),
              torch.randint(0, 300, (1, 1))]
    expected = reference(model, chunks)
    with torch.inference_mode():
        got = [decoder.forward(ids) for ids in chunks]
    for want, have in zip(expected, got, strict=True):
        assert have.shape == want.shape
        assert torch.allclose(have, want, atol=1e-4, rtol=1e-4)
    assert decoder.length == 18


def test_crop_reuses_a_prefix_and_recomputes_the_rest() -> None:
    model = build("llama")
    decoder = LlamaDecoder(model, max_length=128)
    prompt = torch.randint(0, 300, (1, 12))
    other_tail = torch.randint(0, 300, (1, 4))
    layers: list[int] = []
    decoder.before_layer = lambda: layers.append(1)
    with torch.inference_mode():
        decoder.forward(prompt)
        assert len(layers) == 3  # called before every layer
        decoder.crop(-4)  # drop the last four positions
        assert decoder.length == 8
        got = decoder.forward(other_tail)
        decoder.reset()
        fresh = decoder.forward(torch.cat([prompt[:, :8], other_tail], dim=1))
    assert torch.allclose(got, fresh, atol=1e-4)
    decoder.crop(100)  # never extends
    assert decoder.length == 12


def test_the_context_limit_is_an_error() -> None:
    decoder = LlamaDecoder(build("llama"), max_length=16)
    with torch.inference_mode(), pytest.raises(ValueError, match="context of 16"):
        decoder.forward(torch.randint(0, 300, (1, 17)))


def test_other_architectures_are_refused_with_a_reason() -> None:
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    assert "gpt2" in (unsupported_reason(gpt2) or "")
    with pytest.raises(ValueError, match="cannot run"):
        LlamaDecoder(gpt2, max_length=16)


@pytest.mark.real_model
@needs_smollm
def test_the_engine_answers_the_same_with_either_forward() -> None:
    lean = loaded_engine()
    plain = loaded_engine(lean_decoder=False)
    assert lean.load_info["forward"] == "lean"
    assert plain.load_info["forward"] == "transformers (turned off)"
    request = ChatRequest(messages=[{"role": "user", "content": "Name three colours."}], max_tokens=16)

    def reply(engine: SmolLMEngine) -> str:
        return "".join(d.text for d in engine.generate(request, CancelToken()))

    assert reply(lean) == reply(plain)
