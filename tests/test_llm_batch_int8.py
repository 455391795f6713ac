"""Decode steps of several rows through int8 x int8 products (``llm_batch_int8``): which inputs take the path, how
close they stay to the dense model, and how the setting resolves, on a tiny Llama built from a config."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rtc_agent.config import Settings, SettingsError  # noqa: E402
from rtc_agent.config.validation import validate  # noqa: E402
from rtc_agent.engines.llm import batch_int8, precision  # noqa: E402
from rtc_agent.engines.llm.precision import finish_precision, resolve_precision  # noqa: E402
from tests.test_llm_precision import tiny_llama  # noqa: E402

HAS_PATH = batch_int8.available(torch) and resolve_precision("auto", torch) == "int4"
needs_path = pytest.mark.skipif(not HAS_PATH, reason="no int4 kernel or no x86/FBGEMM dynamic int8 linear here")


def test_the_setting_resolves_and_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    assert batch_int8.resolve("off", torch) is False
    assert batch_int8.resolve("auto", torch) is batch_int8.available(torch)
    with pytest.raises(ValueError, match="unknown llm_batch_int8"):
        batch_int8.resolve("fast", torch)
    # torch's default kernels (cpu-profile generic): auto turns it off, on is an error that says why
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert batch_int8.available(torch) is False and batch_int8.resolve("auto", torch) is False
    with pytest.raises(ValueError, match="AVX2"):
        batch_int8.resolve("on", torch)
    assert Settings().llm_batch_int8 == "auto"
    for good in batch_int8.MODES:
        validate(dataclasses.replace(Settings(), llm_batch_int8=good))
    with pytest.raises(SettingsError, match="llm_batch_int8"):
        validate(dataclasses.replace(Settings(), llm_batch_int8="yes"))
    from rtc_agent.engines import llm

    assert llm.engine_spec(dataclasses.replace(Settings(), llm_batch_int8="off")).factory().batch_int8 == "off"


@needs_path
def test_only_decode_steps_of_several_rows_take_the_int8_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layer gets the int8 copy (the output head where it is rescored); a step of 2-8 rows uses it, one row, a
    prompt and more than 8 rows do not (they compute as without it); its logits track the dense model's."""
    dense = tiny_llama()
    quant = finish_precision(tiny_llama(), "int4", torch, batch_int8=True)
    plain = finish_precision(tiny_llama(), "int4", torch)
    layers = [m for m in quant.modules() if type(m).__name__ == "DecodeQuantLinear"]
    assert sum(m.batch is not None for m in layers) == 2 * 7 + 1 and quant.lm_head.batch is not None
    # an int8 model's head is not rescored: its batched steps keep the weight-only product
    assert finish_precision(tiny_llama(), "int8", torch, batch_int8=True).lm_head.batch is None
    calls = []
    original = batch_int8.matmul
    monkeypatch.setattr(precision, "matmul", lambda *a: calls.append(a[0].shape) or original(*a))
    with torch.inference_mode():
        for shape, used in (((3, 1), True), ((2, 1), True), ((8, 1), True), ((1, 1), False), ((3, 4), False),
                            ((9, 1), False)):
            calls.clear()
            ids = torch.randint(0, 512, shape)
            got = quant(input_ids=ids).logits.float()
            assert bool(calls) is used, shape
            if not used:
                assert torch.equal(got, plain(input_ids=ids).logits.float()), shape
        steps = torch.randint(0, 512, (3, 1))
        for _ in range(8):
            a = dense(input_ids=steps).logits.float()
            b = quant(input_ids=steps).logits.float()
            assert float((a - b).norm() / a.norm()) < 0.2  # random weights: as the int4 path's own bound
            steps = torch.randint(0, 512, (3, 1))


def test_a_product_matches_the_float_one() -> None:
    if not batch_int8.available(torch):
        pytest.skip("no x86/FBGEMM dynamic int8 linear here")
    torch.manual_seed(3)
    weight = torch.randn(96, 64)
    x = torch.randn(3, 64)
    got = batch_int8.matmul(x, batch_int8.pack(weight, torch), torch)
    exact = x @ weight.t()
    assert got.shape == exact.shape and float((got - exact).norm() / exact.norm()) < 0.03


@needs_path
def test_the_output_head_of_a_batch_step_rescores_its_best_tokens_from_the_dense_weights() -> None:
    """The output head's int8 x int8 logits pick the candidates; each row's best ``HEAD_RESCORE_TOP`` are computed
    again from the dense weights, so a greedy step takes the dense head's token."""
    torch.manual_seed(5)
    for _ in range(3):
        linear = torch.nn.Linear(64, 512, bias=False)
        head = precision._quant_linear_class()(linear, 4, rescore=precision.HEAD_RESCORE_TOP)
        head.batch = batch_int8.pack(linear.weight, torch)
        x = torch.randn(3, 1, 64)
        with torch.inference_mode():
            got, exact = head(x)[:, 0].float(), linear(x)[:, 0].float()
        assert torch.equal(got.argmax(-1), exact.argmax(-1))
        top = exact.topk(4, dim=-1).indices
        assert torch.allclose(got.gather(1, top), exact.gather(1, top), rtol=1e-4, atol=1e-5)
