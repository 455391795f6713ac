"""The text translation engines (``mt``): the request contract, the engine choice from settings, the chat
engine against a real OpenAI-compatible server (the scripted stub), and a real CTranslate2 model folder built
from a tiny Marian model made here (random weights: the path and shapes are checked, not the words)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rtc_agent.config import Settings, SettingsError
from rtc_agent.config.validation import validate
from rtc_agent.engines import engine_specs as all_engine_specs
from rtc_agent.engines import mt
from rtc_agent.engines.mt import TextTranslateRequest, TextTranslation
from rtc_agent.engines.mt.chat import clean_reply, translation_messages
from rtc_agent.engines.mt.ctranslate2_engine import read_layout
from rtc_agent.errors import AgentError, EngineError, InvalidRequest
from rtc_agent.redact import redact_text, register_settings_secrets
from rtc_agent.worker import Worker
from tests.fakes import ScriptedMT, register
from tests.openai_stub import OpenAIStub, text_reply


def settings(**values: object) -> Settings:
    return dataclasses.replace(Settings(), **values)


# --- the request --------------------------------------------------------------------------------------------


def test_request_checks_itself() -> None:
    request = TextTranslateRequest("Hello", source="EN", target="Es", context=[("a", "b")])  # type: ignore[arg-type]
    assert (request.source, request.target, request.context) == ("en", "es", (("a", "b"),))
    for bad in ({"text": "  "}, {"text": 3}, {"target": "auto"}, {"target": "xx"}, {"source": "klingon"},
                {"context": (("only one",),)}):
        fields = {"text": "Hello", "source": "en", "target": "es", **bad}
        with pytest.raises(InvalidRequest) as err:
            TextTranslateRequest(**fields)  # type: ignore[arg-type]
        assert err.value.status == 400


async def test_worker_call_and_engine_errors() -> None:
    worker = Worker()
    engine = register(worker, mt.ENGINE_NAME, ScriptedMT(RuntimeError("boom"), targets={"es", "fr"}, max_chars=20))
    try:
        with pytest.raises(EngineError):  # a scripted failure fails that request only
            await worker.call("mt", TextTranslateRequest("one", "en", "es"))
        result = await worker.call("mt", TextTranslateRequest("two", "en", "fr"))
        assert result == TextTranslation("[fr] two", "scripted")
        same = await worker.call("mt", TextTranslateRequest("tres", "es", "es"))
        assert same.text == "tres" and len(engine.requests) == 2  # same language: no model call
        for request, code in ((TextTranslateRequest("x" * 21, "en", "es"), "text_too_long"),
                              (TextTranslateRequest("hi", "en", "de"), "unsupported_language")):
            with pytest.raises(AgentError) as err:
                await worker.call("mt", request)
            assert (err.value.code, err.value.status) == (code, 400)
        assert [r.text for r in engine.requests] == ["one", "two"]
    finally:
        await worker.close()


# --- settings -----------------------------------------------------------------------------------------------


def test_engine_choice_and_targets(tmp_path: Path) -> None:
    assert mt.engine_kind(Settings()) == "embedded"
    assert mt.describe(Settings()).startswith("embedded:")
    assert mt.engine_kind(settings(mt_url="http://h:1/v1")) == "openai"
    assert mt.engine_kind(settings(mt_url="http://h:1/v1", mt_model_dir=str(tmp_path))) == "ctranslate2"
    off = settings(mt_engine="none")
    assert mt.engine_specs(off) == [] and mt.translation_targets(off) == {} and mt.describe(off) == "none"
    assert "mt" in [s.name for s in all_engine_specs(Settings())]
    targets = mt.translation_targets(Settings())
    assert {"es", "fr", "de", "ja"} <= set(targets)
    for entry in targets.values():
        assert entry["quality"] in ("good", "fair", "rough", "unmeasured")
        assert entry["chrf"] is None or 0 <= entry["chrf"] <= 100
    remote = mt.translation_targets(settings(mt_engine="openai", mt_url="http://h:1/v1", mt_model="m"))
    assert remote["de"] == {"engine": "openai:m", "quality": "unmeasured", "chrf": None}
    with pytest.raises(SettingsError, match="mt_url"):
        mt.engine_specs(settings(mt_engine="openai"))
    with pytest.raises(SettingsError, match="mt_url"):
        mt.engine_specs(settings(mt_engine="openai", mt_url="ftp://h/v1"))
    with pytest.raises(SettingsError, match="mt_model_dir"):
        mt.engine_specs(settings(mt_engine="ctranslate2", mt_model_dir=str(tmp_path)))  # no model.bin
    with pytest.raises(SettingsError):
        mt.engine_kind(settings(mt_engine="babelfish"))
    for bad in ({"mt_engine": "babelfish"}, {"mt_max_chars": 0}, {"mt_timeout_s": 0.0}, {"mt_beam": 40}):
        with pytest.raises(SettingsError):
            validate(settings(**bad))
    validate(settings(mt_engine="ctranslate2", mt_beam=4))


def test_api_key_is_a_secret() -> None:
    key = "mt-secret-key-0123456789"
    register_settings_secrets(settings(mt_api_key=key))
    assert key not in redact_text(f"calling with {key}")
    assert settings(mt_api_key=key).public()["mt_api_key"] == "***"


# --- the chat prompt ----------------------------------------------------------------------------------------


def test_prompt_and_reply_cleaning() -> None:
    request = TextTranslateRequest("See you.", "en", "it", context=tuple((f"s{i}", f"t{i}") for i in range(6)))
    messages = translation_messages(request)
    assert "English" in messages[0]["content"] and "Italian" in messages[0]["content"]
    assert [m["content"] for m in messages[1:3]] == ["s2", "t2"] and messages[-1]["content"] == "See you."
    assert "the language it is written in" in translation_messages(
        TextTranslateRequest("x", "auto", "de"))[0]["content"]
    assert clean_reply('Translation: "Ci vediamo."\nNote: informal.', "See you.") == "Ci vediamo."
    assert clean_reply("«Ciao»", "Hi") == "Ciao"
    assert clean_reply("uno\ndue\ntre", "one\ntwo") == "uno\ndue"


async def test_openai_engine_through_the_stub() -> None:
    async with OpenAIStub() as stub:
        stub.push(text_reply("Buenos días."), text_reply("Bonjour à tous."))
        conf = settings(mt_engine="openai", mt_url=stub.url, mt_model="stub-model", mt_api_key="k" * 20)
        worker = Worker()
        for spec in mt.engine_specs(conf):
            worker.add(spec)
        try:
            first = await worker.call("mt", TextTranslateRequest("Good morning.", "en", "es"))
            second = await worker.call("mt", TextTranslateRequest("Hello everyone.", "en", "fr",
                                                                   context=(("Good morning.", "Bonjour."),)))
        finally:
            await worker.close()
    assert (first.text, first.engine) == ("Buenos días.", "openai:stub-model")
    assert second.text == "Bonjour à tous."
    bodies = [r.body for r in stub.requests]  # chat completions only: /v1/models is not recorded
    assert [b["model"] for b in bodies] == ["stub-model", "stub-model"]
    assert bodies[1]["messages"][-1]["content"] == "Hello everyone." and len(bodies[1]["messages"]) == 4
    assert bodies[0]["temperature"] == 0.0
    assert all(r.headers.get("Authorization") == "Bearer " + "k" * 20 for r in stub.requests)


# --- a real CTranslate2 model folder ------------------------------------------------------------------------


def _tiny_marian(folder: Path, *, multi: bool) -> Path:
    """A random-weight Marian model (d_model 16, one layer) with a SentencePiece model trained here, converted
    with CTranslate2's converter; ``multi`` adds ``>>spa<<``/``>>fra<<`` target tokens."""
    import sentencepiece
    import torch
    from ctranslate2.converters import TransformersConverter
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(["hello world", "good morning", "please leave a message", "thank you very much",
                                 "hola mundo", "buenos dias", "por favor deje su mensaje", "bonjour"] * 20) + "\n")
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "sp"), vocab_size=40, character_coverage=1.0,
        model_type="unigram", bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1, minloglevel=2)
    hf = folder / "hf"
    hf.mkdir()
    for name in ("source.spm", "target.spm"):
        (hf / name).write_bytes((folder / "sp.model").read_bytes())
    sp = sentencepiece.SentencePieceProcessor(model_file=str(folder / "sp.model"))
    vocab = {"</s>": 0, "<unk>": 1, **({">>spa<<": 2, ">>fra<<": 3} if multi else {})}
    for piece in (sp.id_to_piece(i) for i in range(sp.get_piece_size())):
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)  # last, as in OPUS-MT models: the converter drops it
    (hf / "vocab.json").write_text(json.dumps(vocab))
    MarianTokenizer(str(hf / "source.spm"), str(hf / "target.spm"), str(hf / "vocab.json"), source_lang="en",
                    target_lang="mul" if multi else "es").save_pretrained(hf)
    torch.manual_seed(0)
    config = MarianConfig(vocab_size=len(vocab), d_model=16, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                          decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=vocab["<pad>"],
                          eos_token_id=0, decoder_start_token_id=vocab["<pad>"])
    MarianMTModel(config).save_pretrained(hf)
    out = folder / ("tiny-en-mul" if multi else "tiny-en-es")
    copied = ["source.spm", "target.spm", "vocab.json", "tokenizer_config.json"]
    TransformersConverter(str(hf), copy_files=copied).convert(str(out), force=True)
    return out


@pytest.mark.parametrize("multi", [False, True])
async def test_ctranslate2_tiny_marian(tmp_path: Path, multi: bool) -> None:
    model_dir = _tiny_marian(tmp_path, multi=multi)
    layout = read_layout(model_dir)
    assert layout.family == ("marian-multi" if multi else "marian")
    assert set(layout.targets) == ({"es", "fr"} if multi else {"es"})
    assert layout.sources == {"en", "auto"}
    conf = settings(mt_model_dir=str(model_dir), mt_beam=2)
    assert mt.describe(conf) == f"ctranslate2:{model_dir.name}"
    assert set(mt.translation_targets(conf)) == set(layout.targets)
    worker = Worker()
    for spec in mt.engine_specs(conf):
        worker.add(spec)
    try:
        texts = ["hello world", "please leave a message", "good morning"]
        results = [await worker.call("mt", TextTranslateRequest(t, "auto", "es")) for t in texts]
        for result in results:
            assert isinstance(result.text, str) and result.engine == f"ctranslate2:{model_dir.name}"
            assert ">>" not in result.text and "</s>" not in result.text
        engine = await worker.load("mt")
        tokens = engine.source_tokens(TextTranslateRequest("hello world", "en", "es"))  # type: ignore[attr-defined]
        assert tokens[-1] == "</s>" and (tokens[0] == ">>spa<<") == multi
        with pytest.raises(AgentError) as err:
            await worker.call("mt", TextTranslateRequest("hello", "en", "de"))
        assert err.value.code == "unsupported_language"
        with pytest.raises(AgentError) as err:
            await worker.call("mt", TextTranslateRequest("hola", "fr", "es"))
        assert err.value.code == "unsupported_language"
    finally:
        await worker.close()
    # the same folder through the transformers tokenizer gives the same source tokens
    from rtc_agent.engines.mt import CTranslate2TranslationEngine

    hf_engine = CTranslate2TranslationEngine(model_dir, tokenizer="transformers")
    hf_engine.load(lambda _: None)
    hf_tokens = hf_engine.source_tokens(TextTranslateRequest("hello world", "en", "es"))
    assert hf_tokens == tokens
    assert isinstance(hf_engine.run_batch([TextTranslateRequest("hello world", "en", "es")])[0], TextTranslation)
